"""The ``ucx`` remote engine: requests to PEs on other nodes as UCX active messages,
posted by the calling thread and answered by the target's native handler.

``submit`` takes a ring slot, writes the request's header into it and sends it (one
native call, ``ucp_am_send_nbx``), or adds it to its PE's batch when nobody waits for it
and it carries at most 8 bytes (``pgas.wire._batch``); the target's progress thread (or
any of its threads that progresses the worker) checks and applies it in native code and
answers; the answer lands (a get's data at its address, a fetched value in the slot) and
marks the slot done. ``wait`` progresses the worker itself, yielding the core, then backs
off with sleeps. No Python thread stands between a requester and the wire, on either side
(docs/transports.md, "The ucx engine").

Requests to one PE travel on one endpoint and are applied in order; ``quiet`` waits for
every answer. ``fence`` needs no work.
"""
from __future__ import annotations

import functools
import time

import numpy as np
from numba import carray, njit, typeof, types

from ..core import _job
from ..core._address import address_of
from ..core._errors import PgasError, PgasTimeoutError
from ..core._waiting import Naps, before_waiting, precise_sleeps
from ..nic import _mlx5 as mlx5
from ..nic._nic import Nic
from ..wire import _batch as batch, _native, _rma as rma, _target as target, _ucp as ucp, _wakes as wakes
from ..wire import _cache as wire_cache, _worker as worker_loops
from ..wire._window import bytes_at, words_at
from ..wire._worker import WAIT_MAX_PAUSE_S, WAIT_SPINS, Worker, next_wait_pause
from ._ibgda_ir import OP_NAMES
from ._lanes import Lanes

__all__ = ["Ucx"]

CAPACITY = 1024
# Rounds of progress a caller of ``copy_small`` makes for its one-sided put or get before it
# backs off (``wait``): completing it is this PE's own work (CMA's system call, a NIC's
# completion), not an answer from the target.
ONE_SIDED_SPINS = 2000
_MASK = (1 << 64) - 1


def _signed(value: int) -> int:
    """A 64-bit pattern as the int64 numba passes."""
    value &= _MASK
    return value - (1 << 64) if value >> 63 else value


_AT = target.RING_HEADER
_R_FREED, _R_NEXT = target.R_FREED, target.R_NEXT
_B_STAGED, _B_FAILED, _B_UNFLUSHED = batch.B_STAGED, batch.B_FAILED, batch.B_UNFLUSHED


@njit(cache=True)
def free_slots(ring, capacity, failures):
    """Advance the ring's first unfreed slot past answered requests nobody waits for;
    one that failed is copied to ``failures`` (rows: op, PE, remote address, bytes,
    syndrome) and passed too, while there is room there (else it stops). How many
    failures were copied."""
    freed, found = ring[target.R_FREED], 0
    while freed < ring[target.R_NEXT]:
        slot = freed % capacity
        if ring[_AT + target.C_DONE * capacity + slot] != freed + 1 \
                or ring[_AT + target.C_WAITED * capacity + slot] != 0:
            break
        syndrome = ring[_AT + target.C_SYNDROME * capacity + slot]
        if syndrome != 0:
            if found == failures.shape[0]:
                break
            failures[found, 0] = ring[_AT + target.C_OP * capacity + slot]
            failures[found, 1] = ring[_AT + target.C_PE * capacity + slot]
            failures[found, 2] = ring[_AT + target.C_RADDR * capacity + slot]
            failures[found, 3] = ring[_AT + target.C_NBYTES * capacity + slot]
            failures[found, 4] = syndrome
            found += 1
        freed += 1
    ring[target.R_FREED] = freed
    return found


# The requester's native calls keep the interpreter lock (they are short): numba's
# simulator polls its threads in a loop that holds the lock, so a simulated thread that
# let it go would wait the switch interval (5 ms) to get it back (docs/transports.md).
# Holding it, they are also atomic among the requesting threads: no other lock.

