"""Host signals: ``put_signal``, ``put_signal_nbi``, ``signal_op`` (and OpenSHMEM 1.6's
``signal_add``/``signal_set``), ``signal_fetch`` and ``signal_wait_until`` (same meaning as
on the device).

On the simulator backend the signal update and the wait use real CPU atomics on the
mapped heaps, or the NIC's atomics for PEs on other nodes; on the cuda backend they are
small kernels over ``pgas.device`` queued on ``stream`` (``_gpu_ops``). Either way they
interoperate with device signals of any PE. Every call also takes nvshmem4py's keyword
names (``dst=``, ``signal_var=``, ``signal_val=``, ``signal_op=``, ``remote_pe=``).
"""
from __future__ import annotations

from ...core.native import _cpu_atomics
from ...core._checks import check_pe, check_sig_op, check_signal
from ...core._constants import SIGNAL_ADD, SIGNAL_SET
from ...core._waiting import HOST_WAIT_BACKOFF_S, check_cmp, wait_for_value
from ...runtime._arrays import as_ndarray
from ...runtime._state import Runtime, runtime
from ._atomics import check_operand
from ._keywords import nvshmem4py_keywords
from ..memory._memory import element0
from ._rma import _put

__all__ = ["put_signal", "put_signal_nbi", "signal_op", "signal_fetch", "signal_wait_until", "signal_wait"]   # + _SIGNAL_OPS


def _signal_word(fn: str, signal):
    """Element 0 of ``signal`` as a one-element array (the array must be contiguous: a
    strided one has no flat view, and device code reads it without its strides)."""
    word = as_ndarray(signal, fn, "signal")
    check_signal(fn, word)
    return element0(fn, word, "signal")


def _checked_signal(fn: str, signal, value, sig_op, pe):
    """(runtime, PE, signal word, value) of a signal update, every argument checked."""
    rt = runtime(fn)
    pe = check_pe(fn, pe, rt.n_pes)
    word = _signal_word(fn, signal)
    check_sig_op(fn, sig_op)
    value = check_operand(fn, "value", value, word.dtype, of="signal")
    rt.symmetric_offset(word, fn, "signal")
    return rt, pe, word, value


def _update(rt: Runtime, fn: str, word, value, sig_op, pe: int, stream, nbi: bool) -> None:
    """Update PE ``pe``'s ``word[0]`` after everything this PE put to it before (``nbi``:
    through the NIC, complete at ``quiet``; else complete on return without a stream)."""
    if rt.on_gpu:
        from .. import _gpu_ops
        _gpu_ops.signal_op(word, value, sig_op, pe, stream, fn, nbi=nbi)
        return
    _cpu_atomics.fence()   # (through the NIC, requests to one PE are applied in order)
    rt.transports.rmw(fn, pe, word, "xchg" if sig_op == SIGNAL_SET else "add", value, "signal", fetch=not nbi)


def _put_signal(fn: str, dest, src, signal, value, sig_op, pe, stream, nbi: bool) -> None:
    rt, pe, word, value = _checked_signal(fn, signal, value, sig_op, pe)
    _put(fn, dest, src, pe, stream, nbi)
    _update(rt, fn, word, value, sig_op, pe, stream, nbi)


_SIGNAL_PARAMETERS = """
    Parameters
    ----------
    dest : symmetric array
        C-contiguous, at least ``src.size`` elements of ``src``'s dtype (``dst=`` accepted,
        nvshmem4py's name).
    src : array
        Local: numpy or symmetric.
    signal : symmetric array
        Element 0 of a C-contiguous uint64 (or int64) array (``signal_var=`` accepted).
    value : int
        The signal operand (``signal_val=`` accepted).
    sig_op : int
        ``pgas.SIGNAL_SET`` (the signal becomes ``value``) or ``pgas.SIGNAL_ADD`` (``value``
        is added atomically) (``signal_op=`` accepted).
    pe : int
        The target PE (``remote_pe=`` accepted).
    stream : optional
        cuda backend: ordered on this stream.
"""


@nvshmem4py_keywords("dst", "signal_var", "signal_val", "signal_op", "remote_pe")
def put_signal(dest, src, signal, value, sig_op, pe: int, stream=None) -> None:
    """put_signal(dest, src, signal, value, sig_op, pe, stream=None)

    Put ``src`` into PE ``pe``'s ``dest``, then update its ``signal[0]``; the data is
    visible at the target before the signal is. Complete on return without a stream.
    """
    _put_signal("pgas.put_signal", dest, src, signal, value, sig_op, pe, stream, False)


@nvshmem4py_keywords("dst", "signal_var", "signal_val", "signal_op", "remote_pe")
def put_signal_nbi(dest, src, signal, value, sig_op, pe: int, stream=None) -> None:
    """put_signal_nbi(dest, src, signal, value, sig_op, pe, stream=None)

    ``put_signal`` that returns once both are issued: complete at ``quiet`` (the data is
    still visible before the signal is). Through the NIC the put and the signal atomic are
    posted to one queue pair, delivered in order; the ``src`` rule of ``put_nbi`` applies.
    On the cuda backend the copy and the signal kernel are queued, not waited for (to a
    PE on another node the copy is complete before the signal kernel is queued).
    """
    _put_signal("pgas.put_signal_nbi", dest, src, signal, value, sig_op, pe, stream, True)


