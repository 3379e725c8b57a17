"""Symmetric arrays: collective allocation at the same heap offset on every PE (``empty``,
``zeros``, ``full`` in C or Fortran order; OpenSHMEM's ``calloc``, ``align``,
``malloc_with_hints``; nvshmem4py's ``buffer``), and the registration of memory pgas did not
allocate as the local side of RMA (``register_buffer``)."""
from __future__ import annotations

import ctypes
import numbers
import operator
import sys

import numpy as np

from ...core._checks import check_contiguous, check_pe, contiguous_orders
from ...core._device_errors import device_error
from ...core._errors import PgasError, PgasValueError
from ...nic._regions import ACCESS_LOCAL
from ...runtime._allocator import ALIGNMENT
from ...runtime._arrays import array_span, as_ndarray
from ...runtime._barrier import wait_all
from ...runtime._state import Runtime, runtime

__all__ = ["empty", "zeros", "full", "calloc", "align", "malloc_with_hints", "buffer", "free", "peer_array",
           "register_buffer", "unregister_buffer",
           "MALLOC_ATOMICS_REMOTE", "MALLOC_SIGNAL_REMOTE"]

# OpenSHMEM 1.5's hints for shmem_malloc_with_hints (bits; combine them with |)
MALLOC_ATOMICS_REMOTE = 1 << 0    # the memory will be the target of remote atomics
MALLOC_SIGNAL_REMOTE = 1 << 1     # the memory will hold signals updated by remote PEs
_KNOWN_HINTS = MALLOC_ATOMICS_REMOTE | MALLOC_SIGNAL_REMOTE


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


def _memory_order(order, morder, fn: str) -> str:
    """``order`` (or nvshmem4py's ``morder``) checked: "C" (the default) or "F"."""
    if morder is not None:
        if order is not None and order != morder:
            raise PgasValueError(f"{fn}: order and morder name the same thing; give one, got order={order!r} "
                                 f"and morder={morder!r}")
        order, name = morder, "morder"
    else:
        order, name = ("C" if order is None else order), "order"
    if not isinstance(order, str) or order not in ("C", "F"):
        raise PgasValueError(f"{fn}: {name} must be 'C' (row-major) or 'F' (column-major, Fortran), got {order!r}")
    return order


def _allocate(fn: str, shape, dtype, fill=None, order: str = "C", alignment: int = ALIGNMENT, hints: int = 0):
    rt = runtime(fn)
    dims = _shape_tuple(shape, fn)
    dtype = _symmetric_dtype(dtype, fn)
    if fill is not None and fill is not _ZERO_BYTES:
        fill = _fill_value(fill, dims, dtype, fn)
    nbytes = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    # no bytes, no heap space (as nvshmem_malloc(0)): a GPU's empty array has no address
    # (numba's is NULL) by which free could find a block
    offset = rt.allocator.allocate(nbytes, alignment) if nbytes else None
    view = rt.heap.array_at(offset or 0, dims, dtype, order)
    if fill is not None and nbytes:
        _fill(rt, view, offset, nbytes, fill, fn)
    # every PE's call must match, arguments and place in the heap too (one message either way)
    extra = (f", order {order}" if order != "C" else "") + (f", alignment {alignment}" if alignment != ALIGNMENT
                                                            else "") + (f", hints {hints:#x}" if hints else "")
    record = f"shape {dims}, dtype {dtype.str}{extra}, heap offset {offset}"
    try:
        wait_all(rt.boot.comm, fn, record=record)  # no PE writes into a peer's copy before the peer has it
    except PgasError:
        if offset is not None:
            rt.allocator.release(offset)
        raise
    if offset is None:
        rt.empty_arrays[id(view)] = view
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
        from .. import _gpu_ops
        values = np.asfortranarray(value) if contiguous_orders(view) == "F" else np.ascontiguousarray(value)
        _gpu_ops.copy(view, values, values.size, None, fn)


