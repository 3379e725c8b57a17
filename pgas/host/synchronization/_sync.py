"""Host synchronization across all PEs, and the team barriers' common path.

Without a stream these are barriers over MPI that fail after PGAS_TIMEOUT, naming the
PEs that did not arrive. On the cuda backend with a ``stream`` they are queued on it: a
one-thread kernel runs the device barrier (``_gpu_ops.team_barrier``), so work queued
after it starts once every member's work queued before it is done.
"""
from __future__ import annotations

from ...core._constants import TEAM_WORLD
from ...runtime._barrier import wait_all
from ...runtime._state import runtime
from ...runtime._team_table import team_of
from ..rma._rma import quiet

__all__ = ["barrier_all", "sync_all"]


def team_barrier(fn: str, team, complete_rma: bool, stream) -> None:
    """Barrier (``complete_rma``: quiet first) or sync of ``team``, on ``stream`` if given."""
    rt = runtime(fn)
    found = team_of(rt, team, fn)
    if rt.on_gpu and stream is not None:
        from .. import _gpu_ops
        _gpu_ops.team_barrier(found.handle, complete_rma, stream, fn)
        return
    if complete_rma:
        quiet(stream)
    wait_all(found.comm, fn, found.pes)


def barrier_all(stream=None) -> None:
    """Complete this PE's RMA (``quiet``), then wait until every PE has called this."""
    team_barrier("pgas.barrier_all", TEAM_WORLD, True, stream)


def sync_all(stream=None) -> None:
    """Wait until every PE has called this (no completion of RMA implied)."""
    team_barrier("pgas.sync_all", TEAM_WORLD, False, stream)
