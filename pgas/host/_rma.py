"""Host-initiated RMA: ``put``, ``get``, ``quiet``.

On the simulator backend these are synchronous copies between mapped heaps (memory
speed), and ``stream`` is accepted for source compatibility. On the cuda backend they
are copy-engine copies between the IPC-mapped heaps, queued on ``stream`` (see
``_gpu_ops``); with no stream they are complete on return.
"""
from __future__ import annotations

import numpy as np

from .._checks import check_contiguous, check_dtypes_match, check_fits, check_pe
from ._memory import as_ndarray
from ._runtime import Runtime, runtime

__all__ = ["put", "get", "quiet"]


def _copy(rt: Runtime, pe: int, to_peer: bool, sym, other, nelems: int, stream, fn: str) -> None:
    """Copy the first ``nelems`` elements between contiguous ``other`` (local) and PE ``pe``'s
    copy of contiguous symmetric ``sym``: into it when ``to_peer``, else out of it."""
    if rt.on_gpu:
        from . import _gpu_ops
        theirs = rt.heap.view_on(pe, sym, fn, "dest" if to_peer else "src")
        _gpu_ops.copy(*((theirs, other) if to_peer else (other, theirs)), nelems, stream, fn)
    else:
        rt.transports.copy(fn, pe, to_peer, sym.reshape(-1), 1, other.reshape(-1), 1, 0, nelems, False)


def _contiguous_source(fn: str, src):
    """A host ``src`` may have any layout (copied to a contiguous one); a device one may not."""
    if isinstance(src, np.ndarray):
        return np.ascontiguousarray(src)
    check_contiguous(fn, "src", src)
    return src


def put(dest, src, pe: int, stream=None) -> None:
    """Copy ``src.size`` elements of ``src`` into PE ``pe``'s copy of symmetric ``dest``.

    ``src`` is a local array (numpy or symmetric); ``dest`` must hold at least as many
    elements, with the same dtype. Ordered on ``stream`` on the cuda backend; complete
    on return when no stream is given (and always on the simulator backend).
    """
    fn = "pgas.put"
    rt = runtime(fn)
    pe = check_pe(fn, pe, rt.n_pes)
    d, s = as_ndarray(dest, fn, "dest"), as_ndarray(src, fn, "src")
    check_dtypes_match(fn, d, s)
    check_contiguous(fn, "dest", d)
    check_fits(fn, "dest", d, s.size, "put copies src.size elements")
    rt.heap.offset_of(d, fn, "dest")
    _copy(rt, pe, True, d, _contiguous_source(fn, s), s.size, stream, fn)


def get(dest, src, pe: int, stream=None) -> None:
    """Copy ``dest.size`` elements of PE ``pe``'s copy of symmetric ``src`` into local ``dest``."""
    fn = "pgas.get"
    rt = runtime(fn)
    pe = check_pe(fn, pe, rt.n_pes)
    d, s = as_ndarray(dest, fn, "dest"), as_ndarray(src, fn, "src")
    check_dtypes_match(fn, d, s)
    check_contiguous(fn, "dest", d)
    check_contiguous(fn, "src", s)
    check_fits(fn, "src", s, d.size, "get copies dest.size elements")
    rt.heap.offset_of(s, fn, "src")
    _copy(rt, pe, False, s, d, d.size, stream, fn)


def quiet(stream=None) -> None:
    """Complete every RMA this PE issued from the host.

    On the cuda backend: everything queued on ``stream`` (with a fence at system scope),
    or all of this PE's GPU work when no stream is given. On the simulator backend: every
    operation this PE's threads issued to PEs on other nodes (through the NIC).
    """
    rt = runtime("pgas.quiet")
    if rt.on_gpu:
        from . import _gpu_ops
        _gpu_ops.quiet(stream, "pgas.quiet")
    else:
        rt.transports.quiet("pgas.quiet")
