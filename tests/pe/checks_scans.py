"""Scans (OpenSHMEM 1.6 sum_inscan / sum_exscan, and the other ops pgas adds), host and
device, against numpy's rank-order fold, on TEAM_WORLD and split teams."""
import numpy as np
import pytest
from numba import cuda

import pgas
import pgas.device as dev
from _util import simulator_only
from checks_collectives import full_range, members, order_sensitive

OPS = ["sum", "prod", "min", "max", "and", "or", "xor"]
UFUNCS = {"sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum,
          "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}
HOST_DTYPES = [np.int8, np.uint16, np.int32, np.uint64, np.float16, np.float32, np.float64, np.bool_]
BLOCK = 32


def ops_of(dtype) -> list:
    return [op for op in OPS if np.dtype(dtype).kind != "f" or op not in ("and", "or", "xor")]


def identity_of(op: str, dtype) -> np.ndarray:
    """What member 0 of an exscan gets, written out here (not taken from pgas)."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return np.bool_(op in ("prod", "min", "and"))
    if dtype.kind == "f":
        return dtype.type({"sum": 0.0, "prod": 1.0, "min": np.inf, "max": -np.inf}[op])
    info = np.iinfo(dtype)
    return dtype.type({"sum": 0, "prod": 1, "min": info.max, "max": info.min, "and": info.max if info.min == 0
                       else -1, "or": 0, "xor": 0}[op])


def values(pe: int, count: int, dtype, op: str) -> np.ndarray:
    """Per-PE inputs: floats whose sums depend on the order of the additions (NaN and inf
    here and there; for products, sizes near 1), integers over the whole range of the
    dtype (sums and products wrap), random booleans."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        got = order_sensitive(pe, count, dtype)
        if op == "prod":    # sizes near 1 (rounded products, no overflow), signs mixed, NaN and inf kept
            finite = np.isfinite(got)
            got[finite] = np.copysign(0.5 + np.abs(got[finite]) % 1.5, got[finite])
        return got
    return full_range(pe, count, dtype)


def want_for(op: str, exclusive: bool, team, count: int, dtype) -> np.ndarray:
    """What this PE's dest must hold: the fold over the members up to it (before it)."""
    rank = pgas.team_my_pe(team)
    pes = members(team)[:rank if exclusive else rank + 1]
    if not pes:
        return np.full(count, identity_of(op, dtype), np.dtype(dtype))
    want = values(pes[0], count, dtype, op).copy()
    for pe in pes[1:]:
        UFUNCS[op](want, values(pe, count, dtype, op), out=want)
    if op in ("sum", "prod") and len(pes) > 1 and np.dtype(dtype).kind in "iu":
        exact = values(pes[0], count, dtype, op).astype(object)
        for pe in pes[1:]:
            exact = UFUNCS[op](exact, values(pe, count, dtype, op).astype(object))
        assert (exact != want).any(), ("no element wraps", dtype, op)
    return want


def same_bits(got: np.ndarray, want: np.ndarray) -> bool:
    return got.dtype == want.dtype and np.array_equal(got.view(np.uint8), want.view(np.uint8))


def split_teams():
    """(name, team or None): TEAM_WORLD and the odd PEs (None on PEs outside it)."""
    n = pgas.n_pes()
    return [("world", pgas.TEAM_WORLD),
            ("odd-strided", pgas.team_split_strided(pgas.TEAM_WORLD, 1, 2, n // 2) if n >= 2 else None)]


def destroy(made):
    for _, team in made[1:]:
        if team is not None:
            pgas.team_destroy(team)


def check_host_scans_every_op_dtype_and_team():
    """Inclusive and exclusive, every op of every dtype, on two teams, out of place and in
    place, at 7 elements (and 1001 for three dtypes): numpy's bits of the rank-order fold (order-sensitive
    float sums, wrapping integers, bool with numpy's meaning, the identity on rank 0 of
    an exscan)."""
    me = pgas.my_pe()
    made = split_teams()
    for name, team in made:
        for count, dtypes in ((7, HOST_DTYPES), (1001, [np.int8, np.float32, np.bool_])):
            for dtype in dtypes:
                src, dest = pgas.empty(count, dtype), pgas.empty(count, dtype)
                for op in ops_of(dtype):
                    for exclusive in (False, True):
                        scan = getattr(pgas, f"{op}_{'exscan' if exclusive else 'inscan'}")
                        if team is None:
                            continue
                        want = want_for(op, exclusive, team, count, dtype)
                        src.copy_to_device(values(me, count, dtype, op))
                        dest.copy_to_device(np.zeros(count, dtype))
                        scan(team, dest, src)
                        what = (name, count, np.dtype(dtype).name, op, exclusive)
                        assert same_bits(dest.copy_to_host(), want), what
                        assert same_bits(src.copy_to_host(), values(me, count, dtype, op)), ("src changed", what)
                        if count == 7:      # in place
                            scan(team, src, src)
                            assert same_bits(src.copy_to_host(), want), ("in place", what)
                pgas.free(dest)
                pgas.free(src)
    destroy(made)


def check_host_scan_repeated_on_the_same_arrays_sees_new_data():
    """A repeated call (kept) reads the new src every time."""
    me = pgas.my_pe()
    src, dest = pgas.empty(5, np.int64), pgas.empty(5, np.int64)
    for k in range(3):
        src.copy_to_device(np.full(5, (me + 1) * (k + 1), np.int64))
        pgas.sum_exscan(pgas.TEAM_WORLD, dest, src)
        assert (dest.copy_to_host() == (k + 1) * me * (me + 1) // 2).all(), k
        pgas.sum_inscan(pgas.TEAM_WORLD, dest, src)
        assert (dest.copy_to_host() == (k + 1) * (me + 1) * (me + 2) // 2).all(), k
    pgas.free(dest)
    pgas.free(src)


def check_host_scan_errors():
    a = pgas.zeros(4, np.float32)
    b = pgas.zeros(5, np.float32)
    i = pgas.zeros(4, np.int32)
    world = pgas.TEAM_WORLD
    with pytest.raises(pgas.PgasError, match=r"pgas.sum_inscan: dest and src must have the same size; "
                                             r"got dest of 5 and src of 4 elements"):
        pgas.sum_inscan(world, b, a)
    with pytest.raises(pgas.PgasError, match=r"pgas.sum_exscan: dest and src must have the same dtype"):
        pgas.sum_exscan(world, i, a)
    with pytest.raises(pgas.PgasError, match=r"pgas.xor_inscan: op 'xor' needs an integer or bool dtype, "
                                             r"got float32"):
        pgas.xor_inscan(world, a, a)
    c = pgas.zeros(4, np.complex64)
    with pytest.raises(pgas.PgasError, match=r"pgas.max_exscan: op 'max' takes no complex dtype"):
        pgas.max_exscan(world, c, c)
    pgas.free(c)
    v = pgas.zeros(4, np.dtype("V4"))
    with pytest.raises(pgas.PgasError, match=r"pgas.sum_exscan: reductions take the dtypes int8, uint8, int16, "
                                             r"uint16, int32, uint32, int64, uint64, float16, float32, float64, "
                                             r"bfloat16, bool, complex64, complex128.*; got \|V4"):
        pgas.sum_exscan(world, v, v)
    pgas.free(v)
    with pytest.raises(pgas.PgasError, match=r"pgas.max_inscan: src is not symmetric memory"):
        pgas.max_inscan(world, a, np.zeros(4, np.float32))
    with pytest.raises(pgas.PgasError, match=r"pgas.sum_inscan: dest and src must be the same array or not overlap"):
        pgas.sum_inscan(world, b[1:], b[:4])
    with pytest.raises(pgas.PgasError, match=r"pgas.sum_exscan: team 20 is not a team of PE"):
        pgas.sum_exscan(20, a, a)
    for x in (i, b, a):
        pgas.free(x)


_KERNELS: dict = {}


def kernels(name: str):
    """(one-thread kernel, whole-block kernel, warp-1 kernel) calling dev.<name>, its
    _block and its _warp form (made once)."""
    if name not in _KERNELS:
        thread_form, block_form, warp_form = (getattr(dev, name + s) for s in ("", "_block", "_warp"))

        @cuda.jit
        def one_thread(team, dest, src):
            if cuda.threadIdx.x == 0:
                thread_form(team, dest, src)

        @cuda.jit
        def whole_block(team, dest, src):
            block_form(team, dest, src)

        @cuda.jit
        def second_warp(team, dest, src):
            if cuda.threadIdx.x >= 32:
                warp_form(team, dest, src)

        _KERNELS[name] = (one_thread, whole_block, second_warp)
    return _KERNELS[name]


def device_scan(op: str, exclusive: bool, form: int, team, dest, src) -> None:
    kernel = kernels(f"{op}_{'exscan' if exclusive else 'inscan'}")[form]
    kernel[1, 64 if form == 2 else BLOCK](team, dest, src)
    cuda.synchronize()


def check_device_scans_dtypes_forms_and_teams():
    """Thread, block and warp forms, inclusive and exclusive, on two teams: order-sensitive
    float sums (numpy's bits), wrapping int8 sums and products, bool, in place; every other
    op once on int32 / uint16."""
    me = pgas.my_pe()
    made = split_teams()
    cases = [("sum", np.float32, 0), ("sum", np.float64, 1), ("sum", np.int8, 2), ("prod", np.int8, 0),
             ("sum", np.bool_, 1), ("min", np.float32, 0), ("max", np.int32, 1), ("and", np.uint16, 0),
             ("or", np.int32, 1), ("xor", np.uint16, 0), ("prod", np.bool_, 0)]
    for name, team in made:
        for op, dtype, form in cases:
            count = 1001 if form == 1 else 37
            src, dest = pgas.empty(count, dtype), pgas.empty(count, dtype)
            for exclusive in (False, True):
                if team is None:
                    continue
                what = (name, op, np.dtype(dtype).name, form, exclusive)
                want = want_for(op, exclusive, team, count, dtype)
                mine = values(me, count, dtype, op)
                src.copy_to_device(mine)
                dest.copy_to_device(np.zeros(count, dtype))
                device_scan(op, exclusive, form, team, dest, src)
                assert same_bits(dest.copy_to_host(), want), what
                assert same_bits(src.copy_to_host(), mine), ("src changed", what)
                if op == "sum" and form == 0:     # in place
                    device_scan(op, exclusive, form, team, src, src)
                    assert same_bits(src.copy_to_host(), want), ("in place", what)
            pgas.free(dest)
            pgas.free(src)
    destroy(made)


def check_device_exscan_rank_zero_gets_the_identity():
    """Member 0 of every op's exscan: 0 for sum (OpenSHMEM 1.6), the op's identity else."""
    made = split_teams()
    for name, team in made:
        for op, dtype in (("sum", np.float64), ("prod", np.int16), ("min", np.float32), ("max", np.uint8),
                          ("and", np.int64), ("min", np.bool_)):
            src, dest = pgas.full(3, 1, dtype), pgas.full(3, 1, dtype)
            if team is not None:
                device_scan(op, True, 0, team, dest, src)
            if team is not None and pgas.team_my_pe(team) == 0:
                assert same_bits(dest.copy_to_host(), np.full(3, identity_of(op, dtype), dtype)), (name, op, dtype)
            pgas.free(dest)
            pgas.free(src)
    destroy(made)


@simulator_only("device argument checks (on a GPU they trap, which ends the context; a bad dtype does not "
                "compile: the offline compile test covers it)")
def check_device_scan_errors():
    a = pgas.zeros(4, np.float32)
    b = pgas.zeros(5, np.float32)
    with pytest.raises(pgas.PgasError, match=r"pgas.device.sum_inscan: dest and src must have the same size; "
                                             r"dest has 5 elements, 4 needed"):
        kernels("sum_inscan")[0][1, 1](pgas.TEAM_WORLD, b, a)
    with pytest.raises(pgas.PgasError, match=r"pgas.device.xor_exscan_block: op 'xor' needs an integer or bool "
                                             r"dtype, got float32"):
        kernels("xor_exscan")[1][1, BLOCK](pgas.TEAM_WORLD, a, a)
    with pytest.raises(pgas.PgasError, match=r"pgas.device.sum_exscan: team 20 is not a team"):
        kernels("sum_exscan")[0][1, 1](20, a, a)
    pgas.free(b)
    pgas.free(a)


def check_host_scans_past_the_exchange_size():
    """Across nodes, scans of up to 64 KiB per member run as one exchange of messages and
    larger ones by MPI's all-gather (on teams of 3 or more): a float sum and an int max
    just past that size, in place and not, on the world."""
    from pgas.host.collectives import _mpi_exchange
    me, n = pgas.my_pe(), pgas.n_pes()
    for dtype, op in ((np.float32, "sum"), (np.int64, "max")):
        count = _mpi_exchange.BYTES // np.dtype(dtype).itemsize + 1
        src, dest = pgas.empty(count, dtype), pgas.empty(count, dtype)
        for exclusive in (False, True):
            scan = getattr(pgas, f"{op}_{'exscan' if exclusive else 'inscan'}")
            want = want_for(op, exclusive, pgas.TEAM_WORLD, count, dtype)
            src.copy_to_device(values(me, count, dtype, op))
            scan(pgas.TEAM_WORLD, dest, src)
            assert same_bits(dest.copy_to_host(), want), (dtype, op, exclusive)
            scan(pgas.TEAM_WORLD, src, src)
            assert same_bits(src.copy_to_host(), want), ("in place", dtype, op, exclusive)
        pgas.free(dest)
        pgas.free(src)
