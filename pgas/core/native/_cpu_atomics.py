"""Real CPU memory-ordering operations on shared memory, for the simulator backend.

numba's simulated ``cuda.atomic`` and ``threadfence`` act only within one process, but
PEs are separate processes sharing mappings. These few LLVM IR functions, compiled once
with llvmlite and called through ctypes, give acquire loads, release stores and fences
that hold across processes on any CPU architecture, and the atomics of the device API
(integer read-modify-writes and compare-swap; float add, exchange and compare-swap).
"""
from __future__ import annotations

import ctypes
import functools
import platform

import numpy as np

from .._address import address_of
from .._errors import PgasValueError
from ._llvm import built_once, compile_ir
from .._reductions import BITWISE_OPS  # integers only here

_TSO = platform.machine().lower() in ("x86_64", "amd64")   # total store order: see int64_word

__all__ = ["load_acquire", "fence", "rmw", "compare_swap", "int64_word", "check_word", "check_dtype",
           "as_bits", "from_bits",
           "ORDERED_DTYPES", "INTEGER_DTYPES", "FLOAT_DTYPES", "RMW_OPS", "BITWISE_OPS"]

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
INTEGER_DTYPES = tuple(d for d in _TYPES if d.kind in "iu")
# Floats are exchanged and compared as their bit patterns, through the same-size integer.
_BITS = {np.dtype(np.float32): np.dtype(np.uint32), np.dtype(np.float64): np.dtype(np.uint64)}
FLOAT_DTYPES = tuple(_BITS)
RMW_OPS = ("xchg", "add", "and", "or", "xor")

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
_IR_PER_INT = """
define {t} @rmw_{op}_{t}({t}* %p, {t} %v) {{
  %old = atomicrmw {op} {t}* %p, {t} %v seq_cst
  ret {t} %old
}}
"""
_IR_FADD = """
define {t} @rmw_fadd_{t}({t}* %p, {t} %v) {{
  %old = atomicrmw fadd {t}* %p, {t} %v seq_cst
  ret {t} %old
}}
"""
_IR_CAS = """
define {t} @cas_{t}({t}* %p, {t} %cond, {t} %v) {{
  %pair = cmpxchg {t}* %p, {t} %cond, {t} %v seq_cst seq_cst
  %old = extractvalue {{ {t}, i1 }} %pair, 0
  ret {t} %old
}}
"""
_IR_FENCE = """
define void @fence_seq_cst() {
  fence seq_cst
  ret void
}
"""


class _Compiled:
    """The compiled functions, built on first use (llvmlite start-up is not free). Called
    with the interpreter lock held (``PYFUNCTYPE``): each is one instruction or a short
    compare-and-swap loop, and a simulated device thread that let the lock go for it
    waited 10-25 us to get it back (other simulated threads and numba's polling loop take
    it meanwhile), more than the operation it waited for. Waits release it when they
    pause (``core._waiting.Wait``)."""

    def __init__(self):
        llvm_types = {t: a for t, a, _ in _TYPES.values()}
        ir = _IR_FENCE + "".join(_IR_PER_TYPE.format(t=t, a=a) for t, a in llvm_types.items())
        ir += "".join(_IR_PER_INT.format(t=t, op=op) for t in ("i32", "i64") for op in RMW_OPS)
        ir += "".join(_IR_CAS.format(t=t) for t in ("i32", "i64"))
        ir += "".join(_IR_FADD.format(t=_TYPES[d][0]) for d in FLOAT_DTYPES)
        self._engine = compile_ir(ir)       # keeps the code alive
        address = self._engine.get_function_address
        function = ctypes.PYFUNCTYPE
        self.loads, self.stores, self.rmws, self.cas = {}, {}, {}, {}
        for dtype, (t, _, ctype) in _TYPES.items():
            self.loads[dtype] = function(ctype, ctypes.c_void_p)(address(f"load_acquire_{t}"))
            self.stores[dtype] = function(None, ctypes.c_void_p, ctype)(address(f"store_release_{t}"))
            if dtype in INTEGER_DTYPES:
                for op in RMW_OPS:
                    self.rmws[dtype, op] = function(ctype, ctypes.c_void_p, ctype)(
                        address(f"rmw_{op}_{t}"))
                self.cas[dtype] = function(ctype, ctypes.c_void_p, ctype, ctype)(address(f"cas_{t}"))
            else:       # float add is arithmetic in the float type (exchange and CAS go by the bits)
                self.rmws[dtype, "add"] = function(ctype, ctypes.c_void_p, ctype)(address(f"rmw_fadd_{t}"))
        self.fence = function(None)(address("fence_seq_cst"))


_get = built_once(_Compiled)


def _check_dtype(dtype: np.dtype, fn: str, what: str, allowed) -> None:
    if dtype not in allowed:
        names = ", ".join(str(d) for d in allowed)
        raise PgasValueError(f"{fn}: {what} must have one of the dtypes {names}, got {dtype}")


