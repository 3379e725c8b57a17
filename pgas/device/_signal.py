"""Signals: put_signal (data, then a signal the target can wait on), signal_op (and
OpenSHMEM 1.6's signal_add and signal_set), signal_fetch, signal_wait_until.

A signal is element 0 of a symmetric uint64 (or int64) array. ``sig_op`` is SIGNAL_SET
(the signal becomes ``value``) or SIGNAL_ADD (``value`` is added atomically).
Guarantee, as in NVSHMEM: the data of a ``put_signal`` is visible at the target before
its signal update is, so a PE that sees the signal (``signal_wait_until``) may read the data.
"""
from __future__ import annotations

from ..core._codes import BLOCK, RMW_ADD, RMW_XCHG, THREAD, WARP
from ..core._constants import SIGNAL_ADD, SIGNAL_SET
from ._primitives import prim as _p
from ._rma import _copy

__all__ = ["signal_op", "signal_fetch", "signal_wait_until"]


@_p.jit
def _update(fn, signal, value, sig_op, pe):
    word = _p.local(signal, fn, "signal")
    _p.check_signal(fn, word)
    _p.check_sig_op(fn, sig_op)
    if sig_op == SIGNAL_SET:
        _p.remote_rmw(fn, word, pe, RMW_XCHG, value, "signal", False)
    else:
        _p.remote_rmw(fn, word, pe, RMW_ADD, value, "signal", False)


def signal_op(signal, value, sig_op, pe):
    """signal_op(signal, value, sig_op, pe): update PE ``pe``'s ``signal[0]`` atomically."""
    _update("pgas.device.signal_op", signal, value, sig_op, pe)


# OpenSHMEM 1.6's updates with the operation in the name: name -> (sig_op, what it does)
_SIGNAL_OPS = {"signal_add": (SIGNAL_ADD, "add ``value`` to PE ``pe``'s ``signal[0]`` atomically"),
               "signal_set": (SIGNAL_SET, "set PE ``pe``'s ``signal[0]`` to ``value`` atomically")}


def _make_signal_op(name: str, sig_op: int, what: str):
    label = f"pgas.device.{name}"

    def update(signal, value, pe):
        _update(_p.name(label), signal, value, sig_op, pe)

    update.__name__ = update.__qualname__ = name
    update.__doc__ = (f"{name}(signal, value, pe): {what} (OpenSHMEM 1.6 ``shmem_{name}``; "
                      f"``signal_op`` with ``{'SIGNAL_ADD' if sig_op == SIGNAL_ADD else 'SIGNAL_SET'}``).")
    return update


for _name, _entry in _SIGNAL_OPS.items():
    globals()[_name] = _make_signal_op(_name, *_entry)
    __all__.append(_name)
del _name, _entry


def signal_fetch(signal):
    """signal_fetch(signal) -> value: the local ``signal[0]``, read with acquire ordering."""
    fn = _p.name("pgas.device.signal_fetch")
    word = _p.local(signal, fn, "signal")
    _p.check_signal(fn, word)
    return _p.load_acquire(word, fn, "signal")


def signal_wait_until(signal, cmp, value):
    """signal_wait_until(signal, cmp, value) -> the value seen, once local ``signal[0] <cmp> value``.

    Fails with PgasTimeoutError after PGAS_TIMEOUT seconds.
    """
    fn = _p.name("pgas.device.signal_wait_until")
    word = _p.local(signal, fn, "signal")
    _p.check_signal(fn, word)
    return _p.wait_for_value(fn, word, "signal", cmp, value)


_SCOPES = {"": (THREAD, "Called by one thread."),
           "_warp": (WARP, "Every thread of the warp calls it with the same arguments; they share the copy."),
           "_block": (BLOCK, "Every thread of the block calls it with the same arguments; they share the copy.")}


def _make(nbi: bool, suffix: str):
    scope, who = _SCOPES[suffix]
    name = f"put_signal{'_nbi' if nbi else ''}{suffix}"
    label = f"pgas.device.{name}"

    def put_signal_op(dest, src, signal, value, sig_op, pe):
        fn = _p.name(label)
        _copy(fn, dest, src, pe, True, scope, nbi)  # ends with the group synchronized
        if _p.group_rank_and_size(scope, fn)[0] == 0:
            _p.fence(fn)  # the data before the signal
            _update(fn, signal, value, sig_op, pe)

    put_signal_op.__name__ = put_signal_op.__qualname__ = name
    done = "complete after ``quiet``" if nbi else "``src`` reusable on return"
    put_signal_op.__doc__ = (
        f"{name}(dest, src, signal, value, sig_op, pe): put ``src`` into PE ``pe``'s ``dest``, "
        f"then update its ``signal[0]`` with ``sig_op`` and ``value`` ({done}). {who}")
    return put_signal_op


for _nbi in (False, True):
    for _suffix in _SCOPES:
        _f = _make(_nbi, _suffix)
        globals()[_f.__name__] = _f
        __all__.append(_f.__name__)
del _nbi, _suffix, _f
