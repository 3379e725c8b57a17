"""Argument checks shared by the host API and the simulator's device functions.

Every message names the function and the argument, says what must hold and what was given.
"""
from __future__ import annotations

import numbers

import numpy as np

from ._constants import SIGNAL_ADD, SIGNAL_SET
from ._device_errors import device_error
from ._errors import PgasValueError

__all__ = ["check_pe", "check_dtypes_match", "check_fits", "check_contiguous", "check_copy", "check_strided_blocks",
           "check_nonnegative",
           "check_signal", "check_sig_op", "check_root", "contiguous_orders", "check_same_order", "flat"]


def check_pe(fn: str, pe, n_pes: int, what: str = "pe") -> int:
    """``pe`` as an int in [0, n_pes)."""
    if isinstance(pe, (bool, np.bool_)) or not isinstance(pe, numbers.Integral):
        raise PgasValueError(f"{fn}: {what} must be an integer PE number, got {pe!r}")
    if not 0 <= pe < n_pes:
        raise device_error("PE_RANGE", fn, what, a=pe, b=n_pes)
    return int(pe)


def check_dtypes_match(fn: str, dest: np.ndarray, src: np.ndarray) -> None:
    if dest.dtype != src.dtype:
        raise PgasValueError(
            f"{fn}: dest and src must have the same dtype, got dest {dest.dtype} and src {src.dtype}")


def check_fits(fn: str, what: str, arr: np.ndarray, needed: int, why: str) -> None:
    """``arr`` must hold at least ``needed`` elements (no silent truncation)."""
    if arr.size < needed:
        raise PgasValueError(f"{fn}: {what} has {arr.size} elements but {needed} are needed ({why})")


def check_contiguous(fn: str, what: str, arr) -> None:
    """``arr`` (a numpy or numba device array) must be C-contiguous."""
    if not arr.flags["C_CONTIGUOUS"]:
        raise PgasValueError(f"{fn}: {what} must be C-contiguous (use a strided call such as iput for strides)")


def contiguous_orders(arr) -> str:
    """The memory orders in which ``arr`` (a numpy or numba device array) is contiguous:
    ``"CF"`` (1-D, or at most one dimension longer than 1), ``"C"``, ``"F"`` or ``""``."""
    flags = arr.flags
    return ("C" if flags["C_CONTIGUOUS"] else "") + ("F" if flags["F_CONTIGUOUS"] else "")


def check_same_order(fn: str, dest, src, dest_name: str = "dest", src_name: str = "src") -> str:
    """The memory order (``"C"`` or ``"F"``) in which both ``dest`` and ``src`` are
    contiguous, to copy or combine them element by element in memory order; PgasValueError
    when either is not contiguous, or when one is C-ordered and the other Fortran-ordered."""
    d, s = contiguous_orders(dest), contiguous_orders(src)
    for name, orders in ((dest_name, d), (src_name, s)):
        if not orders:
            raise PgasValueError(f"{fn}: {name} must be C-contiguous or Fortran-contiguous (use a strided "
                                 "call such as iput for strides)")
    common = set(d) & set(s)
    if not common:
        raise PgasValueError(
            f"{fn}: {dest_name} and {src_name} must have the same memory order, got {dest_name} "
            f"{'C' if d == 'C' else 'Fortran'}-ordered and {src_name} {'C' if s == 'C' else 'Fortran'}-ordered "
            "(allocate both with the same order=, or copy one into the other's order first)")
    return "C" if "C" in common else "F"


def flat(arr, order: str):
    """Contiguous ``arr`` as a 1-D view of its elements in memory order ``order`` (no copy)."""
    return arr.reshape(-1, order=order)


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
            raise device_error("STRIDE_ZERO", fn, name)
        if nelems and (nelems - 1) * stride + 1 > arr.size:
            raise device_error("COPY_FITS", fn, name, a=arr.size, b=nelems, c=stride)


def check_strided_blocks(fn: str, dest: np.ndarray, src: np.ndarray, dst_stride, src_stride, nelems,
                         n_members: int) -> tuple:
    """(dst_stride, src_stride, nelems) of a strided all-to-all over ``n_members``, as
    ints: ``nelems`` >= 0, strides >= 1, and ``dest`` and ``src`` each holding
    ``n_members`` x ``nelems`` elements at their stride."""
    nelems = check_nonnegative(fn, "nelems", nelems)
    check_copy(fn, dest, "dest", dst_stride, src, "src", src_stride, n_members * nelems)
    return int(dst_stride), int(src_stride), nelems


def check_nonnegative(fn: str, what: str, value) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise PgasValueError(f"{fn}: {what} must be a non-negative integer, got {value!r}")
    if value < 0:
        raise device_error("NEGATIVE", fn, what, a=value)
    return int(value)


_SIGNAL_DTYPES = (np.dtype(np.uint64), np.dtype(np.int64))


def check_signal(fn: str, signal: np.ndarray) -> None:
    """A signal is element 0 of a uint64 (or int64) array."""
    if signal.dtype not in _SIGNAL_DTYPES or signal.size == 0:
        raise device_error("SIGNAL", fn, "signal", str(signal.dtype), a=signal.size)


def check_sig_op(fn: str, sig_op) -> None:
    if sig_op not in (SIGNAL_SET, SIGNAL_ADD):
        raise device_error("SIG_OP", fn, a=repr(sig_op))


def check_root(fn: str, root, team_size: int) -> None:
    """``root`` must be a team rank."""
    if isinstance(root, (bool, np.bool_)) or not isinstance(root, numbers.Integral) or not 0 <= root < team_size:
        raise device_error("ROOT", fn, a=repr(root), b=team_size)