put_signal.__doc__ += _SIGNAL_PARAMETERS
put_signal_nbi.__doc__ += _SIGNAL_PARAMETERS


@nvshmem4py_keywords("signal_var", "signal_val", "signal_op", "remote_pe")
def signal_op(signal, value, sig_op, pe: int, stream=None) -> None:
    """signal_op(signal, value, sig_op, pe, stream=None)

    Update PE ``pe``'s ``signal[0]`` atomically: a ``put_signal`` without data. Complete
    on return (on the cuda backend without a stream; with one, queued on it after the work
    before it). Atomic with the device signals and atomics of every PE.

    Parameters
    ----------
    signal, value, sig_op, pe, stream
        As for ``put_signal`` (nvshmem4py's names ``signal_var=``, ``signal_val=``,
        ``signal_op=``, ``remote_pe=`` accepted).
    """
    fn = "pgas.signal_op"
    rt, pe, word, value = _checked_signal(fn, signal, value, sig_op, pe)
    _update(rt, fn, word, value, sig_op, pe, stream, False)


# OpenSHMEM 1.6's signal updates with the operation in the name: name -> (sig_op, what it does)
_SIGNAL_OPS = {"signal_add": (SIGNAL_ADD, "add ``value`` to PE ``pe``'s ``signal[0]`` atomically"),
               "signal_set": (SIGNAL_SET, "set PE ``pe``'s ``signal[0]`` to ``value`` atomically")}


def _make_signal_op(name: str, sig_op: int, what: str):
    def update(signal, value, pe: int, stream=None) -> None:
        fn = f"pgas.{name}"
        rt, pe, word, value = _checked_signal(fn, signal, value, sig_op, pe)
        _update(rt, fn, word, value, sig_op, pe, stream, False)

    update.__name__ = update.__qualname__ = name
    update.__doc__ = f"""{name}(signal, value, pe, stream=None)

    OpenSHMEM 1.6 ``shmem_{name}``: {what}. The same as
    ``signal_op(signal, value, pgas.{'SIGNAL_ADD' if sig_op == SIGNAL_ADD else 'SIGNAL_SET'}, pe, stream)``:
    complete on return (on the cuda backend with a stream, queued on it).

    Parameters
    ----------
    signal : symmetric array
        Element 0 of a C-contiguous uint64 (or int64) array (``signal_var=`` accepted).
    value : int
        The operand, as the signal's dtype (``signal_val=`` accepted).
    pe : int
        The target PE (``remote_pe=`` accepted).
    stream : optional
        cuda backend: ordered on this stream.
    """
    return nvshmem4py_keywords("signal_var", "signal_val", "remote_pe")(update)


for _name, _entry in _SIGNAL_OPS.items():
    globals()[_name] = _make_signal_op(_name, *_entry)
    __all__.append(_name)
del _name, _entry


@nvshmem4py_keywords("signal_var")
def signal_fetch(signal):
    """signal_fetch(signal) -> value

    The local ``signal[0]``, read with acquire ordering: once a value is seen, so is the
    data of the ``put_signal`` that wrote it.

    Parameters
    ----------
    signal : symmetric array
        Element 0 of a C-contiguous uint64 (or int64) array (``signal_var=`` accepted).

    Returns
    -------
    numpy.uint64 or numpy.int64
        The value, of the signal's dtype.
    """
    fn = "pgas.signal_fetch"
    rt = runtime(fn)
    word = _signal_word(fn, signal)
    rt.symmetric_offset(word, fn, "signal")
    if rt.on_gpu:
        from .. import _gpu_ops
        return _gpu_ops.signal_fetch(word, fn)
    return _cpu_atomics.load_acquire(word, fn, "signal")


@nvshmem4py_keywords("signal_var")
def signal_wait_until(signal, cmp, value, stream=None):
    """signal_wait_until(signal, cmp, value, stream=None) -> value

    Wait until the local ``signal[0] <cmp> value``; returns the value seen.

    Fails with PgasTimeoutError after PGAS_TIMEOUT seconds. On the cuda backend with a
    ``stream``, the wait is queued on the stream (later work on it starts after the
    condition holds) and the call returns None at once.
    """
    fn = "pgas.signal_wait_until"
    rt = runtime(fn)
    word = _signal_word(fn, signal)
    check_cmp(fn, cmp)
    rt.symmetric_offset(word, fn, "signal")
    if rt.on_gpu:
        from .. import _gpu_ops
        return _gpu_ops.signal_wait_until(word, cmp, value, stream, fn)
    return wait_for_value(fn, lambda: _cpu_atomics.load_acquire(word, fn, "signal"), "signal", cmp, value,
                          rt.timeout, HOST_WAIT_BACKOFF_S)


@nvshmem4py_keywords("signal_var", "signal_val")
def signal_wait(signal, value, cmp, stream=None):
    """signal_wait(signal, value, cmp, stream=None) -> value

    nvshmem4py's host ``signal_wait``, in its argument order (value before cmp): the same
    as ``signal_wait_until(signal, cmp, value, stream)``, pgas's (and NVSHMEM C's) order.
    """
    return signal_wait_until(signal, cmp, value, stream)
