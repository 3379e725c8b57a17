"""A window onto memory that native code cannot load or store (GPU memory): how the native
NIC (``_nic_code``) and the wire's target (``_target``) reach such a region's bytes, and
how the emulated NIC's thread does too (``pgas.cuda.nic._nic_host.GpuWindow``).

A window is a table of int64 words (``WINDOW_WORDS``): the driver's functions by address
(``cuCtxGetCurrent``, ``cuCtxSetCurrent``, ``cuMemcpyDtoHAsync``, ``cuMemcpyHtoDAsync``,
``cuStreamSynchronize``, ``cuLaunchKernel``: libcuda's on the cuda backend, a stand-in over
host memory in the tests), the context and stream they run on (the calling thread's own
context is put back after each call), a pinned staging buffer through which every
copy goes (the driver would stage a copy from pageable memory itself, synchronously), the
atomic kernel and the pinned cell its old value lands in. ``read``, ``write`` and ``atomic``
are numba ``nogil`` functions taking the table's address: one user at a time (the
window's lock), each copy landed before the call returns (a flag never lands before its
data). They return False (``atomic``: first) when the driver failed; ``W_FAILURES`` counts it.
"""
from __future__ import annotations

import numpy as np
from numba import carray, njit, types
from numba.core.extending import intrinsic

from ..core.native._llvm import built_once, compile_ir
from ..nic import _mlx5 as mlx5
from . import _native, _ucp as ucp
from ._atomics import AMO_ADD, AMO_AND, AMO_CAS, AMO_FETCH, AMO_OR, AMO_SWAP, AMO_XOR, atomics, spin_lock, spin_unlock

__all__ = ["WINDOW_WORDS", "KERNEL_ARGS", "NativeWindow", "read", "write", "atomic", "as_mlx5", "symbols", "call4",
           "words_at", "bytes_at"]

W_LOCK, W_CONTEXT, W_STREAM, W_STAGING, W_STAGING_BYTES, W_KERNEL, W_CELL, W_GET_CONTEXT, W_SET_CONTEXT, \
    W_COPY_OUT, W_COPY_IN, W_SYNCHRONIZE, W_LAUNCH, W_FAILURES, W_SAVED = range(15)
KERNEL_ARGS = 8             # the atomic kernel's: address, opcode, size, four operands, the cell
W_ARGS = 15
W_PARAMS = W_ARGS + KERNEL_ARGS     # the arguments' addresses: cuLaunchKernel's kernelParams
WINDOW_WORDS = W_PARAMS + KERNEL_ARGS
DRIVER = ("get_context", "set_context", "copy_out", "copy_in", "synchronize", "launch")

# Calls through a function pointer, with the driver's exact argument types (CUresult is an int)
_TRAMPOLINES_IR = """
define i32 @call1(i64 %f, i64 %a) {
  %p = inttoptr i64 %f to i32 (i64)*
  %r = call i32 %p(i64 %a)
  ret i32 %r
}
define i32 @call4(i64 %f, i64 %a, i64 %b, i64 %c, i64 %d) {
  %p = inttoptr i64 %f to i32 (i64, i64, i64, i64)*
  %r = call i32 %p(i64 %a, i64 %b, i64 %c, i64 %d)
  ret i32 %r
}
define i32 @launch(i64 %f, i64 %kernel, i64 %stream, i64 %params) {
  %p = inttoptr i64 %f to i32 (i64, i32, i32, i32, i32, i32, i32, i32, i64, i64, i64)*
  %r = call i32 %p(i64 %kernel, i32 1, i32 1, i32 1, i32 1, i32 1, i32 1, i32 0, i64 %stream, i64 %params, i64 0)
  ret i32 %r
}
"""


class _Trampolines:
    def __init__(self):
        ucp.libc()                  # (memcpy)
        atomics()                   # (the lock)
        self._engine = compile_ir(_TRAMPOLINES_IR)      # keeps the code alive
        for name in ("call1", "call4", "launch"):
            ucp.register_symbol(f"window_{name}", self._engine.get_function_address(name))


symbols = built_once(_Trampolines)      # what read, write and atomic call (and libc, the atomics), registered
_call1 = types.ExternalFunction("pgas_window_call1", types.int32(types.int64, types.int64))
call4 = types.ExternalFunction("pgas_window_call4", types.int32(*[types.int64] * 5))
_launch = types.ExternalFunction("pgas_window_launch", types.int32(*[types.int64] * 4))


def _pointer_codegen(context, builder, sig, args):
    return builder.inttoptr(args[0], context.get_value_type(sig.return_type))


@intrinsic
def words_at(typingctx, address):
    """The int64 words at ``address`` (a pointer for ``carray``)."""
    return types.CPointer(types.int64)(types.int64), _pointer_codegen


@intrinsic
def bytes_at(typingctx, address):
    """The bytes at ``address`` (a pointer for ``carray``)."""
    return types.CPointer(types.uint8)(types.int64), _pointer_codegen


@njit(nogil=True, cache=True)
def _enter(window):
    """The window's table, locked, its context current in this thread (the thread's own
    kept in ``W_SAVED``); (table, driver ok)."""
    w = carray(words_at(window), (WINDOW_WORDS,))
    spin_lock(window + 8 * W_LOCK)
    w[W_SAVED] = w[W_CONTEXT]
    ok = _call1(w[W_GET_CONTEXT], window + 8 * W_SAVED) == 0
    if ok and w[W_SAVED] != w[W_CONTEXT]:
        ok = _call1(w[W_SET_CONTEXT], w[W_CONTEXT]) == 0
    return w, ok


