"""Runs one PE's command under pgasrun, passes its output on a line at a time, and records
how it ended.

pgasrun starts ``python -m pgas.launcher._pe_guard CMD...`` through mpiexec. The guard forks; the
child execs CMD (keeping the MPI process manager's environment and descriptors, except
that its stdout and stderr are pipes to the guard); the guard:

- writes the child's output to its own stdout/stderr whole lines at a time, as records
  pgasrun puts together again (``_output``), so that lines of different PEs never glue
  together, at any length, even when the program writes a line in pieces
  (``PYTHONUNBUFFERED=1``); with ``PGAS_TAG_OUTPUT=1`` each line starts with ``[PE] ``;
- gives the child pgasrun's stdin on PE 0 (``_stdin``), /dev/null on the others;
- records, for pgasrun (``pgas.core._job``), a child that raised, exited non-zero or was
  killed, with its exit status, and a child that exited 0 between ``pgas.init`` and
  ``pgas.finalize``;
- ends the child when pgasrun is gone (even after ``kill -9``) or its own parent is: the
  child dies with the guard (``PR_SET_PDEATHSIG``), and the guard watches pgasrun.

A guard that is itself being stopped forwards the signal and records nothing.
"""
from __future__ import annotations

import ctypes
import os
import selectors
import shutil
import signal
import socket
import sys
import time

from ..core import _job
from ._output import frame, write_all
from ._stdin import give_child_stdin

_PR_SET_PDEATHSIG = 1
_PARTIAL_LINE_S = 0.5       # a line without its newline yet is written after this long
_STOP_GRACE_S = 2.0
_DRAIN_S = 0.5              # after the child exits, output its descendants still write

_stopping = False


def _die_with_parent(sig: int) -> None:
    """Ask the kernel to send ``sig`` to this process when its parent ends."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
    except (OSError, AttributeError):
        pass    # not Linux: the guard's launcher watch still ends the child


def _describe(status: int) -> str | None:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        why = (": a bus error, which on pgas's heap means /dev/shm ran out of room (see df /dev/shm; docker: "
               "--shm-size) or PGAS_SYMMETRIC_SIZE is larger than it can hold" if sig == signal.SIGBUS else "")
        return f"was killed by signal {sig} ({signal.Signals(sig).name}){why}"
    code = os.WEXITSTATUS(status)
    return f"exited with status {code}" if code else None


def _exit_code(status: int) -> int:
    return 128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


class _LineWriter:
    """Collects one output stream of the child and writes it out whole lines at a time."""

    def __init__(self, fd: int, pe: int, tag: bytes):
        self.fd = fd
        self.pe = pe
        self.tag = tag
        self.pending = b""
        self.since = 0.0            # when the pending partial line began
        self.at_line_start = True

    def feed(self, data: bytes) -> None:
        if not self.pending:
            self.since = time.monotonic()
        self.pending += data
        end = self.pending.rfind(b"\n") + 1
        if end:
            self._write(self.pending[:end])
            self.pending = self.pending[end:]
            self.since = time.monotonic()

    def flush_stale(self, force: bool = False) -> None:
        """Write a partial line that waited too long for its newline (or at the end)."""
        if self.pending and (force or time.monotonic() - self.since > _PARTIAL_LINE_S):
            self._write(self.pending)
            self.pending = b""

    def _write(self, data: bytes) -> None:
        if self.tag:
            lines = data.splitlines(keepends=True)
            tagged = [(self.tag if i or self.at_line_start else b"") + line for i, line in enumerate(lines)]
            data = b"".join(tagged)
        self.at_line_start = data.endswith(b"\n")
        for record in frame(self.pe, data):
            write_all(self.fd, record)      # dropped when nobody reads any more (mpiexec is gone)


def _start_child(argv: list[str], pe: int) -> tuple[int, int, int]:
    """Fork and exec ``argv`` as PE ``pe``; (pid, read end of its stdout, read end of its stderr)."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    child = os.fork()
    if child == 0:
        _die_with_parent(signal.SIGKILL)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        for fd in (out_r, out_w, err_r, err_w):
            os.close(fd)
        try:
            give_child_stdin(pe)
            os.execvp(argv[0], argv)
        except OSError as exc:
            os.write(2, f"pgasrun: cannot run {argv[0]!r}: {exc.strerror}\n".encode())
            os._exit(127)
    os.close(out_w)
    os.close(err_w)
    return child, out_r, err_r


def _launcher_watch() -> int | None:
    """A pidfd that becomes readable when pgasrun ends (pgasrun on this host only); -1
    when pgasrun is already gone; None when it cannot be watched from here."""
    pid = os.environ.get("PGAS_LAUNCHER_PID")
    if not pid or os.environ.get("PGAS_LAUNCHER_HOST") != socket.gethostname():
        return None
    try:
        return os.pidfd_open(int(pid))
    except ProcessLookupError:
        return -1
    except (OSError, AttributeError, ValueError):
        return None


