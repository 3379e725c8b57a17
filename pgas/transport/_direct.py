"""The small-message fast path of host ``put``/``get`` on the simulator backend.

A put to a PE whose heap is mapped here is one copy between mappings, yet the general
path spends about 10 µs of Python per call around it (unwrapping, span and heap checks,
making the peer's view). Here a call whose arguments are plainly fine (an int PE mapped
here; same-dtype numpy arrays, or the simulator's device arrays around them, that fit)
is one copy: a ``memmove`` (cffi's) to or from the peer's mapping at the symmetric array's
heap offset, which is cached by array object; when the same object comes again with a
numpy array of its size and dtype (up to 1 MiB), a numpy assignment into a view of the
peer's copy (made once, kept with the offset), which costs less than the ``memmove`` call.
To a PE on another node the same call is one blocking request of the remote engine
(``Transports.copy_small``: one native call for the ucx and ibgda paths), skipping the
same checks. Anything else returns False and takes the general path, which checks
everything and raises the errors: this module never decides an error, it only skips work.
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
_NEVER_ARMED = memoryview(bytes(8)).cast("I")     # a wake word's flags where nobody sleeps


def _simulator_array_type():
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray
    return FakeCUDAArray


class DirectCopies:
    """Contiguous copies between this PE and the PEs whose heaps are mapped here."""

    def __init__(self, heap, transports=None, wakes=None):
        # transports.copy_small(pe, offset, local, to_peer): the same copy with a PE on
        # another node, done at once by its engine (then True)
        self._transports = transports
        # the PEs' wake words (``core.native._wake_words.WakeWords``), or None: after a put into
        # PE pe's heap, its word is woken if its flag (``_armed[pe][1]``) says a thread may
        # sleep on it (a look from here costs a tenth of the call)
        self._wake_words = wakes
        self._armed = [_NEVER_ARMED] * len(heap.bases) if wakes is None else \
            [_NEVER_ARMED if flag is None else flag for flag in wakes.armed]
        # each PE's heap as a char pointer, None where not mapped (the heap keeps the mappings)
        self._peers = [None if base is None else _ffi.cast("char *", base) for base in heap.bases]
        self._base = self._peers[heap.my_pe]
        self._elsewhere = frozenset(pe for pe, peer in enumerate(self._peers) if peer is None)   # other nodes
        self._heaps = heap.views
        self._size = heap.size
        self._wrapper = _simulator_array_type()
        # id(array object) -> (the object, its numpy data, {pe: its elements in PE pe's heap,
        # made on its second call there}, {pe: the same as a memoryview where the array is
        # 1-D}, its element count, its dtype, its heap offset); the entry keeps the object
        # alive, so its id is not reused while the entry lasts
        self._known: dict[int, tuple] = {}
        self._last = _NO_ENTRY          # the entry of the last call (a loop's calls skip the dict)

    def close(self) -> None:
        """Forget the heap (it is about to be unmapped)."""
        self._peers = [None] * len(self._peers)
        self._heaps = [None] * len(self._heaps)
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
        known = self._known[id(arr)] = (arr, data, {}, {}, data.size, data.dtype, offset)
        return known

    def _remember_view(self, known, pe: int) -> None:
        """Keep the entry's elements in PE ``pe``'s heap, for the next calls (up to 1 MiB):
        as an array, and where it is 1-D as a memoryview too (whose assignment copies only
        between equal shapes and formats: a put's checks)."""
        data = known[1]
        if data.nbytes <= _ASSIGN_BYTES:
            view = known[2][pe] = np.ndarray(data.shape, data.dtype, buffer=self._heaps[pe], offset=known[6])
            if data.ndim == 1:
                try:
                    known[3][pe] = memoryview(view)
                except (ValueError, TypeError):     # a dtype the buffer protocol does not carry
                    pass

    def _checked(self, sym, local, pe, to_peer: bool) -> bool:
        """The copy of a call the cached path did not take, after every check: a memmove at
        the symmetric array's offset, or a request to a PE on another node."""
        known = self._entry(sym)
        local = local._ary if isinstance(local, self._wrapper) else local
        if (known is None or type(pe) is not int or pe < 0 or pe >= len(self._peers)
                or type(local) is not np.ndarray or local.dtype != known[5] or local.size > known[4]
                or not local.flags.c_contiguous or not (to_peer or local.flags.writeable)):
            return False
        if self._peers[pe] is None:
            return self._transports is not None and self._transports.copy_small(pe, known[6], local, to_peer)
        if pe not in known[2]:
            self._remember_view(known, pe)
        if to_peer:
            _ffi.memmove(self._peers[pe] + known[6], local, local.nbytes)
            if self._armed[pe][1]:
                self._wake_words.wake(pe)
        else:
            _ffi.memmove(local, self._peers[pe] + known[6], local.nbytes)
        return True

    # The calls on an array object seen before, with a local numpy array of its size, are
    # written out in full: each call saved is a tenth of their time. A put copies through
    # the memoryview, whose assignment checks the dtype (as a format) and shape and copies a
    # strided source element by element, as the general path would (which makes it
    # contiguous first). A get copies by numpy's assignment, which casts: the dtype is
    # checked here; of equal sizes it copies element for element in C order or refuses the
    # shapes (ValueError); a strided destination is the general path's error. To a PE on
    # another node the local array goes by address: contiguous, of the entry's dtype.

    def put(self, dest, src, pe) -> bool:
        """``src`` into PE ``pe``'s ``dest`` if the fast path applies (then True)."""
        known = self._last if dest is self._last[0] else self._known.get(id(dest))
        if (known is not None and known[0] is dest and type(pe) is int and type(src) is np.ndarray
                and src.size == known[4]):
            theirs = known[3].get(pe)
            if theirs is not None:
                try:
                    theirs[:] = src
                except ValueError:      # (another dtype or shape)
                    return self._checked(dest, src, pe, True)
                self._last = known
                if self._armed[pe][1]:
                    self._wake_words.wake(pe)
                return True
            if pe in self._elsewhere and src.dtype is known[5]:     # (copy_small checks the layout)
                self._last = known
                return self._transports is not None and self._transports.copy_small(pe, known[6], src, True)
        return self._checked(dest, src, pe, True)

    def get(self, dest, src, pe) -> bool:
        """PE ``pe``'s ``src`` into ``dest`` if the fast path applies (then True)."""
        known = self._last if src is self._last[0] else self._known.get(id(src))
        if (known is not None and known[0] is src and type(pe) is int and type(dest) is np.ndarray
                and dest.size == known[4] and dest.dtype is known[5] and dest.flags.c_contiguous):
            theirs = known[2].get(pe)
            if theirs is not None:
                try:
                    dest[...] = theirs
                except ValueError:      # (read-only, or shapes numpy refuses)
                    return False
                self._last = known
                return True
            if pe in self._elsewhere and dest.flags.writeable:
                self._last = known
                return self._transports is not None and self._transports.copy_small(pe, known[6], dest, False)
        return self._checked(src, dest, pe, False)
