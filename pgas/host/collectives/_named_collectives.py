"""The collective names of OpenSHMEM and nvshmem4py that are spelled differently in pgas:
``<op>_reduce`` and ``<op>_reducescatter`` (the op in the name, as on the device and in
OpenSHMEM 1.5), ``collect`` (an all-gather of a different number of elements from each
member), and nvshmem4py's ``collective_on_buffer`` (a collective named by a string, on
symmetric byte buffers, the element type named by a string)."""
from __future__ import annotations

import time

import numpy as np

from ...core._checks import check_contiguous, check_dtypes_match, check_fits
from ...core._errors import PgasValueError
from ...core._reductions import BFLOAT16, OPS
from ...runtime._arrays import as_ndarray
from ...runtime._state import runtime
from ...runtime._team_table import team_of
from ._collectives import alltoall, broadcast, fcollect, reduce, reducescatter
from ..rma._rma import get
from ..synchronization._sync import team_barrier

__all__ = ["collect", "collective_on_buffer"]     # + the generated names

# NVSHMEM's element type names (the <TYPENAME> of its collectives), and OpenSHMEM's for the
# types NVSHMEM lacks -> numpy's
ELEMENT_TYPES: dict = {
    "half": np.float16, "float": np.float32, "double": np.float64, "bfloat16": BFLOAT16,
    "char": np.int8, "schar": np.int8, "short": np.int16, "int": np.int32, "long": np.int64, "longlong": np.int64,
    "uchar": np.uint8, "ushort": np.uint16, "uint": np.uint32, "ulong": np.uint64, "ulonglong": np.uint64,
    "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
    "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64,
    "size": np.uint64, "ptrdiff": np.int64,
    # OpenSHMEM 1.5's (its <TYPENAME>s for complex and long double reductions)
    "complexf": np.complex64, "complexd": np.complex128, "longdouble": np.longdouble,
}
_ON_BUFFER = ("reduce", "reducescatter", "fcollect", "alltoall", "broadcast")


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


def _elements(fn: str, what: str, buf, element: np.dtype):
    """Symmetric byte buffer ``buf`` (from ``pgas.buffer``) seen as elements of ``element``."""
    as_ndarray(buf, fn, what)
    if buf.ndim != 1 or buf.dtype != np.uint8:
        raise PgasValueError(f"{fn}: {what} must be a byte buffer from pgas.buffer (1-D uint8), got "
                             f"{buf.ndim}-D {buf.dtype}")
    if buf.nbytes % element.itemsize:
        raise PgasValueError(f"{fn}: {what} has {buf.nbytes} bytes, not a whole number of {element.itemsize}-byte "
                             f"{element} elements")
    return buf.view(element)


def collective_on_buffer(coll: str, team, dest, src, dtype: str | None = None, op: str | None = None, root: int = 0,
                         stream=None, enable_timing: bool = False) -> float:
    """collective_on_buffer(coll, team, dest, src, dtype, op=None, root=0, stream=None, enable_timing=False)

    nvshmem4py's collective on raw buffers: ``coll`` ("reduce", "reducescatter",
    "fcollect", "alltoall" or "broadcast") over ``team`` on symmetric byte buffers
    ``dest``/``src`` (``pgas.buffer``) seen as elements of ``dtype``, NVSHMEM's type name
    ("float", "int32", "ulonglong", ...: ``ELEMENT_TYPES``); ``op`` for the reductions,
    ``root`` for broadcast. It calls the typed collective (``pgas.reduce`` ...) on views of
    the buffers, with the most elements that both hold in the collective's shape (team
    size n: reduce and broadcast ``min(dest, src)``; fcollect ``min(src, dest // n)`` from
    each; alltoall blocks of ``min(dest, src) // n``; reducescatter ``min(dest, src // n)``
    each): nvshmem4py derives the counts from ``dest`` alone and reads past a smaller
    ``src``. Returns the time it took in milliseconds when ``enable_timing``, else 0.0.
    """
    fn = "pgas.collective_on_buffer"
    if coll not in _ON_BUFFER:
        raise PgasValueError(f"{fn}: coll must be one of {', '.join(_ON_BUFFER)}, got {coll!r}")
    if dtype not in ELEMENT_TYPES:
        raise PgasValueError(f"{fn}: dtype must be one of NVSHMEM's type names ({', '.join(ELEMENT_TYPES)}), "
                             f"got {dtype!r}")
    reduction = coll in ("reduce", "reducescatter")
    if reduction and op is None:
        raise PgasValueError(f"{fn}: {coll} needs op (one of {', '.join(OPS)})")
    if not reduction and op is not None:
        raise PgasValueError(f"{fn}: op is for reduce and reducescatter, got op={op!r} with {coll}")
    element = np.dtype(ELEMENT_TYPES[dtype])
    d, s = _elements(fn, "dest", dest, element), _elements(fn, "src", src, element)
    n = team_of(runtime(fn), team, fn).size
    started = time.perf_counter()
    if coll == "reduce":
        m = min(d.size, s.size)
        reduce(team, d[:m], s[:m], op, stream)
    elif coll == "reducescatter":
        m = min(d.size, s.size // n)
        reducescatter(team, d[:m], s[:n * m], op, stream)
    elif coll == "broadcast":
        m = min(d.size, s.size)
        broadcast(team, d[:m], s[:m], root, stream)
    elif coll == "fcollect":
        m = min(s.size, d.size // n)
        fcollect(team, d[:n * m], s[:m], stream)
    else:
        block = min(d.size, s.size) // n
        alltoall(team, d[:n * block], s[:n * block], stream)
    return (time.perf_counter() - started) * 1e3 if enable_timing else 0.0
