"""Device atomics: exact totals under contention across PEs, a spin lock, scripted sequences."""
import numpy as np
import pytest
from numba import cuda

import pgas
import pgas.device as dev
from _util import ring_neighbours, world

INT_DTYPES = [np.int32, np.int64, np.uint32, np.uint64]
FLOAT_DTYPES = [np.float32, np.float64]


@cuda.jit
def fetch_add_kernel(counter, fetched, iterations, target):
    t = cuda.threadIdx.x
    for i in range(iterations):
        fetched[t * iterations + i] = dev.atomic_fetch_add(counter, 1, target)


@cuda.jit
def spin_lock_kernel(lock, shared, iterations):
    for _ in range(iterations):
        while dev.atomic_compare_swap(lock, 0, 1, 0) != 0:
            pass
        value = dev.g(shared, 0)          # a plain read-modify-write, safe only under the lock
        dev.p(shared, value + 1, 0)
        dev.quiet()
        dev.atomic_set(lock, 0, 0)


@cuda.jit
def integer_script_kernel(dest, pe, out):
    dev.atomic_set(dest, 10, pe)
    out[0] = dev.atomic_fetch(dest, pe)            # 10
    out[1] = dev.atomic_fetch_add(dest, 5, pe)     # 10 -> 15
    out[2] = dev.atomic_fetch_inc(dest, pe)        # 15 -> 16
    dev.atomic_inc(dest, pe)                       # 17
    dev.atomic_add(dest, 3, pe)                    # 20
    out[3] = dev.atomic_swap(dest, 100, pe)        # 20 -> 100
    out[4] = dev.atomic_compare_swap(dest, 100, 7, pe)   # hit: 100 -> 7
    out[5] = dev.atomic_compare_swap(dest, 100, 8, pe)   # miss: stays 7
    out[6] = dev.atomic_fetch_and(dest, 3, pe)     # 7 -> 3
    out[7] = dev.atomic_fetch_or(dest, 12, pe)     # 3 -> 15
    out[8] = dev.atomic_fetch_xor(dest, 5, pe)     # 15 -> 10
    dev.atomic_and(dest, 14, pe)                   # 10
    dev.atomic_or(dest, 1, pe)                     # 11
    dev.atomic_xor(dest, 2, pe)                    # 9
    out[9] = dev.atomic_fetch(dest, pe)            # 9


@cuda.jit
def float_script_kernel(dest, pe, out):
    dev.atomic_set(dest, 1.5, pe)
    out[0] = dev.atomic_fetch(dest, pe)                  # 1.5
    out[1] = dev.atomic_swap(dest, -2.25, pe)            # 1.5 -> -2.25
    out[2] = dev.atomic_compare_swap(dest, -2.25, 8.0, pe)   # hit
    out[3] = dev.atomic_compare_swap(dest, -2.25, 9.0, pe)   # miss
    out[4] = dev.atomic_fetch(dest, pe)                  # 8.0


@cuda.jit
def unsigned_wrap_kernel(dest, pe, out):
    dev.atomic_set(dest, 0, pe)
    dev.atomic_add(dest, -1, pe)
    out[0] = dev.atomic_fetch(dest, pe)


@cuda.jit
def float_add_kernel(dest):
    dev.atomic_add(dest, 1.0, 0)


def check_fetch_add_under_contention_is_exact():
    n, threads, iterations = pgas.n_pes(), 64, 100
    counter = pgas.zeros(1, np.int64)
    fetched = np.zeros(threads * iterations, np.int64)
    pgas.barrier_all()
    fetch_add_kernel[1, threads](counter, fetched, iterations, 0)
    pgas.barrier_all()
    total = n * threads * iterations
    if pgas.my_pe() == 0:
        assert counter.copy_to_host()[0] == total
    # every fetch_add of every PE saw a different old value: 0 .. total-1 exactly once
    seen = np.sort(np.concatenate(world().allgather(fetched)))
    assert np.array_equal(seen, np.arange(total))
    pgas.free(counter)


def check_fetch_add_contention_every_integer_dtype():
    n, threads, iterations = pgas.n_pes(), 16, 20
    for dtype in INT_DTYPES:
        counter = pgas.zeros(1, dtype)
        fetched = np.zeros(threads * iterations, dtype)
        pgas.barrier_all()
        fetch_add_kernel[1, threads](counter, fetched, iterations, pgas.n_pes() - 1)
        pgas.barrier_all()
        total = n * threads * iterations
        seen = np.sort(np.concatenate(world().allgather(fetched)).astype(np.int64))
        assert np.array_equal(seen, np.arange(total)), dtype
        if pgas.my_pe() == n - 1:
            assert counter.copy_to_host()[0] == total, dtype
        pgas.free(counter)


def check_compare_swap_spin_lock_protects_a_read_modify_write():
    n, threads, iterations = pgas.n_pes(), 4, 10
    lock = pgas.zeros(1, np.int32)
    shared = pgas.zeros(1, np.int64)
    pgas.barrier_all()
    spin_lock_kernel[1, threads](lock, shared, iterations)
    pgas.barrier_all()
    if pgas.my_pe() == 0:
        assert shared.copy_to_host()[0] == n * threads * iterations
        assert lock.copy_to_host()[0] == 0
    pgas.free(shared)
    pgas.free(lock)


def check_scripted_integer_sequence_every_dtype_to_peer_and_self():
    me, n, right, _ = ring_neighbours()
    for dtype in INT_DTYPES:
        words = pgas.zeros(n, dtype)
        for target in sorted({right, me}):
            out = np.zeros(10, dtype)
            pgas.barrier_all()
            integer_script_kernel[1, 1](words[me:], target, out)
            assert out.tolist() == [10, 10, 15, 20, 100, 7, 7, 3, 15, 9], (dtype, target)
            pgas.barrier_all()
        left = (me - 1) % n
        assert words.copy_to_host()[left] == 9, dtype   # what my left neighbour left in its slot
        pgas.free(words)


def check_scripted_float_sequence_fetch_set_swap_compare_swap():
    me, n, right, _ = ring_neighbours()
    for dtype in FLOAT_DTYPES:
        words = pgas.zeros(n, dtype)
        out = np.zeros(5, dtype)
        float_script_kernel[1, 1](words[me:], right, out)
        assert out.tolist() == [1.5, 1.5, -2.25, 8.0, 8.0], dtype
        pgas.barrier_all()
        assert words.copy_to_host()[(me - 1) % n] == 8.0
        pgas.free(words)


def check_unsigned_atomics_wrap_like_the_gpu():
    me, n, right, _ = ring_neighbours()
    for dtype, expected in ((np.uint32, 2**32 - 1), (np.uint64, 2**64 - 1), (np.int32, -1)):
        words = pgas.zeros(n, dtype)
        out = np.zeros(1, dtype)
        unsigned_wrap_kernel[1, 1](words[me:], right, out)
        assert int(out[0]) == expected, dtype
        pgas.free(words)


def check_atomic_errors_name_function_argument_and_dtypes():
    a = pgas.zeros(1, np.float32)
    with pytest.raises(pgas.PgasError, match=r"pgas.device.atomic_add: dest must have one of the dtypes "
                                             r"int32, uint32, int64, uint64, got float32 \[on PE \d\]"):
        float_add_kernel[1, 1](a)
    pgas.free(a)
