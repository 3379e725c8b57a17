"""One thread puts twice into the same place of one PE without fence: they may land in either order."""
import numpy as np

import pgas
import pgas.device as dev
from numba import cuda


@cuda.jit
def kernel(x, a, b):
    peer = (dev.my_pe() + 1) % dev.n_pes()
    dev.put(x, a, peer)             # RACE-A
    dev.put(x, b, peer)             # RACE-B
    dev.quiet()


pgas.init()
x = pgas.zeros(2, np.int64)
a = pgas.full(2, 1, np.int64)
b = pgas.full(2, 2, np.int64)
pgas.barrier_all()
kernel[1, 1](x, a, b)
pgas.barrier_all()
for arr in (b, a, x):
    pgas.free(arr)
pgas.finalize()
