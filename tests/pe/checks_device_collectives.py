"""Device collectives (thread, warp and block forms) against numpy, on TEAM_WORLD and split teams."""
import functools

import numpy as np
import pytest
from numba import cuda

import pgas
import pgas.device as dev
from pgas.core._reductions import ops_for
from _util import on_simulator, pattern, reaches_other_nodes, simulator_only
from checks_collectives import (ALLTOALLS_SHAPES, NARROW_DTYPES, complex_values, destroy, expected, expected_wrapped,
                                full_range, inputs, members, strided_blocks, strided_length, teams)

OPS = ["sum", "prod", "min", "max", "and", "or", "xor"]
INT_DTYPES, FLOAT_DTYPES = [np.int32, np.int64, np.uint32, np.uint64], [np.float32, np.float64]
BLOCK = 32
WARPS_BLOCK = 64   # two warps: the warp forms run on warp 1 (threads 32 to 63)


def kernels(name):
    """(one-thread kernel, whole-block kernel) calling dev.<name> and dev.<name>_block."""
    thread_form, block_form = getattr(dev, name), getattr(dev, name + "_block")

    @cuda.jit
    def one_thread(team, dest, src):
        if cuda.threadIdx.x == 0:
            thread_form(team, dest, src)

    @cuda.jit
    def whole_block(team, dest, src):
        block_form(team, dest, src)

    return one_thread, whole_block


REDUCE = {op: kernels(f"{op}_reduce") for op in OPS}
REDUCESCATTER = {op: kernels(f"{op}_reducescatter") for op in OPS}
FCOLLECT, ALLTOALL = kernels("fcollect"), kernels("alltoall")


@cuda.jit
def broadcast_thread(team, dest, src, root):
    if cuda.threadIdx.x == 0:
        dev.broadcast(team, dest, src, root)


@cuda.jit
def broadcast_block(team, dest, src, root):
    dev.broadcast_block(team, dest, src, root)


def launch(pair, block, *args):
    (pair[1] if block else pair[0])[1, BLOCK](*args)


def check_device_reduce_and_reducescatter_every_op_and_dtype():
    """Each op with integer and float dtypes (rotating through them); one element in the
    thread form, 1001 in the block form."""
    me, n = pgas.my_pe(), pgas.n_pes()
    world = pgas.TEAM_WORLD
    for i, op in enumerate(OPS):
        dtypes = [INT_DTYPES[i % 4]] + ([] if op in ("and", "or", "xor") else [FLOAT_DTYPES[i % 2]])
        for dtype in dtypes:
            for count, block in ((1, False), (1001, True)):
                src = pgas.empty(count * n, dtype)
                dest = pgas.empty(count * n, dtype)
                src.copy_to_device(inputs(me, count * n, dtype, op))
                full = expected(op, [inputs(pe, count * n, dtype, op) for pe in range(n)])
                launch(REDUCE[op], block, world, dest, src)
                assert np.array_equal(dest.copy_to_host(), full), (dtype, op, count, block)
                launch(REDUCESCATTER[op], block, world, dest[:count], src)
                assert np.array_equal(dest.copy_to_host()[:count], full[me * count:(me + 1) * count]), \
                    ("reducescatter", dtype, op, count, block)
                pgas.free(dest)
                pgas.free(src)


@functools.lru_cache(maxsize=None)
def reductions_kernel(suffix: str, caller: str, plan: tuple):
    """A kernel making the reductions of ``plan``, ((dtype, ((op, calls), ...)), ...), with
    ``calls`` "reduce", "reducescatter" or both (space-separated): arguments ``team, count``
    then ``dest, src`` per dtype. The j-th op of a dtype reads ``src[j*w:(j+1)*w]``
    (w = count x team size); its reduce writes ``dest[j*(w+count):][:w]`` and its
    reducescatter the ``count`` elements after those. ``caller``: which threads call."""
    arrays = ", ".join(f"d{k}, s{k}" for k in range(len(plan)))
    lines = [f"def kernel(team, count, {arrays}):", "    w = count * dev.team_n_pes(team)",
             f"    if {caller}:"]
    for k, (_, cases) in enumerate(plan):
        for j, (op, calls) in enumerate(cases):
            src, at = f"s{k}[{j} * w:{j + 1} * w]", f"{j} * (w + count)"
            if "reduce" in calls.split():
                lines.append(f"        dev.{op}_reduce{suffix}(team, d{k}[{at}:{at} + w], {src})")
            if "reducescatter" in calls.split():
                lines.append(f"        dev.{op}_reducescatter{suffix}(team, d{k}[{at} + w:{at} + w + count], {src})")
    namespace = {"dev": dev, "cuda": cuda}
    exec("\n".join(lines), namespace)
    return cuda.jit(namespace["kernel"])


