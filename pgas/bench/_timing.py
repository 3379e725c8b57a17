"""Timing helpers shared by the benchmarks."""
from __future__ import annotations

import time
from contextlib import contextmanager

__all__ = ["best_seconds", "slowest_pe_seconds", "human_bytes", "window_on_pe1"]


def best_seconds(action, iterations: int, repeats: int = 5) -> float:
    """Seconds per call of ``action``: the best mean of ``repeats`` runs of ``iterations``
    calls (the best, as these machines are noisy)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(iterations):
            action()
        best = min(best, (time.perf_counter() - start) / iterations)
    return best


def slowest_pe_seconds(comm, action, iterations: int) -> float:
    """The slowest PE's mean time per call of ``action`` over one batch of ``iterations``
    calls, started together (collective over ``comm``, an mpi4py communicator)."""
    from mpi4py import MPI
    comm.Barrier()
    start = time.perf_counter()
    for _ in range(iterations):
        action()
    return comm.allreduce(time.perf_counter() - start, op=MPI.MAX) / iterations


def human_bytes(nbytes: int) -> str:
    """``8 B``, ``4 KiB``, ``64 MiB``."""
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= size and nbytes % size == 0:
            return f"{nbytes // size} {unit}"
    return f"{nbytes} B"


@contextmanager
def window_on_pe1(nbytes: int):
    """An MPI window of ``nbytes`` on PE 1 (none elsewhere) from ``MPI.Win.Allocate``, the
    closest MPI has to a symmetric heap, opened for passive-target RMA (``Lock_all``) and
    freed after (collective over COMM_WORLD)."""
    from mpi4py import MPI
    win = MPI.Win.Allocate(nbytes if MPI.COMM_WORLD.Get_rank() == 1 else 0, comm=MPI.COMM_WORLD)
    win.Lock_all()
    try:
        yield win
    finally:
        win.Unlock_all()
        win.Free()
