"""Host calls under PGAS_CHECK=1: recorded (``watch``), allocations placed in the
replay's map of the heap, and collectives checked for agreement first: every member of
the team must call the same collective with the same sizes, dtypes, root and op, else
every member gets a PgasError naming what each PE called (instead of a hang or a
silent corruption)."""
from __future__ import annotations

import functools
import time

import numpy as np

from ..core._constants import TEAM_WORLD
from ..runtime import _state
from ..runtime._arrays import as_ndarray
from ..runtime._barrier import wait_all
from ..runtime._team_table import team_of
from . import watch
from ._model import ALLOCATIONS, COLLECTIVES, MODELLED, SYNCS, bind, describe_arguments, team_key
from ._recorder import recorder

__all__ = ["checked_host_api"]

_ZEROED = ("zeros", "calloc")
_VARIABLE_SIZES = ("collect",)     # each member's contribution may differ in size


def checked_host_api(namespace: dict, names: list, aliases: dict) -> None:
    """Replace the host functions in ``namespace`` that the checker models by checked ones
    (``aliases``: nvshmem4py's keyword names -> pgas's)."""
    for name in names:
        function = namespace.get(name)
        if not callable(function) or not MODELLED.match(name):
            continue
        if name in ALLOCATIONS:
            namespace[name] = _allocation(name, function)
        elif name == "free":
            namespace[name] = _free(function)
        elif COLLECTIVES.match(name) or SYNCS.match(name):
            namespace[name] = _agreeing(name, watch("host", name, function, aliases))
        else:
            namespace[name] = watch("host", name, function, aliases)


def _agreeing(name: str, function):
    @functools.wraps(function)
    def agreed(*args, **kwargs):
        rt, rec = _state.current(), recorder()
        if rt is not None and rec is not None:
            arguments = bind(function, args, kwargs)
            team = team_of(rt, arguments.get("team", TEAM_WORLD), f"pgas.{name}")
            skip = ("team", "src", "dest") if name in _VARIABLE_SIZES else ("team",)
            # released before the agreement, which every member leaves only when all arrived
            rec.add("release", team_key(rec, team.handle))
            wait_all(team.comm, f"pgas.{name}", team.pes, record=describe_arguments(arguments, skip))
        return function(*args, **kwargs)
    return agreed


def _allocation(name: str, function):
    @functools.wraps(function)
    def allocate(*args, **kwargs):
        rec = recorder()
        if rec is None:
            return function(*args, **kwargs)
        start = time.monotonic_ns()
        site = rec.site()
        array = function(*args, **kwargs)
        data = as_ndarray(array, f"pgas.{name}", "array")
        placed = rec.place(data)
        if placed is not None:
            fill = bind(function, args, kwargs).get("value", None) if name == "full" else None
            zeroed = name in _ZEROED or (fill is not None and np.all(np.asarray(fill) == 0))
            rec.add("release", team_key(rec, TEAM_WORLD), t=start)
            rec.add("allocate", (placed[1], placed[2], site, data.dtype.str, data.shape, bool(zeroed)), t=start)
            rec.add("acquire", team_key(rec, TEAM_WORLD))
        return _watched(array)
    return allocate


def _watched(array):
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    from ._watched import WatchedArray
    if type(array) is FakeCUDAArray:
        return WatchedArray(array._ary, array.stream)
    return array


def _free(function):
    @functools.wraps(function)
    def free(a):
        rec = recorder()
        if rec is not None:
            rec.add("release", team_key(rec, TEAM_WORLD))
        function(a)
        if rec is not None:
            rec.add("acquire", team_key(rec, TEAM_WORLD))
    return free
