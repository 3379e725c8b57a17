"""The simulator's primitive layer: what the device API needs that differs per backend.

Device functions (``_rma.py``, ``_sync.py``, ...) are written once on top of these
names, in a style numba can compile for the cuda backend (integers, arrays, calls; no
Python objects). In the simulator they run as plain Python inside numba's simulated
threads: arrays are flat numpy views of the mapped heaps, copies and reductions are
vectorized, ordering comes from real CPU acquire/release operations, and every wait
loop yields (a spinning simulated thread would otherwise starve the thread it waits
for) and gives up after PGAS_TIMEOUT with a message naming what it waited for.
"""
from __future__ import annotations

import functools
import threading

import numpy as np

from ..core.native import _cpu_atomics
from ..core._checks import (check_contiguous, check_copy, check_dtypes_match, check_nonnegative, check_pe, check_root,
                            check_sig_op, check_signal)
from ..core._codes import BLOCK, DTYPE_SETS, PRIMITIVES, REDUCE_OPS, RMW_NAMES, THREAD, WARP, reduce_code
from ..core._device_errors import LOCK_DTYPE, arrivals_waited_for, describe, device_error, ivar_waited_for
from ..core._errors import PgasError, PgasTimeoutError, PgasValueError
from ..core._reductions import identity, reduce_into, reduction_ufunc
from ..core._waiting import Wait, check_cmp, compare, wait_for_value as _wait_for_value
from .. import check
from ..runtime import _state as _runtime
from ..runtime._arrays import as_ndarray
from ..runtime._team_table import team_of
from ._multicast import MULTICAST_WHY, MulticastArray

__all__ = list(PRIMITIVES)

WARP_SIZE = 32
_current_thread = threading.current_thread
# A device wait's pauses grow from a yield to this (``Wait``'s backoff): waits that only
# yielded kept the cores busy while the message they waited for needed one (a device
# ping-pong between two emulated nodes took 8-16 ms a round trip; docs/simulator.md).
_WAIT_BACKOFF_S = 100e-6


# The PE's runtime, found without a context argument: a device function's wrapper
# (``device_function``) has checked that it runs inside a kernel (once per public call:
# the check was a tenth of a simulated ``p`` + ``quiet`` when each primitive made it)
runtime = _runtime.runtime


def jit(function):
    """How a shared device helper is compiled: in the simulator it stays plain Python."""
    return function


jit_array = jit


def name(text: str) -> str:
    """A device function's name, as its helpers receive it."""
    return text


def my_pe(fn: str) -> int:
    return runtime(fn).my_pe


def n_pes(fn: str) -> int:
    return runtime(fn).n_pes


def _team(team, fn: str):
    return team_of(runtime(fn), team, fn)


def check_team(fn: str, team) -> None:
    _team(team, fn)


def team_rank(team, fn: str) -> int:
    """This PE's rank in ``team``."""
    return _team(team, fn).my_index


def team_size(team, fn: str) -> int:
    return _team(team, fn).size


def team_pe(team, rank: int, fn: str) -> int:
    """The world PE of team rank ``rank``."""
    return _team(team, fn).pes[rank]


def team_index_of(team, pe: int, fn: str) -> int:
    """The team rank of world PE ``pe``, or -1."""
    return _team(team, fn).index_of(pe)


def _flat(data: np.ndarray, fn: str, what: str) -> np.ndarray:
    """``data`` (C-contiguous) as 1-D: itself where it is (the same object call after call:
    the heap knows its offset, ``SymmetricHeap.offset_of``)."""
    check_contiguous(fn, what, data)
    return data if data.ndim == 1 else data.reshape(-1)


def _symmetric(arr, fn: str, what: str) -> np.ndarray:
    """A symmetric kernel argument as this PE's numpy array (checked symmetric)."""
    rt = runtime(fn)
    data = as_ndarray(arr, fn, what)
    rt.symmetric_offset(data, fn, what)
    return data


