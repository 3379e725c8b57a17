"""The simulator's primitive layer: what the device API needs that differs per backend.

Device functions (``_rma.py``, ``_sync.py``, ...) are written once on top of these
names. In the simulator they run as plain Python inside numba's simulated threads:
arrays are numpy views of the mapped heaps, copies are vectorized, ordering comes from
real CPU acquire/release operations, and every wait loop yields (a spinning simulated
thread would otherwise starve the thread it waits for) and gives up after PGAS_TIMEOUT.
"""
from __future__ import annotations

import functools
import threading

import numpy as np

from .. import _cpu_atomics
from .._checks import (check_contiguous, check_dtypes_match, check_nonnegative, check_pe, check_sig_op,
                       check_signal)
from .._errors import PgasError, PgasTimeoutError, PgasValueError
from .._reductions import reduction_ufunc
from .._waiting import Wait, check_cmp, cmp_name
from ..host import _runtime
from ..host._memory import as_ndarray
from ..host._team_table import team_of

__all__ = [
    "THREAD", "WARP", "BLOCK", "WARP_SIZE",
    "runtime", "local", "peer", "plain", "team", "barrier_words", "copy_strided",
    "load_acquire", "store_release", "fence", "atomic_rmw", "atomic_compare_swap",
    "group_rank_and_size", "group_sync", "wait", "check_not_empty", "check_copy",
    "check_cmp", "cmp_name", "check_signal", "check_sig_op", "device_function",
    "reduce_shares", "store_share", "reduction_ufunc", "check_size", "check_root", "check_dtypes_match",
]

THREAD, WARP, BLOCK = 0, 1, 2
WARP_SIZE = 32


def runtime(fn: str) -> _runtime.Runtime:
    """The PE's runtime, found without a context argument (only inside a kernel)."""
    _sim_thread(fn)
    return _runtime.runtime(fn)


def _check_allocated(rt: _runtime.Runtime, data: np.ndarray, fn: str, what: str) -> None:
    """PGAS_DEBUG: ``data`` must lie inside one live allocation (not freed, not past its end)."""
    offset = rt.heap.offset_of(data, fn, what)
    end = offset + data.nbytes
    block = rt.allocator.block_containing(offset)
    if block is None or end > block[0] + block[1]:
        where = ("is not inside any live symmetric array (freed, or never allocated)" if block is None else
                 f"runs {end - block[0] - block[1]} bytes past the end of its symmetric array "
                 f"({block[1]} bytes reserved at heap offset {block[0]})")
        raise PgasValueError(f"{fn}: {what} (heap bytes [{offset}, {end})) {where}")


def local(arr, fn: str, what: str) -> np.ndarray:
    """This PE's copy of a symmetric kernel argument, as numpy (checked symmetric)."""
    rt = runtime(fn)
    data = as_ndarray(arr, fn, what)
    if rt.debug:
        _check_allocated(rt, data, fn, what)
    else:
        rt.heap.offset_of(data, fn, what)
    return data


def peer(arr, pe, fn: str, what: str) -> np.ndarray:
    """PE ``pe``'s copy of symmetric ``arr`` (load/store reachable), as numpy."""
    rt = runtime(fn)
    pe = check_pe(fn, pe, rt.n_pes)
    data = as_ndarray(arr, fn, what)
    if rt.debug:
        _check_allocated(rt, data, fn, what)
    return rt.heap.view_on(pe, data, fn, what)


def team(handle, fn: str):
    """The team behind ``handle`` (pes, my_index, size), checked."""
    return team_of(runtime(fn), handle, fn)


def barrier_words(handle: int, fn: str) -> np.ndarray:
    """Team ``handle``'s row of device barrier words: a flag per member rank, epoch last."""
    return runtime(fn).sync_words[handle]


def plain(arr, fn: str, what: str) -> np.ndarray:
    """Any array argument (symmetric or not), as numpy."""
    return as_ndarray(arr, fn, what)


