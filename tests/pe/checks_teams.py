"""Teams: predefined, strided and 2-D splits, translation, team barriers (host and device), limits."""
import numpy as np
import pytest
from numba import cuda

import pgas
import pgas.device as dev
from _util import node_pes


@cuda.jit
def team_query_kernel(team, out):
    out[0] = dev.team_my_pe(team)
    out[1] = dev.team_n_pes(team)
    out[2] = dev.team_translate_pe(team, 0, dev.TEAM_WORLD)
    out[3] = dev.team_translate_pe(dev.TEAM_WORLD, dev.my_pe(), team)


@cuda.jit
def team_barrier_kernel(team, slots, seen, rounds, form):
    # form: 0 thread barrier, 1 thread sync(+quiet), 2 warp, 3 block
    me = dev.team_my_pe(team)
    n = dev.team_n_pes(team)
    t = cuda.threadIdx.x
    for r in range(rounds):
        if t == 0:
            for q in range(n):
                dev.p(slots[me:], r + 1, dev.team_translate_pe(team, q, dev.TEAM_WORLD))
        if form == 0:
            if t == 0:
                dev.barrier(team)
        elif form == 1:
            if t == 0:
                dev.quiet()
                dev.sync(team)
        elif form == 2:
            if t < 32:
                dev.barrier_warp(team)
        else:
            dev.barrier_block(team)
        cuda.syncthreads()
        if t == 0:
            for q in range(n):
                seen[r, q] = slots[q]
        if form == 3:
            dev.sync_block(team)
        elif t == 0:
            dev.sync(team)
        cuda.syncthreads()


@cuda.jit
def world_warp_barrier_kernel(slots, seen):
    me = dev.my_pe()
    t = cuda.threadIdx.x
    if t == 0:
        for pe in range(dev.n_pes()):
            dev.p(slots[me:], 7, pe)
    if t < 32:
        dev.barrier_all_warp()
        if t == 0:
            for pe in range(dev.n_pes()):
                seen[pe] = slots[pe]
        dev.sync_all_warp()


@cuda.jit
def bad_team_kernel(team, out):
    out[0] = dev.team_n_pes(team)


def _check_team_barriers(team):
    """Every PE calls this (allocation is collective over all PEs); members run the kernels."""
    rounds = 3
    for form in range(4):
        slots = pgas.zeros(pgas.n_pes(), np.int64)
        if team is not None:
            n = pgas.team_n_pes(team)
            seen = np.zeros((rounds, n), np.int64)
            team_barrier_kernel[1, 64](team, slots, seen, rounds, form)
            assert np.array_equal(seen, np.repeat(np.arange(1, rounds + 1)[:, None], n, axis=1)), form
            pgas.barrier(team)
        pgas.free(slots)


def check_predefined_teams():
    me, n = pgas.my_pe(), pgas.n_pes()
    assert pgas.team_my_pe(pgas.TEAM_WORLD) == me and pgas.team_n_pes(pgas.TEAM_WORLD) == n
    assert pgas.TEAM_SHARED == pgas.TEAM_NODE
    node = node_pes()     # all PEs, or those of this emulated node
    assert pgas.team_n_pes(pgas.TEAM_NODE) == len(node) and pgas.team_my_pe(pgas.TEAM_NODE) == node.index(me)
    assert [pgas.team_translate_pe(pgas.TEAM_NODE, r, pgas.TEAM_WORLD) for r in range(len(node))] == node
    out = np.zeros(4, np.int64)
    team_query_kernel[1, 1](pgas.TEAM_WORLD, out)
    assert out.tolist() == [me, n, 0, me]
    pgas.barrier(pgas.TEAM_WORLD)
    pgas.sync(pgas.TEAM_NODE)


