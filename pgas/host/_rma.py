"""Host-initiated RMA: ``put``, ``get``, ``put_nbi``, ``get_nbi``, ``flush``, ``quiet``.

On the simulator backend ``put``/``get`` are synchronous copies between mapped heaps
(memory speed), or requests to the NIC for PEs on other nodes that complete before the
call returns; ``stream`` is accepted for source compatibility. The ``_nbi`` forms are the
same copies, except that through the NIC they return once the request is posted and
complete at ``quiet``. On the cuda backend they are copy-engine copies between the
IPC-mapped heaps, queued on ``stream`` (see ``_gpu_ops``); with no stream, ``put``/``get``
are complete on return and the ``_nbi`` forms at ``quiet``. Every call also takes
nvshmem4py's keyword names (``dst=``, ``remote_pe=``; ``_keywords``).
"""
from __future__ import annotations

import numpy as np

from ..core._checks import check_contiguous, check_dtypes_match, check_fits, check_pe
from ..core._errors import PgasValueError
from ..runtime._arrays import as_ndarray
from ..runtime._state import Runtime, runtime
from ._keywords import nvshmem4py_keywords

__all__ = ["put", "get", "put_nbi", "get_nbi", "flush", "quiet"]


def _copy(rt: Runtime, pe: int, to_peer: bool, sym, other, nelems: int, stream, fn: str, nbi: bool) -> None:
    """Copy the first ``nelems`` elements between contiguous ``other`` (local) and PE ``pe``'s
    copy of contiguous symmetric ``sym``: into it when ``to_peer``, else out of it.
    ``nbi``: complete at ``quiet`` rather than on return (where the path allows it)."""
    if rt.on_gpu:
        from . import _gpu_ops
        theirs = rt.heap.view_on(pe, sym, fn, "dest" if to_peer else "src")
        _gpu_ops.copy(*((theirs, other) if to_peer else (other, theirs)), nelems, stream, fn, nbi=nbi)
    else:
        rt.transports.copy(fn, pe, to_peer, sym.reshape(-1), 1, other.reshape(-1), 1, 0, nelems, nbi)


def _contiguous_source(fn: str, src):
    """A host ``src`` may have any layout (copied to a contiguous one); a device one may not."""
    if isinstance(src, np.ndarray):
        return np.ascontiguousarray(src)
    check_contiguous(fn, "src", src)
    return src


def _put(fn: str, dest, src, pe, stream, nbi: bool) -> None:
    rt = runtime(fn)
    pe = check_pe(fn, pe, rt.n_pes)
    d, s = as_ndarray(dest, fn, "dest"), as_ndarray(src, fn, "src")
    check_dtypes_match(fn, d, s)
    check_contiguous(fn, "dest", d)
    check_fits(fn, "dest", d, s.size, "put copies src.size elements")
    rt.symmetric_offset(d, fn, "dest")
    _copy(rt, pe, True, d, _contiguous_source(fn, s), s.size, stream, fn, nbi)


def _get(fn: str, dest, src, pe, stream, nbi: bool) -> None:
    rt = runtime(fn)
    pe = check_pe(fn, pe, rt.n_pes)
    d, s = as_ndarray(dest, fn, "dest"), as_ndarray(src, fn, "src")
    check_dtypes_match(fn, d, s)
    check_contiguous(fn, "dest", d)
    if isinstance(d, np.ndarray) and not d.flags.writeable:
        raise PgasValueError(f"{fn}: dest must be writable, got a read-only numpy array")
    check_contiguous(fn, "src", s)
    check_fits(fn, "src", s, d.size, "get copies dest.size elements")
    rt.symmetric_offset(s, fn, "src")
    _copy(rt, pe, False, s, d, d.size, stream, fn, nbi)


@nvshmem4py_keywords("dst", "remote_pe")
def put(dest, src, pe: int, stream=None) -> None:
    """put(dest, src, pe, stream=None)

    Copy ``src.size`` elements of ``src`` into PE ``pe``'s copy of symmetric ``dest``.

    Parameters
    ----------
    dest : symmetric array
        C-contiguous, with at least ``src.size`` elements of ``src``'s dtype (``dst=``
        accepted, nvshmem4py's name).
    src : array
        Local: numpy (any layout) or symmetric (C-contiguous).
    pe : int
        The target PE, in ``[0, n_pes())`` (``remote_pe=`` accepted).
    stream : optional
        cuda backend: ordered on this stream. Without one the copy is complete on return,
        as it always is on the simulator backend.
    """
    direct = runtime("pgas.put").direct
    if direct is None or not direct.put(dest, src, pe):
        _put("pgas.put", dest, src, pe, stream, False)


@nvshmem4py_keywords("dst", "remote_pe")
def get(dest, src, pe: int, stream=None) -> None:
    """get(dest, src, pe, stream=None)

    Copy ``dest.size`` elements of PE ``pe``'s copy of symmetric ``src`` into local ``dest``.

    Parameters
    ----------
    dest : array
        Local, C-contiguous: numpy or symmetric (``dst=`` accepted).
    src : symmetric array
        C-contiguous, with at least ``dest.size`` elements of ``dest``'s dtype.
    pe : int
        The source PE (``remote_pe=`` accepted).
    stream : optional
        As for ``put``.
    """
    direct = runtime("pgas.get").direct
    if direct is None or not direct.get(dest, src, pe):
        _get("pgas.get", dest, src, pe, stream, False)


@nvshmem4py_keywords("dst", "remote_pe")
def put_nbi(dest, src, pe: int, stream=None) -> None:
    """put_nbi(dest, src, pe, stream=None)

    ``put`` that returns once the copy is issued: it is complete, and ``src`` reusable,
    after ``quiet`` (or ``flush`` for ``src``). Arguments as for ``put``.

    Through the NIC (a PE on another node, simulator backend) the request is posted and
    the call returns; when ``src`` lies outside the symmetric heap (a numpy array), the NIC
    can reach it only while the call lasts, so the copy completes before it returns. On
    the load/store path it is a copy issued at the call. On the cuda backend the copy is
    queued on ``stream`` (without one: on the PE's internal stream) and not waited for.
    """
    _put("pgas.put_nbi", dest, src, pe, stream, True)


@nvshmem4py_keywords("dst", "remote_pe")
def get_nbi(dest, src, pe: int, stream=None) -> None:
    """get_nbi(dest, src, pe, stream=None)

    ``get`` that returns once the copy is issued: the data is in ``dest`` after ``quiet``.
    Arguments as for ``get``. Through the NIC a ``dest`` outside the symmetric heap (a
    numpy array) is filled before the call returns (see ``put_nbi``).
    """
    _get("pgas.get_nbi", dest, src, pe, stream, True)


def flush(stream=None) -> None:
    """flush(stream=None)

    Wait until the sources of this PE's earlier ``put_nbi`` (and ``put_signal_nbi``) calls
    may be reused. Unlike ``quiet`` it promises nothing about visibility at the target.

    Through the NIC a write's source is free once its completion comes back (as on an
    InfiniBand RC queue pair), so on the simulator backend this waits for the same
    completions ``quiet`` does and raises the first refused request. On the cuda backend
    it waits until the copies queued on ``stream`` have run (without a stream: all of this
    PE's GPU work), so that the host may overwrite their sources.
    """
    fn = "pgas.flush"
    rt = runtime(fn)
    if rt.on_gpu:
        from . import _gpu_ops
        _gpu_ops.flush(stream, fn)
    else:
        rt.transports.quiet(fn)


def quiet(stream=None) -> None:
    """quiet(stream=None)

    Complete every RMA this PE issued from the host.

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