@njit(nogil=True, cache=True)
def _leave(window, w, ok):
    """The thread's own context back, the lock released; ``ok`` (False counted)."""
    if w[W_SAVED] != w[W_CONTEXT]:
        _call1(w[W_SET_CONTEXT], w[W_SAVED])
    if not ok:
        w[W_FAILURES] += 1
    spin_unlock(window + 8 * W_LOCK)
    return ok


@njit(nogil=True, cache=True)
def _through_staging(window, device, host, nbytes, to_device):
    """``nbytes`` between device memory at ``device`` and host memory at ``host``, a staging
    buffer's worth at a time, each piece's copy synchronized before the buffer is reused."""
    w, ok = _enter(window)
    staging, room, stream = w[W_STAGING], w[W_STAGING_BYTES], w[W_STREAM]
    done = 0
    while ok and done < nbytes:
        length = min(room, nbytes - done)
        if to_device:
            _native.memcpy(staging, host + done, length)
            ok = call4(w[W_COPY_IN], device + done, staging, length, stream) == 0
        else:
            ok = call4(w[W_COPY_OUT], staging, device + done, length, stream) == 0
        ok = ok and _call1(w[W_SYNCHRONIZE], stream) == 0
        if ok and not to_device:
            _native.memcpy(host + done, staging, length)
        done += length
    return _leave(window, w, ok)


@njit(nogil=True, cache=True)
def read(window, dst, src, nbytes):
    """``nbytes`` of device memory at ``src`` into host memory at ``dst``, through the staging buffer."""
    return _through_staging(window, src, dst, nbytes, False)


@njit(nogil=True, cache=True)
def write(window, dst, src, nbytes):
    """``nbytes`` of host memory at ``src`` into device memory at ``dst``, through the staging buffer."""
    return _through_staging(window, dst, src, nbytes, True)


@njit(nogil=True, cache=True)
def atomic(window, address, opcode, size, o0, o1, o2, o3):
    """(driver ok, old value): mlx5 atomic ``opcode`` (``mlx5.atomic_result``'s forms) on
    the ``size``-byte device word at ``address``, by the window's atomic kernel."""
    w, ok = _enter(window)
    w[W_ARGS], w[W_ARGS + 1], w[W_ARGS + 2], w[W_ARGS + 3] = address, opcode, size, o0
    w[W_ARGS + 4], w[W_ARGS + 5], w[W_ARGS + 6], w[W_ARGS + 7] = o1, o2, o3, w[W_CELL]
    ok = ok and _launch(w[W_LAUNCH], w[W_KERNEL], w[W_STREAM], window + 8 * W_PARAMS) == 0 \
        and _call1(w[W_SYNCHRONIZE], w[W_STREAM]) == 0
    old = carray(words_at(w[W_CELL]), (1,))[0] if ok else 0
    return _leave(window, w, ok), old


@njit(nogil=True, cache=True)
def as_mlx5(op, size_word, value, compare, mask, compare_mask):
    """(mlx5 opcode, o0, o1, o2, o3) doing the wire's atomic ``op`` (``_target``'s numbering;
    ``AMO_MLX5`` carries its opcode in ``size_word``'s second byte and its operands as they
    are): the forms of ``mlx5.atomic_result``, which the window's kernel applies."""
    size = size_word & 0xFF
    ones = 0xFFFFFFFF if size == 4 else -1
    if op == AMO_ADD:
        return mlx5.OP_ATOMIC_FA, value, 0, 0, 0
    if op == AMO_CAS:
        return mlx5.OP_ATOMIC_CS, value, compare, 0, 0
    if op == AMO_SWAP:
        return mlx5.OP_MASKED_CS, value, 0, ones, 0
    if op == AMO_AND:
        return mlx5.OP_MASKED_CS, 0, 0, ~value & ones, 0
    if op == AMO_OR:
        return mlx5.OP_MASKED_CS, value, 0, value, 0
    if op == AMO_XOR:                   # every bit its own field: addition without carries
        return mlx5.OP_MASKED_FA, value, ones, 0, 0
    if op == AMO_FETCH:                 # nothing swapped: the word as it was
        return mlx5.OP_MASKED_CS, 0, 0, 0, 0
    return size_word >> 8, value, compare, mask, compare_mask


class NativeWindow:
    """A window's table (``address``), over ``driver`` (name in ``DRIVER`` -> function
    address), ``context`` and ``stream``; ``staging``: pinned host bytes (uint8) every copy
    goes through; ``kernel``: the atomic kernel's handle; ``cell``: pinned host uint64 its
    old value lands in. The arrays stay alive with it."""

    def __init__(self, driver: dict, context: int, stream: int, staging: np.ndarray, kernel: int, cell: np.ndarray):
        symbols()
        self.table = np.zeros(WINDOW_WORDS, np.int64)
        self.address = self.table.ctypes.data
        self._kept = staging, cell
        self.table[[W_CONTEXT, W_STREAM, W_STAGING, W_STAGING_BYTES, W_KERNEL, W_CELL]] = (
            context, stream, staging.ctypes.data, staging.nbytes, kernel, cell.ctypes.data)
        self.table[[W_GET_CONTEXT, W_SET_CONTEXT, W_COPY_OUT, W_COPY_IN, W_SYNCHRONIZE, W_LAUNCH]] = [
            driver[name] for name in DRIVER]
        self.table[W_PARAMS:W_PARAMS + KERNEL_ARGS] = self.address + 8 * np.arange(W_ARGS, W_ARGS + KERNEL_ARGS)

    @property
    def failures(self) -> int:
        """How many calls the driver failed."""
        return int(self.table[W_FAILURES])
