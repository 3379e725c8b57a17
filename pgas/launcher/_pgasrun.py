"""``pgasrun``: start N PEs through the installed MPI's mpiexec (Hydra), like nvshmrun.

On top of mpiexec it adds emulated nodes (``--pes-per-node``), a whole-run timeout,
output passed on whole lines at a time (optionally tagged with the PE), and clean failure:

- the first PE that raises, exits non-zero or is killed ends the run: the others are
  stopped, the failing PE and how it ended are named on stderr, and the exit status is
  that PE's (its exit status; 128 + the signal that killed it; 1 for an exception);
- a PE that exits with status 0 between ``pgas.init`` and ``pgas.finalize`` ends the run
  (status 1) as soon as another PE blocks in a pgas call waiting for it;
- no shared-memory file of the run is left behind, and no other job's is touched;
- the PEs end when pgasrun does, even when it is killed with SIGKILL.
"""
from __future__ import annotations

import argparse
import ctypes
import glob
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from ..core import _job
from ..core._backend import backend_name
from ..core._env import invalid_settings, unknown_settings
from ..core._errors import PgasError
from ..core._job import SHM_DIR, shm_prefix, stat_fields
from ._diagnosis import StoppedPes, pe_list, stranded, where_waits_lead
from ._output import Relay
from ._stdin import FIFO_VARIABLE, Pump

__all__ = ["main"]

MAX_PES = 4096
MAX_PES_PER_CORE = 32   # on one host; beyond this a run is a typo, not a job
STOP_GRACE_S = 2.0      # after SIGTERM, before SIGKILL


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pgasrun", description="Start a pgas program on N processing elements (PEs).",
        epilog="example: pgasrun -np 4 python examples/shift.py")
    parser.add_argument("-np", "-n", dest="np", type=int, required=True, metavar="N",
                        help="number of PEs to start")
    parser.add_argument("--pes-per-node", type=int, metavar="K",
                        help="split the PEs into emulated nodes of K (no load/store between them)")
    hosts = parser.add_mutually_exclusive_group()
    hosts.add_argument("--hosts", metavar="H1,H2", help="comma-separated hosts, passed to mpiexec")
    hosts.add_argument("--hostfile", metavar="F", help="host file, passed to mpiexec")
    parser.add_argument("--timeout", type=float, metavar="S",
                        help="stop every PE and fail if the run takes longer than S seconds")
    parser.add_argument("--tag-output", action="store_true",
                        help="prefix every output line with the PE number")
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="CMD...",
                        help="the program each PE runs, with its arguments")
    return parser


def _validate(parser: argparse.ArgumentParser, args) -> None:
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    if args.command[:1] in (["python"], ["python3"], [f"python{sys.version_info[0]}.{sys.version_info[1]}"]):
        args.command = [sys.executable, *args.command[1:]]   # the interpreter pgasrun runs in (its venv)
    if not args.command:
        parser.error("missing the command to run (e.g. pgasrun -np 2 python prog.py)")
    if args.np < 1:
        parser.error(f"-np must be at least 1, got {args.np}")
    one_host = not (args.hosts or args.hostfile)
    limit = min(MAX_PES, MAX_PES_PER_CORE * (os.cpu_count() or 1)) if one_host else MAX_PES
    if args.np > limit:
        where = f"{MAX_PES_PER_CORE} per core on this {os.cpu_count()}-core host" if one_host else "the maximum"
        parser.error(f"-np {args.np} is more than {limit} PEs ({where})")
    if args.pes_per_node is not None and args.pes_per_node < 1:
        parser.error(f"--pes-per-node must be at least 1, got {args.pes_per_node}")
    if args.timeout is not None and args.timeout <= 0:
        parser.error(f"--timeout must be a number of seconds > 0, got {args.timeout}")
    if args.hostfile and not os.path.isfile(args.hostfile):
        parser.error(f"--hostfile {args.hostfile!r} does not exist")
    if one_host and shutil.which(args.command[0]) is None:
        parser.error(f"command not found: {args.command[0]!r}")