def check_split_strided_members_queries_and_translation():
    me, n = pgas.my_pe(), pgas.n_pes()
    odd = pgas.team_split_strided(pgas.TEAM_WORLD, 1, 2, n // 2) if n >= 2 else None
    everyone_reversed_not_possible = pgas.team_split_strided(pgas.TEAM_WORLD, 0, 1, n)
    if n >= 2:
        if me % 2 == 1:
            assert odd is not None
            assert pgas.team_my_pe(odd) == me // 2 and pgas.team_n_pes(odd) == n // 2
            assert pgas.team_translate_pe(odd, 0, pgas.TEAM_WORLD) == 1
            assert pgas.team_translate_pe(pgas.TEAM_WORLD, 0, odd) == -1
            out = np.zeros(4, np.int64)
            team_query_kernel[1, 1](odd, out)
            assert out.tolist() == [me // 2, n // 2, 1, me // 2]
        else:
            assert odd is None
            assert pgas.team_my_pe(odd) == -1 and pgas.team_n_pes(odd) == -1
    assert pgas.team_my_pe(everyone_reversed_not_possible) == me
    pgas.team_destroy(odd)
    pgas.team_destroy(everyone_reversed_not_possible)


def check_team_barriers_host_and_device_every_form():
    me, n = pgas.my_pe(), pgas.n_pes()
    _check_team_barriers(pgas.TEAM_WORLD)
    evens = pgas.team_split_strided(pgas.TEAM_WORLD, 0, 2, (n + 1) // 2)
    _check_team_barriers(evens)
    if evens is not None:
        pgas.sync(evens)
    pgas.team_destroy(evens)
    slots = pgas.zeros(n, np.int64)
    seen = np.zeros(n, np.int64)
    world_warp_barrier_kernel[1, 64](slots, seen)
    assert seen.tolist() == [7] * n
    pgas.barrier_all()
    pgas.free(slots)


def check_split_2d_rows_and_columns():
    me, n = pgas.my_pe(), pgas.n_pes()
    xrange_ = 2
    xteam, yteam = pgas.team_split_2d(pgas.TEAM_WORLD, xrange_)
    row_start = me - me % xrange_
    assert pgas.team_my_pe(xteam) == me % xrange_
    assert pgas.team_n_pes(xteam) == min(xrange_, n - row_start)
    assert pgas.team_my_pe(yteam) == me // xrange_
    assert pgas.team_n_pes(yteam) == len(range(me % xrange_, n, xrange_))
    assert pgas.team_translate_pe(xteam, 0, pgas.TEAM_WORLD) == row_start
    assert pgas.team_translate_pe(yteam, 0, pgas.TEAM_WORLD) == me % xrange_
    _check_team_barriers(xteam)
    _check_team_barriers(yteam)
    pgas.team_destroy(xteam)
    pgas.team_destroy(yteam)


def check_team_limit_and_slot_reuse():
    made = []
    with pytest.raises(pgas.PgasError, match=r"pgas.team_split_strided: no free team slot: at most "
                                             r"pgas.MAX_TEAMS=32 teams may exist at once"):
        while True:
            made.append(pgas.team_split_strided(pgas.TEAM_WORLD, 0, 1, pgas.n_pes()))
    assert len(made) == pgas.MAX_TEAMS - 2
    for team in made:
        pgas.team_destroy(team)
    again = pgas.team_split_strided(pgas.TEAM_WORLD, 0, 1, pgas.n_pes())
    _check_team_barriers(again)        # barrier words of a reused slot start afresh
    pgas.team_destroy(again)


def check_team_errors():
    n = pgas.n_pes()
    with pytest.raises(pgas.PgasError, match=r"pgas.team_destroy: TEAM_WORLD and TEAM_NODE cannot be destroyed"):
        pgas.team_destroy(pgas.TEAM_WORLD)
    with pytest.raises(pgas.PgasError, match=rf"pgas.team_split_strided: start \+ \(size-1\)\*stride = {n} "
                                             rf"is outside the parent team of {n} PEs"):
        pgas.team_split_strided(pgas.TEAM_WORLD, 1, 1, n)
    with pytest.raises(pgas.PgasError, match=r"pgas.team_split_strided: stride must be >= 1, got 0"):
        pgas.team_split_strided(pgas.TEAM_WORLD, 0, 0, 1)
    with pytest.raises(pgas.PgasError, match=r"pgas.team_my_pe: team 17 is not a team of PE \d"):
        pgas.team_my_pe(17)
    with pytest.raises(pgas.PgasError, match=r"pgas.barrier: team must be a team handle"):
        pgas.barrier("world")
    out = np.zeros(1, np.int64)
    with pytest.raises(pgas.PgasError, match=r"tid=\[0, 0, 0\].*pgas.device.team_n_pes: team 9 is not a team"):
        bad_team_kernel[1, 1](9, out)
