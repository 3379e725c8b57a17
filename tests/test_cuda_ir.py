"""The cuda layer's hand-built IR (``pgas/cuda/_ir.py``) runs on the CPU.

The IR is plain LLVM, so numba's CPU target compiles the very same codegen. Copies and
folds run every thread rank of a group in turn and are compared with numpy; comparisons
with Python's; value checks record their failures through a callback, and the text the
host would raise from that record is compared with the simulator's. This proves the index
arithmetic (the 16-byte head, chunks and tail of the copy, strides, ranks), each
reduction's element rule and each check's condition and fields without a GPU; the offline
suite shows the same IR in sm_90 PTX.
"""
import ctypes
import itertools
from fractions import Fraction
import random

import numpy as np
import pytest
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from pgas.core._constants import CMP_GT, CMP_NAMES, CMP_NE, SIGNAL_ADD, SIGNAL_SET
from pgas.core._device_errors import describe as _describe
from pgas.core._errors import PgasError
from pgas.core._reductions import OPS, ops_for
from pgas.core._waiting import compare as python_compare
from pgas.core._codes import reduce_code
from pgas.cuda._ir import (FOLD_COPY, check_codegens, compare_codegen, constant_text, copy_strided_codegen,
                           copy_strided_type, fold_codegen, fold_type)


@intrinsic
def _copy_strided(typingctx, dst, dst_stride, src, src_stride, nelems, rank, size):
    return copy_strided_type(dst, dst_stride, src, src_stride, nelems, rank, size), copy_strided_codegen


@njit
def _copy_by_every_rank(dst, dst_stride, src, src_stride, nelems, size):
    for rank in range(size):
        _copy_strided(dst, dst_stride, src, src_stride, nelems, rank, size)


def _fold_by_every_rank(op):
    @intrinsic
    def fold(typingctx, op_code, dst, dst_lo, src, src_lo, count, rank, size):
        signature = fold_type(op_code, dst, dst_lo, src, src_lo, count, rank, size)
        return None if signature is None else (signature, fold_codegen)

    @njit
    def run(dst, dst_lo, src, src_lo, count, size):
        for rank in range(size):
            fold(op, dst, dst_lo, src, src_lo, count, rank, size)
    return run


def _at_byte_offset(buffer: np.ndarray, offset: int, dtype, count: int) -> np.ndarray:
    """``count`` elements of ``dtype`` starting ``offset`` bytes into a 64-byte-aligned buffer."""
    return buffer[offset:offset + count * np.dtype(dtype).itemsize].view(dtype)


def _aligned_bytes(nbytes: int) -> np.ndarray:
    raw = np.zeros(nbytes + 64, np.uint8)
    start = -raw.ctypes.data % 64
    return raw[start:start + nbytes]


@pytest.mark.parametrize("dtype", ["bool", "int8", "int16", "float32", "float64", "complex128"])
def test_copy_strided_matches_numpy_at_every_alignment_stride_and_group_size(dtype):
    itemsize = np.dtype(dtype).itemsize
    rng = random.Random(itemsize)
    cases = [(dst_off, src_off, stride, nelems, size)
             for dst_off, src_off in itertools.product(range(0, 32, min(itemsize, 2)), repeat=2)   # aligned or not
             for stride, nelems, size in ((1, 0, 1), (1, 1, 1), (1, 37, 1), (1, 64, 3), (1, 200, 32),
                                          (2, 23, 1), (3, 40, 5))]
    rng.shuffle(cases)
    for dst_off, src_off, stride, nelems, size in cases[:200]:
        src_count = dst_count = max(1, (nelems - 1) * stride + 1)
        src = _at_byte_offset(_aligned_bytes(src_off + src_count * itemsize + 64), src_off, dtype, src_count)
        src[...] = (np.arange(src_count) % 7 + 1).astype(dtype)
        dst = _at_byte_offset(_aligned_bytes(dst_off + dst_count * itemsize + 64), dst_off, dtype, dst_count)
        expected = dst.copy()
        expected[:nelems * stride:stride] = src[:nelems * stride:stride]
        _copy_by_every_rank(dst, stride, src, stride, nelems, size)
        np.testing.assert_array_equal(dst, expected, err_msg=str((dst_off, src_off, stride, nelems, size)))


def _values(dtype, count: int, rng: np.random.Generator) -> np.ndarray:
    if dtype == np.bool_:
        return rng.integers(0, 2, count).astype(bool)
    if np.dtype(dtype).kind == "c":    # numpy's formulas, the same roundings: equal bits
        return (rng.normal(0, 100, count) + 1j * rng.normal(0, 100, count)).astype(dtype)
    if np.dtype(dtype).kind == "f":
        values = rng.normal(0, 100, count).astype(dtype)
        values[::7] = np.nan   # a float min/max is NaN where either side is
        return values
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, count, dtype=dtype, endpoint=True)