@njit(cache=True)
def post(ring, batches, row, headers, pe, op, size, rkey, raddr, nbytes, value, compare, laddr, waited, rma_params):
    """Take the next free slot of ``ring``, write the request into it and send it to
    the PE of row ``row`` of ``batches`` (a put: ``nbytes`` at ``laddr``). Where that PE's
    heap is registered for one-sided access (``_rma``), gets and puts (inline ones too) go
    one-sided (``_post_one_sided``); the rest as messages to its target, those that nobody
    waits for and that carry at most 8 bytes in that PE's batch. Its ticket; -1 when no
    slot is free (or a failure must be reported first: see ``free_slots``), or when a
    request ahead of it to that PE must be answered first (``ring[R_BLOCKED]``: its ticket
    + 1): a put or get whose data may land after
    what follows (more than ``target.EAGER_BYTES``: by rendezvous), or a message ahead of a
    one-sided request; -3 when one-sided writes to that PE must be flushed before this
    message (``Ucx._flush_row``); -2 - ticket when UCX could not send it (its status in
    the result)."""
    capacity = ring[target.R_CAPACITY]
    at_row = batch.GLOBAL_WORDS + row * batch.ROW_WORDS
    fence = batches[at_row + batch.P_FENCE]
    if fence != 0:
        if ring[_AT + target.C_DONE * capacity + (fence - 1) % capacity] < fence:
            ring[target.R_BLOCKED] = fence
            return -1
        batches[at_row + batch.P_FENCE] = 0
    ring[target.R_BLOCKED] = 0
    one_sided = batches[at_row + batch.P_RKEY] != 0 and (op == target.GET or op == target.PUT
                                                         or op == target.PUT_INLINE)
    if one_sided:           # requests to one PE are applied in order: the messages ahead first
        last = batches[at_row + batch.P_LAST_SENT]
        if last != 0:
            if ring[_AT + target.C_DONE * capacity + (last - 1) % capacity] < last:
                batch.flush_row(batches, row)
                ring[target.R_BLOCKED] = last
                return -1
            batches[at_row + batch.P_LAST_SENT] = 0
    elif batches[at_row + batch.P_UNFLUSHED] != 0:
        return -3
    ticket = ring[target.R_NEXT]
    if ticket - ring[target.R_FREED] >= capacity:
        free_slots(ring, capacity, np.zeros((0, 5), np.int64))     # (it stops at a failure to report)
        if ticket - ring[target.R_FREED] >= capacity:
            return -1
    ring[target.R_NEXT] = ticket + 1
    slot = ticket % capacity
    ring[_AT + target.C_OP * capacity + slot] = op
    ring[_AT + target.C_LADDR * capacity + slot] = laddr
    ring[_AT + target.C_WAITED * capacity + slot] = waited
    ring[_AT + target.C_PE * capacity + slot] = pe
    ring[_AT + target.C_RADDR * capacity + slot] = raddr
    ring[_AT + target.C_NBYTES * capacity + slot] = nbytes
    value_address = headers.ctypes.data + (slot * target.REQUEST_WORDS + target.H_VALUE) * 8
    if one_sided:
        if op == target.PUT_INLINE or (op == target.PUT and not waited and nbytes <= 8):
            # its bytes now, kept in its slot's header until it completes (the source may
            # change after this returns)
            headers[slot, target.H_VALUE] = value
            if op == target.PUT:
                _native.memcpy(value_address, laddr, nbytes)
            op, laddr = target.PUT, value_address
        return _post_one_sided(ring, batches, at_row, ticket, op, rkey, raddr, nbytes, laddr, waited, rma_params)
    batches[at_row + batch.P_LAST_SENT] = ticket + 1
    h = headers[slot]
    h[0], h[1], h[2], h[3] = ticket, op, size, rkey
    h[4], h[5], h[6], h[7] = raddr, nbytes, value, compare
    if not waited and op != target.GET and nbytes <= 8:
        if op == target.PUT:            # its bytes now, inline (the source may change after)
            _native.memcpy(value_address, laddr, nbytes)
            h[1] = target.PUT_INLINE
        batch.stage(batches, row, h)
        return ticket
    batch.flush_row(batches, row)       # the requests before it to that PE go first
    data = value_address if op == target.PUT_INLINE else (laddr if op == target.PUT else 0)
    large = nbytes > target.EAGER_BYTES
    request = _native.ucp_am_send_nbx(batches[at_row + batch.P_ENDPOINT], target.AM_REQUEST,
                                      headers.ctypes.data + slot * target.REQUEST_WORDS * 8, target.REQUEST_WORDS * 8,
                                      data, nbytes if data else 0,
                                      batches[batch.B_PARAMS if large else batch.B_EAGER_PARAMS])
    if request > 0:     # UCX completes it; the header and the data outlive it (the answer comes after)
        _native.ucp_request_free(request)
    elif request < 0:
        ring[_AT + target.C_RESULT * capacity + slot] = request
        return -2 - ticket
    if large:           # nothing more to that PE until its data has landed (requests stay in order)
        batches[at_row + batch.P_FENCE] = ticket + 1
    return ticket


@njit(cache=True)
def _post_one_sided(ring, batches, at_row, ticket, op, rkey, raddr, nbytes, laddr, waited, rma_params):
    """``post``'s one-sided put or get (its slot taken): checked here against the peer's
    heap (its key and range: nothing outside reaches the wire) and given UCX's key to the
    peer's memory there (the heap's, or that of memory made symmetric: ``_rma.key_at``;
    none where it crosses the edge of such memory: refused too), then ``ucp_put_nbx`` or
    ``ucp_get_nbx``, completing in the slot's callback (``_rma.completion``) or at once. A
    put that a thread waits for is flushed with it: complete means landed, as ``pgas.put``
    promises; others land by the next flush (``quiet``). That flush is the worker's
    (``ucp_worker_flush_nbx``), which completes this PE's every write: between the hosts
    it takes one round of progress where the endpoint's takes two (2.3 against 2.9 µs a
    put)."""
    capacity = ring[target.R_CAPACITY]
    slot = ticket % capacity
    base = batches[at_row + batch.P_BASE]
    ucx_key = rma.key_at(batches[at_row + batch.P_REGIONS], batches[at_row + batch.P_RKEY], raddr - base, nbytes)
    if ucx_key == 0 or target.outside(base, batches[at_row + batch.P_SIZE], batches[at_row + batch.P_KEY], rkey,
                                      raddr, nbytes):
        rma.mark_done(ring, ticket, 0, mlx5.SYNDROME_REMOTE_ACCESS)
        return ticket
    endpoint = batches[at_row + batch.P_ENDPOINT]
    params = rma_params[1].ctypes.data + slot * rma_params[1].shape[1]
    rma_params[2][slot, 1] = ticket
    if op == target.GET:
        request = _native.ucp_get_nbx(endpoint, laddr, nbytes, raddr, ucx_key, params)
    elif waited:        # the put, then the flush whose completion completes the slot
        request = _native.ucp_put_nbx(endpoint, laddr, nbytes, raddr, ucx_key, rma_params[0].ctypes.data)
        if request > 0:
            _native.ucp_request_free(request)       # (UCX completes it; the flush waits for it)
        if request >= 0:
            request = _native.ucp_worker_flush_nbx(ring[target.R_WORKER], params)
    else:
        request = _native.ucp_put_nbx(endpoint, laddr, nbytes, raddr, ucx_key, params)
        batches[at_row + batch.P_UNFLUSHED] = 1
        batches[batch.B_UNFLUSHED] = 1
    if request == 0:
        rma.mark_done(ring, ticket, 0, 0)
    elif request < 0:
        ring[_AT + target.C_RESULT * capacity + slot] = request
        return -2 - ticket
    return ticket


