"""In a kernel, PE 1 reduces half as many elements as the others: no hang, a wrong result."""
import numpy as np

import pgas
import pgas.device as dev
from numba import cuda


@cuda.jit
def kernel(dest, src, count):
    dev.sum_reduce(dev.TEAM_WORLD, dest[:count], src[:count])    # DEVICE-MISMATCH


pgas.init()
dest = pgas.zeros(8, np.float64)
src = pgas.full(8, 1.0, np.float64)
kernel[1, 1](dest, src, 4 if pgas.my_pe() == 1 else 8)
pgas.barrier_all()
pgas.free(src)
pgas.free(dest)
pgas.finalize()
