"""One host collective call on one team (``Call``): its checked arrays, the members' copies
of them, the progress words through which members wait for each other, and the calls kept
for repeats. The collectives themselves are in ``_collectives``.

Counters only grow: call k of a team publishes values from k * _STRIDE, so words need no
reset between calls.
"""
from __future__ import annotations

import numpy as np

from ...core.native import _cpu_atomics
from ...core._checks import check_contiguous, check_dtypes_match, check_same_order, contiguous_orders, flat
from ...core._errors import PgasValueError
from ...core._reductions import reduction_ufunc
from ...core._waiting import HOST_WAIT_BACKOFF_S, Wait
from ...runtime._arrays import array_span, as_ndarray, overlap
from ...runtime import _state
from ...runtime._state import runtime
from ...runtime._team_table import team_of
from ._mpi_collectives import spans_nodes

__all__ = ["Call", "repeat", "checked_pair", "reduction_pair", "no_overlap", "on_gpu", "pull_all", "READY", "DONE", "RING", "UP0",
           "DOWN0", "UP1", "DOWN1"]

_STRIDE = 1 << 32
_SPIN_S = 1e-3                       # waits yield the core this long before sleeping
_CACHED_PLANS = 256                  # kept calls per PE (all dropped when full)
# progress words (columns of Runtime.collective_words)
READY, DONE, RING, UP0, DOWN0, UP1, DOWN1 = range(7)


class Call:
    """One collective call on one team, once its arguments are checked: the flat data of
    dest and src, the members' copies of them, the progress words. Kept (``keep``) under
    the call's arguments, it runs again for a repeated call without any of that work."""

    def __init__(self, fn: str, team):
        rt = runtime(fn)
        self.fn, self.rt = fn, rt
        self.team = team_of(rt, team, fn)
        self.slot, self.me, self.n = self.team.handle, self.team.my_index, self.team.size

    def arrays(self, dest, src) -> tuple[np.ndarray, np.ndarray]:
        """The flat data of symmetric ``dest`` and ``src`` (in the heap, contiguous in one
        memory order, C or Fortran: flat in that order, as nvshmem4py's collectives take an
        array's memory as it lies)."""
        self.dest, self.src = dest, src
        d, s = as_ndarray(dest, self.fn, "dest"), as_ndarray(src, self.fn, "src")
        order = check_same_order(self.fn, d, s)
        self.d, self.s = self._symmetric(d, "dest", order), self._symmetric(s, "src", order)
        return self.d, self.s

    def _symmetric(self, arr, what: str, order: str | None = None) -> np.ndarray:
        data = as_ndarray(arr, self.fn, what)
        orders = contiguous_orders(data)
        if not orders:
            check_contiguous(self.fn, what, data)
        self.rt.symmetric_offset(data, self.fn, what)
        return flat(data, order or orders[0])

    def keep(self, key: tuple, body) -> None:
        """Run ``body`` (eager: an ``_eager.runner``), now and for every repeat of this call.
        The call does not hold its body (which holds the call): no reference cycle, so a
        dropped one is freed at once rather than by the cyclic garbage collector."""
        plans = self.rt.collective_plans
        if len(plans) >= _CACHED_PLANS:
            plans.clear()
        plans[key] = (self.dest, self.src, self, body, self.slot, self.team)
        placed = _placed(key, self.dest, self.src)
        if placed is not None:
            plans[placed] = (None, None, self, body, self.slot, self.team)
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
        self.clock = Wait(self.fn, self.rt.timeout, spin_s=_SPIN_S, backoff_s=HOST_WAIT_BACKOFF_S)
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


def repeat(key: tuple, dest, src) -> bool:
    """Run the call kept for this one, if there is one and its team still exists: True.
    Before init there is none (the full call says so).

    ``key``: the collective, its team handle and options, then ``id(dest)``, ``id(src)``.
    A call is kept under the objects it was made with, and also under where its arrays
    lie (``_placed``), so that a new slice of the same elements each time (``dest[:n]`` in
    a loop) finds it too, without making a new call (and its many objects, which the
    cyclic garbage collector would then have to walk) each time. Entries:
    (dest, src, the call, its body, team slot, team) by ids; (None, None, ...) by place.
    Every repeated collective passes here: it is written for speed (a microsecond of
    Python is a sixth of a small collective between two hosts)."""
    rt = _state._runtime
    if rt is None:
        return False
    kept = rt.collective_plans.get(key)
    if kept is None or kept[0] is not dest or kept[1] is not src:
        placed = _placed(key, dest, src)
        kept = rt.collective_plans.get(placed) if placed is not None else None
        if kept is None:
            return False
        kept = rt.collective_plans[key] = (dest, src, *kept[2:])     # these objects now find it at once
    if rt.teams[kept[4]] is not kept[5]:
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


def checked_pair(call: Call, d, s, dest_size, src_size, why: str) -> None:
    check_dtypes_match(call.fn, d, s)
    if d.size != dest_size or s.size != src_size:
        raise PgasValueError(f"{call.fn}: {why}; got dest of {d.size} and src of {s.size} elements")


def reduction_pair(call: Call, dest, src, op: str):
    """(d, s, in_place, ufunc) of an element-wise reduction or scan with ``op`` over equal
    ``dest`` and ``src``, which must be one array or not overlap at all."""
    d, s = call.arrays(dest, src)
    checked_pair(call, d, s, s.size, s.size, "dest and src must have the same size")
    in_place = overlap(d, s, call.fn)
    if in_place and array_span(d, call.fn, "dest")[0] != array_span(s, call.fn, "src")[0]:
        raise PgasValueError(f"{call.fn}: dest and src must be the same array or not overlap")
    return d, s, in_place, reduction_ufunc(call.fn, op, d.dtype, on_device=call.rt.on_gpu)


def no_overlap(call: Call, d, s) -> None:
    if overlap(d, s, call.fn):
        raise PgasValueError(f"{call.fn}: dest and src must not overlap")


def on_gpu(call: Call, name: str, d, s, *extra, stream) -> bool:
    """On the cuda backend, run the collective as a kernel (queued on ``stream``); True if so."""
    if not call.rt.on_gpu:
        return False
    from .. import _gpu_ops
    _gpu_ops.collective(name, call.team.handle, d, s, *extra, stream=stream, fn=call.fn)
    return True


def staged(call: Call, d, s, in_place: bool, stream, run_on_host) -> bool:
    """On the cuda backend, a reduction or scan over a team that spans nodes goes through
    host memory and MPI (``_gpu_ops.staged_collective``; ``run_on_host(host_dest,
    host_src)`` runs the simulator's runner of ``_mpi_collectives`` on the copies): the
    device reductions and scans read members' data in place, within a node only; True if so."""
    if not (call.rt.on_gpu and spans_nodes(call)):
        return False
    from .. import _gpu_ops
    _gpu_ops.staged_collective(d, s, in_place, stream, call.fn, run_on_host)
    return True


def pull_all(call: Call, body) -> None:
    """Ready / read / done: ``body()`` reads the peers' ``src``; nobody's ``src`` may change
    until every reader is done."""
    call.publish(READY, 1)
    call.wait_others(READY, 1, "to enter the collective")
    body()
    call.publish(DONE, 1)
    call.wait_others(DONE, 1, "to finish reading")
