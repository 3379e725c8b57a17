"""Where a kernel's failed device check leaves its error: a few hundred bytes of pinned
host memory mapped into the GPU (``cuMemHostAlloc`` with ``DEVICEMAP``).

The device writes one error record there and traps (``_state_reads.record_failure``); the kernel's
failure then surfaces on the host as a CUDA error at the next synchronization, and pgas
raises the record instead, with the simulator's text (``pgas/core/_device_errors.py``). The
memory is the host's, so it can be read after the trap has ended the CUDA context.
"""
from __future__ import annotations

import ctypes

import numpy as np

from ...core._errors import PgasError
from .._driver import checked
from .._error_record import MAILBOX_BYTES, from_record

__all__ = ["Mailbox"]


class Mailbox:
    """One PE's error mailbox: ``device_address`` goes into the device state block."""

    def __init__(self):
        from cuda.bindings import driver

        flags = driver.CU_MEMHOSTALLOC_DEVICEMAP | driver.CU_MEMHOSTALLOC_PORTABLE
        self._host = int(checked(driver.cuMemHostAlloc(MAILBOX_BYTES, flags), "cuMemHostAlloc (error mailbox)"))
        self.words = np.ctypeslib.as_array((ctypes.c_int64 * (MAILBOX_BYTES // 8)).from_address(self._host))
        self.words[:] = 0
        self.device_address = int(checked(driver.cuMemHostGetDevicePointer(self._host, 0),
                                          "cuMemHostGetDevicePointer (error mailbox)"))

    def error(self, timeout: float) -> PgasError | None:
        """The error a device check recorded, or None."""
        if self._host is None:
            return None
        return from_record(self.words, timeout)

    def close(self) -> None:
        from cuda.bindings import driver

        if self._host is not None:
            self.words = None
            driver.cuMemFreeHost(self._host)
            self._host = None
