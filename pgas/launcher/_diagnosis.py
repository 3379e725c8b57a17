"""Why a run ended, in words pgasrun can print: PEs that left before ``pgas.finalize``
while others waited for them, and where the waits of a timed-out PE lead (following the
PEs' heartbeats: who waits in which call for whom) to the PE that holds everyone up, with
its process state (stopped, blocked, running elsewhere)."""
from __future__ import annotations

import socket
import time

from ..core import _job
from ..core._job import stat_fields

__all__ = ["StoppedPes", "pe_list", "stranded", "where_waits_lead"]


def pe_list(pes: list[int]) -> str:
    return f"PE {pes[0]}" if len(pes) == 1 else f"PEs {pes}"


def stranded(run_dir: str) -> str | None:
    """What is wrong when a PE left before pgas.finalize while others wait in pgas calls."""
    left = _job.departed(run_dir)
    waiting = {pe: fn for pe, (fn, _) in _job.waiters(run_dir).items() if pe not in left}
    if not left or not waiting:
        return None
    by_call: dict[str, list[int]] = {}
    for pe, fn in sorted(waiting.items()):
        by_call.setdefault(fn, []).append(pe)
    waits = [f"{pe_list(pes)} {'waits' if len(pes) == 1 else 'wait'} in {fn}" for fn, pes in by_call.items()]
    verb = "exited" if len(left) == 1 else "each exited"
    return f"{pe_list(left)} {verb} (status 0) before pgas.finalize while {' and '.join(waits)}"


_PROCESS_STATES = {"T": "is stopped (SIGSTOP or Ctrl-Z)", "t": "is stopped by a debugger",
                   "Z": "has ended", "X": "has ended", "D": "is blocked in the kernel (uninterruptible sleep)"}


class StoppedPes:
    """The PEs on this host seen stopped while others waited in pgas calls (looked for
    every LOOK_S then): the stop may be undone before a failure is read (MPI's abort of
    the failing PE continues stopped processes to end them)."""

    LOOK_S = 0.5

    def __init__(self):
        self.seen: dict[int, str] = {}      # PE -> its state letter (T, t)
        self._due = 0.0

    def look(self, run_dir: str) -> None:
        now = time.monotonic()
        if now < self._due:
            return
        self._due = now + self.LOOK_S
        if not _job.waiters(run_dir):
            return
        for pe, (pid, host) in _job.live_processes(run_dir).items():
            fields = stat_fields(f"/proc/{pid}/stat") if host == socket.gethostname() else []
            if fields and fields[0] in ("T", "t"):
                self.seen[pe] = fields[0]


def _state_of(pe: int, processes: dict[int, tuple[int, str]], stopped: StoppedPes) -> str:
    """How PE ``pe``'s process is, as far as this host can see."""
    pid, host = processes.get(pe, (None, None))
    if pid is None:
        return "is not in a pgas call"
    if host != socket.gethostname():
        return f"is not in a pgas call (on host {host})"
    fields = stat_fields(f"/proc/{pid}/stat")
    state = fields[0] if fields else "X"
    if state not in ("T", "t") and pe in stopped.seen:
        state = stopped.seen[pe]
    return _PROCESS_STATES.get(state, "is running but not in a pgas call")


def where_waits_lead(run_dir: str, pe: int, stopped: StoppedPes) -> str | None:
    """Follow the heartbeats from PE ``pe`` (who waits in which call for whom) to the PEs
    that hold everyone up: those the chain of waits reaches that are not waiting in a pgas
    call themselves (stopped, busy, or blocked elsewhere). A sentence naming them and the
    chain, or None when ``pe`` was not waiting for other PEs."""
    waits = _job.waiters(run_dir)
    if not waits.get(pe, ("", []))[1]:
        return None
    processes = _job.live_processes(run_dir)
    reached_from = {pe: None}
    frontier, ends = [pe], []
    while frontier:
        waiter = frontier.pop(0)
        for other in waits[waiter][1]:
            if other in reached_from:
                continue
            reached_from[other] = waiter
            (frontier if other in waits else ends).append(other)
    if not ends:
        return None     # the waits go round in a circle: the timeout message says it all
    sentences = []
    for end in ends:
        chain, at = [], reached_from[end]
        while at is not None:
            chain.append(f"PE {at} (in {waits[at][0]})")
            at = reached_from[at]
        sentences.append(f"PE {end}, which {_state_of(end, processes, stopped)}: "
                         f"{' waits for '.join(reversed(chain))} waits for PE {end}")
    return "the waits lead to " + "; and to ".join(sentences)
