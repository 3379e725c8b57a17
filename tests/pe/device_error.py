"""One failed device check, in a kernel, on PE 0 (the others wait in a barrier): on the
simulator the kernel raises; on a GPU it records the error in the PE's mailbox and traps,
and the host raises the record. Either way pgasrun must report the same text.

    pgasrun -np 2 python tests/pe/device_error.py put_pe|barrier_team|wait_timeout|put_size
"""
import sys
import time

import numpy as np
from numba import cuda

import pgas
import pgas.device as dev


@cuda.jit
def put_to(dest, src, pe):
    dev.put(dest, src, pe)


@cuda.jit
def barrier_on(team):
    dev.barrier(team)


@cuda.jit
def wait_for(ivar):
    dev.wait_until(ivar, dev.CMP_EQ, 12345)


def main(case: str) -> None:
    pgas.init()
    a = pgas.zeros(4, np.int32)
    nine = pgas.zeros(9, np.int32)      # collective: every PE allocates it
    ivar = pgas.zeros(1, np.int64)
    if pgas.my_pe() == 0:
        if case == "put_pe":
            put_to[1, 1](a, a, pgas.n_pes() + 3)
        elif case == "put_size":
            put_to[1, 1](a, nine, 1)
        elif case == "barrier_team":
            barrier_on[1, 1](7)
        elif case == "wait_timeout":
            wait_for[1, 1](ivar)
        cuda.synchronize()      # on a GPU the kernel's trap surfaces here
        raise SystemExit(f"the {case} kernel did not fail")
    # PE 0's failure ends the run (pgasrun stops this PE): a barrier with the same PGAS_TIMEOUT
    # could time out first, while PE 0 still compiles its kernel (seen on a GPU)
    time.sleep(60)
    pgas.barrier_all()
    pgas.finalize()


if __name__ == "__main__":
    main(sys.argv[1])
