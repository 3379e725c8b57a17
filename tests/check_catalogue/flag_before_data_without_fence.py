"""The ring's hop without its fence: the flag (a p) may land before the data (a put)."""
import numpy as np

import pgas
import pgas.device as dev
from numba import cuda


@cuda.jit
def kernel(data, flag, src, out):
    if dev.my_pe() == 0:
        dev.put(data, src, 1)       # RACE-A
        dev.p(flag, 1, 1)           # no fence between the data and the flag
    elif dev.my_pe() == 1:
        dev.wait_until(flag, dev.CMP_EQ, 1)
        out[0] = data[0]            # RACE-B


pgas.init()
data = pgas.zeros(8, np.int64)
flag = pgas.zeros(1, np.int64)
src = pgas.full(8, 3, np.int64)
out = np.zeros(1, np.int64)
pgas.barrier_all()
kernel[1, 1](data, flag, src, out)
pgas.barrier_all()
for a in (src, flag, data):
    pgas.free(a)
pgas.finalize()
