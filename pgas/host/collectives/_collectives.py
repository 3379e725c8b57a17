"""Host collectives over a team: broadcast, fcollect, alltoall, reduce, reducescatter.

Every member reads what it needs straight from its peers' mapped heaps (pull) and does
the arithmetic with numpy on whole slices, so data moves at memory speed. Members on
other nodes are read through the NIC (RDMA reads of the same slices and of the progress
words) where a named all-reduce algorithm asks for it, so these also work on teams that
span nodes. Members
coordinate through progress words in the heap: each publishes how far it has got
(release store) and waits for the peers it reads from (acquire loads, PGAS_TIMEOUT;
``_collective_call``).

All-reduce (``reduce``) has three algorithms:

- ``oneshot`` (latency): every member reads every peer's ``src`` and reduces it locally.
- ``ring``: reduce-scatter then all-gather round the ring, one chunk per member.
- ``tree``: NCCL's double binary tree (``pgas/host/collectives/_trees.py``); each tree carries half of
  the data, in pipelined chunks reduced up the tree and copied down.

``auto`` picks by size and PE count (measured crossovers: docs/collectives.md). On a team
that spans nodes, all-reduce (``auto``, or ``mpi`` anywhere), broadcast, fcollect,
alltoall and reducescatter use MPI on the team's communicator (``_mpi_collectives``:
measured between hosts, 100x faster than reading through a remote engine); a named
algorithm runs pgas's own. ``stream`` is accepted for source compatibility; on the
simulator backend these are synchronous. On the cuda backend every collective, after the
same argument checks, runs the device collective of ``pgas.device`` as a one-block kernel
queued on ``stream`` (``_gpu_ops.collective``), as NVSHMEM's ``*_on_stream`` collectives
do; but a reduction over a team that spans nodes runs ``_mpi_collectives`` on host copies
(``_collective_call.staged``: the device reductions read members' data in place, within
a node only).
"""
from __future__ import annotations

import numpy as np

from ...core._checks import check_dtypes_match, check_root, check_strided_blocks
from ...core._errors import PgasValueError
from ...core._reductions import reduce_into, reduction_ufunc
from . import _eager, _mpi_collectives as _mpi
from ._collective_call import (DONE, DOWN0, DOWN1, READY, RING, UP0, UP1, Call, checked_pair, no_overlap, on_gpu,
                               pull_all, reduction_pair, repeat, staged)
from ._trees import double_binary_tree

__all__ = ["broadcast", "fcollect", "alltoall", "alltoalls", "reduce", "reducescatter", "ALGORITHMS"]

ALGORITHMS = ("auto", "eager", "ring", "tree", "oneshot", "mpi")
_TREE_CHUNK_BYTES = 1 << 20          # pipelining unit of the tree
_ONESHOT_MAX_TRAFFIC = 4 << 20      # auto: oneshot while n_pes x bytes stays below this
# The largest call (bytes per member) each collective runs eagerly where it can; above it
# the general algorithms were faster (docs/collectives.md). Broadcast: up to the staging size.
_EAGER_LARGEST = {"fcollect": 32 << 10, "reduce": 64 << 10}


