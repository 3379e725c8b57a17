"""Host collectives over a team: broadcast, fcollect, alltoall, reduce, reducescatter.

Every member reads what it needs straight from its peers' mapped heaps (pull) and does
the arithmetic with numpy on whole slices, so data moves at memory speed. Members on
other nodes are read through the NIC (RDMA reads of the same slices and of the progress
words), so every collective also works on teams that span nodes. Members
coordinate through progress words in the heap: each publishes how far it has got
(release store) and waits for the peers it reads from (acquire loads, PGAS_TIMEOUT).
Counters only grow: call k of a team publishes values from k * _STRIDE, so words need
no reset between calls.

All-reduce (``reduce``) has three algorithms:

- ``oneshot`` (latency): every member reads every peer's ``src`` and reduces it locally.
- ``ring``: reduce-scatter then all-gather round the ring, one chunk per member.
- ``tree``: NCCL's double binary tree (``pgas/host/_trees.py``); each tree carries half of
  the data, in pipelined chunks reduced up the tree and copied down.

``auto`` picks by size and PE count (measured crossovers: docs/collectives.md).
``stream`` is accepted for source compatibility; on the simulator backend these are
synchronous. On the cuda backend every collective, after the same argument checks, runs
the device collective of ``pgas.device`` as a one-block kernel queued on ``stream``
(``_gpu_ops.collective``), as NVSHMEM's ``*_on_stream`` collectives do.
"""
from __future__ import annotations

import numpy as np

from ..core import _cpu_atomics
from ..core._checks import check_contiguous, check_dtypes_match, check_root
from ..core._errors import PgasValueError
from ..core._reductions import reduce_into, reduction_ufunc
from ..core._waiting import Wait
from ..runtime._arrays import array_span, as_ndarray, overlap
from ..runtime._state import current, runtime
from ..runtime._team_table import team_of
from . import _eager
from ._trees import double_binary_tree

__all__ = ["broadcast", "fcollect", "alltoall", "reduce", "reducescatter", "ALGORITHMS"]

ALGORITHMS = ("auto", "eager", "ring", "tree", "oneshot")
_STRIDE = 1 << 32
# progress words (columns of Runtime.collective_words)
_READY, _DONE, _RING, _UP0, _DOWN0, _UP1, _DOWN1 = range(7)
_TREE_CHUNK_BYTES = 1 << 20          # pipelining unit of the tree
_ONESHOT_MAX_TRAFFIC = 4 << 20      # auto: oneshot while n_pes x bytes stays below this
_SPIN_S = 1e-3                       # waits yield the core this long before sleeping
_CACHED_PLANS = 256                  # kept calls per PE (all dropped when full)
# The largest call (bytes per member) each collective runs eagerly where it can; above it
# the general algorithms were faster (docs/collectives.md). Broadcast: up to the staging size.
_EAGER_LARGEST = {"fcollect": 32 << 10, "reduce": 64 << 10}


