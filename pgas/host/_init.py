"""Lifecycle: ``init`` / ``finalize`` and what a PE asks of the job (its number, the PE count,
the backend in use)."""
from __future__ import annotations

import sys

import numpy as np

from ..core import _job
from ..core._backend import backend_name, gpu_usable
from ..core._env import setting, unknown_settings
from ..core._errors import PgasError, PgasValueError
from ..runtime import _failure, _state
from ..runtime._allocator import HeapAllocator
from ..runtime._barrier import wait_all
from ..runtime._bootstrap import bootstrap
from ..runtime._state import Runtime, runtime
from ..transport._direct import DirectCopies
from ..transport._routing import Transports

__all__ = ["init", "finalize", "is_initialized", "my_pe", "n_pes", "backend"]


def _heap_class():
    """The symmetric heap of the backend in use; on cuda, a clear error where no GPU is usable."""
    if backend_name() == "simulator":
        from ..sim._heap import SymmetricHeap
        from ..sim._threads import yield_while_polling
        yield_while_polling()
        return SymmetricHeap
    if not gpu_usable():
        raise PgasError(
            "pgas.init: PGAS_BACKEND=cuda, but no GPU is usable here (no CUDA driver or no device). "
            "Kernels that call pgas.device still compile for sm_90 offline "
            "(numba.cuda.compile_ptx); to run programs here use PGAS_BACKEND=simulator")
    from ..cuda._heap import GpuSymmetricHeap
    return GpuSymmetricHeap


def _device_index(device) -> int | None:
    """The visible-device number that ``init(device=...)`` names (an int or an object with
    ``device_id``, such as a cuda.core Device), checked; None to let pgas choose."""
    if device is None:
        return None
    index = getattr(device, "device_id", device)
    from numba import cuda
    count = len(cuda.gpus)
    if isinstance(index, (bool, np.bool_)) or not isinstance(index, (int, np.integer)) or not 0 <= index < count:
        raise PgasValueError(f"pgas.init: device must be a device number in [0, {count}) or a cuda.core "
                             f"Device, got {device!r}")
    return int(index)


def _bootstrap_comm(comm, mpi_comm, initializer_method):
    """The communicator ``init`` bootstraps from; nvshmem4py's keywords are accepted."""
    if comm is not None and mpi_comm is not None:
        raise PgasValueError("pgas.init: give comm or mpi_comm (the same thing), not both")
    if initializer_method not in (None, "mpi", "emulated_mpi"):
        raise PgasValueError(f"pgas.init: initializer_method must be 'mpi' or 'emulated_mpi', got "
                             f"{initializer_method!r} (pgas always bootstraps over MPI: start the PEs with "
                             "pgasrun or mpiexec, or pass mpi_comm)")
    return comm if comm is not None else mpi_comm


def init(comm=None, *, mpi_comm=None, initializer_method=None, device=None) -> None:
    """Join the job and set up the symmetric heap (collective over the job's PEs).

    Parameters
    ----------
    comm : mpi4py.MPI.Comm, optional
        The PEs of the job; default: MPI's world (from ``pgasrun``/``mpiexec``, or this
        process alone). ``mpi_comm`` is the same, under nvshmem4py's name.
    initializer_method : str, optional
        nvshmem4py's: ``"mpi"`` or ``"emulated_mpi"`` (both bootstrap over MPI, as pgas always does).
    device : int or cuda.core.Device, optional
        The GPU of this PE; default: local rank round robin over the visible GPUs (the
        simulator has one device, 0).
    """
    if _state.current() is not None:
        raise PgasError("pgas.init() was called twice: call pgas.finalize() before initializing again")
    comm = _bootstrap_comm(comm, mpi_comm, initializer_method)
    heap_class = _heap_class()
    device = _device_index(device)
    size = setting("PGAS_SYMMETRIC_SIZE")
    debug, timeout = setting("PGAS_DEBUG"), setting("PGAS_TIMEOUT")
    boot = bootstrap(comm)
    if boot.my_pe == 0 and not _job.under_pgasrun():   # pgasrun has said it, once for all PEs
        for warning in unknown_settings().values():
            print(f"pgas: warning: {warning}", file=sys.stderr)
    _job.record_segments()      # MPI is up: its shared-memory files exist now
    heap = heap_class(boot, size, timeout, device)
    try:
        rt = Runtime(boot, heap, HeapAllocator(size), debug, timeout)
        rt.transports = Transports(boot, heap, timeout, on_nic_failure=_failure.end_job_for_nic)
        # the fast path of small same-node put/get skips the argument checks of PGAS_DEBUG
        rt.direct = None if heap.device_arrays or debug else DirectCopies(heap, rt.transports.fast_copy)
    except Exception:
        heap.close()
        raise
    _state.start(rt)
    _failure.install_hooks(boot.n_pes, heap.device_arrays)
    _job.mark_live()
    wait_all(boot.comm, "pgas.init")


def finalize() -> None:
    """Leave the job: a barrier, then release the heap (collective)."""
    rt = runtime("pgas.finalize")
    rt.transports.quiet("pgas.finalize")
    wait_all(rt.boot.comm, "pgas.finalize")   # after it nobody sends this PE's NIC requests
    rt.transports.close()
    if rt.direct is not None:
        rt.direct.close()
    rt.heap.close()
    for team in rt.teams[2:]:
        if team is not None:
            team.comm.Free()
    rt.boot.node_comm.Free()
    rt.boot.comm.Free()
    _failure.remove_hooks()
    _job.mark_finalized()
    _state.stop()


def is_initialized() -> bool:
    """True between ``init`` and ``finalize``."""
    return _state.current() is not None


def my_pe() -> int:
    """This PE's number in TEAM_WORLD."""
    return runtime("pgas.my_pe").my_pe


def n_pes() -> int:
    """The number of PEs in the job."""
    return runtime("pgas.n_pes").n_pes


def backend() -> str:
    """The backend in use: ``"simulator"`` or ``"cuda"``."""
    return backend_name()

