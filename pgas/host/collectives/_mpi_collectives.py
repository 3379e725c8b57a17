"""Host collectives on teams that span nodes, by MPI on the team's communicator: small ones,
and any on two members, as one exchange of point-to-point messages (``_mpi_exchange``),
the others by the MPI library's own collectives (as NVSHMEM hands its host collectives to
NCCL): MPI's algorithms already use shared memory inside a node and the network between
nodes, and measured between two hosts they beat reading every member's data through a
remote engine (docs/collectives.md, "Across nodes").

They are non-blocking MPI calls completed by ``wait_requests``, which backs off instead of
spinning in MPI's progress loop (the cores are shared with the other PEs) and fails after
PGAS_TIMEOUT naming the call. Results are numpy's, the same bits on every member, as
with pgas's own algorithms (``reduce_runner``).
"""
from __future__ import annotations

import numpy as np

from ...core._reductions import reduce_into
from ...runtime._barrier import wait_requests
from . import _mpi_exchange as exchange
from ._fold_code import compiled_fold

__all__ = ["spans_nodes", "reduce_runner", "reducescatter_runner", "broadcast_runner", "fcollect_runner",
           "alltoall_runner", "scan_runner"]

_MPI_OPS = {"sum": "SUM", "prod": "PROD", "min": "MIN", "max": "MAX", "and": "BAND", "or": "BOR", "xor": "BXOR"}
# integers MPI reduces exactly as numpy does (wrapping), in any order
_INTEGERS = tuple(np.dtype(d) for d in (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64,
                                        np.uint64))
# Floats and bools on 3 members or more, from this many bytes gathered per member, are folded
# in shares (all-to-all, fold, all-gather); below it, and on 2 members (the same bytes either
# way), every member gathers every array and folds it whole: one latency instead of two.
# Measured between two hosts, 4 PEs: 128 KiB per PE folded in shares 188 us, whole 282 us;
# 32 KiB 128 us against 70 us (docs/collectives.md).
_SCATTERED_FOLD_GATHERED_BYTES = 512 << 10


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
    """All-reduce ``s`` into ``d`` (``in_place``: they are the same array). Small ones, and
    any on two members, as one exchange of messages (``_exchange_reduce_runner``); larger
    integers by MPI's all-reduce (exact in any order); floats and bools by MPI's
    all-gather, then every member folds the members' arrays in rank order as pgas's own
    algorithms do (numpy's results, NaNs included, the same bits everywhere: MPI's
    reductions add in an order of their own and its min and max treat NaN otherwise)."""
    from mpi4py import MPI
    comm = call.team.comm

    if _exchanged(call, s.nbytes):
        return _exchange_reduce_runner(call, d, s, op, ufunc, in_place)
    if d.dtype in _INTEGERS:
        mpi_op = getattr(MPI, _MPI_OPS[op])
        source = MPI.IN_PLACE if in_place else s

        def run():
            _wait(call, [comm.Iallreduce(source, d, op=mpi_op)], 2 * d.nbytes)
        return run
    if call.n > 2 and call.n * d.nbytes >= _SCATTERED_FOLD_GATHERED_BYTES:
        return _scattered_fold_runner(call, d, s, ufunc)
    gathered = np.empty((call.n, s.size), s.dtype)

    def run():
        _wait(call, [comm.Iallgather(_typeless(s), _typeless(gathered))], gathered.nbytes)
        reduce_into(d, list(gathered), ufunc)
    return run


def _exchanged(call, nbytes: int) -> bool:
    """True when a call moving ``nbytes`` per member runs as one exchange of messages
    (``_mpi_exchange``): few members and small arrays, or two members whatever the size
    (each member's array to the other is all any algorithm can do there; MPI's calls add
    their schedules: docs/collectives.md)."""
    if call.n == 2:
        return nbytes <= exchange.MAX_MESSAGE
    return call.n <= exchange.MEMBERS and nbytes <= exchange.BYTES


def _others(call) -> list:
    return [rank for rank in range(call.n) if rank != call.me]


