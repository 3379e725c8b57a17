"""What a PE tells ``pgasrun`` while the job runs: small files in the run's directory.

pgasrun gives every PE the directory in ``PGAS_RUN_DIR`` and reads it while it waits:

- ``failed-pe<N>``: how PE N failed and the exit status the run ends with (JSON), written
  by the PE itself (an uncaught exception, a non-zero ``sys.exit``) or by its guard
  (``pgas.launcher._pe_guard``: a crash, a signal); the first writer wins, as it knows the most;
- ``live-pe<N>``: PE N is between ``pgas.init`` and ``pgas.finalize``;
- ``left-pe<N>``: PE N ended with status 0 while live; the collective calls the others
  make (finalize among them) can never complete;
- ``segments-pe<N>``: MPICH's shared-memory files PE N maps after ``pgas.init`` (pgasrun
  removes them should the run end before MPI could);
- ``waiting-pe<N>``: the pgas call PE N has been blocked in for a while, rewritten every
  quarter of a second while the wait goes on (a heartbeat: an old file means it ended).

``N`` is the PE's rank in the launcher's job (``PMI_RANK``). Outside pgasrun (no
``PGAS_RUN_DIR``) the writers do nothing.
"""
from __future__ import annotations

import glob
import json
import math
import os
import socket
import threading
import time

__all__ = ["GLOBAL_EXIT", "CHECK_FAILED", "under_pgasrun", "mapped_segments", "record_segments",
           "release_topology_file", "recorded_segments", "record_failure", "failures",
           "mark_live", "mark_finalized", "record_departure", "live", "live_processes", "departed", "Heartbeat", "waiters",
           "HEARTBEAT_FRESH_S", "SHM_DIR", "shm_prefix", "HYDRA_TOPOLOGY", "hydra_topology_files", "stat_fields"]

SHM_DIR = "/dev/shm"

HEARTBEAT_AFTER_S = 0.2     # waits shorter than this are never reported
HEARTBEAT_EVERY_S = 0.25
HEARTBEAT_FRESH_S = 1.0     # pgasrun: a heartbeat older than this is a wait that ended


def _run_dir() -> str | None:
    return os.environ.get("PGAS_RUN_DIR") or None


_UNDER_PGASRUN = _run_dir() is not None     # fixed for the life of a PE


def under_pgasrun() -> bool:
    """True in a PE started by pgasrun."""
    return _run_dir() is not None


def _pe() -> str:
    return os.environ.get("PMI_RANK", "?")


def _write(name: str, text: str) -> None:
    """Replace ``name`` in the run directory as a whole (readers never see half of it)."""
    directory = _run_dir()
    if directory is None:
        return
    temporary = os.path.join(directory, f".{name}.{os.getpid()}.{threading.get_ident()}")
    try:
        with open(temporary, "w") as out:
            out.write(text)
        os.replace(temporary, os.path.join(directory, name))
    except OSError:
        pass    # the run is being torn down (pgasrun removed its directory)


def _exists(name: str) -> bool:
    directory = _run_dir()
    return directory is not None and os.path.exists(os.path.join(directory, name))


def _pes_with(run_dir: str, prefix: str) -> list[tuple[int, str]]:
    """(PE, path) of the files ``<prefix><PE>`` in ``run_dir``."""
    found = []
    for path in glob.glob(os.path.join(run_dir, prefix + "*")):
        suffix = path.rsplit(prefix, 1)[1]
        if suffix.isdigit():
            found.append((int(suffix), path))
    return found


# Failures ----------------------------------------------------------------------------

GLOBAL_EXIT = "called pgas.global_exit"    # a recorded failure that ends the run with its status, even 0
# A PE whose finalize found problems under PGAS_CHECK=1: the run is let finish, then fails.
CHECK_FAILED = "finished pgas.finalize, where PGAS_CHECK=1 found problems"


def record_failure(how: str, code: int) -> None:
    """Tell pgasrun that this PE failed (``how``: "raised ValueError: ...") and that the
    run should end with status ``code``; a record already written is kept."""
    name = f"failed-pe{_pe()}"
    if not _exists(name):
        _write(name, json.dumps({"how": how, "code": code}))


def failures(run_dir: str) -> list[tuple[float, int, str, int]]:
    """(time, PE, how, exit status) of every recorded failure, the first first."""
    found = []
    for pe, path in _pes_with(run_dir, "failed-pe"):
        try:
            with open(path) as record:
                fields = json.load(record)
            found.append((os.path.getmtime(path), pe, fields["how"], int(fields["code"])))
        except (OSError, ValueError, KeyError):
            continue    # being replaced right now: read again at the next look
    return sorted(found)


# Shared-memory files -----------------------------------------------------------------

def mapped_segments(pid: int | str = "self") -> set[str]:
    """MPICH's shared-memory files that process ``pid`` maps (none if it cannot be read)."""
    try:
        with open(f"/proc/{pid}/maps") as maps:
            found = {line.split()[-1] for line in maps if "/dev/shm/mpich_shm_" in line}
    except OSError:
        return set()
    return {path for path in found if path.startswith("/dev/shm/")}    # not "(deleted)"


HYDRA_TOPOLOGY = "/tmp/hydra_hwloc_xmlfile_"     # Hydra's proxy writes the node's topology there


def hydra_topology_files(pid: int | str) -> set[str]:
    """The topology file(s) Hydra's proxy ``pid`` holds open for the run (it opens one
    when the first PE's MPI asks for the topology, and removes it when it ends normally)."""
    found = set()
    for fd in glob.glob(f"/proc/{pid}/fd/*"):
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith(HYDRA_TOPOLOGY):
            found.add(target)
    return found