def launches(plan: tuple) -> list:
    """The plans of the kernels that run ``plan``: one launch on the simulator (launches are
    slow there), one kernel per (dtype, op) on a GPU (a kernel inlining dozens of
    collectives takes minutes to compile)."""
    if on_simulator():
        return [plan]
    return [((dtype, (case,)),) for dtype, cases in plan for case in cases]


NARROW_ON_DEVICE = (np.float16, *NARROW_DTYPES)


def rotation(start: int, calls) -> tuple:
    """A plan for NARROW_ON_DEVICE: every op once, on the dtypes in turn from ``start``
    (skipping those it does not take; each dtype gets one op or more), making the calls
    ``calls(op)``."""
    plan = {dtype: () for dtype in NARROW_ON_DEVICE}
    k = start
    for op in OPS:
        while op not in ops_for(NARROW_ON_DEVICE[k % len(NARROW_ON_DEVICE)]):
            k += 1
        plan[NARROW_ON_DEVICE[k % len(NARROW_ON_DEVICE)]] += ((op, calls(op)),)
        k += 1
    assert all(plan.values()), plan
    return tuple(plan.items())


def every_op_of_every_dtype(calls: str) -> tuple:
    return tuple((dtype, tuple((op, calls) for op in ops_for(dtype))) for dtype in NARROW_ON_DEVICE)


# form -> (who calls: thread 0, warp 1 of two, the whole block of 40 threads; threads per
# block; elements per member; plan). Each form covers every op and dtype; the warp and
# block forms (slow to simulate) reduce with half the ops and reduce-scatter with the
# other half, each the other way round. On a GPU the thread form reduces with every op
# of every dtype: the element arithmetic is compiled per dtype and op there, where the
# simulator runs the host's numpy ufuncs (check_reduce_narrow_and_bool_dtypes_every_op_and_algorithm).
_FIRST_HALF = ("sum", "prod", "min", "max")
NARROW_FORMS = {
    "": ("cuda.threadIdx.x == 0", BLOCK, 3,
         rotation(3, lambda op: "reduce reducescatter") if on_simulator() else every_op_of_every_dtype("reduce")),
    "_warp": ("cuda.threadIdx.x >= 32", WARPS_BLOCK, 37,
              rotation(4, lambda op: "reduce" if op in _FIRST_HALF else "reducescatter")),
    "_block": ("True", 40, 101, rotation(5, lambda op: "reducescatter" if op in _FIRST_HALF else "reduce")),
}


def check_device_reductions_on_narrow_float16_and_bool_every_op_and_form():
    """int8, uint8, int16, uint16, bool and float16 with every op they take, thread, warp
    and block forms: integers wrap as numpy's do, bool sum is or and prod is and. On one
    node: the arithmetic is the same across nodes, where the every-op check covers the
    reads through the NIC."""
    if reaches_other_nodes():
        pytest.skip("narrow dtypes' arithmetic is checked on one node (across nodes: the every-op check)")
    me, n = pgas.my_pe(), pgas.n_pes()
    for suffix, (caller, threads, count, whole_plan) in NARROW_FORMS.items():
        w = count * n
        for plan in launches(whole_plan):
            args, wants = [], []
            for dtype, cases in plan:
                values = inputs if np.dtype(dtype).kind == "f" else lambda pe, size, dt, op: full_range(pe, size, dt)
                src = pgas.empty(len(cases) * w, dtype)
                dest = pgas.zeros(len(cases) * (w + count), dtype)
                src.copy_to_device(np.concatenate([values(me, w, dtype, op) for op, _ in cases]))
                wants.append([expected_wrapped(op, [values(pe, w, dtype, op) for pe in range(n)]) for op, _ in cases])
                args += [dest, src]
            reductions_kernel(suffix, caller, plan)[1, threads](pgas.TEAM_WORLD, count, *args)
            for (dtype, cases), want, dest in zip(plan, wants, args[::2]):
                got = dest.copy_to_host()
                for j, (op, calls) in enumerate(cases):
                    at = j * (w + count)
                    if "reduce" in calls.split():
                        assert np.array_equal(got[at:at + w], want[j]), (dtype, op, suffix)
                    if "reducescatter" in calls.split():
                        assert np.array_equal(got[at + w:at + w + count], want[j][me * count:(me + 1) * count]), \
                            ("reducescatter", dtype, op, suffix)
            for a in args:
                pgas.free(a)