def _exchange_reduce_runner(call, d: np.ndarray, s: np.ndarray, op: str, ufunc, in_place: bool):
    """Every member's ``s`` to every member, then each folds them in rank order (numpy's
    bits on every member, for every dtype). The fold reads this member's own row from
    ``s`` itself, unless ``d`` is ``s`` (``in_place``) and this member's row comes after
    the first two: the fold writes ``d`` in its first pass (``b0 op b1``, element by
    element, which may be ``d``) and reads the later rows after, so it reads a copy made
    while the messages travel."""
    gathered = np.empty((call.n, s.size), s.dtype)
    copied = in_place and call.me >= 2
    moves = exchange.Exchange(call, "reduce", [(s, rank) for rank in _others(call)],
                              [(gathered[rank], rank) for rank in _others(call)],
                              local=(gathered[call.me], s) if copied else None).runner()
    rows = [row if rank != call.me or copied else s for rank, row in enumerate(gathered)]
    return _folding_runner(moves, d, rows, op, ufunc, keep=(gathered, s))


def _folding_runner(moves, d: np.ndarray, rows: list, op: str, ufunc, keep: tuple):
    """A function that runs ``moves()`` and then folds ``rows`` into ``d`` in rank order
    (native code where the dtype and op have it: ``_fold_code``); ``keep``: the arrays
    ``rows`` lie in, held while the function lives (native code holds their addresses)."""
    fold = compiled_fold(d.dtype, op) if d.flags.c_contiguous else None
    if fold is None:

        def run():
            moves()
            reduce_into(d, rows, ufunc)
        return run
    addresses = np.array([row.ctypes.data for row in rows], np.uint64)
    arguments = (d.ctypes.data, addresses.ctypes.data, len(rows), d.size)

    def run(keep=(addresses, keep)):     # (the default keeps what the addresses point to alive)
        moves()
        fold(*arguments)
    return run


def reducescatter_runner(call, d: np.ndarray, s: np.ndarray, op: str, ufunc):
    """Member i's ``d`` = ``op`` over block i of every member's ``s`` (``d`` and ``s`` do
    not overlap): each member's block i goes to member i (one exchange of messages where
    small, or on two members; else MPI's all-to-all), which folds them in rank order
    (numpy's bits). Each member moves its ``s`` once, not every member's whole."""
    n, me, m = call.n, call.me, d.size
    blocks = s.reshape(n, m)
    pieces = np.empty((n, m), s.dtype)
    if _exchanged(call, d.nbytes):
        moves = exchange.Exchange(call, "reducescatter", [(blocks[rank], rank) for rank in _others(call)],
                                  [(pieces[rank], rank) for rank in _others(call)]).runner()
        rows = [blocks[me] if rank == me else pieces[rank] for rank in range(n)]
    else:
        comm = call.team.comm

        def moves():
            _wait(call, [comm.Ialltoall(_typeless(s), _typeless(pieces))], s.nbytes)
        rows = list(pieces)
    return _folding_runner(moves, d, rows, op, ufunc, keep=(pieces, s))


def _typeless(a: np.ndarray) -> list:
    """``a`` as MPI bytes: what is only moved needs no MPI datatype, and some dtypes have
    none (bfloat16)."""
    from mpi4py import MPI
    return [exchange.as_bytes(a), MPI.BYTE]


