"""Host-initiated RMA: ``put``, ``get``, ``put_nbi``, ``get_nbi``, the strided ``iput``/``iget``
and blocked ``ibput``/``ibget`` (OpenSHMEM 1.6), ``flush``, ``quiet`` and ``pe_quiet``.

On the simulator backend ``put``/``get`` are synchronous copies between mapped heaps
(memory speed), or requests to the NIC for PEs on other nodes that complete before the
call returns; ``stream`` is accepted for source compatibility. The ``_nbi`` forms are the
same copies, except that through the NIC they return once the request is posted and
complete at ``quiet``. On the cuda backend they are copy-engine copies between the
IPC-mapped heaps, queued on ``stream`` (see ``_gpu_ops``); with no stream, ``put``/``get``
are complete on return and the ``_nbi`` forms at ``quiet``; to a PE on another node they
wait for the stream, then go through the NIC and are complete on return
(``pgas/cuda/nic/_remote_rma.py``). Every call also takes
nvshmem4py's keyword names (``dst=``, ``remote_pe=``; ``_keywords``).
"""
from __future__ import annotations

import numpy as np

from ...core._checks import check_dtypes_match, check_fits, check_pe, check_same_order, contiguous_orders, flat
from ...core._checks import check_contiguous, check_nonnegative
from ...core._device_errors import device_error
from ...core._errors import PgasValueError
from ...runtime._arrays import as_ndarray
from ...runtime._state import Runtime, runtime
from ._keywords import NOT_GIVEN, nvshmem4py_keywords, one_of

__all__ = ["put", "get", "put_nbi", "get_nbi", "iput", "iget", "ibput", "ibget", "flush", "quiet", "pe_quiet"]


def _copy(rt: Runtime, pe: int, to_peer: bool, sym, other, nelems: int, stream, fn: str, nbi: bool,
          order: str = "C", tickets: list | None = None, lane: int = 0) -> None:
    """Copy the first ``nelems`` elements, in memory order ``order`` ("C" or "F"), between
    contiguous ``other`` (local) and PE ``pe``'s copy of contiguous symmetric ``sym``: into
    it when ``to_peer``, else out of it. ``nbi``: complete at ``quiet`` rather than on return
    (where the path allows it); ``tickets``, ``lane``: a context's list for its NIC
    requests, and its queue pairs (``Transports.copy``)."""
    if rt.on_gpu:   # by address and byte count: the memory order is the arrays' own
        from .. import _gpu_ops
        _gpu_ops.copy_with(pe, to_peer, sym, other, nelems, stream, fn, nbi)
    else:
        rt.transports.copy(fn, pe, to_peer, flat(sym, order), 1, flat(other, order), 1, 0, nelems, nbi, tickets,
                           lane)


def _local_source(rt: Runtime, fn: str, src, dest):
    """``src`` ready to copy into ``dest`` element by element in memory order, and that
    order. A host (numpy) ``src`` outside the symmetric heap may have any layout: unless it
    is contiguous in ``dest``'s memory order it is copied into that order first (so arrays
    of one shape copy element for element); a symmetric or device one must be contiguous
    in ``dest``'s order."""
    if isinstance(src, np.ndarray) and not set(contiguous_orders(dest)) & set(contiguous_orders(src)) \
            and not _in_heap(rt, src):
        src = np.asfortranarray(src) if contiguous_orders(dest) == "F" else np.ascontiguousarray(src)
    return src, check_same_order(fn, dest, src)


def _in_heap(rt: Runtime, arr: np.ndarray) -> bool:
    """True when ``arr``'s element 0 lies in this PE's heap (the simulator's symmetric arrays)."""
    base = rt.heap.bases[rt.my_pe]
    return base <= arr.__array_interface__["data"][0] < base + rt.heap.size


def _put(fn: str, dest, src, pe, stream, nbi: bool, tickets: list | None = None, lane: int = 0) -> None:
    rt = runtime(fn)
    pe = check_pe(fn, pe, rt.n_pes)
    d, s = as_ndarray(dest, fn, "dest"), as_ndarray(src, fn, "src")
    check_dtypes_match(fn, d, s)
    s, order = _local_source(rt, fn, s, d)
    check_fits(fn, "dest", d, s.size, "put copies src.size elements")
    rt.symmetric_offset(d, fn, "dest")
    _copy(rt, pe, True, d, s, s.size, stream, fn, nbi, order, tickets, lane)