# ``copy_once``'s table (``Ucx._copy_tables``, one per peer): the engine's arrays by
# address, then the peer's row, PE number, rkey and heap base; then a guard (``guard_with``):
# the address of another path's words to the peer (0: none), and which two of them must be
# equal (its completion floor and its last request) for a copy to go this way
(T_RING, T_RING_WORDS, T_BATCHES, T_BATCH_WORDS, T_HEADERS, T_PLAIN_PARAMS, T_SLOT_PARAMS, T_PARAM_BYTES,
 T_SLOT_CELLS, T_WORKER, T_WAITERS, T_ROW, T_PE, T_RKEY, T_BASE, T_GUARD, T_GUARD_FLOOR, T_GUARD_LAST) = range(18)


@njit(cache=True)
def copy_once(table, to_peer, offset, local):
    """A put (``to_peer``) or get of contiguous ``local`` at ``offset`` of the heap of the
    peer of ``table`` that the caller waits for: ``post``-ed, then the worker progressed
    until it completes, at most ``WAIT_SPINS`` rounds (``ONE_SIDED_SPINS`` where it went
    one-sided: its completion is this PE's own work). -1 when it completed unrefused (its
    slot freed); its ticket when the caller must wait for it; -2 when ``post`` could not
    take it now (the caller submits it as any request); -3 above one message's size, or
    where ``local`` is not C-contiguous (the general path copies it first); -4 while the
    table's guard has requests in flight (the caller takes that path, behind them). The
    engine's arrays come by address in ``table``: four arguments are typed in a fifth of
    the time of its fourteen (this is the whole of a small put between nodes)."""
    nbytes = local.nbytes
    if nbytes > mlx5.MAX_MESSAGE or not local.flags.c_contiguous:
        return -3
    t = table
    if t[T_GUARD] != 0:
        guard = carray(words_at(t[T_GUARD]), (max(t[T_GUARD_FLOOR], t[T_GUARD_LAST]) + 1,))
        if guard[t[T_GUARD_FLOOR]] < guard[t[T_GUARD_LAST]]:
            return -4
    ring = carray(words_at(t[T_RING]), (t[T_RING_WORDS],))
    batches = carray(words_at(t[T_BATCHES]), (t[T_BATCH_WORDS],))
    headers = carray(words_at(t[T_HEADERS]), (CAPACITY, target.REQUEST_WORDS))
    rma_params = (carray(bytes_at(t[T_PLAIN_PARAMS]), (t[T_PARAM_BYTES],)),
                  carray(bytes_at(t[T_SLOT_PARAMS]), (CAPACITY, t[T_PARAM_BYTES])),
                  carray(words_at(t[T_SLOT_CELLS]), (CAPACITY, 2)))
    row, op = t[T_ROW], target.PUT if to_peer else target.GET
    ticket = post(ring, batches, row, headers, t[T_PE], op, 0, t[T_RKEY], t[T_BASE] + offset, nbytes, 0, 0,
                  local.ctypes.data, True, rma_params)
    if ticket < 0:
        return -2
    slot = ticket % CAPACITY
    done = _AT + target.C_DONE * CAPACITY + slot
    one_sided = batches[batch.GLOBAL_WORDS + row * batch.ROW_WORDS + batch.P_RKEY] != 0
    waiters, worker = carray(words_at(t[T_WAITERS]), (1,)), t[T_WORKER]
    waiters[0] += 1
    for _ in range(ONE_SIDED_SPINS if one_sided else WAIT_SPINS):
        if ring[done] > ticket:
            break
        if _native.ucp_worker_progress(worker) == 0:
            _native.sched_yield()
    waiters[0] -= 1
    if ring[done] > ticket and ring[_AT + target.C_SYNDROME * CAPACITY + slot] == 0:
        ring[_AT + target.C_WAITED * CAPACITY + slot] = 0
        if ring[target.R_FREED] == ticket:      # the oldest: freed now (``quiet`` then finds nothing to do)
            ring[target.R_FREED] = ticket + 1
        return -1
    return ticket


