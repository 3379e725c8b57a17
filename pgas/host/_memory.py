"""Symmetric arrays: collective allocation at the same heap offset on every PE."""
from __future__ import annotations

import operator
import sys

import numpy as np

from ..core._checks import check_contiguous, check_pe
from ..core._device_errors import device_error
from ..core._errors import PgasError, PgasValueError
from ..runtime._arrays import array_span, as_ndarray
from ..runtime._barrier import wait_all
from ..runtime._state import Runtime, runtime

__all__ = ["empty", "zeros", "full", "free", "peer_array"]


def element0(fn: str, arr, what: str):
    """Element 0 of symmetric ``arr`` as a one-element array. ``arr`` must be non-empty and
    C-contiguous: a strided one has no flat view, and device code reads it without its strides."""
    word = as_ndarray(arr, fn, what)
    if word.size == 0:
        raise device_error("NOT_EMPTY", fn, what)
    check_contiguous(fn, what, word)
    return word.reshape(-1)[:1]


def _device_array(view):
    """What users get for a heap view: the numba device array itself on cuda; on the
    simulator a zero-copy device array around the numpy view."""
    if not isinstance(view, np.ndarray):
        return view
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray
    return FakeCUDAArray(view)


def _shape_tuple(shape, fn: str) -> tuple[int, ...]:
    """``shape`` as a tuple of sizes: ints (Python or numpy), not floats, bools or strings."""
    dims = (shape,) if np.isscalar(shape) else shape
    try:
        dims = tuple(_size(d) for d in dims)
    except (TypeError, ValueError):
        raise PgasValueError(f"{fn}: shape must be an int or a tuple of ints, got {shape!r}") from None
    if any(d < 0 for d in dims):
        raise PgasValueError(f"{fn}: shape must not have negative sizes, got {shape!r}")
    return dims


def _size(dim) -> int:
    if isinstance(dim, (bool, np.bool_)):
        raise TypeError(dim)
    return operator.index(dim)   # refuses 1.5 (int() would truncate it) and "3"


def _symmetric_dtype(dtype, fn: str) -> np.dtype:
    """``dtype`` as a numpy dtype whose items are plain bytes that a peer can copy."""
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        raise PgasValueError(f"{fn}: dtype must be a numpy dtype, got {dtype!r}") from None
    if dtype.hasobject:
        raise PgasValueError(f"{fn}: dtype must hold plain values, got {dtype} (Python objects are "
                             "pointers into one process: no other PE can use them)")
    if dtype.itemsize == 0:
        raise PgasValueError(f"{fn}: dtype must have a size, got {dtype} (give one, e.g. 'S8' or 'U4')")
    return dtype


_ZERO_BYTES = object()   # the fill of ``zeros``: every byte 0, whatever the dtype ('S4', structured)


def _allocate(fn: str, shape, dtype, fill=None):
    rt = runtime(fn)
    dims = _shape_tuple(shape, fn)
    dtype = _symmetric_dtype(dtype, fn)
    if fill is not None and fill is not _ZERO_BYTES:
        fill = _fill_value(fill, dims, dtype, fn)
    nbytes = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    offset = rt.allocator.allocate(nbytes)
    view = rt.heap.array_at(offset, dims, dtype)
    if fill is not None:
        _fill(rt, view, offset, nbytes, fill, fn)
    # PGAS_DEBUG: every PE's call must match, arguments and place in the heap too
    record = f"shape {dims}, dtype {dtype.str}, heap offset {offset}" if rt.debug else None
    try:
        wait_all(rt.boot.comm, fn, record=record)  # no PE writes into a peer's copy before the peer has it
    except PgasError:
        rt.allocator.release(offset)
        raise
    return _device_array(view)


def _fill_value(value, dims: tuple, dtype: np.dtype, fn: str) -> np.ndarray:
    """``value`` converted to ``dtype`` and broadcast to ``dims`` (checked before anything is allocated)."""
    try:
        return np.broadcast_to(np.asarray(value, dtype), dims)
    except (TypeError, ValueError, OverflowError) as exc:
        raise PgasValueError(f"{fn}: value must be a {dtype} scalar or an array broadcastable to shape "
                             f"{dims}, got {value!r} ({exc})") from None


