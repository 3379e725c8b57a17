"""A kernel's put_nbi that nothing completes: no quiet in the kernel, no quiet or barrier
after it before finalize."""
import numpy as np

import pgas
import pgas.device as dev
from numba import cuda


@cuda.jit
def kernel(dest, src):
    dev.put_nbi(dest, src, (dev.my_pe() + 1) % dev.n_pes())    # INCOMPLETE


pgas.init()
dest = pgas.zeros(4, np.int64)
src = pgas.full(4, 2, np.int64)
pgas.barrier_all()
kernel[1, 1](dest, src)
pgas.finalize()
