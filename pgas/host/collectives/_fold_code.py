"""The combine step of a small all-reduce, compiled: n buffers folded into one in one call.

numpy's ufuncs cost about 0.4 µs a call whatever the size, so an eager all-reduce of a
few bytes on 4 PEs spent more in its three ufunc calls than in its one synchronization
round. Here one call of compiled code (llvmlite, as ``_cpu_atomics``) does it in about
0.1 µs. The element rule is the one the GPU uses (``pgas/cuda/_ir.py``: ``combine``), which is
numpy's with ``out=`` in the element type, and the order is ``reduce_into``'s
(((b0 op b1) op b2) ...), so every member gets numpy's bits. Compiled per (dtype, op) on
first use, 40-60 ms each, or loaded in about a millisecond where an earlier process kept
its machine code (``core/native/_object_cache``); float16, bfloat16, complex and long
double are left to numpy.
"""
from __future__ import annotations

import sys
import threading

import numpy as np
from cffi import FFI

from ...core._reductions import REDUCTION_DTYPES, ops_for
from ...core.native._object_cache import ObjectCache

__all__ = ["compiled_fold"]

_ffi = FFI()
_SIGNATURE = "void(*)(uint64_t, uint64_t, int64_t, int64_t)"   # (out, sources, n, count)
_folds: dict = {}          # (dtype, op) -> the cffi function
_engine = None             # llvmlite's MCJIT engine (owns every compiled module)
_cache = None              # its object cache (machine code kept on disk between processes)
_machine = None            # its target machine: this CPU, with its vector extensions
_target = ()               # what the machine code depends on besides the IR (the cache's key)
_compiling = threading.Lock()
_failed = False            # set once building failed: numpy from then on
# what the compiled fold takes: integers, bool and float32/64 (numpy folds the 16-bit
# floats, complex numbers and long double)
_ELEMENT_DTYPES = tuple(d for d in REDUCTION_DTYPES if d.kind in "iub" or d in (np.float32, np.float64))


def _element_type(dtype: np.dtype):
    from llvmlite import ir
    if dtype.kind == "f":
        return {4: ir.FloatType(), 8: ir.DoubleType()}.get(dtype.itemsize)
    return ir.IntType(8 * dtype.itemsize)      # integers, and bool as its byte (0 or 1)


def _module_text(name: str, dtype: np.dtype, op: str) -> str:
    """LLVM IR of ``name(out, sources, n, count)``: out[i] = sources[0][i] op ... op
    sources[n-1][i] for i < count (``sources``: the address of n buffer addresses)."""
    from llvmlite import ir
    from numba.core import cgutils
    from numba.np.numpy_support import from_dtype

    from ...core._codes import reduce_code
    from ...cuda._ir import combine

    i64, element = ir.IntType(64), _element_type(dtype)
    module = ir.Module(name)
    function = ir.Function(module, ir.FunctionType(ir.VoidType(), [i64] * 4), name)
    out_address, sources_address, n, count = function.args
    builder = ir.IRBuilder(function.append_basic_block("entry"))
    out = builder.inttoptr(out_address, element.as_pointer())
    sources = builder.inttoptr(sources_address, i64.as_pointer())

    def source(index):
        return builder.inttoptr(builder.load(builder.gep(sources, [index])), element.as_pointer())

    code, numba_type = reduce_code(op), from_dtype(dtype)
    first = source(i64(0))
    # out = b0 op b1 in one pass (one pass fewer over out than copying b0 first: large
    # folds are bound by memory), then op each later member's in; out = b0 when n is 1
    with builder.if_else(builder.icmp_signed("<", n, i64(2))) as (alone, several):
        with alone:
            with cgutils.for_range(builder, count) as loop:
                builder.store(builder.load(builder.gep(first, [loop.index])), builder.gep(out, [loop.index]))
        with several:
            second = source(i64(1))
            with cgutils.for_range(builder, count) as loop:
                value = combine(builder, code, numba_type, builder.load(builder.gep(first, [loop.index])),
                                builder.load(builder.gep(second, [loop.index])))
                builder.store(value, builder.gep(out, [loop.index]))
    with cgutils.for_range(builder, n, start=i64(2)) as member:
        theirs = source(member.index)
        with cgutils.for_range(builder, count) as loop:
            target = builder.gep(out, [loop.index])
            value = combine(builder, code, numba_type, builder.load(target),
                            builder.load(builder.gep(theirs, [loop.index])))
            builder.store(value, target)
    builder.ret_void()
    return str(module)


def _compile(dtype: np.dtype, op: str):
    global _engine, _cache, _machine, _target
    import llvmlite.binding as llvm

    name = f"fold_{op}_{dtype.name}"
    text = _module_text(name, dtype, op)
    module = llvm.parse_assembly(text)
    module.verify()
    if _engine is None:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        cpu, features = llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
        _machine = llvm.Target.from_default_triple().create_target_machine(cpu=cpu, features=features, opt=3)
        _target = (llvm.get_process_triple(), cpu, features, "opt=3 vectorized")
        _engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), _machine)
        _cache = ObjectCache(_engine)
    if not _cache.expect(module, text, *_target):      # (else its machine code is on disk)
        # optimized as -O3 would (the loops vectorized: numpy's ufuncs are SIMD, so must this be)
        tuning = llvm.PipelineTuningOptions(speed_level=3)
        tuning.loop_vectorization = tuning.slp_vectorization = True
        passes = llvm.create_pass_builder(_machine, tuning)
        passes.getModulePassManager().run(module, passes)
    _engine.add_module(module)
    _engine.finalize_object()
    return _ffi.cast(_SIGNATURE, _engine.get_function_address(name))


def compiled_fold(dtype: np.dtype, op: str):
    """``fold(out_address, sources_address, n, count)`` for ``op`` on ``dtype`` (see the
    module), or None where numpy does it (float16, bfloat16, complex, long double, dtypes and
    ops reductions refuse)."""
    key = (dtype, op)
    if key not in _folds:
        usable = dtype in _ELEMENT_DTYPES and op in ops_for(dtype)
        with _compiling:   # simulated threads may race here
            if key not in _folds:
                _folds[key] = _compiled_or_none(dtype, op) if usable else None
    return _folds[key]


def _compiled_or_none(dtype: np.dtype, op: str):
    """The compiled fold, or None (numpy does it) where llvmlite cannot build it here, said
    once per process: the results are the same either way, only slower."""
    global _failed
    if _failed:
        return None
    try:
        return _compile(dtype, op)
    except Exception as exc:  # an llvmlite or CPU this code was not tried on
        _failed = True
        print(f"pgas: small all-reduces combine with numpy here: the compiled combine step could not be "
              f"built ({type(exc).__name__}: {exc})", file=sys.stderr)
        return None
