"""Waking a peer's thread after one-sided writes to its heap.

A thread of the peer that waits for a word of its heap sleeps on the heap's wake word
(``core.native._wake_words``), and a write nobody tells it of is seen only when its sleep
times out (up to a millisecond); no put can reach a futex on another host. So once
one-sided writes to a peer have landed (their flush, or a blocking put, completed) a
look at it is due (``look_later``), and when a thread of this PE next starts to wait
(``Looks.look_due``, a ``core._waiting.before_waiting`` hook of each engine) the writer
reads the flag of the peer's wake word one-sided (``wake_if_asleep``: ``ucp_get_nbx`` of 4
bytes; CMA's completes on the next round of progress) and, only where a thread has armed
it for a long sleep (``ARMED_LONG``), sends the one message left on this path,
``AM_WAKE``, whose handler wakes it. Nobody asleep long: nothing of the peer's CPU (a
short sleep ends on its own sooner than the peer's progress thread would wake it:
``_wake_words``). No write is missed by a long sleep: the writer's data lands before its
read of the flag, the sleeper's flag is set before its last check.
"""
from __future__ import annotations

import numpy as np
from numba import carray, cfunc, njit

from ..core.native._llvm import built_once
from ..core.native._wake_words import ARMED_LONG
from . import _native, _target as target, _ucp as ucp, _window as window

__all__ = ["AM_WAKE", "LOOK_WORDS", "Looks", "cell_of", "look_later", "wake_if_asleep", "wake_handler"]

AM_WAKE = 0x54          # (the target's are 0x50-0x53)
# A peer's look (``wake_if_asleep``; int64 words): the endpoint to it, UCX's key to its heap,
# the address of its wake word's flag (0: nobody to wake there), the flag as read, the looks
# asked for (counted atomically: whoever moves the count from 0 looks, and looks again while
# others asked meanwhile), the count when the look in flight was posted, the parameters of
# the read (its completion: ``on_looked``, given the cell's address) and of the wake message,
# whether a look is due (``look_later``) and the address of the word saying that one is
K_ENDPOINT, K_KEY, K_FLAG, K_SEEN, K_ASKED, K_TAKEN, K_READ_PARAMS, K_WAKE_PARAMS, K_DUE, K_ANY_AT = range(10)
LOOK_WORDS = 10
_LOOK_SPINS = 8             # rounds of progress ``look_due`` gives its reads


class Looks:
    """This PE's looks at its peers' wake words, a cell each (``address(pe)``, for
    ``wake_if_asleep`` and ``look_later``; a PE without one, or whose heap has no wake
    word, has a cell that does nothing), then a row: whether a look is due, the worker
    (``worker``'s). ``flags``: PE -> the address of its wake word's flag. ``look_due()``
    looks where ``look_later`` asked for it, when a thread of this PE starts to wait (the
    engines add it to ``core._waiting.before_waiting``: a put, then a wait for the answer)."""

    def __init__(self, worker, n_pes: int, endpoints: dict[int, int], keys: dict[int, int], flags: dict[int, int]):
        self.cells = np.zeros((n_pes + 1, LOOK_WORDS), np.int64)
        self.cells[n_pes, 1] = worker.handle
        self._any = memoryview(self.cells[n_pes])       # (read from Python: a third of numpy's cost)
        self._wake_params = ucp.request_params(ucp.AM_SEND_FLAG_EAGER | ucp.AM_SEND_FLAG_COPY_HEADER)
        self._read_params = {pe: ucp.request_params(0, on_looked(), self.cells[pe]) for pe in endpoints}
        for pe, endpoint in endpoints.items():
            self.cells[pe, [K_ENDPOINT, K_KEY, K_FLAG, K_READ_PARAMS, K_WAKE_PARAMS, K_ANY_AT]] = (
                endpoint, keys[pe], flags[pe], self._read_params[pe].ctypes.data, self._wake_params.ctypes.data,
                self.cells[n_pes:].ctypes.data)
        look_due(self.cells)        # (compiled now, not at a first wait)

    def address(self, pe: int) -> int:
        return cell_of(self.cells.ctypes.data, pe)

    def look_due(self) -> None:
        """The looks ``look_later`` asked for."""
        if self._any[0]:
            look_due(self.cells)


@njit(nogil=True, cache=True)
def cell_of(cells, pe):
    """The address of PE ``pe``'s look in the cells at address ``cells`` (``Looks``)."""
    return cells + pe * LOOK_WORDS * 8


