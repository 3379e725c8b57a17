"""Teams: predefined, strided and 2-D splits, translation, team barriers (host and device), limits."""
import numpy as np
import pytest
from numba import cuda

import pgas
import pgas.device as dev
from _util import node_pes, simulator_only, world


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
    n = pgas.n_pes()
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


@simulator_only("device argument checks stop a kernel with a trap on a GPU")
def check_a_kernel_given_no_team_is_a_device_error():
    out = np.zeros(1, np.int64)
    with pytest.raises(pgas.PgasError, match=r"tid=\[0, 0, 0\].*pgas.device.team_n_pes: team 9 is not a team"):
        bad_team_kernel[1, 1](9, out)


@cuda.jit
def team_collectives_kernel(team, dest, src, seen):
    # a reduction and a barrier on the team, then each member's address through team_ptr
    dev.sum_reduce(team, dest, src)
    dev.barrier(team)
    for r in range(dev.team_n_pes(team)):
        seen[r] = dev.team_ptr(team, src, r)
    seen[dev.team_n_pes(team)] = dev.team_ptr(team, src, dev.team_n_pes(team))   # not a rank: 0


@cuda.jit
def version_kernel(out):
    major, minor, patch = dev.vendor_get_version_info()
    out[0], out[1], out[2] = major, minor, patch
    spec_major, spec_minor = dev.info_get_version()
    out[3], out[4] = spec_major, spec_minor


@cuda.jit
def nvshmem4py_version_kernel(major, minor, patch):
    # nvshmem4py's form: element 0 of each array (here a slice, so element 1 of the last)
    dev.vendor_get_version_info(major, minor, patch[1:])


@cuda.jit
def name_kernel(name, short, written):
    written[0] = dev.info_get_name(name)        # nvshmem4py's test passes 100 int8
    written[1] = dev.info_get_name(short)


def _reversed_odd_pes():
    return [pe for pe in range(pgas.n_pes()) if pe % 2 == 1][::-1]


def check_team_init_from_a_pe_list_host_and_device():
    me = pgas.my_pe()
    odd = _reversed_odd_pes()                      # e.g. [3, 1]: team rank 0 is PE 3
    src = pgas.full(4, float(me + 1), np.float64)  # every PE allocates (collective over the world)
    dest = pgas.zeros(4, np.float64)
    gathered = pgas.zeros(4 * max(len(odd), 1), np.float64)
    words = pgas.zeros(1, np.int64)
    if me in odd:
        team = pgas.team_init(odd)
        rank = odd.index(me)
        assert pgas.team_my_pe(team) == rank and pgas.team_n_pes(team) == len(odd)
        assert [pgas.team_translate_pe(team, r, pgas.TEAM_WORLD) for r in range(len(odd))] == odd
        assert pgas.team_translate_pe(pgas.TEAM_WORLD, me, team) == rank
        out = np.zeros(4, np.int64)
        team_query_kernel[1, 1](team, out)
        assert out.tolist() == [rank, len(odd), odd[0], rank]
        pgas.barrier(team)
        pgas.sync(team)
        pgas.reduce(team, dest, src, op="sum")                 # host collectives on it
        assert dest.copy_to_host().tolist() == [float(sum(pe + 1 for pe in odd))] * 4
        pgas.fcollect(team, gathered, src)
        assert gathered.copy_to_host().tolist() == [float(pe + 1) for pe in odd for _ in range(4)]
        pgas.broadcast(team, dest, src, 0)                     # from team rank 0 = PE odd[0]
        assert dest.copy_to_host().tolist() == [float(odd[0] + 1)] * 4
        pgas.barrier(team)
        # device: reduction and barrier in a kernel, team_ptr of every member
        seen = np.zeros(len(odd) + 1, np.uint64)
        team_collectives_kernel[1, 1](team, dest, src, seen)
        assert dest.copy_to_host().tolist() == [float(sum(pe + 1 for pe in odd))] * 4
        for r, pe in enumerate(odd):
            reachable = pe in node_pes()
            assert (seen[r] != 0) == reachable, (r, pe, seen)
            if reachable:
                assert int(seen[r]) == int(dev_ptr_of(src, pe)), (r, pe)
                view = pgas.team_ptr(team, src, r)              # host form: a view of that copy
                assert view.copy_to_host().tolist() == [float(pe + 1)] * 4
            else:
                with pytest.raises(pgas.PgasError,
                                   match=rf"pgas.team_ptr: team rank {r} \(PE {pe}\) is on another node"):
                    pgas.team_ptr(team, src, r)
        assert seen[len(odd)] == 0
        with pytest.raises(pgas.PgasValueError,
                           match=rf"pgas.team_ptr: pe must be within \[0, {len(odd)}\), got {len(odd)}"):
            pgas.team_ptr(team, src, len(odd))
        # one-sided RMA to every member by team rank, through the team's translation
        for r in range(len(odd)):
            pgas.atomic_add(words, 1, pgas.team_translate_pe(team, r, pgas.TEAM_WORLD))
        pgas.barrier(team)
        assert int(words.copy_to_host()[0]) == len(odd)
        pgas.team_destroy(team)
        with pytest.raises(pgas.PgasValueError, match=rf"pgas.team_destroy: team {team} is not a team of PE {me}"):
            pgas.team_destroy(team)                             # already destroyed
    else:
        with pytest.raises(pgas.PgasValueError, match=rf"pgas.team_init: this PE \({me}\) is not in pes"):
            pgas.team_init(odd)
    pgas.barrier_all()
    for a in (src, dest, gathered, words):
        pgas.free(a)


