"""Multicast memory on the simulator: one array whose stores reach every member of a team.

NVSHMEM's ``nvshmemx_mc_ptr`` (nvshmem4py's ``get_multicast_array``) gives an address in a
multicast object (NVLink SHARP): a store to it is a ``multimem.st``, written by the switch
into the same element of every member's copy. The simulator maps every heap of its node, so
a multicast array is the members' copies together: a store writes each of them. On the
hardware a plain load from multicast memory is undefined (only ``multimem.ld_reduce`` reads
it), so element loads are refused here rather than answered with one copy's value.
"""
from __future__ import annotations

import numpy as np

from ..core._errors import PgasError

__all__ = ["MulticastArray", "MULTICAST_WHY"]

# why a member on another node is refused (multicast objects span one NVLink domain)
MULTICAST_WHY = "multicast memory reaches only the PEs of one node (an NVLink domain)"


class MulticastArray:
    """The copies of one symmetric array on every member of a team, written together."""

    def __init__(self, copies: list[np.ndarray], fn: str):
        self._copies, self._fn = copies, fn
        first = copies[0]
        self.shape, self.dtype, self.ndim, self.size, self.strides = (first.shape, first.dtype, first.ndim,
                                                                     first.size, first.strides)

    def __len__(self) -> int:
        return len(self._copies[0])

    def __setitem__(self, index, value) -> None:
        for copy in self._copies:
            copy[index] = value

    def __getitem__(self, index):
        parts = [copy[index] for copy in self._copies]
        if isinstance(parts[0], np.ndarray) and parts[0].ndim > 0:
            return MulticastArray(parts, self._fn)      # a slice: still multicast, for stores
        raise PgasError(f"{self._fn}: a load from a multicast array: on a GPU a plain load from multicast memory is "
                        "undefined (the switch answers only multimem.ld_reduce); read the PE's own array instead")

    def __repr__(self) -> str:
        return f"MulticastArray(shape={self.shape}, dtype={self.dtype}, members={len(self._copies)})"
