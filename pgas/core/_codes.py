"""Integer codes that device functions pass to the primitive layer (compiled code takes
integers where Python would pass names), and the names every primitive layer provides."""
from __future__ import annotations

from ._reductions import OPS

__all__ = ["PRIMITIVES", "THREAD", "WARP", "BLOCK", "RMW_XCHG", "RMW_ADD", "RMW_AND", "RMW_OR", "RMW_XOR",
           "RMW_NAMES", "REDUCE_OPS", "reduce_code", "WAIT_DTYPES", "INDEX_DTYPES", "MASK_DTYPES", "DTYPE_SETS"]

# cooperative scopes: which threads share one call
THREAD, WARP, BLOCK = 0, 1, 2

# atomic read-modify-write operations
RMW_XCHG, RMW_ADD, RMW_AND, RMW_OR, RMW_XOR = range(5)
RMW_NAMES = ("xchg", "add", "and", "or", "xor")

# reduction operators, by code
REDUCE_OPS = tuple(OPS)


def reduce_code(op: str) -> int:
    return REDUCE_OPS.index(op)


# dtype sets that ``check_dtype_set`` takes, by code: what a wait polls (wait_until's),
# integer arrays a device function writes indices into, and status masks
WAIT_DTYPES, INDEX_DTYPES, MASK_DTYPES = range(3)
DTYPE_SETS = (("int32", "uint32", "int64", "uint64", "float32", "float64"),
              ("int32", "uint32", "int64", "uint64"),
              ("bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"))


# What each primitive layer (_sim.py, _cuda.py) defines for the shared device functions.
PRIMITIVES = (
    "WARP_SIZE", "jit", "jit_array", "device_function", "name",
    "my_pe", "n_pes", "team_rank", "team_size", "team_pe", "team_index_of",
    "local", "plain", "plain_or_none", "part", "team_arrays", "barrier_words", "copy_strided", "reduce_from_peers",
    "scan_to_peers",
    "transfer", "remote_store", "remote_load", "remote_rmw", "remote_compare_swap", "remote_atomic_load",
    "load_acquire", "fence", "quiet", "atomic_rmw", "atomic_compare_swap",
    "group_rank_and_size", "group_sync", "compare", "wait_for_value", "wait_for_arrivals", "wait_start", "wait_pause",
    "peer_address", "peer_view", "multicast_view", "cast_like", "check_dtype_set",
    "check_not_empty", "check_copy", "check_cmp", "check_signal", "check_sig_op", "check_size",
    "check_root", "check_dtypes_match", "check_reduction", "reduce_op_code", "check_team", "check_lock", "refuse",
)