class _Call:
    """One collective call on one team, once its arguments are checked: the flat data of
    dest and src, the members' copies of them, the progress words. Kept (``keep``) under
    the call's arguments, it runs again for a repeated call without any of that work."""

    def __init__(self, fn: str, team):
        rt = runtime(fn)
        self.fn, self.rt = fn, rt
        self.team = team_of(rt, team, fn)
        self.slot, self.me, self.n = self.team.handle, self.team.my_index, self.team.size

    def arrays(self, dest, src) -> tuple[np.ndarray, np.ndarray]:
        """The flat data of symmetric ``dest`` and ``src`` (C-contiguous, in the heap)."""
        self.dest, self.src = dest, src
        self.d, self.s = self._symmetric(dest, "dest"), self._symmetric(src, "src")
        return self.d, self.s

    def _symmetric(self, arr, what: str) -> np.ndarray:
        data = as_ndarray(arr, self.fn, what)
        check_contiguous(self.fn, what, data)
        self.rt.heap.offset_of(data, self.fn, what)
        return data.reshape(-1)

    def keep(self, key: tuple, body) -> None:
        """Run ``body`` (eager: an ``_eager.runner``), now and for every repeat of this call.
        The call does not hold its body (which holds the call): no reference cycle, so a
        dropped one is freed at once rather than by the cyclic garbage collector."""
        plans = self.rt.collective_plans
        if len(plans) >= _CACHED_PLANS:
            plans.clear()
        plans[key] = (self.dest, self.src, self, body)
        placed = _placed(key, self.dest, self.src)
        if placed is not None:
            plans[placed] = (None, None, self, body)
        body()

    def general(self, body):
        """``body`` as a call of the general algorithms: numbered first (``start``)."""
        def run():
            self.start()
            body()
        return run

    def start(self) -> None:
        """Number this call among the team's calls of the general algorithms (eager calls
        keep their own count); the clock of its waits."""
        calls = self.rt.collective_calls
        calls[self.slot] += 1
        self.base = calls[self.slot] * _STRIDE
        self.clock = Wait(self.fn, self.rt.timeout, spin_s=_SPIN_S)
        if not hasattr(self, "loads"):
            self.loads, self.stores = self.accessors()
            self.views = {}     # (which, rank) -> that member's copy, made on first read

    def accessors(self):
        """(loads[rank][word], stores[word]) of the team's progress words (made once per team)."""
        slot = self.slot
        if slot not in self.rt.collective_cache:
            self.rt.collective_cache[slot] = self._word_accessors(slot)
        return self.rt.collective_cache[slot]

    def _word_accessors(self, slot: int):
        """Per member: acquire loads of each progress word (atomic reads through the NIC
        for members on other nodes); mine: release stores."""
        row = self.rt.collective_words[slot]
        loader = self.rt.transports.word_loader
        loads = [[loader(self.fn, pe, row[w:w + 1], "the team's progress words") for w in range(len(row))]
                 for pe in self.team.pes]
        stores = [_cpu_atomics.int64_word(row[w:w + 1], self.fn, "progress")[1] for w in range(len(row))]
        return loads, stores

    def peer(self, rank: int, which: str):
        """Member ``rank``'s copy of this call's ``which`` ("src" or "dest") where it is
        mapped here (a view, made once), else None."""
        key = (which, rank)
        if key not in self.views:
            pe, heap = self.team.pes[rank], self.rt.heap
            mine = self.s if which == "src" else self.d
            self.views[key] = heap.view_on(pe, mine, self.fn, which) if heap.reachable(pe) else None
        return self.views[key]

    def read(self, rank: int, which: str, part: slice = slice(None)) -> np.ndarray:
        """Elements ``part`` of member ``rank``'s copy of this call's ``which`` ("src" or
        "dest") as they are now: a view where mapped, else a copy fetched through the NIC
        (read it again after it changes)."""
        view = self.peer(rank, which)
        if view is not None:
            return view[part]
        mine = self.s if which == "src" else self.d
        return self.rt.transports.read(self.fn, self.team.pes[rank], mine[part], which)

    def publish(self, word: int, step: int) -> None:
        self.stores[word](self.base + step)

    def wait(self, rank: int, word: int, step: int, what: str) -> None:
        target, load = self.base + step, self.loads[rank][word]
        while load() < target:
            self.clock.pause(lambda: f"PE {self.team.pes[rank]} {what}")

    def wait_others(self, word: int, step: int, what: str) -> None:
        for rank in range(self.n):
            if rank != self.me:
                self.wait(rank, word, step, what)


def _repeat(key: tuple, dest, src) -> bool:
    """Run the call kept for this one, if there is one and its team still exists: True.
    Before init there is none (the full call says so).

    ``key``: the collective, its team handle and options, then ``id(dest)``, ``id(src)``.
    A call is kept under the objects it was made with, and also under where its arrays
    lie (``_placed``), so that a new slice of the same elements each time (``dest[:n]`` in
    a loop) finds it too, without making a new call (and its many objects, which the
    cyclic garbage collector would then have to walk) each time. Entries:
    (dest, src, the call, its body) by ids; (None, None, the call, its body) by place."""
    rt = current()
    if rt is None:
        return False
    plans = rt.collective_plans
    kept = plans.get(key)
    if kept is None or kept[0] is not dest or kept[1] is not src:
        placed = _placed(key, dest, src)
        kept = plans.get(placed) if placed is not None else None
        if kept is None:
            return False
        kept = plans[key] = (dest, src, kept[2], kept[3])     # these objects now find it at once
    call = kept[2]
    if rt.teams[call.slot] is not call.team:
        return False
    kept[3]()
    return True


def _placed(key: tuple, dest, src):
    """``key`` with the ids replaced by where dest's and src's elements lie and how
    (address, shape, strides, dtype), or None where they are not plain numpy arrays (or the
    simulator's device arrays around them) with the same dtype."""
    d = getattr(dest, "_ary", dest)
    s = getattr(src, "_ary", src)
    if type(d) is not np.ndarray or type(s) is not np.ndarray or d.dtype != s.dtype:
        return None
    return (*key[:-2], *array_span(d, "pgas", "dest"), *array_span(s, "pgas", "src"), d.dtype)


def _checked_pair(call: _Call, d, s, dest_size, src_size, why: str) -> None:
    check_dtypes_match(call.fn, d, s)
    if d.size != dest_size or s.size != src_size:
        raise PgasValueError(f"{call.fn}: {why}; got dest of {d.size} and src of {s.size} elements")


def _no_overlap(call: _Call, d, s) -> None:
    if overlap(d, s, call.fn):
        raise PgasValueError(f"{call.fn}: dest and src must not overlap")


