"""Ordering and synchronization on the device: fence, quiet, wait_until, test, barriers.

Guarantees, as in NVSHMEM:

- ``fence()``: puts, p, nbi puts and put_signals issued by the calling thread to a PE
  before the fence are delivered to that PE before those issued after it.
- ``quiet()``: every put, get, atomic, signal and nbi operation the calling thread
  issued is complete, and its data visible to the target PE, when ``quiet`` returns. On
  the load/store path every store is issued at the call, so quiet only orders memory
  (it never waits, hence never times out).
- ``wait_until(ivar, cmp, value)``: returns once the local ``ivar[0]`` satisfies
  ``ivar[0] <cmp> value``, ``value`` taken in the ivar's dtype (as NVSHMEM's typed
  ``cmp_value``; ``test`` alike); later loads see every store that happened before the store that
  satisfied it (acquire). Fails after PGAS_TIMEOUT naming what it waited for.
- ``barrier(team)``: ``quiet``, then wait until every member of ``team`` has arrived.
  ``sync(team)``: the arrival wait only. ``barrier_all`` / ``sync_all`` are those over
  TEAM_WORLD. One thread per PE calls them; in the ``_warp`` / ``_block`` forms every
  thread of one warp / block calls, and the group synchronizes before and after. A
  barrier that times out names the PEs that had not arrived.
"""
from __future__ import annotations

from ..core._codes import BLOCK, RMW_ADD, THREAD, WARP
from ..core._constants import TEAM_WORLD
from ._primitives import prim as _p

__all__ = ["fence", "quiet", "wait_until", "test"]

def fence():
    """fence(): order this thread's puts to each PE (see the module's guarantees)."""
    _p.fence("pgas.device.fence")


def quiet():
    """quiet(): complete every operation this thread issued (see the module's guarantees)."""
    _p.quiet("pgas.device.quiet")


def test(ivar, cmp, value):
    """test(ivar, cmp, value) -> bool: does the local ``ivar[0] <cmp> value`` hold now?"""
    fn = _p.name("pgas.device.test")
    _p.check_cmp(fn, cmp)
    seen = _p.load_acquire(_p.local(ivar, fn, "ivar"), fn, "ivar")
    return _p.compare(seen, cmp, _p.cast_like(seen, value))   # in the ivar's type, as wait_until


def wait_until(ivar, cmp, value):
    """wait_until(ivar, cmp, value): block until the local ``ivar[0] <cmp> value`` holds.

    Fails with PgasTimeoutError after PGAS_TIMEOUT seconds.
    """
    fn = _p.name("pgas.device.wait_until")
    _p.wait_for_value(fn, _p.local(ivar, fn, "ivar"), "ivar", cmp, value)


@_p.jit
def _team_sync(fn, team, complete_first):
    """Epoch barrier over ``team``: raise my arrival flag on every member, wait for all flags.

    Each team has a row of words on every PE: at [q] the count of team rank q's arrivals,
    this PE's epoch (its own count of syncs on the team) last.
    """
    _p.check_team(fn, team)
    words = _p.barrier_words(team, fn)
    if complete_first:
        _p.quiet(fn)
    last = words.size - 1
    # Atomic, and arrivals are counted rather than stored: two callers on one PE (blocks of
    # one kernel, a thread-scope call made by many threads, two streams) each take their own
    # epoch and each count once, so no arrival is lost and the flags only grow.
    epoch = _p.atomic_rmw(_p.part(words, last, last + 1), RMW_ADD, 1, fn, "barrier epoch") + 1
    me = _p.team_rank(team, fn)
    for q in range(_p.team_size(team, fn)):
        _p.remote_rmw(fn, _p.part(words, me, me + 1), _p.team_pe(team, q, fn), RMW_ADD, 1, "barrier flag", False)
    _p.wait_for_arrivals(fn, team, words, epoch)


@_p.jit
def _grouped_sync(fn, scope, team, complete_first):
    """``_team_sync`` done once per thread / warp / block, the group synchronized around it."""
    _p.group_sync(scope, fn)
    if _p.group_rank_and_size(scope, fn)[0] == 0:
        _team_sync(fn, team, complete_first)
    _p.group_sync(scope, fn)


_SCOPES = {"": (THREAD, "One thread per PE calls it."),
           "_warp": (WARP, "Every thread of one warp calls it."),
           "_block": (BLOCK, "Every thread of one block calls it.")}


def _make(name: str, suffix: str, complete_first: bool, on_team: bool):
    scope, who = _SCOPES[suffix]
    full = name + suffix
    label = f"pgas.device.{full}"
    what = ("quiet, then wait for every member" if complete_first else
            "wait for every member, without completing RMA,")
    if on_team:
        def sync_op(team):
            _grouped_sync(_p.name(label), scope, team, complete_first)
        sync_op.__doc__ = f"{full}(team): {what} of ``team``. {who}"
    else:
        def sync_op():
            _grouped_sync(_p.name(label), scope, TEAM_WORLD, complete_first)
        sync_op.__doc__ = f"{full}(): {what} of TEAM_WORLD. {who}"
    sync_op.__name__ = sync_op.__qualname__ = full
    return sync_op


for _name, _complete, _on_team in (("barrier_all", True, False), ("sync_all", False, False),
                                   ("barrier", True, True), ("sync", False, True)):
    for _suffix in _SCOPES:
        _f = _make(_name, _suffix, _complete, _on_team)
        globals()[_f.__name__] = _f
        __all__.append(_f.__name__)
del _name, _complete, _on_team, _suffix, _f
