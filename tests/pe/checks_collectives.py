"""Host collectives against numpy: every collective x op x dtype x size x algorithm x team."""
import time

import numpy as np
import pytest

import pgas
from _util import node_pes, on_simulator, pattern, reaches_other_nodes
from pgas.core._reductions import OPS as UFUNCS

DTYPES = [np.int32, np.int64, np.uint32, np.uint64, np.float16, np.float32, np.float64]
NARROW_DTYPES = [np.int8, np.uint8, np.int16, np.uint16, np.bool_]   # values over their whole range
OPS = ["sum", "prod", "min", "max", "and", "or", "xor"]
# The host algorithms are the simulator's; on cuda a host reduction is the device one (auto).
EXPLICIT_ALGORITHMS = ["eager", "oneshot", "ring", "tree", "mpi"] if on_simulator() else ["auto"]
ALGORITHMS = [*EXPLICIT_ALGORITHMS, "auto"] if on_simulator() else ["auto"]
SIZES = [1, 7, 1001, 70_001]
LARGE_DTYPES = (np.int64, np.float32)   # the largest size (several steps and pieces) with one int and one float


SAMPLED_ACROSS_NODES = {"oneshot", "ring", "tree"}   # read members' data and poll their words through the NIC
EVERY_COMBINATION_PES = (2, 4)     # every algorithm on every op x dtype: teams of 1, 2 and 4 members


def algorithms(dtype, op: str, spans_nodes: bool) -> list:
    """The algorithms to try for ``dtype`` and ``op`` on a team: all of them on 2 and 4 PEs
    of one node; elsewhere all of them for every op on int64 and float32 and every dtype
    with sum, and for the other combinations on a team that ``spans_nodes`` those that do
    not read every member's data through the NIC (each step a few ms there), and on 1, 3
    and 5 PEs "auto" only. An op's fold on a dtype is the same code for any number of
    members; what the number changes (each algorithm's steps and pieces) the sample runs."""
    if op == "sum" or np.dtype(dtype) in (np.int64, np.float32):
        return ALGORITHMS
    if spans_nodes:
        return [a for a in ALGORITHMS if a not in SAMPLED_ACROSS_NODES]
    return ALGORITHMS if pgas.n_pes() in EVERY_COMBINATION_PES else ["auto"]


def reduce_or_refuse(team, dest, src, op: str, algorithm: str) -> bool:
    """pgas.reduce; for algorithm="eager" where it cannot run (arrays above its staging
    buffers, members on other nodes) the clear refusal instead: False then."""
    from pgas.host.collectives import _eager
    from pgas.runtime._state import runtime
    from pgas.runtime._team_table import team_of
    rt = runtime("test")
    if algorithm == "eager" and not _eager.usable(rt, team_of(rt, team, "test"), dest.nbytes):
        with pytest.raises(pgas.PgasError, match=r"pgas.reduce: algorithm='eager' needs every team member's heap "
                                                 r"mapped here \(one node\) and at most \d+ bytes per member"):
            pgas.reduce(team, dest, src, op, algorithm=algorithm)
        return False
    pgas.reduce(team, dest, src, op, algorithm=algorithm)
    return True


def inputs(pe: int, count: int, dtype, op: str) -> np.ndarray:
    """Per-PE values whose reduction is exact in every dtype (in any order)."""
    if op == "prod":
        return (pattern(pe, count, np.int64) % 2 + 1).astype(dtype)
    return (pattern(pe, count, np.int64) % 11).astype(dtype)


def full_range(pe: int, count: int, dtype) -> np.ndarray:
    """Per-PE values over the whole range of a narrow integer dtype, the first the largest
    (so sums and products over 2 PEs or more wrap there at least), or random booleans. An
    integer reduction wraps the same in any order."""
    rng = np.random.default_rng(1000 + pe)
    if np.dtype(dtype) == np.bool_:
        return rng.integers(0, 2, count).astype(np.bool_)
    info = np.iinfo(dtype)
    values = rng.integers(info.min, info.max, count, dtype=dtype, endpoint=True)
    values[:1] = info.max
    return values


def expected_wrapped(op: str, arrays: list) -> np.ndarray:
    """``expected``, and for integer sums and products over 2 or more PEs a check that
    the values do wrap (the exact result leaves the dtype's range somewhere)."""
    want = expected(op, arrays)
    if op in ("sum", "prod") and len(arrays) > 1 and arrays[0].dtype.kind in "iu":
        exact = expected(op, [a.astype(object) for a in arrays])
        assert (exact != want).any(), ("no element wraps", arrays[0].dtype, op)
    return want