def _mpiexec() -> str:
    beside_python = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    found = beside_python if os.access(beside_python, os.X_OK) else shutil.which("mpiexec")
    if found is None:
        raise PgasError("pgasrun: no mpiexec found; install an MPI (pip install mpich)")
    return found


# Files MPICH and Hydra make for a run and remove when it ends normally: MPICH's shared
# memory, and the topology Hydra's proxy writes (always in /tmp) and holds open for the run.
_MPI_FILES = (os.path.join(SHM_DIR, "mpich_shm_*"), _job.HYDRA_TOPOLOGY + "*")


def _mpich_segments() -> set[str]:
    return set().union(*(glob.glob(pattern) for pattern in _MPI_FILES))


def _in_use(paths: set[str], pids) -> set[str]:
    """Those of ``paths`` that processes ``pids`` map or hold open."""
    used = set()
    for pid in pids:
        proc = f"/proc/{pid}"
        try:
            with open(os.path.join(proc, "maps")) as maps:
                text = maps.read()
            fds = [os.readlink(fd) for fd in glob.glob(os.path.join(proc, "fd", "*"))]
        except OSError:
            continue
        used.update(p for p in paths if p in text or p in fds)
    return used


class _SegmentWatch:
    """The files of ``_MPI_FILES`` this run's processes created (MPICH's shared memory,
    Hydra's topology file): their names are random, so a file is this run's when one of
    its processes maps or holds it while it exists. Files of other jobs (or users) are
    never this run's; a killed run's are removed with the run."""

    LOOKS = 10      # a new file no process of the run uses after this many looks is not ours

    def __init__(self):
        self.before = _mpich_segments()
        self.ours: set[str] = set()
        self.looks: dict[str, int] = {}

    def unattributed(self) -> set[str]:
        """Segments that appeared since the run began and still wait for an owner."""
        return {p for p in _mpich_segments() - self.before - self.ours if self.looks.get(p, 0) < self.LOOKS}

    def look(self, new: set[str], pids: list[int]) -> None:
        """Attribute ``new`` segments to the processes ``pids`` of the run, if they use them."""
        for path in new:
            self.looks[path] = self.looks.get(path, 0) + 1
        self.ours |= _in_use(new, pids)

    def leftovers(self) -> set[str]:
        return {path for path in self.ours if os.path.exists(path)}


def _sweep_shared_memory(job_id: str, run_dir: str, segments: _SegmentWatch) -> None:
    """Remove this run's segments, and MPICH's that a killed PE of it could not unlink."""
    mine = set(glob.glob(os.path.join(SHM_DIR, shm_prefix(job_id) + "*"))) | segments.leftovers()
    recorded = {p for p in _job.recorded_segments(run_dir)
                if p.startswith((SHM_DIR + "/mpich_shm_", _job.HYDRA_TOPOLOGY))}
    for path in mine | recorded:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def _descendants(root: int) -> list[int]:
    """``root`` and every process below it (Hydra puts each PE in a process group of its own)."""
    children: dict[int, list[int]] = {}
    for stat_path in glob.glob("/proc/[0-9]*/stat"):
        fields = stat_fields(stat_path)
        if fields:
            children.setdefault(int(fields[1]), []).append(int(stat_path.split("/")[2]))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _alive(pid: int) -> bool:
    """True while process ``pid`` runs (a zombie has ended)."""
    fields = stat_fields(f"/proc/{pid}/stat")
    return bool(fields) and fields[0] not in ("Z", "X")


