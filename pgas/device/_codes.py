"""Integer codes that device functions pass to the primitive layer (compiled code takes
integers where Python would pass names)."""
from __future__ import annotations

from .._reductions import OPS

__all__ = ["THREAD", "WARP", "BLOCK", "RMW_XCHG", "RMW_ADD", "RMW_AND", "RMW_OR", "RMW_XOR",
           "RMW_NAMES", "REDUCE_OPS", "reduce_code"]

# cooperative scopes: which threads share one call
THREAD, WARP, BLOCK = 0, 1, 2

# atomic read-modify-write operations
RMW_XCHG, RMW_ADD, RMW_AND, RMW_OR, RMW_XOR = range(5)
RMW_NAMES = ("xchg", "add", "and", "or", "xor")

# reduction operators, by code
REDUCE_OPS = tuple(OPS)


def reduce_code(op: str) -> int:
    return REDUCE_OPS.index(op)
