"""Timing helpers shared by the benchmarks."""
from __future__ import annotations

import time

__all__ = ["best_seconds", "slowest_pe_seconds", "human_bytes"]


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
