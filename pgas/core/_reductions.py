"""Reduction operators and the dtypes they take (host and device collectives).

Every op takes the integer types and bool; ``and``/``or``/``xor`` take no float type.
bfloat16 (``pgas.bfloat16``, ml_dtypes' numpy dtype, as NVSHMEM's ``__nv_bfloat16``) is a
float type: each step computed in float32 and rounded to bfloat16, as ml_dtypes' ufuncs do.
Results keep the element type, as numpy's ufuncs do with ``out=``: integers wrap
(``int8`` 100 + 100 is -56), and on ``bool`` ``sum`` is logical or and ``prod`` logical
and (``np.add``/``np.multiply`` on bool), ``min`` is and, ``max`` is or.

OpenSHMEM 1.5's other types: complex64 and complex128 reduce with ``sum`` and ``prod``
(host and device), ``np.longdouble`` with ``sum``, ``prod``, ``min`` and ``max`` on the
host of the simulator backend only: GPUs have no long double (``on_device`` refuses it).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from ._errors import PgasValueError

__all__ = ["OPS", "BITWISE_OPS", "REDUCTION_DTYPES", "DEVICE_REDUCTION_DTYPES", "BFLOAT16", "LONGDOUBLE",
           "is_float", "ops_for", "reduction_ufunc", "reduce_into", "identity"]

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)

OPS = {"sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum,
       "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}
BITWISE_OPS = ("and", "or", "xor")
_INTEGER_DTYPES = tuple(np.dtype(d) for d in (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32,
                                             np.int64, np.uint64))
_FLOAT_DTYPES = (*(np.dtype(d) for d in (np.float16, np.float32, np.float64)), BFLOAT16)
_COMPLEX_DTYPES = (np.dtype(np.complex64), np.dtype(np.complex128))
_COMPLEX_OPS = ("sum", "prod")      # OpenSHMEM 1.5 reduces complex numbers with these alone
LONGDOUBLE = np.dtype(np.longdouble)   # x86-64's 80-bit extended; float64 where the C compiler says so
DEVICE_REDUCTION_DTYPES = (*_INTEGER_DTYPES, *_FLOAT_DTYPES, np.dtype(np.bool_), *_COMPLEX_DTYPES)
REDUCTION_DTYPES = (*DEVICE_REDUCTION_DTYPES, *((LONGDOUBLE,) if LONGDOUBLE not in _FLOAT_DTYPES else ()))


def is_float(dtype: np.dtype) -> bool:
    """True for the floating-point dtypes, bfloat16 among them (numpy's kind "V" for it)."""
    return dtype.kind == "f" or dtype == BFLOAT16


def ops_for(dtype) -> tuple:
    """ops_for(dtype) -> the names of the ops that reduce ``dtype`` (empty if none do)."""
    dtype = np.dtype(dtype)
    if dtype not in REDUCTION_DTYPES:
        return ()
    if dtype.kind == "c":
        return _COMPLEX_OPS
    return tuple(op for op in OPS if not is_float(dtype) or op not in BITWISE_OPS)


def reduction_ufunc(fn: str, op, dtype: np.dtype, on_device: bool = False):
    """reduction_ufunc(fn, op, dtype, on_device=False) -> the numpy ufunc of ``op`` for
    ``dtype``, or a PgasValueError saying what is allowed. ``on_device``: the reduction
    runs on a GPU (a device function, or a host reduction of the cuda backend), which has
    no long double."""
    if op not in OPS:
        raise PgasValueError(f"{fn}: op must be one of {', '.join(OPS)}, got {op!r}")
    if on_device and dtype not in DEVICE_REDUCTION_DTYPES and dtype in REDUCTION_DTYPES:
        raise PgasValueError(f"{fn}: {dtype} (np.longdouble) has no GPU type: long double reductions run on the "
                             f"host of the simulator backend only; use float64 on the device")
    allowed = DEVICE_REDUCTION_DTYPES if on_device else REDUCTION_DTYPES
    if dtype not in allowed:
        names = ", ".join(str(d) for d in allowed)
        raise PgasValueError(f"{fn}: reductions take the dtypes {names}; got {dtype}")
    if op not in ops_for(dtype):
        if dtype.kind == "c":
            raise PgasValueError(f"{fn}: op {op!r} takes no complex dtype (OpenSHMEM reduces complex numbers "
                                 f"with {' and '.join(_COMPLEX_OPS)}), got {dtype}")
        raise PgasValueError(f"{fn}: op {op!r} needs an integer or bool dtype, got {dtype}")
    return OPS[op]


def reduce_into(out: np.ndarray, arrays: list, ufunc) -> None:
    """out = arrays[0] op arrays[1] op ..., in that order (every PE gets the same bits),
    in as few passes as possible."""
    if len(arrays) == 1:
        out[...] = arrays[0]
        return
    ufunc(arrays[0], arrays[1], out=out)
    for more in arrays[2:]:
        ufunc(out, more, out=out)


def identity(op: str, dtype) -> np.generic:
    """identity(op, dtype) -> ``op``'s identity in ``dtype`` (what an exclusive scan gives
    team rank 0): 0 for sum, or and xor (+0.0 for floats, as OpenSHMEM's exscan says), 1
    for prod, all bits set for and, the dtype's largest value for min (+inf for floats)
    and smallest for max (-inf); on bool True for prod, min and and, else False."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return np.bool_(op in ("prod", "min", "and"))
    if op in ("sum", "or", "xor"):
        return dtype.type(0)
    if op == "prod":
        return dtype.type(1)
    if op == "and":
        return np.array(-1).astype(dtype)[()]    # every bit set, signed or not
    if is_float(dtype):
        return dtype.type(np.inf if op == "min" else -np.inf)
    info = np.iinfo(dtype)
    return dtype.type(info.max if op == "min" else info.min)