@cuda.jit
def warp_data_movers(team, gathered, exchanged, broadcasts, src, count):
    """Warp 1 of the block: broadcast from every root, fcollect, alltoall."""
    if cuda.threadIdx.x >= 32:
        size = dev.team_n_pes(team)
        for root in range(size):
            dev.broadcast_warp(team, broadcasts[root * count:(root + 1) * count], src[:count], root)
        dev.fcollect_warp(team, gathered[:count * size], src[:count])
        dev.alltoall_warp(team, exchanged[:count * size], src[:count * size])


def check_device_warp_broadcast_fcollect_alltoall_on_world_and_a_strided_team():
    """The warp forms run the thread and block forms' code (checked on every team) with
    the group of a warp: TEAM_WORLD and a strided split team suffice."""
    made = teams()
    n, count = pgas.n_pes(), 45
    for name, team in made[:2]:   # world, odd-strided
        src = pgas.empty(count * n, np.int16)
        outs = [pgas.zeros(count * n, np.int16) for _ in range(3)]
        if team is not None:
            pes, me, rank = members(team), pgas.my_pe(), pgas.team_my_pe(team)
            size = len(pes)
            src.copy_to_device(pattern(me, count * n, np.int16))
            warp_data_movers[1, WARPS_BLOCK](team, *outs, src, count)
            gathered, exchanged, broadcasts = (out.copy_to_host()[:count * size] for out in outs)
            want = np.concatenate([pattern(pe, count, np.int16) for pe in pes])
            assert np.array_equal(broadcasts, want), (name, "broadcast_warp")
            assert np.array_equal(gathered, want), (name, "fcollect_warp")
            want = np.concatenate([pattern(pe, count * n, np.int16)[rank * count:(rank + 1) * count] for pe in pes])
            assert np.array_equal(exchanged, want), (name, "alltoall_warp")
        for a in (*outs, src):
            pgas.free(a)
    destroy(made)


@cuda.jit
def reductions_named_by_strings(team, maxed, summed, minned, src):
    """nvshmem4py's form, in the three scopes: thread 0, the block, warp 1."""
    if cuda.threadIdx.x == 0:
        dev.reduce(team, maxed, src, "max")
    dev.reducescatter_block(team, summed, src, "sum")
    if cuda.threadIdx.x >= 32:
        dev.reduce_warp(team, minned, src, "min")


def check_device_reductions_named_by_a_string_as_nvshmem4py():
    me, n, count = pgas.my_pe(), pgas.n_pes(), 5
    src = pgas.empty(count * n, np.int32)
    maxed, minned, summed = (pgas.zeros(count * n, np.int32) for _ in range(3))
    src.copy_to_device(pattern(me, count * n, np.int32))
    reductions_named_by_strings[1, WARPS_BLOCK](pgas.TEAM_WORLD, maxed, summed[:count], minned, src)
    everyone = np.array([pattern(pe, count * n, np.int32) for pe in range(n)])
    assert np.array_equal(maxed.copy_to_host(), everyone.max(axis=0))
    assert np.array_equal(minned.copy_to_host(), everyone.min(axis=0))
    assert np.array_equal(summed.copy_to_host()[:count], everyone.sum(axis=0, dtype=np.int32)[me * count:(me + 1) * count])
    for a in (summed, minned, maxed, src):
        pgas.free(a)


def check_device_bfloat16_reductions_in_every_scope():
    """bfloat16 in the thread, warp and block forms; on one node (the arithmetic is the same
    across nodes, where the every-op check covers the reads through the NIC)."""
    if reaches_other_nodes():
        pytest.skip("bfloat16's arithmetic is checked on one node (across nodes: the every-op check)")
    me, n, count = pgas.my_pe(), pgas.n_pes(), 5
    bf16 = np.dtype(pgas.bfloat16)
    src = pgas.empty(count * n, bf16)
    maxed, minned, summed = (pgas.zeros(count * n, bf16) for _ in range(3))

    def values(pe):
        return ((np.arange(count * n) * 3 + pe * 5) % 17 - 4 + 0.5).astype(bf16)
    src.copy_to_device(values(me))
    reductions_named_by_strings[1, WARPS_BLOCK](pgas.TEAM_WORLD, maxed, summed[:count], minned, src)
    everyone = [values(pe) for pe in range(n)]
    assert np.array_equal(maxed.copy_to_host(), expected("max", everyone))
    assert np.array_equal(minned.copy_to_host(), expected("min", everyone))
    assert np.array_equal(summed.copy_to_host()[:count], expected("sum", everyone)[me * count:(me + 1) * count])
    for a in (summed, minned, maxed, src):
        pgas.free(a)