def dev_ptr_of(arr, pe):
    """The address of PE pe's copy of arr as dev.ptr gives it (a one-thread kernel)."""
    out = np.zeros(1, np.uint64)
    _ptr_kernel[1, 1](arr, pe, out)
    return out[0]


@cuda.jit
def _ptr_kernel(arr, pe, out):
    out[0] = dev.ptr(arr, pe)


def check_team_init_every_pe_and_slot_reuse():
    n = pgas.n_pes()
    everyone = list(range(n))[::-1]
    teams = [pgas.team_init(everyone) for _ in range(3)]
    assert len(set(teams)) == 3
    for team in teams:
        assert pgas.team_my_pe(team) == n - 1 - pgas.my_pe()
        pgas.barrier(team)
    _check_team_barriers(teams[-1])     # every form (check_team_barriers_... has them on the others)
    for team in teams:
        pgas.team_destroy(team)
    again = pgas.team_init(everyone)    # a reused slot: fresh barrier words
    _check_team_barriers(again)
    pgas.team_destroy(again)


def check_team_init_nvshmem4py_form():
    me, n = pgas.my_pe(), pgas.n_pes()
    from mpi4py import MPI
    members = [pe for pe in range(n) if pe != 0] or [0]       # all but PE 0 (where n > 1)
    creator = members[-1]
    comm = MPI.COMM_WORLD
    uid = pgas.get_team_unique_id() if me == creator else None
    uid = comm.bcast(uid, root=creator)                       # out of band
    if me in members:
        config = pgas.TeamConfig()
        config.uniqueid = uid
        index = (members.index(me) - members.index(creator)) % len(members)  # the creator is index 0
        team = pgas.team_init(config, 0, len(members), index)
        assert pgas.team_my_pe(team) == index and pgas.team_n_pes(team) == len(members)
        order = [members[(members.index(creator) + i) % len(members)] for i in range(len(members))]
        assert [pgas.team_translate_pe(team, r, pgas.TEAM_WORLD) for r in range(len(members))] == order
        pgas.barrier(team)
        pgas.team_destroy(team)
    if me == 0 and n > 1:
        with pytest.raises(pgas.PgasValueError, match=r"pgas.team_init: an integer config.uniqueid \(12345\) names "
                                                      rf"a team of every PE \(npes == {n}\), got npes=1"):
            pgas.team_init(pgas.TeamConfig(uniqueid=12345), 0, 1, 0)
        with pytest.raises(pgas.PgasValueError, match=r"pgas.team_init: config.uniqueid must be an id from "
                                                      r"pgas.get_team_unique_id"):
            pgas.team_init(pgas.TeamConfig(uniqueid="12345"), 0, 1, 0)
        with pytest.raises(pgas.PgasValueError, match=r"pgas.team_init: the member with pe_idx_in_team=0 must be "
                                                      r"the PE that called pgas.get_team_unique_id"):
            pgas.team_init(pgas.TeamConfig(uniqueid=uid), 0, len(members), 0)
    pgas.barrier_all()


