"""Lifecycle: ``init`` / ``finalize`` and what a PE asks of the job (its number, the PE count,
the backend in use)."""
from __future__ import annotations

import sys

import numpy as np

from .. import check
from ..core import _job
from ..core._backend import backend_name, gpu_usable
from ..core._env import setting, unknown_settings
from ..core._errors import PgasError, PgasValueError
from ..core._version import SPEC_VERSION, VENDOR_NAME, VERSION
from ..core._waiting import LONG_FIRST_NAP_S, SHORT_FIRST_NAP_S, precise_sleeps, sleep_on
from ..core.native._wake_words import Sleeper, WakeWords
from ..runtime import _failure, _state
from ..runtime._allocator import HeapAllocator
from ..runtime._barrier import wait_all
from ..runtime._bootstrap import UniqueId, bootstrap, bootstrap_from_uid, new_unique_id
from ..runtime._state import Runtime, runtime
from ..transport._direct import DirectCopies
from .rma._gpu_direct import GpuDirectCopies
from ..transport._routing import Transports

__all__ = ["init", "finalize", "is_initialized", "query_initialized", "init_thread", "query_thread",
           "THREAD_SINGLE", "THREAD_FUNNELED", "THREAD_SERIALIZED", "THREAD_MULTIPLE",
           "get_unique_id", "UniqueId", "my_pe", "n_pes", "backend", "pcontrol",
           "info_get_version", "info_get_name", "vendor_get_version_info"]

# OpenSHMEM's thread levels, with its values.
THREAD_SINGLE, THREAD_FUNNELED, THREAD_SERIALIZED, THREAD_MULTIPLE = 0, 1, 2, 3

# init calls not yet matched by a finalize (0: not initialized); the thread level provided
_depth = 0
_thread_level = THREAD_MULTIPLE


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
    from ..cuda.heap._heap import GpuSymmetricHeap
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


def _bootstrap_comm(comm, mpi_comm, initializer_method, uid, rank, nranks):
    """How ``init`` bootstraps: ``("comm", communicator or None)`` or ``("uid", (uid, rank,
    nranks))``, checked; nvshmem4py's keywords are accepted."""
    fn = "pgas.init"
    if comm is not None and mpi_comm is not None:
        raise PgasValueError(f"{fn}: give comm or mpi_comm (the same thing), not both")
    if initializer_method not in (None, "", "mpi", "emulated_mpi", "uid"):
        raise PgasValueError(f"{fn}: initializer_method must be 'mpi', 'emulated_mpi' or 'uid', got "
                             f"{initializer_method!r} (pgas bootstraps over MPI: start the PEs with pgasrun or "
                             "mpiexec, pass mpi_comm, or pass uid=pgas.get_unique_id() with rank and nranks)")
    by_uid = initializer_method == "uid" or (initializer_method in (None, "") and uid is not None)
    if not by_uid:
        if uid is not None or rank is not None or nranks is not None:
            raise PgasValueError(f"{fn}: uid, rank and nranks go with initializer_method='uid', got "
                                 f"initializer_method={initializer_method!r}")
        return "comm", (comm if comm is not None else mpi_comm)
    if comm is not None or mpi_comm is not None:
        raise PgasValueError(f"{fn}: initializer_method='uid' bootstraps without a communicator: "
                             "give uid, rank and nranks, not comm/mpi_comm")
    if uid is None:
        raise PgasValueError(f"{fn}: initializer_method='uid' needs uid: make one with pgas.get_unique_id() on "
                             "one process and pass it to every process")
    if not isinstance(uid, UniqueId):
        raise PgasValueError(f"{fn}: uid must be a pgas.UniqueId from pgas.get_unique_id(), got {type(uid).__name__}")
    for what, value in (("rank", rank), ("nranks", nranks)):
        if value is None:
            raise PgasValueError(f"{fn}: uid-based init needs rank and nranks (this process's rank and the number "
                                 f"of processes), got {what}=None")
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise PgasValueError(f"{fn}: {what} must be an integer, got {value!r}")
    if nranks < 1:
        raise PgasValueError(f"{fn}: nranks must be >= 1, got {nranks}")
    if not 0 <= rank < nranks:
        raise PgasValueError(f"{fn}: rank must be within [0, nranks) = [0, {nranks}), got {rank}")
    if uid.is_empty:
        raise PgasValueError(f"{fn}: uid is empty (get_unique_id(empty=True) not yet filled in): pass the uid "
                             "that pgas.get_unique_id() made on one process")
    return "uid", (uid, int(rank), int(nranks))


