"""OpenSHMEM locks (set_lock / clear_lock / test_lock), host and device: exact counts of a
plain read-modify-write under contention from every PE (host, kernels, both at once),
test_lock's answers, FIFO hand-off, a wait past PGAS_TIMEOUT, bad arguments."""
import re
import time

import numpy as np
import pytest
from numba import cuda

import pgas
import pgas.device as dev
from _util import world
from pgas.device import _locks as device_layout
from pgas.host.synchronization import _locks as host_layout
from pgas.runtime._state import runtime

TAIL = host_layout.TAIL


@cuda.jit
def locked_count_kernel(lock, counter, rounds, window, together):
    if together:
        dev.sync_all()                 # every PE's kernel contends from the start
    for _ in range(rounds):
        dev.set_lock(lock)
        value = dev.g(counter, 0)      # a plain read-modify-write of PE 0's counter: safe only under the lock
        for _ in range(window):        # (a wider window for a second writer, were the lock broken)
            dev.g(counter, 0)
        dev.p(counter, value + 1, 0)
        dev.clear_lock(lock)           # quiet first: the p is complete before the next holder reads


@cuda.jit
def test_lock_kernel(lock, out):
    out[0] = dev.test_lock(lock)


@cuda.jit
def clear_lock_kernel(lock):
    dev.clear_lock(lock)


@cuda.jit
def set_lock_kernel(lock):
    dev.set_lock(lock)


@cuda.jit
def log_twice_kernel(lock, log, count, me):
    """Take the lock twice; each time append ``me`` to PE 0's ``log``."""
    for _ in range(2):
        dev.set_lock(lock)
        at = dev.g(count, 0)
        dev.p(log[at:], me, 0)
        dev.p(count, at + 1, 0)
        dev.clear_lock(lock)


def _count_on_host(lock, counter, rounds):
    value = np.zeros(1, np.int64)
    for _ in range(rounds):
        pgas.set_lock(lock)
        pgas.get(value, counter, 0)
        time.sleep(0.0002)             # widen the window a second writer would need
        pgas.put(counter, value + 1, 0)
        pgas.clear_lock(lock)


def _all_words_zero(lock):
    """Every PE's copy of the lock is back to 0 (free, no queue record left)."""
    pgas.barrier_all()
    assert world().allgather(int(lock.copy_to_host()[0])) == [0] * pgas.n_pes()


def check_host_and_device_share_the_lock_word_layout():
    for name in ("HOME", "TAIL", "HELD", "NEXT_SHIFT", "NEXT", "GRANTED"):
        assert getattr(host_layout, name) == getattr(device_layout, name), name
    fields = [device_layout.TAIL, device_layout.HELD, device_layout.NEXT, device_layout.GRANTED]
    assert all(a & b == 0 for i, a in enumerate(fields) for b in fields[i + 1:])   # disjoint
    assert device_layout.GRANTED > device_layout.NEXT | device_layout.HELD | device_layout.TAIL


def check_host_lock_makes_a_plain_read_modify_write_exact():
    n, rounds = pgas.n_pes(), 12
    lock, counter = pgas.zeros(1, np.int64), pgas.zeros(1, np.int64)
    pgas.barrier_all()
    _count_on_host(lock, counter, rounds)
    pgas.barrier_all()
    if pgas.my_pe() == 0:
        assert counter.copy_to_host()[0] == n * rounds
    _all_words_zero(lock)
    pgas.free(counter)
    pgas.free(lock)


def check_device_lock_makes_a_plain_read_modify_write_exact():
    n, rounds = pgas.n_pes(), 12
    lock, counter = pgas.zeros(1, np.int64), pgas.zeros(1, np.int64)
    pgas.barrier_all()
    locked_count_kernel[1, 1](lock, counter, rounds, 10, True)
    cuda.synchronize()
    pgas.barrier_all()
    if pgas.my_pe() == 0:
        assert counter.copy_to_host()[0] == n * rounds
    _all_words_zero(lock)
    pgas.free(counter)
    pgas.free(lock)