def broadcast(team, dest, src, root: int, stream=None) -> None:
    """Copy team rank ``root``'s ``src`` into ``dest`` on every member (root included)."""
    key = ("broadcast", team, root, id(dest), id(src))
    if type(team) is int and type(root) is int and repeat(key, dest, src):
        return
    call = Call("pgas.broadcast", team)
    d, s = call.arrays(dest, src)
    check_dtypes_match(call.fn, d, s)
    if d.size != s.size:
        raise PgasValueError(f"{call.fn}: dest and src must have the same size, got {d.size} and {s.size}")
    check_root(call.fn, root, call.n)
    if on_gpu(call, "broadcast", d, s, root, stream=stream):
        return
    root = int(root)
    if _runs_eager(call.rt, call.team, "broadcast", s.nbytes):
        call.keep(key, _eager.runner(call, "broadcast", root))
        return
    same = np.shares_memory(d, s)
    if _mpi.spans_nodes(call):
        call.keep(key, _mpi.broadcast_runner(call, d, s, root, same))
        return
    if all(call.rt.heap.reachable(pe) for pe in call.team.pes):
        call.keep(key, call.general(lambda: _shared_broadcast(call, d, s, root, same)))
        return

    def run():
        if call.me == root:
            call.publish(READY, 1)
            if not same:
                np.copyto(d, s)
            for rank in range(call.n):
                if rank != root:
                    call.wait(rank, DONE, 1, "to finish reading the root's src")
        else:
            call.wait(root, READY, 1, "(the root) to enter the broadcast")
            np.copyto(d, call.read(root, "src"))
            call.publish(DONE, 1)
    call.keep(key, call.general(run))