def empty(shape, dtype=np.float64, order: str | None = None, *, morder: str | None = None):
    """empty(shape, dtype=np.float64, order="C")

    A symmetric array with undefined contents (collective: same arguments on every PE).

    Parameters
    ----------
    shape : int or tuple of int
        The array's shape.
    dtype : numpy dtype, optional
        Its element type (plain values: no Python objects).
    order : {"C", "F"}, optional
        Memory order: "C" (row-major, the default) or "F" (column-major: the array is
        Fortran-contiguous in the heap). ``morder=`` (nvshmem4py's name) is accepted.

    Returns
    -------
    device array
        A numba device array in GPU memory on the cuda backend (with
        ``__cuda_array_interface__``), a zero-copy device array on the simulator backend,
        at the same heap offset on every PE.
    """
    return _allocate("pgas.empty", shape, dtype, order=_memory_order(order, morder, "pgas.empty"))


def zeros(shape, dtype=np.float64, order: str | None = None, *, morder: str | None = None):
    """zeros(shape, dtype=np.float64, order="C")

    A symmetric array of zeros (collective). Arguments as for ``empty``.
    """
    return _allocate("pgas.zeros", shape, dtype, fill=_ZERO_BYTES, order=_memory_order(order, morder, "pgas.zeros"))


def full(shape, value, dtype=np.float64, order: str | None = None, *, morder: str | None = None):
    """full(shape, value, dtype=np.float64, order="C")

    A symmetric array filled with ``value`` (a scalar, or an array broadcastable to
    ``shape``; collective). Other arguments as for ``empty``.
    """
    return _allocate("pgas.full", shape, dtype, fill=value, order=_memory_order(order, morder, "pgas.full"))


def calloc(count, dtype=np.float64):
    """calloc(count, dtype=np.float64)

    OpenSHMEM's ``shmem_calloc``: a symmetric 1-D array of ``count`` elements of ``dtype``,
    every byte zero (collective). ``shmem_calloc(count, size)`` takes an element size in
    bytes; here the dtype gives it.
    """
    return _allocate("pgas.calloc", count, dtype, fill=_ZERO_BYTES)


def _alignment(alignment, fn: str) -> int:
    if isinstance(alignment, (bool, np.bool_)) or not isinstance(alignment, numbers.Integral) \
            or alignment <= 0 or alignment & (alignment - 1):
        raise PgasValueError(f"{fn}: alignment must be a power of two (bytes), got {alignment!r}")
    return max(int(alignment), ALIGNMENT)


def align(alignment: int, shape, dtype=np.float64):
    """align(alignment, shape, dtype=np.float64)

    OpenSHMEM's ``shmem_align``: a symmetric array with undefined contents whose heap offset
    is a multiple of ``alignment`` (collective; the offset is the same on every PE).

    Parameters
    ----------
    alignment : int
        A power of two, in bytes. Every symmetric array is aligned to 256 bytes anyway:
        smaller alignments give the same placement as ``empty``.
    shape, dtype
        As for ``empty``.
    """
    return _allocate("pgas.align", shape, dtype, alignment=_alignment(alignment, "pgas.align"))


def malloc_with_hints(shape, dtype=np.float64, hints: int = 0):
    """malloc_with_hints(shape, dtype=np.float64, hints=0)

    OpenSHMEM 1.5's ``shmem_malloc_with_hints``: ``empty(shape, dtype)`` told how the memory
    will be used (collective; same hints on every PE).

    Parameters
    ----------
    shape, dtype
        As for ``empty``.
    hints : int
        0, or ``MALLOC_ATOMICS_REMOTE`` and/or ``MALLOC_SIGNAL_REMOTE`` combined with ``|``
        (other bits: PgasValueError). They are checked and recorded (PGAS_DEBUG compares
        them across PEs) but do not change placement: every symmetric array already
        supports remote atomics and signals.
    """
    fn = "pgas.malloc_with_hints"
    if isinstance(hints, (bool, np.bool_)) or not isinstance(hints, numbers.Integral) or hints < 0 \
            or hints & ~_KNOWN_HINTS:
        raise PgasValueError(f"{fn}: hints must be 0 or a combination (|) of pgas.MALLOC_ATOMICS_REMOTE "
                             f"({MALLOC_ATOMICS_REMOTE}) and pgas.MALLOC_SIGNAL_REMOTE ({MALLOC_SIGNAL_REMOTE}), "
                             f"got {hints!r}")
    return _allocate(fn, shape, dtype, hints=int(hints))