def check_host_and_device_callers_exclude_each_other():
    """Even PEs count from the host, odd PEs from a kernel, on one lock at once; on one PE
    the host and then a kernel."""
    me, n = pgas.my_pe(), pgas.n_pes()
    host_rounds, device_rounds = 10, 5
    lock, counter = pgas.zeros(1, np.int64), pgas.zeros(1, np.int64)
    pgas.barrier_all()
    if me % 2 == 0:
        _count_on_host(lock, counter, host_rounds)
    if me % 2 == 1 or n == 1:
        locked_count_kernel[1, 1](lock, counter, device_rounds, 10, False)
        cuda.synchronize()
    pgas.barrier_all()
    if me == 0:
        on_host = (n + 1) // 2
        on_device = n // 2 if n > 1 else 1
        assert counter.copy_to_host()[0] == on_host * host_rounds + on_device * device_rounds
    _all_words_zero(lock)
    pgas.free(counter)
    pgas.free(lock)


def check_test_lock_takes_only_a_free_lock_host_and_device():
    me, n = pgas.my_pe(), pgas.n_pes()
    last = n - 1
    lock = pgas.zeros(1, np.int64)
    out = np.full(1, -1, np.int64)
    pgas.barrier_all()
    if me == 0:
        assert pgas.test_lock(lock) == 0          # free: taken
        assert pgas.test_lock(lock) == 1          # held (by this PE): nothing changes
    pgas.barrier_all()
    if me != 0:
        assert pgas.test_lock(lock) == 1          # held by PE 0
        test_lock_kernel[1, 1](lock, out)
        assert out[0] == 1
    pgas.barrier_all()
    if me == 0:
        pgas.clear_lock(lock)
    pgas.barrier_all()
    if me == last:                                # from a kernel this time
        test_lock_kernel[1, 1](lock, out)
        assert out[0] == 0
    pgas.barrier_all()
    if me != last:
        assert pgas.test_lock(lock) == 1
    pgas.barrier_all()
    if me == last:
        clear_lock_kernel[1, 1](lock)
        cuda.synchronize()
        assert pgas.test_lock(lock) == 0          # free again, and a host call takes it
        pgas.clear_lock(lock)
    _all_words_zero(lock)
    pgas.free(lock)


def _wait_for_tail(lock, value):
    """Poll PE 0's copy until its queue's tail is ``value`` (the PE last queued, plus one)."""
    deadline = time.monotonic() + 20
    while pgas.atomic_fetch(lock, 0) & TAIL != value:
        assert time.monotonic() < deadline, f"the lock's tail never became {value}"
        time.sleep(0.001)


def check_waiters_get_the_lock_in_arrival_order():
    """PE 0 holds the lock while PEs 1, 2, ... queue one after another (each waits until
    the PE before it is queued); then every PE takes the lock twice, appending itself to a
    log on PE 0 each time. The first n entries must be 0, 1, ..., n-1: every PE got the
    lock once, in arrival order, before any got it again. Odd PEs queue from a kernel."""
    me, n = pgas.my_pe(), pgas.n_pes()
    lock, log, count = pgas.zeros(1, np.int64), pgas.full(2 * n, -1, np.int64), pgas.zeros(1, np.int64)
    pgas.barrier_all()
    if me == 0:
        pgas.set_lock(lock)
    pgas.barrier_all()
    if me == 0:
        _wait_for_tail(lock, n)                   # everyone queued behind PE 0
        first = True
    else:
        _wait_for_tail(lock, me)                  # PE me-1 is queued: queue next
        first = False
    if me % 2 == 1:
        log_twice_kernel[1, 1](lock, log, count, me)
        cuda.synchronize()
    else:
        at = np.zeros(1, np.int64)
        for _ in range(2):
            if not first:
                pgas.set_lock(lock)
            first = False
            pgas.get(at, count, 0)
            pgas.put(log[int(at[0]):int(at[0]) + 1], np.array([me], np.int64), 0)
            pgas.put(count, at + 1, 0)
            pgas.clear_lock(lock)
    pgas.barrier_all()
    if me == 0:
        order = log.copy_to_host().tolist()
        assert order[:n] == list(range(n)), order
        assert sorted(order) == sorted(list(range(n)) * 2), order
    _all_words_zero(lock)
    for a in (count, log, lock):
        pgas.free(a)


