"""The emulated NIC's work for the queue pairs of the GPU-initiated path and the proxy, in
native code over UCX.

A device thread (``pgas.transport._ibgda``) or the proxy thread writes mlx5 WQEs into a
queue pair's send queue and rings. Here the doorbell's work is one numba call with no
Python inside: read the WQEs the doorbell record announces (the NIC's compiled decoder,
``pgas.nic._wqe_code``), check each one's local key and range (``KeyTable``: a WQE naming
memory nobody registered is refused, nothing sent), turn it into the wire's request
(``pgas.wire._target``: the same target checks the rkey and bounds and applies it on the
peer, as for the ucx engine) and send it; small ones (inline writes of up to 8 bytes to a
heap not reached one-sided, atomics) go 16 to one message.

Where the peer's heap is registered for one-sided access (``_rma``: the simulator's host
heaps), reads and writes (inline ones too) do not go to the peer's target at all: they
are checked here against its heap (range and key: a refusal never reaches the wire) and
posted with ``ucp_get_nbx``/``ucp_put_nbx``, as a NIC's RDMA engine executes them. A read
is complete when its data has landed; writes once a ``ucp_ep_flush_nbx`` after them
completes (one per doorbell's worth of writes: a write's CQE means it has landed at the
peer, as on an RC queue pair), and then a look at the peer's wake word is due (``_wakes``:
a thread of it may sleep waiting for a word of its heap). Atomics stay messages to the target (they
must be atomic with the peer's CPU atomics on the word). A queue's order is kept: a
message or read after one-sided writes waits for their flush, a one-sided request after
messages for their answers (``Q_FENCE``).

The answers land in native handlers that run wherever the worker is progressed (its
progress thread, or a waiting thread): a read's data at its local address, a fetched
value in network byte order at its cell, as ConnectX writes them; then, in WQE order,
the CQEs (collapsed: an error CQE for each refused WQE and the one CQE with the newest
completed WQE's index; else one per signalled or refused WQE), so the queue's readers
(``ibgda_progress``, the proxy's CQ poll) read completions as from the emulated NIC's
thread. No Python thread stands between a device thread and the wire.

The table (one int64 array) holds the global words, a row per queue pair (its queues'
addresses, the endpoint to its peer, how far the NIC has read and completed), and a
flight per basic block of each send queue: what the WQE starting there needs when its
answer comes. A request's ticket is its queue's row and its WQE's first block.
"""
from __future__ import annotations

import ctypes

import numpy as np
from numba import carray, njit, types

from ..core.native import _wake_words as wake_words
from ..core.native._llvm import built_once
from ..nic import _mlx5 as mlx5
from ..nic._queue_pair import SQ_DEPTH
from ..nic._wqe_code import decoder
from . import _native, _rma as rma, _target as target, _ucp as ucp, _wakes as wakes, _window as window

__all__ = ["MAX_QUEUES", "DEPTH", "TABLE_WORDS", "GLOBAL_WORDS", "drain", "ring", "drain_rung", "sleeping",
           "complete", "land", "progress_until", "callbacks", "symbols", "row_of"]

MAX_QUEUES = 1024              # (the table's pages are touched only for queues in use)
DEPTH = SQ_DEPTH
# global words: the worker, the parameters of rendezvous receives, of requests, and of
# requests whose data goes eagerly; a receive's ticket, the send side's lock, queues in use,
# how many times CQEs were written, whether the progress thread is awake (it then sends
# what a doorbell announces), whether a doorbell rang for it (or a fence was lifted), how
# many queues' posters cannot ring (GPU threads: their rung words are polled), the PE's
# word for answers (``core.native._wake_words``: counted when they land; 0: none); the
# parameters of one-sided reads, of the flushes after writes, and of the writes; how many
# flushes are in flight (they complete only as the worker is progressed: the progress
# thread does not sleep on the worker's events meanwhile, as none would wake it)
G_WORKER, G_RECEIVE_PARAMS, G_SEND_PARAMS, G_EAGER_PARAMS, G_PENDING, G_SEND_LOCK, G_QUEUES, G_COMPLETIONS, \
    G_AWAKE, G_RUNG, G_POLLED, G_WAKE, G_READ_PARAMS, G_FLUSH_PARAMS, G_WRITE_PARAMS, G_FLUSHING = range(16)
