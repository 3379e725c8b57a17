"""A ring all-reduce written by hand with put_signal and signal_wait_until.

    pgasrun -np 4 python examples/ring_allreduce.py

Each PE's vector is cut into one chunk per PE. In n-1 reduce-scatter steps every PE
sends a chunk to its right neighbour and adds the chunk arriving from its left; after
them PE i holds the full sum of chunk i+1. In n-1 all-gather steps the finished chunks
travel round the ring. Every step's chunk lands in its own inbox slot and adds one to
the receiver's signal, so a receiver waits for "signal >= step + 1" and then reads the
slot: put_signal guarantees the data is there once the signal is seen. All threads of
the block share each copy (put_signal_block) and each addition.
"""
import numpy as np

import pgas                      # first: it picks the backend before numba.cuda loads
import pgas.device as dev
from numba import cuda

CHUNK = 1000                     # elements per chunk; the vector has one chunk per PE
THREADS = 32


@cuda.jit
def ring_allreduce(data, inbox, signal, chunk):
    me, npes = dev.my_pe(), dev.n_pes()
    right = (me + 1) % npes
    t, nthreads = cuda.threadIdx.x, cuda.blockDim.x
    for step in range(2 * (npes - 1)):
        gathering = step >= npes - 1            # reduce-scatter first, then all-gather
        k = step - (npes - 1) if gathering else step
        send = (me + 1 - k) % npes if gathering else (me - k) % npes
        receive = (me - k) % npes if gathering else (me - k - 1) % npes
        slot = inbox[step * chunk:(step + 1) * chunk]
        dev.put_signal_block(slot, data[send * chunk:(send + 1) * chunk], signal, 1, dev.SIGNAL_ADD, right)
        if t == 0:
            dev.signal_wait_until(signal, dev.CMP_GE, step + 1)
        cuda.syncthreads()
        for i in range(t, chunk, nthreads):
            if gathering:
                data[receive * chunk + i] = slot[i]
            else:
                data[receive * chunk + i] += slot[i]
        cuda.syncthreads()


def contribution(pe: int, size: int) -> np.ndarray:
    """PE ``pe``'s input vector (exact in float64, so the sum can be compared exactly)."""
    return (np.arange(size) % 97 + pe * 1000).astype(np.float64)


def main():
    pgas.init()
    me, npes = pgas.my_pe(), pgas.n_pes()
    size = CHUNK * npes
    data = pgas.empty(size, np.float64)
    data.copy_to_device(contribution(me, size))
    inbox = pgas.zeros(max(1, 2 * (npes - 1)) * CHUNK, np.float64)
    signal = pgas.zeros(1, np.uint64)
    ring_allreduce[1, THREADS](data, inbox, signal, CHUNK)
    expected = sum(contribution(pe, size) for pe in range(npes))
    result = data.copy_to_host()
    assert np.array_equal(result, expected), f"PE {me}: the all-reduce differs from numpy"
    pgas.barrier_all()
    if me == 0:
        print(f"PE 0: ring all-reduce of {size} float64 over {npes} PEs matches numpy on every PE")
    for array in (signal, inbox, data):
        pgas.free(array)
    pgas.finalize()


if __name__ == "__main__":
    main()
