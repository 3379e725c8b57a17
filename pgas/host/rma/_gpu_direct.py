"""The fast path of host ``put``/``get`` on the cuda backend: with no stream, to or from a
PE whose heap is mapped here (this PE's, or another's of its node), one ``cuMemcpyAsync``
on the runtime's internal stream and its synchronize, on plain integers.

The general path (``_rma._copy``, ``_gpu_ops.copy_with``) makes a numba device array over
the peer's copy and reads ``__cuda_array_interface__`` several times a call: on an H200
(2026-11-28, commit 28b3eec) a host put took 57-62 µs whatever its size. Here a device
array's address (and a symmetric one's heap offset) is learned once and kept by array
object; a call then adds the peer's heap base and copies. Only plainly fine calls take
it: an int PE whose heap is mapped here, C-contiguous arrays of one dtype that fit (numpy
or numba device arrays), no stream. Anything else returns False and takes the general
path, which checks everything and raises the errors: this module decides no error. As the
simulator's ``DirectCopies``, it is off under PGAS_DEBUG.
"""
from __future__ import annotations

import numpy as np

from ...runtime._arrays import c_strides

__all__ = ["GpuDirectCopies"]

_CACHED_ARRAYS = 256        # device array objects whose addresses are kept (cleared when full)


class GpuDirectCopies:
    """Contiguous host-called copies between this PE and the PEs whose heaps are mapped here."""

    def __init__(self, heap, kinds: list):
        # imported here, not at the top: _gpu_ops loads the device layer, which must not
        # happen when pgas is imported (pgas-info reports bad settings before any backend)
        from .._gpu_ops import copy_bytes
        self._copy_bytes = copy_bytes
        # each PE's heap base where the copy engines reach it from here, else None
        self._bases = [base if kind in ("self", "p2p") else None for base, kind in zip(heap.bases, kinds)]
        self._base, self._size = heap.base, heap.size
        self._device_array = _device_array_type()
        # id(array object) -> (the object, its dtype, its size, its address, its heap
        # offset or None); the entry keeps the object alive, so its id is not reused meanwhile
        self._known: dict[int, tuple] = {}

    def close(self) -> None:
        """Forget the heap (it is about to be unmapped)."""
        self._bases = [None] * len(self._bases)
        self._known.clear()

    def put(self, dest, src, pe) -> bool:
        """PE ``pe``'s ``dest`` = ``src`` (``src.size`` elements), complete on return, if the
        fast path takes the call (then True)."""
        return self._copy(dest, src, pe, True)

    def get(self, dest, src, pe) -> bool:
        """``dest`` = PE ``pe``'s ``src`` (``dest.size`` elements), complete on return, if
        the fast path takes the call (then True)."""
        return self._copy(src, dest, pe, False)

    def _copy(self, sym, local, pe, to_peer: bool) -> bool:
        """All of ``local`` to (``to_peer``) or from PE ``pe``'s copy of symmetric ``sym``,
        if the fast path takes the call (then True)."""
        if type(pe) is not int or not 0 <= pe < len(self._bases) or self._bases[pe] is None:
            return False
        theirs, mine = self._device(sym), self._local(local, not to_peer)
        if theirs is None or theirs[4] is None or mine is None or mine[1] != theirs[1] or mine[2] > theirs[2]:
            return False
        peer = self._bases[pe] + theirs[4]
        to, start = (peer, mine[3]) if to_peer else (mine[3], peer)
        self._copy_bytes(to, start, mine[2] * mine[1].itemsize, None, "pgas.put" if to_peer else "pgas.get")
        return True

    def _local(self, arr, written: bool):
        """(arr, dtype, size, address, None) of a C-contiguous numpy array (writable when
        ``written``), or ``_device``'s entry of a device array; else None."""
        if type(arr) is np.ndarray:
            if not arr.flags.c_contiguous or (written and not arr.flags.writeable):
                return None
            return arr, arr.dtype, arr.size, arr.__array_interface__["data"][0], None
        return self._device(arr)

    def _device(self, arr):
        """The cache entry of numba device array ``arr`` (made now if new, from its
        ``__cuda_array_interface__``) when it is non-empty and C-contiguous, else None; its
        heap offset is None outside this PE's heap."""
        known = self._known.get(id(arr))
        if known is not None and known[0] is arr:
            return known
        if not isinstance(arr, self._device_array):
            return None
        interface = arr.__cuda_array_interface__
        dtype, shape = np.dtype(interface["typestr"]), tuple(interface["shape"])
        size = int(np.prod(shape, dtype=np.int64))
        strides = interface.get("strides")
        if size == 0 or (strides is not None and tuple(strides) != c_strides(shape, dtype.itemsize)):
            return None
        address = interface["data"][0]
        offset = address - self._base
        if not 0 <= offset <= self._size - size * dtype.itemsize:
            offset = None
        if len(self._known) >= _CACHED_ARRAYS:
            self._known.clear()
        known = self._known[id(arr)] = (arr, dtype, size, address, offset)
        return known


def _device_array_type():
    from numba.cuda.cudadrv.devicearray import DeviceNDArray
    return DeviceNDArray