def _get(fn: str, dest, src, pe, stream, nbi: bool, tickets: list | None = None, lane: int = 0) -> None:
    rt = runtime(fn)
    pe = check_pe(fn, pe, rt.n_pes)
    d, s = as_ndarray(dest, fn, "dest"), as_ndarray(src, fn, "src")
    check_dtypes_match(fn, d, s)
    order = check_same_order(fn, d, s)
    if isinstance(d, np.ndarray) and not d.flags.writeable:
        raise PgasValueError(f"{fn}: dest must be writable, got a read-only numpy array")
    check_fits(fn, "src", s, d.size, "get copies dest.size elements")
    rt.symmetric_offset(s, fn, "src")
    _copy(rt, pe, False, s, d, d.size, stream, fn, nbi, order, tickets, lane)


def _named(fn: str, dest, dst, src, pe, remote_pe) -> tuple:
    """(dest, src, pe) of a ``put`` or ``get``, each given under pgas's name or nvshmem4py's."""
    return one_of(fn, "dest", dest, "dst", dst), one_of(fn, "src", src), one_of(fn, "pe", pe, "remote_pe", remote_pe)


def put(dest=NOT_GIVEN, src=NOT_GIVEN, pe=NOT_GIVEN, stream=None, dst=NOT_GIVEN, remote_pe=NOT_GIVEN) -> None:
    """put(dest, src, pe, stream=None)

    Copy ``src.size`` elements of ``src`` into PE ``pe``'s copy of symmetric ``dest``,
    element by element in ``dest``'s memory order (C, or Fortran for ``order="F"`` arrays).

    Parameters
    ----------
    dest : symmetric array
        C- or Fortran-contiguous, with at least ``src.size`` elements of ``src``'s dtype
        (``dst=`` accepted, nvshmem4py's name).
    src : array
        Local: numpy (any layout: unless contiguous in ``dest``'s memory order, copied into
        it first; one registered with ``register_buffer`` and in that order is used in
        place), or a symmetric or device array contiguous in ``dest``'s memory order
        (PgasValueError for a C-ordered one with a Fortran-ordered ``dest``, and the
        reverse; 1-D arrays are both).
    pe : int
        The target PE, in ``[0, n_pes())`` (``remote_pe=`` accepted).
    stream : optional
        cuda backend: ordered on this stream. Without one the copy is complete on return,
        as it always is on the simulator backend.
    """
    fn = "pgas.put"
    direct = runtime(fn).direct
    if direct is not None and stream is None and dst is NOT_GIVEN is remote_pe and direct.put(dest, src, pe):
        return
    _put(fn, *_named(fn, dest, dst, src, pe, remote_pe), stream, False)


def get(dest=NOT_GIVEN, src=NOT_GIVEN, pe=NOT_GIVEN, stream=None, dst=NOT_GIVEN, remote_pe=NOT_GIVEN) -> None:
    """get(dest, src, pe, stream=None)

    Copy ``dest.size`` elements of PE ``pe``'s copy of symmetric ``src`` into local ``dest``,
    element by element in their common memory order.

    Parameters
    ----------
    dest : array
        Local: numpy (maybe registered with ``register_buffer``) or symmetric, contiguous in
        the memory order of ``src`` (PgasValueError for a C-ordered one with a
        Fortran-ordered ``src``, and the reverse; 1-D arrays are both). ``dst=`` accepted.
    src : symmetric array
        C- or Fortran-contiguous, with at least ``dest.size`` elements of ``dest``'s dtype.
    pe : int
        The source PE (``remote_pe=`` accepted).
    stream : optional
        As for ``put``.
    """
    fn = "pgas.get"
    direct = runtime(fn).direct
    if direct is not None and stream is None and dst is NOT_GIVEN is remote_pe and direct.get(dest, src, pe):
        return
    _get(fn, *_named(fn, dest, dst, src, pe, remote_pe), stream, False)