def init(comm=None, *, mpi_comm=None, initializer_method=None, device=None, uid=None, rank=None,
         nranks=None) -> None:
    """Join the job and set up the symmetric heap (collective over the job's PEs).

    May be called again while initialized: the calls are counted, and only the matching
    number of ``finalize`` calls ends pgas (the arguments of the later calls are checked,
    then ignored). After the last ``finalize``, ``init`` starts afresh.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm, optional
        The PEs of the job; default: MPI's world (from ``pgasrun``/``mpiexec``, or this
        process alone). ``mpi_comm`` is the same, under nvshmem4py's name.
    initializer_method : str, optional
        nvshmem4py's: ``"mpi"`` or ``"emulated_mpi"`` (both bootstrap over MPI, as pgas
        always does), or ``"uid"`` (implied by ``uid``).
    device : int or cuda.core.Device, optional
        The GPU of this PE; default: local rank round robin over the visible GPUs (the
        simulator has one device, 0).
    uid : pgas.UniqueId, optional
        From ``pgas.get_unique_id()`` on the process that will be rank 0, passed to the
        others out of band (a file, a pipe, an MPI broadcast of ``uid._data``). Every one of
        the ``nranks`` processes calls ``init(uid=uid, rank=r, nranks=n)``; no launcher is
        needed. The processes meet through MPI's dynamic processes (the uid holds an MPI
        port name).
    rank, nranks : int, optional
        With ``uid``: this process's PE number and the number of PEs.

    Raises
    ------
    PgasValueError
        For arguments that do not fit (``uid`` without ``rank``/``nranks``, ``rank`` out of
        range, ``initializer_method="uid"`` without ``uid``, ...).
    """
    global _depth
    how, arg = _bootstrap_comm(comm, mpi_comm, initializer_method, uid, rank, nranks)
    if _state.current() is not None:
        _depth += 1
        return
    check.refuse_on_gpu()
    heap_class = _heap_class()
    device = _device_index(device)
    size = setting("PGAS_SYMMETRIC_SIZE")
    debug, timeout = setting("PGAS_DEBUG"), setting("PGAS_TIMEOUT")
    boot = bootstrap(arg) if how == "comm" else bootstrap_from_uid(*arg, fn="pgas.init")
    if boot.my_pe == 0 and not _job.under_pgasrun():   # pgasrun has said it, once for all PEs
        for warning in unknown_settings().values():
            print(f"pgas: warning: {warning}", file=sys.stderr)
    _job.record_segments()      # MPI is up: its shared-memory files exist now
    heap = heap_class(boot, size, timeout, device)
    try:
        rt = Runtime(boot, heap, HeapAllocator(size), debug, timeout)
        wakes = None if rt.wake_offset is None else WakeWords(heap.bases, rt.wake_offset)
        rt.transports = Transports(boot, heap, timeout, on_nic_failure=_failure.end_job_for_nic, wakes=wakes)
        # the fast paths of same-node put/get skip the argument checks of PGAS_DEBUG
        rt.direct = None if debug else GpuDirectCopies(heap, rt.transports.kinds) if heap.device_arrays else \
            DirectCopies(heap, rt.transports, wakes)
    except Exception:
        heap.close()
        raise
    _state.start(rt)
    if wakes is not None:       # waits sleep on this PE's wake word, each sleep no longer than asked
        # (the first sleep of a wait is longer where this PE's progress thread shares the cores)
        sleep_on(Sleeper(wakes.addresses[boot.my_pe]), Sleeper(wakes.answers),
                 LONG_FIRST_NAP_S if rt.transports.remote else SHORT_FIRST_NAP_S)
        precise_sleeps()
    check.begin(rt)
    _failure.install_hooks(boot.n_pes, heap.device_arrays)
    _job.mark_live()
    wait_all(boot.comm, "pgas.init")
    _job.release_topology_file()    # every PE's MPI has read it
    _depth = 1


def finalize() -> None:
    """Leave the job (collective): the last of the calls matching ``init``'s completes
    this PE's RMA, waits for every PE, then releases the heap, the transports and the teams;
    earlier ones only count down."""
    global _depth
    rt = runtime("pgas.finalize")
    if _depth > 1:
        _depth -= 1
        return
    found = check.end(rt)
    rt.transports.quiet("pgas.finalize")
    wait_all(rt.boot.comm, "pgas.finalize")   # after it nobody sends this PE's NIC requests
    sleep_on(None, None)        # (the heap's word is about to be unmapped)
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
    _depth = 0
    if found:    # PGAS_CHECK=1 found problems (PE 0 printed them): the run fails, once every PE is done
        _job.record_failure(f"{_job.CHECK_FAILED} ({found} reported above)", 1)
        raise SystemExit(1)


