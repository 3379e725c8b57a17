"""PE 0 adds to PE 1's counter atomically while PE 1 resets it with a plain store."""
import numpy as np

import pgas
import pgas.device as dev
from numba import cuda


@cuda.jit
def kernel(counter):
    if dev.my_pe() == 0:
        dev.atomic_add(counter, 1, 1)     # RACE-A
        dev.quiet()
    else:
        counter[0] = 0                    # RACE-B


pgas.init()
counter = pgas.zeros(1, np.int64)
pgas.barrier_all()
kernel[1, 1](counter)
pgas.barrier_all()
pgas.free(counter)
pgas.finalize()
