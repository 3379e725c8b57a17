"""Eager collectives: small broadcast, fcollect and all-reduce in one synchronization round.

The general algorithms (``_collectives``) read the peers' arrays in place, so each call
takes two rounds: every member ready, then every member done reading (before any may
change its ``src``). Here, as in MPI's eager protocol, each member first copies its
contribution into its own staging buffer for the team, publishes the call's number in its
eager word (release), waits for the words of the members it reads (acquire) and reads
their buffers: one round. Each member has EAGER_REGIONS buffers per team, used by
successive eager calls in turn. A member writes the buffer of call m again at call
m + EAGER_REGIONS, and only once every member has published call m + 1, which each does
after it has finished reading call m; so a broadcast root may run that many calls ahead
of its slowest reader (fewer switches between PEs that share a core).

Eager runs (simulator backend) where every member's heap is mapped here and one member's
contribution fits its buffer (``capacity``); ``choose_algorithm`` picks it by measured
crossovers (docs/collectives.md).
"""
from __future__ import annotations

import os

import numpy as np
from numba import typeof, types

from ...core._reductions import OPS, reduce_into
from ...core._waiting import HOST_WAIT_BACKOFF_S, Wait
from ...runtime._state import EAGER_BYTES, EAGER_FIRST, EAGER_REGIONS
from . import _eager_code
from ._fold_code import compiled_fold

__all__ = ["EAGER_WORD", "capacity", "usable", "runner"]

EAGER_WORD = 7                  # the column of Runtime.collective_words these calls count in
_SPIN_S = 1e-3                  # waits yield the core this long before sleeping
_POLLS = 20                     # loads (0.1 us each) before a wait yields, on a machine with a core per PE
_YIELDS = 16                    # yields before a wait starts its clock (PGAS_TIMEOUT counts from there)
COMPILE_AFTER = 32              # calls of one kept all-reduce before it folds with compiled code


def capacity(rt, slot: int) -> int:
    """Bytes per member an eager call on team ``slot`` can take (0 on the cuda backend)."""
    return 0 if rt.eager_offset is None else EAGER_BYTES[slot]


def usable(rt, team, nbytes: int) -> bool:
    """True when an eager call of ``nbytes`` per member can run on ``team`` here."""
    return nbytes <= capacity(rt, team.handle) and all(rt.heap.reachable(pe) for pe in team.pes)


def _staging(rt, team) -> list:
    """[region][rank]: the staging buffers of ``team``'s members, as bytes (made once per
    team, dropped with the progress-word accessors when its slot is reused)."""
    if team.handle not in rt.eager_staging:
        first, size = rt.eager_offset + EAGER_FIRST[team.handle], EAGER_BYTES[team.handle]
        rt.eager_staging[team.handle] = [[rt.heap.views[pe][first + r * size:first + (r + 1) * size]
                                          for pe in team.pes] for r in range(EAGER_REGIONS)]
    return rt.eager_staging[team.handle]


def _compiled_runner(fold, call, regions, contribute, gather, polls: int):
    """A kept eager all-reduce's body in compiled code: one native call
    (``_eager_code.reduce_now``) where no member is behind, else the rest of it here and
    the fold (``_eager_code.fold_now``: the compiled fold, ``_fold_code``, on the table's
    addresses of ``dest`` and of the call's staging buffers; ``src`` and ``dest`` are the
    call's 1-D contiguous views)."""
    rt, team = call.rt, call.team
    row = rt.collective_words[call.slot][EAGER_WORD:EAGER_WORD + 1]
    words = [rt.heap.view_on(pe, row, call.fn, "the team's progress words") for pe in team.pes]
    table = _eager_code.table(rt.eager_counts[team.handle], call.s, call.d, fold, words, regions, team.my_index,
                              polls)
    # their compiled forms (one type each: no dispatch per call)
    reduce_now = _eager_code.reduce_now.compile((typeof(table),))
    fold_now = _eager_code.fold_now.compile((typeof(table), types.int64))

    def run(words=words):   # (the default holds the words the table points to)
        number = reduce_now(table)
        if number == -1:
            return
        if number == 0:
            number, _ = contribute()
        gather(number)
        fold_now(table, number)
    return run