def expected(op: str, arrays: list) -> np.ndarray:
    ufunc = {"sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum,
             "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[op]
    return ufunc.reduce(np.stack(arrays), axis=0).astype(arrays[0].dtype)


def teams():
    """(name, team or None) for every team to test; None on PEs outside it. Collective."""
    n = pgas.n_pes()
    made = [("world", pgas.TEAM_WORLD)]
    made.append(("odd-strided", pgas.team_split_strided(pgas.TEAM_WORLD, 1, 2, n // 2) if n >= 2 else None))
    x, y = pgas.team_split_2d(pgas.TEAM_WORLD, 2)
    made += [("2d-row", x), ("2d-column", y)]
    return made


def destroy(made):
    for _, team in made[1:]:
        pgas.team_destroy(team)


def members(team) -> list:
    return [pgas.team_translate_pe(team, r, pgas.TEAM_WORLD) for r in range(pgas.team_n_pes(team))]


def check_reduce_every_op_dtype_size_algorithm_and_team():
    """Every team x dtype x op x size x algorithm on 2 and 4 PEs of one node (a sample
    elsewhere: ``algorithms``)."""
    made, here = teams(), set(node_pes())
    for dtype in DTYPES:
        for count in (c for c in SIZES if c < SIZES[-1] or dtype in LARGE_DTYPES):
            src, dest = pgas.empty(count, dtype), pgas.empty(count, dtype)   # (allocations are collective)
            for name, team in made:
                if team is None:
                    continue
                pes = members(team)
                spans_nodes = not set(pes) <= here     # (the same on every member)
                for op in OPS:
                    if op in ("and", "or", "xor") and np.dtype(dtype).kind == "f":
                        continue
                    src.copy_to_device(inputs(pgas.my_pe(), count, dtype, op))
                    want = expected(op, [inputs(pe, count, dtype, op) for pe in pes])
                    for algorithm in algorithms(dtype, op, spans_nodes):
                        dest.copy_to_device(np.full(count, 99, dtype))     # (members write only their own dest)
                        if not reduce_or_refuse(team, dest, src, op, algorithm):
                            continue
                        got = dest.copy_to_host()
                        assert np.array_equal(got, want), (name, dtype, op, count, algorithm)
            pgas.free(dest)
            pgas.free(src)
    destroy(made)


def check_reduce_in_place_and_64_mib():
    """In place, every algorithm: 64 MiB on up to 2 PEs of one node, 16 MiB on more PEs or
    across nodes (already many pieces of every algorithm's steps; 64 MiB there took most
    of the suite's collective time on these 2 cores)."""
    me, n = pgas.my_pe(), pgas.n_pes()
    count = ((64 if n <= 2 and not reaches_other_nodes() else 16) << 20) // 4
    data = pgas.empty(count, np.float32)
    # (made once: made for each algorithm, the inputs took most of the check's time)
    mine = inputs(me, count, np.float32, "sum")
    want = expected("sum", [inputs(pe, count, np.float32, "sum") for pe in range(n)])
    for algorithm in EXPLICIT_ALGORITHMS:
        data.copy_to_device(mine)
        if not reduce_or_refuse(pgas.TEAM_WORLD, data, data, "sum", algorithm):
            continue
        assert np.array_equal(data.copy_to_host(), want), algorithm
    pgas.free(data)


def order_sensitive(pe: int, count: int, dtype) -> np.ndarray:
    """Per-PE floats of very different sizes and signs: their sum's bits depend on the
    order of the additions (and NaN and infinity here and there)."""
    rng = np.random.default_rng(500 + pe)
    scale = 10.0 ** rng.integers(-3, 4, count) if np.dtype(dtype) == np.float16 else 10.0 ** rng.integers(-9, 9, count)
    values = (rng.standard_normal(count) * scale).astype(dtype)
    values[rng.integers(0, count, max(1, count // 1000))] = np.nan if pe % 2 else np.inf
    return values


def check_float_all_reduce_folds_in_rank_order():
    """eager, oneshot and mpi (and auto across nodes, which is mpi) give every member numpy's
    bits of the rank-order fold ((a0 + a1) + a2) + ..., for sums that depend on that order,
    at sizes below and above the split of the fold between the members across nodes; ring
    and tree fold in an order of their own, the same bits on every member."""
    me, n = pgas.my_pe(), pgas.n_pes()
    rank_order = {"eager", "oneshot", "mpi"} | ({"auto"} if reaches_other_nodes() else set())
    for dtype in (np.float16, np.float32, np.float64):
        for count in (7, 40_001):     # 80-320 KB: whole, and in shares on 3 PEs or more
            src, dest = pgas.empty(count, dtype), pgas.empty(count, dtype)
            everyones = pgas.empty(n * count, dtype)
            src.copy_to_device(order_sensitive(me, count, dtype))
            arrays = [order_sensitive(pe, count, dtype) for pe in range(n)]
            for op in ("sum", "min"):
                want = arrays[0].copy()
                for more in arrays[1:]:
                    UFUNCS[op](want, more, out=want)
                for algorithm in ALGORITHMS:
                    if not reduce_or_refuse(pgas.TEAM_WORLD, dest, src, op, algorithm):
                        continue
                    if algorithm in rank_order:
                        got = dest.copy_to_host()
                        assert np.array_equal(got.view(np.uint8), want.view(np.uint8)), (dtype, count, op, algorithm)
                    pgas.fcollect(pgas.TEAM_WORLD, everyones, dest)
                    rows = everyones.copy_to_host().reshape(n, count).view(np.uint8)
                    assert (rows == rows[0]).all(), ("members differ", dtype, count, op, algorithm)
            for array in (everyones, dest, src):
                pgas.free(array)


def check_reduce_narrow_and_bool_dtypes_every_op_and_algorithm():
    """int8, uint8, int16, uint16 and bool: integers wrap as numpy's do; on bool sum is
    or, prod is and (numpy's add and multiply on bool). reducescatter too. Every algorithm
    on 2 and 4 PEs of one node, on a sample elsewhere (``algorithms``)."""
    me, n = pgas.my_pe(), pgas.n_pes()
    spans_nodes = reaches_other_nodes()
    world = pgas.TEAM_WORLD
    for dtype in NARROW_DTYPES:
        for op in OPS:
            for count in (1, 30_001):
                src = pgas.empty(count * n, dtype)
                dest = pgas.empty(count * n, dtype)
                src.copy_to_device(full_range(me, count * n, dtype))
                want = expected_wrapped(op, [full_range(pe, count * n, dtype) for pe in range(n)])
                for algorithm in algorithms(dtype, op, spans_nodes):
                    dest.copy_to_device(np.zeros(count * n, dtype))
                    if not reduce_or_refuse(world, dest, src, op, algorithm):
                        continue
                    assert np.array_equal(dest.copy_to_host(), want), (dtype, op, count, algorithm)
                pgas.reducescatter(world, dest[:count], src, op)
                assert np.array_equal(dest[:count].copy_to_host(), want[me * count:(me + 1) * count]), \
                    ("reducescatter", dtype, op, count)
                pgas.free(dest)
                pgas.free(src)


def check_broadcast_every_root_dtype_and_team():
    made = teams()
    for name, team in made:
        for dtype in (np.int32, np.uint64, np.float16, np.float64):
            for count in (1, 1001, 300_000):
                src = pgas.empty(count, dtype)
                dest = pgas.zeros(count, dtype)
                if team is not None:
                    pes = members(team)
                    src.copy_to_device(pattern(pgas.my_pe(), count, dtype))
                    for root in range(len(pes)):
                        pgas.broadcast(team, dest, src, root)
                        assert np.array_equal(dest.copy_to_host(), pattern(pes[root], count, dtype)), (name, root)
                pgas.free(dest)
                pgas.free(src)
    destroy(made)


def check_fcollect_alltoall_reducescatter_every_dtype_and_team():
    made = teams()
    for name, team in made:
        size = pgas.team_n_pes(team) if team is not None else 1
        for dtype in DTYPES:
            for count in (1, 333, 100_000):
                block = pgas.empty(count, dtype)
                whole = pgas.empty(count * pgas.n_pes(), dtype)
                whole_out = pgas.empty(count * pgas.n_pes(), dtype)
                if team is not None:
                    pes, me = members(team), pgas.my_pe()
                    rank = pgas.team_my_pe(team)
                    gathered, scattered = whole[:count * size], whole_out[:count * size]
                    block.copy_to_device(pattern(me, count, dtype))
                    pgas.fcollect(team, gathered, block)
                    want = np.concatenate([pattern(pe, count, dtype) for pe in pes])
                    assert np.array_equal(gathered.copy_to_host(), want), ("fcollect", name, dtype)

                    gathered.copy_to_device(pattern(me * 7, count * size, dtype))
                    pgas.alltoall(team, scattered, gathered)
                    want = np.concatenate([pattern(pe * 7, count * size, dtype)[rank * count:(rank + 1) * count]
                                           for pe in pes])
                    assert np.array_equal(scattered.copy_to_host(), want), ("alltoall", name, dtype)

                    gathered.copy_to_device(inputs(me, count * size, dtype, "sum"))
                    pgas.reducescatter(team, block, gathered, "sum")
                    full = expected("sum", [inputs(pe, count * size, dtype, "sum") for pe in pes])
                    assert np.array_equal(block.copy_to_host(), full[rank * count:(rank + 1) * count]), \
                        ("reducescatter", name, dtype)
                for a in (whole_out, whole, block):
                    pgas.free(a)
    destroy(made)


def check_repeated_calls_on_the_same_arrays_see_new_data():
    """A repeated call runs the plan kept from the first (eager below the staging size, the
    general algorithms above): every call reads the data of that moment, eager and general
    calls interleave on one team, and a broadcast root that runs many calls ahead of its
    readers never overwrites a staging buffer someone still has to read."""
    import time
    me, n = pgas.my_pe(), pgas.n_pes()
    world = pgas.TEAM_WORLD
    cases = [(1, 12), (1000, 12)]           # 4 B and 4 KB per PE: eager on one node
    if pgas.team_n_pes(pgas.TEAM_NODE) == n:
        cases.append((140_000, 5))          # 560 KB: the general algorithms (across nodes: tested above)
    for count, steps in cases:
        src, dest = pgas.empty(count, np.float32), pgas.empty(count, np.float32)
        gathered = pgas.empty(n * count, np.float32)
        for step in range(steps):           # eager: more calls than there are staging buffers
            src.copy_to_device(np.full(count, me * 100 + step, np.float32))
            pgas.reduce(world, dest, src)
            assert np.all(dest.copy_to_host() == sum(pe * 100 + step for pe in range(n))), (count, step)
            pgas.reduce(world, dest, src, algorithm="ring")      # a general call in between
            assert np.all(dest.copy_to_host() == sum(pe * 100 + step for pe in range(n))), (count, step)
            pgas.fcollect(world, gathered, src)
            want = np.repeat(np.arange(n, dtype=np.float32) * 100 + step, count)
            assert np.array_equal(gathered.copy_to_host(), want), (count, step)
        pgas.barrier_all()
        for step in range(steps):           # the root runs ahead while the others sleep now and then
            root = step % n
            if me == root:
                src.copy_to_device(np.full(count, 1000 * step + me, np.float32))
            elif step % 3 == 0:
                time.sleep(0.01)
            pgas.broadcast(world, dest, src, root)
            assert np.all(dest.copy_to_host() == 1000 * step + root), (count, step)
        for step in range(steps):           # in place, as MPI's Bcast, from rank 0 only
            if me == 0:
                dest.copy_to_device(np.full(count, step, np.float32))
            elif step % 2:
                time.sleep(0.005)
            pgas.broadcast(world, dest, dest, 0)
            assert np.all(dest.copy_to_host() == step), (count, step)
        for a in (gathered, dest, src):
            pgas.free(a)


def check_a_repeated_eager_all_reduce_folds_with_compiled_code_and_numpys_results():
    """After COMPILE_AFTER calls a kept eager all-reduce folds with compiled code
    (``host/collectives/_fold_code.py``): the results stay numpy's, bit for bit, as the data change,
    in place and not, for floats with NaN, wrapping integers and bool."""
    from pgas.host.collectives._eager import COMPILE_AFTER
    me, n = pgas.my_pe(), pgas.n_pes()
    world = pgas.TEAM_WORLD
    for dtype, op, count in ((np.float32, "sum", 5), (np.float64, "min", 3), (np.int8, "prod", 7),
                             (np.uint16, "xor", 2), (np.bool_, "max", 4), (pgas.bfloat16, "sum", 6),
                             (pgas.bfloat16, "max", 3)):
        src, dest = pgas.empty(count, dtype), pgas.empty(count, dtype)

        def values(pe, step):
            rng = np.random.default_rng(1000 * step + pe)
            if dtype == np.bool_:
                return rng.integers(0, 2, count).astype(bool)
            if np.dtype(dtype).kind == "f" or dtype == pgas.bfloat16:
                data = rng.normal(0, 10, count).astype(dtype)
                if step % 5 == 0:
                    data[step % count] = np.nan
                return data
            return rng.integers(0, 100, count).astype(dtype)

        for step in range(COMPILE_AFTER + 6):
            src.copy_to_device(values(me, step))
            want = values(0, step)
            with np.errstate(all="ignore"):
                for pe in range(1, n):
                    want = UFUNCS[op](want, values(pe, step), out=want)
            target = src if step % 2 else dest            # two kept calls: in place and not
            pgas.reduce(world, target, src, op=op)
            assert target.copy_to_host().tobytes() == want.tobytes(), (dtype, op, step)
        for a in (dest, src):
            pgas.free(a)


def check_a_compiled_eager_all_reduce_waits_for_a_late_member():
    """The kept all-reduce's native body (``host/collectives/_eager_code.py``) when a member
    is late: each step one PE in turn arrives 2 ms after the others, who then publish and
    go on waiting in Python; every PE still gets every step's sum, from two kept calls."""
    from pgas.host.collectives._eager import COMPILE_AFTER
    me, n = pgas.my_pe(), pgas.n_pes()
    src, dest = pgas.empty(8, np.int64), pgas.empty(4, np.int64)
    halves = src[:4], src[4:]       # the same objects every step: two kept calls
    for step in range(2 * COMPILE_AFTER + 12):
        src.copy_to_device(np.arange(8, dtype=np.int64) * (me + 1) + step)
        if step > 2 * COMPILE_AFTER and step % n == me:
            time.sleep(0.002)
        pgas.reduce(pgas.TEAM_WORLD, dest, halves[step % 2])
        part = np.arange(4) + 4 * (step % 2)
        assert dest.copy_to_host().tolist() == (part * n * (n + 1) // 2 + n * step).tolist(), (step, me)
    for a in (dest, src):
        pgas.free(a)


def check_kept_calls_follow_new_arrays_and_new_teams():
    """More distinct calls than are kept (each slice is a new object), and a team destroyed
    and made again in the same slot with other members: never a stale plan."""
    me, n = pgas.my_pe(), pgas.n_pes()
    src = pgas.full(300, me + 1, np.int64)
    dest = pgas.zeros(300, np.int64)
    for i in range(300):
        pgas.reduce(pgas.TEAM_WORLD, dest[i:i + 1], src[i:i + 1])
    assert dest.copy_to_host().tolist() == [n * (n + 1) // 2] * 300
    few_dest, few_src = dest[:4], src[:4]       # the same objects in every call below
    for stride, size in ((2, (n + 1) // 2), (1, n)):     # PE 0 is in both, in the same slot
        team = pgas.team_split_strided(pgas.TEAM_WORLD, 0, stride, size)
        if team is not None:
            pgas.reduce(team, few_dest, few_src)
            want = sum(pe + 1 for pe in range(0, n, stride))
            assert few_dest.copy_to_host().tolist() == [want] * 4, (stride, team)
            pgas.team_destroy(team)
        pgas.barrier_all()
    for step in range(6):       # a new slice object each call: found by where it lies
        src[:4].copy_to_device(np.full(4, me + step, np.int64))
        pgas.reduce(pgas.TEAM_WORLD, dest[:4], src[:4])
        assert dest[:4].copy_to_host().tolist() == [sum(pe + step for pe in range(n))] * 4, step
    pgas.free(dest)
    pgas.free(src)
    for dtype in (np.float64, np.int32):     # the same place again, other elements: a new call
        src = pgas.full(300, me + 0.5, dtype)
        dest = pgas.zeros(300, dtype)
        pgas.reduce(pgas.TEAM_WORLD, dest[:4], src[:4])
        want = sum(dtype(pe + 0.5) for pe in range(n))
        assert dest[:4].copy_to_host().tolist() == [want] * 4, dtype
        pgas.free(dest)
        pgas.free(src)


def check_reduce_takes_the_stream_fifth_as_api_md_and_nvshmem4py():
    n = pgas.n_pes()
    a, ones = pgas.full(3, pgas.my_pe() + 1, np.int32), pgas.full(n, 1, np.int32)
    pgas.reduce(pgas.TEAM_WORLD, a, a, "sum", None)          # (team, dest, src, op, stream)
    pgas.reducescatter(pgas.TEAM_WORLD, a[:1], ones, "sum", None)
    assert a.copy_to_host().tolist() == [n, n * (n + 1) // 2, n * (n + 1) // 2]
    pgas.free(ones)
    pgas.free(a)


def check_collective_on_buffer_with_nvshmem4pys_type_names():
    """nvshmem4py's collective_on_buffer: each collective on byte buffers (pgas.buffer),
    the element type by NVSHMEM's name; its misuse refused on every PE alike."""
    me, n = pgas.my_pe(), pgas.n_pes()
    world = pgas.TEAM_WORLD

    def filled(values):
        buf = pgas.buffer(values.nbytes)
        buf.copy_to_device(values.view(np.uint8))
        return buf

    src = filled(np.arange(6, dtype=np.int32) * (me + 1))
    dst = pgas.buffer(6 * 4)
    assert pgas.collective_on_buffer("reduce", world, dst, src, "int", "sum") == 0.0
    assert dst.copy_to_host().view(np.int32).tolist() == (np.arange(6) * n * (n + 1) // 2).tolist()
    assert pgas.collective_on_buffer("reduce", world, dst, src, "int32", "max", enable_timing=True) > 0.0
    assert dst.copy_to_host().view(np.int32).tolist() == (np.arange(6) * n).tolist()
    mine = filled(np.array([me + 0.5, -me], np.float64))
    gathered = pgas.buffer(2 * 8 * n)
    pgas.collective_on_buffer("fcollect", world, gathered, mine, "double")
    assert gathered.copy_to_host().view(np.float64).tolist() == [v for pe in range(n) for v in (pe + 0.5, -pe)]
    copied = pgas.buffer(2 * 8)
    pgas.collective_on_buffer("broadcast", world, copied, mine, "ulonglong", root=n - 1)   # the root's bytes
    assert copied.copy_to_host().view(np.float64).tolist() == [n - 1 + 0.5, -(n - 1)]
    rows = filled(np.arange(n, dtype=np.uint32) + 100 * me)          # element j goes to PE j
    got = pgas.buffer(4 * n)
    pgas.collective_on_buffer("alltoall", world, got, rows, "uint")
    assert got.copy_to_host().view(np.uint32).tolist() == [me + 100 * pe for pe in range(n)]
    parts = filled(np.full(2 * n, me + 1, np.float32))
    part = pgas.buffer(2 * 4)
    pgas.collective_on_buffer("reducescatter", world, part, parts, "float", "prod")
    assert part.copy_to_host().view(np.float32).tolist() == [float(np.prod(np.arange(1, n + 1)))] * 2
    # nvshmem4py's own shapes (its test_collectives_on_raw_buffers): src of 4n elements, dest
    # n times that; pgas takes the most elements both hold
    small, big = filled(np.full(4 * n, me + 1, np.int32)), pgas.buffer(4 * n * n * 4)
    for coll in ("reduce", "reducescatter", "fcollect", "alltoall", "broadcast"):
        pgas.collective_on_buffer(coll, world, big, small, "int32", "sum" if "reduce" in coll else None)
        if coll == "reduce":
            assert (big.copy_to_host().view(np.int32)[:4 * n] == n * (n + 1) // 2).all()
    odd, typed = pgas.buffer(7), pgas.zeros(6, np.int32)
    for args, message in (
            (("gather", world, dst, src, "int", None), r"coll must be one of reduce, reducescatter, fcollect, "
                                                       r"alltoall, broadcast, got 'gather'"),
            (("reduce", world, dst, src, "float128", "sum"), r"dtype must be one of NVSHMEM's type names .*, got "
                                                             r"'float128'"),
            (("reduce", world, dst, src, "int", None), r"reduce needs op"),
            (("fcollect", world, gathered, mine, "double", "sum"), r"op is for reduce and reducescatter"),
            (("reduce", world, odd, odd, "int", "sum"), r"dest has 7 bytes, not a whole number of 4-byte int32"),
            (("reduce", world, typed, src, "int", "sum"), r"dest must be a byte buffer from pgas.buffer \(1-D uint8\), "
                                                         r"got 1-D int32")):
        with pytest.raises(pgas.PgasValueError, match="pgas.collective_on_buffer: " + message):
            pgas.collective_on_buffer(*args)
    pgas.barrier_all()
    for buf in (src, dst, mine, gathered, copied, rows, got, parts, part, small, big, odd, typed):
        pgas.free(buf)


def check_collective_errors():
    n = pgas.n_pes()
    a = pgas.zeros(4, np.float32)
    b = pgas.zeros(5, np.float32)
    i = pgas.zeros(4, np.int32)
    world = pgas.TEAM_WORLD
    with pytest.raises(pgas.PgasError, match=r"pgas.reduce: dest and src must have the same size; "
                                             r"got dest of 5 and src of 4 elements"):
        pgas.reduce(world, b, a)
    with pytest.raises(pgas.PgasError, match=r"pgas.reduce: dest and src must have the same dtype"):
        pgas.reduce(world, i, a)
    with pytest.raises(pgas.PgasError, match=r"pgas.reduce: op must be one of sum, prod, min, max, and, or, "
                                             r"xor, got 'avg'"):
        pgas.reduce(world, a, a, "avg")
    with pytest.raises(pgas.PgasError, match=r"pgas.reduce: op 'xor' needs an integer or bool dtype, got float32"):
        pgas.reduce(world, a, a, "xor")
    c = pgas.zeros(4, np.complex64)
    with pytest.raises(pgas.PgasError, match=r"pgas.reduce: op 'max' takes no complex dtype \(OpenSHMEM reduces "
                                             r"complex numbers with sum and prod\), got complex64"):
        pgas.reduce(world, c, c, "max")
    pgas.free(c)
    u = pgas.zeros(4, np.dtype("V8"))
    with pytest.raises(pgas.PgasError, match=r"pgas.reduce: reductions take the dtypes int8, uint8, int16, uint16, "
                                             r"int32, uint32, int64, uint64, float16, float32, float64, bfloat16, bool, "
                                             r"complex64, complex128.*; got \|V8"):
        pgas.reduce(world, u, u)
    pgas.free(u)
    with pytest.raises(pgas.PgasError, match=r"pgas.reduce: algorithm must be one of auto, eager, ring, tree, oneshot, "
                                             r"mpi, got 'fast'"):
        pgas.reduce(world, a, a, algorithm="fast")
    with pytest.raises(pgas.PgasError, match=r"pgas.reduce: src is not symmetric memory"):
        pgas.reduce(world, a, np.zeros(4, np.float32))
    with pytest.raises(pgas.PgasError, match=r"pgas.fcollect: dest must hold team size x src.size elements; "
                                             r"got dest of 5 and src of 4 elements"):
        pgas.fcollect(world, b, a)
    with pytest.raises(pgas.PgasError, match=rf"pgas.broadcast: root must be a team rank within \[0, {n}\), got {n}"):
        pgas.broadcast(world, a, a, n)
    with pytest.raises(pgas.PgasError, match=r"pgas.reducescatter: dest and src must not overlap"):
        whole = pgas.zeros(4 * n, np.float32)
        try:
            pgas.reducescatter(world, whole[:4], whole)
        finally:
            pgas.free(whole)
    with pytest.raises(pgas.PgasError, match=r"pgas.reduce: team 20 is not a team of PE"):
        pgas.reduce(20, a, a)
    for x in (i, b, a):
        pgas.free(x)


def check_bfloat16_reductions_every_op_algorithm_and_team():
    """bfloat16 (nvshmem4py's torch.bfloat16 cases): each step in float32 rounded to bfloat16,
    as ml_dtypes' ufuncs (and a GPU's __nv_bfloat16) do; values whose sums and products stay
    exact, so every algorithm's order gives the same bits. reducescatter and the named and
    raw-buffer forms too."""
    me, n = pgas.my_pe(), pgas.n_pes()
    bf16 = np.dtype(pgas.bfloat16)
    made = teams()
    for name, team in made:
        for op in ("sum", "prod", "min", "max"):
            for count in (1, 1001):
                src = pgas.empty(count, bf16)
                dest = pgas.full(count, -1, bf16)
                if team is not None:
                    def values(pe):
                        return ((np.arange(count) + pe) % 3 + 1 if op == "prod" else
                                (np.arange(count) * 5 + pe * 7) % 31 - 9).astype(bf16)
                    src.copy_to_device(values(me))
                    want = expected(op, [values(pe) for pe in members(team)])
                    for algorithm in ALGORITHMS:
                        if not reduce_or_refuse(team, dest, src, op, algorithm):
                            continue
                        assert np.array_equal(dest.copy_to_host(), want), (name, op, count, algorithm)
                pgas.free(dest)
                pgas.free(src)
    destroy(made)
    src, dest = pgas.full(2 * n, 0.5 + me, bf16), pgas.zeros(2, bf16)
    pgas.sum_reducescatter(pgas.TEAM_WORLD, dest, src)          # OpenSHMEM's name
    assert np.array_equal(dest.copy_to_host(), np.full(2, sum(0.5 + pe for pe in range(n)), bf16))
    raw_src, raw_dest = pgas.buffer(8), pgas.buffer(8)
    raw_src.copy_to_device(np.full(4, 1.5 * (me + 1), bf16).view(np.uint8))
    pgas.collective_on_buffer("reduce", pgas.TEAM_WORLD, raw_dest, raw_src, "bfloat16", "max")
    assert np.array_equal(raw_dest.copy_to_host().view(bf16), np.full(4, 1.5 * n, bf16))
    with pytest.raises(pgas.PgasValueError, match="pgas.reduce: op 'xor' needs an integer or bool dtype, "
                                                  "got bfloat16"):
        pgas.reduce(pgas.TEAM_WORLD, dest, src[:2], "xor")
    for a in (raw_dest, raw_src, dest, src):
        pgas.free(a)


def check_small_calls_across_nodes_as_one_exchange_of_messages():
    """Across nodes, calls of up to 64 KiB per member on teams of up to 8 run as one
    exchange of persistent MPI messages (``_mpi_exchange``): calls on two pairs of arrays
    alternate (two kept exchanges of one kind, matched in call order), broadcast roots run
    ahead of sleeping readers, the all-reduce folds every dtype in rank order (compiled
    folds, and numpy's for float16 and bool), in place too, alltoall and reducescatter
    blocks reach their members (per member block); at the size limit and one
    element past it (MPI's own collectives on the world of 3 or more, still the exchange
    on a team of 2, whatever the size) alike, on the world and a split team."""
    import time

    from pgas.host.collectives import _mpi_exchange
    me = pgas.my_pe()
    limit = _mpi_exchange.BYTES // 4
    made = teams()
    for name, team in made[:2]:
        for count in (1, 3, limit, limit + 1):
            pairs = [(pgas.empty(count, np.float32), pgas.empty(count, np.float32)) for _ in range(2)]
            gathered = [pgas.empty(8 * count, np.float32) for _ in range(2)]
            if team is not None:
                pes, size = members(team), pgas.team_n_pes(team)
                for step in range(6):
                    which = step % 2
                    src, dest = pairs[which]
                    src.copy_to_device(np.full(count, 10 * me + step, np.float32))
                    pgas.reduce(team, dest, src)
                    assert np.all(dest.copy_to_host() == sum(10 * pe + step for pe in pes)), (name, count, step)
                    pgas.fcollect(team, gathered[which][:size * count], src)
                    want = np.repeat(np.array([10 * pe + step for pe in pes], np.float32), count)
                    assert np.array_equal(gathered[which][:size * count].copy_to_host(), want), (name, count, step)
                    root = step % size
                    if step % 3 == 1 and pgas.team_my_pe(team) != root:
                        time.sleep(0.01)
                    pgas.broadcast(team, dest, src, root)
                    assert np.all(dest.copy_to_host() == 10 * pes[root] + step), (name, count, step)
                    pgas.reduce(team, src, src, "max")       # in place
                    assert np.all(src.copy_to_host() == 10 * max(pes) + step), (name, count, step)
                    blocks, rank = gathered[which][:size * count], pgas.team_my_pe(team)
                    blocks.copy_to_device(np.arange(size * count, dtype=np.float32) + 1000 * me + step)
                    exchanged = gathered[1 - which][:size * count]
                    pgas.alltoall(team, exchanged, blocks)
                    mine = np.arange(rank * count, (rank + 1) * count, dtype=np.float32) + step
                    want = np.concatenate([mine + 1000 * pe for pe in pes])
                    assert np.array_equal(exchanged.copy_to_host(), want), ("alltoall", name, count, step)
                    pgas.reducescatter(team, dest, blocks)
                    assert np.array_equal(dest.copy_to_host(), sum(mine + 1000 * pe for pe in pes)), \
                        ("reducescatter", name, count, step)
            for dtype in (np.int8, np.uint64, np.float16, np.float64, np.bool_):
                src, dest = pgas.empty(count, dtype), pgas.empty(count, dtype)
                if team is not None:
                    def values(pe):
                        if np.dtype(dtype).kind == "f":
                            return inputs(pe, count, dtype, "sum")
                        return full_range(pe, count, dtype)
                    src.copy_to_device(values(me))
                    for op in ("sum", "min") if dtype != np.bool_ else ("and", "or"):
                        pgas.reduce(team, dest, src, op)
                        want = expected(op, [values(pe) for pe in pes])
                        assert np.array_equal(dest.copy_to_host(), want), (name, count, dtype, op)
                pgas.free(dest)
                pgas.free(src)
            for a in (*gathered, *(a for pair in pairs for a in pair)):
                pgas.free(a)
    destroy(made)


ALLTOALLS_SHAPES = [(0, 1, 1), (1, 1, 1), (3, 2, 3), (5, 1, 2), (1001, 3, 1), (0, 2, 3)]  # (nelems, dst_stride, src_stride)


def strided_length(count: int, stride: int) -> int:
    """Elements of an alltoalls array holding ``count`` elements at ``stride``, and 3 more
    past the last, which every call must leave as they were (with ``nelems`` 0 too)."""
    return max(0, (count - 1) * stride + 1) + 3


def strided_blocks(pe: int, n: int, nelems: int, stride: int, dtype) -> np.ndarray:
    """PE ``pe``'s alltoalls ``src``: element k of block j at ``(j*nelems + k)*stride`` holds
    a value naming (pe, j, k); the other elements hold -1."""
    values = np.full(strided_length(n * nelems, stride), -1, dtype)
    values[:n * nelems * stride:stride] = pattern(pe, n * nelems, dtype) + (pe % 3)
    return values


def check_alltoalls_every_stride_dtype_and_team():
    """OpenSHMEM's strided all-to-all on every team: element k of block j of member i's src
    (at (j*nelems + k)*sst) lands at (i*nelems + k)*dst of member j's dest, and the
    elements between dest's strides keep what they held."""
    made = teams()
    for name, team in made:
        for dtype in (np.int64, np.float32, np.complex128, np.int8):
            for nelems, dst, sst in ALLTOALLS_SHAPES:
                size = pgas.team_n_pes(team) if team is not None else 1
                n = pgas.n_pes()                                  # (allocations are collective: the largest team's)
                src = pgas.empty(strided_length(n * nelems, sst), dtype)
                dest = pgas.empty(strided_length(n * nelems, dst), dtype)
                if team is not None:
                    pes, rank = members(team), pgas.team_my_pe(team)
                    s, d = src[:strided_length(size * nelems, sst)], dest[:strided_length(size * nelems, dst)]
                    s.copy_to_device(strided_blocks(pgas.my_pe(), size, nelems, sst, dtype))
                    d.copy_to_device(np.full(d.size, 7, dtype))
                    pgas.alltoalls(team, d, s, dst, sst, nelems)
                    want = np.full(d.size, 7, dtype)
                    for i, pe in enumerate(pes):
                        theirs = strided_blocks(pe, size, nelems, sst, dtype)
                        block = theirs[rank * nelems * sst:(rank * nelems + nelems) * sst:sst][:nelems]
                        want[i * nelems * dst:(i * nelems + nelems) * dst:dst] = block
                    assert np.array_equal(d.copy_to_host(), want), (name, dtype, nelems, dst, sst)
                pgas.free(dest)
                pgas.free(src)
    destroy(made)


def check_alltoalls_errors():
    n, world = pgas.n_pes(), pgas.TEAM_WORLD
    a, b = pgas.zeros(4 * n, np.int64), pgas.zeros(4 * n, np.int64)
    f = pgas.zeros(4 * n, np.float64)
    with pytest.raises(pgas.PgasError, match=r"pgas.alltoalls: the dest stride must be >= 1, got 0"):
        pgas.alltoalls(world, a, b, 0, 1, 1)
    with pytest.raises(pgas.PgasError, match=r"pgas.alltoalls: nelems must be a non-negative integer, got -1"):
        pgas.alltoalls(world, a, b, 1, 1, -1)
    with pytest.raises(pgas.PgasError, match=r"pgas.alltoalls: nelems must be a non-negative integer, got 1.5"):
        pgas.alltoalls(world, a, b, 1, 1, 1.5)
    with pytest.raises(pgas.PgasError, match=rf"pgas.alltoalls: src has {4 * n} elements but {3 * n} elements at "
                                             rf"stride 3 need {(3 * n - 1) * 3 + 1}"):
        pgas.alltoalls(world, a, b, 1, 3, 3)
    with pytest.raises(pgas.PgasError, match=r"pgas.alltoalls: dest and src must have the same dtype"):
        pgas.alltoalls(world, a, f, 1, 1, 1)
    with pytest.raises(pgas.PgasError, match=r"pgas.alltoalls: dest and src must not overlap"):
        pgas.alltoalls(world, a[:2 * n], a[n:3 * n], 1, 1, 1)
    with pytest.raises(pgas.PgasError, match=r"pgas.alltoalls: src is not symmetric memory"):
        pgas.alltoalls(world, a, np.zeros(4 * n, np.int64), 1, 1, 1)
    for x in (f, b, a):
        pgas.free(x)


def complex_values(pe: int, count: int, dtype, op: str) -> np.ndarray:
    """Gaussian integers whose sums and products stay exact in complex64 in any order."""
    k = np.arange(count)
    if op == "prod":
        return ((k + pe) % 2 + 1 + 1j * ((k * 3 + pe) % 2)).astype(dtype)
    return ((k * 7 + pe * 13) % 101 - 50 + 1j * ((k + pe * 5) % 17)).astype(dtype)


def check_complex_and_long_double_reductions_every_algorithm_and_team():
    """OpenSHMEM 1.5's other reduction types: complex64 and complex128 with sum and prod
    (all-reduce, reduce-scatter, the scans, the named forms), np.longdouble with sum, prod,
    min and max on the simulator's host, and refused with a clear error on cuda (no GPU
    has a long double) and for the ops OpenSHMEM does not define."""
    me, n = pgas.my_pe(), pgas.n_pes()
    longdouble = np.dtype(np.longdouble)
    cases = [(np.complex64, "sum"), (np.complex64, "prod"), (np.complex128, "sum"), (np.complex128, "prod"),
             *((longdouble, op) for op in ("sum", "prod", "min", "max"))]
    made = teams()
    for name, team in made:
        for dtype, op in cases:
            for count in (1, 1001):
                src, dest = pgas.empty(count, dtype), pgas.full(count, -1, dtype)
                if team is not None:
                    def values(pe):
                        if np.dtype(dtype).kind == "c":
                            return complex_values(pe, count, dtype, op)
                        return inputs(pe, count, dtype, op) - (pe % 2) * 3    # negatives too
                    src.copy_to_device(values(me))
                    pes = members(team)
                    if dtype == longdouble and not on_simulator():
                        with pytest.raises(pgas.PgasValueError, match=r"pgas.reduce: float128 \(np.longdouble\) "
                                                                      r"has no GPU type"):
                            pgas.reduce(team, dest, src, op)
                    else:
                        want = expected(op, [values(pe) for pe in pes])
                        for algorithm in ALGORITHMS:
                            if not reduce_or_refuse(team, dest, src, op, algorithm):
                                continue
                            assert np.array_equal(dest.copy_to_host(), want), (name, dtype, op, count, algorithm)
                        if count > 1:
                            getattr(pgas, f"{op}_inscan")(team, dest, src)
                            rank = pgas.team_my_pe(team)
                            assert np.array_equal(dest.copy_to_host(), expected(op, [values(pe) for pe in pes[:rank + 1]])), \
                                ("inscan", name, dtype, op)
                pgas.free(dest)
                pgas.free(src)
        whole, part = pgas.empty(3 * n, np.complex128), pgas.empty(3, np.complex128)    # (collective: every PE)
        if team is not None:
            size, rank = pgas.team_n_pes(team), pgas.team_my_pe(team)
            whole = whole[:3 * size]
            whole.copy_to_device(complex_values(me, 3 * size, np.complex128, "sum"))
            pgas.reducescatter(team, part, whole, "sum")
            full = expected("sum", [complex_values(pe, 3 * size, np.complex128, "sum") for pe in members(team)])
            assert np.array_equal(part.copy_to_host(), full[3 * rank:3 * rank + 3]), ("reducescatter", name)
            pgas.prod_reduce(team, part, part)                        # OpenSHMEM's name, in place
            want = expected("prod", [full[3 * r:3 * r + 3] for r in range(size)])    # Gaussian integers: exact
            assert np.array_equal(part.copy_to_host(), want), ("prod_reduce in place", name)
        pgas.free(part)
        pgas.free(whole)
    destroy(made)
    raw_src, raw_dest = pgas.buffer(32), pgas.buffer(32)
    raw_src.copy_to_device(np.full(2, (me + 1) + 1j, np.complex128).view(np.uint8))
    pgas.collective_on_buffer("reduce", pgas.TEAM_WORLD, raw_dest, raw_src, "complexd", "sum")
    assert np.array_equal(raw_dest.copy_to_host().view(np.complex128), np.full(2, n * (n + 1) / 2 + n * 1j))
    with pytest.raises(pgas.PgasValueError, match=r"pgas.reduce: op 'min' takes no complex dtype"):
        pgas.collective_on_buffer("reduce", pgas.TEAM_WORLD, raw_dest, raw_src, "complexd", "min")
    if longdouble != np.float64:
        w = pgas.zeros(2, longdouble)
        with pytest.raises(pgas.PgasValueError, match=r"op 'xor' needs an integer or bool dtype, got float128"):
            pgas.reduce(pgas.TEAM_WORLD, w, w, "xor")
        pgas.free(w)
    for a in (raw_dest, raw_src):
        pgas.free(a)
