"""Host collectives on teams that span nodes, by the MPI library's own collectives on the
team's communicator (as NVSHMEM hands its host collectives to NCCL): MPI's algorithms
already use shared memory inside a node and the network between nodes, and measured
between two hosts they beat reading every member's data through a remote engine
(docs/collectives.md, "Across nodes").

They are non-blocking MPI calls completed by ``wait_requests``, which backs off instead of
spinning in MPI's progress loop (the cores are shared with the other PEs) and fails after
PGAS_TIMEOUT naming the call. Results are numpy's, the same bits on every member, as
with pgas's own algorithms (``reduce_runner``).
"""
from __future__ import annotations

import numpy as np

from ..core._reductions import reduce_into
from ..runtime._barrier import wait_requests

__all__ = ["spans_nodes", "reduce_runner", "broadcast_runner", "fcollect_runner"]

_MPI_OPS = {"sum": "SUM", "prod": "PROD", "min": "MIN", "max": "MAX", "and": "BAND", "or": "BOR", "xor": "BXOR"}
# integers MPI reduces exactly as numpy does (wrapping), in any order
_INTEGERS = tuple(np.dtype(d) for d in (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64,
                                        np.uint64))


def spans_nodes(call) -> bool:
    """True when some member of ``call``'s team is on another node (its heap not mapped here)."""
    heap = call.rt.heap
    return not all(heap.reachable(pe) for pe in call.team.pes)


def _wait(call, requests, nbytes: int) -> None:
    """Complete ``requests``, which move ``nbytes`` in all."""
    def others():
        return [pe for rank, pe in enumerate(call.team.pes) if rank != call.me]
    wait_requests(requests, call.fn, lambda: f"the other members of the team (PEs {others()})", others, nbytes)


def reduce_runner(call, d: np.ndarray, s: np.ndarray, op: str, ufunc, in_place: bool):
    """All-reduce ``s`` into ``d`` (``in_place``: they are the same array). Integers by
    MPI's all-reduce (exact in any order); floats and bools by MPI's all-gather, then every member
    folds the members' arrays in rank order as pgas's own algorithms do (numpy's results,
    NaNs included, the same bits everywhere: MPI's reductions add in an order of their own
    and its min and max treat NaN otherwise)."""
    from mpi4py import MPI
    comm = call.team.comm

    if d.dtype in _INTEGERS:
        mpi_op = getattr(MPI, _MPI_OPS[op])
        source = MPI.IN_PLACE if in_place else s

        def run():
            _wait(call, [comm.Iallreduce(source, d, op=mpi_op)], 2 * d.nbytes)
        return run
    gathered = np.empty((call.n, s.size), s.dtype)

    def run():
        _wait(call, [comm.Iallgather(s, gathered)], gathered.nbytes)
        reduce_into(d, list(gathered), ufunc)
    return run


def broadcast_runner(call, d: np.ndarray, s: np.ndarray, root: int, same: bool):
    """Member ``root``'s ``s`` into every member's ``d``."""
    def run():
        if call.me == root and not same:
            np.copyto(d, s)
        _wait(call, [call.team.comm.Ibcast(d, root=root)], d.nbytes)
    return run


def fcollect_runner(call, d: np.ndarray, s: np.ndarray):
    """Every member's ``s`` into ``d``, in team-rank order."""
    def run():
        _wait(call, [call.team.comm.Iallgather(s, d)], d.nbytes)
    return run