def _scattered_fold_runner(call, d: np.ndarray, s: np.ndarray, ufunc):
    """The rank-order fold, each member folding one share of the elements: an all-to-all
    brings every member's piece of my share here, I fold them in rank order, an all-gather
    hands the folded shares round. Each element is still folded in rank order (numpy's bits),
    and each member moves about twice its array instead of receiving every member's whole."""
    from mpi4py import MPI
    comm, n, me, item = call.team.comm, call.n, call.me, s.itemsize
    bounds = [s.size * rank // n for rank in range(n + 1)]     # member rank folds [bounds[rank], bounds[rank+1])
    counts = [(bounds[rank + 1] - bounds[rank]) * item for rank in range(n)]
    displacements = [bounds[rank] * item for rank in range(n)]
    mine = bounds[me + 1] - bounds[me]
    pieces = np.empty((n, mine), s.dtype)
    sending = [exchange.as_bytes(s), counts, displacements, MPI.BYTE]
    receiving = [exchange.as_bytes(pieces), [mine * item] * n, [rank * mine * item for rank in range(n)], MPI.BYTE]
    folded = d.reshape(-1)[bounds[me]:bounds[me + 1]]
    gathering = [exchange.as_bytes(d), counts, displacements, MPI.BYTE]

    def run():
        _wait(call, [comm.Ialltoallv(sending, receiving)], d.nbytes)
        reduce_into(folded, list(pieces), ufunc)
        _wait(call, [comm.Iallgatherv(MPI.IN_PLACE, gathering)], d.nbytes)
    return run


def broadcast_runner(call, d: np.ndarray, s: np.ndarray, root: int, same: bool):
    """Member ``root``'s ``s`` into every member's ``d``."""
    if _exchanged(call, d.nbytes):
        parent, children = _broadcast_tree(call, root)
        if call.me == root:
            return exchange.Exchange(call, "broadcast", [(s, rank) for rank in children], [],
                                     local=None if same else (d, s)).runner()
        receive = exchange.Exchange(call, "broadcast", [], [(d, parent)]).runner()
        if not children:
            return receive
        forward = exchange.Exchange(call, "broadcast", [(d, rank) for rank in children], []).runner()

        def run():
            receive()
            forward()
        return run

    def run():
        if call.me == root and not same:
            np.copyto(d, s)
        _wait(call, [call.team.comm.Ibcast(_typeless(d), root=root)], d.nbytes)
    return run


def _broadcast_tree(call, root: int) -> tuple:
    """(parent, children) of this member, by team rank, in a broadcast from ``root``: the
    root sends to the members of its own node and to one member of every other node (its
    lowest rank), which sends on to the rest of its node; one message per member crosses
    between nodes, and the root sends fewer than one per member."""
    node_of = call.rt.boot.node_of
    node = [node_of[pe] for pe in call.team.pes]
    leaders: dict = {node[root]: root}
    for rank in range(call.n):
        leaders.setdefault(node[rank], rank)

    def parent_of(rank: int) -> int:
        return root if leaders[node[rank]] == rank or node[rank] == node[root] else leaders[node[rank]]
    children = [rank for rank in range(call.n) if rank != root and parent_of(rank) == call.me]
    return (None if call.me == root else parent_of(call.me)), children


def fcollect_runner(call, d: np.ndarray, s: np.ndarray):
    """Every member's ``s`` into ``d``, in team-rank order."""
    if _exchanged(call, s.nbytes):
        blocks = d.reshape(call.n, s.size)
        return exchange.Exchange(call, "fcollect", [(s, rank) for rank in _others(call)],
                                 [(blocks[rank], rank) for rank in _others(call)], local=(blocks[call.me], s)).runner()

    def run():
        _wait(call, [call.team.comm.Iallgather(_typeless(s), _typeless(d))], d.nbytes)
    return run


def alltoall_runner(call, d: np.ndarray, s: np.ndarray):
    """Block j of ``s`` into block ``call.me`` of member j's ``d`` (equal blocks)."""
    n, me = call.n, call.me
    sent, received = s.reshape(n, -1), d.reshape(n, -1)
    if _exchanged(call, received[0].nbytes):
        return exchange.Exchange(call, "alltoall", [(sent[rank], rank) for rank in _others(call)],
                                 [(received[rank], rank) for rank in _others(call)],
                                 local=(received[me], sent[me])).runner()

    def run():
        _wait(call, [call.team.comm.Ialltoall(_typeless(s), _typeless(d))], d.nbytes)
    return run


def scan_runner(call, d: np.ndarray, s: np.ndarray, op: str, ufunc, last: int, start):
    """A scan: ``d`` = ``op`` folded in rank order over the ``s`` of members 0 ..
    ``last``-1 (``last`` is this member's rank, exclusive, or one more, inclusive), ``start``
    (the op's identity) where ``last`` is 0; ``d`` may be ``s``. Small ones, and any on two
    members, as one exchange of messages (each member's ``s`` to the members after it);
    else every member's ``s`` by MPI's all-gather."""
    n, me = call.n, call.me
    gathered = np.empty((n, s.size), s.dtype)
    if _exchanged(call, s.nbytes):
        copied = last > me >= 2 and np.shares_memory(d, s)     # own row read after the first pass wrote d
        moves = exchange.Exchange(call, "inscan" if last > me else "exscan",
                                  [(s, rank) for rank in range(me + 1, n)],
                                  [(gathered[rank], rank) for rank in range(me)],
                                  local=(gathered[me], s) if copied else None).runner()
        rows = [gathered[rank] if rank != me or copied else s for rank in range(last)]
    else:
        comm = call.team.comm

        def moves():
            _wait(call, [comm.Iallgather(_typeless(s), _typeless(gathered))], gathered.nbytes)
        rows = list(gathered[:last])
    if last == 0:

        def run():
            moves()
            d[...] = start
        return run
    return _folding_runner(moves, d, rows, op, ufunc, keep=(gathered, s))
