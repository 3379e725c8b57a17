"""Host operations of the cuda backend, ordered on a stream.

Data moves between the node's PEs with the copy engines (``cuMemcpyAsync`` between IPC
mapped heaps), and to PEs on other nodes through the NIC (``copy_with``). Everything that
must act on the device side (signal updates, waits, team barriers, collectives) is a
small kernel over ``pgas.device`` launched on the
stream, as NVSHMEM's ``*_on_stream`` calls are, so host and device operations of all
PEs share one set of signal words and barrier epochs.

``stream=None`` means the runtime's internal stream (non-blocking, so the work neither
waits for nor holds up the legacy default stream and user streams), and the call returns
when the work is done; as in NVSHMEM, it is not ordered after work the caller queued on
other streams (synchronize that first). With a stream the work is queued on it and the
call returns at once. The non-blocking forms (``nbi=True``: ``put_nbi``, ``get_nbi``,
``put_signal_nbi``) are queued and not waited for, with or without a stream; a call that
returns a fetched value (``signal_fetch``, the fetching atomics) waits for its stream. The
host argument checks are made before any of this (``_rma``, ``_signal``, ``_atomics``,
``_collectives``).
"""
from __future__ import annotations

import functools

import numpy as np
from numba import cuda

from .. import device as dev
from ..core._device_errors import UNREACHABLE_WHY, device_error
from ..core._errors import PgasError
from ..cuda._driver import checked, device_array_at, numba_stream, stream_handle, stream_scratch, synchronize
from ..runtime._arrays import array_span
from ..runtime._failure import device_error_behind
from ..runtime._state import runtime

__all__ = ["copy", "copy_bytes", "copy_with", "signal_op", "signal_wait_until", "signal_fetch", "atomic", "quiet", "flush",
           "team_barrier", "collective", "staged_collective"]

COLLECTIVE_THREADS = 512   # one block runs a host-called collective


def _handle(stream, fn: str) -> int:
    """The CUstream of ``stream``; None is the runtime's internal stream."""
    return stream_handle(stream, fn, runtime(fn).heap.stream)


def _finish(handle: int, stream, fn: str) -> None:
    """With no stream given, wait for the work; a kernel that stopped is named as such."""
    if stream is not None:
        return
    _wait(handle, fn)


def _wait(handle: int | None, fn: str) -> None:
    """Wait for the work queued on stream ``handle`` (None: all of this PE's GPU work); a
    kernel that stopped is named as such."""
    try:
        synchronize(handle)
    except PgasError as exc:
        found = device_error_behind()
        if found is not None:
            raise found from exc
        raise PgasError(f"{fn}: the GPU work failed ({exc})") from None


def copy(dst, src, nelems: int, stream, fn: str, nbi: bool = False) -> None:
    """Copy ``nelems`` elements from contiguous ``src`` (host or device) to device ``dst``
    (or device to host: any pair the unified address space allows); ``nbi``: not waited for."""
    nbytes = nelems * np.dtype(dst.dtype).itemsize
    addresses = (array_span(dst, fn, "dest")[0], array_span(src, fn, "src")[0]) if nbytes else (0, 0)
    copy_bytes(*addresses, nbytes, stream, fn, nbi)


def copy_bytes(to: int, start: int, nbytes: int, stream, fn: str, nbi: bool = False) -> None:
    """Copy ``nbytes`` bytes from address ``start`` to address ``to`` (host or device),
    ordered on ``stream``; ``nbi``: not waited for."""
    from cuda.bindings import driver

    handle = _handle(stream, fn)
    if nbytes:
        checked(driver.cuMemcpyAsync(to, start, nbytes, handle), f"{fn}: cuMemcpyAsync")
    if not nbi:
        _finish(handle, stream, fn)


def copy_with(pe: int, to_peer: bool, sym, other, nelems: int, stream, fn: str, nbi: bool) -> None:
    """Copy ``nelems`` elements between local ``other`` and PE ``pe``'s copy of symmetric
    ``sym`` (into it when ``to_peer``): with the copy engines where its heap is mapped
    here, else through the NIC after the stream's work (``_remote_rma``: the host waits
    for the stream, and the copy is complete on return)."""
    rt = runtime(fn)
    if rt.transports.through_nic(fn, pe):
        from ..cuda.nic import _remote_rma
        _wait(_handle(stream, fn), fn)       # the NIC reads what the stream's work wrote
        _remote_rma.copy(rt.transports, rt.heap, fn, pe, to_peer, sym, other, nelems)
        return
    theirs = rt.heap.view_on(pe, sym, fn, "dest" if to_peer else "src")
    copy(*((theirs, other) if to_peer else (other, theirs)), nelems, stream, fn, nbi=nbi)


