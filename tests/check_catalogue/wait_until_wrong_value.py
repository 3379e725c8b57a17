"""The sender raises the flag to 1 (started) and to 2 once the data is there; the
receiver waits for >= 1 and reads the data: it waited for the wrong value."""
import time

import numpy as np

import pgas
import pgas.device as dev
from numba import cuda


@cuda.jit
def started(flag):
    dev.p(flag, 1, 1)
    dev.quiet()


@cuda.jit
def send(data, flag, src):
    dev.put(data, src, 1)           # RACE-A
    dev.fence()
    dev.p(flag, 2, 1)


@cuda.jit
def receive(data, flag, out):
    dev.wait_until(flag, dev.CMP_GE, 1)
    out[0] = data[0]                # RACE-B


pgas.init()
data = pgas.zeros(4, np.int64)
flag = pgas.zeros(1, np.int64)
src = pgas.full(4, 9, np.int64)
out = np.zeros(1, np.int64)
pgas.barrier_all()
if pgas.my_pe() == 0:
    started[1, 1](flag)
    time.sleep(0.5)                 # the receiver sees 1 long before 2
    send[1, 1](data, flag, src)
elif pgas.my_pe() == 1:
    receive[1, 1](data, flag, out)
pgas.barrier_all()
for a in (src, flag, data):
    pgas.free(a)
pgas.finalize()
