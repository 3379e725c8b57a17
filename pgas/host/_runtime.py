"""Lifecycle: ``init`` / ``finalize``, and the runtime state every other call reaches."""
from __future__ import annotations

import atexit
import os
import sys
import time
import traceback
from dataclasses import dataclass, field

import numpy as np

from .. import _job
from .._backend import backend_name
from .._constants import MAX_TEAMS, TEAM_NODE, TEAM_WORLD
from .._env import setting, shown
from .._errors import PgasConfigError, PgasError, PgasTimeoutError, PgasValueError
from ._allocator import HeapAllocator
from ._bootstrap import Bootstrap, bootstrap
from ._direct import DirectCopies
from ._heap import SymmetricHeap
from ._team_table import predefined_teams
from ._transport import Transports

__all__ = ["init", "finalize", "is_initialized", "my_pe", "n_pes", "backend"]

COLLECTIVE_WORDS = 8  # per team: progress counters of the host collective algorithms
# The eager collectives (simulator backend only: on cuda the host collectives run device
# kernels; see _eager) stage through EAGER_REGIONS buffers per team on each PE, used by
# successive calls in turn; per team slot, the size of each (larger for the predefined
# teams, which most calls use, than for split teams) and the slot's offset among them.
EAGER_REGIONS = 4
EAGER_BYTES = tuple((512 << 10) if slot in (TEAM_WORLD, TEAM_NODE) else (16 << 10) for slot in range(MAX_TEAMS))
EAGER_FIRST = tuple(EAGER_REGIONS * sum(EAGER_BYTES[:slot]) for slot in range(MAX_TEAMS))


@dataclass
class Runtime:
    """Everything an initialized PE knows."""

    boot: Bootstrap
    heap: SymmetricHeap
    allocator: HeapAllocator
    debug: bool
    timeout: float
    # Device barrier words, at heap offset 0 on every PE: one row per team slot, holding
    # an arrival flag per team member, then this PE's barrier epoch for that team (at [n]).
    sync_words: np.ndarray = field(init=False)
    # Host collective progress words, a row per team slot (see host/_collectives.py).
    collective_words: np.ndarray = field(init=False)
    # Team slots (TEAM_WORLD, TEAM_NODE, then split teams); None where free.
    teams: list = field(init=False)
    # Host collectives called so far on each team slot (the same count on every member).
    collective_calls: list = field(init=False)
    # Per team slot: the bound progress-word accessors of host collectives (built lazily).
    collective_cache: dict = field(init=False, default_factory=dict)
    # Per team slot, [eager collectives called so far, the highest call number every member
    # is known to have published] (_eager); the heap offset of their staging buffers
    # (EAGER_REGIONS, EAGER_BYTES, EAGER_FIRST; None on the cuda backend).
    eager_state: list = field(init=False)
    eager_offset: int | None = field(init=False, default=None)
    # Per team slot: its members' staging buffers for eager calls, as bytes (_eager).
    eager_staging: dict = field(init=False, default_factory=dict)
    # Host collective calls kept for repeats, by collective, team, options and the ids of
    # dest and src (_collectives).
    collective_plans: dict = field(init=False, default_factory=dict)
    # How this PE reaches each PE (load/store or the NIC); set by init once the heap is up.
    transports: Transports | None = field(init=False, default=None)
    # The fast path of small host put/get to PEs mapped here (simulator backend; else None).
    direct: DirectCopies | None = field(init=False, default=None)
    # True on the cuda backend (arrays are numba device arrays in GPU memory); a field, not
    # a property, as the small host calls read it each time.
    on_gpu: bool = field(init=False)

    def __post_init__(self):
        self.on_gpu = self.heap.device_arrays
        n = self.boot.n_pes
        own_words = [MAX_TEAMS * (n + 1) * 8, MAX_TEAMS * COLLECTIVE_WORDS * 8]
        if not self.on_gpu:
            own_words.append(EAGER_REGIONS * sum(EAGER_BYTES))
        needed = sum(self.allocator.reserved_size(nbytes) for nbytes in own_words)
        if self.allocator.size < needed:
            kept = "synchronization words" + ("" if self.on_gpu else " and the staging buffers of small collectives")
            raise PgasConfigError(
                f"{shown('PGAS_SYMMETRIC_SIZE')} is too small: pgas keeps {needed} bytes of every PE's "
                f"heap for its own {kept} ({MAX_TEAMS} team slots on {n} PEs); give at least that plus what "
                "the program allocates")
        self._sync_offset = self.allocator.allocate(MAX_TEAMS * (n + 1) * 8)
        self.sync_words = self.heap.array_at(self._sync_offset, (MAX_TEAMS, n + 1), np.int64)
        self._collective_offset = self.allocator.allocate(MAX_TEAMS * COLLECTIVE_WORDS * 8)
        self.collective_words = self.heap.array_at(self._collective_offset, (MAX_TEAMS, COLLECTIVE_WORDS), np.int64)
        if not self.on_gpu:
            self.eager_offset = self.allocator.allocate(EAGER_REGIONS * sum(EAGER_BYTES))
        self.heap.zero(0, self.allocator.bytes_used)
        self.teams = [None] * MAX_TEAMS
        for slot, team in enumerate(predefined_teams(self.boot)):
            if team is not None:
                self.set_team(slot, team)
        self.collective_calls = [0] * MAX_TEAMS
        self.eager_state = [[0, 0] for _ in range(MAX_TEAMS)]

    def set_team(self, slot: int, team) -> None:
        """Put ``team`` (or None: free the slot) in ``slot``, here and in the device state."""
        self.teams[slot] = team
        self.heap.publish_team(slot, team)

    def reset_team_slot(self, slot: int) -> None:
        """Fresh synchronization state for a team just created in ``slot``."""
        n = self.boot.n_pes
        self.heap.zero(self._sync_offset + slot * (n + 1) * 8, (n + 1) * 8)
        self.heap.zero(self._collective_offset + slot * COLLECTIVE_WORDS * 8, COLLECTIVE_WORDS * 8)
        self.collective_calls[slot] = 0
        self.eager_state[slot][:] = [0, 0]
        self.collective_cache.pop(slot, None)
        self.eager_staging.pop(slot, None)


    @property
    def my_pe(self) -> int:
        return self.boot.my_pe

    @property
    def n_pes(self) -> int:
        return self.boot.n_pes


