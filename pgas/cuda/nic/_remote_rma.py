"""Host put and get on the cuda backend to a PE on another node, whose heap the copy
engines cannot reach: requests to the NIC on the host's own queue pairs (the simulator's
GPU-initiated engine, ``Transports.copy_span``), complete on return.

The local side is read or written by the NIC where it can: this PE's heap through the
NIC's window on GPU memory (``GpuWindow``), host memory by a registration (kept for the
next call, ``Transports.local_key``); other device memory (an array pgas did not
allocate) goes through the pinned buffer of ``GpuNicPath.staging``, a piece at a time.

The caller waits for the work queued on the call's stream (the internal one without a
stream) first, so that the NIC reads what that work wrote. The call returns when the NIC has
completed, with or without ``nbi`` or a stream: the host's queue pairs are not the GPU's,
so a signal a kernel sends after the call could otherwise overtake its data.
"""
from __future__ import annotations

import numpy as np

from ...runtime._arrays import array_span

__all__ = ["copy"]


def copy(transports, heap, fn: str, pe: int, to_peer: bool, sym, other, nelems: int) -> None:
    """Copy the first ``nelems`` elements, in memory order, between contiguous local
    ``other`` and PE ``pe``'s copy of contiguous symmetric ``sym`` (into it when
    ``to_peer``, else out of it). The caller has waited for the call's stream."""
    nbytes = nelems * np.dtype(sym.dtype).itemsize
    if not nbytes:
        return
    offset = heap.offset_of(sym, fn, "dest" if to_peer else "src")
    address = array_span(other, fn, "src" if to_peer else "dest")[0]
    if transports.heap_region.slice(address, nbytes) is not None:     # in the heap: the NIC's window
        transports.copy_span(fn, pe, to_peer, offset, address, transports.heap_region.lkey, nbytes)
    elif isinstance(other, np.ndarray):
        local = other.ravel(order="K")[:nelems]      # a view, in memory order (C or Fortran)
        lkey, temporary = transports.local_key(local)
        try:
            transports.copy_span(fn, pe, to_peer, offset, address, lkey, nbytes)
        finally:
            if temporary is not None:
                transports.recent.release(temporary)
    else:
        staging = transports.gpu_path.staging

        def piece(start: int, buffer: int, length: int) -> None:
            transports.copy_span(fn, pe, to_peer, offset + start, buffer, staging.lkey, length)
        with staging.lock:     # a put fills the buffer from the GPU, then sends it; a get the reverse
            staging.through(address, nbytes, heap.stream, not to_peer, piece, fn)