def _check_reachable(pe: int, fn: str, what: str) -> None:
    """Refuse, before any kernel runs, a PE that the device could not reach (neither mapped
    nor through the NIC): its check would stop the kernel with a trap, and a trap ends the
    CUDA context."""
    if runtime(fn).transports.kinds[pe] == "unreachable":
        raise device_error("UNREACHABLE", fn, what, UNREACHABLE_WHY, a=pe)


def _launch(kernel, threads: int, stream, fn: str, *args, nbi: bool = False) -> None:
    handle = _handle(stream, fn)
    kernel[1, threads, numba_stream(handle)](*args)
    if not nbi:
        _finish(handle, stream, fn)


def _fetch(kernel, dtype, stream, fn: str, *args, queued: bool = False):
    """Run the one-thread ``kernel(*args, out)`` on ``stream``, ``out`` a one-element scratch
    array of ``dtype``; returns ``out[0]`` once it has run. With ``queued`` and a stream,
    returns None at once instead (the work stays queued)."""
    from cuda.bindings import driver

    handle = _handle(stream, fn)
    # The word the kernel writes into is freed in the stream's order: a kernel queued on a
    # user's stream may run long after this call has returned.
    with stream_scratch(np.dtype(dtype).itemsize, handle, fn) as address:
        kernel[1, 1, numba_stream(handle)](*args, device_array_at(address, (1,), dtype))
        if queued and stream is not None:
            return None
        _wait(handle, fn)
        out = np.empty(1, dtype)    # read once the kernel is done
        checked(driver.cuMemcpyDtoHAsync(out.ctypes.data, address, out.nbytes, handle), f"{fn}: cuMemcpyDtoHAsync")
        synchronize(handle)
        return out[0]


@cuda.jit
def _signal_kernel(signal, value, sig_op, pe):
    dev.fence()          # data queued before on this stream is visible before the signal
    dev.signal_op(signal, value, sig_op, pe)


@cuda.jit
def _wait_kernel(signal, cmp, value, seen):
    seen[0] = dev.signal_wait_until(signal, cmp, value)


@cuda.jit
def _fetch_kernel(signal, out):
    out[0] = dev.signal_fetch(signal)


@cuda.jit
def _quiet_kernel():
    dev.quiet()


@cuda.jit
def _barrier_kernel(team):
    dev.barrier(team)


@cuda.jit
def _sync_kernel(team):
    dev.sync(team)


def signal_op(signal, value: int, sig_op: int, pe: int, stream, fn: str, nbi: bool = False) -> None:
    """Update PE ``pe``'s ``signal[0]`` after everything queued before it on ``stream``."""
    _check_reachable(pe, fn, "signal")
    _launch(_signal_kernel, 1, stream, fn, signal, value, sig_op, pe, nbi=nbi)


def signal_wait_until(signal, cmp: int, value: int, stream, fn: str):
    """Wait until ``signal[0] <cmp> value``: the value seen, or None when queued on a stream."""
    return _fetch(_wait_kernel, signal.dtype, stream, fn, signal, cmp, value, queued=True)


def signal_fetch(signal, fn: str):
    """The local ``signal[0]``, read on the device with acquire ordering."""
    return _fetch(_fetch_kernel, signal.dtype, None, fn, signal)


@functools.cache
def _atomic_kernel(name: str, operands: int, fetch: bool):
    """The one-thread kernel ``(dest, cond, value, pe[, out])`` that runs device atomic
    ``name``, compiled on first use. ``operands``: what the atomic takes between ``dest``
    and ``pe`` (0: nothing, 1: ``value``, 2: ``cond, value``); ``fetch``: it stores the
    fetched value in ``out[0]``."""
    device_atomic = getattr(dev, name)
    if operands == 0:
        def apply(dest, cond, value, pe):
            return device_atomic(dest, pe)
    elif operands == 1:
        def apply(dest, cond, value, pe):
            return device_atomic(dest, value, pe)
    else:
        def apply(dest, cond, value, pe):
            return device_atomic(dest, cond, value, pe)
    apply = cuda.jit(device=True)(apply)
    if fetch:
        def run(dest, cond, value, pe, out):
            out[0] = apply(dest, cond, value, pe)
    else:
        def run(dest, cond, value, pe):
            apply(dest, cond, value, pe)
    return cuda.jit(run)


