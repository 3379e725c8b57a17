"""PGAS_CHECK=1: a checker of one-sided memory-model bugs, collective mismatches and
symmetric-heap misuse, on the simulator backend (docs/checker.md).

While it is on, every pgas call (host and device) and every element access of a symmetric
array is recorded with its source line (``_recorder``, ``_model``, ``_watched``); host
collectives first compare their arguments on every member (``_host``); ``finalize``
replays every PE's events with vector clocks (``_replay``), prints what it found
(``_report``) and makes the run fail when it found anything.
"""
from __future__ import annotations

import functools
import time

from ..core._backend import backend_name
from ..core._env import setting
from ..core._errors import PgasConfigError
from ._model import MODELLED, bind, record_call
from ._recorder import recorder

__all__ = ["enabled", "refuse_on_gpu", "begin", "end", "watch", "MODELLED", "recorder"]


@functools.cache
def enabled() -> bool:
    """PGAS_CHECK=1 on the simulator backend (read once)."""
    return bool(setting("PGAS_CHECK")) and backend_name() == "simulator"


def refuse_on_gpu() -> None:
    """``pgas.init``, first: PGAS_CHECK=1 on the cuda backend is an error (the checker sees
    accesses only where kernels run in Python)."""
    if setting("PGAS_CHECK") and backend_name() != "simulator":
        raise PgasConfigError("PGAS_CHECK=1: the checker runs on the simulator backend only (PGAS_BACKEND="
                              "simulator), where it sees every access of every kernel; unset PGAS_CHECK on a GPU")


def begin(rt) -> None:
    """``pgas.init``: start recording this PE where PGAS_CHECK=1."""
    if enabled():
        from ._session import begin as start
        start(rt)


def end(rt) -> int:
    """``pgas.finalize`` (collective): the checked run's analysis; the number of findings."""
    if not enabled():
        return 0
    from ._session import end as finish
    return finish(rt)


def watch(layer: str, name: str, function, aliases: dict | None = None):
    """``function`` (pgas's ``name``; ``layer`` "host" or "device") recording its calls
    for the checker while a checked PE is running; ``aliases``: other keyword names it
    takes for its parameters (nvshmem4py's)."""
    @functools.wraps(function)
    def checked(*args, **kwargs):
        rec = recorder()
        if rec is None:
            return function(*args, **kwargs)
        start = time.monotonic_ns()
        result = function(*args, **kwargs)
        if aliases and kwargs:
            kwargs = {aliases.get(k, k): v for k, v in kwargs.items()}
        record_call(rec, layer, name, bind(function, args, kwargs), result, start, time.monotonic_ns())
        return result
    return checked
