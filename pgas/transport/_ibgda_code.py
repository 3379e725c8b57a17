"""The GPU-initiated NIC path's per-message code compiled for the CPU (the simulator backend's
device threads and host calls; the cuda backend's host calls to other nodes).

``pgas/_ibgda_ir`` builds ``ibgda_post`` and ``ibgda_progress`` (the protocol and the WQE
layout, shared with the cuda backend); here they get the CPU's memory model (LLVM atomics,
``sched_yield`` between looks) and are compiled once with llvmlite, as ``_cpu_atomics``
is, and called through ctypes (with the native NIC, ``ibgda_post`` is called from numba
instead, by symbol: ``wire._nic_code.post_and_ring``). Python building a WQE field by
field costs ~30 us under the simulator's interpreter lock; this is one call.
"""
from __future__ import annotations

import ctypes

from llvmlite import ir

from ..core.native._llvm import built_once, compile_ir
from ._ibgda_ir import (DESCRIPTOR, KIND_ATOMIC, KIND_DATA, KIND_INLINE, KIND_MASKED_CS_8, W, define_post,
                        define_progress, define_refused)

__all__ = ["DESCRIPTOR", "W", "KIND_DATA", "KIND_INLINE", "KIND_ATOMIC", "KIND_MASKED_CS_8", "CpuMemory",
           "compiled", "concurrent_post"]


class CpuMemory:
    """The memory model ``_ibgda_ir`` is built with on the CPU: LLVM atomics (whose
    orderings the CPU honours across processes) and ``sched_yield`` as the pause."""

    @staticmethod
    def load(builder, pointer, order: str):
        return builder.load_atomic(pointer, order, pointer.type.pointee.width // 8)

    @staticmethod
    def store(builder, value, pointer, order: str):
        builder.store_atomic(value, pointer, order, value.type.width // 8)

    @staticmethod
    def cas(builder, pointer, expected, new):
        """True when ``*pointer`` was ``expected`` and is now ``new`` (acquire-release)."""
        return builder.extract_value(builder.cmpxchg(pointer, expected, new, "acq_rel", "monotonic"), 1)

    @staticmethod
    def rmw(builder, op: str, pointer, value):
        """``xchg`` (sequentially consistent: the doorbell hand-off), ``add`` (a relaxed
        count) or ``umax`` (acquire-release: the completion floor); the old value."""
        order = {"xchg": "seq_cst", "add": "monotonic", "umax": "acq_rel"}[op]
        return builder.atomic_rmw(op, pointer, value, order)

    @staticmethod
    def pause(builder):
        module = builder.module
        sched_yield = module.globals.get("sched_yield") or ir.Function(
            module, ir.FunctionType(ir.IntType(32), []), "sched_yield")
        builder.call(sched_yield, [])


def _module_text() -> str:
    module = ir.Module("pgas_ibgda")
    define_post(module, CpuMemory)
    define_progress(module, CpuMemory)
    define_refused(module, CpuMemory)
    return str(module)


_ARGS = (ctypes.c_void_p, ctypes.c_int32, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint32,
         ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64,
         ctypes.c_int32)


class _Compiled:
    """``post``, ``progress`` and ``refused``, called with the interpreter lock held (PYFUNCTYPE): a
    simulated device thread never waits for the lock again after its call, which under
    the simulator's polling loop costs up to a switch interval. The protocol inside is the
    one concurrent GPU threads need (``concurrent_post`` calls it without the lock)."""

    def __init__(self):
        self._engine = compile_ir(_module_text())     # keeps the code alive
        self.post_address = self._engine.get_function_address("ibgda_post")
        self.progress_address = self._engine.get_function_address("ibgda_progress")
        self.post = ctypes.PYFUNCTYPE(ctypes.c_int64, *_ARGS)(self.post_address)
        self.progress = ctypes.PYFUNCTYPE(ctypes.c_uint64, ctypes.c_void_p)(self.progress_address)
        self.refused = ctypes.PYFUNCTYPE(ctypes.c_int64, ctypes.c_void_p)(
            self._engine.get_function_address("ibgda_refused"))


compiled = built_once(_Compiled)    # the compiled functions, built on first use (llvmlite errors propagate)


def concurrent_post():
    """``post`` called without the interpreter lock, so OS threads really run it at once
    (for the test of the reservation and ordered publication)."""
    return ctypes.CFUNCTYPE(ctypes.c_int64, *_ARGS)(compiled().post_address)
