"""The small-message fast path of host ``put``/``get`` on the simulator backend.

A put to a PE whose heap is mapped here is one copy between mappings, yet the general
path spends about 10 µs of Python per call around it (unwrapping, span and heap checks,
making the peer's view). Here a call whose arguments are plainly fine (an int PE mapped
here; same-dtype C-contiguous numpy arrays, or the simulator's device arrays around them,
that fit) is one copy: a ``memmove`` (cffi's) to or from the peer's mapping at the
symmetric array's heap offset, which is cached by array object; when the same object comes
again with up to 1 MiB, a numpy assignment into a view of the peer's copy (made once, kept
with the offset), which costs less than the ``memmove`` call. To a PE on another node the
same call goes to ``remote`` (one blocking request of the remote engine,
``Transports.fast_copy``), skipping the same checks. Anything else returns False and takes
the general path, which checks everything and raises the errors: this module never
decides an error, it only skips work.
"""
from __future__ import annotations

import numpy as np
from cffi import FFI

__all__ = ["DirectCopies"]

_ffi = FFI()
_CACHED_ARRAYS = 256        # symmetric array objects whose offsets are kept (cleared when full)
# Above this a numpy assignment is slower than libc's memmove (which streams past the
# caches); below it the assignment costs less than the memmove call.
_ASSIGN_BYTES = 1 << 20
_NO_ENTRY = (object(),)         # (its first item is no array a caller has)


def _simulator_array_type():
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray
    return FakeCUDAArray


class DirectCopies:
    """Contiguous copies between this PE and the PEs whose heaps are mapped here."""

    def __init__(self, heap, remote=None, wakes=None):
        # remote(pe, offset, local, to_peer): the same copy with a PE on another node, done
        # at once by its engine when that engine has a fast path (then True)
        self._remote = remote
        # the PEs' wake words (``core.native._wake_words.WakeWords``), or None: after a put into
        # PE pe's heap, its word is woken if its flag says a thread may sleep on it (a look
        # from here costs a tenth of the call)
        self._wake_words = wakes
        self._armed = None if wakes is None else wakes.armed
        # each PE's heap as a char pointer, None where not mapped (the heap keeps the mappings)
        self._peers = [None if base is None else _ffi.cast("char *", base) for base in heap.bases]
        self._base = self._peers[heap.my_pe]
        self._heaps = heap.views
        self._size = heap.size
        self._wrapper = _simulator_array_type()
        # id(array object) -> (the object, its dtype, its shape, its numpy data, its heap
        # offset, [its view in each PE's heap, made on reuse], whether it is small enough to
        # copy by assignment); the entry keeps the object alive, so its id is not reused
        # while the entry lasts
        self._known: dict[int, tuple] = {}
        self._last = _NO_ENTRY          # the entry of the last call (a loop's calls skip the dict)

    def close(self) -> None:
        """Forget the heap (it is about to be unmapped)."""
        self._peers = [None] * len(self._peers)
        self._heaps = [None] * len(self._heaps)
        self._armed = None
        self._known.clear()
        self._last = _NO_ENTRY

    def _entry(self, arr):
        """The cache entry of ``arr`` (made now if new) when it is a non-empty C-contiguous
        array inside this PE's heap, else None."""
        known = self._known.get(id(arr))
        if known is not None and known[0] is arr:
            return known
        data = arr._ary if isinstance(arr, self._wrapper) else arr
        if type(data) is not np.ndarray or data.size == 0 or not data.flags.c_contiguous:
            return None
        offset = _ffi.cast("char *", _ffi.from_buffer(data)) - self._base
        if not 0 <= offset <= self._size - data.nbytes:
            return None
        if len(self._known) >= _CACHED_ARRAYS:
            self._known.clear()
            self._last = _NO_ENTRY
        known = self._known[id(arr)] = (arr, data.dtype, data.shape, data, offset, [None] * len(self._peers),
                                        data.nbytes <= _ASSIGN_BYTES)
        return known

    def _view(self, known, pe: int):
        """The cached array's elements in PE ``pe``'s heap, made once; None if not mapped here."""
        if self._heaps[pe] is None:
            return None
        data = known[3]
        view = known[5][pe] = np.ndarray(data.shape, data.dtype, buffer=self._heaps[pe], offset=known[4])
        return view

    def _by_address(self, sym, local, pe, to_peer: bool) -> bool:
        """The copy of a first call on ``sym``, of another shape, or a large one: a memmove at its offset."""
        known = self._entry(sym)
        local = local._ary if isinstance(local, self._wrapper) else local
        if (known is None or type(pe) is not int or pe < 0 or pe >= len(self._peers)
                or type(local) is not np.ndarray or local.dtype != known[1] or local.size > known[3].size
                or not local.flags.c_contiguous or not (to_peer or local.flags.writeable)):
            return False
        if self._peers[pe] is None:
            return self._remote is not None and self._remote(pe, known[4], local, to_peer)
        if to_peer:
            _ffi.memmove(self._peers[pe] + known[4], local, local.nbytes)
            if self._armed is not None and self._armed[pe][1]:
                self._wake_words.wake(pe)
        else:
            _ffi.memmove(local, self._peers[pe] + known[4], local.nbytes)
        return True

    # The calls on an array object seen before, of its shape, are written out in full:
    # each call saved is a tenth of their time (a numpy array checked before a simulator
    # one, the dtype by identity: numpy's built-in dtypes are one object each; a local
    # array of the entry's shape and dtype is as small as the entry).

    def put(self, dest, src, pe) -> bool:
        """``src`` into PE ``pe``'s ``dest`` if the fast path applies (then True)."""
        known = self._last if dest is self._last[0] else self._known.get(id(dest))
        local = src if type(src) is np.ndarray else src._ary if isinstance(src, self._wrapper) else None
        if (known is None or known[0] is not dest or type(pe) is not int or pe < 0 or pe >= len(known[5])
                or local is None or local.shape != known[2] or local.dtype is not known[1] or not known[6]
                or not local.flags.c_contiguous):
            return self._by_address(dest, src, pe, True)
        self._last = known
        theirs = known[5][pe]
        if theirs is None:
            theirs = self._view(known, pe)
            if theirs is None:
                return self._remote is not None and self._remote(pe, known[4], local, True)
        theirs[...] = local
        if self._armed is not None and self._armed[pe][1]:
            self._wake_words.wake(pe)
        return True

    def get(self, dest, src, pe) -> bool:
        """PE ``pe``'s ``src`` into ``dest`` if the fast path applies (then True)."""
        known = self._last if src is self._last[0] else self._known.get(id(src))
        local = dest if type(dest) is np.ndarray else dest._ary if isinstance(dest, self._wrapper) else None
        if (known is None or known[0] is not src or type(pe) is not int or pe < 0 or pe >= len(known[5])
                or local is None or local.shape != known[2] or local.dtype is not known[1] or not known[6]
                or not local.flags.c_contiguous):
            return self._by_address(src, dest, pe, False)
        self._last = known
        theirs = known[5][pe]
        if theirs is None:
            theirs = self._view(known, pe)
            if theirs is None:
                return self._by_address(src, local, pe, False)
        try:
            local[...] = theirs
        except ValueError:      # read-only: the general path says so
            return False
        return True
