"""The device state block of the cuda backend, mapped at a fixed virtual address.

Device functions take no context argument: they read this PE's state from a small block
of GPU memory at ``STATE_ADDRESS`` (see ``pgas/cuda/_primitives.py`` for its words). The
address is a constant compiled into every kernel, so the block must be at that address
in every PE's process and on every ``init``. ``reserve_state_address`` reserves it with
the VMM API (``cuMemAddressReserve`` with the address as a hint, checked to have been
honoured) before ``init`` allocates anything else, and keeps the reservation for the
life of the process: no allocation can take the address between a ``finalize`` and the
next ``init``. Each ``init`` backs it with ``cuMemCreate`` memory mapped read/write for
the PE's device; ``close`` unmaps it and keeps the address.
"""
from __future__ import annotations

import numpy as np

from ...core._constants import MAX_TEAMS
from ...core._errors import PgasError
from .._driver import checked, synchronize
from ._mailbox import Mailbox

__all__ = ["DeviceState", "reserve_state_address"]

# Bytes of address space reserved at STATE_ADDRESS (only what a job needs is mapped): the
# block of a job of n PEs takes about (MAX_TEAMS + 1) * n words, so this fits ~250,000 PEs.
STATE_RESERVATION_BYTES = 64 << 20

_reserved: tuple[int, int] | None = None    # (address, bytes) this process holds


def _state_layout():
    from .._primitives import STATE_ADDRESS, STATE_WORDS
    return STATE_ADDRESS, STATE_WORDS


def _allocation_prop(device: int):
    """Pinned device memory of ``device``, and the granularity of its mappings."""
    from cuda.bindings import driver

    prop = driver.CUmemAllocationProp()
    prop.type = driver.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    prop.location.type = driver.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    prop.location.id = device
    granularity = checked(driver.cuMemGetAllocationGranularity(
        prop, driver.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM),
        "cuMemGetAllocationGranularity")
    return prop, int(granularity)


def _round_up(nbytes: int, granularity: int) -> int:
    return -(-nbytes // granularity) * granularity


def reserve_state_address(device: int) -> tuple[int, int]:
    """(address, bytes) of this process's reservation at ``STATE_ADDRESS``, made on the
    first call and kept until the process exits (later calls return it). ``init`` calls
    this before it allocates anything, so that its own heap cannot land on the address."""
    global _reserved
    from cuda.bindings import driver

    if _reserved is None:
        address, _ = _state_layout()
        size = _round_up(STATE_RESERVATION_BYTES, _allocation_prop(device)[1])
        reserved = int(checked(driver.cuMemAddressReserve(size, 0, address, 0), "cuMemAddressReserve"))
        if reserved != address:
            driver.cuMemAddressFree(reserved, size)
            raise PgasError(
                f"pgas.init: the CUDA driver did not reserve the device state block at {address:#x} "
                f"(it offered {reserved:#x}); kernels read the state at that fixed address. Another "
                "mapping of this process may use it: set PGAS_STATE_ADDRESS to another 2 MiB-aligned "
                "address (the same for every PE)")
        _reserved = (address, size)
    return _reserved


class DeviceState:
    """The state block of one PE: a host copy of its words, pushed to the device on change.

    ``stream`` is the runtime's internal stream, which the pushes are ordered on.
    """

    def __init__(self, device: int, my_pe: int, n_pes: int, heap_base: int, heap_size: int,
                 timeout_s: float, peer_bases: list, stream: int):
        from cuda.bindings import driver

        _, words = _state_layout()
        self._n, self._stream = n_pes, stream
        self._team_base = words["peer_bases"] + n_pes
        self.words = np.zeros(self._team_base + MAX_TEAMS * (n_pes + 2), np.int64)
        self.words[words["my_pe"]] = my_pe
        self.words[words["n_pes"]] = n_pes
        self.words[words["heap_base"]] = heap_base
        self.words[words["heap_size"]] = heap_size
        self.words[words["timeout_ns"]] = int(timeout_s * 1e9)
        self.timeout = timeout_s
        self.mailbox = Mailbox()
        self.words[words["mailbox"]] = self.mailbox.device_address
        for pe, base in enumerate(peer_bases):
            self.words[words["peer_bases"] + pe] = base or 0

        address, reserved = reserve_state_address(device)
        prop, granularity = _allocation_prop(device)
        self.size = _round_up(self.words.nbytes, granularity)
        if self.size > reserved:
            raise PgasError(f"pgas.init: the device state block of {n_pes} PEs needs {self.size} bytes, more "
                            f"than the {reserved} reserved at {address:#x}")
        self.address = address
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

    def set_nic(self, rows: np.ndarray, heap_lkey: int) -> None:
        """Append the NIC rows (``_nic_device.ROW`` per PE) and say where they start,
        with the heap's local key (``_state_reads``)."""
        _, words = _state_layout()
        start = self.words.size
        grown = np.concatenate([self.words, rows.reshape(-1).astype(np.int64)])
        if grown.nbytes > self.size:
            raise PgasError(f"pgas.init: the device state block with its NIC rows needs {grown.nbytes} bytes, "
                            f"more than the {self.size} mapped at {self.address:#x}")
        self.words = grown
        self.words[words["nic_rows"]] = start
        self.words[words["heap_lkey"]] = heap_lkey
        self.push()

    def push(self) -> None:
        """Copy the host words to the device block, landed on return (a copy from pageable
        memory may return before its DMA is done, so the stream is synchronized)."""
        from cuda.bindings import driver

        checked(driver.cuMemcpyHtoDAsync(self.address, self.words.ctypes.data, self.words.nbytes, self._stream),
                "cuMemcpyHtoDAsync (device state)")
        synchronize(self._stream)

    def device_error(self):
        """The error a device check of this PE recorded before it trapped, or None."""
        return self.mailbox.error(self.timeout)

    def close(self) -> None:
        """Unmap the block (idempotent); the address stays reserved for the next ``init``."""
        from cuda.bindings import driver

        self.mailbox.close()
        if self.address is None:
            return
        if self._handle is not None:
            driver.cuMemUnmap(self.address, self.size)
            driver.cuMemRelease(self._handle)
        self.address = None
