"""Symmetric arrays whose element loads and stores the checker sees (simulator only).

On the simulator a symmetric array is a numba ``FakeCUDAArray`` around a view of the
heap; kernels and host code index it. Under PGAS_CHECK=1 it is a ``WatchedArray``: each
element load (``x = a[i]``) and each store (``a[i] = x``, ``a[lo:hi] = ...``), and
``copy_to_host``/``copy_to_device``, is recorded as a plain (not pgas) access of the
owning PE's heap, with its source line.
"""
from __future__ import annotations

import time

import numpy as np
from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

from ._model import Access
from ._recorder import recorder

__all__ = ["WatchedArray"]


def _touched(ary: np.ndarray, idx):
    """The view of ``ary`` that ``ary[idx]`` reads or writes (the whole array for fancy indexing)."""
    key = idx if isinstance(idx, tuple) else (idx,)
    if all(isinstance(k, (int, np.integer, slice)) or k is Ellipsis for k in key):
        try:
            return ary[key + (Ellipsis,)] if Ellipsis not in key else ary[key]
        except (IndexError, TypeError):
            return ary
    return ary


def _note(ary: np.ndarray, idx, write: bool, value=None, op: str | None = None) -> None:
    rec = recorder()
    if rec is None:
        return
    t = time.monotonic_ns()
    view = ary if idx is None else _touched(ary, idx)
    placed = rec.place(view)
    if placed is None:
        return
    owner, lo, hi = placed
    if value is not None:
        value = np.asarray(value)
        value = value.item() if value.size == 1 else None
    rec.add("access", Access(owner, lo, hi, write, False, False, -1, op or ("store" if write else "load"),
                             rec.site(), value), t=t)


class WatchedArray(FakeCUDAArray):
    """A ``FakeCUDAArray`` whose element accesses the checker records."""

    def __getitem__(self, idx):
        ret = self._ary.__getitem__(idx)
        if type(ret) not in (np.ndarray, np.void):
            _note(self._ary, idx, False)
            return ret
        return WatchedArray(ret, stream=self.stream)

    def __setitem__(self, idx, val):
        _note(self._ary, idx, True, val)
        return self._ary.__setitem__(idx, val)

    def copy_to_host(self, ary=None, stream=0):
        _note(self._ary, None, False, op="copy_to_host")
        return super().copy_to_host(ary, stream)

    def copy_to_device(self, ary, stream=0):
        _note(self._ary, None, True, op="copy_to_device")
        return super().copy_to_device(ary, stream)

    def bind(self, stream=0):
        return WatchedArray(self._ary, stream)
