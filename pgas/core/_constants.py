"""Signal operations, comparisons and predefined teams, with NVSHMEM's values (host and device)."""
from __future__ import annotations

__all__ = [
    "SIGNAL_SET", "SIGNAL_ADD",
    "CMP_EQ", "CMP_NE", "CMP_GT", "CMP_LE", "CMP_LT", "CMP_GE",
    "TEAM_WORLD", "TEAM_NODE", "TEAM_SHARED", "MAX_TEAMS",
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

# Teams are integer handles (they pass into kernels as-is). At most MAX_TEAMS exist at
# once on a PE, the two predefined ones included (NVSHMEM's default NVSHMEM_MAX_TEAMS).
TEAM_WORLD = 0
TEAM_NODE = 1
TEAM_SHARED = TEAM_NODE
MAX_TEAMS = 32