_runtime: Runtime | None = None
_finalized_once = False


def runtime(fn: str) -> Runtime:
    """The live runtime, or a PgasError naming ``fn`` when pgas is not initialized."""
    if _runtime is None:
        when = "after pgas.finalize()" if _finalized_once else "before pgas.init()"
        raise PgasError(f"{fn} was called {when}; call pgas.init() first")
    return _runtime


def _end_job(how: str, code: int) -> None:
    """Record (for pgasrun) how this PE failed, then end every PE of the job."""
    _job.record_failure(how, code)
    _job.record_segments()      # pgasrun removes what this PE's MPI cannot now
    sys.stderr.flush()
    if _job.under_pgasrun() or "mpi4py.MPI" not in sys.modules:
        os._exit(code)      # pgasrun stops the other PEs, and says why once
    from mpi4py import MPI
    MPI.COMM_WORLD.Abort(code)


def device_error_behind() -> PgasError | None:
    """On the cuda backend, the error a device check recorded before it stopped its kernel
    (the host sees only a CUDA launch failure), or None."""
    reader = getattr(_runtime.heap, "device_error", None) if _runtime is not None else None
    return reader() if reader is not None else None


def _explained(exc_type, exc, tb):
    """An uncaught exception, or the device check behind it when a kernel trapped."""
    found = None if isinstance(exc, PgasError) else device_error_behind()
    if found is None:
        return exc_type, exc, tb
    found.__cause__ = exc
    return type(found), found, None


def _explain_device_errors(exc_type, exc, tb) -> None:
    """sys.excepthook of a single cuda PE outside pgasrun: name the failed device check."""
    sys.__excepthook__(*_explained(exc_type, exc, tb))


def _report_and_abort(exc_type, exc, tb) -> None:
    """sys.excepthook under pgasrun and in multi-PE jobs: name the PE, then end the whole
    job (no hang). A configuration error is one line, said once by pgasrun's summary. A
    kernel stopped by a failed device check is reported as that check's error."""
    exc_type, exc, tb = _explained(exc_type, exc, tb)
    pe = _runtime.my_pe if _runtime is not None else os.environ.get("PMI_RANK", "?")
    if issubclass(exc_type, PgasConfigError):
        if not _job.under_pgasrun():
            sys.stderr.write(f"pgas: PE {pe}: {exc}\n")
    else:
        text = "".join(traceback.format_exception(exc_type, exc, tb))
        sys.stderr.write("".join(f"[PE {pe}] {line}\n" for line in text.rstrip().splitlines()))
    _end_job(f"raised {exc_type.__name__}: {exc}", 1)


_plain_exit = sys.exit


def _exit_ending_job(code=None):
    """sys.exit for multi-PE jobs: a non-zero exit ends every PE, as mpi4py's runner does.

    Without it the exiting PE would wait in MPI's finalize while its peers wait for it.
    """
    if _runtime is not None and code not in (None, 0):
        print(f"[PE {_runtime.my_pe}] sys.exit({code!r})", file=sys.stderr, flush=True)
        _end_job(f"exited with status {code}", code if isinstance(code, int) else 1)
    _plain_exit(code)


_departure_watched = False


def _watch_departure() -> None:
    """At interpreter exit, a PE still initialized tells pgasrun it left the job. Registered
    after MPI started, so it runs before MPI's finalize (which may block for ever while
    the other PEs wait for this one)."""
    global _departure_watched
    if not _departure_watched:
        atexit.register(_job.record_departure)
        _departure_watched = True


if _job.under_pgasrun():
    sys.excepthook = _report_and_abort   # failures before init are named too


