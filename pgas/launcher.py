"""``pgasrun``: start N PEs through the installed MPI's mpiexec (Hydra), like nvshmrun.

On top of mpiexec it adds emulated nodes (``--pes-per-node``), a whole-run timeout,
tagged output, and clean failure: the first PE that raises, exits non-zero or is killed
ends the run; the others are stopped, the exit status is non-zero, the failing PE and how
it ended are named on stderr, and no shared-memory file of the run is left behind.
"""
from __future__ import annotations

import argparse
import glob
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from ._backend import backend_name
from ._errors import PgasError
from .host._heap import SHM_DIR, shm_prefix

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


def _mpich_leftovers() -> set[str]:
    return set(glob.glob(os.path.join(SHM_DIR, "mpich_shm_*")))


def _in_use(paths: set[str]) -> set[str]:
    """Those of ``paths`` that some live process still maps or holds open."""
    used = set()
    for proc in glob.glob("/proc/[0-9]*"):
        try:
            with open(os.path.join(proc, "maps")) as maps:
                text = maps.read()
            fds = [os.readlink(fd) for fd in glob.glob(os.path.join(proc, "fd", "*"))]
        except OSError:
            continue
        used.update(p for p in paths if p in text or p in fds)
    return used


def _sweep_shared_memory(job_id: str, mpich_before: set[str]) -> None:
    """Remove this run's segments, and MPICH's that a killed PE could not unlink."""
    leftovers = set(glob.glob(os.path.join(SHM_DIR, shm_prefix(job_id) + "*")))
    new_mpich = _mpich_leftovers() - mpich_before
    leftovers |= new_mpich - _in_use(new_mpich)
    for path in leftovers:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def _live_members(group: int) -> list[int]:
    """Processes of process group ``group`` that are still running (zombies excluded)."""
    members = []
    for stat_path in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat_path) as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        state, pgrp = fields[0], int(fields[2])
        if pgrp == group and state not in ("Z", "X"):
            members.append(int(stat_path.split("/")[2]))
    return members


def _wait_group_gone(group: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while _live_members(group):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _stop(proc: subprocess.Popen) -> None:
    """Stop mpiexec and every process it started (they share its process group)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        if _wait_group_gone(proc.pid, STOP_GRACE_S):
            return


def _finish(proc: subprocess.Popen) -> int:
    """mpiexec's exit status, once every process of the run is gone: a PE that outlives
    mpiexec still maps MPICH's segments, which the sweep must not miss."""
    code = proc.wait()
    if not _wait_group_gone(proc.pid, STOP_GRACE_S):
        _stop(proc)
    return code


def _failures(run_dir: str) -> list[tuple[float, str, str]]:
    found = []
    for path in glob.glob(os.path.join(run_dir, "failed-pe*")):
        with open(path) as record:
            found.append((os.path.getmtime(path), path.rsplit("failed-pe", 1)[1], record.read()))
    return sorted(found)


def _supervise(proc: subprocess.Popen, run_dir: str, timeout: float | None) -> tuple[int, str | None]:
    """Wait for the run; stop it at the first failure or at the timeout."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while proc.poll() is None:
        if _failures(run_dir):
            time.sleep(0.2)  # let the PE's own abort finish its report
            _stop(proc)
            break
        if deadline is not None and time.monotonic() > deadline:
            _stop(proc)
            return 124, f"the run took longer than --timeout {timeout:g} s; every PE was stopped"
        time.sleep(0.05)
    code = _finish(proc)
    failures = _failures(run_dir)
    if failures:
        _, pe, how = failures[0]
        others = len(failures) - 1
        extra = f" ({others} more PE{'s' if others > 1 else ''} failed after it)" if others else ""
        return (code if code > 0 else 1), f"PE {pe} {how}; the other PEs were stopped{extra}"
    if code != 0:
        return (code if code > 0 else 128 - code), f"mpiexec ended with status {code}"
    return 0, None


class _Interrupted(Exception):
    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _interrupted(signum, _frame):
    raise _Interrupted(signum)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``pgasrun`` command."""
    parser = _parser()
    args = parser.parse_args(argv)
    _validate(parser, args)
    try:
        backend = backend_name()  # says which backend once, for all PEs
        mpiexec = _mpiexec()
    except PgasError as exc:
        print(f"pgasrun: {exc}", file=sys.stderr)
        return 2
    job_id = secrets.token_hex(4)
    run_dir = tempfile.mkdtemp(prefix=f"pgasrun-{job_id}-")
    env = dict(os.environ, PGAS_JOB_ID=job_id, PGAS_RUN_DIR=run_dir, PGAS_BACKEND=backend,
               PGAS_BACKEND_NOTICE_GIVEN="1")
    if backend == "simulator":
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    if args.pes_per_node is not None:
        env["PGAS_PES_PER_NODE"] = str(args.pes_per_node)
    cmd = [mpiexec, "-n", str(args.np)]
    if args.hosts:
        cmd += ["-hosts", args.hosts]
    if args.hostfile:
        cmd += ["-f", args.hostfile]
    if args.tag_output:
        cmd += ["-prepend-rank"]
    cmd += [sys.executable, "-m", "pgas._pe_guard", *args.command]
    mpich_before = _mpich_leftovers()
    proc = subprocess.Popen(cmd, env=env, start_new_session=True)
    # The PEs run in their own session: a SIGTERM or SIGHUP for pgasrun must reach them too.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupted)
    try:
        code, message = _supervise(proc, run_dir, args.timeout)
    except _Interrupted as stop:
        _stop(proc)
        code, message = 128 + stop.signum, f"stopped by {signal.Signals(stop.signum).name}; every PE was stopped"
    except KeyboardInterrupt:
        _stop(proc)
        code, message = 130, "interrupted; every PE was stopped"
    finally:
        _sweep_shared_memory(job_id, mpich_before)
        shutil.rmtree(run_dir, ignore_errors=True)
    if code != 0:
        # A PE killed while MPICH set up a segment can leave it to appear a moment after the
        # run's processes are gone (seen once in CI): look again.
        time.sleep(0.3)
        _sweep_shared_memory(job_id, mpich_before)
    if message:
        print(f"pgasrun: {message}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
