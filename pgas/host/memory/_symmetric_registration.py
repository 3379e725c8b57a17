"""Memory pgas did not allocate, made symmetric: ``register_symmetric`` /
``unregister_symmetric`` (NVSHMEM's ``nvshmemx_buffer_register_symmetric``; nvshmem4py's
``register_external_buffer``).

Every PE gives memory of the same size; pgas picks a range at the same offset of every
heap and maps each PE's memory there, in its own heap and in its node's views of it (the
heap's calls: ``external_memory``, ``external_offset``, ``map_external``,
``unmap_external``; on the simulator a shared file over heap pages, on cuda a VMM
allocation in the span after the heap). The array returned is a view of that range: the
same memory as the PE's own array, reached by every put, get, atomic, signal, collective
and kernel as any symmetric array (PEs on other nodes through the NIC, which applies
requests at the owner's heap addresses).
"""
from __future__ import annotations

from ...core._checks import contiguous_orders
from ...core._errors import PgasError, PgasValueError
from ...runtime._arrays import array_span, as_ndarray
from ...runtime._barrier import wait_all
from ...runtime._state import Runtime, runtime
from ._memory import _device_array, external_bytes, finish_gpu_work, heap_holding

__all__ = ["register_symmetric", "unregister_symmetric", "register_external_buffer", "unregister_external_buffer"]


def _external_memory(rt: Runtime, data, fn: str):
    """What the heap maps of ``data`` (``external_memory``), after the checks of its shape
    and place; PgasValueError naming what is wrong."""
    address, nbytes = external_bytes(data, fn)
    if heap_holding(rt, address, nbytes) is not None:
        raise PgasValueError(f"{fn}: a is already symmetric memory (in a heap): register only memory "
                             "pgas did not allocate")
    return rt.heap.external_memory(address, nbytes, fn)


def register_symmetric(a):
    """register_symmetric(a)

    Make memory pgas did not allocate symmetric (collective: every PE calls it, each with its
    own memory of the same size). Returns a symmetric array of ``a``'s shape and dtype that is
    the same memory as ``a`` (a store through either is seen through the other): use it as
    the destination or source of any put, get, atomic, signal or collective, in kernels, and
    with ``peer_array``. NVSHMEM's ``nvshmemx_buffer_register_symmetric``; nvshmem4py's
    ``register_external_buffer``. Undo with ``unregister_symmetric`` (``free`` refuses it);
    ``finalize`` drops what is left.

    The memory must be one that another process can map, as NVSHMEM needs:

    - on the cuda backend, GPU memory of a VMM allocation (``cuMemCreate``, with
      ``requestedHandleTypes`` including ``CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR``), ``a``
      starting at the first byte of its mapping; it takes that many bytes (rounded up to the
      allocation granularity, 2 MiB) of the room for registered memory after the heap
      (as much as the heap's size, PGAS_SYMMETRIC_SIZE, in all);
    - on the simulator backend, a shared mapping of a file, e.g.
      ``multiprocessing.shared_memory.SharedMemory`` (``np.ndarray(shape, dtype,
      buffer=shm.buf)``) or an mmap of a file in /dev/shm, starting at a page boundary; the
      file must exist until the call returns (the node's PEs open it by name). It takes a
      range of that many bytes (rounded up to whole pages) of the symmetric heap, whose own
      pages there go unused.

    Parameters
    ----------
    a : numpy.ndarray or GPU array
        C- or Fortran-contiguous, non-empty, the same number of bytes on every PE.
    """
    fn = "pgas.register_symmetric"
    rt = runtime(fn)
    data = as_ndarray(a, fn, "a")
    nbytes = data.size * data.dtype.itemsize
    try:
        memory, refusal = _external_memory(rt, data, fn), None
    except PgasValueError as exc:
        memory, refusal = None, exc
    try:
        # every PE's size (and whether it refused) in the arrival: differing calls fail on every PE
        try:
            wait_all(rt.boot.comm, fn, record=f"{nbytes} bytes" + (", refused here (see this PE's error)" if refusal
                                                                   else ""))
        except PgasError:
            if refusal is None:
                raise
        if refusal is not None:
            raise refusal
        offset = rt.heap.external_offset(memory, rt.allocator)
        failure = rt.heap.map_external(offset, memory)
        try:
            wait_all(rt.boot.comm, fn, record="mapped" if failure is None else failure)
            if failure is not None:
                raise PgasError(f"{fn}: {failure}")
            rt.transports.add_symmetric(offset, memory.mapped, fn)     # (for the NIC: collective)
        except PgasError:
            rt.heap.unmap_external(offset, memory.mapped)
            rt.heap.release_external_offset(offset, rt.allocator)
            raise
    finally:
        if memory is not None:
            rt.heap.forget_external(memory)
    rt.symmetric_registrations[offset] = (memory.mapped, nbytes, a)
    order = "C" if "C" in contiguous_orders(data) else "F"
    return _device_array(rt.heap.array_at(offset, data.shape, data.dtype, order))


def unregister_symmetric(s) -> None:
    """unregister_symmetric(s)

    Undo ``register_symmetric`` (collective): ``s`` is the symmetric array it returned. Every
    operation this PE issued is completed first (as ``quiet``) and every PE waits for the
    others, so none still reaches the memory; the user's own array is untouched and stays
    usable as ordinary memory.
    """
    fn = "pgas.unregister_symmetric"
    rt = runtime(fn)
    data = as_ndarray(s, fn, "s")
    offset = registered_offset(rt, data, fn)
    if offset is None:
        raise PgasValueError(f"{fn}: s must be an array returned by pgas.register_symmetric (not a slice of one, "
                             "nor one already unregistered)")
    rt.transports.quiet(fn)
    finish_gpu_work(rt)
    wait_all(rt.boot.comm, fn, record=f"heap offset {offset}")   # nobody still reads or writes it
    mapped, _, _ = rt.symmetric_registrations.pop(offset)
    rt.transports.remove_symmetric(offset)
    rt.heap.unmap_external(offset, mapped)
    rt.heap.release_external_offset(offset, rt.allocator)


def registered_offset(rt: Runtime, data, fn: str) -> int | None:
    """Heap offset of ``data`` when it is a whole array from ``register_symmetric``, else None."""
    if not rt.symmetric_registrations:
        return None
    address, _, _, itemsize = array_span(data, fn, "s")
    offset = address - rt.heap.bases[rt.my_pe]
    entry = rt.symmetric_registrations.get(offset)
    return offset if entry is not None and entry[1] == data.size * itemsize else None


register_external_buffer = register_symmetric        # nvshmem4py's names (collective and symmetric there too)
unregister_external_buffer = unregister_symmetric