def check_device_reduce_in_place():
    me, n = pgas.my_pe(), pgas.n_pes()
    data = pgas.empty(5000, np.float64)
    for block in (False, True):
        data.copy_to_device(inputs(me, 5000, np.float64, "sum"))
        launch(REDUCE["sum"], block, pgas.TEAM_WORLD, data, data)
        assert np.array_equal(data.copy_to_host(),
                              expected("sum", [inputs(pe, 5000, np.float64, "sum") for pe in range(n)]))
    pgas.free(data)


def check_device_broadcast_fcollect_alltoall_on_every_team():
    made = teams()
    n = pgas.n_pes()
    for name, team in made:
        for dtype, count in ((np.int32, 1001), (np.float64, 1)):
            a = pgas.empty(count * n, dtype)
            b = pgas.zeros(count * n, dtype)
            if team is not None:
                pes, me = members(team), pgas.my_pe()
                size, rank = len(pes), pgas.team_my_pe(team)
                for block in (False, True):
                    a.copy_to_device(pattern(me, count * n, dtype))
                    for root in range(size):
                        (broadcast_block if block else broadcast_thread)[1, BLOCK](team, b[:count], a[:count], root)
                        assert np.array_equal(b.copy_to_host()[:count], pattern(pes[root], count, dtype)), \
                            (name, "broadcast", root, block)
                    launch(FCOLLECT, block, team, b[:count * size], a[:count])
                    want = np.concatenate([pattern(pe, count, dtype) for pe in pes])
                    assert np.array_equal(b.copy_to_host()[:count * size], want), (name, "fcollect", block)
                    launch(ALLTOALL, block, team, b[:count * size], a[:count * size])
                    want = np.concatenate([pattern(pe, count * n, dtype)[rank * count:(rank + 1) * count]
                                           for pe in pes])
                    assert np.array_equal(b.copy_to_host()[:count * size], want), (name, "alltoall", block)
                    launch(REDUCE["max"], block, team, b[:count], a[:count])
                    want = expected("max", [pattern(pe, count, dtype) for pe in pes])
                    assert np.array_equal(b.copy_to_host()[:count], want), (name, "max_reduce", block)
            pgas.free(b)
            pgas.free(a)
    destroy(made)


@cuda.jit
def alltoalls_kernel(team, dest, src, dst, sst, nelems, form):
    """dev.alltoalls in the thread (form 0: thread 0), warp (1: warp 1) or block (2) form."""
    if form == 0:
        if cuda.threadIdx.x == 0:
            dev.alltoalls(team, dest, src, dst, sst, nelems)
    elif form == 1:
        if cuda.threadIdx.x >= 32:
            dev.alltoalls_warp(team, dest, src, dst, sst, nelems)
    else:
        dev.alltoalls_block(team, dest, src, dst, sst, nelems)


def check_device_alltoalls_every_stride_form_and_team():
    """The strided all-to-all in every form on every team: element k of block j of member
    i's src (at (j*nelems + k)*sst) lands at (i*nelems + k)*dst of member j's dest; the
    elements between dest's strides keep what they held."""
    made = teams()
    n = pgas.n_pes()
    for name, team in made:
        for (nelems, dst, sst), form in zip(ALLTOALLS_SHAPES, (0, 1, 2, 0, 2, 1), strict=True):
            dtype = (np.int64, np.float64, np.int32)[form]
            src = pgas.empty(strided_length(n * nelems, sst), dtype)     # (collective: every PE)
            dest = pgas.empty(strided_length(n * nelems, dst), dtype)
            if team is not None:
                pes, rank = members(team), pgas.team_my_pe(team)
                size = len(pes)
                s, d = src[:strided_length(size * nelems, sst)], dest[:strided_length(size * nelems, dst)]
                s.copy_to_device(strided_blocks(pgas.my_pe(), size, nelems, sst, dtype))
                d.copy_to_device(np.full(d.size, 7, dtype))
                alltoalls_kernel[1, WARPS_BLOCK](team, d, s, dst, sst, nelems, form)
                want = np.full(d.size, 7, dtype)
                for i, pe in enumerate(pes):
                    theirs = strided_blocks(pe, size, nelems, sst, dtype)
                    want[i * nelems * dst:(i * nelems + nelems) * dst:dst] = \
                        theirs[rank * nelems * sst:(rank * nelems + nelems) * sst:sst][:nelems]
                assert np.array_equal(d.copy_to_host(), want), (name, nelems, dst, sst, form)
            pgas.free(dest)
            pgas.free(src)
    destroy(made)


