"""The checker's findings as text a person can act on."""
from __future__ import annotations

import numpy as np

from ._replay import Finding

__all__ = ["describe", "summary"]


def _thread(thread: tuple) -> str:
    if thread[0] == "host":
        return "host" if thread[1] == 0 else f"host thread {thread[1]}"
    _, launch, block, t, _ = thread
    b = block[0] if block[1:] == (0, 0) else block
    x = t[0] if t[1:] == (0, 0) else t
    return f"kernel (launch {launch}) blockIdx {b} threadIdx {x}"


def _what(seen) -> str:
    a = seen.access
    kind = ("atomic " if a.atomic else "") + ("write" if a.write else "read")
    how = a.op if a.rma else f"{a.op} of its own copy"
    return f"{kind:12} by PE {seen.pe}, {_thread(seen.thread)}: {how} at {a.site}"


def _memory(finding: Finding) -> str:
    a = (finding.second or finding.first).access
    if finding.allocation is None:
        return f"PE {a.owner}'s symmetric heap bytes [{a.lo}, {a.hi})"
    site, dtype, shape, start = finding.allocation
    size = np.dtype(dtype).itemsize
    first, last = (a.lo - start) // size, -(-(a.hi - start) // size)
    return (f"PE {a.owner}'s elements [{first}:{last}] of the {np.dtype(dtype)} array {shape} allocated at {site}")


def describe(finding: Finding) -> str:
    """The report of one finding: what, where, both accesses or calls, what would fix it."""
    if finding.kind == "collective":
        (pe_a, call_a, site_a), (pe_b, call_b, site_b), number, team = finding.calls
        return (f"pgas check: device collective calls differ on team {team} (call {number} of each PE)\n"
                f"  PE {pe_a}: pgas.device.{call_a} at {site_a}\n  PE {pe_b}: pgas.device.{call_b} at {site_b}\n"
                f"  {finding.advice}")
    if finding.kind == "incomplete":
        return (f"pgas check: operation never completed, on {_memory(finding)}\n"
                f"  {_what(finding.first)}\n  {finding.advice}")
    return (f"pgas check: data race on {_memory(finding)}\n"
            f"  {_what(finding.first)}\n  {_what(finding.second)}\n  {finding.advice}")


def summary(findings: list, n_pes: int, events: int) -> str:
    """The last line of a checked run."""
    if not findings:
        return f"pgas check: no problems found ({events} events of {n_pes} PEs checked)"
    count = {kind: sum(f.kind == kind for f in findings) for kind in ("race", "incomplete", "collective")}
    return (f"pgas check: {count['race']} data race(s), {count['incomplete']} operation(s) never completed, "
            f"{count['collective']} device collective mismatch(es) ({events} events of {n_pes} PEs checked); "
            f"the run fails")