def local(arr, fn: str, what: str) -> np.ndarray:
    """This PE's copy of a symmetric kernel argument, flat (checked symmetric)."""
    return _flat(_symmetric(arr, fn, what), fn, what)


def _peer_copy(arr, pe, fn: str) -> tuple[np.ndarray, np.ndarray | None]:
    """(this PE's ``arr``, PE ``pe``'s copy of it as mapped in this process, or None where
    ``pe`` is on another node)."""
    data = _symmetric(arr, fn, "arr")
    rt = runtime(fn)
    pe = check_pe(fn, pe, rt.n_pes)
    return data, rt.heap.view_on(pe, data, fn, "arr") if rt.heap.reachable(pe) else None


def peer_address(arr, pe, fn: str) -> np.uint64:
    """The address of PE ``pe``'s copy of ``arr`` in this process (its mapping of that PE's
    heap, where ``peer_view``'s array lies), or 0 where ``pe`` is on another node."""
    view = _peer_copy(arr, pe, fn)[1]
    return np.uint64(0 if view is None else view.__array_interface__["data"][0])


def peer_view(arr, pe, fn: str) -> np.ndarray:
    """PE ``pe``'s copy of ``arr`` (same shape and strides) in this process's mapping of its
    heap; where ``pe`` is on another node an array of the same dtype and ndim, every extent 0."""
    data, view = _peer_copy(arr, pe, fn)
    return np.empty((0,) * data.ndim, data.dtype) if view is None else view


def multicast_view(arr, team, fn: str) -> MulticastArray:
    """``arr`` of every member of ``team`` as one array whose stores reach them all; a member
    on another node is refused (UNREACHABLE)."""
    copies = []
    for rank in range(team_size(team, fn)):
        pe = team_pe(team, rank, fn)
        view = _peer_copy(arr, pe, fn)[1]
        if view is None:
            raise device_error("UNREACHABLE", fn, "", MULTICAST_WHY, a=pe)
        copies.append(view)
    return MulticastArray(copies, fn)


def plain(arr, fn: str, what: str) -> np.ndarray:
    """Any array argument (symmetric or not), flat."""
    return _flat(as_ndarray(arr, fn, what), fn, what)


def plain_or_none(arr, fn: str, what: str) -> np.ndarray | None:
    """An optional array argument: None, or the array flat (``plain``)."""
    return None if arr is None else plain(arr, fn, what)


def team_arrays(fn: str, team, dest, src) -> tuple:
    """A collective's arguments checked: ``team`` live, ``dest`` and ``src`` this PE's
    symmetric arrays (flat) of one dtype."""
    check_team(fn, team)
    d, s = local(dest, fn, "dest"), local(src, fn, "src")
    check_dtypes_match(fn, d, s)
    return d, s


