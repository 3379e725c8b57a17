"""Real CPU memory-ordering operations on shared memory, for the simulator backend.

numba's simulated ``cuda.atomic`` and ``threadfence`` act only within one process, but
PEs are separate processes sharing mappings. These few LLVM IR functions, compiled once
with llvmlite and called through ctypes, give acquire loads, release stores and fences
that hold across processes on any CPU architecture.
"""
from __future__ import annotations

import ctypes

import numpy as np

from .._errors import PgasValueError

__all__ = ["load_acquire", "store_release", "fence", "ORDERED_DTYPES"]

# numpy dtype -> (LLVM type, alignment, ctypes type)
_TYPES = {
    np.dtype(np.int32): ("i32", 4, ctypes.c_int32),
    np.dtype(np.uint32): ("i32", 4, ctypes.c_uint32),
    np.dtype(np.int64): ("i64", 8, ctypes.c_int64),
    np.dtype(np.uint64): ("i64", 8, ctypes.c_uint64),
    np.dtype(np.float32): ("float", 4, ctypes.c_float),
    np.dtype(np.float64): ("double", 8, ctypes.c_double),
}
ORDERED_DTYPES = tuple(_TYPES)

_IR_PER_TYPE = """
define {t} @load_acquire_{t}({t}* %p) {{
  %v = load atomic {t}, {t}* %p acquire, align {a}
  ret {t} %v
}}
define void @store_release_{t}({t}* %p, {t} %v) {{
  store atomic {t} %v, {t}* %p release, align {a}
  ret void
}}
"""
_IR_FENCE = """
define void @fence_seq_cst() {
  fence seq_cst
  ret void
}
"""


class _Compiled:
    """The compiled functions, built on first use (llvmlite start-up is not free)."""

    def __init__(self):
        import llvmlite.binding as llvm

        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        llvm_types = {t: a for t, a, _ in _TYPES.values()}
        ir = _IR_FENCE + "".join(_IR_PER_TYPE.format(t=t, a=a) for t, a in llvm_types.items())
        module = llvm.parse_assembly(ir)
        module.verify()
        machine = llvm.Target.from_default_triple().create_target_machine()
        self._engine = llvm.create_mcjit_compiler(module, machine)  # keeps the code alive
        self._engine.finalize_object()
        address = self._engine.get_function_address
        self.loads, self.stores = {}, {}
        for dtype, (t, _, ctype) in _TYPES.items():
            self.loads[dtype] = ctypes.CFUNCTYPE(ctype, ctypes.c_void_p)(address(f"load_acquire_{t}"))
            self.stores[dtype] = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctype)(address(f"store_release_{t}"))
        self.fence = ctypes.CFUNCTYPE(None)(address("fence_seq_cst"))


_compiled: _Compiled | None = None


def _get() -> _Compiled:
    global _compiled
    if _compiled is None:
        _compiled = _Compiled()
    return _compiled


def _checked(arr: np.ndarray, fn: str, what: str):
    if arr.dtype not in _TYPES:
        allowed = ", ".join(str(d) for d in _TYPES)
        raise PgasValueError(f"{fn}: {what} must have one of the dtypes {allowed}, got {arr.dtype}")
    if arr.size == 0:
        raise PgasValueError(f"{fn}: {what} is empty; it needs at least one element")
    return arr.__array_interface__["data"][0]


def load_acquire(arr: np.ndarray, fn: str, what: str):
    """Element 0 of ``arr``, read with acquire ordering."""
    address = _checked(arr, fn, what)
    return arr.dtype.type(_get().loads[arr.dtype](address))


def store_release(arr: np.ndarray, value, fn: str, what: str) -> None:
    """Write ``value`` to element 0 of ``arr`` with release ordering."""
    address = _checked(arr, fn, what)
    _get().stores[arr.dtype](address, arr.dtype.type(value).item())


def fence() -> None:
    """A sequentially consistent fence (orders this process's loads and stores)."""
    _get().fence()
