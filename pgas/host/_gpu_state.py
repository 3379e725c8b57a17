"""The device state block of the cuda backend, mapped at a fixed virtual address.

Device functions take no context argument: they read this PE's state from a small block
of GPU memory at ``STATE_ADDRESS`` (see ``pgas/device/_cuda.py`` for its words). The
address is a constant compiled into every kernel, so the block must be at that address
in every PE's process and on every ``init``: it is reserved with the VMM API
(``cuMemAddressReserve`` with the address as a hint, checked to have been honoured),
backed by ``cuMemCreate`` memory and mapped read/write for the PE's device. ``close``
gives the address back, so a later ``init`` maps it again.
"""
from __future__ import annotations

import numpy as np

from .._constants import MAX_TEAMS
from .._errors import PgasError
from ._gpu_driver import checked

__all__ = ["DeviceState"]


def _state_layout():
    from ..device._cuda import STATE_ADDRESS, STATE_WORDS
    return STATE_ADDRESS, STATE_WORDS


class DeviceState:
    """The state block of one PE: a host copy of its words, pushed to the device on change."""

    def __init__(self, device: int, my_pe: int, n_pes: int, heap_base: int, heap_size: int,
                 timeout_s: float, peer_bases: list):
        from cuda.bindings import driver

        address, words = _state_layout()
        self._n = n_pes
        self._team_base = words["peer_bases"] + n_pes
        self.words = np.zeros(self._team_base + MAX_TEAMS * (n_pes + 2), np.int64)
        self.words[words["my_pe"]] = my_pe
        self.words[words["n_pes"]] = n_pes
        self.words[words["heap_base"]] = heap_base
        self.words[words["heap_size"]] = heap_size
        self.words[words["timeout_ns"]] = int(timeout_s * 1e9)
        for pe, base in enumerate(peer_bases):
            self.words[words["peer_bases"] + pe] = base or 0

        prop = driver.CUmemAllocationProp()
        prop.type = driver.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        prop.location.type = driver.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        prop.location.id = device
        granularity = checked(driver.cuMemGetAllocationGranularity(
            prop, driver.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM),
            "cuMemGetAllocationGranularity")
        self.size = -(-self.words.nbytes // granularity) * granularity
        self.address = address
        reserved = int(checked(driver.cuMemAddressReserve(self.size, 0, address, 0), "cuMemAddressReserve"))
        if reserved != address:
            driver.cuMemAddressFree(reserved, self.size)
            raise PgasError(
                f"pgas.init: the CUDA driver did not reserve the device state block at {address:#x} "
                f"(it offered {reserved:#x}); kernels read the state at that fixed address. Another "
                "mapping of this process may use it: set PGAS_STATE_ADDRESS to another 2 MiB-aligned "
                "address (the same for every PE)")
        self._handle = None
        try:
            self._handle = checked(driver.cuMemCreate(self.size, prop, 0), "cuMemCreate (device state block)")
            checked(driver.cuMemMap(address, self.size, 0, self._handle, 0), "cuMemMap (device state block)")
            access = driver.CUmemAccessDesc()
            access.location.type = driver.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
            access.location.id = device
            access.flags = driver.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
            checked(driver.cuMemSetAccess(address, self.size, [access], 1), "cuMemSetAccess (device state block)")
            self.push()
        except Exception:
            self.close()
            raise

    def set_team(self, slot: int, pes: tuple | None, my_index: int) -> None:
        """Write team slot ``slot``'s row (size, my rank, the world PE of each rank); None clears it."""
        row = self._team_base + slot * (self._n + 2)
        self.words[row:row + self._n + 2] = 0
        if pes is not None:
            self.words[row], self.words[row + 1] = len(pes), my_index
            self.words[row + 2:row + 2 + len(pes)] = pes
        self.push()

    def push(self) -> None:
        """Copy the host words to the device block (synchronous)."""
        from cuda.bindings import driver

        checked(driver.cuMemcpyHtoD(self.address, self.words.ctypes.data, self.words.nbytes),
                "cuMemcpyHtoD (device state)")

    def close(self) -> None:
        """Unmap the block and give its address back (idempotent)."""
        from cuda.bindings import driver

        if self.address is None:
            return
        if self._handle is not None:
            driver.cuMemUnmap(self.address, self.size)
            driver.cuMemRelease(self._handle)
        driver.cuMemAddressFree(self.address, self.size)
        self.address = None
