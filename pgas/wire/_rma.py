"""One-sided access over UCX: a PE's heap registered with its worker's context
(``ucp_mem_map``), its remote key packed (``ucp_rkey_pack``) and exchanged, each peer's
key unpacked once per endpoint (``ucp_ep_rkey_unpack``); and the completion of one-sided
requests (``ucp_put_nbx``/``ucp_get_nbx``), which marks their slot of the requester's ring;
and the look after one-sided writes that wakes a peer whose thread sleeps (``Looks``).

UCX then moves the bytes without the target: a NIC's RDMA engine, or where UCX finds the
peer on the same machine, CMA (``process_vm_writev``), neither of which involves the
target's CPU. Over TCP, UCX emulates RMA with its own messages, which the target's worker
answers as it progresses (its progress thread): UCX's business, pgas stays one-sided.

A thread of the peer that waits for a word of its heap sleeps on the heap's wake word
(``core.native._wake_words``), and a write nobody tells it of is seen only when its sleep
times out (up to a millisecond). So once one-sided writes to a peer have landed (their
flush, or a blocking put, completed), the writer reads the flag of the peer's wake word
one-sided (``wake_if_asleep``: ``ucp_get_nbx`` of 4 bytes, done at once where UCX copies by
CMA) and only where a thread has armed it for a long sleep sends the one message left on
this path, ``AM_WAKE``, whose handler wakes it (a futex on another host is no memory a put
can reach). Nobody asleep long: nothing of the peer's CPU (a short sleep ends on its own
sooner than the peer's progress thread would wake it: ``_wake_words``). No write is
missed by a long sleep: the writer's data lands before its read of the flag, the
sleeper's flag is set before its last check.
"""
from __future__ import annotations

import ctypes
import resource

import numpy as np
from numba import carray, cfunc, njit

from ..core._errors import PgasError
from ..core.native._wake_words import ARMED_LONG
from ..core.native._llvm import built_once
from ..nic import _mlx5 as mlx5
from . import _native, _target as target, _ucp as ucp, _window as window

__all__ = ["HeapKeys", "Looks", "transports", "completion", "mark_done", "slot_params", "wake_if_asleep",
           "look_later", "AM_WAKE"]

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


def _memlock_limit() -> str:
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return "unlimited" if soft == resource.RLIM_INFINITY else f"{soft} bytes"


class HeapKeys:
    """The heap [``base``, ``base + size``) of PE ``my_pe`` registered with ``worker``'s
    context, and every PE's packed key and heap range (an allgather over ``comm``:
    collective). ``unpack(endpoints)`` gives the peers' keys for those endpoints,
    ``looks(endpoints)`` the looks at their wake words. ``wake``: the address of this
    PE's wake word (``core.native._wake_words``; 0: none), which ``AM_WAKE`` wakes, at
    the same offset in every heap."""

    def __init__(self, worker, comm, my_pe: int, base: int, size: int, wake: int = 0):
        lib = self._lib = worker.lib
        self._worker = worker
        self._wake_offset = wake - base if wake else None
        self._wake_words = np.array([wake, worker.wakes_address], np.int64)
        worker.handle_messages(AM_WAKE, wake_handler(), self._wake_words.ctypes.data)
        self._context = worker.context
        self._unpacked: list[int] = []     # the keys ``unpack`` made
        params = ucp.MemMapParams(field_mask=ucp.MEM_MAP_PARAM_FIELD_ADDRESS | ucp.MEM_MAP_PARAM_FIELD_LENGTH,
                                  address=base, length=size)
        memh = ctypes.c_int64()
        status = lib.ucp_mem_map(self._context, ctypes.addressof(params), ctypes.addressof(memh))
        packed = b""
        if status == ucp.UCS_OK:
            self._memh = memh.value
            buffer, length = ctypes.c_int64(), ctypes.c_size_t()
            status = lib.ucp_rkey_pack(self._context, self._memh, ctypes.addressof(buffer), ctypes.addressof(length))
            if status == ucp.UCS_OK:
                packed = ctypes.string_at(buffer.value, length.value)
                lib.ucp_rkey_buffer_release(buffer.value)
        else:
            self._memh = 0
        failure = "" if status == ucp.UCS_OK else (
            f"PE {my_pe}: UCX could not register its heap for one-sided access ({size} bytes at {base:#x}; "
            f"ucs_status_t {status}; the locked-memory limit, ulimit -l, is {_memlock_limit()})")
        everyone = comm.allgather((packed, base, size, failure))    # (every PE learns of a failure)
        failures = [f for *_, f in everyone if f]
        if failures:
            self.close()
            raise PgasError("pgas.init: " + "; ".join(failures))
        self.ranges = [(b, s) for _, b, s, _ in everyone]
        self._packed = [p for p, *_ in everyone]

    def unpack(self, endpoints: dict[int, int]) -> dict[int, int]:
        """PE -> its heap's key for the endpoint to it (``endpoints``: PE -> endpoint);
        destroyed with these keys (``close``)."""
        keys = {}
        for pe, endpoint in endpoints.items():
            packed = ctypes.create_string_buffer(self._packed[pe], len(self._packed[pe]))
            rkey = ctypes.c_int64()
            ucp.check(self._lib.ucp_ep_rkey_unpack(endpoint, ctypes.addressof(packed), ctypes.addressof(rkey)),
                      f"ucp_ep_rkey_unpack (PE {pe}'s heap)")
            keys[pe] = rkey.value
            self._unpacked.append(rkey.value)
        return keys

    def looks(self, endpoints: dict[int, int]) -> Looks:
        """The looks at the wake words of the PEs of ``endpoints`` (PE -> endpoint),
        through their keys for those endpoints (``unpack``)."""
        keys = self.unpack(endpoints)
        flags = {pe: 0 if self._wake_offset is None else self.ranges[pe][0] + self._wake_offset + 4
                 for pe in endpoints}
        return Looks(self._worker, len(self.ranges), endpoints, keys, flags)

    def close(self) -> None:
        """Destroy the unpacked keys and unregister the heap (before the worker goes)."""
        for rkey in self._unpacked:
            self._lib.ucp_rkey_destroy(rkey)
        self._unpacked = []
        if self._memh:
            self._lib.ucp_mem_unmap(self._context, self._memh)
            self._memh = 0


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
        return self.cells.ctypes.data + pe * LOOK_WORDS * 8

    def look_due(self) -> None:
        """The looks ``look_later`` asked for."""
        if self._any[0]:
            look_due(self.cells)


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
            wake_if_asleep(cells.ctypes.data + pe * LOOK_WORDS * 8)
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
    ends). True when
    more looks were asked for since it was posted."""
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


def transports(worker) -> dict[int, str]:
    """PE -> the UCX transports of ``worker``'s endpoint to it (``_endpoint_transports``)."""
    return {pe: _endpoint_transports(worker.lib, endpoint) for pe, endpoint in worker.endpoints.items()}