def _on_gpu(call: _Call, name: str, d, s, *extra, stream) -> bool:
    """On the cuda backend, run the collective as a kernel (queued on ``stream``); True if so."""
    if not call.rt.on_gpu:
        return False
    from . import _gpu_ops
    _gpu_ops.collective(name, call.team.handle, d, s, *extra, pes=call.team.pes, stream=stream, fn=call.fn)
    return True


def _pull_all(call: _Call, body) -> None:
    """Ready / read / done: ``body()`` reads the peers' ``src``; nobody's ``src`` may change
    until every reader is done."""
    call.publish(_READY, 1)
    call.wait_others(_READY, 1, "to enter the collective")
    body()
    call.publish(_DONE, 1)
    call.wait_others(_DONE, 1, "to finish reading")


def broadcast(team, dest, src, root: int, stream=None) -> None:
    """Copy team rank ``root``'s ``src`` into ``dest`` on every member (root included)."""
    key = ("broadcast", team, root, id(dest), id(src))
    if type(team) is int and type(root) is int and _repeat(key, dest, src):
        return
    call = _Call("pgas.broadcast", team)
    d, s = call.arrays(dest, src)
    check_dtypes_match(call.fn, d, s)
    if d.size != s.size:
        raise PgasValueError(f"{call.fn}: dest and src must have the same size, got {d.size} and {s.size}")
    check_root(call.fn, root, call.n)
    if _on_gpu(call, "broadcast", d, s, root, stream=stream):
        return
    root = int(root)
    if _runs_eager(call.rt, call.team, "broadcast", s.nbytes):
        call.keep(key, _eager.runner(call, "broadcast", root))
        return
    same = np.shares_memory(d, s)
    if all(call.rt.heap.reachable(pe) for pe in call.team.pes):
        call.keep(key, call.general(lambda: _shared_broadcast(call, d, s, root, same)))
        return

    def run():
        if call.me == root:
            call.publish(_READY, 1)
            if not same:
                np.copyto(d, s)
            for rank in range(call.n):
                if rank != root:
                    call.wait(rank, _DONE, 1, "to finish reading the root's src")
        else:
            call.wait(root, _READY, 1, "(the root) to enter the broadcast")
            np.copyto(d, call.read(root, "src"))
            call.publish(_DONE, 1)
    call.keep(key, call.general(run))


