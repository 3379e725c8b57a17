"""The end of a checked run: every PE's events to PE 0, the replay there, the reports."""
from __future__ import annotations

import sys
import time

from ._replay import replay
from ._report import describe, summary

__all__ = ["finish"]

_TAG = 0x7C4E


def _receive(comm, source: int):
    """A pickled message from ``source``, waited for without spinning a core."""
    while True:
        message = comm.improbe(source=source, tag=_TAG)
        if message is not None:
            return message.recv()
        time.sleep(0.001)


def _send(comm, value, dest: int) -> None:
    request = comm.isend(value, dest=dest, tag=_TAG)
    while not request.test()[0]:
        time.sleep(0.001)


def finish(rec, comm) -> int:
    """Collective: analyse the run's events on PE 0, which prints the findings and a
    summary (to stderr); every PE returns the number of findings."""
    rank, size = comm.Get_rank(), comm.Get_size()
    rec.add("end", None)
    if rank != 0:
        _send(comm, rec.events, 0)
        return _receive(comm, 0)
    events = list(rec.events)
    for source in range(1, size):
        events.extend(_receive(comm, source))
    findings = replay(events)
    for finding in findings:
        print(describe(finding), file=sys.stderr)
    print(summary(findings, size, len(events)), file=sys.stderr, flush=True)
    for dest in range(1, size):
        _send(comm, len(findings), dest)
    return len(findings)
