"""Bootstrap through MPI: who the PEs are and which of them share a node."""
from __future__ import annotations

import os
import secrets
import socket
from dataclasses import dataclass

from ..core._env import setting
from ..core._errors import PgasValueError

__all__ = ["Bootstrap", "bootstrap"]


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
