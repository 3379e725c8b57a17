"""Helpers of the cuda primitive layer built in place as LLVM IR (numba intrinsic codegen):
the copy behind every put and get, the fold behind every reduction, the comparison of
every wait, and the value checks of the device functions.

A helper written in Python costs numba a whole compilation pipeline per signature (its
loops, slices and integer promotions typed and lowered), about 0.1 s for the copy below;
built here it costs almost nothing. The IR is plain LLVM, so the tests run it on the CPU as
well (``tests/test_cuda_ir.py``), against numpy. The exceptions are float16 and bfloat16 as
numba-cuda holds them, their 16 bits (``_combine_16_bits``: PTX's ``cvt``); numba's CPU
target holds float16 as ``half`` and never reaches it.
"""
from __future__ import annotations

from llvmlite import ir
from numba.core import cgutils, types
from numba.core.errors import TypingError

from ..core._codes import reduce_code
from ..core._constants import CMP_NAMES, SIGNAL_ADD, SIGNAL_SET
from ..core._device_errors import KIND

__all__ = ["copy_strided_type", "copy_strided_codegen", "FOLD_COPY", "fold_type", "fold_codegen", "combine",
           "compare_codegen", "check_codegens", "constant_text"]

_I64 = ir.IntType(64)
_VECTOR = 16   # bytes moved by one vector load and store
FOLD_COPY = -1   # the op code of a fold that copies (every other is a reduction code)
_SUM, _PROD, _MIN, _MAX, _AND, _OR, _XOR = (reduce_code(op) for op in ("sum", "prod", "min", "max", "and", "or",
                                                                        "xor"))


def copy_strided_type(dst, dst_stride, src, src_stride, nelems, rank, size):
    """The signature of ``copy_strided`` for these argument types (equal dtypes only)."""
    if dst.dtype != src.dtype:
        raise TypingError(f"copy_strided: dst and src must have the same dtype, got {dst.dtype} and {src.dtype}")
    return types.void(dst, dst_stride, src, src_stride, nelems, rank, size)


