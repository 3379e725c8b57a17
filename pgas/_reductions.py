"""Reduction operators and the dtypes they take (host and device collectives)."""
from __future__ import annotations

import numpy as np

from ._errors import PgasValueError

__all__ = ["OPS", "REDUCTION_DTYPES", "reduction_ufunc"]

OPS = {"sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum,
       "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}
_BITWISE = ("and", "or", "xor")
REDUCTION_DTYPES = tuple(np.dtype(d) for d in (np.int32, np.int64, np.uint32, np.uint64,
                                                np.float16, np.float32, np.float64))


def reduction_ufunc(fn: str, op, dtype: np.dtype):
    """The numpy ufunc of ``op`` for ``dtype``, or a PgasValueError saying what is allowed."""
    if op not in OPS:
        raise PgasValueError(f"{fn}: op must be one of {', '.join(OPS)}, got {op!r}")
    if dtype not in REDUCTION_DTYPES:
        names = ", ".join(str(d) for d in REDUCTION_DTYPES)
        raise PgasValueError(f"{fn}: reductions take the dtypes {names}; got {dtype}")
    if op in _BITWISE and dtype.kind == "f":
        raise PgasValueError(f"{fn}: op {op!r} needs an integer dtype, got {dtype}")
    return OPS[op]