def _fill(rt: Runtime, view, offset: int, nbytes: int, value, fn: str) -> None:
    """Fill a new symmetric array, complete on return (peers may use it right after)."""
    if value is _ZERO_BYTES:
        rt.heap.zero(offset, nbytes)
    elif not rt.on_gpu:
        view[...] = value
    else:   # a copy from pageable memory can return before it lands: _gpu_ops.copy waits for it
        from . import _gpu_ops
        values = np.ascontiguousarray(value)
        _gpu_ops.copy(view, values, values.size, None, fn)


def empty(shape, dtype=np.float64):
    """A symmetric array with undefined contents (collective: same arguments on every PE).

    Returns a numba device array in GPU memory on the cuda backend (with
    ``__cuda_array_interface__``), a zero-copy device array on the simulator backend.
    """
    return _allocate("pgas.empty", shape, dtype)


def zeros(shape, dtype=np.float64):
    """A symmetric array of zeros (collective)."""
    return _allocate("pgas.zeros", shape, dtype, fill=_ZERO_BYTES)


def full(shape, value, dtype=np.float64):
    """A symmetric array filled with ``value`` (collective)."""
    return _allocate("pgas.full", shape, dtype, fill=value)


def _symmetric_block(rt: Runtime, arr, fn: str) -> int:
    """Heap offset of the allocation that ``arr`` is (not a slice of it)."""
    data = as_ndarray(arr, fn, "a")
    offset = rt.heap.offset_of(data, fn, "a")
    if rt.allocator.block_at(offset) is None:
        raise PgasValueError(f"{fn}: a must be an array returned by pgas.empty/zeros/full "
                             "(not a slice of one, nor one already freed)")
    return offset


def _peer_holding(rt: Runtime, arr, fn: str) -> int | None:
    """The other PE whose heap (mapped here) holds ``arr``, as for a view from peer_array."""
    address = array_span(arr, fn, "a")[0]
    for pe, base in enumerate(rt.heap.bases):
        if pe != rt.my_pe and base is not None and base <= address < base + rt.heap.size:
            return pe
    return None


def free(a) -> None:
    """Release symmetric array ``a`` (collective: every PE frees the same array).

    Freeing a view of another PE's copy (from ``peer_array``) does nothing (as in
    nvshmem4py): the memory is the peer's, freed when the peer's own array is. Under PGAS_DEBUG it is reported on stderr.
    """
    rt = runtime("pgas.free")
    data = as_ndarray(a, "pgas.free", "a")
    holder = _peer_holding(rt, data, "pgas.free")
    if holder is not None:
        if rt.debug:
            print(f"[PE {rt.my_pe}] pgas.free: a is a view of PE {holder}'s memory (from peer_array); "
                  "nothing freed", file=sys.stderr, flush=True)
        return
    offset = _symmetric_block(rt, data, "pgas.free")
    if rt.on_gpu:   # this PE's kernels and copies are done with it
        from numba import cuda
        cuda.synchronize()
    record = f"heap offset {offset}" if rt.debug else None
    wait_all(rt.boot.comm, "pgas.free", record=record)  # nobody may still be writing into it
    rt.allocator.release(offset)


def peer_array(a, pe: int):
    """A view of PE ``pe``'s copy of symmetric array ``a`` (same node only: PgasError for a
    PE on another node, which has no load/store path; use put/get there)."""
    fn = "pgas.peer_array"
    rt = runtime(fn)
    pe = check_pe(fn, pe, rt.n_pes)
    data = as_ndarray(a, fn, "a")
    if not rt.heap.reachable(pe):
        raise PgasError(f"{fn}: PE {pe} is on another node: its memory has no load/store path from "
                        f"this PE (transport {rt.transports.kinds[pe]!r}); use pgas.put/pgas.get")
    return _device_array(rt.heap.view_on(pe, data, fn, "a"))
