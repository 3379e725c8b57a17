"""Signal operations and comparisons, with NVSHMEM's values (host and device)."""
from __future__ import annotations

__all__ = [
    "SIGNAL_SET", "SIGNAL_ADD",
    "CMP_EQ", "CMP_NE", "CMP_GT", "CMP_LE", "CMP_LT", "CMP_GE",
]

SIGNAL_SET = 0
SIGNAL_ADD = 5

CMP_EQ = 0
CMP_NE = 1
CMP_GT = 2
CMP_LE = 3
CMP_LT = 4
CMP_GE = 5

CMP_NAMES = {CMP_EQ: "==", CMP_NE: "!=", CMP_GT: ">", CMP_LE: "<=", CMP_LT: "<", CMP_GE: ">="}