def _shared_broadcast(call: _Call, d, s, root: int, same: bool) -> None:
    """Broadcast on a team whose heaps are all mapped here: member r copies part r of the
    root's src into every other member's dest, so every member (the root too) does a
    share of the copying rather than each reader all of its own."""
    n, me = call.n, call.me
    part = slice(s.size * me // n, s.size * (me + 1) // n)
    call.publish(_READY, 1)
    call.wait_others(_READY, 1, "to enter the broadcast")      # every dest may be written now
    theirs = call.peer(root, "src")[part]
    for rank in range(n):
        if rank != root:
            np.copyto(call.peer(rank, "dest")[part], theirs)
    if me == root and not same:
        np.copyto(d, s)
    call.publish(_DONE, 1)
    call.wait_others(_DONE, 1, "to finish its part of the broadcast")


def fcollect(team, dest, src, stream=None) -> None:
    """Concatenate every member's ``src`` into ``dest`` (all-gather), in team-rank order."""
    key = ("fcollect", team, id(dest), id(src))
    if type(team) is int and _repeat(key, dest, src):
        return
    call = _Call("pgas.fcollect", team)
    d, s = call.arrays(dest, src)
    _checked_pair(call, d, s, call.n * s.size, s.size, "dest must hold team size x src.size elements")
    _no_overlap(call, d, s)
    if _on_gpu(call, "fcollect", d, s, stream=stream):
        return
    if _runs_eager(call.rt, call.team, "fcollect", s.nbytes):
        call.keep(key, _eager.runner(call, "fcollect", None))
        return
    m = s.size
    blocks = [d[rank * m:(rank + 1) * m] for rank in range(call.n)]

    def gather():
        for rank, block in enumerate(blocks):
            np.copyto(block, call.read(rank, "src"))
    call.keep(key, call.general(lambda: _pull_all(call, gather)))


def alltoall(team, dest, src, stream=None) -> None:
    """Block j of member i's ``src`` goes to block i of member j's ``dest`` (equal blocks)."""
    key = ("alltoall", team, id(dest), id(src))
    if type(team) is int and _repeat(key, dest, src):
        return
    call = _Call("pgas.alltoall", team)
    s = call._symmetric(src, "src")
    if s.size % call.n:
        raise PgasValueError(f"{call.fn}: src.size ({s.size}) must be a multiple of the team size ({call.n})")
    d, s = call.arrays(dest, src)
    _checked_pair(call, d, s, s.size, s.size, "dest and src must have the same size")
    _no_overlap(call, d, s)
    if _on_gpu(call, "alltoall", d, s, stream=stream):
        return
    m, me = s.size // call.n, call.me
    mine = slice(me * m, (me + 1) * m)
    blocks = [d[rank * m:(rank + 1) * m] for rank in range(call.n)]

    def exchange():
        for rank, block in enumerate(blocks):
            np.copyto(block, call.read(rank, "src", mine))
    call.keep(key, call.general(lambda: _pull_all(call, exchange)))


def reducescatter(team, dest, src, op: str = "sum", stream=None) -> None:
    """Reduce every member's ``src`` element-wise with ``op``; member i keeps block i in ``dest``."""
    key = ("reducescatter", team, op, id(dest), id(src))
    if type(team) is int and _repeat(key, dest, src):
        return
    call = _Call("pgas.reducescatter", team)
    d, s = call.arrays(dest, src)
    _checked_pair(call, d, s, d.size, call.n * d.size, "src must hold team size x dest.size elements")
    _no_overlap(call, d, s)
    ufunc = reduction_ufunc(call.fn, op, d.dtype)
    if _on_gpu(call, f"{op}_reducescatter", d, s, stream=stream):
        return
    m, me = d.size, call.me
    block = slice(me * m, (me + 1) * m)

    def reduce_my_block():
        reduce_into(d, [call.read(rank, "src", block) for rank in range(call.n)], ufunc)
    call.keep(key, call.general(lambda: _pull_all(call, reduce_my_block)))


def reduce(team, dest, src, op: str = "sum", stream=None, *, algorithm: str = "auto") -> None:
    """All-reduce: ``dest`` on every member = ``op`` over all members' ``src``, element-wise.

    ``dest`` may be ``src`` (in place). ``algorithm``: ``auto``, ``eager`` (one round
    through staging buffers, small arrays on one node), ``ring``, ``tree`` (double binary
    tree) or ``oneshot``. Every member gets bit-identical results.
    """
    key = ("reduce", team, op, algorithm, id(dest), id(src))
    if type(team) is int and _repeat(key, dest, src):
        return
    call = _Call("pgas.reduce", team)
    d, s = call.arrays(dest, src)
    _checked_pair(call, d, s, s.size, s.size, "dest and src must have the same size")
    in_place = overlap(d, s, call.fn)
    if in_place and array_span(d, call.fn, "dest")[0] != array_span(s, call.fn, "src")[0]:
        raise PgasValueError(f"{call.fn}: dest and src must be the same array or not overlap")
    ufunc = reduction_ufunc(call.fn, op, d.dtype)
    if algorithm not in ALGORITHMS:
        raise PgasValueError(f"{call.fn}: algorithm must be one of {', '.join(ALGORITHMS)}, got {algorithm!r}")
    if call.rt.on_gpu and algorithm != "auto":
        raise PgasValueError(
            f"{call.fn}: algorithm={algorithm!r} is one of the simulator's host algorithms; on the cuda "
            "backend a host reduction runs the device all-reduce as a kernel: use algorithm='auto'")
    if _on_gpu(call, f"{op}_reduce", d, s, stream=stream):
        return
    chosen = auto_algorithm(call.rt, call.team, d.nbytes) if algorithm == "auto" else algorithm
    if chosen == "eager":
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
    """What ``algorithm="auto"`` runs for an all-reduce of ``nbytes`` on ``team`` (a Team) here."""
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


def _oneshot(call: _Call, d, s, ufunc, in_place) -> None:
    result = np.empty_like(d) if in_place else d

    def reduce_all():
        reduce_into(result, [call.read(rank, "src") for rank in range(call.n)], ufunc)
    _pull_all(call, reduce_all)
    if in_place:
        np.copyto(d, result)


def _ring(call: _Call, d, s, ufunc, in_place) -> None:
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
    call.publish(_RING, 1)
    for k in range(n - 1):                       # reduce-scatter
        c = chunk[(me - k - 1) % n]
        call.wait(left, _RING, k + 1, f"(ring reduce-scatter step {k})")
        ufunc(s[c], call.read(left, "dest", c), out=d[c])
        call.publish(_RING, k + 2)
    for k in range(n - 1):                       # all-gather
        c = chunk[(me - k) % n]
        call.wait(left, _RING, n + k, f"(ring all-gather step {k})")
        call.wait(right, _RING, k + 2, f"(ring reduce-scatter step {k})")
        np.copyto(d[c], call.read(left, "dest", c))
        call.publish(_RING, n + k + 1)
    call.wait(right, _RING, 2 * n - 1, "(end of the ring)")


def _tree(call: _Call, d, s, ufunc, in_place) -> None:
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
    words = ((_UP0, _DOWN0), (_UP1, _DOWN1))
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
