"""get_nbi's destination read before the quiet that completes the get."""
import numpy as np

import pgas
import pgas.device as dev
from numba import cuda


@cuda.jit
def kernel(dest, src, out):
    peer = (dev.my_pe() + 1) % dev.n_pes()
    dev.get_nbi(dest, src, peer)    # RACE-A
    out[0] = dest[0]                # RACE-B
    dev.quiet()


pgas.init()
dest = pgas.zeros(4, np.int64)
src = pgas.full(4, 5, np.int64)
out = np.zeros(1, np.int64)
pgas.barrier_all()
kernel[1, 1](dest, src, out)
pgas.barrier_all()
pgas.free(src)
pgas.free(dest)
pgas.finalize()