def copy_strided_codegen(context, builder, sig, args):
    """dst[i * dst_stride] = src[i * src_stride] for i in range(rank, nelems, size): threads
    ``rank`` of ``size`` share the copy. Contiguous copies whose ends are equally aligned
    move 16 bytes per load and store (the elements before the first 16-byte boundary and
    after the last one singly)."""
    dst_type, src_type = sig.args[0], sig.args[2]
    dst = context.make_array(dst_type)(context, builder, value=args[0]).data
    src = context.make_array(src_type)(context, builder, value=args[2]).data
    dst_stride, src_stride, nelems, rank, size = (context.cast(builder, args[k], sig.args[k], types.int64)
                                                  for k in (1, 3, 4, 5, 6))
    itemsize = context.get_abi_sizeof(context.get_data_type(dst_type.dtype))

    def copy_elements(start, stop, dst_step, src_step):
        with cgutils.for_range_slice(builder, start, stop, size, _I64) as (i, _):
            value = builder.load(builder.gep(src, [builder.mul(i, src_step)]))
            builder.store(value, builder.gep(dst, [builder.mul(i, dst_step)]))

    if _VECTOR % itemsize:
        copy_elements(rank, nelems, dst_stride, src_stride)
        return context.get_dummy_value()
    one, sixteen = _I64(1), _I64(_VECTOR)
    to, frm = builder.ptrtoint(dst, _I64), builder.ptrtoint(src, _I64)
    contiguous = builder.and_(builder.icmp_signed("==", dst_stride, one), builder.icmp_signed("==", src_stride, one))
    same_phase = builder.icmp_signed("==", builder.and_(builder.sub(to, frm), _I64(_VECTOR - 1)), _I64(0))
    # elements on their own alignment (a byte view may place them anywhere): else the head
    # would not end on a 16-byte boundary
    aligned = builder.icmp_signed("==", builder.and_(to, _I64(itemsize - 1)), _I64(0))
    with builder.if_else(builder.and_(builder.and_(contiguous, same_phase), aligned)) as (vectors, elements):
        with vectors:
            # elements before dst's first 16-byte boundary, then whole 16-byte chunks, then the rest
            lead = builder.udiv(builder.and_(builder.sub(sixteen, builder.and_(to, _I64(_VECTOR - 1))),
                                             _I64(_VECTOR - 1)), _I64(itemsize))
            head = builder.select(builder.icmp_signed("<", nelems, lead), nelems, lead)
            chunks = builder.sdiv(builder.mul(builder.sub(nelems, head), _I64(itemsize)), sixteen)
            tail = builder.add(head, builder.mul(chunks, _I64(_VECTOR // itemsize)))
            copy_elements(rank, head, one, one)
            skipped = builder.mul(head, _I64(itemsize))
            to_chunks, from_chunks = builder.add(to, skipped), builder.add(frm, skipped)
            vector = ir.VectorType(_I64, 2).as_pointer()
            with cgutils.for_range_slice(builder, rank, chunks, size, _I64) as (i, _):
                offset = builder.mul(i, sixteen)
                data = builder.load(builder.inttoptr(builder.add(from_chunks, offset), vector), align=_VECTOR)
                builder.store(data, builder.inttoptr(builder.add(to_chunks, offset), vector), align=_VECTOR)
            copy_elements(builder.add(tail, rank), nelems, one, one)
        with elements:
            copy_elements(rank, nelems, dst_stride, src_stride)
    return context.get_dummy_value()


def fold_type(op, dst, dst_lo, src, src_lo, count, rank, size):
    """The signature of ``fold`` (``op`` must be a literal: one op's code is built)."""
    if not isinstance(op, types.IntegerLiteral):
        return None
    if dst.dtype != src.dtype:
        raise TypingError(f"fold: dst and src must have the same dtype, got {dst.dtype} and {src.dtype}")
    return types.void(op, dst, dst_lo, src, src_lo, count, rank, size)


def combine(builder, op: int, dtype, a, b):
    """a ``op`` b in the element type, as numpy's ufunc with ``out=`` of that type computes it:
    integers wrap; on bool sum is or, prod and, min and, max or; a float min or max is NaN
    where either operand is NaN (``np.minimum``/``np.maximum``); complex numbers take sum
    and prod (``_combine_complex``)."""
    if isinstance(dtype, types.Complex):
        return _combine_complex(builder, op, a, b)
    if str(dtype) == "__nv_bfloat16":
        return _combine_16_bits(builder, op, a, b, "bf16")
    if isinstance(dtype, types.Float) and isinstance(a.type, ir.IntType):
        return _combine_16_bits(builder, op, a, b, "f16")
    if isinstance(dtype, types.Float):
        if op in (_SUM, _PROD):
            return builder.fadd(a, b) if op == _SUM else builder.fmul(a, b)
        keep_a = builder.or_(builder.fcmp_ordered("<" if op == _MIN else ">", a, b),
                             builder.fcmp_unordered("uno", a, a))
        return builder.select(keep_a, a, b)
    if isinstance(dtype, types.Boolean):
        op = {_SUM: _OR, _PROD: _AND, _MIN: _AND, _MAX: _OR}.get(op, op)
    if op in (_MIN, _MAX):
        compare = builder.icmp_signed if dtype.signed else builder.icmp_unsigned
        return builder.select(compare("<" if op == _MIN else ">", a, b), a, b)
    return {_SUM: builder.add, _PROD: builder.mul, _AND: builder.and_, _OR: builder.or_, _XOR: builder.xor}[op](a, b)


def _combine_complex(builder, op: int, a, b):
    """The sum or product of complex numbers held as numba holds them, a {real, imag}
    struct: (ar + br, ai + bi), and the product as numpy's SIMD loops compute it on x86-64
    CPUs with fused multiply-add, (fma(ar, br, -(ai*bi)), fma(ar, bi, ai*br)), each fma
    rounded once (PTX's ``fma.rn``; on a CPU without FMA numpy rounds the products
    separately, an ulp apart at most)."""
    ar, ai, br, bi = (builder.extract_value(z, k) for z in (a, b) for k in (0, 1))
    if op == _SUM:
        real, imag = builder.fadd(ar, br), builder.fadd(ai, bi)
    elif op == _PROD:
        fma = builder.module.declare_intrinsic("llvm.fma", [ar.type], ir.FunctionType(ar.type, [ar.type] * 3))
        # (-0.0 - x: NVVM's IR predates LLVM's fneg)
        real = builder.call(fma, [ar, br, builder.fsub(ir.Constant(ar.type, -0.0), builder.fmul(ai, bi))])
        imag = builder.call(fma, [ar, bi, builder.fmul(ai, br)])
    else:
        raise TypingError(f"complex numbers reduce with sum and prod only, got op code {op}")
    return builder.insert_value(builder.insert_value(ir.Constant(a.type, ir.Undefined), real, 0), imag, 1)


def _combine_16_bits(builder, op: int, a, b, kind: str):
    """float16 and bfloat16 as numba-cuda holds them, their 16 bits (``kind``: PTX's "f16"
    or "bf16"): combined in float32 (PTX's ``cvt``), the sum or product rounded once to the
    16-bit type, which is exact rounding (float32 has more than twice the precision of
    either) and what numpy (ml_dtypes for bfloat16) computes; min/max keep an operand's bits."""
    def widen(bits):
        fnty = ir.FunctionType(ir.FloatType(), [ir.IntType(16)])
        return builder.call(ir.InlineAsm(fnty, f"cvt.f32.{kind} $0, $1;", "=f,h"), [bits])
    wide_a, wide_b = widen(a), widen(b)
    if op in (_MIN, _MAX):
        keep_a = builder.or_(builder.fcmp_ordered("<" if op == _MIN else ">", wide_a, wide_b),
                             builder.fcmp_unordered("uno", wide_a, wide_a))
        return builder.select(keep_a, a, b)
    wide = builder.fadd(wide_a, wide_b) if op == _SUM else builder.fmul(wide_a, wide_b)
    fnty = ir.FunctionType(ir.IntType(16), [ir.FloatType()])
    return builder.call(ir.InlineAsm(fnty, f"cvt.rn.{kind}.f32 $0, $1;", "=h,f"), [wide])


def fold_codegen(context, builder, sig, args):
    """dst[dst_lo + i] = dst[dst_lo + i] ``op`` src[src_lo + i] for i in range(rank, count,
    size) (threads ``rank`` of ``size`` share it); with ``FOLD_COPY``, dst[dst_lo + i] =
    src[src_lo + i]. Each element is read before it is written, so dst may be src."""
    op = sig.args[0].literal_value
    dtype = sig.args[1].dtype
    dst = context.make_array(sig.args[1])(context, builder, value=args[1]).data
    src = context.make_array(sig.args[3])(context, builder, value=args[3]).data
    dst_lo, src_lo, count, rank, size = (context.cast(builder, args[k], sig.args[k], types.int64)
                                         for k in (2, 4, 5, 6, 7))
    with cgutils.for_range_slice(builder, rank, count, size, _I64) as (i, _):
        target = builder.gep(dst, [builder.add(dst_lo, i)])
        value = builder.load(builder.gep(src, [builder.add(src_lo, i)]))
        if op != FOLD_COPY:
            value = combine(builder, op, dtype, builder.load(target), value)
        builder.store(value, target)
    return context.get_dummy_value()


def compare_codegen(context, builder, sig, args):
    """``value <cmp> target`` (arguments value, cmp, target) in ``value``'s own type:
    ``target`` is converted to it, so a uint64 word is never compared through float64.
    Every comparison is computed and the one ``cmp`` names selected (False for an unknown
    ``cmp``); NaN is unequal to everything, as in Python."""
    kind = sig.args[0]
    left = args[0]
    right = context.cast(builder, args[2], sig.args[2], kind)
    code = context.cast(builder, args[1], sig.args[1], types.int64)
    result = ir.Constant(ir.IntType(1), 0)
    for number, operator in CMP_NAMES.items():
        if isinstance(kind, types.Float):
            holds = (builder.fcmp_unordered(operator, left, right) if operator == "!=" else
                     builder.fcmp_ordered(operator, left, right))
        elif isinstance(kind, types.Integer) and kind.signed:
            holds = builder.icmp_signed(operator, left, right)
        else:
            holds = builder.icmp_unsigned(operator, left, right)
        result = builder.select(builder.icmp_signed("==", code, _I64(number)), holds, result)
    return result


# Value checks ---------------------------------------------------------------------------
# What only the values decide (sizes, strides, a root, cmp, sig_op). Each failure is handed
# to ``fail(context, builder, kind, texts, numbers)``, the backend's recorder (on a GPU it
# writes the error record and traps): ``kind`` a KIND code, ``texts`` fn, what and why as
# (numba type, value) pairs or (plain string, None), ``numbers`` a, b and c as int64 values.
# The conditions and fields are the simulator's (``pgas/sim/_primitives.py``, ``pgas/core/_checks.py``), so the
# host raises the same text on both backends.

def constant_text(typ) -> str:
    """The text an error record carries for a text argument known when the kernel compiles:
    a plain Python string, a string literal's value, or an array's dtype name."""
    if isinstance(typ, str):
        return typ
    return typ.literal_value if isinstance(typ, types.StringLiteral) else str(typ.dtype)


def _int64(context, builder, sig, args, k):
    return context.cast(builder, args[k], sig.args[k], types.int64)


def _text(sig, args, k):
    return sig.args[k], args[k]


_NO_TEXT = ("", None)


def check_codegens(fail) -> dict:
    """name -> the codegen of that check (its arguments as the primitive layer's), with
    failures handed to ``fail``."""
    zero = _I64(0)

    def when(context, builder, failed, kind, texts, numbers):
        with cgutils.if_unlikely(builder, failed):
            fail(context, builder, KIND[kind], texts, numbers)

    def size(context, builder, sig, args):                 # (fn, what, have, need, why)
        have, need = _int64(context, builder, sig, args, 2), _int64(context, builder, sig, args, 3)
        when(context, builder, builder.icmp_signed("!=", have, need), "SIZE",
             [_text(sig, args, 0), _text(sig, args, 1), _text(sig, args, 4)], [have, need, zero])
        return context.get_dummy_value()

    def root(context, builder, sig, args):                 # (fn, root, team_size)
        value, members = _int64(context, builder, sig, args, 1), _int64(context, builder, sig, args, 2)
        failed = builder.or_(builder.icmp_signed("<", value, zero), builder.icmp_signed(">=", value, members))
        when(context, builder, failed, "ROOT", [_text(sig, args, 0), _NO_TEXT, _NO_TEXT], [value, members, zero])
        return context.get_dummy_value()

    def cmp(context, builder, sig, args):                  # (fn, cmp)
        value = _int64(context, builder, sig, args, 1)
        failed = builder.or_(builder.icmp_signed("<", value, _I64(min(CMP_NAMES))),
                             builder.icmp_signed(">", value, _I64(max(CMP_NAMES))))
        when(context, builder, failed, "CMP", [_text(sig, args, 0), _NO_TEXT, _NO_TEXT], [value, zero, zero])
        return context.get_dummy_value()

    def sig_op(context, builder, sig, args):               # (fn, sig_op)
        value = _int64(context, builder, sig, args, 1)
        failed = builder.and_(builder.icmp_signed("!=", value, _I64(SIGNAL_SET)),
                              builder.icmp_signed("!=", value, _I64(SIGNAL_ADD)))
        when(context, builder, failed, "SIG_OP", [_text(sig, args, 0), _NO_TEXT, _NO_TEXT], [value, zero, zero])
        return context.get_dummy_value()

    def not_empty(context, builder, sig, args):            # (fn, what, arr)
        count = context.make_array(sig.args[2])(context, builder, value=args[2]).nitems
        when(context, builder, builder.icmp_signed("==", count, zero), "NOT_EMPTY",
             [_text(sig, args, 0), _text(sig, args, 1), _NO_TEXT], [zero, zero, zero])
        return context.get_dummy_value()

    def signal(context, builder, sig, args):               # (fn, signal): why is the signal's dtype
        count = context.make_array(sig.args[1])(context, builder, value=args[1]).nitems
        when(context, builder, builder.icmp_signed("==", count, zero), "SIGNAL",
             [_text(sig, args, 0), ("signal", None), _text(sig, args, 1)], [zero, zero, zero])
        return context.get_dummy_value()

    def copy(context, builder, sig, args):   # (fn, dst, dst_name, dst_stride, src, src_name, src_stride, nelems)
        fn = _text(sig, args, 0)
        nelems = _int64(context, builder, sig, args, 7)
        when(context, builder, builder.icmp_signed("<", nelems, zero), "NEGATIVE", [fn, ("nelems", None), _NO_TEXT],
             [nelems, zero, zero])
        for array, name, stride in ((1, 2, 3), (4, 5, 6)):
            name, stride = _text(sig, args, name), _int64(context, builder, sig, args, stride)
            when(context, builder, builder.icmp_signed("<", stride, zero), "NEGATIVE_STRIDE", [fn, name, _NO_TEXT],
                 [stride, zero, zero])
            when(context, builder, builder.icmp_signed("==", stride, zero), "STRIDE_ZERO", [fn, name, _NO_TEXT],
                 [zero, zero, zero])
            count = context.make_array(sig.args[array])(context, builder, value=args[array]).nitems
            reach = builder.add(builder.mul(builder.sub(nelems, _I64(1)), stride), _I64(1))
            failed = builder.and_(builder.icmp_signed(">", nelems, zero), builder.icmp_signed(">", reach, count))
            when(context, builder, failed, "COPY_FITS", [fn, name, _NO_TEXT], [count, nelems, stride])
        return context.get_dummy_value()

    return {"size": size, "root": root, "cmp": cmp, "sig_op": sig_op, "not_empty": not_empty, "signal": signal,
            "copy": copy}
