"""OpenSHMEM's collective names that are spelled differently in pgas: ``<op>_reduce`` and
``<op>_reducescatter`` (the op in the name, as on the device and in OpenSHMEM 1.5), and
``collect`` (an all-gather of a different number of elements from each member)."""
from __future__ import annotations

from ..core._checks import check_contiguous, check_dtypes_match, check_fits
from ..core._errors import PgasValueError
from ..core._reductions import OPS
from ..runtime._arrays import as_ndarray
from ..runtime._state import runtime
from ..runtime._team_table import team_of
from ._collectives import reduce, reducescatter
from ._rma import get
from ._sync import team_barrier

__all__ = ["collect"]     # + the generated names


def _named(op: str, scatter: bool):
    name = f"{op}_{'reducescatter' if scatter else 'reduce'}"
    collective = reducescatter if scatter else reduce

    def named(team, dest, src, stream=None) -> None:
        collective(team, dest, src, op, stream)
    named.__name__ = named.__qualname__ = name
    named.__doc__ = (f"{name}(team, dest, src, stream=None)\n\n"
                     f"``pgas.{collective.__name__}(team, dest, src, \"{op}\", stream)`` (OpenSHMEM's "
                     f"``shmem_{name}``).")
    return named


for _op in OPS:
    for _scatter in (False, True):
        _function = _named(_op, _scatter)
        globals()[_function.__name__] = _function
        __all__.append(_function.__name__)
del _op, _scatter, _function


def collect(team, dest, src, stream=None) -> None:
    """collect(team, dest, src, stream=None)

    All-gather of a different number of elements from each member (OpenSHMEM
    ``shmem_collect``): ``dest`` on every member receives every member's whole ``src``,
    concatenated in team-rank order. ``src`` is symmetric (members may pass slices of
    different lengths of one symmetric array), ``dest`` symmetric with room for the total.
    Collective over ``team``; each member reads the others' ``src`` (``get``) between two
    team barriers.
    """
    fn = "pgas.collect"
    rt = runtime(fn)
    found = team_of(rt, team, fn)
    d, s = as_ndarray(dest, fn, "dest"), as_ndarray(src, fn, "src")
    check_dtypes_match(fn, d, s)
    check_contiguous(fn, "dest", d)
    check_contiguous(fn, "src", s)
    offset = rt.symmetric_offset(s, fn, "src")
    sizes_and_offsets = found.comm.allgather((int(s.size), offset))
    sizes = [size for size, _ in sizes_and_offsets]
    if len({where for size, where in sizes_and_offsets if size}) > 1:
        raise PgasValueError(f"{fn}: src must start at the same symmetric address on every member (slices "
                             f"a[:k] of one symmetric array); their heap offsets are "
                             f"{[where for _, where in sizes_and_offsets]}")
    check_fits(fn, "dest", d, sum(sizes), f"collect gathers the members' src sizes {sizes}")
    flat = d.reshape(-1)
    team_barrier(fn, team, True, stream)        # every src is ready
    start = 0
    for rank, size in enumerate(sizes):
        if size:    # member ``rank``'s src: ``size`` elements at the same heap offset as this one's
            get(flat[start:start + size], rt.heap.array_at(offset, (size,), s.dtype), found.pes[rank])
        start += size
    team_barrier(fn, team, True, stream)        # nobody changes a src before everyone has read it