def atomic(name: str, operands: int, fetch: bool, dest, cond, value, pe: int, stream, fn: str):
    """Device atomic ``name`` on element 0 of PE ``pe``'s ``dest`` (``cond`` and ``value``
    of ``dest``'s dtype; see ``_atomic_kernel``), in a one-thread kernel on ``stream``.
    Fetching: returns the value once the kernel has run (it waits for the stream). Else
    returns None: queued on a stream, or done on return without one."""
    _check_reachable(pe, fn, "dest")
    kernel = _atomic_kernel(name, operands, fetch)
    if fetch:
        return _fetch(kernel, dest.dtype, stream, fn, dest, cond, value, pe)
    _launch(kernel, 1, stream, fn, dest, cond, value, pe)
    return None


def flush(stream, fn: str) -> None:
    """Wait until the copies queued on ``stream`` have run (None: all of this PE's GPU
    work), so that their sources may be reused from the host."""
    _wait(None if stream is None else _handle(stream, fn), fn)


def quiet(stream, fn: str) -> None:
    """Complete this PE's host-initiated RMA: on ``stream``, or everything when None (then
    also what kernels posted to the NIC and left to complete: a device quiet waits for it)."""
    if stream is None:
        _wait(None, fn)
        if runtime(fn).transports.gpu_path is not None:
            _launch(_quiet_kernel, 1, None, fn)
    else:
        _launch(_quiet_kernel, 1, stream, fn)


def team_barrier(team: int, complete_rma: bool, stream, fn: str) -> None:
    """A barrier (``complete_rma``) or sync of ``team`` queued on ``stream``."""
    _launch(_barrier_kernel if complete_rma else _sync_kernel, 1, stream, fn, team)


@functools.cache
def _collective_kernel(name: str):
    """The kernel that runs device collective ``<name>_block`` (compiled on first use)."""
    block_form = getattr(dev, f"{name}_block")
    if name == "broadcast":
        def run(team, dest, src, root):
            block_form(team, dest, src, root)
    elif name == "alltoalls":
        def run(team, dest, src, dst, sst, nelems):
            block_form(team, dest, src, dst, sst, nelems)
    else:
        def run(team, dest, src):
            block_form(team, dest, src)
    return cuda.jit(run)


def staged_collective(dest, src, in_place: bool, stream, fn: str, run_on_host) -> None:
    """A host reduction or scan over a team that spans nodes, through host memory (the
    device ones read every member's data in place, within a node only): after the work
    queued on ``stream``, ``src`` is copied to host memory, ``run_on_host(host_dest,
    host_src)`` runs the collective there (as the simulator does across nodes: MPI), and
    the result is copied into ``dest``; complete on return. ``in_place``: ``dest`` is
    ``src``. Both copies are queued on the stream (the first after its work) and waited
    for: a synchronous copy from pageable memory may return before its data lands,
    unordered with the internal stream."""
    handle = _handle(stream, fn)
    host_src = np.empty(src.shape, src.dtype)
    copy(host_src, src, src.size, stream, fn, nbi=True)
    _wait(handle, fn)
    host_dest = host_src if in_place else np.empty(dest.shape, dest.dtype)
    run_on_host(host_dest, host_src)
    copy(dest, host_dest, dest.size, stream, fn, nbi=True)
    _wait(handle, fn)


def collective(name: str, team: int, dest, src, *extra, stream, fn: str) -> None:
    """Run device collective ``name`` (``broadcast``, ``fcollect``, ``alltoall``, ``alltoalls``,
    ``<op>_reduce``, ``<op>_reducescatter``, ``<op>_inscan``, ``<op>_exscan``) over
    ``team`` as a one-block kernel. The reductions and scans read members' data in place:
    host ones over teams that span nodes go through ``staged_collective`` instead."""
    _launch(_collective_kernel(name), COLLECTIVE_THREADS, stream, fn, team, dest, src, *extra)