class _RunProcesses:
    """mpiexec and every process below it, as seen so far (Hydra gives each PE a process
    group of its own, and a PE may outlive mpiexec), with the MPICH segments they use."""

    def __init__(self, proc: subprocess.Popen, segments: _SegmentWatch):
        self.proc = proc
        self.segments = segments
        self.known = {proc.pid}
        self._refreshed = 0.0

    def alive(self) -> list[int]:
        return [pid for pid in self.known if _alive(pid)]

    REFRESH_S = 1.0     # how often the list of the run's processes is read again

    def look(self) -> None:
        """Learn new processes of the run (now and then, or when a new segment needs an
        owner: reading /proc is not free), and the segments they map."""
        unknown = self.segments.unattributed()
        if self.proc.poll() is None and (unknown or time.monotonic() > self._refreshed + self.REFRESH_S):
            self.known.update(_descendants(self.proc.pid))
            self._refreshed = time.monotonic()
        if unknown:
            self.segments.look(unknown, self.alive())

    def wait_gone(self, seconds: float) -> bool:
        """Wait until every known process has ended (looking at segments meanwhile)."""
        deadline = time.monotonic() + seconds
        while True:
            self.look()
            if not self.alive():
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)

    def stop(self) -> None:
        """SIGTERM mpiexec's group (Hydra then stops the PEs), then SIGKILL what is left."""
        self.look()
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        if self.wait_gone(STOP_GRACE_S):
            return
        for pid in self.alive():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.wait_gone(STOP_GRACE_S)

    def finish(self) -> int:
        """mpiexec's exit status, once every process of the run is gone: a PE that outlives
        mpiexec still maps MPICH's segments, which the sweep must not miss."""
        code = self.proc.wait()
        if not self.wait_gone(STOP_GRACE_S):
            self.stop()
        return code


def _supervise(run: _RunProcesses, run_dir: str, timeout: float | None) -> tuple[int, str | None]:
    """Wait for the run; stop it at the first failure, at a PE that left the others
    waiting, or at the timeout. (exit status, message)"""
    deadline = None if timeout is None else time.monotonic() + timeout
    cause = (None, None)    # (failed PE, where its waits lead)
    stopped = StoppedPes()
    stranded_since = None   # when a PE was first seen gone with others waiting for it
    while run.proc.poll() is None:
        run.look()
        stopped.look(run_dir)
        failed = [f for f in _job.failures(run_dir) if not f[2].startswith(_job.CHECK_FAILED)]
        if failed:   # before the stop ends the heartbeats:
            cause = failed[0][1], where_waits_lead(run_dir, failed[0][1], stopped)
            time.sleep(0.2)  # let the PE's own abort finish its report
            run.stop()
            break
        left_early = stranded(run_dir)
        if left_early:
            # the PEs still on their way into a wait beat within one period: name them too
            if stranded_since is None:
                stranded_since = time.monotonic()
            settled = set(_job.waiters(run_dir)) | set(_job.departed(run_dir)) >= set(_job.live(run_dir))
            if settled or time.monotonic() - stranded_since > _job.HEARTBEAT_AFTER_S + _job.HEARTBEAT_EVERY_S:
                run.stop()
                return 1, f"{stranded(run_dir) or left_early}; every PE was stopped"
        if deadline is not None and time.monotonic() > deadline:
            run.stop()
            return 124, f"the run took longer than --timeout {timeout:g} s; every PE was stopped"
        time.sleep(0.05)
    code = run.finish()
    failures = _job.failures(run_dir)
    if failures and all(f[2].startswith(_job.CHECK_FAILED) for f in failures):
        return 1, f"every PE {failures[0][2]}"
    if failures:
        _, pe, how, pe_code = failures[0]
        others = len(failures) - 1
        extra = f" ({others} more PE{'s' if others > 1 else ''} failed after it)" if others else ""
        because = f"; {cause[1]}" if cause[1] and cause[0] == pe else ""
        status = pe_code if how.startswith(_job.GLOBAL_EXIT) else pe_code or 1
        return status, f"PE {pe} {how}; the other PEs were stopped{extra}{because}"
    left = _job.departed(run_dir)
    # MPI itself ended the others (a PE that skipped MPI's finalize), whatever mpiexec says
    if left and (code != 0 or set(_job.live(run_dir)) - set(left)):
        return 1, (f"{pe_list(left)} exited (status 0) before pgas.finalize; the other PEs were stopped "
                   f"(mpiexec ended with status {code})")
    if code != 0:
        return (code if code > 0 else 128 - code), f"mpiexec ended with status {code}"
    if left:    # nobody waited for them: the run completed, but say it
        return 0, f"note: {pe_list(left)} exited before pgas.finalize"
    return 0, None


