"""nvshmem4py's keyword names, accepted by the host calls it shares with pgas.

nvshmem4py (``nvshmem.core``) names the arguments of its host calls differently:
``put(dst, src, remote_pe=-1, stream=None)``, ``put_signal(dst, src, signal_var,
signal_val, signal_op, remote_pe=-1, stream=None)``, ``signal_op(signal_var, signal_val,
signal_op, remote_pe=-1, stream=None)``; its device atomics take ``dst``. pgas keeps its
own names and argument order (``dest, src, ..., pe``) and accepts theirs as keywords.
"""
from __future__ import annotations

import functools
import inspect

from ...core._errors import PgasValueError

__all__ = ["nvshmem4py_keywords", "NVSHMEM4PY_NAMES"]

# nvshmem4py's name -> pgas's
NVSHMEM4PY_NAMES = {"dst": "dest", "remote_pe": "pe", "signal_var": "signal", "signal_val": "value",
                    "signal_op": "sig_op"}


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
                        raise PgasValueError(f"pgas.{function.__name__}: {ours} was given twice, as {ours} and "
                                             f"as {their_name} (nvshmem4py's name for it); give one")
                    kwargs[ours] = kwargs.pop(their_name)
            return function(*args, **kwargs)
        return accepting
    return decorate