G_HEADER = 16                                    # a request being sent
G_BATCH = G_HEADER + target.REQUEST_WORDS       # the requests being batched
G_COUNT = G_BATCH + target.MAX_BATCH * target.REQUEST_WORDS    # how many
GLOBAL_WORDS = G_COUNT + 1
# a queue pair's row: its send queue, doorbell record, rung word (0: none), collapsed CQ,
# error CQ, number, the endpoint to its peer, the next block to read, the first block not
# complete, CQEs written (error CQEs, when collapsed), the completion lock, a word for
# CQE bytes, whether the CQ is collapsed, the WQE whose data may land after later requests
# (its first block + 1; 0: none): nothing more is sent until it is done, then whether its
# fence was lifted (the queue is to be looked at again), whether its posters cannot ring
# (GPU threads: the progress thread reads its rung word); one-sided access: UCX's key to
# the peer's heap (0: none), the heap's address, size and key (the NIC's), the newest
# one-sided write that may not be done (its first block + 1; 0: none), the newest that a
# flush was posted after (likewise), the newest message whose answer a one-sided request
# must wait for (likewise), the look at the peer's wake word after its writes (``_wakes.Looks``),
# the address of the endpoint's table of UCX's keys to the peer's memory made symmetric
# (``_rma.key_at``)
Q_SQ, Q_DBR, Q_RUNG, Q_CQ, Q_ERR_CQ, Q_QPN, Q_ENDPOINT, Q_READ, Q_DONE, Q_CQES, Q_DONE_LOCK, Q_SCRATCH, \
    Q_COLLAPSED, Q_FENCE, Q_LIFTED, Q_POLLED, Q_RMA_KEY, Q_HEAP_BASE, Q_HEAP_SIZE, Q_HEAP_KEY, Q_WRITTEN, \
    Q_FLUSHED, Q_LAST_SENT, Q_LOOK, Q_REGIONS = range(25)
QUEUE_WORDS = 25
# a WQE in flight, at the block it starts: done mark (its first block + 1), syndrome,
# local address, atomic size, the next WQE's first block, its WQE index (bits 0-15),
# whether it is signalled (bit 16) and its byte count (from bit 17), the window through
# which its local memory is reached (0: host memory), a host buffer its data goes through
# (GPU memory; freed when it completes), whether it is a one-sided write waiting for a
# flush, the user data of its one-sided request's completion (the table's address, its
# ticket), inline bytes
F_DONE, F_SYNDROME, F_LADDR, F_SIZE, F_NEXT, F_INDEX, F_WINDOW, F_BUFFER, F_UNFLUSHED, F_TABLE, F_TICKET, \
    F_DATA = range(12)
FLIGHT_WORDS = F_DATA + (mlx5.MAX_INLINE + 7) // 8
QUEUES_AT = GLOBAL_WORDS
FLIGHTS_AT = QUEUES_AT + MAX_QUEUES * QUEUE_WORDS
TABLE_WORDS = FLIGHTS_AT + MAX_QUEUES * DEPTH * FLIGHT_WORDS
TICKET_SHIFT = 40
_START_MASK = (1 << TICKET_SHIFT) - 1
_LOCAL_PROT, _INVALID, _UNREACHED = mlx5.SYNDROME_LOCAL_PROT, mlx5.SYNDROME_REMOTE_INVALID, mlx5.SYNDROME_TRANSPORT
_LOCAL_COPY = mlx5.SYNDROME_LOCAL_OP
_REMOTE_ACCESS = mlx5.SYNDROME_REMOTE_ACCESS
_CQE_ERR, _CQE_REQ = mlx5.CQE_REQ_ERR << 4, mlx5.CQE_REQ << 4
_USER_DATA_WORD = ucp.RequestParams.user_data.offset // 8     # in a ucp_request_param_t
_INLINE_AT = mlx5.WQE_FIELDS.fields["inline_data"][1]
_FLUSH_SPINS = 4            # rounds of progress a ringing thread gives the flush it posted

# decode_wqes(sq, depth, index, blocks, out) -> rows: the NIC's decoder (``_wqe_code``),
# callable from numba code once ``_build`` has registered it
decode_wqes = types.ExternalFunction("pgas_nic_decode_wqes", types.int64(*[types.int64] * 5))
# post_wqe(descriptor, kind, opcode | opmod << 24, raddr, rkey, lkey, laddr, nbytes, four
# operands, waited) -> start * 2 + ring, or -1 (no room): a requester's poster of WQEs (the
# GPU-initiated path's compiled ``ibgda_post``), registered by ``NicQueues.poster``
post_wqe = types.ExternalFunction("pgas_queue_post", types.int64(
    types.int64, types.int32, types.uint32, types.uint64, types.uint32, types.uint32, types.uint64, types.uint32,
    types.uint64, types.uint64, types.uint64, types.uint64, types.int32))
# read_cq(descriptor) -> the completion floor: the same requester's reader of its queue's
# CQ (the GPU-initiated path's compiled ``ibgda_progress``), registered with ``post_wqe``
read_cq = types.ExternalFunction("pgas_queue_read_cq", types.uint64(types.int64))


@njit(nogil=True, cache=True)
def row_of(q):
    return QUEUES_AT + q * QUEUE_WORDS


@njit(nogil=True, cache=True)
def _flight(q, start):
    return FLIGHTS_AT + (q * DEPTH + start % DEPTH) * FLIGHT_WORDS


@njit(nogil=True, cache=True)
def _be32(x):
    """The 4 bytes of ``x`` in network order, as a native word holds them."""
    return ((x >> 24) & 0xFF) | ((x >> 8) & 0xFF00) | ((x << 8) & 0xFF0000) | ((x << 24) & 0xFF000000)


@njit(nogil=True, cache=True)
def _be64(x):
    return (_be32(x & 0xFFFFFFFF) << 32) | _be32((x >> 32) & 0xFFFFFFFF)