def _heap_class():
    """The symmetric heap of the backend in use; on cuda, a clear error where no GPU is usable."""
    if backend_name() == "simulator":
        return SymmetricHeap
    from .._backend import gpu_usable
    if not gpu_usable():
        raise PgasError(
            "pgas.init: PGAS_BACKEND=cuda, but no GPU is usable here (no CUDA driver or no device). "
            "Kernels that call pgas.device still compile for sm_90 offline "
            "(numba.cuda.compile_ptx); to run programs here use PGAS_BACKEND=simulator")
    from ._gpu_heap import GpuSymmetricHeap
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
    global _runtime
    if _runtime is not None:
        raise PgasError("pgas.init() was called twice: call pgas.finalize() before initializing again")
    comm = _bootstrap_comm(comm, mpi_comm, initializer_method)
    heap_class = _heap_class()
    device = _device_index(device)
    size = setting("PGAS_SYMMETRIC_SIZE")
    debug, timeout = setting("PGAS_DEBUG"), setting("PGAS_TIMEOUT")
    boot = bootstrap(comm)
    _job.record_segments()      # MPI is up: its shared-memory files exist now
    heap = heap_class(boot, size, timeout, device)
    try:
        rt = Runtime(boot, heap, HeapAllocator(size), debug, timeout)
        rt.transports = Transports(boot, heap, timeout)
        rt.direct = None if heap.device_arrays else DirectCopies(heap)
    except Exception:
        heap.close()
        raise
    _runtime = rt
    if boot.n_pes > 1:
        sys.excepthook, sys.exit = _report_and_abort, _exit_ending_job
    elif sys.excepthook is sys.__excepthook__ and backend_name() == "cuda":
        sys.excepthook = _explain_device_errors
    _watch_departure()
    _job.mark_live()
    wait_all(boot.comm, "pgas.init")


def finalize() -> None:
    """Leave the job: a barrier, then release the heap (collective)."""
    global _runtime, _finalized_once
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
    if sys.exit is _exit_ending_job:
        sys.exit = _plain_exit
    if sys.excepthook is _explain_device_errors or (sys.excepthook is _report_and_abort and
                                                    not _job.under_pgasrun()):
        sys.excepthook = sys.__excepthook__
    _job.mark_finalized()
    _runtime, _finalized_once = None, True


_BARRIER_TAG = 0x9A5  # on pgas's private communicators only


def _poll_until(requests, what: str, waiting_for) -> None:
    """Poll ``requests`` until all complete; after PGAS_TIMEOUT raise, naming ``waiting_for()``."""
    from mpi4py import MPI

    timeout = setting("PGAS_TIMEOUT")
    started = time.monotonic()
    deadline = started + timeout
    heartbeat = _job.Heartbeat(what, started)
    pause = 0.0
    while not MPI.Request.Testall(requests):
        now = time.monotonic()
        if now >= heartbeat.due:
            heartbeat.beat(now)
        if now > deadline:
            message = f"{what}: waited PGAS_TIMEOUT={timeout:g} s for {waiting_for()}"
            for request in requests:  # receives only: leave no stale match for a later barrier
                if request != MPI.REQUEST_NULL and not request.Test():
                    request.Cancel()
                    request.Wait()
            raise PgasTimeoutError(message)
        time.sleep(pause)
        pause = min(pause * 2 + 1e-5, 1e-3)


def wait_all(comm, what: str, pes=None) -> None:
    """Barrier over ``comm`` that fails after PGAS_TIMEOUT instead of hanging.

    Arrivals gather at the first member, which then releases the others, so a timeout
    can name the PEs that never arrived. ``pes[r]`` is the PE number of member ``r``
    (default: the rank itself).
    """
    from mpi4py import MPI

    rank, size = comm.Get_rank(), comm.Get_size()
    if size == 1:
        return
    pes = range(size) if pes is None else pes
    if rank == 0:
        arrivals = [comm.Irecv(bytearray(0), source=r, tag=_BARRIER_TAG) for r in range(1, size)]

        def missing():
            done = [req == MPI.REQUEST_NULL or req.Test() for req in arrivals]
            return f"PEs {[pes[r] for r, ok in enumerate(done, 1) if not ok]} to arrive"

        _poll_until(arrivals, what, missing)
        MPI.Request.Waitall([comm.Isend(bytearray(0), dest=r, tag=_BARRIER_TAG) for r in range(1, size)])
    else:
        comm.Isend(bytearray(0), dest=0, tag=_BARRIER_TAG).Free()
        release = comm.Irecv(bytearray(0), source=0, tag=_BARRIER_TAG)
        _poll_until([release], what,
                    lambda: f"PE {pes[0]} to release the barrier (it names the PEs that had not arrived)")


def is_initialized() -> bool:
    """True between ``init`` and ``finalize``."""
    return _runtime is not None


def my_pe() -> int:
    """This PE's number in TEAM_WORLD."""
    return runtime("pgas.my_pe").my_pe


def n_pes() -> int:
    """The number of PEs in the job."""
    return runtime("pgas.n_pes").n_pes


def backend() -> str:
    """The backend in use: ``"simulator"`` or ``"cuda"``."""
    return backend_name()
