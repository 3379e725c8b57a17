"""Registrations of local buffers that pgas did not allocate, kept for their next use.

A host ``put``/``get`` to another node from a numpy array needs the array's bytes
registered with the NIC (an lkey) while the request lasts. Registering costs more than a
small request itself, and programs put from the same buffer again and again, so the
registration is kept (as MPI and UCX keep theirs, a registration cache) for the next call
on the same bytes: up to ``KEPT`` of them, the least recently used dropped first, never
one a request in flight still uses.
"""
from __future__ import annotations

import ctypes
import threading
from collections import OrderedDict

import numpy as np

from ..nic._regions import ACCESS_LOCAL

__all__ = ["RecentRegistrations"]

KEPT = 64


class RecentRegistrations:
    """``acquire(address, nbytes)`` -> (lkey, entry) registers the bytes with ``nic`` or
    finds them registered; ``release(entry)`` when the requests naming them are complete."""

    def __init__(self, nic):
        self.nic = nic
        self._kept: OrderedDict = OrderedDict()     # (address, nbytes) -> [region, requests using it]
        self._lock = threading.Lock()               # host threads register at once

    def acquire(self, address: int, nbytes: int):
        with self._lock:
            entry = self._kept.get((address, nbytes))
            if entry is None:
                view = np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(address))
                entry = self._kept[(address, nbytes)] = [self.nic.register(view, ACCESS_LOCAL), 0]
                self._trim()
            else:
                self._kept.move_to_end((address, nbytes))
            entry[1] += 1
            return entry[0].lkey, entry

    def release(self, entry) -> None:
        with self._lock:
            entry[1] -= 1

    def _trim(self) -> None:
        """Drop the least recently used registrations nobody uses beyond KEPT."""
        idle = [key for key, (_, users) in self._kept.items() if users == 0]
        for key in idle[:max(len(self._kept) - KEPT, 0)]:
            self.nic.deregister(self._kept.pop(key)[0])

    def close(self) -> None:
        """Deregister every one (the NIC is closing)."""
        with self._lock:
            for region, _ in self._kept.values():
                self.nic.deregister(region)
            self._kept.clear()