@njit(nogil=True, cache=True)
def _lock(table, word):
    target.spin_lock(table.ctypes.data + 8 * word)


@njit(nogil=True, cache=True)
def _unlock(table, word):
    target.spin_unlock(table.ctypes.data + 8 * word)


@njit(nogil=True, cache=True)
def wire_request(opcode, size, inline, o0, o1, o2, o3):
    """(the wire's operation, value, compare) of an mlx5 WQE: an RDMA write or read, or the
    one atomic operation that does what the atomic segment asks (``atomic_segments``'s
    forms); any other masked atomic goes whole (``AMO_MLX5``: operands o0 to o3); -1 for an
    opcode that is none of these."""
    ones = 0xFFFFFFFF if size == 4 else -1
    if opcode == mlx5.OP_RDMA_WRITE:
        return (target.PUT_INLINE if inline else target.PUT), 0, 0
    if opcode == mlx5.OP_RDMA_READ:
        return target.GET, 0, 0
    if opcode == mlx5.OP_ATOMIC_FA:
        return target.AMO_ADD, o0, 0
    if opcode == mlx5.OP_ATOMIC_CS:
        return target.AMO_CAS, o0, o1
    if opcode == mlx5.OP_MASKED_FA:
        if o1 & ones == 0:                 # no field boundaries: an add
            return target.AMO_ADD, o0 & ones, 0
        if o1 & ones == ones:              # every bit its own field: addition without carries
            return target.AMO_XOR, o0 & ones, 0
        return target.AMO_MLX5, o0, o1
    if opcode == mlx5.OP_MASKED_CS:
        swap, compare, swap_mask, compare_mask = o0 & ones, o1 & ones, o2 & ones, o3 & ones
        if compare_mask == ones and swap_mask == ones:
            return target.AMO_CAS, swap, compare
        if compare_mask == 0:
            if swap_mask == ones:
                return target.AMO_SWAP, swap, 0
            if swap & swap_mask == swap_mask:
                return target.AMO_OR, swap_mask, 0
            if swap & swap_mask == 0:
                return target.AMO_AND, ones & ~swap_mask, 0
        return target.AMO_MLX5, o0, o1
    return -1, 0, 0


@njit(nogil=True, cache=True)
def _window_of(keys, lkey, address, nbytes):
    """How the NIC reaches [address, address + nbytes) in the region of local key ``lkey``
    (``keys``: ``pgas.nic._regions.KeyTable.rows``): 0 host memory, else the region's
    window (``_window``); -1 when the bytes are not all in such a region."""
    for row in range(1, keys[0, 0] + 1):
        if keys[row, 0] == lkey and lkey != 0:
            inside = keys[row, 1] <= address and address - keys[row, 1] <= keys[row, 2] - nbytes
            return keys[row, 3] if inside else -1
    return -1


