"""PE 0 puts into PE 1's x; PE 1 reads x with nothing ordering the read after the put."""
import numpy as np

import pgas
import pgas.device as dev
from numba import cuda


@cuda.jit
def kernel(x, src, out):
    if dev.my_pe() == 0:
        dev.put(x, src, 1)          # RACE-A
    else:
        out[0] = x[0]               # RACE-B


pgas.init()
x = pgas.zeros(4, np.int64)
src = pgas.full(4, 7, np.int64)
out = np.zeros(1, np.int64)
pgas.barrier_all()
kernel[1, 1](x, src, out)
pgas.barrier_all()
pgas.free(src)
pgas.free(x)
pgas.finalize()