def is_initialized() -> bool:
    """True between ``init`` and ``finalize``."""
    return _state.current() is not None


def query_initialized() -> bool:
    """OpenSHMEM 1.6's ``shmem_query_initialized``: True between ``init`` and the last
    matching ``finalize`` (the same as ``is_initialized``)."""
    return _state.current() is not None


def _check_thread_level(fn: str, level) -> int:
    if (isinstance(level, (bool, np.bool_)) or not isinstance(level, (int, np.integer))
            or not THREAD_SINGLE <= level <= THREAD_MULTIPLE):
        raise PgasValueError(f"{fn}: requested must be one of pgas.THREAD_SINGLE (0), THREAD_FUNNELED (1), "
                             f"THREAD_SERIALIZED (2), THREAD_MULTIPLE (3), got {level!r}")
    return int(level)


def init_thread(requested: int, **init_options) -> int:
    """``init`` (same keywords), asking for a thread level; returns the level provided.

    pgas provides ``THREAD_MULTIPLE`` whatever is asked: its one-sided host calls (RMA,
    signals, atomics, ``fence``/``quiet``, queries) may be made from several threads at
    once (the kernels of the simulator do exactly that). Collective calls (allocation,
    teams, barriers, collectives, ``init``/``finalize``) must still reach every PE in the
    same order: make them from one thread at a time.

    Parameters
    ----------
    requested : int
        ``pgas.THREAD_SINGLE``, ``THREAD_FUNNELED``, ``THREAD_SERIALIZED`` or ``THREAD_MULTIPLE``.

    Returns
    -------
    int
        The level provided: ``pgas.THREAD_MULTIPLE``.
    """
    _check_thread_level("pgas.init_thread", requested)
    init(**init_options)
    return _thread_level


def query_thread() -> int:
    """The thread level pgas provides (``pgas.THREAD_MULTIPLE``; see ``init_thread``)."""
    runtime("pgas.query_thread")
    return _thread_level


def pcontrol(level: int) -> None:
    """OpenSHMEM's ``shmem_pcontrol``: set the profiling level of a profiling library
    (0: profiling off, 1: on, the default, 2: the library's own detail; any other integer
    is the library's to define). pgas has no profiling library behind it, so every level
    is accepted and changes nothing (as OpenSHMEM allows).

    Parameters
    ----------
    level : int
        Any integer (numpy's too); not a bool, float or string (PgasValueError).
    """
    fn = "pgas.pcontrol"
    runtime(fn)
    if isinstance(level, (bool, np.bool_)) or not isinstance(level, (int, np.integer)):
        raise PgasValueError(f"{fn}: level must be an integer (0 profiling off, 1 on, 2 the library's detail, "
                             f"others the library's to define), got {level!r}")


def get_unique_id(empty: bool = False) -> UniqueId:
    """A unique id for ``init(uid=..., rank=..., nranks=..., initializer_method="uid")``.

    Called (without ``empty``) on one process, the one that will be rank 0: it opens an MPI
    port, which the id names, and that process accepts the others on it during ``init``
    (the port is closed once every PE has joined). Pass the id to the other processes out
    of band: pickle it, write ``bytes(uid)`` to a file (``pgas.UniqueId.from_bytes`` reads
    it back), or broadcast ``uid._data`` into ``get_unique_id(empty=True)`` as with nvshmem4py.

    Parameters
    ----------
    empty : bool
        True: an empty id, to be filled in with the bytes of a real one (nvshmem4py's form).
    """
    return UniqueId() if empty else new_unique_id()


def info_get_version() -> tuple[int, int]:
    """The OpenSHMEM specification version pgas follows, ``(major, minor)`` = (1, 6)
    (NVSHMEM's ``nvshmem_info_get_version``). Callable before ``init``."""
    return SPEC_VERSION


def info_get_name() -> str:
    """The vendor string (OpenSHMEM's ``shmem_info_get_name``): ``"pgas <version>"``."""
    return VENDOR_NAME


def vendor_get_version_info() -> tuple[int, int, int]:
    """pgas's own version, ``(major, minor, patch)`` (NVSHMEM's
    ``nvshmemx_vendor_get_version_info``). Callable before ``init``."""
    return VERSION


def my_pe() -> int:
    """This PE's number in TEAM_WORLD."""
    return runtime("pgas.my_pe").my_pe


def n_pes() -> int:
    """The number of PEs in the job."""
    return runtime("pgas.n_pes").n_pes


def backend() -> str:
    """The backend in use: ``"simulator"`` or ``"cuda"``."""
    return backend_name()

