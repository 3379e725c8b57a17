"""A checked PE's start and end: the recorder, and the simulator's kernel launches and
``syncthreads`` made visible to it."""
from __future__ import annotations

import functools

from . import _recorder
from ._finish import finish

__all__ = ["begin", "end"]


def begin(rt) -> None:
    """Start recording this PE (``pgas.init`` under PGAS_CHECK=1)."""
    _recorder.start(rt)
    _watch_kernels()


def end(rt) -> int:
    """Collective (``pgas.finalize``): analyse the run; the number of findings."""
    rec = _recorder.recorder()
    if rec is None:
        return 0
    try:
        return finish(rec, rt.boot.comm)
    finally:
        _recorder.stop()


def _watch_kernels() -> None:
    """Record each kernel launch and its end (the host thread's clock passes to the
    kernel's threads and back) and each ``syncthreads`` (orders a block's threads)."""
    from numba.cuda.simulator import kernel

    launch = kernel.FakeCUDAKernel.__call__

    @functools.wraps(launch)
    def launched(self, *args):
        rec = _recorder.recorder()
        if rec is None or self._device or kernel._kernel_context:
            return launch(self, *args)
        number = rec.new_launch()
        rec.add("launch", number)
        try:
            return launch(self, *args)
        finally:
            rec.add("kernel_end", number)

    launched.pgas_checked = True
    if not getattr(launch, "pgas_checked", False):
        kernel.FakeCUDAKernel.__call__ = launched

    syncthreads = kernel.BlockThread.syncthreads
    if getattr(syncthreads, "pgas_checked", False):
        return

    @functools.wraps(syncthreads)
    def synchronized(thread):
        rec = _recorder.recorder()
        if rec is None:
            return syncthreads(thread)
        b = thread.blockIdx
        channel = ("block", rec.pe, rec.launch, (b.x, b.y, b.z))
        rec.add("release", channel)
        result = syncthreads(thread)
        rec.add("acquire", channel)
        return result

    synchronized.pgas_checked = True
    kernel.BlockThread.syncthreads = synchronized
