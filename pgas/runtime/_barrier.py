"""``wait_all``: a barrier over MPI that names the PEs it waited for instead of hanging."""
from __future__ import annotations

import time

from ..core import _job
from ..core._env import setting
from ..core._errors import PgasTimeoutError

__all__ = ["wait_all"]

_BARRIER_TAG = 0x9A5  # on pgas's private communicators only


def _poll_until(requests, what: str, waiting_for) -> None:
    """Poll ``requests`` until all complete; after PGAS_TIMEOUT raise, naming ``waiting_for()``."""
    from mpi4py import MPI

    timeout = setting("PGAS_TIMEOUT")
    started = time.monotonic()
    deadline = started + timeout
    heartbeat = _job.Heartbeat(what, started)
    pause = 0.0
    while not MPI.Request.Testall(requests):
        now = time.monotonic()
        if now >= heartbeat.due:
            heartbeat.beat(now)
        if now > deadline:
            message = f"{what}: waited PGAS_TIMEOUT={timeout:g} s for {waiting_for()}"
            for request in requests:  # receives only: leave no stale match for a later barrier
                if request != MPI.REQUEST_NULL and not request.Test():
                    request.Cancel()
                    request.Wait()
            raise PgasTimeoutError(message)
        time.sleep(pause)
        pause = min(pause * 2 + 1e-5, 1e-3)


def wait_all(comm, what: str, pes=None) -> None:
    """Barrier over ``comm`` that fails after PGAS_TIMEOUT instead of hanging.

    Arrivals gather at the first member, which then releases the others, so a timeout
    can name the PEs that never arrived. ``pes[r]`` is the PE number of member ``r``
    (default: the rank itself).
    """
    from mpi4py import MPI

    rank, size = comm.Get_rank(), comm.Get_size()
    if size == 1:
        return
    pes = range(size) if pes is None else pes
    if rank == 0:
        arrivals = [comm.Irecv(bytearray(0), source=r, tag=_BARRIER_TAG) for r in range(1, size)]

        def missing():
            done = [req == MPI.REQUEST_NULL or req.Test() for req in arrivals]
            return f"PEs {[pes[r] for r, ok in enumerate(done, 1) if not ok]} to arrive"

        _poll_until(arrivals, what, missing)
        MPI.Request.Waitall([comm.Isend(bytearray(0), dest=r, tag=_BARRIER_TAG) for r in range(1, size)])
    else:
        comm.Isend(bytearray(0), dest=0, tag=_BARRIER_TAG).Free()
        release = comm.Irecv(bytearray(0), source=0, tag=_BARRIER_TAG)
        _poll_until([release], what,
                    lambda: f"PE {pes[0]} to release the barrier (it names the PEs that had not arrived)")

