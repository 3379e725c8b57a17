"""A stand-in for the six libcuda functions a native window calls (``pgas.wire._window``),
over host memory: a "device" address is a host address. Every call is logged (``calls``:
what it was, its arguments), so that tests see which copies ran, through which buffer and
on which stream; the current context is one word for the whole process (``context``); the
atomic "kernel" applies ``mlx5.atomic_result`` in a CPU compare-and-swap loop;
``fail(True)`` makes every call fail (a CUDA error) from then on."""
from __future__ import annotations

import numpy as np
from numba import carray, cfunc, njit, types

from pgas.wire import _native, _target, _window

GET_CONTEXT, SET_CONTEXT, COPY_OUT, COPY_IN, SYNCHRONIZE, LAUNCH = range(1, 7)
NAMES = {GET_CONTEXT: "get_context", SET_CONTEXT: "set_context", COPY_OUT: "copy_out", COPY_IN: "copy_in",
         SYNCHRONIZE: "synchronize", LAUNCH: "launch"}
_ROWS, _FIELDS = 1 << 16, 5
_log = np.zeros(8 + _ROWS * _FIELDS, np.int64)       # count, failing, context; then rows (what, four arguments)
_LOG = _log.ctypes.data                                # (a constant in the cfuncs below)


def _logged():
    @njit(nogil=True)
    def log(what, a, b, c, d):
        words = carray(_window.words_at(_LOG), (8 + _ROWS * _FIELDS,))
        row = _target.apply_atomic(_target.AMO_ADD, 8, _LOG, 1, 0) % _ROWS
        at = 8 + row * _FIELDS
        words[at + 1], words[at + 2], words[at + 3], words[at + 4] = a, b, c, d
        words[at] = what
        return 1 if words[1] != 0 else 0
    return log


@njit(nogil=True)
def _arg(pointers, i):
    """Kernel argument ``i`` (``pointers``: cuLaunchKernel's kernelParams)."""
    return carray(_window.words_at(pointers[i]), (1,))[0]


def _build():
    _window.symbols()
    _target.atomics()
    log = _logged()
    i64, u32 = types.int64, types.uint32

    @cfunc(types.int32(i64))
    def get_context(pointer):
        failed = log(GET_CONTEXT, pointer, 0, 0, 0)
        if failed == 0:
            carray(_window.words_at(pointer), (1,))[0] = carray(_window.words_at(_LOG), (3,))[2]
        return failed

    @cfunc(types.int32(i64))
    def set_context(context):
        failed = log(SET_CONTEXT, context, 0, 0, 0)
        if failed == 0:
            carray(_window.words_at(_LOG), (3,))[2] = context
        return failed

    def copy(what):
        """cuMemcpyDtoHAsync (``what`` COPY_OUT: host, device, ...) or cuMemcpyHtoDAsync
        (COPY_IN: device, host, ...): both copy their second argument's bytes to their first."""
        @cfunc(types.int32(i64, i64, i64, i64))
        def copied(destination, source, nbytes, stream):
            failed = log(what, destination, source, nbytes, stream)
            if failed == 0:
                _native.memcpy(destination, source, nbytes)
            return failed
        return copied

    copy_out, copy_in = copy(COPY_OUT), copy(COPY_IN)

    @cfunc(types.int32(i64))
    def synchronize(stream):
        return log(SYNCHRONIZE, stream, 0, 0, 0)

    @cfunc(types.int32(i64, u32, u32, u32, u32, u32, u32, u32, i64, i64, i64))
    def launch(kernel, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        failed = log(LAUNCH, kernel, stream, params, gx * gy * gz * bx * by * bz)
        if failed == 0:
            pointers = carray(_window.words_at(params), (_window.KERNEL_ARGS,))
            address, opcode, size, o0 = _arg(pointers, 0), _arg(pointers, 1), _arg(pointers, 2), _arg(pointers, 3)
            o1, o2, o3, cell = _arg(pointers, 4), _arg(pointers, 5), _arg(pointers, 6), _arg(pointers, 7)
            carray(_window.words_at(cell), (1,))[0] = _target._masked(opcode, size, address, o0, o1, o2, o3)
        return failed

    return {"get_context": get_context, "set_context": set_context, "copy_out": copy_out, "copy_in": copy_in,
            "synchronize": synchronize, "launch": launch}


_functions: dict = {}


def driver() -> dict:
    """name -> address of each stand-in (``_window.DRIVER``'s names)."""
    if not _functions:
        _functions.update(_build())
    return {name: function.address for name, function in _functions.items()}


class StandInWindow:
    """A native window over the stand-in driver (context 0xC0, stream ``stream``, a pinned
    "staging" buffer of ``staging_bytes``); ``native_address`` as ``GpuWindow`` has."""

    def __init__(self, staging_bytes: int = 4096, stream: int = 0x5157):
        self.staging = np.zeros(staging_bytes, np.uint8)
        self.cell = np.zeros(1, np.uint64)
        self.stream = stream
        self.native = _window.NativeWindow(driver(), 0xC0, stream, self.staging, 0x4B, self.cell)
        self.native_address = self.native.address


def calls() -> list[tuple]:
    """(name, four arguments) of every call so far (the last 65536)."""
    count = min(int(_log[0]), _ROWS)
    rows = _log[8:8 + count * _FIELDS].reshape(count, _FIELDS)
    return [(NAMES[int(row[0])], *map(int, row[1:])) for row in rows]


def fail(failing: bool) -> None:
    _log[1] = int(failing)


def reset() -> None:
    """Forget the calls so far."""
    _log[0] = 0


def context(value: int | None = None) -> int:
    """The current context (set to ``value`` first, if given)."""
    if value is not None:
        _log[2] = value
    return int(_log[2])


def check_staged(window) -> dict:
    """How many copies and launches of ``window`` (its ``native``: a ``_window.NativeWindow``)
    ran; AssertionError if any copy's host side was outside the window's staging buffer, any
    ran on another stream, or any was not synchronized on that stream before the next call."""
    table = window.native.table
    base, stream = int(table[_window.W_STAGING]), int(table[_window.W_STREAM])
    end = base + int(table[_window.W_STAGING_BYTES])
    seen = {"copy_out": 0, "copy_in": 0, "launch": 0}
    log = calls()
    for i, (name, a, b, c, d) in enumerate(log):
        if name in ("copy_out", "copy_in"):
            host = a if name == "copy_out" else b
            assert base <= host and host + c <= end, (name, hex(host), c)
            assert d == stream, (name, d)
        if name == "launch":
            assert b == stream and d == 1, (name, b, d)
        if name in seen:
            seen[name] += 1
            assert i + 1 < len(log) and log[i + 1][0] == "synchronize" and log[i + 1][1] == stream, log[i:i + 2]
    return seen


__all__ = ["StandInWindow", "driver", "calls", "fail", "reset", "context", "check_staged"]