def _shared_broadcast(call: Call, d, s, root: int, same: bool) -> None:
    """Broadcast on a team whose heaps are all mapped here: member r copies part r of the
    root's src into every other member's dest, so every member (the root too) does a
    share of the copying rather than each reader all of its own."""
    n, me = call.n, call.me
    part = slice(s.size * me // n, s.size * (me + 1) // n)
    call.publish(READY, 1)
    call.wait_others(READY, 1, "to enter the broadcast")      # every dest may be written now
    theirs = call.peer(root, "src")[part]
    for rank in range(n):
        if rank != root:
            np.copyto(call.peer(rank, "dest")[part], theirs)
    if me == root and not same:
        np.copyto(d, s)
    call.publish(DONE, 1)
    call.wait_others(DONE, 1, "to finish its part of the broadcast")


def fcollect(team, dest, src, stream=None) -> None:
    """Concatenate every member's ``src`` into ``dest`` (all-gather), in team-rank order."""
    key = ("fcollect", team, id(dest), id(src))
    if type(team) is int and repeat(key, dest, src):
        return
    call = Call("pgas.fcollect", team)
    d, s = call.arrays(dest, src)
    checked_pair(call, d, s, call.n * s.size, s.size, "dest must hold team size x src.size elements")
    no_overlap(call, d, s)
    if on_gpu(call, "fcollect", d, s, stream=stream):
        return
    if _runs_eager(call.rt, call.team, "fcollect", s.nbytes):
        call.keep(key, _eager.runner(call, "fcollect", None))
        return
    if _mpi.spans_nodes(call):
        call.keep(key, _mpi.fcollect_runner(call, d, s))
        return
    m = s.size
    blocks = [d[rank * m:(rank + 1) * m] for rank in range(call.n)]

    def gather():
        for rank, block in enumerate(blocks):
            np.copyto(block, call.read(rank, "src"))
    call.keep(key, call.general(lambda: pull_all(call, gather)))


def alltoall(team, dest, src, stream=None) -> None:
    """Block j of member i's ``src`` goes to block i of member j's ``dest`` (equal blocks)."""
    key = ("alltoall", team, id(dest), id(src))
    if type(team) is int and repeat(key, dest, src):
        return
    call = Call("pgas.alltoall", team)
    s = call._symmetric(src, "src")
    if s.size % call.n:
        raise PgasValueError(f"{call.fn}: src.size ({s.size}) must be a multiple of the team size ({call.n})")
    d, s = call.arrays(dest, src)
    checked_pair(call, d, s, s.size, s.size, "dest and src must have the same size")
    no_overlap(call, d, s)
    if on_gpu(call, "alltoall", d, s, stream=stream):
        return
    if _mpi.spans_nodes(call):
        call.keep(key, _mpi.alltoall_runner(call, d, s))
        return
    m, me = s.size // call.n, call.me
    mine = slice(me * m, (me + 1) * m)
    blocks = [d[rank * m:(rank + 1) * m] for rank in range(call.n)]

    def exchange():
        for rank, block in enumerate(blocks):
            np.copyto(block, call.read(rank, "src", mine))
    call.keep(key, call.general(lambda: pull_all(call, exchange)))


def alltoalls(team, dest, src, dst_stride: int, src_stride: int, nelems: int, stream=None) -> None:
    """OpenSHMEM's strided all-to-all (``shmem_alltoalls``): element k of block j of member
    i's ``src``, at ``(j*nelems + k)*src_stride``, goes to ``(i*nelems + k)*dst_stride`` of
    member j's ``dest``. Strides count elements and are >= 1; ``dest`` and ``src`` are
    symmetric, of one dtype, and must not overlap; each must hold its team size x
    ``nelems`` strided elements. Elements between the strides of ``dest`` are left as they
    are. Collective over ``team``; ``stream`` as the other host collectives."""
    key = ("alltoalls", team, dst_stride, src_stride, nelems, id(dest), id(src))
    if type(team) is int and repeat(key, dest, src):
        return
    call = Call("pgas.alltoalls", team)
    d, s = call.arrays(dest, src)
    dst, sst, nelems = check_strided_blocks(call.fn, d, s, dst_stride, src_stride, nelems, call.n)
    no_overlap(call, d, s)
    if on_gpu(call, "alltoalls", d, s, dst, sst, nelems, stream=stream):
        return
    # block j of a member's array: its nelems elements, strided, from (j*nelems)*stride on
    # (none when nelems is 0, whatever the stride)
    def block(arr, j, stride):
        return arr[j * nelems * stride:][:nelems * stride:stride]
    if _mpi.spans_nodes(call):
        sent, received = np.empty((call.n, nelems), s.dtype), np.empty((call.n, nelems), d.dtype)
        exchange = _mpi.alltoall_runner(call, received, sent)

        def run():
            for rank in range(call.n):
                np.copyto(sent[rank], block(s, rank, sst))
            exchange()
            for rank in range(call.n):
                np.copyto(block(d, rank, dst), received[rank])
        call.keep(key, run)
        return
    me = call.me

    def exchange():
        for rank in range(call.n):
            np.copyto(block(d, rank, dst), block(call.read(rank, "src"), me, sst))
    call.keep(key, call.general(lambda: pull_all(call, exchange)))


def reducescatter(team, dest, src, op: str = "sum", stream=None) -> None:
    """Reduce every member's ``src`` element-wise with ``op``; member i keeps block i in ``dest``."""
    key = ("reducescatter", team, op, id(dest), id(src))
    if type(team) is int and repeat(key, dest, src):
        return
    call = Call("pgas.reducescatter", team)
    d, s = call.arrays(dest, src)
    checked_pair(call, d, s, d.size, call.n * d.size, "src must hold team size x dest.size elements")
    no_overlap(call, d, s)
    ufunc = reduction_ufunc(call.fn, op, d.dtype, on_device=call.rt.on_gpu)
    if staged(call, d, s, False, stream,
               lambda host_d, host_s: _mpi.reducescatter_runner(call, host_d, host_s, op, ufunc)()) or \
            on_gpu(call, f"{op}_reducescatter", d, s, stream=stream):
        return
    if _mpi.spans_nodes(call):
        call.keep(key, _mpi.reducescatter_runner(call, d, s, op, ufunc))
        return
    block = slice(call.me * d.size, (call.me + 1) * d.size)

    def reduce_my_block():
        reduce_into(d, [call.read(rank, "src", block) for rank in range(call.n)], ufunc)
    call.keep(key, call.general(lambda: pull_all(call, reduce_my_block)))


def reduce(team, dest, src, op: str = "sum", stream=None, *, algorithm: str = "auto") -> None:
    """All-reduce: ``dest`` on every member = ``op`` over all members' ``src``, element-wise.

    ``dest`` may be ``src`` (in place). ``algorithm``: ``auto``, ``eager`` (one round
    through staging buffers, small arrays on one node), ``ring``, ``tree`` (double binary
    tree), ``oneshot`` or ``mpi`` (MPI's own on the team's communicator; what ``auto``
    runs on a team that spans nodes). Every member gets bit-identical results.
    """
    key = ("reduce", team, op, algorithm, id(dest), id(src))
    if type(team) is int and repeat(key, dest, src):
        return
    call = Call("pgas.reduce", team)
    d, s, in_place, ufunc = reduction_pair(call, dest, src, op)
    if algorithm not in ALGORITHMS:
        raise PgasValueError(f"{call.fn}: algorithm must be one of {', '.join(ALGORITHMS)}, got {algorithm!r}")
    if call.rt.on_gpu and algorithm != "auto":
        raise PgasValueError(
            f"{call.fn}: algorithm={algorithm!r} is one of the simulator's host algorithms; on the cuda "
            "backend a host reduction runs the device all-reduce as a kernel: use algorithm='auto'")
    if staged(call, d, s, in_place, stream,
               lambda host_d, host_s: _mpi.reduce_runner(call, host_d, host_s, op, ufunc, in_place)()) or \
            on_gpu(call, f"{op}_reduce", d, s, stream=stream):
        return
    chosen = auto_algorithm(call.rt, call.team, d.nbytes) if algorithm == "auto" else algorithm
    if chosen == "mpi":
        call.keep(key, _mpi.reduce_runner(call, d, s, op, ufunc, in_place))
    elif chosen == "eager":
        if not _eager.usable(call.rt, call.team, d.nbytes):
            raise PgasValueError(
                f"{call.fn}: algorithm='eager' needs every team member's heap mapped here (one node) and at "
                f"most {_eager.capacity(call.rt, call.slot)} bytes per member; got {d.nbytes} bytes on a team "
                f"of PEs {list(call.team.pes)}")
        call.keep(key, _eager.runner(call, "reduce", op))
    elif call.n == 1:
        call.keep(key, call.general(lambda: None if in_place else np.copyto(d, s)))
    else:
        algorithm_body = {"oneshot": _oneshot, "ring": _ring, "tree": _tree}[chosen]
        call.keep(key, call.general(lambda: algorithm_body(call, d, s, ufunc, in_place)))


def auto_algorithm(rt, team, nbytes: int) -> str:
    """What ``algorithm="auto"`` runs for an all-reduce of ``nbytes`` on ``team`` (a Team)
    here: MPI's on a team that spans nodes, else by size."""
    if not all(rt.heap.reachable(pe) for pe in team.pes):
        return "mpi"
    return choose_algorithm(nbytes, team.size, _runs_eager(rt, team, "reduce", nbytes))


def _runs_eager(rt, team, kind: str, nbytes: int) -> bool:
    """Whether collective ``kind`` of ``nbytes`` per member on ``team`` runs eagerly by choice."""
    return nbytes <= _EAGER_LARGEST.get(kind, nbytes) and _eager.usable(rt, team, nbytes)


def choose_algorithm(nbytes: int, n_pes: int, eager: bool = False) -> str:
    """What ``algorithm="auto"`` runs for ``nbytes`` over ``n_pes`` members; ``eager``:
    whether the eager path can run (``_eager.usable``).

    Eager (one synchronization round, through staging buffers) where it can run, up to
    _EAGER_LARGEST: it beat every other algorithm there. Above, oneshot reads n_pes x nbytes
    per member, the ring about 2 x nbytes: oneshot wins while that is small, and always
    on 2 PEs (the same traffic, fewer steps). Measured crossovers: docs/collectives.md.

    The double binary tree is never chosen: on the machines measured so far (up to 8 PEs)
    the ring beat it at every size; its log(n) depth pays off at scales not measured yet.
    """
    if eager:
        return "eager"
    if n_pes <= 2 or nbytes * n_pes <= _ONESHOT_MAX_TRAFFIC:
        return "oneshot"
    return "ring"


def _oneshot(call: Call, d, s, ufunc, in_place) -> None:
    result = np.empty_like(d) if in_place else d

    def reduce_all():
        reduce_into(result, [call.read(rank, "src") for rank in range(call.n)], ufunc)
    pull_all(call, reduce_all)
    if in_place:
        np.copyto(d, result)


def _ring(call: Call, d, s, ufunc, in_place) -> None:
    """Chunk c of the result is reduced along the ring, finished at one member, then passed on.

    RING word of member r: 1 once its own chunk r holds its src, 1+k+1 after reduce-scatter
    step k, n+k+1 after all-gather step k. A member reads only its left neighbour's dest,
    and overwrites a chunk only after its right neighbour has read it. Each reduce-scatter
    step reads src and the neighbour's partial and writes dest in one pass.
    """
    n, me = call.n, call.me
    left, right = (me - 1) % n, (me + 1) % n
    edges = [d.size * i // n for i in range(n + 1)]
    chunk = [slice(edges[c], edges[c + 1]) for c in range(n)]
    if not in_place:
        np.copyto(d[chunk[me]], s[chunk[me]])   # the only chunk my right neighbour reads unreduced
    call.publish(RING, 1)
    for k in range(n - 1):                       # reduce-scatter
        c = chunk[(me - k - 1) % n]
        call.wait(left, RING, k + 1, f"(ring reduce-scatter step {k})")
        ufunc(s[c], call.read(left, "dest", c), out=d[c])
        call.publish(RING, k + 2)
    for k in range(n - 1):                       # all-gather
        c = chunk[(me - k) % n]
        call.wait(left, RING, n + k, f"(ring all-gather step {k})")
        call.wait(right, RING, k + 2, f"(ring reduce-scatter step {k})")
        np.copyto(d[c], call.read(left, "dest", c))
        call.publish(RING, n + k + 1)
    call.wait(right, RING, 2 * n - 1, "(end of the ring)")


def _tree(call: Call, d, s, ufunc, in_place) -> None:
    """Double binary tree: tree t reduces half t of the data up to its root in chunks and
    copies the result back down. UP_t / DOWN_t of a member count the chunks it has
    reduced / received."""
    n, me = call.n, call.me
    half = d.size // 2
    trees = double_binary_tree(n, me)
    ranges = ((0, half), (half, d.size))
    per_chunk = max(1, _TREE_CHUNK_BYTES // d.itemsize)
    chunks = [[slice(lo, min(lo + per_chunk, hi)) for lo in range(start, hi, per_chunk)]
              for start, hi in ranges]
    words = ((UP0, DOWN0), (UP1, DOWN1))
    rounds = max(len(c) for c in chunks)
    for i in range(rounds):                      # reduce up both trees
        for t, tree in enumerate(trees):
            if i >= len(chunks[t]):
                continue
            c, (up, down) = chunks[t][i], words[t]
            for child in tree.children:
                call.wait(child, up, i + 1, f"(tree {t} reduce, chunk {i})")
            reduce_into(d[c], [s[c], *(call.read(child, "dest", c) for child in tree.children)], ufunc)
            call.publish(up, i + 1)
            if tree.parent < 0:
                call.publish(down, i + 1)
    for i in range(rounds):                      # copy the result down both trees
        for t, tree in enumerate(trees):
            if i >= len(chunks[t]) or tree.parent < 0:
                continue
            c, (_, down) = chunks[t][i], words[t]
            call.wait(tree.parent, down, i + 1, f"(tree {t} broadcast, chunk {i})")
            np.copyto(d[c], call.read(tree.parent, "dest", c))
            call.publish(down, i + 1)
    for t, tree in enumerate(trees):             # children have read my dest
        for child in tree.children if chunks[t] else ():
            call.wait(child, words[t][1], len(chunks[t]), f"(tree {t} end)")