def copy_strided(dst: np.ndarray, dst_stride: int, src: np.ndarray, src_stride: int,
                 nelems: int, rank: int, size: int) -> None:
    """Elements i = rank, rank+size, ... < nelems: dst.flat[i*dst_stride] = src.flat[i*src_stride]."""
    if nelems == 0:
        return
    d = dst.reshape(-1)[:(nelems - 1) * dst_stride + 1:dst_stride]
    s = src.reshape(-1)[:(nelems - 1) * src_stride + 1:src_stride]
    d[rank::size] = s[rank::size]


def reduce_shares(views: list, ufunc, rank: int, size: int) -> np.ndarray:
    """Elements rank, rank+size, ... of ``ufunc`` reduced over ``views`` (in list order)."""
    shares = [view.reshape(-1)[rank::size] for view in views]
    if len(shares) == 1:
        return shares[0].copy()
    acc = ufunc(shares[0], shares[1])
    for share in shares[2:]:
        ufunc(acc, share, out=acc)
    return acc


def store_share(dst: np.ndarray, share: np.ndarray, rank: int, size: int) -> None:
    """dst's elements rank, rank+size, ... = ``share`` (what reduce_shares gave)."""
    dst.reshape(-1)[rank::size] = share


def load_acquire(arr: np.ndarray, fn: str, what: str):
    return _cpu_atomics.load_acquire(arr, fn, what)


def store_release(arr: np.ndarray, value, fn: str, what: str) -> None:
    _cpu_atomics.store_release(arr, value, fn, what)


def fence() -> None:
    _cpu_atomics.fence()


def atomic_rmw(arr: np.ndarray, op: str, value, fn: str, what: str):
    """Atomic read-modify-write of element 0 (op: xchg add and or xor); the old value."""
    return _cpu_atomics.rmw(arr, op, value, fn, what)


def atomic_compare_swap(arr: np.ndarray, cond, value, fn: str, what: str):
    return _cpu_atomics.compare_swap(arr, cond, value, fn, what)


def wait(fn: str) -> Wait:
    """The clock of one wait loop of a device function (PGAS_TIMEOUT)."""
    return Wait(fn, runtime(fn).timeout)


def device_function(function):
    """Every public device function, in the simulator: errors also name the calling PE
    (numba's simulator adds the thread and block)."""
    @functools.wraps(function)
    def called_on_a_pe(*args):
        try:
            return function(*args)
        except PgasError as exc:
            pe = _runtime._runtime.my_pe if _runtime._runtime is not None else "?"
            raise type(exc)(f"{exc} [on PE {pe}]") from None
    return called_on_a_pe


# Cooperative groups -----------------------------------------------------------------

def _sim_thread(fn: str):
    thread = threading.current_thread()
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
        raise PgasValueError(f"{fn}: {what} is empty; it needs at least one element")


def check_copy(fn: str, dst: np.ndarray, dst_name: str, dst_stride, src: np.ndarray, src_name: str,
               src_stride, nelems) -> None:
    """A strided copy of ``nelems`` elements must fit both arrays, with equal dtypes."""
    if dst.dtype != src.dtype:
        raise PgasValueError(f"{fn}: {dst_name} and {src_name} must have the same dtype, "
                             f"got {dst_name} {dst.dtype} and {src_name} {src.dtype}")
    nelems = check_nonnegative(fn, "nelems", nelems)
    for arr, name, stride in ((dst, dst_name, dst_stride), (src, src_name, src_stride)):
        check_contiguous(fn, name, arr)
        if check_nonnegative(fn, f"{name} stride", stride) == 0:
            raise PgasValueError(f"{fn}: the {name} stride must be >= 1, got 0")
        if nelems and (nelems - 1) * stride + 1 > arr.size:
            raise PgasValueError(
                f"{fn}: {name} has {arr.size} elements but {nelems} elements at stride {stride} "
                f"need {(nelems - 1) * stride + 1}")



def check_size(fn: str, what: str, have: int, need: int, why: str) -> None:
    if have != need:
        raise PgasValueError(f"{fn}: {why}; {what} has {have} elements, {need} needed")


def check_root(fn: str, root, team_size: int) -> None:
    if isinstance(root, (bool, np.bool_)) or not isinstance(root, (int, np.integer)) or not 0 <= root < team_size:
        raise PgasValueError(f"{fn}: root must be a team rank within [0, {team_size}), got {root!r}")
