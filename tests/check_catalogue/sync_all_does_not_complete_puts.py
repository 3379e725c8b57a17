"""sync_all orders the PEs but completes no put (barrier_all would): the read may miss the put."""
import numpy as np

import pgas
import pgas.device as dev
from numba import cuda


@cuda.jit
def kernel(x, src, out):
    me, n = dev.my_pe(), dev.n_pes()
    dev.put(x, src, (me + 1) % n)   # RACE-A
    dev.sync_all()
    out[0] = x[0]                   # RACE-B


pgas.init()
x = pgas.zeros(2, np.int64)
src = pgas.full(2, 4, np.int64)
out = np.zeros(1, np.int64)
pgas.barrier_all()
kernel[1, 1](x, src, out)
pgas.barrier_all()
pgas.free(src)
pgas.free(x)
pgas.finalize()
