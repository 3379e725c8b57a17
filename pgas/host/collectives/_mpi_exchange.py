"""Small host collectives between nodes, and any on two members, as one exchange of MPI
messages, started and completed by native code (``pgas.wire._mpi``).

A member sends its part straight to every member that needs it and receives theirs
straight into place (fcollect, alltoall: ``dest``'s blocks; broadcast: ``dest``;
all-reduce, reduce-scatter, scans: a buffer of the members' arrays or blocks, folded in
rank order after), one round, on requests made once per kept call (persistent point-to-point
requests are not collective: nothing for the members to agree on at set-up, unlike
MPI's persistent collectives). Measured between two hosts this beats MPI's own
collectives at small sizes, where they cost more in their schedules and our Python than
in their messages, and on two members it moves what MPI's do at every size with less
around it (docs/collectives.md).

Each kind of collective has its own tag on the team's private communicator, so members
in different collectives wait (and time out naming the call) rather than match.
"""
from __future__ import annotations

import numpy as np

from ...core._env import setting
from ...core._errors import PgasError, PgasTimeoutError
from ...runtime._barrier import poll_until, yielding_seconds
from ...wire import _mpi

__all__ = ["Exchange", "MEMBERS", "BYTES", "MAX_MESSAGE", "as_bytes"]

MEMBERS = 8             # teams up to this size exchange directly (each member sends to every other)
BYTES = 64 << 10        # and arrays up to this many bytes per member (any size on 2 members,
MAX_MESSAGE = (1 << 31) - 1     # up to this: a message's count of bytes is an MPI int)
_KEPT_BROKEN: list = []  # the arrays of dropped broken exchanges: their requests may still land in them
_TAGS = {"reduce": 0x9B0, "broadcast": 0x9B1, "fcollect": 0x9B2, "alltoall": 0x9B3, "reducescatter": 0x9B4,
         "inscan": 0x9B5, "exscan": 0x9B6}


def as_bytes(a: np.ndarray) -> np.ndarray:
    """The bytes of contiguous ``a`` in memory order (a view)."""
    return a.reshape(-1, order="A").view(np.uint8)


class Exchange:
    """The messages of one kept collective call: ``sends`` and ``receives`` are
    (array, team rank) pairs; ``local`` (to, from): arrays copied here while they
    travel, or None. ``runner()`` gives the function that moves them."""

    def __init__(self, call, kind: str, sends, receives, local=None):
        from mpi4py import MPI
        _mpi.load()
        self._mpi_finalized = MPI.Is_finalized      # (__del__ may run at exit, when imports no longer can)
        comm, tag = call.team.comm, _TAGS[kind]
        self.fn, self.pes = call.fn, call.team.pes
        self._requests = ([comm.Recv_init([as_bytes(a), MPI.BYTE], source=rank, tag=tag) for a, rank in receives]
                          + [comm.Send_init([as_bytes(a), MPI.BYTE], dest=rank, tag=tag) for a, rank in sends])
        self._peers = sorted({rank for _, rank in (*sends, *receives)})
        handles = np.array([MPI._handleof(r) for r in self._requests], np.uint64)
        self._handles = handles.astype(np.int32 if MPI._sizeof(MPI.Request) == 4 else np.int64)
        self._statuses = np.zeros(max(1, len(self._requests)) * MPI._sizeof(MPI.Status), np.uint8)
        moved = sum(a.nbytes for a, _ in (*sends, *receives))
        self._state = state = np.zeros(_mpi.STATE_WORDS, np.int64)
        state[[_mpi.S_COUNT, _mpi.S_REQUESTS, _mpi.S_STATUSES, _mpi.S_SPIN_NS]] = (
            len(self._requests), self._handles.ctypes.data, self._statuses.ctypes.data,
            int(1e9 * yielding_seconds(moved)))     # the spin of runtime._barrier's waits
        if local is not None:
            to, source = local
            state[[_mpi.S_COPY_TO, _mpi.S_COPY_FROM, _mpi.S_COPY_BYTES]] = (
                as_bytes(to).ctypes.data, as_bytes(source).ctypes.data, to.nbytes)
        self._arrays = (sends, receives, local)     # native code holds their addresses only
        self._broken = None

    def runner(self):
        """A function that moves them all, complete on return. Its own function, holding
        what it uses in locals (the exchange does not hold it: no reference cycle): a
        repeat's few hundred nanoseconds of Python are a tenth of a small collective."""
        start_and_test, state, finish = _mpi.compiled_start_and_test(), self._state, self._finish

        def run():
            done = start_and_test(state)
            if done != _mpi.DONE:
                finish(done)
        return run

    def _finish(self, done: int) -> None:
        """The slow end of a wait (``runtime._barrier.poll_until``: sleeps between tests,
        pgasrun's heartbeat, PGAS_TIMEOUT), and MPI's errors. A broken exchange does not
        run again (its requests may still be active)."""
        from mpi4py import MPI
        if done == _mpi.BROKEN:
            raise PgasError(f"{self.fn}: {self._broken}; this call cannot run again")
        try:
            if done == 0:
                poll_until(self._requests, None, self.fn, self._waiting_for, self._waits_for, cancel=False)
                return
        except PgasTimeoutError:
            self._break(f"an earlier call waited PGAS_TIMEOUT={setting('PGAS_TIMEOUT'):g} s")
            raise
        except MPI.Exception as error:
            done = -error.Get_error_code()
        except BaseException:       # an interrupt: the requests may still be active
            self._break("an earlier call was interrupted")
            raise
        self._break("MPI failed in an earlier call")
        raise PgasError(f"{self.fn}: MPI failed exchanging the call's data with PEs {self._waits_for()}: "
                        f"{MPI.Get_error_string(-done)}")

    def _break(self, why: str) -> None:
        self._broken = why
        self._state[_mpi.S_BROKEN] = 1

    def __del__(self):
        """Free the requests with the kept call (a dropped call's, and at the end)."""
        if hasattr(self, "_mpi_finalized") and not self._mpi_finalized():     # (not if __init__ failed early)
            for request in getattr(self, "_requests", ()):
                if request:
                    request.Free()      # (an active one completes later: MPI frees it then)
            if getattr(self, "_broken", None):
                _KEPT_BROKEN.append(self._arrays)

    def _waits_for(self) -> list:
        return [self.pes[rank] for rank in self._peers]

    def _waiting_for(self) -> str:
        return f"the other members of the team (PEs {self._waits_for()}) to make the same call"