def _checked(arr: np.ndarray, fn: str, what: str, allowed=ORDERED_DTYPES):
    _check_dtype(arr.dtype, fn, what, allowed)
    if arr.size == 0:
        raise PgasValueError(f"{fn}: {what} is empty; it needs at least one element")
    return address_of(arr)


def load_acquire(arr: np.ndarray, fn: str, what: str):
    """Element 0 of ``arr``, read with acquire ordering."""
    address = _checked(arr, fn, what)
    return arr.dtype.type(_get().loads[arr.dtype](address))


def fence() -> None:
    """A sequentially consistent fence (orders this process's loads and stores)."""
    _get().fence()


def _as_int(dtype: np.dtype, value) -> int:
    """``value`` as the integer the hardware operand holds (float bits for float dtypes);
    ctypes wraps integers to the operand's width, as the GPU does."""
    if dtype in _BITS:
        return int(np.array(value, dtype).view(_BITS[dtype]))
    return int(value)


def _from_int(dtype: np.dtype, bits: int):
    if dtype in _BITS:
        return np.array(bits, _BITS[dtype]).view(dtype)[()]
    return dtype.type(bits)


def _dtypes_for(op: str) -> tuple:
    """The dtypes atomic ``op`` takes: the bitwise ops integers only; add also floats
    (arithmetic in the type); exchange, compare-swap and loads also floats (as bit patterns)."""
    return INTEGER_DTYPES if op in BITWISE_OPS else ORDERED_DTYPES


def check_word(arr: np.ndarray, fn: str, what: str, op: str) -> None:
    """The checks ``rmw`` (``op``), ``compare_swap`` (``"cas"``) or ``load_acquire``
    (``"load"``) make, for an atomic another agent (the NIC) will apply."""
    _checked(arr, fn, what, _dtypes_for(op))


def check_dtype(dtype, fn: str, what: str, op: str) -> None:
    """PgasValueError naming ``what`` unless atomic ``op`` (as for ``check_word``) takes ``dtype``."""
    _check_dtype(np.dtype(dtype), fn, what, _dtypes_for(op))


def as_bits(dtype: np.dtype, value) -> int:
    """``value`` of ``dtype`` as the unsigned integer of its bits."""
    return _as_int(dtype, value) & ((1 << (8 * dtype.itemsize)) - 1)


def from_bits(dtype: np.dtype, bits: int):
    """The ``dtype`` value whose bits are the unsigned integer ``bits``."""
    return np.array([bits], f"u{dtype.itemsize}").view(dtype)[0]


def rmw(arr: np.ndarray, op: str, value, fn: str, what: str):
    """Atomically apply ``op`` (one of RMW_OPS) with ``value`` to element 0; returns the old value.

    ``xchg`` and ``add`` also take float32/float64 (``add`` adds in the float type, ``xchg``
    moves the bits); the bitwise ops take integers only.
    """
    dtype = arr.dtype
    address = _checked(arr, fn, what, _dtypes_for(op))
    compiled = _get()
    if dtype in _BITS and op == "add":
        return dtype.type(compiled.rmws[dtype, op](address, float(value)))
    int_dtype = _BITS.get(dtype, dtype)
    old = compiled.rmws[int_dtype, op](address, _as_int(dtype, value))
    return _from_int(dtype, old)


def compare_swap(arr: np.ndarray, cond, value, fn: str, what: str):
    """Atomically: if element 0 equals ``cond`` (bitwise for floats) set it to ``value``; returns the old value."""
    dtype = arr.dtype
    address = _checked(arr, fn, what)
    int_dtype = _BITS.get(dtype, dtype)
    old = _get().cas[int_dtype](address, _as_int(dtype, cond), _as_int(dtype, value))
    return _from_int(dtype, old)


def int64_word(arr: np.ndarray, fn: str, what: str):
    """Acquire-load and release-store functions bound to element 0 of int64 ``arr``, for
    hot polling loops: ``load()`` and ``store(value)`` skip the per-call checks.

    On x86-64 they are numpy's own element read and write: an aligned 8-byte access is
    one ``mov``, atomic, and x86's memory order (TSO) makes every load an acquire and every
    store a release; the C calls around them keep the compiler from reordering (C11's
    acquire load and release store compile to the same ``mov``). That is a quarter of the
    cost of the ctypes call, which other CPUs need."""
    address = _checked(arr, fn, what, (np.dtype(np.int64),))
    if _TSO:
        word = arr.reshape(-1)[:1]
        return functools.partial(word.__getitem__, 0), functools.partial(word.__setitem__, 0)
    compiled = _get()
    load, store = compiled.loads[arr.dtype], compiled.stores[arr.dtype]
    return (lambda: load(address)), (lambda value: store(address, value))
