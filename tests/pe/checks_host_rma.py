"""Host put/get: exact elements for every size and dtype, to and from every neighbour."""
import numpy as np

import pgas
from _util import DTYPES, SIZES, pattern, ring_neighbours


def check_put_every_size_and_dtype():
    me, n, right, left = ring_neighbours()
    for dtype in DTYPES:
        for size in SIZES:
            dest = pgas.zeros(size, dtype)
            pgas.put(dest, pattern(me, size, dtype), right)
            pgas.barrier_all()
            got = dest.copy_to_host()
            assert np.array_equal(got, pattern(left, size, dtype)), (dtype, size)
            pgas.free(dest)


def check_get_every_size_and_dtype():
    me, n, right, left = ring_neighbours()
    for dtype in DTYPES:
        for size in SIZES:
            src = pgas.empty(size, dtype)
            src.copy_to_device(pattern(me, size, dtype))
            pgas.barrier_all()
            out = np.zeros(size, dtype)
            pgas.get(out, src, right)
            assert np.array_equal(out, pattern(right, size, dtype)), (dtype, size)
            pgas.barrier_all()
            pgas.free(src)


def check_put_shorter_src_changes_only_its_elements():
    me, n, right, left = ring_neighbours()
    dest = pgas.full(10, -1, np.int64)
    pgas.put(dest, np.arange(3, dtype=np.int64) + me, right)
    pgas.barrier_all()
    assert dest.copy_to_host().tolist() == [left, left + 1, left + 2] + [-1] * 7
    pgas.free(dest)


def check_put_from_symmetric_src_and_to_a_slice():
    me, n, right, left = ring_neighbours()
    src = pgas.full(4, me, np.float32)
    dest = pgas.zeros(8, np.float32)
    pgas.put(dest[4:], src, right)
    pgas.barrier_all()
    assert dest.copy_to_host().tolist() == [0] * 4 + [left] * 4
    pgas.free(dest)
    pgas.free(src)


def check_every_pe_puts_to_every_pe():
    me, n = pgas.my_pe(), pgas.n_pes()
    slots = pgas.full(n, -1, np.int64)
    for pe in range(n):
        pgas.put(slots[me:me + 1], np.array([me * 10 + pe], np.int64), pe)
    pgas.barrier_all()
    assert slots.copy_to_host().tolist() == [q * 10 + me for q in range(n)]
    pgas.free(slots)
