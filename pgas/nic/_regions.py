"""Registered memory: what a NIC may touch, by its keys (``ibv_reg_mr``), and how the NIC
thread reaches the bytes (a view of host memory, or a window onto GPU memory)."""
from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

__all__ = ["MemoryRegion", "DeviceSpan", "RemoteRegion", "KeyTable", "ACCESS_LOCAL", "ACCESS_REMOTE",
           "ACCESS_LOCAL_WRITE", "ACCESS_REMOTE_WRITE", "ACCESS_REMOTE_READ", "ACCESS_REMOTE_ATOMIC", "read_local",
           "write_local", "as_word"]

ACCESS_LOCAL_WRITE, ACCESS_REMOTE_WRITE, ACCESS_REMOTE_READ, ACCESS_REMOTE_ATOMIC = 1, 2, 4, 8
ACCESS_LOCAL = ACCESS_LOCAL_WRITE
ACCESS_REMOTE = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC


@dataclass
class MemoryRegion:
    """Registered memory [base, base + size). ``view`` (uint8) is how the NIC thread reaches
    host memory; GPU memory is registered by its dma-buf (``dmabuf_fd``), has no view and
    is reached through its ``window`` (copies and atomics by the GPU: ``pgas/cuda/nic/_nic_host.py``)."""

    base: int
    size: int
    lkey: int
    rkey: int
    access: int
    view: np.ndarray | None = None
    dmabuf_fd: int | None = None
    window: object = None

    def slice(self, address: int, nbytes: int):
        """The bytes [address, address + nbytes) if all inside the region and reachable by
        the NIC thread, else None: a view of host memory, or a ``DeviceSpan``."""
        offset = address - self.base
        if nbytes < 0 or offset < 0 or offset + nbytes > self.size:
            return None
        if self.view is not None:
            return self.view[offset:offset + nbytes]
        return None if self.window is None else DeviceSpan(self.window, offset, nbytes)


@dataclass(frozen=True)
class DeviceSpan:
    """Bytes of a region that the NIC thread cannot load or store (GPU memory): its window
    copies them (``read``/``write``) and applies atomics (``atomic``) on the device."""

    window: object
    offset: int
    nbytes: int


def read_local(local) -> np.ndarray:
    """A host array of the local bytes (a view of host memory, or a copy of device memory)."""
    return local.window.read(local.offset, local.nbytes) if isinstance(local, DeviceSpan) else local


def write_local(local, data, address: int) -> None:
    """Store ``data`` (uint8) over the local bytes at ``address``; aligned words whole."""
    if isinstance(local, DeviceSpan):
        local.window.write(local.offset, np.asarray(data, np.uint8))
    else:
        as_word(local, address)[:] = as_word(data, address)


@dataclass(frozen=True)
class RemoteRegion:
    """A peer's registered heap, as exchanged at init: what a WQE names it by."""

    base: int
    size: int
    rkey: int


def as_word(data: np.ndarray, address: int) -> np.ndarray:
    """Aligned 2-, 4- and 8-byte accesses as one typed load or store (never torn, as on a
    NIC: a flag written remotely is seen whole or not at all); other bytes as they are."""
    size = data.size
    if size in (2, 4, 8) and address % size == 0:
        return data.view(f"u{size}")
    return data


class KeyTable:
    """The local keys as native code reads them (a NIC's memory translation table): row 0
    holds how many rows follow that have been written (the native search stops there);
    then one int64 row per registered region, (lkey, base, size, window): host memory
    (window 0), or GPU memory whose window native code reaches it through (its
    ``native_address``, ``pgas.wire._window``); a free row has lkey 0. Rows are written
    under a lock (threads of the PE register buffers), a reused row's lkey cleared first
    and written last, and read by the native NIC (``pgas.wire._nic_code``) without it.
    A region with neither a view nor such a window has no row: requests naming it are
    refused there."""

    ROWS = 4096

    def __init__(self):
        self.rows = np.zeros((self.ROWS + 1, 4), np.int64)
        self._lock = threading.Lock()

    def add(self, region: MemoryRegion) -> None:
        """A row for ``region``; called again when its window changes, it rewrites the row."""
        through = getattr(region.window, "native_address", 0)
        if region.view is None and not through:
            return
        with self._lock:
            used = int(self.rows[0, 0])
            mine = np.flatnonzero(self.rows[1:used + 1, 0] == region.lkey)
            free = mine if mine.size else np.flatnonzero(self.rows[1:used + 1, 0] == 0)
            row = int(free[0]) + 1 if free.size else used + 1
            if row > self.ROWS:
                return          # (the native side then refuses it: a local protection error)
            self.rows[row, 0] = 0
            self.rows[row, 1:] = region.base, region.size, through
            self.rows[row, 0] = region.lkey
            self.rows[0, 0] = max(used, row)

    def remove(self, lkey: int) -> None:
        with self._lock:
            used = self.rows[1:int(self.rows[0, 0]) + 1, 0]
            used[used == lkey] = 0
