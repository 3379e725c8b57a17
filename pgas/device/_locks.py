"""OpenSHMEM locks on the device: ``set_lock``, ``clear_lock``, ``test_lock`` (one thread of a PE).

A lock is element 0 of a symmetric int64 array (``pgas.zeros(1, np.int64)``, all zero at
first). It is an MCS queue lock, as OpenSHMEM implementations build theirs: waiters queue
in the order they arrived (FIFO, so fair under contention), each waits on its own PE's
copy of the word (no PE polls another's memory), and the lock passes from holder to
successor with one atomic. It is made only of the device atomics, ``wait_until``-style
waits and ``quiet``, so it works to every PE over every transport, and the host forms
(``pgas.set_lock``...) use the same word layout and the same atomics: a host holder
excludes device callers and the other way round.

The word's layout (bit 63 is never set, so the word is never negative):

- bits 0-19, ``TAIL``: on the lock's home, PE 0, only: the last PE in the queue, plus one
  (0: the lock is free).
- bit 20, ``HELD``: in the holder's own copy: this PE holds the lock (``clear_lock``
  checks it).
- bits 21-40, ``NEXT``: in a queued PE's own copy: its successor, plus one; written by the
  successor with ``atomic_or`` once it is queued.
- bit 62, ``GRANTED``: in a waiter's own copy: the lock is handed over; written by the
  releasing PE with ``atomic_or``. It is the highest bit that is ever set, so
  ``word >= GRANTED`` (one ``wait_until``) detects it.

PE 0's copy holds both the tail and PE 0's own queue record; every update of one field
is an ``atomic_or``/``atomic_and`` of that field alone or a compare-and-swap loop that
keeps the other bits, so the fields never disturb each other.

``set_lock``: swap ``me + 1`` into the tail (compare-and-swap on PE 0, retried while other
bits change); no predecessor: the lock is taken; else ``atomic_or`` this PE into the
predecessor's ``NEXT``, wait until the own word shows ``GRANTED``, and turn ``GRANTED``
off and ``HELD`` on (one ``atomic_xor``). A fence then orders the holder's accesses after
the acquisition. ``clear_lock``: ``quiet`` first (the critical section's puts are complete
and visible before the next holder can see the lock), clear ``HELD``; without a successor
in ``NEXT``, compare-and-swap the tail from ``me + 1`` back to 0, which ends it when no PE
queued meanwhile; else (a PE took the tail but has not written ``NEXT`` yet) wait until it
has, clear ``NEXT`` and set ``GRANTED`` in the successor's word. ``test_lock``: take the lock
only if the tail is 0 (compare-and-swap), else return 1 at once.

As in OpenSHMEM, one PE must not have two callers of the same lock at once (two threads,
blocks or kernels, or the host and a kernel): its one queue record would be shared. One
thread of the PE calls each of these. At most 2**20 - 1 PEs.
"""
from __future__ import annotations

from ..core._codes import RMW_AND, RMW_OR, RMW_XOR
from ..core._constants import CMP_GE
from ..core._device_errors import KIND
from ._primitives import prim as _p

__all__ = ["set_lock", "clear_lock", "test_lock"]

HOME = 0                    # the PE whose copy holds the queue's tail
TAIL = (1 << 20) - 1        # the last PE in the queue + 1 (on HOME)
HELD = 1 << 20              # this PE holds the lock
NEXT_SHIFT = 21
NEXT = TAIL << NEXT_SHIFT   # the successor + 1
GRANTED = 1 << 62           # the lock is handed to this PE
NOT_HELD, HELD_ALREADY = KIND["LOCK_NOT_HELD"], KIND["LOCK_HELD"]     # misuses the word shows


@_p.jit
def _enqueue(fn, word, me):
    """Make this PE the queue's tail (the other bits of HOME's word kept); the previous
    tail: its PE + 1, 0 where the queue was empty."""
    seen = 0   # a guess of HOME's word: the lock free, PE 0 not queued
    while True:
        old = _p.remote_compare_swap(fn, word, HOME, seen, (seen & ~TAIL) | (me + 1), "lock")
        if old == seen:
            return old & TAIL
        seen = old


