"""Ordering and synchronization on the device: fence, quiet, wait_until, test, barriers.

Guarantees, as in NVSHMEM:

- ``fence()``: puts, p and nbi puts issued by the calling thread to a PE before the fence
  are delivered to that PE before those issued after it.
- ``quiet()``: every put, get and nbi operation the calling thread issued is complete, and
  its data visible to the target PE, when ``quiet`` returns.
- ``wait_until(ivar, cmp, value)``: returns once the local ``ivar[0]`` satisfies
  ``ivar[0] <cmp> value``; later loads see every store that happened before the store that
  satisfied it (acquire).
- ``barrier_all()``: ``quiet``, then wait until every PE has arrived. ``sync_all()``: the
  arrival wait only. One thread per PE calls these; in the ``_block`` forms every thread
  of one block calls and the block synchronizes before and after.
"""
from __future__ import annotations

from .._constants import CMP_EQ, CMP_GE, CMP_GT, CMP_LE, CMP_LT, CMP_NE
from ._primitives import prim as _p

__all__ = ["fence", "quiet", "wait_until", "test",
           "barrier_all", "sync_all", "barrier_all_block", "sync_all_block"]


def fence():
    """fence(): order this thread's puts to each PE (see the module's guarantees)."""
    _p.runtime("pgas.device.fence")
    _p.fence()


def quiet():
    """quiet(): complete every operation this thread issued (see the module's guarantees)."""
    _p.runtime("pgas.device.quiet")
    _p.fence()


def _compare(value, cmp, target):
    if cmp == CMP_EQ:
        return value == target
    if cmp == CMP_NE:
        return value != target
    if cmp == CMP_GT:
        return value > target
    if cmp == CMP_GE:
        return value >= target
    if cmp == CMP_LT:
        return value < target
    if cmp == CMP_LE:
        return value <= target
    return False


def test(ivar, cmp, value):
    """test(ivar, cmp, value) -> bool: does the local ``ivar[0] <cmp> value`` hold now?"""
    fn = "pgas.device.test"
    _p.check_cmp(fn, cmp)
    return bool(_compare(_p.load_acquire(_p.local(ivar, fn, "ivar"), fn, "ivar"), cmp, value))


def wait_until(ivar, cmp, value):
    """wait_until(ivar, cmp, value): block until the local ``ivar[0] <cmp> value`` holds.

    Fails with PgasTimeoutError after PGAS_TIMEOUT seconds.
    """
    fn = "pgas.device.wait_until"
    _p.check_cmp(fn, cmp)
    word = _p.local(ivar, fn, "ivar")
    wait = _p.Wait(fn)
    while True:
        seen = _p.load_acquire(word, fn, "ivar")
        if _compare(seen, cmp, value):
            return
        wait.pause(f"ivar {_p.cmp_name(cmp)} {value} (last value seen: {seen})")


def _sync_all(fn: str, complete_first: bool) -> None:
    """Epoch barrier: each PE raises its arrival flag on every PE, then waits for all flags.

    ``words`` is the runtime's array at heap offset 0: flag of PE q at [q], own epoch at [n].
    """
    rt = _p.runtime(fn)
    words, me, n = rt.sync_words, rt.my_pe, rt.n_pes
    if complete_first:
        _p.fence()
    epoch = words[n] + 1
    words[n] = epoch
    for pe in range(n):
        _p.store_release(_p.peer(words[me:me + 1], pe, fn, "barrier flag"), epoch, fn, "barrier flag")
    wait = _p.Wait(fn)
    for pe in range(n):
        while _p.load_acquire(words[pe:pe + 1], fn, "barrier flag") < epoch:
            missing = [q for q in range(n) if words[q] < epoch]
            wait.pause(f"PEs {missing} to arrive")


def barrier_all():
    """barrier_all(): quiet, then wait for every PE (one thread per PE calls it)."""
    _sync_all("pgas.device.barrier_all", True)


def sync_all():
    """sync_all(): wait for every PE, without completing RMA (one thread per PE)."""
    _sync_all("pgas.device.sync_all", False)


def _in_block(fn: str, complete_first: bool) -> None:
    _p.group_sync(_p.BLOCK, fn)
    if _p.group_rank_and_size(_p.BLOCK, fn)[0] == 0:
        _sync_all(fn, complete_first)
    _p.group_sync(_p.BLOCK, fn)


def barrier_all_block():
    """barrier_all_block(): barrier_all for a whole block; every thread of one block calls it."""
    _in_block("pgas.device.barrier_all_block", True)


def sync_all_block():
    """sync_all_block(): sync_all for a whole block; every thread of one block calls it."""
    _in_block("pgas.device.sync_all_block", False)