def _end_with_pgasrun() -> None:
    """In mpiexec, before exec: SIGTERM it (and so the PEs) when pgasrun ends, however."""
    ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)     # PR_SET_PDEATHSIG


class _Interrupted(Exception):
    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _interrupted(signum, _frame):
    raise _Interrupted(signum)


def _ignore_further_signals() -> None:
    """Once pgasrun is stopping the run, a second Ctrl-C (or SIGTERM, SIGHUP) changes
    nothing: the stop escalates to SIGKILL by itself, and the run ends with one summary."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``pgasrun`` command."""
    parser = _parser()
    args = parser.parse_args(argv)
    _validate(parser, args)
    bad = invalid_settings()
    if bad:
        for message in bad.values():
            print(f"pgasrun: {message}", file=sys.stderr)
        return 2
    for warning in unknown_settings().values():     # once, for all PEs
        print(f"pgasrun: warning: {warning}", file=sys.stderr)
    try:
        backend = backend_name()  # says which backend once, for all PEs
        mpiexec = _mpiexec()
    except PgasError as exc:
        print(f"pgasrun: {exc}", file=sys.stderr)
        return 2
    job_id = secrets.token_hex(4)
    run_dir = tempfile.mkdtemp(prefix=f"pgasrun-{job_id}-")
    env = dict(os.environ, PGAS_JOB_ID=job_id, PGAS_RUN_DIR=run_dir, PGAS_BACKEND=backend,
               PGAS_BACKEND_NOTICE_GIVEN="1", PGAS_LAUNCHER_PID=str(os.getpid()),
               PGAS_LAUNCHER_HOST=socket.gethostname(), PGAS_TAG_OUTPUT="1" if args.tag_output else "0")
    if backend == "simulator":
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    if args.pes_per_node is not None:
        env["PGAS_PES_PER_NODE"] = str(args.pes_per_node)
    cmd = [mpiexec, "-n", str(args.np)]
    if args.hosts:
        cmd += ["-hosts", args.hosts]
    if args.hostfile:
        cmd += ["-f", args.hostfile]
    cmd += [sys.executable, "-m", "pgas.launcher._pe_guard", *args.command]
    segments = _SegmentWatch()
    one_host = not (args.hosts or args.hostfile)
    # On this host each PE's guard ends its PE (and cleans up) when pgasrun is gone; on other
    # hosts mpiexec must end the PEs, so it gets SIGTERM when pgasrun dies.
    if one_host:
        env[FIFO_VARIABLE] = Pump(run_dir).path     # PE 0 runs here: it reads stdin from pgasrun
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    proc = subprocess.Popen(cmd, env=env, start_new_session=True,
                            stdin=subprocess.DEVNULL if one_host else None, stdout=out_w, stderr=err_w,
                            preexec_fn=None if one_host else _end_with_pgasrun)
    os.close(out_w)
    os.close(err_w)
    relay = Relay(out_r, err_r)         # the PEs' output, whole lines at any length
    run = _RunProcesses(proc, segments)
    # The PEs run in their own session: a SIGTERM or SIGHUP for pgasrun must reach them too.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupted)
    try:
        code, message = _supervise(run, run_dir, args.timeout)
    except (_Interrupted, KeyboardInterrupt) as stop:
        _ignore_further_signals()
        run.stop()
        if isinstance(stop, _Interrupted):
            code, message = 128 + stop.signum, f"stopped by {signal.Signals(stop.signum).name}; every PE was stopped"
        else:
            code, message = 130, "interrupted; every PE was stopped"
    finally:
        relay.join(STOP_GRACE_S)        # the PEs' last words before pgasrun's own
        _sweep_shared_memory(job_id, run_dir, segments)
        shutil.rmtree(run_dir, ignore_errors=True)
    if code != 0:
        # A PE killed while MPICH set up a segment can leave it to appear a moment after the
        # run's processes are gone (seen once in CI): look again.
        time.sleep(0.3)
        _sweep_shared_memory(job_id, run_dir, segments)
    if message:
        print(f"pgasrun: {message}", file=sys.stderr)
    return code