@nvshmem4py_keywords("dst", "remote_pe")
def put_nbi(dest, src, pe: int, stream=None) -> None:
    """put_nbi(dest, src, pe, stream=None)

    ``put`` that returns once the copy is issued: it is complete, and ``src`` reusable,
    after ``quiet`` (or ``flush`` for ``src``). Arguments as for ``put``.

    Through the NIC (a PE on another node, simulator backend) the request is posted and
    the call returns; when ``src`` lies outside the symmetric heap (a numpy array) and was
    not registered (``register_buffer``), the NIC can reach it only while the call lasts,
    so the copy completes before it returns. On
    the load/store path it is a copy issued at the call. On the cuda backend the copy is
    queued on ``stream`` (without one: on the PE's internal stream) and not waited for;
    to a PE on another node it is complete on return, as ``put``.
    """
    _put("pgas.put_nbi", dest, src, pe, stream, True)


@nvshmem4py_keywords("dst", "remote_pe")
def get_nbi(dest, src, pe: int, stream=None) -> None:
    """get_nbi(dest, src, pe, stream=None)

    ``get`` that returns once the copy is issued: the data is in ``dest`` after ``quiet``.
    Arguments as for ``get``. Through the NIC a ``dest`` outside the symmetric heap (a
    numpy array) that was not registered (``register_buffer``) is filled before the call
    returns (see ``put_nbi``); a registered one is filled by ``quiet``.
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
        from .. import _gpu_ops
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
        from .. import _gpu_ops
        _gpu_ops.quiet(stream, "pgas.quiet")
    elif rt.transports.quieted:     # (else every copy was complete on return)
        rt.transports.quiet("pgas.quiet")


def check_pes(fn: str, pes, n_pes: int) -> list[int]:
    """``pes`` (one world PE or a sequence of them) as a list of ints in ``[0, n_pes)``."""
    if isinstance(pes, (bool, np.bool_)):
        raise PgasValueError(f"{fn}: pes must be a PE number or a sequence of them, got {pes!r}")
    if isinstance(pes, (int, np.integer)):
        return [check_pe(fn, pes, n_pes, "pes")]
    try:
        items = list(pes)
    except TypeError:
        raise PgasValueError(f"{fn}: pes must be a PE number or a sequence of them, got {pes!r}") from None
    return [check_pe(fn, pe, n_pes, f"pes[{i}]") for i, pe in enumerate(items)]


def check_blocks(fn: str, arr, what: str, stride_name: str, stride, blocksize: int, nblocks: int) -> int:
    """The checks of a blocked strided copy on one side (the texts of the device's checks):
    ``stride`` a positive integer, at least ``blocksize`` (blocks may not overlap), and the
    last block inside ``arr``. Returns the stride as an int."""
    if isinstance(stride, (bool, np.bool_)) or not isinstance(stride, (int, np.integer)) or stride < 1:
        raise PgasValueError(f"{fn}: {stride_name} must be a positive integer (elements between block starts), "
                             f"got {stride!r}")
    if stride < blocksize:
        raise device_error("SIZE", fn, f"each {what} block", f"{stride_name} must be >= blocksize (blocks may not "
                           "overlap)", a=stride, b=blocksize)
    need = (nblocks - 1) * stride + blocksize if nblocks and blocksize else 0
    if need > arr.size:
        raise device_error("SIZE", fn, what, f"the last block (at (nblocks - 1) * {stride_name}, blocksize long) "
                           f"must end inside {what}", a=arr.size, b=need)
    return int(stride)


def _blocks(fn: str, to_peer: bool, dest, src, dst_stride, src_stride, blocksize, nblocks, pe, stream) -> None:
    """``nblocks`` blocks of ``blocksize`` elements, block ``b`` from ``b*src_stride`` of
    ``src`` to ``b*dst_stride`` of ``dest``; the symmetric side is PE ``pe``'s ``dest``
    (``to_peer``) or ``src``. Complete on return (on cuda without a stream)."""
    rt = runtime(fn)
    pe = check_pe(fn, pe, rt.n_pes)
    d, s = as_ndarray(dest, fn, "dest"), as_ndarray(src, fn, "src")
    check_dtypes_match(fn, d, s)
    blocksize = check_nonnegative(fn, "blocksize", blocksize)
    nblocks = check_nonnegative(fn, "nblocks", nblocks)
    check_contiguous(fn, "dest", d)
    if to_peer:
        if isinstance(s, np.ndarray):       # a host src may have any layout (taken in C order)
            s = np.ascontiguousarray(s)
        check_contiguous(fn, "src", s)
    else:
        check_contiguous(fn, "src", s)
        if isinstance(d, np.ndarray) and not d.flags.writeable:
            raise PgasValueError(f"{fn}: dest must be writable, got a read-only numpy array")
    d, s = d.reshape(-1), s.reshape(-1)
    dst_stride = check_blocks(fn, d, "dest", "dst_stride", dst_stride, blocksize, nblocks)
    src_stride = check_blocks(fn, s, "src", "src_stride", src_stride, blocksize, nblocks)
    sym, sym_stride, other, other_stride = (d, dst_stride, s, src_stride) if to_peer else (s, src_stride, d, dst_stride)
    rt.symmetric_offset(sym, fn, "dest" if to_peer else "src")
    if not nblocks or not blocksize:
        return
    if rt.on_gpu:
        from .. import _gpu_ops
        for b in range(nblocks):      # one copy per block, the last one waited for (without a stream)
            _gpu_ops.copy_with(pe, to_peer, sym[b * sym_stride:b * sym_stride + blocksize],
                               other[b * other_stride:b * other_stride + blocksize], blocksize, stream, fn,
                               nbi=b < nblocks - 1)
    elif blocksize == 1:              # iput/iget: one strided copy
        rt.transports.copy(fn, pe, to_peer, sym, sym_stride, other, other_stride, 0, nblocks, False)
    else:
        for b in range(nblocks):
            rt.transports.copy(fn, pe, to_peer, sym[b * sym_stride:], 1, other[b * other_stride:], 1, 0, blocksize,
                               False)


_STRIDED_PARAMETERS = """
    Parameters
    ----------
    dest : array
        {dest} (``dst=`` accepted, nvshmem4py's name).
    src : array
        {src}
    dst_stride, src_stride : int
        Elements between the starts of consecutive {unit}s in ``dest`` and ``src`` (>= 1{more}).
{count}    pe : int
        The {role} PE (``remote_pe=`` accepted).
    stream : optional
        cuda backend: ordered on this stream; without one the copy is complete on return,
        as it always is on the simulator backend.

    Raises
    ------
    PgasValueError
        Dtypes that differ, a stride below 1{below}, a negative count, or {a_unit} that
        would end past the end of ``dest`` or ``src`` (the message names the argument).
"""
_PUT_SIDES = {"dest": "Symmetric, C-contiguous: PE ``pe``'s copy is written",
              "src": "Local: numpy (any layout; taken flattened in C order) or symmetric (C-contiguous).",
              "role": "target"}
_GET_SIDES = {"dest": "Local, C-contiguous and writable: numpy or symmetric",
              "src": "Symmetric, C-contiguous: PE ``pe``'s copy is read.", "role": "source"}
_ELEMENTS = {"unit": "element", "more": "", "below": "", "a_unit": "an element",
             "count": "    nelems : int\n        How many elements.\n"}
_BLOCKS = {"unit": "block", "more": " and >= ``blocksize``", "below": " or below ``blocksize``", "a_unit": "a block",
           "count": "    blocksize : int\n        Elements in each block (contiguous).\n"
                    "    nblocks : int\n        How many blocks.\n"}


@nvshmem4py_keywords("dst", "remote_pe")
def iput(dest, src, dst_stride: int, src_stride: int, nelems: int, pe: int, stream=None) -> None:
    """iput(dest, src, dst_stride, src_stride, nelems, pe, stream=None)

    Strided put: element ``i`` (``i < nelems``) of ``src`` at ``i*src_stride`` goes to
    ``i*dst_stride`` of PE ``pe``'s ``dest``; strides count elements of the flattened arrays.
    Through the NIC each element is one request (as NVSHMEM's iput over InfiniBand).
    """
    _blocks("pgas.iput", True, dest, src, dst_stride, src_stride, 1, nelems, pe, stream)


@nvshmem4py_keywords("dst", "remote_pe")
def iget(dest, src, dst_stride: int, src_stride: int, nelems: int, pe: int, stream=None) -> None:
    """iget(dest, src, dst_stride, src_stride, nelems, pe, stream=None)

    Strided get: element ``i*src_stride`` of PE ``pe``'s ``src`` goes to ``i*dst_stride`` of
    local ``dest``, for ``i < nelems``.
    """
    _blocks("pgas.iget", False, dest, src, dst_stride, src_stride, 1, nelems, pe, stream)


@nvshmem4py_keywords("dst", "remote_pe")
def ibput(dest, src, dst_stride: int, src_stride: int, blocksize: int, nblocks: int, pe: int, stream=None) -> None:
    """ibput(dest, src, dst_stride, src_stride, blocksize, nblocks, pe, stream=None)

    Blocked strided put (OpenSHMEM 1.6 ``shmem_ibput``): ``nblocks`` blocks of ``blocksize``
    contiguous elements; block ``b`` starts at element ``b*src_stride`` of ``src`` and goes
    to element ``b*dst_stride`` of PE ``pe``'s ``dest``. Through the NIC, one request per block.
    """
    _blocks("pgas.ibput", True, dest, src, dst_stride, src_stride, blocksize, nblocks, pe, stream)


@nvshmem4py_keywords("dst", "remote_pe")
def ibget(dest, src, dst_stride: int, src_stride: int, blocksize: int, nblocks: int, pe: int, stream=None) -> None:
    """ibget(dest, src, dst_stride, src_stride, blocksize, nblocks, pe, stream=None)

    Blocked strided get (OpenSHMEM 1.6 ``shmem_ibget``): block ``b`` (``blocksize`` contiguous
    elements at ``b*src_stride`` of PE ``pe``'s ``src``) goes to ``b*dst_stride`` of local ``dest``.
    """
    _blocks("pgas.ibget", False, dest, src, dst_stride, src_stride, blocksize, nblocks, pe, stream)


iput.__doc__ += _STRIDED_PARAMETERS.format(**_PUT_SIDES, **_ELEMENTS)
iget.__doc__ += _STRIDED_PARAMETERS.format(**_GET_SIDES, **_ELEMENTS)
ibput.__doc__ += _STRIDED_PARAMETERS.format(**_PUT_SIDES, **_BLOCKS)
ibget.__doc__ += _STRIDED_PARAMETERS.format(**_GET_SIDES, **_BLOCKS)


def pe_quiet(pes, stream=None) -> None:
    """pe_quiet(pes, stream=None)

    Complete the RMA, atomics and signals this PE issued from the host to the PEs ``pes``
    (OpenSHMEM 1.6 ``shmem_pe_quiet(target_pes, npes)``); operations to other PEs may
    stay in flight.

    Stores to PEs of this node are complete as they are issued. Through the NIC it waits
    for the requests to ``pes`` only (and lands the answers of fetching ``_nbi`` atomics
    sent to them); a refusal of an earlier unwaited request to any PE is raised by the
    first completion call after it, this one included. On cuda one stream holds the
    copies to every PE: there it completes everything, as ``quiet`` does.

    Parameters
    ----------
    pes : int or sequence of int
        World PE numbers, each in ``[0, n_pes())`` (repeats allowed; empty: nothing to do).
    stream : optional
        cuda backend: as for ``quiet``.

    Raises
    ------
    PgasValueError
        ``pes`` is not a PE number or a sequence of them, or one is out of range.
    """
    fn = "pgas.pe_quiet"
    rt = runtime(fn)
    targets = frozenset(check_pes(fn, pes, rt.n_pes))
    if rt.on_gpu:
        from .. import _gpu_ops
        _gpu_ops.quiet(stream, fn)
    elif targets:
        rt.transports.quiet(fn, targets)
