"""``wait_all``: a barrier over MPI that names the PEs it waited for instead of hanging,
and that fails on every PE when they are not all in the same collective call."""
from __future__ import annotations

import os
import time

from ..core import _job
from ..core._env import setting
from ..core._errors import PgasError, PgasTimeoutError

__all__ = ["wait_all", "wait_requests", "poll_until", "yielding_seconds"]

_BARRIER_TAG = 0x9A5  # on pgas's private communicators only
_CALL_BYTES = 1024    # what an arrival says about the call it was made in
_ANSWER_BYTES = 64 << 10
_YIELDING_S = 5e-3    # how long a collective's wait tests between yields before it sleeps,
_YIELDING_S_PER_BYTE = 2e-9     # and longer by this for each byte it moves (0.5 GB/s)


def poll_until(requests, statuses, what: str, waiting_for, waits_for, cancel: bool = True) -> None:
    """Poll ``requests`` until all complete (their ``statuses`` filled in); after
    PGAS_TIMEOUT raise, naming ``waiting_for()`` (``cancel``: cancelling the receives
    first). ``waits_for()``: the PEs the wait needs, for pgasrun's heartbeat."""
    from mpi4py import MPI

    timeout = setting("PGAS_TIMEOUT")
    started = time.monotonic()
    deadline = started + timeout
    heartbeat = _job.Heartbeat(what, started, waits_for)
    pause = 0.0
    while not MPI.Request.Testall(requests, statuses):
        now = time.monotonic()
        if now >= heartbeat.due:
            heartbeat.beat(now)
        if now > deadline:
            message = f"{what}: waited PGAS_TIMEOUT={timeout:g} s for {waiting_for()}"
            for request in requests if cancel else ():  # receives: no stale match for a later barrier
                if request != MPI.REQUEST_NULL and not request.Test():
                    request.Cancel()
                    request.Wait()
            raise PgasTimeoutError(message)
        time.sleep(pause)
        pause = min(pause * 2 + 1e-5, 1e-3)


def yielding_seconds(nbytes: int) -> float:
    """How long a wait for MPI requests moving ``nbytes`` tests them between yields of the
    core before it sleeps between tests."""
    return _YIELDING_S + nbytes * _YIELDING_S_PER_BYTE


def wait_requests(requests, what: str, waiting_for, waits_for=None, nbytes: int = 0) -> None:
    """Complete MPI ``requests`` (a non-blocking collective's, moving ``nbytes``): MPI moves
    them on only inside its calls, so for as long as the bytes could take on a slow wire
    test them between yields of the core (a sleeping waiter would stall a large transfer
    between its tests), then back off with sleeps; after PGAS_TIMEOUT raise, naming
    ``waiting_for()``."""
    from mpi4py import MPI

    if MPI.Request.Testall(requests):      # small ones are often done at once
        return
    until = time.monotonic() + yielding_seconds(nbytes)
    while not MPI.Request.Testall(requests):
        if time.monotonic() > until:
            poll_until(requests, None, what, waiting_for, waits_for, cancel=False)
            return
        os.sched_yield()


def _call_text(what: str, record) -> str:
    return what if record is None else f"{what} ({record})"


def _disagreement(calls: list[str], pes) -> str | None:
    """The error every member raises when ``calls`` (by member) are not all the same."""
    if all(call == calls[0] for call in calls):
        return None
    by_call: dict[str, list[int]] = {}
    for rank, call in enumerate(calls):
        by_call.setdefault(call, []).append(pes[rank])
    made = "; ".join(f"PE{'s' if len(members) > 1 else ''} {', '.join(map(str, members))}: {call}"
                     for call, members in by_call.items())
    return (f"PEs disagree on a collective call (every PE of the team must make the same "
            f"collective calls, with the same arguments, in the same order): {made}")


def wait_all(comm, what: str, pes=None, record=None) -> None:
    """Barrier over ``comm`` that fails after PGAS_TIMEOUT instead of hanging.

    Arrivals gather at the first member, which then releases the others, so a timeout
    can name the PEs that never arrived. ``pes[r]`` is the PE number of member ``r``
    (default: the rank itself). Each arrival names its call (``what``, and ``record``:
    arguments the members must agree on, e.g. under PGAS_DEBUG); if they differ every
    member raises a PgasError naming what each PE called (one PE's extra allocation is
    then an error at the next collective call, not a hang).
    """
    from mpi4py import MPI

    rank, size = comm.Get_rank(), comm.Get_size()
    if size == 1:
        return
    pes = range(size) if pes is None else pes
    mine = _call_text(what, record).encode()[:_CALL_BYTES]
    if rank == 0:
        buffers = [bytearray(_CALL_BYTES) for _ in range(1, size)]
        arrivals = [comm.Irecv(buf, source=r, tag=_BARRIER_TAG) for r, buf in enumerate(buffers, 1)]
        statuses = [MPI.Status() for _ in arrivals]

        def missing():
            # Get_status leaves a completed request (and the call it carries) to Testall
            done = [req == MPI.REQUEST_NULL or req.Get_status() for req in arrivals]
            return [pes[r] for r, ok in enumerate(done, 1) if not ok]

        poll_until(arrivals, statuses, what, lambda: f"PEs {missing()} to arrive", missing)
        calls = [mine] + [bytes(buf[:status.Get_count(MPI.BYTE)]) for buf, status in zip(buffers, statuses)]
        verdict = _disagreement([call.decode(errors="replace") for call in calls], pes)
        answer = (verdict or "").encode()[:_ANSWER_BYTES]
        MPI.Request.Waitall([comm.Isend(answer, dest=r, tag=_BARRIER_TAG) for r in range(1, size)])
    else:
        arrival = comm.Isend(mine, dest=0, tag=_BARRIER_TAG)
        answer = bytearray(_ANSWER_BYTES)
        release = comm.Irecv(answer, source=0, tag=_BARRIER_TAG)
        status = MPI.Status()
        poll_until([release], [status], what,
                    lambda: f"PE {pes[0]} to release the barrier (it names the PEs that had not arrived)",
                    lambda: [pes[0]])
        arrival.Wait()
        verdict = bytes(answer[:status.Get_count(MPI.BYTE)]).decode(errors="replace") or None
    if verdict:
        raise PgasError(f"{what}: {verdict}")