@njit(nogil=True, cache=True)
def look_later(cell_address):
    """``wake_if_asleep`` for look ``cell_address`` (0: none) at the next ``Looks.look_due``:
    when a thread of this PE starts to wait (a read of the peer's flag after each blocking
    put made it 7 µs instead of 5 between the hosts). A PE that writes and never waits
    leaves a long sleeper to the end of its sleep (at most ``HOST_WAIT_BACKOFF_S``)."""
    if cell_address == 0:
        return
    cell = carray(window.words_at(cell_address), (LOOK_WORDS,))
    if cell[K_FLAG] != 0:
        cell[K_DUE] = 1
        target.fence()      # (the cell's mark before the word saying that one is due)
        carray(window.words_at(cell[K_ANY_AT]), (1,))[0] = 1


@njit(cache=True)
def look_due(cells):
    """Each look of ``cells`` (``Looks``) that is due. Their reads complete as the worker
    progresses (CMA's: the next round), so it progresses a few rounds; a read still in
    flight then is left to the progress thread, woken for it."""
    n = cells.shape[0] - 1
    if cells[n, 0] == 0:
        return
    cells[n, 0] = 0
    target.fence()          # (the word cleared before the cells are read: a mark after it sets it again)
    for pe in range(n):
        if cells[pe, K_DUE] != 0:
            cells[pe, K_DUE] = 0
            wake_if_asleep(cell_of(cells.ctypes.data, pe))
    worker = cells[n, 1]
    for _ in range(_LOOK_SPINS):
        if not (cells[:n, K_ASKED] != 0).any():
            return
        _native.ucp_worker_progress(worker)
    _native.ucp_worker_signal(worker)


@njit(nogil=True, cache=True)
def wake_if_asleep(cell_address):
    """One-sided writes to the peer of look ``cell_address`` (``Looks``) have landed: wake
    it if a thread of it sleeps on its wake word (the module's docstring). The read of the
    flag completes at once, or in ``on_looked``. (0: no look.)"""
    if cell_address == 0:
        return
    cell = carray(window.words_at(cell_address), (LOOK_WORDS,))
    if cell[K_FLAG] != 0 and target.apply_atomic(target.AMO_ADD, 8, cell_address + 8 * K_ASKED, 1, 0) == 0:
        _look(cell_address)


@njit(nogil=True, cache=True)
def _look(cell_address):
    """Read the peer's flag, once more for each round of looks asked for meanwhile."""
    cell = carray(window.words_at(cell_address), (LOOK_WORDS,))
    while True:
        cell[K_TAKEN] = target.apply_atomic(target.AMO_FETCH, 8, cell_address + 8 * K_ASKED, 0, 0)
        cell[K_SEEN] = 0
        request = _native.ucp_get_nbx(cell[K_ENDPOINT], cell_address + 8 * K_SEEN, 4, cell[K_FLAG], cell[K_KEY],
                                      cell[K_READ_PARAMS])
        if request > 0 or not _looked(cell_address, request):
            return          # (in flight: ``on_looked`` goes on)


@njit(nogil=True, cache=True)
def _looked(cell_address, status):
    """The read of the peer's flag completed (``status``: UCX's): a wake message if a
    thread sleeps long there (a failed read sends none: the sleeper wakes when its sleep
    ends). True when more looks were asked for since it was posted."""
    cell = carray(window.words_at(cell_address), (LOOK_WORDS,))
    if status == 0 and cell[K_SEEN] & 0xFFFFFFFF >= ARMED_LONG:
        request = _native.ucp_am_send_nbx(cell[K_ENDPOINT], AM_WAKE, cell_address + 8 * K_FLAG, 8, 0, 0,
                                          cell[K_WAKE_PARAMS])
        if request > 0:
            _native.ucp_request_free(request)
    taken = cell[K_TAKEN]
    return target.apply_atomic(target.AMO_CAS, 8, cell_address + 8 * K_ASKED, 0, taken) != taken


def _build_looked():
    """The completion of a look's read (``ucp_send_nbx_callback_t``; user data: its cell)."""
    target.callbacks()      # (the symbols the look calls, registered)

    @cfunc(target.SENT, nopython=True, cache=True)
    def on_looked(request, status, cell):
        address = carray(cell, (LOOK_WORDS,)).ctypes.data
        _native.ucp_request_free(request)
        if _looked(address, status):
            _look(address)

    return on_looked


on_looked = built_once(_build_looked)


def _build_wake_handler():
    """The handler of ``AM_WAKE`` (``ucp_am_recv_callback_t``; its argument: the addresses
    of the heap's wake word and of the worker's count of wake messages): the threads asleep
    on the wake word woken, the message counted (the progress thread does not stay awake
    for it: ``_worker.serve``)."""
    target.callbacks()

    @cfunc(target.HANDLER, nopython=True, cache=True)
    def on_wake(arg, header, header_length, data, length, param):
        target.wake_at(arg[0])
        target.apply_atomic(target.AMO_ADD, 8, arg[1], 1, 0)
        return 0

    return on_wake


wake_handler = built_once(_build_wake_handler)