def _stop_child(child: int) -> None:
    global _stopping
    _stopping = True
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(child, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + _STOP_GRACE_S
        while time.monotonic() < deadline:
            if os.waitpid(child, os.WNOHANG)[0]:
                return
            time.sleep(0.02)


def _end_orphaned_run(child: int) -> None:
    """pgasrun is gone: stop the child and clean up what pgasrun would have: MPICH's
    shared-memory files the child mapped, Hydra's topology file its proxy (this guard's
    parent) holds, what the PEs recorded of both, and the run's directory. The files go
    first: a PE that stops may make the others abort the job, whose SIGKILL would then
    end this guard before it cleaned up (unlinked, they stay mapped while in use)."""
    _unlink(_job.mapped_segments(child) | _job.hydra_topology_files(os.getppid()) | _recorded_files())
    _stop_child(child)
    shutil.rmtree(os.environ.get("PGAS_RUN_DIR", ""), ignore_errors=True)


def _recorded_files() -> set[str]:
    """The MPICH and Hydra files the run's PEs recorded (``_job.record_segments``)."""
    run_dir = os.environ.get("PGAS_RUN_DIR", "")
    return _job.recorded_segments(run_dir) if run_dir else set()


def _unlink(paths) -> None:
    for path in paths:
        try:
            os.unlink(path)
        except OSError:
            pass


def _pidfd(pid: int) -> int | None:
    """A descriptor that becomes readable when process ``pid`` ends (None: not supported)."""
    try:
        return os.pidfd_open(pid)
    except (OSError, AttributeError):
        return None


def _run(child: int, pe: int, out_r: int, err_r: int) -> int:
    """Pass the child's output on until it has exited; its wait status.

    The loop sleeps until something happens (output, the child's end, pgasrun's end):
    periodic wake-ups of the guards, even ten a second, slowed the PEs they share the
    cores with by 1.7x (a host collective suite on 4 PEs, 2 cores)."""
    tag = f"[{pe}] ".encode() if os.environ.get("PGAS_TAG_OUTPUT") == "1" else b""
    writers = {out_r: _LineWriter(1, pe, tag), err_r: _LineWriter(2, pe, tag)}
    selector = selectors.DefaultSelector()
    for fd in writers:
        selector.register(fd, selectors.EVENT_READ)
    ended = _pidfd(child)
    if ended is not None:
        selector.register(ended, selectors.EVENT_READ)
    launcher = _launcher_watch()
    if launcher == -1 or os.getppid() == 1:
        _stop_child(child)
    elif launcher is not None:
        selector.register(launcher, selectors.EVENT_READ)
    status, drain_until = None, None
    while writers:
        now = time.monotonic()
        if drain_until is not None and now >= drain_until:
            break
        deadlines = [w.since + _PARTIAL_LINE_S for w in writers.values() if w.pending]
        if drain_until is not None:
            deadlines.append(drain_until)
        if ended is None and status is None:
            deadlines.append(now + 1.0)     # no pidfd: look for the child's end now and then
        timeout = max(0.0, min(deadlines) - now) if deadlines else None
        for key, _ in selector.select(timeout):
            if key.fd == launcher:                      # pgasrun is gone: so is this run
                selector.unregister(launcher)
                _end_orphaned_run(child)
            elif key.fd == ended:
                selector.unregister(ended)
            else:
                data = os.read(key.fd, 65536)
                if data:
                    writers[key.fd].feed(data)
                else:
                    writers.pop(key.fd).flush_stale(force=True)
                    selector.unregister(key.fd)
        for writer in writers.values():
            writer.flush_stale()
        if status is None:
            pid, status = os.waitpid(child, os.WNOHANG)
            if pid == 0:
                status = None
            else:
                drain_until = time.monotonic() + _DRAIN_S
    for writer in writers.values():
        writer.flush_stale(force=True)
    if status is None:
        status = os.waitpid(child, 0)[1]
    return status


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m pgas.launcher._pe_guard CMD [ARGS...]", file=sys.stderr)
        return 2
    _die_with_parent(signal.SIGTERM)        # Hydra's proxy gone: stop as when told to
    pe = int(os.environ.get("PMI_RANK", "0"))
    child, out_r, err_r = _start_child(argv, pe)

    def forward(signum, _frame):
        global _stopping
        _stopping = True
        try:
            os.kill(child, signum)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    status = _run(child, pe, out_r, err_r)
    if _stopping and _launcher_watch() == -1:
        # pgasrun was killed, and with it Hydra's proxy, whose death stopped this guard
        # before it saw pgasrun's: nobody else removes the topology file the PEs recorded
        _unlink({path for path in _recorded_files() if path.startswith(_job.HYDRA_TOPOLOGY)})
    how = _describe(status)
    if _stopping:
        pass
    elif how:
        _job.record_failure(how, _exit_code(status))
    else:
        _job.record_departure()
    return _exit_code(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
