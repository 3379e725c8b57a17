"""PEs 0 and 2 both put into PE 1's x with nothing ordering the two puts."""
import numpy as np

import pgas
import pgas.device as dev
from numba import cuda


@cuda.jit
def first(x, src):
    dev.put(x, src, 1)              # RACE-A


@cuda.jit
def second(x, src):
    dev.put(x, src, 1)              # RACE-B


pgas.init()
x = pgas.zeros(4, np.int64)
src = pgas.full(4, pgas.my_pe(), np.int64)
pgas.barrier_all()
if pgas.my_pe() == 0:
    first[1, 1](x, src)
elif pgas.my_pe() == 2:
    second[1, 1](x, src)
pgas.barrier_all()
pgas.free(src)
pgas.free(x)
pgas.finalize()