def stat_fields(stat_path: str) -> list[str]:
    """The fields of a /proc/<pid>/stat after the command name (state, ppid, ...); [] if gone."""
    try:
        with open(stat_path) as stat:
            return stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def _ancestors(levels: int) -> list[int]:
    """This process's parent, its parent's parent, ... (``levels`` of them, fewer at init)."""
    found, pid = [], os.getpid()
    for _ in range(levels):
        fields = stat_fields(f"/proc/{pid}/stat")
        pid = int(fields[1]) if fields else 0
        if pid <= 1:
            break
        found.append(pid)
    return found


def record_segments() -> None:
    """Tell pgasrun (and the PE's guard) which of MPICH's shared-memory files this PE maps,
    and which topology file Hydra's proxy (the guard's parent) holds, once MPI is up: a run
    killed with its proxy leaves them, and their names are random."""
    if under_pgasrun():
        held = set().union(*(hydra_topology_files(pid) for pid in _ancestors(2)))
        _write(f"segments-pe{_pe()}", "\n".join(sorted(mapped_segments() | held)))


def release_topology_file() -> None:
    """Remove the topology file Hydra's proxy wrote for this run, once every PE has passed
    MPI's start (MPICH reads it there, and not again): the proxy removes it only when it
    ends normally, and a run killed with its proxy (kill -9 of pgasrun: mpiexec and then
    the proxy die, and the proxy SIGKILLs the guards) would leave it in /tmp."""
    if under_pgasrun():
        for path in set().union(*(hydra_topology_files(pid) for pid in _ancestors(2))):
            try:
                os.unlink(path)
            except OSError:
                pass        # (another PE of the node was first)


def recorded_segments(run_dir: str) -> set[str]:
    """The MPICH and Hydra files the PEs of the run said they map or their proxies hold."""
    found = set()
    for _, path in _pes_with(run_dir, "segments-pe"):
        try:
            with open(path) as record:
                found.update(line for line in record.read().splitlines() if line)
        except OSError:
            continue
    return found


# Leaving before finalize -----------------------------------------------------------

def mark_live() -> None:
    """This PE called ``pgas.init`` (the file holds its process id and host)."""
    _write(f"live-pe{_pe()}", json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))


def mark_finalized() -> None:
    """This PE completed ``pgas.finalize``."""
    directory = _run_dir()
    if directory is not None:
        try:
            os.unlink(os.path.join(directory, f"live-pe{_pe()}"))
        except OSError:
            pass


def record_departure() -> None:
    """This PE ends with status 0; if it is still live, tell pgasrun it left the job."""
    if _exists(f"live-pe{_pe()}") and not _exists(f"left-pe{_pe()}"):
        _write(f"left-pe{_pe()}", "exited (status 0) before pgas.finalize")


def live(run_dir: str) -> list[int]:
    """The PEs that called ``pgas.init`` and have not completed ``pgas.finalize``."""
    return sorted(pe for pe, _ in _pes_with(run_dir, "live-pe"))


def live_processes(run_dir: str) -> dict[int, tuple[int, str]]:
    """PE -> (process id, host) of the live PEs."""
    found = {}
    for pe, path in _pes_with(run_dir, "live-pe"):
        try:
            with open(path) as record:
                fields = json.load(record)
            found[pe] = (int(fields["pid"]), fields["host"])
        except (OSError, ValueError, KeyError):
            continue
    return found


def departed(run_dir: str) -> list[int]:
    """The PEs that ended before ``pgas.finalize``."""
    return sorted(pe for pe, _ in _pes_with(run_dir, "left-pe"))


# Waits -------------------------------------------------------------------------------

class Heartbeat:
    """Tells pgasrun that a wait in pgas call ``fn``, begun at ``started`` (monotonic), goes
    on, and which PEs it waits for (``waits_for()``, a list; None: not one PE in particular,
    e.g. a signal any PE may set). Wait loops compare ``time.monotonic()`` with ``due`` (one
    comparison per turn, so hot loops pay nothing) and call ``beat`` when it has come: after
    HEARTBEAT_AFTER_S, then every HEARTBEAT_EVERY_S. Outside pgasrun it is never due."""

    __slots__ = ("fn", "due", "waits_for")

    def __init__(self, fn: str, started: float, waits_for=None):
        self.fn = fn
        self.waits_for = waits_for
        self.due = started + HEARTBEAT_AFTER_S if _UNDER_PGASRUN else math.inf

    def beat(self, now: float) -> None:
        self.due = now + HEARTBEAT_EVERY_S
        pes = [int(pe) for pe in self.waits_for()] if self.waits_for is not None else []
        _write(f"waiting-pe{_pe()}", json.dumps({"fn": self.fn, "for": pes}))


def waiters(run_dir: str) -> dict[int, tuple[str, list[int]]]:
    """PE -> (the pgas call it is blocked in now, the PEs it waits for), from the
    heartbeats of the last HEARTBEAT_FRESH_S."""
    now = time.time()
    found = {}
    for pe, path in _pes_with(run_dir, "waiting-pe"):
        try:
            if now - os.path.getmtime(path) < HEARTBEAT_FRESH_S:
                with open(path) as record:
                    fields = json.load(record)
                found[pe] = (fields["fn"], [int(p) for p in fields["for"]])
        except (OSError, ValueError, KeyError):
            continue
    return found


def shm_prefix(launcher_job: str) -> str:
    """File-name prefix of every shared-memory segment of a pgasrun job: the simulator's
    heaps (``pgas.sim``) are named so, and pgasrun sweeps up what a killed PE leaves."""
    return f"pgas-{launcher_job}-"
