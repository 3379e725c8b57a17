"""Host operations of the cuda backend, ordered on a stream.

Data moves between the node's PEs with the copy engines (``cuMemcpyAsync`` between IPC
mapped heaps). Everything that must act on the device side (signal updates, waits,
team barriers, collectives) is a small kernel over ``pgas.device`` launched on the
stream, as NVSHMEM's ``*_on_stream`` calls are, so host and device operations of all
PEs share one set of signal words and barrier epochs.

``stream=None`` means the runtime's internal stream (non-blocking, so the work neither
waits for nor holds up the legacy default stream and user streams), and the call returns
when the work is done; as in NVSHMEM, it is not ordered after work the caller queued on
other streams (synchronize that first). With a stream the work is queued on it and the
call returns at once. The host argument checks are made before any of this (``_rma``,
``_signal``, ``_collectives``).
"""
from __future__ import annotations

import numpy as np
from numba import cuda

from .. import device as dev
from .._errors import PgasError
from ._gpu_driver import checked, device_array_at, numba_stream, stream_handle, stream_scratch, synchronize
from ._heap import array_span
from ._runtime import device_error_behind, runtime

__all__ = ["copy", "signal_op", "signal_wait_until", "quiet", "team_barrier", "collective"]

COLLECTIVE_THREADS = 512   # one block runs a host-called collective


def _handle(stream, fn: str) -> int:
    """The CUstream of ``stream``; None is the runtime's internal stream."""
    return stream_handle(stream, fn, runtime(fn).heap.stream)


def _finish(handle: int, stream, fn: str) -> None:
    """With no stream given, wait for the work; a kernel that stopped is named as such."""
    if stream is not None:
        return
    try:
        synchronize(handle)
    except PgasError as exc:
        found = device_error_behind()
        if found is not None:
            raise found from exc
        raise PgasError(f"{fn}: the GPU work failed ({exc})") from None


def copy(dst, src, nelems: int, stream, fn: str) -> None:
    """Copy ``nelems`` elements from contiguous ``src`` (host or device) to device ``dst``
    (or device to host: any pair the unified address space allows)."""
    from cuda.bindings import driver

    handle = _handle(stream, fn)
    nbytes = nelems * np.dtype(dst.dtype).itemsize
    if nbytes:
        dst_address, src_address = array_span(dst, fn, "dest")[0], array_span(src, fn, "src")[0]
        checked(driver.cuMemcpyAsync(dst_address, src_address, nbytes, handle), f"{fn}: cuMemcpyAsync")
    _finish(handle, stream, fn)


def _launch(kernel, threads: int, stream, fn: str, *args) -> None:
    handle = _handle(stream, fn)
    kernel[1, threads, numba_stream(handle)](*args)
    _finish(handle, stream, fn)


@cuda.jit
def _signal_kernel(signal, value, sig_op, pe):
    dev.fence()          # data queued before on this stream is visible before the signal
    dev.signal_op(signal, value, sig_op, pe)


@cuda.jit
def _wait_kernel(signal, cmp, value, seen):
    seen[0] = dev.signal_wait_until(signal, cmp, value)


@cuda.jit
def _quiet_kernel():
    dev.quiet()


@cuda.jit
def _barrier_kernel(team):
    dev.barrier(team)


@cuda.jit
def _sync_kernel(team):
    dev.sync(team)


def signal_op(signal, value: int, sig_op: int, pe: int, stream, fn: str) -> None:
    """Update PE ``pe``'s ``signal[0]`` after everything queued before it on ``stream``."""
    _launch(_signal_kernel, 1, stream, fn, signal, value, sig_op, pe)


def signal_wait_until(signal, cmp: int, value: int, stream, fn: str):
    """Wait until ``signal[0] <cmp> value``: the value seen, or None when queued on a stream."""
    from cuda.bindings import driver

    handle = _handle(stream, fn)
    # The word the kernel writes what it saw into is freed in the stream's order: a wait
    # queued on a user's stream may run long after this call has returned.
    with stream_scratch(signal.dtype.itemsize, handle, fn) as address:
        _launch(_wait_kernel, 1, stream, fn, signal, cmp, value, device_array_at(address, (1,), signal.dtype))
        if stream is not None:
            return None
        seen = np.empty(1, signal.dtype)    # read once the kernel is done (_launch waited)
        checked(driver.cuMemcpyDtoHAsync(seen.ctypes.data, address, seen.nbytes, handle),
                f"{fn}: cuMemcpyDtoHAsync")
        synchronize(handle)
        return seen[0]


def quiet(stream, fn: str) -> None:
    """Complete this PE's host-initiated RMA: on ``stream``, or everything when None."""
    if stream is None:
        cuda.synchronize()
    else:
        _launch(_quiet_kernel, 1, stream, fn)


def team_barrier(team: int, complete_rma: bool, stream, fn: str) -> None:
    """A barrier (``complete_rma``) or sync of ``team`` queued on ``stream``."""
    _launch(_barrier_kernel if complete_rma else _sync_kernel, 1, stream, fn, team)


_COLLECTIVE_KERNELS: dict = {}


def _collective_kernel(name: str):
    """The kernel that runs device collective ``<name>_block`` (compiled on first use)."""
    if name not in _COLLECTIVE_KERNELS:
        block_form = getattr(dev, f"{name}_block")
        if name == "broadcast":
            def run(team, dest, src, root):
                block_form(team, dest, src, root)
        else:
            def run(team, dest, src):
                block_form(team, dest, src)
        _COLLECTIVE_KERNELS[name] = cuda.jit(run)
    return _COLLECTIVE_KERNELS[name]


def collective(name: str, team: int, dest, src, *extra, stream, fn: str) -> None:
    """Run device collective ``name`` (``broadcast``, ``fcollect``, ``alltoall``,
    ``<op>_reduce``, ``<op>_reducescatter``) over ``team`` as a one-block kernel."""
    _launch(_collective_kernel(name), COLLECTIVE_THREADS, stream, fn, team, dest, src, *extra)
