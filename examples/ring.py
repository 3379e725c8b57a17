"""A message travels PE 0 -> 1 -> ... -> n-1 -> 0; each PE adds its number to it.

    pgasrun -np 4 python examples/ring.py

Each hop is a put of the running sum, a fence (the sum lands before the flag), and a p
of the flag; the receiver waits on its flag with wait_until.
"""
import numpy as np

import pgas                      # first: it picks the backend before numba.cuda loads
import pgas.device as dev
from numba import cuda


@cuda.jit
def pass_along(message, arrived, outgoing):
    me = dev.my_pe()
    npes = dev.n_pes()
    following = (me + 1) % npes
    if me != 0:
        dev.wait_until(arrived, dev.CMP_EQ, 1)
        outgoing[0] = message[0] + me
    dev.put(message, outgoing, following)
    dev.fence()                  # the message is delivered before the flag
    dev.p(arrived, 1, following)
    if me == 0:
        dev.wait_until(arrived, dev.CMP_EQ, 1)


def main():
    pgas.init()
    me, npes = pgas.my_pe(), pgas.n_pes()
    message = pgas.zeros(1, np.int64)
    arrived = pgas.zeros(1, np.int64)
    outgoing = pgas.zeros(1, np.int64)   # PE 0 starts the ring with 0
    pass_along[1, 1](message, arrived, outgoing)
    pgas.barrier_all()
    if me == 0:
        total = int(message.copy_to_host()[0])
        expected = npes * (npes - 1) // 2
        print(f"PE 0: the message came back round {npes} PEs carrying {total} (expected {expected})")
        assert total == expected
    for array in (outgoing, arrived, message):
        pgas.free(array)
    pgas.finalize()


if __name__ == "__main__":
    main()