def _endpoint_transports(lib, endpoint: int) -> str:
    """The UCX transports (and devices) of ``endpoint``'s lanes, as ``ucp_ep_query`` says:
    "tcp/eth0 cma/memory"; "?" where this UCX cannot say."""
    entries = (ucp.TransportEntry * 16)()
    attr = ucp.EpAttr(field_mask=ucp.EP_ATTR_FIELD_TRANSPORTS, entries=ctypes.addressof(entries), num_entries=16,
                      entry_size=ctypes.sizeof(ucp.TransportEntry))
    if lib.ucp_ep_query(endpoint, ctypes.addressof(attr)) != ucp.UCS_OK:
        return "?"
    lanes = [f"{e.transport_name.decode()}/{e.device_name.decode()}" for e in entries[:attr.num_entries]]
    return " ".join(dict.fromkeys(lanes)) or "?"


@njit(nogil=True, cache=True)
def mark_done(ring, ticket, status, syndrome):
    """Request ``ticket`` of ``ring`` (the ucx engine's) is complete: ``status`` is UCX's
    (not 0: the wire failed it), ``syndrome`` a refusal before the wire (0: none); counted
    at the PE's word for answers. A put a thread waits for has landed then (its flush
    completed): a look at the peer's wake word is due (``look_later``)."""
    capacity = ring[target.R_CAPACITY]
    slot = target.RING_HEADER + ticket % capacity
    landed = status == 0 and syndrome == 0 and ring[slot + target.C_OP * capacity] == target.PUT \
        and ring[slot + target.C_WAITED * capacity] != 0 and ring[target.R_LOOKS] != 0
    look = ring[target.R_LOOKS] + 8 * LOOK_WORDS * ring[slot + target.C_PE * capacity] if landed else 0
    target._land(ring, capacity, ticket, mlx5.SYNDROME_TRANSPORT if status != 0 else syndrome, status)
    look_later(look)
    target.wake_at(ring[target.R_WAKE])


def _build():
    """The completion of a one-sided request (``ucp_send_nbx_callback_t``): its user data
    is its slot's cell (the ring's address, the ticket: ``_ucx.post``)."""
    target.callbacks()      # (the symbols mark_done calls, registered)

    @cfunc(target.SENT, nopython=True, cache=True)
    def on_done(request, status, cell):
        header = window.words_at(cell[0])
        ring = carray(header, (target.RING_HEADER + target.COLUMNS * header[target.R_CAPACITY],))
        mark_done(ring, cell[1], status, 0)
        _native.ucp_request_free(request)

    return on_done


completion = built_once(_build)


def slot_params(on_done, capacity: int, ring: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(params, cells): a ``ucp_request_param_t`` per slot of ``ring`` calling ``on_done``
    with that slot's cell (``cells[slot]``: the ring's address, then the ticket, which
    ``post`` writes before each request)."""
    size = ctypes.sizeof(ucp.RequestParams)
    params = np.zeros((capacity, size), np.uint8)
    cells = np.zeros((capacity, 2), np.int64)
    cells[:, 0] = ring.ctypes.data
    for slot in range(capacity):
        struct = ucp.RequestParams.from_buffer(params[slot])
        struct.op_attr_mask = ucp.OP_ATTR_FIELD_CALLBACK | ucp.OP_ATTR_FIELD_USER_DATA
        struct.cb, struct.user_data = on_done.address, cells[slot:].ctypes.data
    return params, cells