def _product_with_fma(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a * b, complex, as numpy's SIMD loops compute it on CPUs with FMA (and PTX's fma.rn):
    (fma(ar, br, -(ai*bi)), fma(ar, bi, ai*br)), each fma exact, then rounded once."""
    part = a.real.dtype.type

    def fma(x, y, z):
        return part(float(Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z))))
    return np.array([complex(fma(x.real, y.real, -(x.imag * y.imag)), fma(x.real, y.imag, x.imag * y.real))
                     for x, y in zip(a, b)], a.dtype)


@pytest.mark.parametrize("dtype", ["bool", "int8", "uint8", "int32", "uint64", "float32", "float64", "complex64",
                                   "complex128"])
def test_fold_computes_every_op_as_numpy_does_in_the_element_type(dtype):
    dtype = np.dtype(dtype)
    rng = np.random.default_rng(3)
    for op in (*ops_for(dtype), None):
        run = _fold_by_every_rank(FOLD_COPY if op is None else reduce_code(op))
        for dst_lo, src_lo, count, size in ((0, 0, 0, 1), (0, 0, 41, 1), (3, 5, 41, 4), (1, 0, 100, 32)):
            dst = _values(dtype, 160, rng)
            src = _values(dtype, 160, rng)
            expected = dst.copy()
            part = slice(dst_lo, dst_lo + count)
            if op is None:
                expected[part] = src[src_lo:src_lo + count]
            elif op == "prod" and dtype.kind == "c":
                expected[part] = _product_with_fma(expected[part], src[src_lo:src_lo + count])
            else:
                with np.errstate(all="ignore"):
                    OPS[op](expected[part], src[src_lo:src_lo + count], out=expected[part])
            run(dst, dst_lo, src, src_lo, count, size)
            np.testing.assert_array_equal(dst, expected, err_msg=f"{op} {dtype} {(dst_lo, src_lo, count, size)}")


def test_fold_may_fold_an_array_into_itself():
    values = np.arange(10, dtype=np.int64)
    _fold_by_every_rank(reduce_code("sum"))(values, 0, values, 0, 10, 3)
    np.testing.assert_array_equal(values, 2 * np.arange(10))


@intrinsic
def _compare(typingctx, value, cmp, target):
    return types.boolean(value, cmp, target), compare_codegen


@njit
def _compare_all(values, cmp, target, out):
    for i in range(values.size):
        out[i] = _compare(values[i], cmp, target)


@pytest.mark.parametrize("dtype, target", [("int32", -3), ("int64", 5), ("float64", 0.5), ("float32", float("nan")),
                                           ("uint32", 3)])
def test_compare_is_pythons_comparison_in_the_values_type(dtype, target):
    values = np.array([-7, -3, 0, 0.5, 3, 5, float("nan"), 2 ** 31 - 1], dtype=np.float64)
    values = values[~np.isnan(values)] if np.dtype(dtype).kind != "f" else values
    values = values.astype(dtype)
    for cmp in (*CMP_NAMES, 99):
        out = np.zeros(values.size, np.bool_)
        _compare_all(values, cmp, target, out)
        expected = [python_compare(v, cmp, np.asarray(target).astype(dtype)[()]) for v in values]
        assert out.tolist() == expected, (dtype, CMP_NAMES.get(cmp), target)


def test_compare_of_a_uint64_word_is_exact_not_through_float64():
    big = np.array([2 ** 63 + 1], np.uint64)   # float64 cannot tell 2**63 + 1 from 2**63
    out = np.zeros(1, np.bool_)
    _compare_all(big, CMP_NE, np.uint64(2 ** 63), out)
    assert out[0]
    _compare_all(big, CMP_GT, np.int64(5), out)   # an int target, converted to uint64
    assert out[0]


# Value checks: each failure calls back into Python with the record's fields -------------

_RECORDS: list = []   # (kind, fn, what, why, a, b, c) of each failure, in order


def _on_failure(kind, *fields):
    texts = [ctypes.string_at(fields[i], fields[i + 1]).decode() for i in (0, 2, 4)]
    _RECORDS.append((kind, *texts, *fields[6:]))


_RECORDER = ctypes.CFUNCTYPE(None, ctypes.c_int64, *[ctypes.c_int64] * 9)(_on_failure)


def _text_argument(context, builder, typ, value):
    """(address, length) of a text as int64 values: a runtime string, or one known now."""
    i64 = ir.IntType(64)
    if isinstance(typ, types.UnicodeType):
        string = context.make_helper(builder, typ, value=value)
        return [builder.ptrtoint(string.data, i64), string.length]
    text = constant_text(typ)
    return [builder.ptrtoint(context.insert_const_string(builder.module, text), i64), i64(len(text))]


def _record(context, builder, kind, texts, numbers):
    i64 = ir.IntType(64)
    arguments = [i64(kind)]
    for typ, value in texts:
        arguments += _text_argument(context, builder, typ, value)
    callee = builder.inttoptr(i64(ctypes.cast(_RECORDER, ctypes.c_void_p).value),
                              ir.FunctionType(ir.VoidType(), [i64] * 10).as_pointer())
    builder.call(callee, arguments + list(numbers))


_CHECKS = check_codegens(_record)


@intrinsic
def _size(typingctx, fn, what, have, need, why):
    return types.void(fn, what, have, need, why), _CHECKS["size"]


@intrinsic
def _root(typingctx, fn, root, team_size):
    return types.void(fn, root, team_size), _CHECKS["root"]


@intrinsic
def _cmp(typingctx, fn, cmp):
    return types.void(fn, cmp), _CHECKS["cmp"]


@intrinsic
def _sig_op(typingctx, fn, sig_op):
    return types.void(fn, sig_op), _CHECKS["sig_op"]


@intrinsic
def _not_empty(typingctx, fn, what, arr):
    return types.void(fn, what, arr), _CHECKS["not_empty"]


@intrinsic
def _signal(typingctx, fn, signal):
    return types.void(fn, signal), _CHECKS["signal"]


@intrinsic
def _copy(typingctx, fn, dst, dst_name, dst_stride, src, src_name, src_stride, nelems):
    return types.void(fn, dst, dst_name, dst_stride, src, src_name, src_stride, nelems), _CHECKS["copy"]


FN = "pgas.device.f"


@njit
def _run_checks(case, have, need, root, members, cmp, sig_op, arr, signal, dst, dst_stride, src, src_stride, nelems):
    if case == 0:
        _size("pgas.device.f", "dest", have, need, "dest must hold team size x src.size elements")
    elif case == 1:
        _root("pgas.device.f", root, members)
    elif case == 2:
        _cmp("pgas.device.f", cmp)
    elif case == 3:
        _sig_op("pgas.device.f", sig_op)
    elif case == 4:
        _not_empty("pgas.device.f", "dest", arr)
    elif case == 5:
        _signal("pgas.device.f", signal)
    else:
        _copy("pgas.device.f", dst, "dest", dst_stride, src, "src", src_stride, nelems)


def _device_message(**values):
    """The first failure's text as the host builds it from a GPU's record, or None."""
    arguments = dict(case=0, have=1, need=1, root=0, members=2, cmp=0, sig_op=0, arr=np.zeros(1),
                     signal=np.zeros(1, np.uint64), dst=np.zeros(10), dst_stride=1, src=np.zeros(10), src_stride=1,
                     nelems=1)
    arguments.update(values)
    _RECORDS.clear()
    _run_checks(*arguments.values())
    return str(_describe(*_RECORDS[0])) if _RECORDS else None


def _simulator_message(check, *args):
    try:
        check(*args)
    except PgasError as exc:
        return str(exc)
    return None


def test_value_checks_fail_where_the_simulators_do_with_the_same_text():
    from pgas.sim import _primitives as _sim
    why = "dest must hold team size x src.size elements"
    cases = [({"case": 0, "have": have, "need": need}, (_sim.check_size, FN, "dest", have, need, why))
             for have, need in ((3, 3), (3, 4), (0, 2))]
    cases += [({"case": 1, "root": root, "members": 4}, (_sim.check_root, FN, root, 4)) for root in (-1, 0, 3, 4)]
    cases += [({"case": 2, "cmp": cmp}, (_sim.check_cmp, FN, cmp)) for cmp in (-1, *CMP_NAMES, 6)]
    cases += [({"case": 3, "sig_op": op}, (_sim.check_sig_op, FN, op)) for op in (SIGNAL_SET, SIGNAL_ADD, 7)]
    cases += [({"case": 4, "arr": arr}, (_sim.check_not_empty, FN, "dest", arr)) for arr in (np.zeros(0), np.zeros(2))]
    cases += [({"case": 5, "signal": s}, (_sim.check_signal, FN, s)) for s in (np.zeros(0, np.uint64),
                                                                               np.zeros(1, np.int64))]
    for dst_stride, src_stride, nelems in ((1, 1, 10), (1, 1, 11), (3, 1, 4), (4, 1, 4), (1, 2, 6), (0, 1, 1),
                                           (1, -2, 1), (1, 1, -1), (1, 1, 0), (5, 5, 0)):
        dst, src = np.zeros(10), np.zeros(10)
        cases.append(({"case": 6, "dst": dst, "dst_stride": dst_stride, "src": src, "src_stride": src_stride,
                       "nelems": nelems},
                      (_sim.check_copy, FN, dst, "dest", dst_stride, src, "src", src_stride, nelems)))
    failures = 0
    for values, simulator in cases:
        expected = _simulator_message(*simulator)
        failures += expected is not None
        assert _device_message(**values) == expected, values
    assert failures >= 12