def check_a_wait_for_the_lock_times_out_naming_the_pe_ahead():
    me, n = pgas.my_pe(), pgas.n_pes()
    if n == 1:
        pytest.skip("needs a second PE to hold the lock")
    lock = pgas.zeros(1, np.int64)
    if me == 0:
        pgas.set_lock(lock)
    pgas.barrier_all()
    if me == 1:
        rt = runtime("test")
        saved, rt.timeout = rt.timeout, 0.3
        try:
            with pytest.raises(pgas.PgasTimeoutError, match=re.escape(
                    "pgas.set_lock: waited PGAS_TIMEOUT=0.3 s for the lock, to be granted by PE 0 "
                    "(ahead in its queue)")):
                pgas.set_lock(lock)
        finally:
            rt.timeout = saved
    pgas.barrier_all()
    if me == 0:
        pgas.clear_lock(lock)                     # hands it to PE 1, which no longer waits: the lock is spent
    pgas.barrier_all()
    pgas.free(lock)


def check_bad_locks_are_refused_naming_lock():
    not_symmetric = np.zeros(1, np.int64)
    narrow, empty = pgas.zeros(1, np.int32), pgas.zeros(0, np.int64)
    lock = pgas.zeros(1, np.int64)
    for call in (pgas.set_lock, pgas.clear_lock, pgas.test_lock):
        fn = f"pgas.{call.__name__}"
        with pytest.raises(pgas.PgasValueError, match=re.escape(f"{fn}: lock")):
            call(not_symmetric)
        with pytest.raises(pgas.PgasValueError, match=re.escape(
                f"{fn}: lock must be a symmetric int64 array (pgas.zeros(1, np.int64)), got int32")):
            call(narrow)
        with pytest.raises(pgas.PgasValueError, match=re.escape(f"{fn}: lock is empty")):
            call(empty)
    with pytest.raises(pgas.PgasValueError, match=re.escape("pgas.clear_lock: this PE does not hold lock")):
        pgas.clear_lock(lock)
    pgas.barrier_all()
    if pgas.my_pe() == 0:
        pgas.set_lock(lock)
        with pytest.raises(pgas.PgasValueError, match=re.escape("pgas.set_lock: this PE already holds lock")):
            pgas.set_lock(lock)
        pgas.clear_lock(lock)
    _all_words_zero(lock)
    for a in (lock, empty, narrow):
        pgas.free(a)


def check_device_bad_locks_are_refused_naming_lock():
    """Misuse the lock word shows is raised on both backends (on a GPU: the mailbox); a
    lock of another dtype or outside the heap, on the simulator (cuda refuses the first
    when the kernel compiles: tests/offline)."""
    narrow, lock = pgas.zeros(1, np.int32), pgas.zeros(1, np.int64)
    if pgas.backend() == "simulator":
        for kernel, fn in ((set_lock_kernel, "set_lock"), (clear_lock_kernel, "clear_lock")):
            with pytest.raises(pgas.PgasValueError, match=re.escape(
                    f"pgas.device.{fn}: lock must be a symmetric int64 array (pgas.zeros(1, np.int64)), got int32")):
                kernel[1, 1](narrow)
            with pytest.raises(pgas.PgasValueError, match=re.escape(f"pgas.device.{fn}: lock")):
                kernel[1, 1](np.zeros(1, np.int64))
    with pytest.raises(pgas.PgasValueError, match=re.escape("pgas.device.clear_lock: this PE does not hold lock")):
        clear_lock_kernel[1, 1](lock)
    _all_words_zero(lock)
    pgas.barrier_all()
    if pgas.my_pe() == 0:
        set_lock_kernel[1, 1](lock)
        with pytest.raises(pgas.PgasValueError, match=re.escape("pgas.device.set_lock: this PE already holds lock")):
            set_lock_kernel[1, 1](lock)
        clear_lock_kernel[1, 1](lock)
    _all_words_zero(lock)
    pgas.free(lock)
    pgas.free(narrow)
