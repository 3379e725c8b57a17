"""First-fit allocator over the symmetric heap's offsets.

It is deterministic: PEs that make the same calls in the same order get the same
offsets, which is what makes the heap symmetric. Freed blocks merge with their
neighbours, so alloc/free cycles do not fragment the heap without bound.
"""
from __future__ import annotations

import bisect

from ..core._errors import PgasError

__all__ = ["HeapAllocator", "ALIGNMENT"]

ALIGNMENT = 256  # bytes; enough for any dtype and for coalesced GPU accesses


def _round_up(n: int, to: int) -> int:
    return (n + to - 1) // to * to


class HeapAllocator:
    """Hands out aligned byte ranges of a heap of ``size`` bytes."""

    def __init__(self, size: int):
        self.size = size
        self._free_offsets: list[int] = [0]      # sorted
        self._free_sizes: dict[int, int] = {0: size}
        self._used: dict[int, int] = {}          # offset -> reserved bytes

    @property
    def bytes_free(self) -> int:
        return sum(self._free_sizes.values())

    @property
    def bytes_used(self) -> int:
        return self.size - self.bytes_free

    def largest_free(self) -> int:
        return max(self._free_sizes.values(), default=0)

    @staticmethod
    def reserved_size(nbytes: int) -> int:
        """The bytes an allocation of ``nbytes`` takes from the heap (aligned units)."""
        return max(ALIGNMENT, _round_up(nbytes, ALIGNMENT))

    def allocate(self, nbytes: int, alignment: int = ALIGNMENT) -> int:
        """Reserve ``nbytes`` (at least one aligned unit) and return its offset, a multiple
        of ``alignment`` (a power of two; below ``ALIGNMENT`` it is ``ALIGNMENT``)."""
        want = self.reserved_size(nbytes)
        alignment = max(alignment, ALIGNMENT)
        for offset in self._free_offsets:
            have = self._free_sizes[offset]
            start = _round_up(offset, alignment)
            if start + want <= offset + have:
                self._take(offset, have, start, want)
                return start
        aligned = f" at a multiple of {alignment}" if alignment > ALIGNMENT else ""
        raise PgasError(
            f"symmetric heap exhausted: asked for {nbytes} bytes{aligned}, "
            f"{self.bytes_free} bytes free (largest free block {self.largest_free()}) "
            f"of a heap of {self.size} bytes; raise PGAS_SYMMETRIC_SIZE")

    def _take(self, offset: int, have: int, start: int, want: int) -> None:
        """Reserve [start, start + want) of the free block [offset, offset + have); the
        bytes before ``start`` (an aligned allocation's gap) and after stay free."""
        index = bisect.bisect_left(self._free_offsets, offset)
        del self._free_offsets[index]
        del self._free_sizes[offset]
        if start > offset:
            self._free_offsets.insert(index, offset)
            self._free_sizes[offset] = start - offset
            index += 1
        end = start + want
        if offset + have > end:
            self._free_offsets.insert(index, end)
            self._free_sizes[end] = offset + have - end
        self._used[start] = want

    def release(self, offset: int) -> None:
        """Return the block at ``offset`` to the free list, merging with its neighbours."""
        size = self._used.pop(offset)
        index = bisect.bisect_left(self._free_offsets, offset)
        nxt = offset + size
        if index < len(self._free_offsets) and self._free_offsets[index] == nxt:
            size += self._free_sizes.pop(nxt)
            del self._free_offsets[index]
        if index > 0:
            prev = self._free_offsets[index - 1]
            if prev + self._free_sizes[prev] == offset:
                self._free_sizes[prev] += size
                return
        self._free_offsets.insert(index, offset)
        self._free_sizes[offset] = size

    def block_at(self, offset: int) -> int | None:
        """Reserved size of the block that starts at ``offset``, or None."""
        return self._used.get(offset)

    def block_containing(self, offset: int) -> tuple[int, int] | None:
        """``(start, reserved bytes)`` of the live block holding byte ``offset``, or None."""
        starts = sorted(self._used)
        index = bisect.bisect_right(starts, offset) - 1
        if index < 0:
            return None
        start = starts[index]
        return (start, self._used[start]) if offset < start + self._used[start] else None