@njit(nogil=True, cache=True)
def _write_cqe(table, row, cq, position, wqe_index, syndrome, opcode, byte_count):
    """CQE number ``position`` of ``cq`` (a ring of DEPTH): ``byte_count``, ``syndrome``
    and, in one 8-byte store last, the QP number, WQE counter and opcode with the owner
    bit of this pass round the ring (``mlx5.write_cqe``'s bytes)."""
    at = cq + (position % DEPTH) * 64
    scratch = table.ctypes.data + 8 * (row + Q_SCRATCH)
    table[row + Q_SCRATCH] = _be32(byte_count)
    _native.memcpy(at + 44, scratch, 4)
    table[row + Q_SCRATCH] = syndrome
    _native.memcpy(at + 55, scratch, 1)
    owner = (position // DEPTH) & 1
    tail = _be32(table[row + Q_QPN] & 0xFFFFFF) | ((((wqe_index >> 8) & 0xFF) | ((wqe_index & 0xFF) << 8)) << 32) \
        | ((opcode | owner) << 56)
    target.apply_atomic(target.AMO_SWAP, 8, at + 56, tail, 0)


@njit(nogil=True, cache=True)
def complete(table, q):
    """Write the CQEs of queue ``q``'s WQEs that are done, in WQE order, from the first
    not yet complete, and move the queue's first incomplete block on. A collapsed CQ gets
    an error CQE in its error ring for each refused WQE, then its one CQE naming the newest
    WQE (ConnectX's collapsed CQ); another a CQE for each signalled or refused WQE."""
    row = row_of(q)
    _lock(table, row + Q_DONE_LOCK)
    position, newest = table[row + Q_DONE], -1
    collapsed = table[row + Q_COLLAPSED] != 0
    while True:
        f = _flight(q, position)
        if table[f + F_DONE] != position + 1:
            break
        syndrome, described = table[f + F_SYNDROME], table[f + F_INDEX]
        newest = described & 0xFFFF
        if syndrome != 0 or (not collapsed and described & 0x10000 != 0):
            _write_cqe(table, row, table[row + (Q_ERR_CQ if collapsed else Q_CQ)], table[row + Q_CQES], newest,
                       syndrome, _CQE_ERR if syndrome != 0 else _CQE_REQ, 0 if syndrome != 0 else described >> 17)
            table[row + Q_CQES] += 1
        position = table[f + F_NEXT]
    if newest >= 0:
        if collapsed:
            _write_cqe(table, row, table[row + Q_CQ], 0, newest, 0, _CQE_REQ, 0)
        target.fence()              # the CQEs before the counts a waiter reads
        table[row + Q_DONE] = position
        target.apply_atomic(target.AMO_ADD, 8, table.ctypes.data + 8 * G_COMPLETIONS, 1, 0)
    _unlock(table, row + Q_DONE_LOCK)


@njit(nogil=True, cache=True)
def _finish(table, q, start, syndrome):
    """WQE ``start`` of queue ``q`` is done (with ``syndrome``)."""
    f = _flight(q, start)
    table[f + F_SYNDROME] = syndrome
    target.fence()                  # the data, value and syndrome before the done mark
    table[f + F_DONE] = start + 1


@njit(nogil=True, cache=True)
def _to_local(table, f, source, nbytes):
    """``nbytes`` at host address ``source`` to WQE ``f``'s local address (through its
    window, for GPU memory); a syndrome."""
    through = table[f + F_WINDOW]
    if through == 0:
        _native.memcpy(table[f + F_LADDR], source, nbytes)
        return 0
    return 0 if window.write(through, table[f + F_LADDR], source, nbytes) else _LOCAL_COPY


@njit(nogil=True, cache=True)
def _from_buffer(table, f, nbytes):
    """A read's data received into WQE ``f``'s host buffer goes on to its local address
    (GPU memory); a syndrome. Without a buffer it has landed in place."""
    buffer = table[f + F_BUFFER]
    return 0 if buffer == 0 else _to_local(table, f, buffer, nbytes)


@njit(nogil=True, cache=True)
def _free_buffer(table, f):
    """Free the host buffer WQE ``f``'s data went through, if any."""
    if table[f + F_BUFFER] != 0:
        _native.free(table[f + F_BUFFER])
        table[f + F_BUFFER] = 0


@njit(nogil=True, cache=True)
def land(table, ticket, syndrome, fetched):
    """The answer to request ``ticket``: a fetched value at the WQE's local address
    (network byte order), then its completion; the host buffer its data went through freed."""
    q, start = ticket >> TICKET_SHIFT, ticket & _START_MASK
    f = _flight(q, start)
    size = table[f + F_SIZE]
    if syndrome == 0 and size != 0:
        table[f + F_DATA] = _be64(fetched) if size == 8 else _be32(fetched & 0xFFFFFFFF)
        syndrome = _to_local(table, f, table.ctypes.data + 8 * (f + F_DATA), size)
    _free_buffer(table, f)
    _finish(table, q, start, syndrome)
    complete(table, q)
    _lift_fence(table, q)


@njit(nogil=True, cache=True)
def _lift_fence(table, q):
    """If what queue ``q``'s fence waits for is done (data that could be overtaken has
    landed, an answer a one-sided request waits for has come), lift it: the queue is
    looked at again."""
    row = row_of(q)
    fence = table[row + Q_FENCE]
    if fence != 0 and table[_flight(q, fence - 1) + F_DONE] >= fence:
        table[row + Q_FENCE] = 0
        table[row + Q_LIFTED] = 1
        table[G_RUNG] = 1
        target.fence()
        if table[G_AWAKE] == 0:
            _native.ucp_worker_signal(table[G_WORKER])     # the progress thread sleeps: wake it


@njit(nogil=True, cache=True)
def _fenced(table, q, start):
    """Fence queue ``q`` on its WQE ``start`` (a drain stops before the WQE that must wait
    for it); False, and no fence, when that WQE is done already. Set before the look, so
    that a completion landing meanwhile lifts it (``_lift_fence``)."""
    row = row_of(q)
    table[row + Q_FENCE] = start + 1
    target.fence()
    if table[_flight(q, start) + F_DONE] > start:
        table[row + Q_FENCE] = 0
        return False
    return True


@njit(nogil=True, cache=True)
def _user_data(table, which, f, q, start):
    """The parameters at global word ``which``, their user data naming WQE ``start`` of
    queue ``q`` (its flight's cell: the table's address, its ticket); the caller holds the
    send lock, as every user of these parameters does."""
    table[f + F_TABLE], table[f + F_TICKET] = table.ctypes.data, (q << TICKET_SHIFT) | start
    params = table[which]
    carray(window.words_at(params), (_USER_DATA_WORD + 1,))[_USER_DATA_WORD] = table.ctypes.data + 8 * (f + F_TABLE)
    return params


@njit(nogil=True, cache=True)
def flushed(table, q, last, status):
    """The flush after queue ``q``'s one-sided writes up to WQE ``last`` completed
    (``status``: UCX's; not 0, the wire failed them): those writes are done."""
    row = row_of(q)
    syndrome = _UNREACHED if status != 0 else 0
    _lock(table, row + Q_DONE_LOCK)
    if table[_flight(q, last) + F_DONE] <= last:     # (a later flush may have done them)
        position = table[row + Q_DONE]
        while True:
            f = _flight(q, position)
            if table[f + F_UNFLUSHED] != 0:
                table[f + F_UNFLUSHED] = 0
                _finish(table, q, position, syndrome)
            if position == last:
                break
            position = table[f + F_NEXT]
    _unlock(table, row + Q_DONE_LOCK)
    complete(table, q)
    _lift_fence(table, q)
    if status == 0:
        wakes.look_later(table[row + Q_LOOK])     # (a thread of the peer may sleep waiting for them)


@njit(nogil=True, cache=True)
def _flush_writes(table, q):
    """``ucp_ep_flush_nbx`` after queue ``q``'s one-sided writes that no flush follows yet,
    if any (they are done when it completes: ``flushed``). The newest one-sided write that
    may not be done yet, or -1. (The worker's flush completes in one round of progress
    where the endpoint's takes two, but here it made UCX 1.18's progress crash in the PE
    suites, a SIGSEGV under ``ucp_worker_progress``; why was not found.)"""
    row = row_of(q)
    last = table[row + Q_WRITTEN] - 1
    if table[row + Q_WRITTEN] > table[row + Q_FLUSHED]:
        table[row + Q_FLUSHED] = table[row + Q_WRITTEN]
        params = _user_data(table, G_FLUSH_PARAMS, _flight(q, last), q, last)
        request = _native.ucp_ep_flush_nbx(table[row + Q_ENDPOINT], params)
        if request <= 0:
            flushed(table, q, last, request)
        else:
            target.apply_atomic(target.AMO_ADD, 8, table.ctypes.data + 8 * G_FLUSHING, 1, 0)
    return last


@njit(nogil=True, cache=True)
def _after_writes(table, q):
    """Before a message or read on queue ``q``: its one-sided writes ahead flushed; True
    when they are not done yet (the queue is then fenced on the newest: ``_fenced``)."""
    last = _flush_writes(table, q)
    if last < 0:
        return False
    if _fenced(table, q, last):
        return True
    row = row_of(q)
    table[row + Q_WRITTEN], table[row + Q_FLUSHED] = 0, 0
    return False


@njit(nogil=True, cache=True)
def _one_sided(table, q, f, start, op, rkey, raddr, nbytes, data):
    """WQE ``start`` of queue ``q`` (flight ``f``) as a one-sided read into ``data`` or
    write of ``data``, checked first against the peer's heap (nothing outside it, or
    under another key, reaches the wire: refused as the target would), with UCX's key to
    the peer's memory there (the heap's, or that of memory made symmetric: ``_rma.key_at``;
    none where it crosses the edge of such memory: refused too)."""
    row = row_of(q)
    base = table[row + Q_HEAP_BASE]
    key = rma.key_at(table[row + Q_REGIONS], table[row + Q_RMA_KEY], raddr - base, nbytes)
    if key == 0 or target.outside(base, table[row + Q_HEAP_SIZE], table[row + Q_HEAP_KEY], rkey, raddr, nbytes):
        _finish(table, q, start, _REMOTE_ACCESS)
        return
    endpoint = table[row + Q_ENDPOINT]
    if op == target.GET:
        request = _native.ucp_get_nbx(endpoint, data, nbytes, raddr, key, _user_data(table, G_READ_PARAMS, f, q,
                                                                                      start))
        if request <= 0:        # (else its completion lands it: ``on_read``)
            _finish(table, q, start, _UNREACHED if request < 0 else 0)
        return
    request = _native.ucp_put_nbx(endpoint, data, nbytes, raddr, key, table[G_WRITE_PARAMS])
    if request < 0:
        _finish(table, q, start, _UNREACHED)
        return
    if request > 0:
        _native.ucp_request_free(request)   # (UCX completes it; the flush after it waits for it)
    table[f + F_UNFLUSHED] = 1
    table[row + Q_WRITTEN] = start + 1


@njit(nogil=True, cache=True)
def _send(table, endpoint, am_id, header, header_bytes, data, nbytes):
    """Send one message (its data eagerly up to ``target.EAGER_BYTES``); False when UCX could not."""
    params = table[G_EAGER_PARAMS if nbytes <= target.EAGER_BYTES else G_SEND_PARAMS]
    request = _native.ucp_am_send_nbx(endpoint, am_id, header, header_bytes, data, nbytes, params)
    if request > 0:     # UCX completes it; the header was copied, the data outlives it (the answer comes after)
        _native.ucp_request_free(request)
    return request >= 0


@njit(nogil=True, cache=True)
def _send_batch(table, q):
    """Send the batched requests to queue ``q``'s peer; those UCX could not send fail."""
    count = table[G_COUNT]
    if count == 0:
        return
    table[G_COUNT] = 0
    if not _send(table, table[row_of(q) + Q_ENDPOINT], target.AM_BATCH, table.ctypes.data + 8 * G_BATCH,
                 8 * target.REQUEST_WORDS * count, 0, 0):
        for i in range(count):
            ticket = table[G_BATCH + i * target.REQUEST_WORDS + target.H_TICKET]
            _finish(table, q, ticket & _START_MASK, _UNREACHED)


@njit(nogil=True, cache=True)
def drain(table, q, keys, wqes):
    """Send every WQE posted to queue ``q`` since the last look (``keys``: the local keys;
    ``wqes``: room to decode a queue's worth). How many WQEs it read."""
    row = row_of(q)
    _lock(table, G_SEND_LOCK)
    done_before = table[row + Q_DONE]
    table[row + Q_LIFTED] = 0
    if table[row + Q_RUNG] != 0:     # cleared before the doorbell record is read: a post after it rings again
        target.apply_atomic(target.AMO_SWAP, 8, table[row + Q_RUNG], 0, 0)
    producer = _be32(target.apply_atomic(target.AMO_FETCH, 4, table[row + Q_DBR], 0, 0)) & 0xFFFF
    read = table[row + Q_READ]
    blocks = (producer - read) & 0xFFFF
    rows = 0
    if blocks != 0 and table[row + Q_FENCE] == 0:     # (fenced: looked at again when the fence lifts)
        rows = decode_wqes(table[row + Q_SQ], DEPTH, read, blocks, wqes.ctypes.data)
    for i in range(rows):
        w = wqes[i]
        start = read
        size, nbytes, laddr = np.int64(w.size), np.int64(w.length), np.int64(w.laddr)
        o2, o3 = np.int64(w.operands[2]), np.int64(w.operands[3])
        op, value, compare = wire_request(w.opcode, size, w.inline, np.int64(w.operands[0]), np.int64(w.operands[1]),
                                          o2, o3)
        through = 0 if w.inline or nbytes == 0 else _window_of(keys, np.int64(w.lkey), laddr, nbytes)
        valid = op >= 0 and through >= 0
        one_sided = valid and table[row + Q_RMA_KEY] != 0 and through == 0 and (
            op == target.GET or op == target.PUT or op == target.PUT_INLINE)
        if one_sided:       # after the messages ahead (and a read after the writes ahead)
            if op == target.GET and _after_writes(table, q):
                break
            if table[row + Q_LAST_SENT] != 0:
                _send_batch(table, q)
                if _fenced(table, q, table[row + Q_LAST_SENT] - 1):
                    break
                table[row + Q_LAST_SENT] = 0
        elif valid and _after_writes(table, q):     # a message: after the one-sided writes ahead
            break
        read += 2 if w.ds * 16 > mlx5.BB else 1
        f = _flight(q, start)
        table[f + F_NEXT], table[f + F_LADDR], table[f + F_SIZE] = read, laddr, size
        table[f + F_INDEX] = np.int64(w.index) | (np.int64(w.signaled) << 16) | (nbytes << 17)
        table[f + F_WINDOW], table[f + F_BUFFER], table[f + F_UNFLUSHED] = through, 0, 0
        if not valid:
            _finish(table, q, start, _INVALID if op < 0 else _LOCAL_PROT)
            continue
        inline = wqes.ctypes.data + i * wqes.strides[0] + _INLINE_AT
        if one_sided:
            data = laddr
            if op == target.PUT_INLINE:     # its bytes kept with the flight until it is flushed
                data = table.ctypes.data + 8 * (f + F_DATA)
                _native.memcpy(data, inline, nbytes)
            _one_sided(table, q, f, start, op, np.int64(w.rkey), np.int64(w.raddr), nbytes, data)
            continue
        table[row + Q_LAST_SENT] = start + 1
        small = op != target.GET and op != target.PUT and nbytes <= 8
        if not small:
            _send_batch(table, q)       # the requests before it go first
        at = G_BATCH + table[G_COUNT] * target.REQUEST_WORDS if small else G_HEADER
        table[at + target.H_TICKET], table[at + target.H_OP] = (q << TICKET_SHIFT) | start, op
        table[at + target.H_SIZE] = size | (np.int64(w.opcode) << 8 if op == target.AMO_MLX5 else 0)
        table[at + target.H_MASK], table[at + target.H_COMPARE_MASK] = o2, o3
        table[at + target.H_RKEY], table[at + target.H_RADDR], table[at + target.H_NBYTES] = np.int64(w.rkey), \
            np.int64(w.raddr), nbytes
        table[at + target.H_VALUE], table[at + target.H_COMPARE] = value, compare
        if small:
            if op == target.PUT_INLINE:
                _native.memcpy(table.ctypes.data + 8 * (at + target.H_VALUE), inline, nbytes)
            table[G_COUNT] += 1
            if table[G_COUNT] == target.MAX_BATCH:
                _send_batch(table, q)
            continue
        data = 0
        if op == target.PUT_INLINE:     # its bytes kept with the flight until the answer
            data = table.ctypes.data + 8 * (f + F_DATA)
            _native.memcpy(data, inline, nbytes)
        elif op == target.PUT and through != 0:     # GPU memory: copied out into a buffer, freed at the answer
            data = _native.malloc(nbytes)
            if data == 0 or not window.read(through, data, laddr, nbytes):
                if data != 0:
                    _native.free(data)
                _finish(table, q, start, _LOCAL_COPY)
                continue
            table[f + F_BUFFER] = data
        elif op == target.PUT:
            data = laddr
        large = nbytes > target.EAGER_BYTES     # its data may land after what follows: a fence
        if large:
            table[row + Q_FENCE] = start + 1
        if not _send(table, table[row + Q_ENDPOINT], target.AM_REQUEST, table.ctypes.data + 8 * G_HEADER,
                     8 * target.REQUEST_WORDS, data, nbytes if data != 0 else 0):
            table[row + Q_FENCE] = 0
            _free_buffer(table, f)
            _finish(table, q, start, _UNREACHED)
        elif large:
            break                       # the WQEs after it are read again when it is done
    _send_batch(table, q)
    _flush_writes(table, q)
    table[row + Q_READ] = read
    _unlock(table, G_SEND_LOCK)
    complete(table, q)          # those refused or done here (the others complete as their answers land)
    if table[row + Q_DONE] != done_before:
        target.wake_at(table[G_WAKE])     # (a thread may nap waiting for them)
    return rows


@njit(cache=True)
def ring(table, q, keys, wqes, waited):
    """The doorbell of queue ``q``. While the progress thread is
    awake it sends what the doorbells announce, many WQEs of many threads to a message
    (the rung word already tells it); else, or when the ringing thread will wait for
    its WQE (``waited``: its answer should be on its way by then), this thread sends them
    now. Keeps the interpreter lock: a simulated device thread that let it go would wait
    to get it back."""
    if table[G_AWAKE] != 0 and not waited:
        table[G_RUNG] = 1
        target.fence()              # the mark before the second look (the thread does the reverse)
        if table[G_AWAKE] != 0:
            return
    drain(table, q, keys, wqes)
    # the flush after its one-sided writes completes as the worker progresses (a round or
    # two): here, else in the progress thread, woken for it (no event of the worker's would)
    for _ in range(_FLUSH_SPINS):
        if table[G_FLUSHING] == 0:
            return
        _native.ucp_worker_progress(table[G_WORKER])
    if table[G_AWAKE] == 0:
        _native.ucp_worker_signal(table[G_WORKER])


@njit(cache=True)
def post_and_ring(table, keys, wqes, q, descriptor, kind, opcode, raddr, rkey, lkey, laddr, nbytes, a0, a1, a2, a3,
                  waited):
    """Post one WQE on queue ``q`` (``post_wqe``) and ring its doorbell when the post says
    so (``ring``): a requester's request in one native call (through ctypes and then
    numba it cost ~1.4 us more, a tenth of a simulated device call). Then the queue's CQ
    is read (``read_cq``): where the ring sent the WQE and its completion came at once (a
    one-sided write, flushed), the completion floor passes it here, and a ``quiet`` after
    it finds nothing in flight (reading the CQ from Python was a tenth of a device
    ``p`` + ``quiet``). What ``post_wqe`` returned. Keeps the interpreter lock, as ``ring``."""
    posted = post_wqe(descriptor, np.int32(kind), np.uint32(opcode), np.uint64(raddr), np.uint32(rkey),
                      np.uint32(lkey), np.uint64(laddr), np.uint32(nbytes), np.uint64(a0), np.uint64(a1),
                      np.uint64(a2), np.uint64(a3), np.int32(waited))
    if posted >= 0:
        if posted & 1:
            ring(table, q, keys, wqes, waited != 0)
        read_cq(descriptor)
    return posted


@njit(nogil=True, cache=True)
def drain_rung(table, keys, wqes, polling):
    """Send what every rung queue's doorbell announced, and what waited behind a fence
    now lifted (the progress thread, and threads about to wait); True if any rang.
    ``polling`` (the progress thread): the rung words of queues whose posters cannot ring
    (``G_POLLED``: GPU threads) are read on every call; a waiter (holding the interpreter
    lock) leaves them, and their copies of GPU memory, to the progress thread."""
    polled = polling and table[G_POLLED] != 0
    if table[G_RUNG] == 0 and not polled:
        return False
    # read and cleared in one (a fence lifted meanwhile sets it again: never lost)
    rang = target.apply_atomic(target.AMO_SWAP, 8, table.ctypes.data + 8 * G_RUNG, 0, 0) != 0
    if not rang and not polled:
        return False
    for q in range(table[G_QUEUES]):
        row = row_of(q)
        rung = table[row + Q_RUNG]
        if table[row + Q_POLLED] != 0:      # a GPU threads' queue: the progress thread's alone
            if polled and (table[row + Q_LIFTED] != 0 or target.apply_atomic(target.AMO_FETCH, 8, rung, 0, 0) != 0):
                rang = drain(table, q, keys, wqes) > 0 or rang
        elif rang and (rung == 0 or table[row + Q_LIFTED] != 0
                       or target.apply_atomic(target.AMO_FETCH, 8, rung, 0, 0) != 0):
            drain(table, q, keys, wqes)
    return rang


@njit(nogil=True, cache=True)
def sleeping(table, asleep):
    """The progress thread goes to sleep (``asleep``; False when a doorbell rang meanwhile,
    or a flush is in flight: it stays awake) or wakes."""
    if not asleep:
        table[G_AWAKE] = 1
        return False
    table[G_AWAKE] = 0
    target.fence()
    if table[G_RUNG] != 0 or table[G_FLUSHING] != 0:
        table[G_AWAKE] = 1
        return False
    return True


@njit(cache=True)
def progress_until(worker, waiters, table, keys, wqes, word, value, spins):
    """Send what rung doorbells announce (a waiter does not wait for the progress thread
    to), then progress the worker until ``table[word] >= value``, at most ``spins`` rounds
    (yielding the core between empty ones); True when it got there. Counted in
    ``waiters[0]`` and keeps the interpreter lock, as the ucx engine's waits
    (``_worker.progress_until``)."""
    waiters[0] += 1
    for _ in range(spins):
        drain_rung(table, keys, wqes, False)
        if table[word] >= value:
            break
        if _native.ucp_worker_progress(worker) == 0:
            _native.sched_yield()
    waiters[0] -= 1
    return table[word] >= value


def _register():
    ucp.load()
    target.atomics()
    window.symbols()
    wake_words.functions()      # (registers ``pgas_wake``)
    ucp.register_symbol("nic_decode_wqes", ctypes.cast(decoder(), ctypes.c_void_p).value)


symbols = built_once(_register)      # what ``drain`` (and so the progress thread's loop) calls, registered


def _build():
    """(on_answer, on_answers, on_get_received, on_read, on_flushed): the answers'
    handlers and the completions of one-sided reads and flushes, compiled (or loaded from
    numba's cache) once the symbols they call (and ``drain``'s) are registered."""
    from numba import carray, cfunc

    symbols()
    handler, completion = target.HANDLER, target.COMPLETION

    @cfunc(handler, nopython=True, cache=True)
    def on_answer(arg, header, header_length, data, length, param):
        table = carray(arg, (TABLE_WORDS,))
        h = carray(header, (target.ANSWER_WORDS,))
        ticket, syndrome = h[0], h[1]
        if syndrome == 0 and length > 0:            # a read's data
            f = _flight(ticket >> TICKET_SHIFT, ticket & _START_MASK)
            if param[0] & ucp.AM_RECV_ATTR_FLAG_RNDV == 0:
                syndrome = _to_local(table, f, data, length)
            else:       # straight into its place (GPU memory: a host buffer first); complete when it has landed
                buffer = 0 if table[f + F_WINDOW] == 0 else _native.malloc(length)
                table[f + F_BUFFER] = buffer
                if table[f + F_WINDOW] != 0 and buffer == 0:
                    syndrome = _LOCAL_COPY
                else:
                    request = _native.ucp_am_recv_data_nbx(table[G_WORKER], data,
                                                           table[f + F_LADDR] if buffer == 0 else buffer, length,
                                                           table[G_RECEIVE_PARAMS])
                    if request > 0:
                        table[G_PENDING] = ticket
                        _native.memcpy(request, table.ctypes.data + 8 * G_PENDING, 8)
                        return 0
                    syndrome = _INVALID if request < 0 else _from_buffer(table, f, length)
        land(table, ticket, syndrome, h[2])
        target.wake_at(table[G_WAKE])
        return 0

    @cfunc(handler, nopython=True, cache=True)
    def on_answers(arg, header, header_length, data, length, param):
        table = carray(arg, (TABLE_WORDS,))
        count = header_length // (8 * target.ANSWER_WORDS)
        answers = carray(header, (count, target.ANSWER_WORDS))
        for i in range(count):
            land(table, answers[i, 0], answers[i, 1], answers[i, 2])
        target.wake_at(table[G_WAKE])
        return 0

    @cfunc(completion, nopython=True, cache=True)
    def on_get_received(request, status, length, arg):
        table = carray(arg, (TABLE_WORDS,))
        _native.memcpy(table.ctypes.data + 8 * G_PENDING, request, 8)
        _native.ucp_request_free(request)
        ticket = table[G_PENDING]
        f = _flight(ticket >> TICKET_SHIFT, ticket & _START_MASK)
        land(table, ticket, _INVALID if status != 0 else _from_buffer(table, f, length), 0)
        target.wake_at(table[G_WAKE])

    @cfunc(target.SENT, nopython=True, cache=True)
    def on_read(request, status, cell):
        table = carray(window.words_at(cell[0]), (TABLE_WORDS,))
        land(table, cell[1], _UNREACHED if status != 0 else 0, 0)
        target.wake_at(table[G_WAKE])
        _native.ucp_request_free(request)

    @cfunc(target.SENT, nopython=True, cache=True)
    def on_flushed(request, status, cell):
        table = carray(window.words_at(cell[0]), (TABLE_WORDS,))
        ticket = cell[1]
        flushed(table, ticket >> TICKET_SHIFT, ticket & _START_MASK, status)
        target.apply_atomic(target.AMO_ADD, 8, table.ctypes.data + 8 * G_FLUSHING, -1, 0)
        target.wake_at(table[G_WAKE])
        _native.ucp_request_free(request)

    return on_answer, on_answers, on_get_received, on_read, on_flushed


callbacks = built_once(_build)


