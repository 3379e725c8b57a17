"""Host signals: ``put_signal`` and ``signal_wait_until`` (same meaning as on the device).

On the simulator backend the signal update and the wait use real CPU atomics on the
mapped heaps; on the cuda backend they are small kernels over ``pgas.device`` queued on
``stream`` (``_gpu_ops``). Either way they interoperate with device signals of any PE.
"""
from __future__ import annotations

from .. import _cpu_atomics
from .._checks import check_contiguous, check_pe, check_sig_op, check_signal
from .._constants import SIGNAL_SET
from .._waiting import check_cmp, wait_for_value
from ._memory import as_ndarray
from ._rma import put
from ._runtime import runtime

__all__ = ["put_signal", "signal_wait_until"]


def _signal_word(fn: str, signal):
    """Element 0 of ``signal`` as a one-element array (the array must be contiguous: a
    strided one has no flat view, and device code reads it without its strides)."""
    word = as_ndarray(signal, fn, "signal")
    check_signal(fn, word)
    check_contiguous(fn, "signal", word)
    return word.reshape(-1)[:1]


def put_signal(dest, src, signal, value, sig_op, pe: int, stream=None) -> None:
    """Put ``src`` into PE ``pe``'s ``dest``, then update its ``signal[0]`` (SIGNAL_SET or
    SIGNAL_ADD with ``value``); the data is visible before the signal is."""
    fn = "pgas.put_signal"
    rt = runtime(fn)
    pe = check_pe(fn, pe, rt.n_pes)
    word = _signal_word(fn, signal)
    check_sig_op(fn, sig_op)
    rt.heap.offset_of(word, fn, "signal")
    put(dest, src, pe, stream)
    if rt.on_gpu:
        from . import _gpu_ops
        _gpu_ops.signal_op(word, value, sig_op, pe, stream, fn)
        return
    _cpu_atomics.fence()   # (through the NIC, requests to one PE are applied in order)
    rt.transports.rmw(fn, pe, word, "xchg" if sig_op == SIGNAL_SET else "add", value, "signal")


def signal_wait_until(signal, cmp, value, stream=None):
    """Wait until the local ``signal[0] <cmp> value``; returns the value seen.

    Fails with PgasTimeoutError after PGAS_TIMEOUT seconds. On the cuda backend with a
    ``stream``, the wait is queued on the stream (later work on it starts after the
    condition holds) and the call returns None at once.
    """
    fn = "pgas.signal_wait_until"
    rt = runtime(fn)
    word = _signal_word(fn, signal)
    check_cmp(fn, cmp)
    rt.heap.offset_of(word, fn, "signal")
    if rt.on_gpu:
        from . import _gpu_ops
        return _gpu_ops.signal_wait_until(word, cmp, value, stream, fn)
    return wait_for_value(fn, lambda: _cpu_atomics.load_acquire(word, fn, "signal"), "signal", cmp, value,
                          rt.timeout)
