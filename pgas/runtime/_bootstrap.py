"""Bootstrap through MPI: who the PEs are and which of them share a node."""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import secrets
import socket
import sys
import tempfile
import threading
from dataclasses import dataclass

import numpy as np

from ..core._env import setting
from ..core._errors import PgasError, PgasValueError

__all__ = ["Bootstrap", "bootstrap", "UniqueId", "new_unique_id", "bootstrap_from_uid", "join_over_port",
           "port_opened_here"]

UID_BYTES = 1024      # MPI_MAX_PORT_NAME of MPICH and Open MPI


@dataclass(frozen=True)
class Bootstrap:
    """The PEs of one pgas job, as MPI sees them."""

    comm: object              # mpi4py communicator private to pgas (a Dup)
    node_comm: object         # the PEs of this node
    my_pe: int
    n_pes: int
    node_of: tuple[int, ...]  # node index of every PE
    job_id: str               # names this job's shared-memory files
    pes_on_host: int          # PEs of the job on this machine (emulated nodes share one)

    @property
    def oversubscribed(self) -> bool:
        """More PEs on this machine than cores this PE may run on: waits should give their
        core away at once rather than poll first (as MPI implementations do)."""
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        return self.pes_on_host > cores

    @property
    def local_pes(self) -> tuple[int, ...]:
        """The PEs that share this PE's node (load/store reachable), this one included."""
        mine = self.node_of[self.my_pe]
        return tuple(pe for pe, node in enumerate(self.node_of) if node == mine)