def check_named_teams_and_agreed_integer_ids_as_nvshmem4py_tests_use_them():
    """nvshmem4py's teams_test: team_init with a fixed integer uniqueid and every PE, named
    (pgas.Teams.NAME, "NAME" in Teams.keys()), destroyed by name; named splits; misuse."""
    me, n = pgas.my_pe(), pgas.n_pes()
    assert "TEAM_WORLD" in pgas.Teams and "WORLD" in pgas.Teams and pgas.Teams.TEAM_NODE == pgas.TEAM_NODE
    config = pgas.TeamConfig()
    config.uniqueid = 12348
    team = pgas.team_init(config, 0, n, me, new_team_name="TEST_TEAM")
    assert "TEST_TEAM" in pgas.Teams.keys() and pgas.Teams.TEST_TEAM == team == pgas.Teams["TEST_TEAM"]
    assert (pgas.team_my_pe(team), pgas.team_n_pes(team)) == (me, n)
    backwards = pgas.team_init(config, 0, n, n - 1 - me, new_team_name="BACKWARDS")   # ordered by pe_idx_in_team
    assert [pgas.team_translate_pe(backwards, r, pgas.TEAM_WORLD) for r in range(n)] == list(range(n))[::-1]
    pgas.barrier(backwards)
    pgas.team_destroy("BACKWARDS")
    pgas.team_destroy(pgas.Teams.TEST_TEAM)
    assert "TEST_TEAM" not in pgas.Teams and "BACKWARDS" not in pgas.Teams.keys()
    with pytest.raises(pgas.PgasValueError, match=r"pgas.team_destroy: no team is named 'TEST_TEAM' on this PE"):
        pgas.team_destroy("TEST_TEAM")          # twice
    with pytest.raises(AttributeError, match="pgas.Teams has no team named 'TEST_TEAM'"):
        pgas.Teams.TEST_TEAM
    evens = pgas.team_split_strided(pgas.TEAM_WORLD, 0, 2, (n + 1) // 2, new_team_name="EVENS")
    assert ("EVENS" in pgas.Teams) == (me % 2 == 0) == (evens is not None)
    if evens is not None:
        assert pgas.Teams.EVENS == evens
        pgas.team_destroy("EVENS")
    named = pgas.team_init(list(range(n)), new_team_name="ALL")
    with pytest.raises(pgas.PgasValueError, match=r"pgas.team_init: a team named 'ALL' exists already"):
        pgas.team_init(list(range(n)), new_team_name="ALL")
    with pytest.raises(pgas.PgasValueError, match=r"pgas.team_init: new_team_name must be a name usable as an "
                                                  r"attribute .*, got 'two words'"):
        pgas.team_init(list(range(n)), new_team_name="two words")
    pgas.team_destroy(named)                    # by handle: the name goes too
    assert "ALL" not in pgas.Teams
    if n > 1:
        with pytest.raises(pgas.PgasValueError, match=r"pgas.team_init: the PEs passed different integer "
                                                      r"uniqueids"):
            pgas.team_init(pgas.TeamConfig(uniqueid=100 + min(me, 1)), 0, n, me)    # PE 0 and the others differ
        with pytest.raises(pgas.PgasValueError, match=rf"pgas.team_init: the {n} PEs must give each pe_idx_in_team "
                                                      rf"in \[0, {n}\) once"):
            pgas.team_init(config, 0, n, 0)
    pgas.barrier_all()


def check_team_init_and_friends_refuse_bad_arguments():
    me, n = pgas.my_pe(), pgas.n_pes()
    with pytest.raises(pgas.PgasValueError, match=r"pgas.team_init: pes is empty"):
        pgas.team_init([])
    with pytest.raises(pgas.PgasValueError, match=rf"pgas.team_init: pes names PE {me} more than once"):
        pgas.team_init([me, me])
    with pytest.raises(pgas.PgasValueError, match=rf"pgas.team_init: pes must hold PEs within \[0, {n}\), got {n}"):
        pgas.team_init([me, n])
    with pytest.raises(pgas.PgasValueError, match=r"pgas.team_init: pes must hold PEs within \[0, \d+\), got -1"):
        pgas.team_init([-1])
    with pytest.raises(pgas.PgasValueError, match=r"pgas.team_init: pes must hold PE numbers"):
        pgas.team_init(["a"])
    with pytest.raises(pgas.PgasValueError, match=r"pgas.team_init: pes must be a sequence"):
        pgas.team_init(7)
    with pytest.raises(pgas.PgasValueError, match=rf"pgas.team_destroy: team 30 is not a team of PE {me}"):
        pgas.team_destroy(30)
    with pytest.raises(pgas.PgasValueError, match=r"pgas.team_destroy: no team is named 'TEAM_X' on this PE"):
        pgas.team_destroy("TEAM_X")
    with pytest.raises(pgas.PgasValueError, match=r"pgas.team_destroy: team must be a team handle"):
        pgas.team_destroy(1.5)
    with pytest.raises(pgas.PgasValueError, match=rf"pgas.team_translate_pe: src_team 30 is not a team of PE {me}"):
        pgas.team_translate_pe(30, 0, pgas.TEAM_WORLD)
    with pytest.raises(pgas.PgasValueError, match=r"pgas.team_translate_pe: dest_team -1 is not a team"):
        pgas.team_translate_pe(pgas.TEAM_WORLD, 0, -1)
    with pytest.raises(pgas.PgasValueError, match=rf"pgas.team_translate_pe: pe must be within \[0, {n}\) "
                                                  rf"\(the size of src_team\), got {n + 10}"):
        pgas.team_translate_pe(pgas.TEAM_WORLD, n + 10, pgas.TEAM_WORLD)
    with pytest.raises(pgas.PgasValueError, match=r"pgas.team_translate_pe: pe must be >= 0, got -1"):
        pgas.team_translate_pe(pgas.TEAM_WORLD, -1, pgas.TEAM_WORLD)
    a = pgas.zeros(1, np.int64)
    with pytest.raises(pgas.PgasValueError, match=r"pgas.team_ptr: team 30 is not a team"):
        pgas.team_ptr(30, a, 0)
    pgas.free(a)


def _configs_seen(team):
    """num_contexts of ``team`` as every PE sees it (None on PEs outside it); collective."""
    mine = pgas.team_get_config(team).num_contexts if team is not None else None
    return world().allgather(mine)


def check_team_get_config_gives_what_each_team_was_made_with():
    """OpenSHMEM's shmem_team_get_config / nvshmem4py's team_get_config: the predefined teams
    have the defaults; splits and team_init keep the num_contexts their config (a TeamConfig,
    a dict, the config of another team) gave, by config_mask's rule; misuse names the argument."""
    me, n = pgas.my_pe(), pgas.n_pes()
    for team in (pgas.TEAM_WORLD, pgas.TEAM_NODE, pgas.TEAM_SHARED):
        assert pgas.team_get_config(team) == pgas.TeamConfig(num_contexts=0)
    evens = pgas.team_split_strided(pgas.TEAM_WORLD, 0, 2, (n + 1) // 2, pgas.TeamConfig(num_contexts=3))
    assert _configs_seen(evens) == [3 if pe % 2 == 0 else None for pe in range(n)]
    # OpenSHMEM's mask: only the fields it names are used (0: the defaults)
    named = pgas.team_split_strided(pgas.TEAM_WORLD, 0, 1, n, {"num_contexts": 4}, pgas.TEAM_NUM_CONTEXTS)
    unnamed = pgas.team_split_strided(pgas.TEAM_WORLD, 0, 1, n, pgas.TeamConfig(num_contexts=4), 0)
    assert _configs_seen(named) == [4] * n and _configs_seen(unnamed) == [0] * n
    assert pgas.team_get_config(named, 0) == pgas.TeamConfig()              # no field asked for
    filled = pgas.TeamConfig(num_contexts=-1)
    assert pgas.team_get_config(named, pgas.TEAM_NUM_CONTEXTS, filled) is filled and filled.num_contexts == 4
    untouched = pgas.TeamConfig(num_contexts=-1)
    pgas.team_get_config(named, 0, untouched)
    assert untouched.num_contexts == -1
    # nvshmem4py: the config of one team given to a 2-D split; each axis its own
    xteam, yteam = pgas.team_split_2d(named, 2, pgas.team_get_config(named), None, {"num_contexts": 6},
                                      pgas.TEAM_CONFIG_MASK_NUM_CONTEXTS)
    assert _configs_seen(xteam) == [4] * n and _configs_seen(yteam) == [6] * n
    listed = pgas.team_init(list(range(n))[::-1], config={"num_contexts": 2})
    agreed = pgas.team_init(pgas.TeamConfig(uniqueid=4321, num_contexts=5), pgas.TEAM_CONFIG_MASK_UNIQUEID
                            | pgas.TEAM_NUM_CONTEXTS, n, me)
    assert _configs_seen(listed) == [2] * n and _configs_seen(agreed) == [5] * n
    # a config is data: changing the returned one changes no team
    pgas.team_get_config(listed).num_contexts = 9
    assert pgas.team_get_config(listed).num_contexts == 2
    for team in (evens, named, unnamed, xteam, yteam, listed, agreed):
        pgas.team_destroy(team)
    with pytest.raises(pgas.PgasValueError, match=rf"pgas.team_get_config: team {named} is not a team of PE {me} "
                                                  r"\(never created here, or destroyed\)"):
        pgas.team_get_config(named)
    with pytest.raises(pgas.PgasValueError, match=r"pgas.team_get_config: team is None \(this PE is not a member"):
        pgas.team_get_config(None)
    with pytest.raises(pgas.PgasValueError, match=r"pgas.team_get_config: team must be a team handle"):
        pgas.team_get_config("TEAM_WORLD")
    with pytest.raises(pgas.PgasValueError, match=r"pgas.team_get_config: config_mask must be None \(every field "
                                                  r"of the config\), 0 .* got 4"):
        pgas.team_get_config(pgas.TEAM_WORLD, 4)
    with pytest.raises(pgas.PgasValueError, match=r"pgas.team_get_config: config must be a pgas.TeamConfig to fill"):
        pgas.team_get_config(pgas.TEAM_WORLD, None, {"num_contexts": 1})
    split = "pgas.team_split_strided"
    for config, mask, text in [({"contexts": 2}, None, r"config has no field 'contexts': a team configuration has "
                                                       r"uniqueid, num_contexts, version"),
                               (pgas.TeamConfig(num_contexts=-1), None, r"config.num_contexts must be >= 0, got -1"),
                               ({"num_contexts": 1.5}, None, r"config.num_contexts must be an integer, got 1.5"),
                               (3, None, r"config must be a pgas.TeamConfig, a dict such as \{'num_contexts': 2\}, "
                                         r"or None, got 3"),
                               (None, pgas.TEAM_NUM_CONTEXTS, r"config_mask=1 names fields of config, but config "
                                                              r"is None"),
                               (None, True, r"config_mask must be None .*, got True")]:
        with pytest.raises(pgas.PgasValueError, match=f"{split}: {text}"):
            pgas.team_split_strided(pgas.TEAM_WORLD, 0, 1, n, config, mask)
    with pytest.raises(pgas.PgasValueError, match=r"pgas.team_split_2d: yaxis_mask must be None .*, got -1"):
        pgas.team_split_2d(pgas.TEAM_WORLD, 1, None, 0, None, -1)
    with pytest.raises(pgas.PgasValueError, match=r"pgas.team_init: config.num_contexts must be >= 0, got -2"):
        pgas.team_init([me], config={"num_contexts": -2})
    pgas.barrier_all()


def check_version_queries_host_and_in_a_kernel():
    major, minor, patch = (int(x) for x in pgas.__version__.split("."))
    assert pgas.vendor_get_version_info() == (major, minor, patch)
    assert pgas.info_get_version() == (1, 6)
    assert pgas.info_get_name() == f"pgas {pgas.__version__}"
    out = np.zeros(5, np.int64)
    version_kernel[1, 1](out)
    assert out.tolist() == [major, minor, patch, 1, 6]
    got = np.full(1, 99, np.int64), np.full(1, 99, np.int32), np.full(3, 99, np.uint64)
    nvshmem4py_version_kernel[1, 1](*got)
    assert [got[0][0], got[1][0], *got[2].tolist()] == [major, minor, 99, patch, 99]
    name, short, written = np.zeros(100, np.int8), np.full(5, 7, np.uint8), np.zeros(2, np.int64)
    name_kernel[1, 1](name, short, written)
    text = pgas.info_get_name().encode()
    assert bytes(name[:len(text) + 1].view(np.uint8)) == text + b"\0" and written.tolist() == [len(text) + 1, 5]
    assert bytes(short) == text[:4] + b"\0"        # cut short, still NUL-terminated
