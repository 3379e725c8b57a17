"""nvshmem4py's keyword names, accepted by the host calls it shares with pgas.

nvshmem4py (``nvshmem.core``) names the arguments of its host calls differently:
``put(dst, src, remote_pe=-1, stream=None)``, ``put_signal(dst, src, signal_var,
signal_val, signal_op, remote_pe=-1, stream=None)``, ``signal_op(signal_var, signal_val,
signal_op, remote_pe=-1, stream=None)``; its device atomics take ``dst``. pgas keeps its
own names and argument order (``dest, src, ..., pe``) and accepts theirs as keywords:
through ``nvshmem4py_keywords``, or, in ``put`` and ``get`` (whose small calls are
latency-bound, and a wrapper costs a third of them), as parameters after pgas's that
default to ``NOT_GIVEN``, resolved by ``one_of`` (not keyword-only: filling those costs
a tenth of a small put).
"""
from __future__ import annotations

import functools
import inspect

from ...core._errors import PgasValueError

__all__ = ["nvshmem4py_keywords", "NVSHMEM4PY_NAMES", "NOT_GIVEN", "one_of"]

# nvshmem4py's name -> pgas's
NVSHMEM4PY_NAMES = {"dst": "dest", "remote_pe": "pe", "signal_var": "signal", "signal_val": "value",
                    "signal_op": "sig_op"}


class _NotGiven:
    """The default of an argument that may come under either name."""

    def __repr__(self) -> str:
        return "NOT_GIVEN"


NOT_GIVEN = _NotGiven()


def _given_twice(fn: str, ours: str, theirs: str) -> PgasValueError:
    return PgasValueError(f"{fn}: {ours} was given twice, as {ours} and as {theirs} (nvshmem4py's name for it); "
                          "give one")


def one_of(fn: str, our_name: str, ours, their_name: str | None = None, theirs=NOT_GIVEN):
    """The argument given as ``our_name`` (value ``ours``) or as nvshmem4py's ``their_name``
    (``theirs``); PgasValueError when both are given, TypeError (as Python's) when neither."""
    if ours is NOT_GIVEN:
        if theirs is NOT_GIVEN:
            raise TypeError(f"{fn}() missing required argument: {our_name!r}")
        return theirs
    if theirs is not NOT_GIVEN:
        raise _given_twice(fn, our_name, their_name)
    return ours


def nvshmem4py_keywords(*theirs: str):
    """Decorator: the host call also takes nvshmem4py's keyword names ``theirs`` (keys of
    ``NVSHMEM4PY_NAMES``) for its own arguments; giving one argument under both names is a
    PgasValueError."""
    def decorate(function):
        parameters = list(inspect.signature(function).parameters)
        aliases = {name: NVSHMEM4PY_NAMES[name] for name in theirs}
        position = {ours: parameters.index(ours) for ours in aliases.values()}

        @functools.wraps(function)
        def accepting(*args, **kwargs):
            if not kwargs:      # the common call: nothing to rename (small puts are latency-bound)
                return function(*args)
            for their_name, ours in aliases.items():
                if their_name in kwargs:
                    if ours in kwargs or len(args) > position[ours]:
                        raise _given_twice(f"pgas.{function.__name__}", ours, their_name)
                    kwargs[ours] = kwargs.pop(their_name)
            return function(*args, **kwargs)
        return accepting
    return decorate