def _node_keys(hosts: list) -> list:
    """One key per PE (``hosts``: each PE's host name); PEs with equal keys share a node."""
    if setting("PGAS_DISABLE_P2P"):
        return list(range(len(hosts)))
    per_node = setting("PGAS_PES_PER_NODE")
    if per_node is not None:
        return [pe // per_node for pe in range(len(hosts))]
    return hosts


def bootstrap(comm=None) -> Bootstrap:
    """Join the job: from ``comm`` if given, else from MPI's world (a lone program is one PE)."""
    from mpi4py import MPI

    if comm is None:
        comm = MPI.COMM_WORLD
    elif not isinstance(comm, MPI.Comm) or comm == MPI.COMM_NULL:
        raise PgasValueError(f"comm must be an mpi4py communicator, got {comm!r}")
    comm = comm.Dup()
    my_pe, n_pes = comm.Get_rank(), comm.Get_size()
    hosts = comm.allgather(socket.gethostname())
    keys = _node_keys(hosts)
    pes_on_host = hosts.count(hosts[my_pe])
    first_seen: dict = {}
    node_of = tuple(first_seen.setdefault(key, len(first_seen)) for key in keys)
    node_comm = comm.Split(node_of[my_pe], my_pe)
    # pgasrun names the job (so it can sweep up after a crash); each init adds a fresh token.
    launcher_job = os.environ.get("PGAS_JOB_ID", "solo")
    token = comm.bcast(secrets.token_hex(4) if my_pe == 0 else None, root=0)
    return Bootstrap(comm, node_comm, my_pe, n_pes, node_of, f"{launcher_job}-{token}", pes_on_host)


class UniqueId:
    """What ``pgas.get_unique_id()`` returns: the MPI port name on which the process that made
    it (rank 0) accepts the others during ``pgas.init(uid=...)``.

    As nvshmem4py's UniqueID, its bytes are ``_data`` (a numpy array that
    ``comm.Bcast(uid._data.view(np.int8), root=0)`` fills in on the other processes); it
    also pickles, and ``bytes(uid)`` / ``UniqueId.from_bytes(b)`` carry it through a file.
    """

    def __init__(self, port: str = ""):
        encoded = port.encode()
        if len(encoded) >= UID_BYTES:
            raise PgasError(f"pgas.get_unique_id: the MPI port name has {len(encoded)} bytes, more than the "
                            f"{UID_BYTES - 1} a unique id holds")
        self._data = np.zeros(UID_BYTES, np.uint8)
        self._data[:len(encoded)] = np.frombuffer(encoded, np.uint8)

    @property
    def port(self) -> str:
        raw = self._data.tobytes()
        return raw[:raw.index(0) if 0 in raw else len(raw)].decode()

    @property
    def is_empty(self) -> bool:
        return not self._data.any()

    def __bytes__(self) -> bytes:
        return self._data.tobytes()

    @classmethod
    def from_bytes(cls, data: bytes) -> "UniqueId":
        """The id whose ``bytes()`` are ``data``."""
        if len(data) != UID_BYTES:
            raise PgasValueError(f"pgas.UniqueId.from_bytes: data must hold {UID_BYTES} bytes (bytes(uid)), "
                                 f"got {len(data)}")
        uid = cls()
        uid._data[:] = np.frombuffer(data, np.uint8)
        return uid

    def __eq__(self, other) -> bool:
        return isinstance(other, UniqueId) and bytes(self) == bytes(other)

    def __hash__(self) -> int:
        return hash(bytes(self))

    def __repr__(self) -> str:
        return "UniqueId(<empty>)" if self.is_empty else f"UniqueId({self.port!r})"


_open_ports: set = set()    # the ports get_unique_id opened in this process, not yet closed


def new_unique_id() -> UniqueId:
    """Open an MPI port for a uid bootstrap; this process is to be its rank 0."""
    from mpi4py import MPI

    port = MPI.Open_port()
    _open_ports.add(port)
    return UniqueId(port)


def port_opened_here(port: str) -> bool:
    """True where ``new_unique_id`` opened ``port`` in this process (not yet closed)."""
    return port in _open_ports


def _close_port(port: str) -> None:
    from mpi4py import MPI

    if port in _open_ports:
        _open_ports.discard(port)
        MPI.Close_port(port)


def _mpich_singleton() -> bool:
    """True in a process that MPICH 5 runs as a singleton (no process manager: no PMI_*
    variables), where connect/accept between processes does not work."""
    from mpi4py import MPI

    version = MPI.Get_library_version()
    return (version.startswith("MPICH Version:") and version.split()[2].startswith("5.")
            and not any(name in os.environ for name in ("PMI_FD", "PMI_PORT", "PMI_RANK", "PMIX_RANK")))


def _connect_lock_path(port: str) -> str:
    return os.path.join(tempfile.gettempdir(), f"pgas-uid-{hashlib.sha1(port.encode()).hexdigest()[:16]}.lock")


@contextlib.contextmanager
def _one_connect_at_a_time(port: str):
    """Connects to one port must not overlap: MPICH 5.0 crashes in the accepting process when
    a second connect arrives during an accept (seen with 3 processes). A file lock on this
    machine orders them (the processes of a uid bootstrap on several machines connect as they
    come)."""
    with open(_connect_lock_path(port), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)     # blocks in the kernel: no spinning
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@contextlib.contextmanager
def _ends_process_after(timeout: float, fn: str, waiting_for, before_exit):
    """End this process (status 1, saying why, after ``before_exit()``) if the block lasts
    more than ``timeout`` seconds: MPI's accept and connect wait for the other side without
    end and cannot be interrupted. ``waiting_for()`` says for what. A thread that sleeps on
    an event."""
    finished = threading.Event()

    def watch():
        if not finished.wait(timeout):
            with contextlib.suppress(OSError):
                before_exit()
            sys.stderr.write(f"{fn}: waited PGAS_TIMEOUT={timeout:g} s for {waiting_for()}; ending this process "
                             "(MPI's accept and connect cannot be interrupted)\n")
            sys.stderr.flush()
            os._exit(1)
    threading.Thread(target=watch, name="pgas-join-timeout", daemon=True).start()
    try:
        yield
    finally:
        finished.set()


def join_over_port(port: str, index: int, count: int, fn: str, what: str = "rank"):
    """The communicator of the ``count`` processes that call this with ``port``, ordered by
    ``index`` (each gives a different one in [0, count)): index 0, the process that opened
    ``port``, accepts; each other one connects. The intercommunicators are merged as they
    come (every member so far accepts the next one), then ordered. Closes the port (index
    0). The caller frees the communicator."""
    from mpi4py import MPI

    made = []
    comm = MPI.COMM_SELF

    def waiting_for():
        joined = comm.Get_size()
        return (f"{count - joined} of the {count} processes to join over the port ({joined} have, this one "
                f"with {what} {index} included)" if index == 0 or joined > 1 else
                f"the process with {what} 0 to accept this one ({what} {index}) on its port")
    try:
        try:
            with _ends_process_after(setting("PGAS_TIMEOUT"), fn, waiting_for,
                                     lambda: index == 0 and os.unlink(_connect_lock_path(port))):
                if index != 0:
                    with _one_connect_at_a_time(port):
                        inter = MPI.COMM_SELF.Connect(port)
                        comm = inter.Merge(high=True)
                    made += [inter, comm]
                while comm.Get_size() < count:
                    inter = comm.Accept(port, root=0)
                    comm = inter.Merge(high=False)
                    made += [inter, comm]
                indices = comm.allgather(index)
        except MPI.Exception as exc:
            raise PgasError(f"{fn}: joining over the MPI port failed ({exc.Get_error_string().splitlines()[0]})") \
                from None
        if sorted(indices) != list(range(count)):
            raise PgasValueError(f"{fn}: the {count} processes must give each {what} in [0, {count}) once, "
                                 f"got {sorted(indices)}")
        return comm.Split(0, index)
    finally:
        if index == 0:
            _close_port(port)
            with contextlib.suppress(OSError):
                os.unlink(_connect_lock_path(port))
        for handle in reversed(made):
            handle.Free()


def bootstrap_from_uid(uid: UniqueId, rank: int, nranks: int, fn: str) -> Bootstrap:
    """Join the ``nranks`` processes that call this with ``uid``: rank 0 (which made ``uid``)
    accepts on its port, each other one connects (``join_over_port``), and pgas bootstraps
    from the result, ordered by ``rank``, as from a communicator."""
    from mpi4py import MPI

    port = uid.port
    mine = port in _open_ports
    if rank == 0 and not mine:
        raise PgasValueError(f"{fn}: rank 0 must be the process that called pgas.get_unique_id() for this uid "
                             "(it accepts the others on the uid's MPI port)")
    if rank != 0 and mine:
        raise PgasValueError(f"{fn}: this process made the uid with pgas.get_unique_id(), so it must be rank 0, "
                             f"got rank={rank}")
    if nranks > 1 and _mpich_singleton():
        if mine:
            _close_port(port)
        raise PgasError(f"{fn}: this process was started without mpiexec (an MPI singleton), and MPICH "
                        f"{MPI.Get_library_version().split()[2]} cannot connect singletons to each other "
                        "(MPI_Comm_connect/accept fail or crash: pmodels/mpich#7805). Start each process with "
                        "`mpiexec -n 1 python ...` (no other change needed), or launch them together with pgasrun")
    ordered = join_over_port(port, rank, nranks, fn)
    try:
        return bootstrap(ordered)
    finally:
        ordered.Free()
