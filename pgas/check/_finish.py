"""The end of a checked run: every PE's events to PE 0, the replay there, the reports."""
from __future__ import annotations

import sys
import time
import traceback

from ..core._errors import PgasTimeoutError
from ._replay import replay
from ._report import describe, summary

__all__ = ["finish"]

_TAG = 0x7C4E


def _receive(comm, source: int, timeout: float):
    """A pickled message from ``source``, waited for without spinning a core."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        message = comm.improbe(source=source, tag=_TAG)
        if message is not None:
            return message.recv()
        time.sleep(0.001)
    raise PgasTimeoutError(f"pgas.finalize: PGAS_CHECK=1: waited PGAS_TIMEOUT={timeout:g} s for "
                           f"{'the events of PE ' if source else 'the analysis of PE '}{source}")


def _send(comm, value, dest: int) -> None:
    request = comm.isend(value, dest=dest, tag=_TAG)
    while not request.test()[0]:
        time.sleep(0.001)


def finish(rec, comm) -> int:
    """Collective: analyse the run's events on PE 0, which prints the findings and a
    summary (to stderr); every PE returns the number of findings."""
    rank, size = comm.Get_rank(), comm.Get_size()
    timeout = rec.rt.timeout
    rec.add("end", None)
    if rank != 0:
        _send(comm, rec.events, 0)
        return _receive(comm, 0, timeout)
    events = list(rec.events)
    for source in range(1, size):
        events.extend(_receive(comm, source, timeout))
    try:
        findings = replay(events)
        for finding in findings:
            print(describe(finding), file=sys.stderr)
        print(summary(findings, size, len(events)), file=sys.stderr, flush=True)
        found = len(findings)
    except Exception:        # a fault of the checker itself: said, and the run fails
        print("pgas check: the analysis failed (a pgas bug, please report it):\n" + traceback.format_exc(),
              file=sys.stderr, flush=True)
        found = 1
    for dest in range(1, size):
        _send(comm, found, dest)
    return found