def part(arr: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """``arr[lo:hi]`` (a view)."""
    return arr[lo:hi]


def barrier_words(team, fn: str) -> np.ndarray:
    """``team``'s row of device barrier words: a flag per member rank, epoch last."""
    return runtime(fn).sync_words[_team(team, fn).handle]


def copy_strided(dst: np.ndarray, dst_stride: int, src: np.ndarray, src_stride: int,
                 nelems: int, rank: int, size: int) -> None:
    """Elements i = rank, rank+size, ... < nelems: dst[i*dst_stride] = src[i*src_stride] (flat arrays)."""
    if nelems == 0:
        return
    d = dst[:(nelems - 1) * dst_stride + 1:dst_stride]
    s = src[:(nelems - 1) * src_stride + 1:src_stride]
    d[rank::size] = s[rank::size]


def reduce_from_peers(fn: str, dst: np.ndarray, dst_lo: int, src, src_lo: int, count: int, team,
                      op: int, rank: int, size: int) -> None:
    """dst[dst_lo + i] = ``op`` over every member's src[src_lo + i], for this thread's share
    of i < count (``Transports.share``). The order is this PE's own value first, then the
    others in team-rank order: ``dst`` may be ``src`` (its values are read first)."""
    members = _team(team, fn)
    ufunc = reduction_ufunc(fn, REDUCE_OPS[op], dst.dtype, on_device=True)
    transports = runtime(fn).transports
    lo, piece = transports.share(fn, members.pes, count, rank, size)
    hi = lo + piece
    if hi <= lo:
        return
    mine = local(src, fn, "src")[src_lo + lo:src_lo + hi]
    order = [members.my_index] + [r for r in range(members.size) if r != members.my_index]
    shares = [transports.read(fn, members.pes[r], mine, "src") for r in order]
    reduce_into(dst[dst_lo + lo:dst_lo + hi], shares, ufunc)


def scan_to_peers(fn: str, dst: np.ndarray, src, lo: int, count: int, team, op: int, exclusive: bool,
                  rank: int, size: int) -> None:
    """Elements [lo, lo + count) of every member's ``dst``: the scan of those elements of
    the members' ``src`` with ``op``, folded in team-rank order (((s0 op s1) op s2) ...);
    ``exclusive``: of the members before it (team rank 0 gets op's identity), else up to
    and including it. This thread's share of the elements. Each member's ``src`` elements
    are read before its ``dst`` elements are written and no other caller touches those
    elements: ``dst`` may be ``src``."""
    members = _team(team, fn)
    ufunc = reduction_ufunc(fn, REDUCE_OPS[op], dst.dtype, on_device=True)
    transports = runtime(fn).transports
    first, piece = transports.share(fn, members.pes, count, rank, size)
    if piece <= 0:
        return
    part = slice(lo + first, lo + first + piece)
    theirs, mine = local(src, fn, "src")[part], dst[part]
    acc = np.full(piece, identity(REDUCE_OPS[op], dst.dtype), dst.dtype) if exclusive else None
    for q, pe in enumerate(members.pes):
        value = np.array(transports.read(fn, pe, theirs, "src"))    # a copy: dst may be src
        if exclusive:
            transports.copy(fn, pe, True, mine, 1, acc, 1, 0, piece, False)
        acc = value if q == 0 else ufunc(acc, value)
        if not exclusive:
            transports.copy(fn, pe, True, mine, 1, acc, 1, 0, piece, False)


# Other PEs: every access goes through the runtime's routing (pgas/transport/_routing.py) --------

def _transports_to(fn: str, pe):
    rt = runtime(fn)
    return rt.transports, check_pe(fn, pe, rt.n_pes)


def transfer(fn: str, to_peer: bool, pe, dst: np.ndarray, dst_stride: int, src: np.ndarray, src_stride: int,
             nelems: int, rank: int, size: int, nbi: bool) -> None:
    """This thread's share (``Transports.share``) of a strided copy of ``nelems`` elements
    between flat local arrays, one of them symmetric: ``to_peer``: local ``src`` into PE
    ``pe``'s ``dst``; else PE ``pe``'s ``src`` into local ``dst``. ``nbi``: complete at quiet."""
    transports, pe = _transports_to(fn, pe)
    first, count = transports.share(fn, (pe,), nelems, rank, size)
    if to_peer:
        transports.copy(fn, pe, True, dst, dst_stride, src, src_stride, first, count, nbi)
    else:
        transports.copy(fn, pe, False, src, src_stride, dst, dst_stride, first, count, nbi)


def remote_store(fn: str, arr: np.ndarray, pe, value, what: str) -> None:
    """PE ``pe``'s ``arr[0] = value``."""
    transports, pe = _transports_to(fn, pe)
    transports.store(fn, pe, arr, value, what)


def remote_load(fn: str, arr: np.ndarray, pe, what: str):
    transports, pe = _transports_to(fn, pe)
    return transports.load(fn, pe, arr, what, False)


def remote_rmw(fn: str, arr: np.ndarray, pe, op: int, value, what: str, fetch: bool):
    """Atomic read-modify-write (op: an RMW_* code) of PE ``pe``'s ``arr[0]``; the old value
    when ``fetch`` (else nothing; through the NIC, complete at quiet)."""
    transports, pe = _transports_to(fn, pe)
    return transports.rmw(fn, pe, arr, RMW_NAMES[op], value, what, fetch)


def remote_compare_swap(fn: str, arr: np.ndarray, pe, cond, value, what: str):
    transports, pe = _transports_to(fn, pe)
    return transports.compare_swap(fn, pe, arr, cond, value, what)


def remote_atomic_load(fn: str, arr: np.ndarray, pe, what: str):
    transports, pe = _transports_to(fn, pe)
    return transports.atomic_load(fn, pe, arr, what)


def quiet(fn: str) -> None:
    """Complete this PE's operations through the NIC, then a full fence."""
    runtime(fn).transports.quiet(fn)
    _cpu_atomics.fence()


def load_acquire(arr: np.ndarray, fn: str, what: str):
    return _cpu_atomics.load_acquire(arr, fn, what)


def fence(fn: str) -> None:
    """A full memory fence of this thread (seq_cst; the system scope on a GPU)."""
    runtime(fn)
    _cpu_atomics.fence()


def atomic_rmw(arr: np.ndarray, op: int, value, fn: str, what: str):
    """Atomic read-modify-write of element 0 (op: an RMW_* code); the old value."""
    return _cpu_atomics.rmw(arr, RMW_NAMES[op], value, fn, what)


def atomic_compare_swap(arr: np.ndarray, cond, value, fn: str, what: str):
    return _cpu_atomics.compare_swap(arr, cond, value, fn, what)


def wait_for_value(fn: str, word: np.ndarray, what: str, cmp, value):
    """Poll local ``word[0]`` (acquire) until ``word[0] <cmp> value`` (``value`` in the word's
    dtype, as on a GPU); returns the value seen."""
    target = cast_like(word[0], value)
    return _wait_for_value(fn, lambda: load_acquire(word, fn, what), what, cmp, target, runtime(fn).timeout,
                           _WAIT_BACKOFF_S)


def wait_for_arrivals(fn: str, team, words: np.ndarray, epoch) -> None:
    """Wait until every member's arrival flag in ``words`` has reached ``epoch``."""
    members = _team(team, fn)
    clock = wait_start(fn)
    for rank in range(members.size):
        while load_acquire(words[rank:rank + 1], fn, "barrier flag") < epoch:
            clock.pause(lambda: arrivals_waited_for([members.pes[r] for r in range(members.size) if words[r] < epoch],
                                                    members.handle))


def wait_start(fn: str) -> Wait:
    """The clock of one wait loop (``wait_pause``)."""
    return Wait(fn, runtime(fn).timeout, backoff_s=_WAIT_BACKOFF_S)


def wait_pause(fn: str, clock: Wait, ivars: np.ndarray, index: int, what: str, cmp, value) -> None:
    """Back off once in a wait on flat ``ivars``; past PGAS_TIMEOUT fail naming
    ``what[index] <cmp> value`` (the first included ivar not satisfied) and its value."""
    clock.pause(lambda: ivar_waited_for(what, index, cmp, value, load_acquire(ivars[index:], fn, what)))


def device_function(function):
    """Every public device function, in the simulator: errors also name the calling PE
    (numba's simulator adds the thread and block); under PGAS_CHECK=1 the calls the
    checker models are recorded."""
    public = f"pgas.device.{function.__name__}"
    if check.enabled() and check.MODELLED.match(function.__name__):
        function = check.watch("device", function.__name__, function)

    @functools.wraps(function)
    def called_on_a_pe(*args):
        try:
            _sim_thread(public)
            return function(*args)
        except PgasError as exc:
            rt = _runtime.current()
            pe = rt.my_pe if rt is not None else "?"
            raise type(exc)(f"{exc} [on PE {pe}]") from None
    return called_on_a_pe


# Cooperative groups -----------------------------------------------------------------

def _sim_thread(fn: str):
    thread = _current_thread()
    if not hasattr(thread, "syncthreads"):
        raise PgasError(f"{fn} is a device function: call it from a @cuda.jit kernel")
    return thread


def _block_size(thread) -> int:
    x, y, z = thread._manager._block_dim
    return x * y * z


def group_rank_and_size(scope: int, fn: str) -> tuple[int, int]:
    """This thread's rank in its thread / warp / block, and the group's size."""
    if scope == THREAD:
        return 0, 1
    thread = _sim_thread(fn)
    block = _block_size(thread)
    if scope == BLOCK:
        return thread.thread_id, block
    first = thread.thread_id // WARP_SIZE * WARP_SIZE
    return thread.thread_id - first, min(WARP_SIZE, block - first)


_warp_barriers_lock = threading.Lock()


def group_sync(scope: int, fn: str) -> None:
    """Wait until every thread of this thread's warp / block gets here."""
    if scope == THREAD:
        return
    thread = _sim_thread(fn)
    if scope == BLOCK:
        thread.syncthreads()
        return
    # The simulator has no syncwarp: one threading.Barrier per warp of the running block.
    warp, size = thread.thread_id // WARP_SIZE, group_rank_and_size(WARP, fn)[1]
    with _warp_barriers_lock:
        barriers = thread._manager.__dict__.setdefault("_pgas_warp_barriers", {})
        barrier = barriers.setdefault(warp, threading.Barrier(size))
    timeout = runtime(fn).timeout
    try:
        barrier.wait(timeout)
    except threading.BrokenBarrierError:
        raise PgasTimeoutError(
            f"{fn}: not every thread of warp {warp} reached the warp synchronization within "
            f"PGAS_TIMEOUT={timeout:g} s (all threads of the warp must call it)") from None


def check_not_empty(fn: str, what: str, arr: np.ndarray) -> None:
    if arr.size == 0:
        raise device_error("NOT_EMPTY", fn, what)



def cast_like(like, value):
    """``value`` converted to the dtype of numpy scalar ``like`` as the GPU converts it
    (integers wrap, floats truncate), so that comparisons agree between backends."""
    return np.asarray(value).astype(like.dtype)[()]


def check_dtype_set(fn: str, what: str, arr: np.ndarray, allowed: int) -> None:
    """``arr``'s dtype must be in DTYPE_SETS[allowed] (on a GPU, refused when the kernel compiles)."""
    if arr.dtype.name not in DTYPE_SETS[allowed]:
        raise PgasValueError(f"{fn}: {what} must have one of the dtypes {', '.join(DTYPE_SETS[allowed])}, "
                             f"got {arr.dtype}")


def check_lock(fn: str, lock: np.ndarray) -> None:
    """``lock`` must be int64 (on a GPU, refused when the kernel compiles)."""
    if lock.dtype != np.int64:
        raise PgasValueError(f"{fn}: {LOCK_DTYPE.format(dtype=lock.dtype)}")


def refuse(fn: str, kind: int) -> None:
    """A misuse that the data shows (a KIND code of ``_device_errors``, no fields): raised."""
    raise describe(kind, fn, "", "", 0, 0, 0)


def check_size(fn: str, what: str, have: int, need: int, why: str) -> None:
    if have != need:
        raise device_error("SIZE", fn, what, why, a=have, b=need)


def reduce_op_code(op, label: str) -> int:
    """The code of the reduction named ``op`` (``reduce(team, dest, src, "sum")``); on a GPU
    it must be a constant string, known when the kernel compiles."""
    if not isinstance(op, str) or op not in REDUCE_OPS:
        raise PgasValueError(f"{label}: op must be one of {', '.join(REDUCE_OPS)}, got {op!r}")
    return reduce_code(op)


def check_reduction(fn: str, op: int, arr: np.ndarray) -> None:
    reduction_ufunc(fn, REDUCE_OPS[op], arr.dtype, on_device=True)