@cuda.jit
def complex_reductions(team, summed, multiplied, scanned, src, prod_src):
    if cuda.threadIdx.x == 0:
        dev.sum_reduce(team, summed, src)
    dev.prod_reduce_block(team, multiplied, prod_src)
    dev.sum_inscan_block(team, scanned, src)


def check_device_complex_reductions_and_scans():
    """complex64 and complex128 (OpenSHMEM's complexf, complexd) with sum and prod, and a
    scan, on every member; Gaussian integers, exact in any order."""
    me, n, count = pgas.my_pe(), pgas.n_pes(), 37
    for dtype in (np.complex64, np.complex128):
        src, prod_src = pgas.empty(count, dtype), pgas.empty(count, dtype)
        summed, multiplied, scanned = (pgas.zeros(count, dtype) for _ in range(3))
        src.copy_to_device(complex_values(me, count, dtype, "sum"))
        prod_src.copy_to_device(complex_values(me, count, dtype, "prod"))
        complex_reductions[1, BLOCK](pgas.TEAM_WORLD, summed, multiplied, scanned, src, prod_src)
        sums = [complex_values(pe, count, dtype, "sum") for pe in range(n)]
        assert np.array_equal(summed.copy_to_host(), expected("sum", sums)), dtype
        assert np.array_equal(multiplied.copy_to_host(),
                              expected("prod", [complex_values(pe, count, dtype, "prod") for pe in range(n)])), dtype
        assert np.array_equal(scanned.copy_to_host(), expected("sum", sums[:me + 1])), dtype
        for a in (scanned, multiplied, summed, prod_src, src):
            pgas.free(a)


@cuda.jit
def named_reduce_thread(team, dest, src):
    dev.reduce(team, dest, src, "avg")


@simulator_only("device argument checks (on a GPU they trap, which ends the context; a bad dtype does not "
                "compile: tests/test_device_errors.py and the offline compile test cover both)")
def check_device_collective_errors():
    n = pgas.n_pes()
    a = pgas.zeros(4, np.float32)
    b = pgas.zeros(4 * n + 1, np.float32)
    with pytest.raises(pgas.PgasError, match=r"pgas.device.sum_reduce: dest and src must have the same size; "
                                             r"dest has 5 elements, 4 needed"):
        launch(REDUCE["sum"], False, pgas.TEAM_WORLD, b[:5], a)
    with pytest.raises(pgas.PgasError, match=r"pgas.device.xor_reduce_block: op 'xor' needs an integer or bool dtype"):
        launch(REDUCE["xor"], True, pgas.TEAM_WORLD, a, a)
    with pytest.raises(pgas.PgasError, match=r"pgas.device.reduce: op must be one of sum, prod, min, max, and, or, "
                                             r"xor, got 'avg'"):
        named_reduce_thread[1, 1](pgas.TEAM_WORLD, a, a)
    with pytest.raises(pgas.PgasError, match=r"pgas.device.fcollect: dest must hold team size x src.size elements"):
        launch(FCOLLECT, False, pgas.TEAM_WORLD, b, a)
    with pytest.raises(pgas.PgasError, match=rf"pgas.device.broadcast: root must be a team rank within "
                                             rf"\[0, {n}\), got {n}"):
        broadcast_thread[1, 1](pgas.TEAM_WORLD, a, a, n)
    with pytest.raises(pgas.PgasError, match=r"pgas.device.alltoalls: the src stride must be >= 1, got 0"):
        alltoalls_kernel[1, 1](pgas.TEAM_WORLD, b, b, 1, 0, 1, 0)
    with pytest.raises(pgas.PgasError, match=rf"pgas.device.alltoalls_block: dest has 4 elements but {5 * n} elements "
                                             rf"at stride 1 need {5 * n}"):
        alltoalls_kernel[1, BLOCK](pgas.TEAM_WORLD, a, b, 1, 1, 5, 2)
    c = pgas.zeros(4, np.complex128)
    with pytest.raises(pgas.PgasError, match=r"pgas.device.min_reduce: op 'min' takes no complex dtype"):
        launch(REDUCE["min"], False, pgas.TEAM_WORLD, c, c)
    pgas.free(c)
    if np.dtype(np.longdouble) != np.float64:      # no GPU has a long double: refused on the device
        w = pgas.zeros(4, np.longdouble)
        with pytest.raises(pgas.PgasError, match=r"pgas.device.sum_reduce: float128 \(np.longdouble\) has no GPU type"):
            launch(REDUCE["sum"], False, pgas.TEAM_WORLD, w, w)
        pgas.free(w)
    pgas.free(b)
    pgas.free(a)
