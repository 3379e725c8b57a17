"""put_nbi's source changed before the quiet that completes the put."""
import numpy as np

import pgas
import pgas.device as dev
from numba import cuda


@cuda.jit
def kernel(dest, src):
    peer = (dev.my_pe() + 1) % dev.n_pes()
    dev.put_nbi(dest, src, peer)    # RACE-A
    src[0] = 99                     # RACE-B
    dev.quiet()


pgas.init()
dest = pgas.zeros(4, np.int64)
src = pgas.full(4, 1, np.int64)
pgas.barrier_all()
kernel[1, 1](dest, src)
pgas.barrier_all()
pgas.free(src)
pgas.free(dest)
pgas.finalize()