@_p.jit
def _acquire(fn, word):
    me = _p.my_pe(fn)
    if _p.load_acquire(word, fn, "lock") & HELD:
        _p.refuse(fn, HELD_ALREADY)
    ahead = _enqueue(fn, word, me)
    if ahead == 0:
        _p.remote_rmw(fn, word, me, RMW_OR, HELD, "lock", True)
    else:
        _p.remote_rmw(fn, word, ahead - 1, RMW_OR, (me + 1) << NEXT_SHIFT, "lock", True)
        _p.wait_for_value(fn, word, "lock (its bit 62, granted by the PE ahead in the queue)", CMP_GE, GRANTED)
        _p.remote_rmw(fn, word, me, RMW_XOR, GRANTED | HELD, "lock", True)
    _p.fence(fn)   # what the holder does next comes after the acquisition


@_p.jit
def _release(fn, word):
    me = _p.my_pe(fn)
    _p.quiet(fn)   # the critical section's operations are complete before the lock moves on
    mine = _p.remote_rmw(fn, word, me, RMW_AND, ~HELD, "lock", True)
    if mine & HELD == 0:
        _p.refuse(fn, NOT_HELD)
        return
    after = (mine >> NEXT_SHIFT) & TAIL
    if after == 0:
        seen = me + 1   # a guess of HOME's word: this PE the tail, PE 0 not queued
        while True:
            old = _p.remote_compare_swap(fn, word, HOME, seen, seen & ~TAIL, "lock")
            if old == seen:
                return                    # nobody queued: the lock is free
            if old & TAIL != me + 1:
                break                     # a PE queued behind this one and will write NEXT
            seen = old                    # only PE 0's own record changed: again
        mine = _p.wait_for_value(fn, word, "lock (its NEXT bits, from the PE queued behind)", CMP_GE, 1 << NEXT_SHIFT)
        after = (mine >> NEXT_SHIFT) & TAIL
    _p.remote_rmw(fn, word, me, RMW_AND, ~NEXT, "lock", True)
    _p.remote_rmw(fn, word, after - 1, RMW_OR, GRANTED, "lock", True)


@_p.jit
def _try_acquire(fn, word):
    me = _p.my_pe(fn)
    seen = 0
    while True:
        if seen & TAIL != 0:
            return 1
        old = _p.remote_compare_swap(fn, word, HOME, seen, seen | (me + 1), "lock")
        if old == seen:
            break
        seen = old
    _p.remote_rmw(fn, word, me, RMW_OR, HELD, "lock", True)
    _p.fence(fn)
    return 0


def set_lock(lock):
    """set_lock(lock): wait until this PE holds ``lock``; waiters get it in arrival order.

    ``lock``: a symmetric int64 array; its element 0 (on every PE) is the lock. One thread
    of the PE calls it; the PE must not hold the lock already. Fails with PgasTimeoutError
    after PGAS_TIMEOUT seconds of waiting.
    """
    fn = _p.name("pgas.device.set_lock")
    _p.check_lock(fn, lock)
    word = _p.local(lock, fn, "lock")
    _p.check_not_empty(fn, "lock", word)
    _acquire(fn, word)


def clear_lock(lock):
    """clear_lock(lock): ``quiet``, then release ``lock`` to the next PE waiting for it.

    The caller must hold the lock: a PE that does not gets PgasValueError (on a GPU the
    kernel stops and the host raises it).
    """
    fn = _p.name("pgas.device.clear_lock")
    _p.check_lock(fn, lock)
    word = _p.local(lock, fn, "lock")
    _p.check_not_empty(fn, "lock", word)
    _release(fn, word)


def test_lock(lock):
    """test_lock(lock) -> 0 if this PE took ``lock`` (it was free), 1 if it is held (then
    nothing changed); never waits."""
    fn = _p.name("pgas.device.test_lock")
    _p.check_lock(fn, lock)
    word = _p.local(lock, fn, "lock")
    _p.check_not_empty(fn, "lock", word)
    return _try_acquire(fn, word)