@njit(cache=True)
def flush_lane(batches, written, worker, params, spins):
    """``quiet``'s flush of lane ``batches``' one-sided writes: their marks cleared (the
    rows of the PEs written to marked in ``written``), then, unless ``spins`` < 0 (another
    lane's flush covers these), ``ucp_worker_flush_nbx`` (every write of this PE) and up to
    ``spins`` rounds of progress. 0 when it completed, a UCX status < 0 when it failed,
    else its request (in flight: the caller waits for it). One native call: through ctypes
    the flush and its wait cost ~15 µs of a put_nbi + quiet's 45 between emulated nodes."""
    batches[batch.B_UNFLUSHED] = 0
    for row in range(written.shape[0]):
        at = batch.GLOBAL_WORDS + row * batch.ROW_WORDS + batch.P_UNFLUSHED
        if batches[at] != 0:
            batches[at] = 0
            written[row] = 1
    if spins < 0:
        return 0
    request = _native.ucp_worker_flush_nbx(worker, params)
    if request <= 0:
        return request
    for _ in range(spins):
        status = _native.ucp_request_check_status(request)
        if status != ucp.UCS_INPROGRESS:
            _native.ucp_request_free(request)
            return status
        if _native.ucp_worker_progress(worker) == 0:
            _native.sched_yield()
    return request


@njit(cache=True)
def look_at_written(written, peers, looks):
    """A look at the wake word of each PE (``peers``, by row) marked in ``written`` is due
    (``_wakes.look_later``; ``looks``: the cells' address); the marks cleared."""
    for row in range(written.shape[0]):
        if written[row] != 0:
            written[row] = 0
            wakes.look_later(wakes.cell_of(looks, peers[row]))


@njit(cache=True)
def quiet_once(ring, batches, written, peers, looks, failures, out, worker, waiters, params, spins, flush_spins):
    """``quiet`` of lane ``batches`` in one native call, where every request is answered
    within ``spins`` rounds of progress: the batches sent, the answers waited for, the
    one-sided writes flushed (``flush_lane``, up to ``flush_spins`` rounds; the looks at
    the wake words of the PEs written to then due), the answered slots freed
    (``free_slots``). 0 when it got that far: ``out[0]`` is the flush's request still in
    flight (> 0), or its status, and ``out[1]`` how many failures ``free_slots`` copied to
    ``failures``; -1 when a request is still unanswered, or a batch could not be sent (the
    caller's Python ``quiet`` goes on from there)."""
    if batches[batch.B_FAILED] != 0:
        return -1
    batch.flush_all(batches)
    if batches[batch.B_FAILED] != 0:
        return -1
    capacity = ring[target.R_CAPACITY]
    done = ring[_AT + target.C_DONE * capacity:_AT + (target.C_DONE + 1) * capacity]
    last = ring[target.R_NEXT]
    ticket = first_unanswered(done, ring[target.R_FREED], last)
    while ticket < last:
        slot = ticket % capacity
        if not worker_loops.progress_until(worker, waiters, done[slot:slot + 1], ticket + 1, spins):
            return -1
        ticket = first_unanswered(done, ticket, last)
    out[0] = flush_lane(batches, written, worker, params, flush_spins) if batches[batch.B_UNFLUSHED] != 0 else 0
    if out[0] == 0:
        look_at_written(written, peers, looks)
    out[1] = free_slots(ring, capacity, failures)
    return 0


@njit(cache=True)
def flush(batches):
    """Send every batch now (keeping the interpreter lock, as ``post``)."""
    batch.flush_all(batches)


@njit(cache=True)
def first_unanswered(done, first, last):
    """The first ticket in [first, last) whose answer has not come (``last`` if none)."""
    capacity = done.shape[0]
    for ticket in range(first, last):
        if done[ticket % capacity] < ticket + 1:
            return ticket
    return last


class _NothingBeside:
    """No other path beside the engine's copies (``Ucx.guard_with``)."""
    errors = ()

    @staticmethod
    def raise_failures(fn: str) -> None:
        """Nothing to raise."""


_NOTHING_BESIDE = _NothingBeside()


