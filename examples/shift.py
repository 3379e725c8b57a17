"""NVSHMEM's simple_shift: each PE writes its number into the next PE's symmetric int.

    pgasrun -np 4 python examples/shift.py
"""
import numpy as np

import pgas                      # first: it picks the backend before numba.cuda loads
import pgas.device as dev
from numba import cuda


@cuda.jit
def shift(destination):
    mype = dev.my_pe()
    npes = dev.n_pes()
    peer = (mype + 1) % npes
    dev.p(destination, mype, peer)


def main():
    pgas.init()
    destination = pgas.zeros(1, np.int32)
    shift[1, 1](destination)
    pgas.barrier_all()           # every PE's p is complete and visible
    received = int(destination.copy_to_host()[0])
    print(f"PE {pgas.my_pe()} received {received}")
    assert received == (pgas.my_pe() - 1) % pgas.n_pes()
    pgas.free(destination)
    pgas.finalize()


if __name__ == "__main__":
    main()
