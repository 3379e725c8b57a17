"""The cuda layer's checks. What a kernel's types decide (equal dtypes, a signal's dtype, a
reduction's op on its dtype) is refused when the kernel compiles (a TypingError); what only
the values decide is checked on the device: a failure is recorded in the PE's mailbox,
then the kernel traps (``_state_reads.record_failure``, texts in
``pgas/core/_device_errors.py``)."""
from __future__ import annotations

import numpy as np
from numba import types
from numba.core.errors import TypingError
from numba.cuda.extending import intrinsic

from ..core._codes import DTYPE_SETS, REDUCE_OPS, reduce_code
from ..core._device_errors import LOCK_DTYPE
from ..core._errors import PgasError
from ..core._reductions import BFLOAT16, reduction_ufunc
from ._ir import check_codegens
from ._state_reads import record_failure

__all__ = ["check_not_empty", "check_copy", "check_cmp", "check_signal", "check_sig_op", "check_size", "check_root",
           "check_dtype_set", "reduce_op_code", "check_reduction", "check_dtypes_match", "literal",
           "same_dtype_or_refuse", "check_lock", "refuse"]

_CHECKS = check_codegens(record_failure)


@intrinsic
def check_not_empty(typingctx, fn, what, arr):
    return types.void(fn, what, arr), _CHECKS["not_empty"]


@intrinsic
def check_copy(typingctx, fn, dst, dst_name, dst_stride, src, src_name, src_stride, nelems):
    same_dtype_or_refuse(literal(dst_name), dst, literal(src_name), src)
    return types.void(fn, dst, dst_name, dst_stride, src, src_name, src_stride, nelems), _CHECKS["copy"]


@intrinsic
def check_cmp(typingctx, fn, cmp):
    return types.void(fn, cmp), _CHECKS["cmp"]


@intrinsic
def check_signal(typingctx, fn, signal):
    _refuse_signal_dtype(signal)
    return types.void(fn, signal), _CHECKS["signal"]


@intrinsic
def check_sig_op(typingctx, fn, sig_op):
    return types.void(fn, sig_op), _CHECKS["sig_op"]


@intrinsic
def check_size(typingctx, fn, what, have, need, why):
    return types.void(fn, what, have, need, why), _CHECKS["size"]


@intrinsic
def check_root(typingctx, fn, root, team_size):
    return types.void(fn, root, team_size), _CHECKS["root"]


def _noop(context, builder, sig, args):
    return context.get_dummy_value()


def numpy_dtype(dtype) -> np.dtype:
    """The numpy dtype of numba type ``dtype`` (numba-cuda's bfloat16 is ml_dtypes')."""
    return BFLOAT16 if str(dtype) == "__nv_bfloat16" else np.dtype(str(dtype))


@intrinsic
def check_lock(typingctx, fn, lock):
    """A lock of another dtype than int64 is refused when the kernel compiles."""
    if not isinstance(lock, types.Array) or str(lock.dtype) != "int64":
        raise TypingError(f"pgas.device: {LOCK_DTYPE.format(dtype=getattr(lock, 'dtype', lock))}")
    return types.void(fn, lock), _noop


@intrinsic
def refuse(typingctx, fn, kind):
    """A misuse that the data shows (``kind``: a KIND code, no fields): recorded in the
    mailbox, and the kernel traps; the host raises it with the simulator's text."""
    def codegen(context, builder, sig, args):
        zero = context.get_constant(types.int64, 0)
        record_failure(context, builder, context.cast(builder, args[1], sig.args[1], types.int64),
                       [(sig.args[0], args[0]), ("", None), ("", None)], [zero, zero, zero])
        return context.get_dummy_value()
    return types.void(fn, kind), codegen


def literal(text) -> str:
    return text.literal_value if isinstance(text, types.StringLiteral) else "the arrays"


def same_dtype_or_refuse(first: str, a, second: str, b):
    if a.dtype != b.dtype:
        raise TypingError(f"pgas.device: {first} and {second} must have the same dtype, got {first} {a.dtype} "
                          f"and {second} {b.dtype}")


@intrinsic
def _same_dtype(typingctx, name_a, a, name_b, b):
    same_dtype_or_refuse(literal(name_a), a, literal(name_b), b)
    return types.void(name_a, a, name_b, b), _noop


@intrinsic
def check_dtype_set(typingctx, fn, what, arr, allowed):
    """Refuse ``arr`` unless its dtype is in DTYPE_SETS[allowed]: an intrinsic, so that the
    caller's constant code arrives as a literal (typed only then: None makes numba retype
    the call with the literal)."""
    if not isinstance(allowed, types.IntegerLiteral):
        return None
    names = DTYPE_SETS[allowed.literal_value]
    if str(arr.dtype) not in names:
        raise TypingError(f"pgas.device: {literal(what)} must have one of the dtypes {', '.join(names)}, "
                          f"got {arr.dtype}")
    return types.void(fn, what, arr, allowed), _noop


def _refuse_signal_dtype(signal):
    if str(signal.dtype) not in ("uint64", "int64"):
        raise TypingError(f"pgas.device: signal must be a uint64 (or int64) symmetric array, got {signal.dtype}")


@intrinsic
def reduce_op_code(typingctx, op, label):
    """The code of the reduction named by constant string ``op``, as a literal (so that
    ``check_reduction`` checks it against the dtype when the kernel compiles)."""
    fn = literal(label)
    if not isinstance(op, types.StringLiteral) or op.literal_value not in REDUCE_OPS:
        shown = repr(op.literal_value) if isinstance(op, types.StringLiteral) else f"a {op} that is not a constant"
        raise TypingError(f"{fn}: op must be one of {', '.join(REDUCE_OPS)} (a constant string), got {shown}")
    code = reduce_code(op.literal_value)

    def codegen(context, builder, sig, args):
        return context.get_constant(types.int64, code)
    return types.IntegerLiteral(code)(op, label), codegen


@intrinsic
def check_reduction(typingctx, fn, op, arr):
    """Refuse a reduction of ``arr``'s dtype that ``op`` does not take. Typed only with a
    literal op (None otherwise makes numba retype the callers with the literal code)."""
    if not isinstance(op, types.IntegerLiteral):
        return None
    try:
        reduction_ufunc("pgas.device", REDUCE_OPS[op.literal_value], numpy_dtype(arr.dtype), on_device=True)
    except PgasError as exc:
        raise TypingError(str(exc)) from None
    return types.void(fn, op, arr), _noop


@intrinsic
def check_dtypes_match(typingctx, fn, dest, src):
    same_dtype_or_refuse("dest", dest, "src", src)
    return types.void(fn, dest, src), _noop
