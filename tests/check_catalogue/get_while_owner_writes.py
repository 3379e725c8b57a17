"""PE 0 gets PE 1's x while PE 1 is writing it."""
import numpy as np

import pgas
import pgas.device as dev
from numba import cuda


@cuda.jit
def kernel(x, out):
    if dev.my_pe() == 0:
        dev.get(out, x, 1)          # RACE-A
    else:
        x[0] = 11                   # RACE-B


pgas.init()
x = pgas.zeros(1, np.int64)
out = pgas.zeros(1, np.int64)
pgas.barrier_all()
kernel[1, 1](x, out)
pgas.barrier_all()
pgas.free(out)
pgas.free(x)
pgas.finalize()
