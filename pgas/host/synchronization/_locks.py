"""OpenSHMEM locks from the host: ``set_lock``, ``clear_lock``, ``test_lock``.

The same MCS queue lock as the device's (``pgas/device/_locks.py`` describes the algorithm
and the layout of the lock word), run with the host atomics (``Transports`` on the
simulator backend, one-thread kernels of the device atomics on cuda), so host and device
callers of one lock exclude each other and queue in one FIFO. Waits poll this PE's own
copy of the word, backing off (``pgas/core/_waiting.py``), and fail after PGAS_TIMEOUT
naming what they waited for.

As in OpenSHMEM, one PE must not have two callers of the same lock at once (two host
threads, or the host and a kernel).
"""
from __future__ import annotations

import numpy as np

from ...core.native import _cpu_atomics
from ...core._device_errors import LOCK_DTYPE, device_error
from ...core._errors import PgasValueError
from ...core._waiting import Wait
from ...runtime._state import runtime
from ..memory._memory import element0

__all__ = ["set_lock", "clear_lock", "test_lock"]

# The lock word's layout: the same as pgas/device/_locks.py (checked by tests/pe/checks_locks.py).
HOME = 0
TAIL = (1 << 20) - 1
HELD = 1 << 20
NEXT_SHIFT = 21
NEXT = TAIL << NEXT_SHIFT
GRANTED = 1 << 62
_BACKOFF_S = 5e-4   # the longest sleep between two looks at the own word


class _LockWord:
    """Element 0 of a checked lock, and the atomics on any PE's copy of it, each complete
    on return."""

    def __init__(self, fn: str, lock):
        self.fn = fn
        self.rt = rt = runtime(fn)
        word = element0(fn, lock, "lock")
        if word.dtype != np.int64:
            raise PgasValueError(f"{fn}: {LOCK_DTYPE.format(dtype=word.dtype)}")
        rt.symmetric_offset(word, fn, "lock")
        self.word = word
        self.me = rt.my_pe
        if rt.on_gpu:
            from .. import _gpu_ops
            self._gpu = _gpu_ops

    def compare_swap(self, pe: int, cond: int, value: int) -> int:
        cond, value = np.int64(cond), np.int64(value)
        if self.rt.on_gpu:
            return int(self._gpu.atomic("atomic_compare_swap", 2, True, self.word, cond, value, pe, None, self.fn))
        return int(self.rt.transports.compare_swap(self.fn, pe, self.word, cond, value, "lock"))

    def fetch_op(self, pe: int, op: str, value: int) -> int:
        """``op``: "and", "or" or "xor"; the old value."""
        value = np.int64(value)
        if self.rt.on_gpu:
            return int(self._gpu.atomic(f"atomic_fetch_{op}", 1, True, self.word, np.int64(0), value, pe, None,
                                        self.fn))
        return int(self.rt.transports.rmw(self.fn, pe, self.word, op, value, "lock", fetch=True))

    def own(self) -> int:
        """This PE's copy, read with acquire ordering."""
        if self.rt.on_gpu:
            return int(self._gpu.signal_fetch(self.word, self.fn))
        return int(_cpu_atomics.load_acquire(self.word, self.fn, "lock"))

    def wait_own_at_least(self, value: int, what: str, waits_for=None) -> int:
        """Wait until this PE's copy is ``>= value``; the value seen."""
        clock = Wait(self.fn, self.rt.timeout, backoff_s=_BACKOFF_S, waits_for=waits_for)
        while True:
            seen = self.own()
            if seen >= value:
                return seen
            clock.pause(lambda: f"{what} (lock word on PE {self.me}: {seen:#x})")

    def fence(self) -> None:
        if not self.rt.on_gpu:
            _cpu_atomics.fence()

    def quiet(self) -> None:
        if self.rt.on_gpu:
            self._gpu.quiet(None, self.fn)
        else:
            self.rt.transports.quiet(self.fn)
            _cpu_atomics.fence()


def set_lock(lock) -> None:
    """set_lock(lock)

    Wait until this PE holds ``lock``. PEs waiting for a lock get it in the order they
    asked (a queue lock), host and device callers alike.

    Parameters
    ----------
    lock : symmetric array
        int64, C-contiguous (``pgas.zeros(1, np.int64)``): its element 0 is the lock, zero
        before first use. The same lock from the device: ``pgas.device.set_lock``.

    Raises
    ------
    PgasValueError
        ``lock`` is not a symmetric int64 array, or this PE already holds it.
    PgasTimeoutError
        The lock did not come within PGAS_TIMEOUT seconds.
    """
    word = _LockWord("pgas.set_lock", lock)
    me = word.me
    if word.own() & HELD:
        raise device_error("LOCK_HELD", word.fn)
    seen = 0                       # a guess of PE 0's word: the lock free, PE 0 not queued
    while True:                    # become the tail, keeping PE 0's own record
        old = word.compare_swap(HOME, seen, (seen & ~TAIL) | (me + 1))
        if old == seen:
            break
        seen = old
    ahead = seen & TAIL
    if ahead == 0:
        word.fetch_op(me, "or", HELD)
    else:
        word.fetch_op(ahead - 1, "or", (me + 1) << NEXT_SHIFT)
        word.wait_own_at_least(GRANTED, f"the lock, to be granted by PE {ahead - 1} (ahead in its queue)",
                               lambda: [ahead - 1])
        word.fetch_op(me, "xor", GRANTED | HELD)
    word.fence()


def clear_lock(lock) -> None:
    """clear_lock(lock)

    Release ``lock``, which this PE holds: first ``quiet`` (the puts and other operations
    made while holding it are complete and visible to the next holder), then hand it to
    the PE that has waited longest, if any.

    Parameters
    ----------
    lock : symmetric array
        As for ``set_lock``.

    Raises
    ------
    PgasValueError
        ``lock`` is not a symmetric int64 array, or this PE does not hold it.
    """
    word = _LockWord("pgas.clear_lock", lock)
    me = word.me
    word.quiet()
    mine = word.fetch_op(me, "and", ~HELD)
    if not mine & HELD:
        raise device_error("LOCK_NOT_HELD", word.fn)
    after = (mine >> NEXT_SHIFT) & TAIL
    if after == 0:
        seen = me + 1              # a guess of PE 0's word: this PE the tail, PE 0 not queued
        while True:
            old = word.compare_swap(HOME, seen, seen & ~TAIL)
            if old == seen:
                return             # nobody queued: the lock is free
            if old & TAIL != me + 1:
                break              # a PE queued behind this one: it is about to say so in NEXT
            seen = old
        mine = word.wait_own_at_least(1 << NEXT_SHIFT, "the PE queued behind this one to name itself")
        after = (mine >> NEXT_SHIFT) & TAIL
    word.fetch_op(me, "and", ~NEXT)
    word.fetch_op(after - 1, "or", GRANTED)


def test_lock(lock) -> int:
    """test_lock(lock) -> 0 or 1

    Take ``lock`` if it is free, without waiting.

    Parameters
    ----------
    lock : symmetric array
        As for ``set_lock``.

    Returns
    -------
    int
        0 if the lock was free and this PE now holds it (release it with ``clear_lock``);
        1 if another PE holds it or waits for it (nothing changed).
    """
    word = _LockWord("pgas.test_lock", lock)
    me = word.me
    seen = 0
    while True:
        if seen & TAIL:
            return 1
        old = word.compare_swap(HOME, seen, seen | (me + 1))
        if old == seen:
            break
        seen = old
    word.fetch_op(me, "or", HELD)
    word.fence()
    return 0
