"""Host synchronization across all PEs."""
from __future__ import annotations

from ._rma import quiet
from ._runtime import runtime, wait_all

__all__ = ["barrier_all", "sync_all"]


def barrier_all(stream=None) -> None:
    """Complete this PE's RMA (``quiet``), then wait until every PE has called this."""
    quiet(stream)
    wait_all(runtime("pgas.barrier_all").boot.comm, "pgas.barrier_all")


def sync_all(stream=None) -> None:
    """Wait until every PE has called this (no completion of RMA implied)."""
    wait_all(runtime("pgas.sync_all").boot.comm, "pgas.sync_all")
