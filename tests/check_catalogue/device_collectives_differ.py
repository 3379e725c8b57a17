"""In a kernel, PE 0 calls fcollect where the others call alltoall (same sizes)."""
import numpy as np

import pgas
import pgas.device as dev
from numba import cuda


@cuda.jit
def kernel(dest, src):
    if dev.my_pe() == 0:
        dev.fcollect(dev.TEAM_WORLD, dest, src[:1])          # DEVICE-MISMATCH
    else:
        dev.alltoall(dev.TEAM_WORLD, dest, src)              # DEVICE-MISMATCH


pgas.init()
n = pgas.n_pes()
dest = pgas.zeros(n, np.int64)
src = pgas.zeros(n, np.int64)
kernel[1, 1](dest, src)
pgas.barrier_all()
pgas.free(src)
pgas.free(dest)
pgas.finalize()