def buffer(size: int, release: bool = False, except_on_del: bool = True):
    """buffer(size, release=False, except_on_del=True)

    nvshmem4py's ``buffer``: ``size`` bytes of symmetric memory, as a uint8 array of
    ``size`` elements (collective). nvshmem4py returns a ``cuda.core.Buffer``; here it is a
    symmetric array like any other, usable with ``put``/``get`` and with the collectives
    (``broadcast``, ``fcollect``, ``alltoall`` and ``reduce`` act on its bytes as uint8).
    Free it with ``free`` (collective): ``release`` and ``except_on_del``, nvshmem4py's
    garbage-collection options, are accepted and ignored (nothing is freed behind the
    PEs' backs).
    """
    fn = "pgas.buffer"
    if isinstance(size, (bool, np.bool_)) or not isinstance(size, numbers.Integral) or size < 0:
        raise PgasValueError(f"{fn}: size must be a non-negative integer (bytes), got {size!r}")
    return _allocate(fn, int(size), np.uint8)


def finish_gpu_work(rt: Runtime) -> None:
    """On a GPU, wait until this PE's kernels and copies are done (with memory about to go)."""
    if rt.on_gpu:
        from numba import cuda
        cuda.synchronize()


def _not_an_allocation(fn: str) -> PgasValueError:
    return PgasValueError(f"{fn}: a must be an array returned by pgas.empty/zeros/full (or calloc, align, "
                          "malloc_with_hints, buffer), not a slice of one, nor one already freed")


