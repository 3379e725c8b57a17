"""An exchange of persistent MPI point-to-point requests, run from native code.

A small host collective between nodes costs little more than its messages: its requests
are made once (``MPI_Send_init``/``MPI_Recv_init``, by mpi4py) and kept with the call, and
each repeat is one native call that starts them all and tests them, yielding the core
between tests (``start_and_test``), without the interpreter lock. Python keeps the
slow part: a wait that outlasts the spin, the timeout, the errors.
"""
from __future__ import annotations

from numba import njit, types

from . import _cache, _mpi_api, _native
from ._batch import now_ns

__all__ = ["load", "start_and_test", "test", "compiled_start_and_test", "DONE", "BROKEN"]


# The words of an exchange's ``state`` array (one array: each array argument costs numba
# a fraction of a microsecond to unbox)
(S_COUNT, S_REQUESTS, S_STATUSES, S_SPIN_NS, S_COPY_TO, S_COPY_FROM, S_COPY_BYTES, S_FLAG, S_BROKEN,
 S_CLOCK) = range(10)
STATE_WORDS = S_CLOCK + 2
DONE, BROKEN = 1, 2      # what start_and_test returns when all completed / the exchange is S_BROKEN


@njit(nogil=True, cache=True)
def test(state, spin_ns):
    """Test the exchange's requests until all are complete (``DONE``), for at most ``spin_ns``
    (0: not yet), yielding the core between tests; a negative MPI error code if one
    failed. ``state``: the words above (``S_REQUESTS``: the address of the request
    handles, ``S_FLAG``: MPI's flag is written there)."""
    started = now_ns(state, S_CLOCK)
    address = state.ctypes.data
    while True:
        state[S_FLAG] = 0
        status = _native.MPI_Testall(state[S_COUNT], state[S_REQUESTS], address + 8 * S_FLAG, state[S_STATUSES])
        if status != 0:
            return -status
        if state[S_FLAG] != 0:
            return DONE
        if now_ns(state, S_CLOCK) - started >= spin_ns:
            return 0
        _native.sched_yield()


@njit(nogil=True, cache=True)
def start_and_test(state):
    """Start the requests, copy ``S_COPY_BYTES`` from ``S_COPY_FROM`` to ``S_COPY_TO``
    (this member's own part, while the messages travel), then ``test`` for
    ``S_SPIN_NS``; ``BROKEN`` without starting any when ``S_BROKEN`` is set."""
    if state[S_BROKEN]:
        return BROKEN
    status = _native.MPI_Startall(state[S_COUNT], state[S_REQUESTS])
    if status != 0:
        return -status
    if state[S_COPY_BYTES]:
        _native.memcpy(state[S_COPY_TO], state[S_COPY_FROM], state[S_COPY_BYTES])
    return test(state, state[S_SPIN_NS])


_ready: list = []


def load() -> None:
    """Make the functions above callable: MPI's symbols registered, a stale cache of
    them dropped (``_cache``); once per process."""
    if not _ready:
        _mpi_api.load()
        _cache.drop_if_stale((test, start_and_test))
        _ready.append(start_and_test.compile((types.int64[::1],)))


def compiled_start_and_test():
    """``start_and_test`` as its compiled entry (``load`` first): a call skips numba's
    choice of a signature by the argument's type, 70 ns of the few hundred a small
    collective spends in Python."""
    load()
    return _ready[0]