class Ucx:
    """The ring of requests of one PE and its UCX worker, reaching ``nic.peers`` (the NIC's
    registrations name the heaps: raddr and rkey). ``wake``, ``answers``: the addresses of
    this PE's wake words (``core.native._wake_words``; 0: none): the target counts its writes into
    the heap at the first, the answers' handlers at the second. ``registered``: the memory
    made symmetric so far (heap offset -> bytes), registered with UCX apart from the heap
    (``_rma.HeapKeys``)."""

    def __init__(self, nic: Nic, heap_region, timeout: float, wake: int = 0, answers: int = 0,
                 registered: dict[int, int] | None = None):
        self.nic = nic
        self.timeout = timeout
        wire_cache.drop_if_stale((post, copy_once, quiet_once, free_slots, flush, first_unanswered, batch.stage,
                                  worker_loops.serve, target._land))
        precise_sleeps()        # waiters' back-off sleeps end on time (this thread, and those it starts)
        self.worker = Worker(nic.comm, nic.my_pe, nic.peers, request_bytes=target.REQUEST_USER_BYTES, rma=True)
        try:
            self._setup(heap_region, wake, answers, registered)
        except BaseException:
            self.worker.close()
            raise

    def _setup(self, heap_region, wake: int, answers: int, registered: dict[int, int] | None) -> None:
        nic = self.nic
        _, on_answer, _, on_get_received, _, on_answers, _ = target.callbacks()
        self._free_slots, self._flush, self._first_unanswered = free_slots, flush, first_unanswered
        self._target = target.serve_heap(self.worker, heap_region.base, heap_region.size, heap_region.rkey, wake)
        # one-sided access: every PE's heap (and memory made symmetric: ``registered``)
        # registered with UCX, its key unpacked per endpoint
        self.heap_keys = rma.HeapKeys(self.worker, nic.comm, nic.my_pe, heap_region.base, heap_region.size, wake,
                                      registered)
        self._looks = self.heap_keys.looks(self.worker.endpoints)    # at the peers' wake words, after writes
        # the requester: the ring (its header, then its columns) and the request headers
        self.ring = np.zeros(target.RING_HEADER + target.COLUMNS * CAPACITY, np.int64)
        self._get_receive_params = ucp.request_params(0, on_get_received, self.ring)
        self.ring[[target.R_CAPACITY, target.R_WORKER, target.R_RECEIVE_PARAMS, target.R_SELF, target.R_WAKE,
                   target.R_LOOKS]] = (CAPACITY, self.worker.handle, self._get_receive_params.ctypes.data,
                                       self.ring.ctypes.data, answers, self._looks.cells.ctypes.data)
        self.columns = self.ring[target.RING_HEADER:].reshape(target.COLUMNS, CAPACITY)
        self._ring_words = memoryview(self.ring)
        self.headers = np.zeros((CAPACITY, target.REQUEST_WORDS), np.int64)
        # one-sided requests: plain parameters, and a slot's (its completion, ``_rma``)
        self._rma_params = (ucp.request_params(0), *rma.slot_params(rma.completion(), CAPACITY, self.ring))
        # ``post``'s compiled form, called without the dispatcher's typing of 15 arguments
        # (their types never change: a lane's batches are all alike, the rest Python ints)
        self._post = post.compile((typeof(self.ring), typeof(self.ring), types.int64, typeof(self.headers),
                                   *[types.int64] * 9, types.boolean, typeof(self._rma_params)))
        # UCX picks eager or rendezvous by size (UCX_RNDV_THRESH)
        self._request_params = ucp.request_params(ucp.AM_SEND_FLAG_REPLY | ucp.AM_SEND_FLAG_COPY_HEADER)
        self._eager_params = ucp.request_params(ucp.AM_SEND_FLAG_REPLY | ucp.AM_SEND_FLAG_COPY_HEADER
                                                | ucp.AM_SEND_FLAG_EAGER)
        self._failures = np.zeros((CAPACITY, 5), np.int64)   # what free_slots found failed
        self._quiet_out = np.zeros(2, np.int64)              # ``quiet_once``'s flush and failures found
        self.errors: list[str] = []
        self.worker.handle_messages(target.AM_ANSWER, on_answer, self.ring.ctypes.data)
        self.worker.handle_messages(target.AM_ANSWERS, on_answers, self.ring.ctypes.data)
        # small requests nobody waits for, coalesced per peer (pgas.wire._batch)
        peers = sorted(self.worker.endpoints)
        self._row = {pe: row for row, pe in enumerate(peers)}
        self._written = np.zeros(len(peers), np.int64)          # rows written to, by ``flush_lane``
        # lane 0's ``quiet_once`` and ``look_at_written``, their arguments bound (the PEs by row)
        looks = (self._written, np.array(peers, np.int64), self._looks.cells.ctypes.data)
        self._look_at_written = functools.partial(look_at_written, *looks)
        self.batches = self._new_batches(self.worker.endpoints)
        self._batch_words = memoryview(self.batches)
        self._quiet_now = functools.partial(quiet_once, self.ring, self.batches, *looks, self._failures,
                                            self._quiet_out, self.worker.handle, self.worker.waiters,
                                            self._rma_params[0].ctypes.data, WAIT_SPINS, ONE_SIDED_SPINS)
        # ``copy_once``'s tables: the arrays it reaches by address (kept by this engine), then each peer's
        common = [0] * T_ROW
        common[T_RING], common[T_RING_WORDS] = self.ring.ctypes.data, self.ring.size
        common[T_BATCHES], common[T_BATCH_WORDS] = self.batches.ctypes.data, self.batches.size
        common[T_HEADERS], common[T_PLAIN_PARAMS] = self.headers.ctypes.data, self._rma_params[0].ctypes.data
        common[T_SLOT_PARAMS], common[T_PARAM_BYTES] = self._rma_params[1].ctypes.data, self._rma_params[1].shape[1]
        common[T_SLOT_CELLS], common[T_WORKER] = self._rma_params[2].ctypes.data, self.worker.handle
        common[T_WAITERS] = self.worker.waiters.ctypes.data
        self._copy_tables = {pe: np.array([*common, row, pe, _signed(nic.remote[pe].rkey), nic.remote[pe].base,
                                           0, 0, 0], np.int64) for pe, row in self._row.items()}
        self.guard_with()           # (none yet: ``copy_small``'s other path)
        # a context's lane: endpoints of its own (connections of their own); its requests
        # are all waited for, so never batched
        self.lanes = Lanes(self.batches, lambda: self._new_batches(self.worker.connect_again()))
        before_waiting.append(self.flush)
        before_waiting.append(self._looks.look_due)
        self.worker.start(self.batches)
        self._compile_now()

    def _compile_now(self) -> None:
        """Compile the native calls that the first request did not (numba compiles on
        first use: a first ``quiet`` with batched requests would otherwise take 100 ms)."""
        self._flush(self.batches)
        self._free_slots(self.ring, CAPACITY, self._failures)
        self._first_unanswered(self.columns[target.C_DONE], 0, 0)
        flush_lane(self.batches, self._written, 0, 0, -1)        # (nothing to flush yet)
        self._look_at_written()
        wakes.look_later(0)
        self._quiet_now()           # (nothing to wait for yet)

    def _new_batches(self, endpoints: dict[int, int]) -> np.ndarray:
        """The batches (and one-sided keys) of a lane whose endpoint to PE ``pe`` is ``endpoints[pe]``."""
        keys = self.heap_keys.unpack(endpoints)
        peers = sorted(endpoints)
        heaps = [(keys[pe], self.nic.remote[pe].rkey, *self.heap_keys.ranges[pe],
                  self.heap_keys.regions_of(endpoints[pe])) for pe in peers]
        return batch.new_batches([endpoints[pe] for pe in peers], self._request_params.ctypes.data,
                                 self._eager_params.ctypes.data, heaps)

    def transports(self) -> dict[int, str]:
        """PE -> the UCX transports of the endpoint to it (``_rma.transports``)."""
        return rma.transports(self.worker)

    def close(self) -> None:
        self.flush()
        for hook in (self.flush, self._looks.look_due):
            if hook in before_waiting:
                before_waiting.remove(hook)
        self.heap_keys.close()
        self.worker.close()

    def flush(self) -> None:
        """Send the batched requests now (a thread of this PE is about to wait)."""
        if self.batches[batch.B_STAGED]:
            self._flush(self.batches)

    # Requesters ----------------------------------------------------------------------

    def put_inline(self, fn: str, pe: int, raddr: int, size: int, bits: int) -> None:
        """An inline write of ``size`` bytes (``bits``) that nobody waits for (``Ibgda.put_inline``)."""
        self.submit(fn, target.PUT_INLINE, pe, raddr, size=size, nbytes=size, value=bits, waited=False)

    def submit(self, fn: str, op: int, pe: int, raddr: int, *, laddr: int = 0, lkey: int = 0, nbytes: int = 0,
               size: int = 8, value: int = 0, compare: int = 0, waited: bool = True, lane: int = 0) -> int:
        """Send one request on the endpoint to ``pe`` of ``lane``; returns its ticket.
        ``waited``: the caller will ``wait`` for it (else a failure is kept for the next
        ``quiet``)."""
        mlx5.check_message(fn, nbytes)
        arguments = (self.ring, self.lanes[lane], self._row[pe], self.headers, pe, op, size, self.nic.remote[pe].rkey,
                     raddr, nbytes, _signed(value), _signed(compare), laddr, waited, self._rma_params)
        ticket = self._post(*arguments)
        if ticket in (-1, -3):
            ticket = self._post_when_free(fn, arguments)
        if ticket < -1:
            status = self.columns[target.C_RESULT, (-2 - ticket) % CAPACITY]
            raise PgasError(f"{fn}: UCX could not send the {OP_NAMES[op]} to PE {pe} (ucs_status_t {status})")
        return ticket

    def _post_when_free(self, fn: str, arguments: tuple) -> int:
        """Post once a slot of the ring is free (keeping the failures of the requests
        whose slots it frees), waiting for the oldest request's answer; or once the large
        put or get to that PE ahead of it is answered."""
        deadline = time.monotonic() + self.timeout
        while True:
            self._keep_failures()
            ticket = self._post(*arguments)
            if ticket == -3:
                self._flush_row(fn, arguments[1], arguments[2], deadline, arguments[4])
                continue
            if ticket != -1:
                return ticket
            blocked = int(self.ring[target.R_BLOCKED])
            if blocked:
                ahead = self.columns[:, (blocked - 1) % CAPACITY]
                pe, what = int(ahead[target.C_PE]), OP_NAMES[int(ahead[target.C_OP])]
                self._wait_done(fn, blocked - 1, deadline, f"the answer to the large {what} to PE {pe} ahead of it",
                                [pe])
                continue
            oldest = int(self.ring[target.R_FREED])
            waiting_for = f"a free slot in the ucx engine's ring ({CAPACITY} outstanding)"
            if self.columns[target.C_DONE, oldest % CAPACITY] == oldest + 1:     # its thread has yet to look
                if time.monotonic() > deadline:
                    raise PgasTimeoutError(f"{fn}: waited PGAS_TIMEOUT={self.timeout:g} s for {waiting_for}")
                time.sleep(0)
            else:
                self._wait_done(fn, oldest, deadline, waiting_for, [int(self.columns[target.C_PE, oldest % CAPACITY])])

    def _flush_row(self, fn: str, batches: np.ndarray, row: int, deadline: float, pe: int) -> None:
        """Complete the one-sided writes to PE ``pe`` (row ``row`` of lane ``batches``): its
        flag cleared first (a write posted meanwhile sets it again), then ``ucp_ep_flush_nbx``
        and its wait; then a look at its wake word is due (``_wakes.look_later``)."""
        at = batch.GLOBAL_WORDS + row * batch.ROW_WORDS
        batches[at + batch.P_UNFLUSHED] = 0
        request = self.worker.lib.ucp_ep_flush_nbx(int(batches[at + batch.P_ENDPOINT]), self._rma_params[0].ctypes.data)
        self._check_flush(fn, request, [pe])
        self._wait_requests(fn, [request] if request > 0 else [], deadline, [pe])
        wakes.look_later(self._looks.address(pe))

    def _flush_all(self, fn: str, deadline: float, pes) -> None:
        """Complete every one-sided write of this PE (``ucp_worker_flush_nbx``), if any lane
        has one; then looks at the wake words of the PEs written to are due (``_wakes.look_later``)."""
        lanes = [lane for lane in self.lanes if lane[batch.B_UNFLUSHED]]
        if not lanes:
            return
        for batches in lanes[1:]:
            flush_lane(batches, self._written, 0, 0, -1)
        request = flush_lane(lanes[0], self._written, self.worker.handle, self._rma_params[0].ctypes.data,
                             ONE_SIDED_SPINS)
        self._check_flush(fn, request, pes)
        self._wait_requests(fn, [request] if request > 0 else [], deadline, pes)
        self._look_at_written()

    @staticmethod
    def _check_flush(fn: str, request: int, pes) -> None:
        if request < 0:
            raise PgasError(f"{fn}: UCX could not flush the one-sided writes to PE {', '.join(map(str, pes))} "
                            f"(ucs_status_t {request})")

    def _wait_requests(self, fn: str, requests: list, deadline: float, pes) -> None:
        """Progress the worker (backing off with sleeps) until UCX's ``requests`` complete; free them."""
        lib, naps = self.worker.lib, Naps(next_wait_pause)
        for request in requests:
            while (status := lib.ucp_request_check_status(request)) == ucp.UCS_INPROGRESS:
                if lib.ucp_worker_progress(self.worker.handle) == 0:
                    if time.monotonic() > deadline:
                        raise PgasTimeoutError(f"{fn}: waited PGAS_TIMEOUT={self.timeout:g} s for the one-sided "
                                               f"writes to PE {', '.join(map(str, pes))} to complete")
                    naps.nap(WAIT_MAX_PAUSE_S)
            lib.ucp_request_free(request)
            if status != ucp.UCS_OK:
                raise PgasError(f"{fn}: the one-sided writes to PE {', '.join(map(str, pes))} failed "
                                f"(ucs_status_t {status})")

    def copy_small(self, pe: int, offset: int, local: np.ndarray, to_peer: bool) -> bool:
        """The small-call fast path (``DirectCopies``) to PE ``pe``: contiguous ``local`` into
        (``to_peer``) or out of PE ``pe``'s heap at ``offset``, complete on return (True):
        posted and, most often, completed in one native call (``copy_once``); else waited
        for as any request (or, when it could not be posted at once, sent as any). False
        above one message's size (the general path refuses it) or where ``local`` is not
        C-contiguous (the general path copies it first)."""
        ticket = copy_once(self._copy_tables[pe], to_peer, offset, local)
        if ticket != -1 or self.errors or self._beside.errors:
            return self._finish_copy(pe, to_peer, offset, local, ticket)
        return True

    def guard_with(self, beside=None, otherwise=None, timed_out=None) -> None:
        """From now on ``copy_small`` to PE pe comes behind the requests of another path,
        ``beside`` (``in_flight_words()``: where its requests to each PE show as in
        flight; ``errors`` and ``raise_failures``: the failures of those nobody waited
        for): while one to that PE is in flight it takes ``otherwise(pe, offset, local,
        to_peer)`` instead; the next copy raises ``beside``'s failures, as that path would;
        ``timed_out()`` is called when a copy's wait times out (it is still in flight).
        No ``beside``: no guard."""
        words, floor_at, last_at = beside.in_flight_words() if beside is not None else ({}, 0, 0)
        for pe, table in self._copy_tables.items():
            table[T_GUARD:] = (words[pe], floor_at, last_at) if words else (0, 0, 0)
        self._guarded, self._timed_out = otherwise, timed_out
        self._beside = _NOTHING_BESIDE if beside is None else beside

    def _finish_copy(self, pe: int, to_peer: bool, offset: int, local: np.ndarray, ticket: int) -> bool:
        """``copy_small`` after ``copy_once``: its request sent (-2) and waited for, then the
        failures of earlier requests nobody waited for; False for what it did not take (-3);
        the guard's path (-4)."""
        if ticket == -3:
            return False
        if ticket == -4:
            return self._guarded(pe, offset, local, to_peer)
        fn = "pgas.put" if to_peer else "pgas.get"
        if ticket == -2:
            ticket = self.submit(fn, target.PUT if to_peer else target.GET, pe, self.nic.remote[pe].base + offset,
                                 laddr=address_of(local), nbytes=local.nbytes)
        if ticket >= 0:
            try:
                self.wait(fn, ticket)
            except PgasTimeoutError:
                if self._timed_out is not None:
                    self._timed_out()
                raise
        self.raise_failures(fn)
        self._beside.raise_failures(fn)
        return True

    def _keep_failures(self, found: int = 0) -> None:
        """Free the answered slots nobody waits for, keeping their failures for ``quiet``
        (the first ``found`` rows of ``_failures``: found already, by ``quiet_once``)."""
        failures = self._failures
        found = found or self._free_slots(self.ring, CAPACITY, failures)
        while found:
            for op, pe, raddr, nbytes, syndrome in failures[:found].tolist():
                self.errors.append(mlx5.refusal("pgas (non-blocking operation, reported at quiet)", OP_NAMES[op],
                                                pe, raddr, nbytes, syndrome))
            found = self._free_slots(self.ring, CAPACITY, failures)

    def _wait_done(self, fn: str, ticket: int, deadline: float, waiting_for: str, pes) -> None:
        """Progress the worker (then back off with sleeps) until request ``ticket`` is answered."""
        self.flush()            # (it may wait in a batch)
        slot = ticket % CAPACITY
        mark = self.columns[target.C_DONE, slot:slot + 1]
        handle, waiters = self.worker.handle, self.worker.waiters
        if self.worker.progress_until(handle, waiters, mark, ticket + 1, WAIT_SPINS):
            return
        heartbeat = _job.Heartbeat(fn, time.monotonic(), lambda: pes)
        naps = Naps(next_wait_pause)
        while True:
            naps.look()
            if self.worker.progress_until(handle, waiters, mark, ticket + 1, WAIT_SPINS):
                return
            now = time.monotonic()
            if now > deadline:
                raise PgasTimeoutError(f"{fn}: waited PGAS_TIMEOUT={self.timeout:g} s for {waiting_for}")
            if now >= heartbeat.due:
                heartbeat.beat(now)
            # a back-off, not the worker's event descriptor: that one belongs to the progress
            # thread (two threads arming it lost wake-ups between hosts); the answer's
            # handlers end it early (they count at this PE's word for answers)
            naps.nap()

    def wait(self, fn: str, ticket: int) -> int:
        """Wait for request ``ticket``; its fetched value (atomics), or PgasError if refused."""
        slot = ticket % CAPACITY
        column = self.columns[:, slot]
        op, pe, raddr, nbytes = (int(column[c]) for c in (target.C_OP, target.C_PE, target.C_RADDR, target.C_NBYTES))
        try:
            self._wait_done(fn, ticket, time.monotonic() + self.timeout,
                            f"the answer to the {OP_NAMES[op]} to PE {pe}", [pe])
            if column[target.C_SYNDROME]:
                raise PgasError(mlx5.refusal(fn, OP_NAMES[op], pe, raddr, nbytes, int(column[target.C_SYNDROME])))
            return int(column[target.C_RESULT]) & ((1 << (8 * min(nbytes, 8))) - 1 if nbytes else 0)
        finally:
            column[target.C_SYNDROME] = 0   # its refusal is reported here, not again when the slot is freed
            column[target.C_WAITED] = 0     # the slot may be reused

    def quiet(self, fn: str, pes=None) -> None:
        """Wait until every request sent so far (to the PEs in set ``pes``) is answered;
        raise the first failure of a request nobody waited for."""
        ring, lane0 = self._ring_words, self._batch_words
        if (ring[_R_FREED] == ring[_R_NEXT] and not (self.errors or lane0[_B_STAGED] or lane0[_B_FAILED]
                                                     or lane0[_B_UNFLUSHED])
                and not (self.lanes.several and any(lane[batch.B_UNFLUSHED] for lane in self.lanes))):
            # every request complete, its slot freed, and nothing batched, failed or
            # unflushed: nothing to wait for (read through memoryviews, with the indexes
            # bound here: a quiet with nothing to do is on every small put's path)
            return
        if pes is None and not self.lanes.several and not self.errors and self._quiet_now() == 0:
            self._after_quiet_once(fn)
            return
        last = int(self.ring[target.R_NEXT])
        self.flush()
        if self.batches[batch.B_FAILED]:
            raise PgasError(f"{fn}: UCX could not send {int(self.batches[batch.B_FAILED])} batched requests to PEs "
                            "on other nodes (a peer's endpoint failed)")
        deadline = time.monotonic() + self.timeout
        done = self.columns[target.C_DONE]
        ticket = int(self.ring[target.R_FREED])
        # many threads may quiet at once: each skips what is answered in one native scan
        while (ticket := self._first_unanswered(done, ticket, last)) < last:
            pe = int(self.columns[target.C_PE, ticket % CAPACITY])
            if pes is None or pe in pes:
                self._wait_done(fn, ticket, deadline, f"the answers of {last - ticket} operations to PEs on other "
                                                      "nodes", [pe])
            else:
                ticket += 1
        self._flush_all(fn, deadline, sorted(self._row) if pes is None else sorted(pes))
        self._keep_failures()
        self.raise_failures(fn)

    def _after_quiet_once(self, fn: str) -> None:
        """``quiet`` after ``quiet_once`` did it: the flush it left in flight waited for,
        the failures it found kept, the first raised."""
        request, found = (int(x) for x in self._quiet_out)
        if request != 0:
            pes = sorted(self._row)
            self._check_flush(fn, request, pes)
            self._wait_requests(fn, [request], time.monotonic() + self.timeout, pes)
            self._look_at_written()
        self._keep_failures(found)
        self.raise_failures(fn)

    def raise_failures(self, fn: str) -> None:
        """Raise (and forget) the first failure of a completed request nobody waited for."""
        if self.errors:
            first, self.errors = self.errors[0], []
            raise PgasError(first)
