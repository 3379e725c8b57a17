"""PE 1 stores into its own x while PE 0's put into it may be arriving."""
import numpy as np

import pgas
import pgas.device as dev
from numba import cuda


@cuda.jit
def kernel(x, src):
    if dev.my_pe() == 0:
        dev.put(x, src, 1)          # RACE-A
        dev.quiet()
    else:
        x[2] = 5                    # RACE-B


pgas.init()
x = pgas.zeros(4, np.int64)
src = pgas.full(4, 8, np.int64)
pgas.barrier_all()
kernel[1, 1](x, src)
pgas.barrier_all()
pgas.free(src)
pgas.free(x)
pgas.finalize()
