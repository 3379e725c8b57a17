"""PEs draw work items from one shared counter with atomic_fetch_add.

    pgasrun -np 4 python examples/atomic_counter.py

The counter lives on PE 0. Every thread of every PE takes the next item number with
``atomic_fetch_add(counter, 1, 0)`` until the items run out, writes its result into PE
0's table, and counts the item as done there with ``atomic_inc`` (and once more in its
PE's tally). PE 0 then checks that every item was done exactly once, that every result
is right, and that the tallies add up.
"""
import numpy as np

import pgas                      # first: it picks the backend before numba.cuda loads
import pgas.device as dev
from numba import cuda

ITEMS = 2000
THREADS = 16


@cuda.jit
def worker(counter, done, results, tally, items):
    me = dev.my_pe()
    while True:
        item = dev.atomic_fetch_add(counter, 1, 0)
        if item >= items:
            break
        dev.p(results[item:], item * item, 0)     # the "work": a square
        dev.atomic_inc(done[item:], 0)
        dev.atomic_inc(tally[me:], 0)


def main():
    pgas.init()
    me, npes = pgas.my_pe(), pgas.n_pes()
    counter = pgas.zeros(1, np.int64)
    done = pgas.zeros(ITEMS, np.int32)
    results = pgas.zeros(ITEMS, np.int64)
    tally = pgas.zeros(npes, np.int64)
    worker[1, THREADS](counter, done, results, tally, ITEMS)
    pgas.barrier_all()
    if me == 0:
        assert np.all(done.copy_to_host() == 1), "an item was done twice or never"
        assert np.array_equal(results.copy_to_host(), np.arange(ITEMS) ** 2)
        per_pe = tally.copy_to_host()
        assert per_pe.sum() == ITEMS
        print(f"PE 0: all {ITEMS} items done exactly once by {npes} PEs "
              f"(items per PE: {', '.join(str(k) for k in per_pe)})")
    for array in (tally, results, done, counter):
        pgas.free(array)
    pgas.finalize()


if __name__ == "__main__":
    main()
