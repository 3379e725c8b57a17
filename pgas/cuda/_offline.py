"""Compiling for the GPU on a machine without one (the cuda backend's offline mode).

numba asks the driver for the current device's compute capability when it compiles a
device function called from a kernel; with no driver that fails. Where no GPU is
usable, pgas answers for the driver with a device of ``PGAS_OFFLINE_CC`` (sm_90 by
default) so that ``numba.cuda.compile_ptx(kernel, signature, cc=(9, 0))`` of kernels
that call ``pgas.device`` works anywhere. A usable GPU is always asked first.
"""
from __future__ import annotations

__all__ = ["OFFLINE_CC", "install"]

OFFLINE_CC = (9, 0)


class _OfflineDevice:
    """Stands in for numba's current device when there is none."""

    compute_capability = OFFLINE_CC
    name = b"offline compilation target (no GPU)"


def install() -> None:
    """Make numba's device-function compiler fall back to the offline device."""
    from numba.cuda import dispatcher
    from numba.cuda.cudadrv.error import CudaSupportError

    real = dispatcher.get_current_device
    if getattr(real, "pgas_offline", False):
        return

    def current_or_offline_device():
        try:
            return real()
        except CudaSupportError:
            return _OfflineDevice()

    current_or_offline_device.pgas_offline = True
    dispatcher.get_current_device = current_or_offline_device