def _symmetric_block(rt: Runtime, arr, fn: str) -> int | None:
    """Heap offset of the allocation (or registered memory) that ``arr`` is (not a slice of
    it); None for a zero-byte array, which has no heap space: ``arr`` must then be the array
    itself of a live one (a slice, or one freed already, is refused all the same)."""
    data = as_ndarray(arr, fn, "a")
    if not data.nbytes:
        if rt.empty_arrays.get(id(data)) is not data:
            raise _not_an_allocation(fn)
        return None
    offset = rt.heap.offset_of(data, fn, "a")
    if rt.allocator.block_at(offset) is None and offset not in rt.symmetric_registrations:
        raise _not_an_allocation(fn)
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
    A slice, or an array freed already, is refused (PgasValueError), zero-byte arrays
    included: they take no heap space, but pgas knows the ones it made until they are freed.
    """
    rt = runtime("pgas.free")
    data = as_ndarray(a, "pgas.free", "a")
    holder = _peer_holding(rt, data, "pgas.free")
    if holder is not None:
        if rt.debug:
            print(f"[PE {rt.my_pe}] pgas.free: a is a view of PE {holder}'s memory (from peer_array); "
                  "nothing freed", file=sys.stderr, flush=True)
        return
    offset = _symmetric_block(rt, data, "pgas.free")    # None: no bytes, no heap space (_allocate)
    if offset in rt.symmetric_registrations:
        raise PgasValueError("pgas.free: a is memory made symmetric by pgas.register_symmetric: "
                             "give it to pgas.unregister_symmetric instead")
    finish_gpu_work(rt)
    wait_all(rt.boot.comm, "pgas.free", record=f"heap offset {offset}")  # nobody may still be writing into it
    if offset is None:
        del rt.empty_arrays[id(data)]
    else:
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


def _overlapping(start: int, nbytes: int, base: int, size: int) -> bool:
    return start < base + size and base < start + nbytes


def external_bytes(data, fn: str) -> tuple[int, int]:
    """(address, bytes) of array ``data`` that a user registers (``register_buffer``,
    ``register_symmetric``): C- or Fortran-contiguous and non-empty, else PgasValueError."""
    if not contiguous_orders(data):
        raise PgasValueError(f"{fn}: a must be C-contiguous or Fortran-contiguous, got a strided array "
                             "(register the array it is a view of)")
    address, _, _, itemsize = array_span(data, fn, "a")
    nbytes = data.size * itemsize
    if nbytes == 0:
        raise PgasValueError(f"{fn}: a must have at least one byte, got an empty array")
    return address, nbytes


def heap_holding(rt: Runtime, address: int, nbytes: int) -> int | None:
    """The PE whose heap (as mapped here) shares bytes with [address, address + nbytes), or None."""
    for pe, base in enumerate(rt.heap.bases):
        if base is not None and _overlapping(address, nbytes, base, rt.heap.size):
            return pe
    return None


def register_buffer(a):
    """register_buffer(a)

    Make memory pgas did not allocate usable as the local side of host RMA: the ``src`` of
    ``put``/``put_nbi``/``put_signal``/``put_signal_nbi``, the ``dest`` of ``get``/``get_nbi``
    (NVSHMEM's ``nvshmemx_buffer_register``). Not collective, and the memory does not
    become symmetric: no other PE can name it (``register_symmetric`` makes memory
    symmetric, as nvshmem4py's ``register_external_buffer`` does).

    On the simulator backend ``a`` (a numpy array) becomes a registered region of the
    emulated NIC until ``unregister_buffer``: ``put_nbi``/``get_nbi`` to PEs on other nodes
    then use it in place and return once posted, completing at ``quiet`` (an unregistered
    numpy array is registered just for the call, so those calls complete before returning).
    Within a node, and on the cuda backend (whose copy engines reach any memory, and whose
    copies to other nodes complete on return), the calls behave as without registration:
    there it is checked bookkeeping only.

    Parameters
    ----------
    a : array
        Contiguous (C or Fortran order), non-empty: a numpy array, or on the cuda backend
        any array with ``__cuda_array_interface__`` (a numba device array, CuPy, PyTorch).
        Not symmetric memory, and not overlapping a buffer already registered
        (PgasValueError). Keep it alive until it is unregistered (pgas holds a reference).

    Returns
    -------
    array
        ``a`` itself (nvshmem4py returns the buffer to use from then on).
    """
    fn = "pgas.register_buffer"
    rt = runtime(fn)
    data = as_ndarray(a, fn, "a")
    address, nbytes = external_bytes(data, fn)
    pe = heap_holding(rt, address, nbytes)
    if pe is not None:
        whose = "this PE's" if pe == rt.my_pe else f"PE {pe}'s (a view from peer_array)"
        raise PgasValueError(f"{fn}: a is symmetric memory (in {whose} heap), which needs no registration; "
                             "register only memory pgas did not allocate")
    registered = rt.transports.registered
    for start, (size, _, _) in registered.items():
        if _overlapping(address, nbytes, start, size):
            what = ("is already registered" if (start, size) == (address, nbytes) else
                    f"overlaps the registered buffer [{start:#x}, {start + size:#x})")
            raise PgasValueError(f"{fn}: a (bytes [{address:#x}, {address + nbytes:#x})) {what}; "
                                 "unregister_buffer it first")
    region = None
    if not rt.heap.device_arrays:   # host memory: a NIC region, reached by its key while registered
        view = np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(address))
        region = rt.transports.nic.register(view, ACCESS_LOCAL)
    registered[address] = (nbytes, data, region)
    return a


def unregister_buffer(a) -> None:
    """unregister_buffer(a)

    Undo ``register_buffer(a)`` (NVSHMEM's ``nvshmemx_buffer_unregister``). On the
    simulator backend this first completes every RMA this PE issued through the NIC (as
    ``quiet``), so none still uses the buffer.
    Buffers left registered are dropped by ``finalize``.

    Parameters
    ----------
    a : array
        The array given to ``register_buffer`` (the same memory: PgasValueError for one
        that was not registered, was already unregistered, or is only part of one).
    """
    fn = "pgas.unregister_buffer"
    rt = runtime(fn)
    data = as_ndarray(a, fn, "a")
    address, _, _, itemsize = array_span(data, fn, "a")
    registered = rt.transports.registered
    entry = registered.get(address)
    if entry is None or entry[0] != data.size * itemsize:
        raise PgasValueError(f"{fn}: a was not registered: give the array passed to pgas.register_buffer "
                             "(not a part of it, nor one already unregistered)")
    region = entry[2]
    if region is not None:
        rt.transports.quiet(fn)     # no request still names its key
        rt.transports.nic.deregister(region)
    del registered[address]