def runner(call, kind: str, extra):
    """The body of eager collective ``kind`` (reduce, fcollect, broadcast) on the checked
    arrays of ``call`` (``_collective_call.Call``), with everything bound that a repeated call
    needs (each lookup saved counts at these sizes). ``extra``: the op of a reduce (its
    name), the root rank of a broadcast."""
    fn, rt, team, d, s = call.fn, call.rt, call.team, call.d, call.s
    word_loads, word_stores = call.accessors()
    loads, store = [member[EAGER_WORD] for member in word_loads], word_stores[EAGER_WORD]
    # regions[r][rank]: member rank's staging buffer r, as src's dtype and size; call m uses m % EAGER_REGIONS
    regions = [[buffer[:s.nbytes].view(s.dtype) for buffer in members] for members in _staging(rt, team)]
    polls = 0 if rt.boot.oversubscribed else _POLLS
    me = team.my_index
    others = [(rank, loads[rank]) for rank in range(team.size) if rank != me]
    # [eager calls on the team so far, the highest call number every member is known to have published]
    state = rt.eager_state[team.handle]

    def wait(rank: int, load, number: int, what: str) -> None:
        for _ in range(polls):          # a peer a microsecond behind: cheaper than a yield
            if load() >= number:
                return
        for _ in range(_YIELDS):        # a peer on this core: let it run (no clock to start yet)
            os.sched_yield()
            if load() >= number:
                return
        clock = Wait(fn, rt.timeout, spin_s=_SPIN_S, backoff_s=HOST_WAIT_BACKOFF_S)
        waiting_for = f"PE {team.pes[rank]} {what}"
        while load() < number:
            clock.pause(waiting_for)

    def contribute() -> tuple[int, list]:
        """Number the call and publish my contribution; the call's buffers."""
        number = state[0] = state[0] + 1
        buffers = regions[number % EAGER_REGIONS]
        past = number - EAGER_REGIONS + 1       # my buffer was last read at call number - EAGER_REGIONS
        if state[1] < past:
            for rank, load in others:
                if load() < past:
                    wait(rank, load, past, "to finish reading an earlier eager collective")
            state[1] = past
        buffers[me][...] = s
        store(number)
        return number, buffers

    def gather(number: int) -> None:
        for rank, load in others:
            if load() < number:
                wait(rank, load, number, "to publish its contribution")
        state[1] = number

    if kind == "reduce":
        ufunc = OPS[extra]
        # numpy folds the first calls; once this call has run COMPILE_AFTER times, compiled code
        compiled = []
        calls_left = [COMPILE_AFTER if d.flags.c_contiguous else -1]

        def run():
            if compiled:
                compiled[0]()
                return
            number, buffers = contribute()
            gather(number)
            if team.size == 2:
                ufunc(buffers[0], buffers[1], out=d)     # reduce_into's one step, without its call
            else:
                reduce_into(d, buffers, ufunc)
            calls_left[0] -= 1
            if calls_left[0] == 0:
                fold = compiled_fold(s.dtype, extra)
                if fold is not None:
                    compiled.append(_compiled_runner(fold, call, regions, contribute, gather, polls))
    elif kind == "fcollect":
        blocks = [d[r * s.size:(r + 1) * s.size] for r in range(team.size)]
        copies = [list(zip(blocks, buffers)) for buffers in regions]

        def run():
            number, _ = contribute()
            gather(number)
            for block, buffer in copies[number % EAGER_REGIONS]:
                block[...] = buffer
    elif me == extra:       # broadcast, the root
        same = np.shares_memory(d, s)

        def run():
            contribute()
            if not same:
                d[...] = s
    else:                   # broadcast, a member that reads the root's buffer
        root_load = loads[extra]

        def run():
            number = state[0] = state[0] + 1
            store(number)
            if root_load() < number:
                wait(extra, root_load, number, "(the root) to publish the broadcast")
            d[...] = regions[number % EAGER_REGIONS][extra]
    return run
