"""The wire's native code: the target that checks and applies requests from other PEs, the
requester's landing of answers, and the atomics both rely on.

Both sides are numba ``cfunc`` callbacks that UCX calls from ``ucp_worker_progress`` (in the
progress thread or in a waiting thread), with no interpreter lock. A request names the
heap by its rkey; the target refuses, touching nothing, one whose rkey is not the heap's,
whose bytes are not all inside it, or (atomics) whose word is not 4 or 8 bytes and
aligned, as the emulated NIC's responder does (``pgas.nic._target``). Atomics are
``atomicrmw``/``cmpxchg`` instructions on the word itself, so they stay atomic with the
loads, stores and atomics of same-node PEs on it.

Messages: a request is a header of ``REQUEST_WORDS`` int64 words (ticket, operation,
size, rkey, remote address, bytes, value, compare) and, for a put, its data; an answer is
``ANSWER_WORDS`` words (ticket, syndrome, fetched value) and, for a get, the data. UCX
carries small data inline (eager) and large data by rendezvous: the handler then receives
it straight into its place (the target's heap, the requester's buffer) with
``ucp_am_recv_data_nbx``, and the answer (or the done mark) follows when it has landed.
A receive in flight keeps its ticket (and the target its reply endpoint) in the UCX
request's own user area (``REQUEST_USER_BYTES``, asked for at ``ucp_init``).
"""
from __future__ import annotations

import numpy as np
from numba import carray, njit, types

from ..core.native import _wake_words as wake_words
from ..core.native._llvm import built_once
from ..nic import _mlx5 as mlx5
from . import _native, _ucp as ucp, _window as window
from ._atomics import (AMO_ADD, AMO_AND, AMO_CAS, AMO_FETCH, AMO_MLX5, AMO_OR, AMO_SWAP, AMO_XOR, GET, PUT,
                       PUT_INLINE, apply_atomic, atomics, fence, spin_lock, spin_unlock)

__all__ = ["REQUEST_WORDS", "ANSWER_WORDS", "AM_REQUEST", "AM_ANSWER", "AM_BATCH", "AM_ANSWERS", "MAX_BATCH",
           "TARGET_WORDS", "RING_HEADER", "COLUMNS", "REQUEST_USER_BYTES", "EAGER_BYTES", "callbacks", "atomics",
           "serve_heap", "reach_through", "wake_at", "outside", "PUT", "PUT_INLINE", "GET", "AMO_ADD", "AMO_CAS",
           "AMO_SWAP", "AMO_AND", "AMO_OR", "AMO_XOR", "AMO_FETCH", "AMO_MLX5", "apply_atomic", "fence", "spin_lock",
           "spin_unlock"]

AM_REQUEST, AM_ANSWER, AM_BATCH, AM_ANSWERS = 0x50, 0x51, 0x52, 0x53
REQUEST_WORDS, ANSWER_WORDS = 10, 3
MAX_BATCH = 16              # requests in one AM_BATCH (pgas.wire._batch)
H_TICKET, H_OP, H_SIZE, H_RKEY, H_RADDR, H_NBYTES, H_VALUE, H_COMPARE, H_MASK, H_COMPARE_MASK = range(REQUEST_WORDS)
# a receive in flight: its ticket, and (target) the endpoint to answer on, the host buffer the
# data lands in first when the heap is GPU memory, where it goes then and its size; an answer
# in flight from such a buffer: the buffer
REQUEST_USER_BYTES = 40
# Data of up to this many bytes travels eagerly, with its request or answer (UCX is told so),
# and the target applies it before the requests behind it. Larger data may go by rendezvous,
# which lands after them: whoever sends it sends nothing more to that PE until it has
# landed (its answer has come), so requests to one PE stay applied in order.
EAGER_BYTES = 64 << 10
# The target's state (int64 words): the heap's base, size and rkey; the parameters of answers
# (of small ones: eager); the state's own address; refusals it could not answer; the worker;
# the parameters of rendezvous receives; the window through which the heap is reached (0:
# host memory, loaded and stored), the parameters of answers whose data is in a buffer of
# their own (freed when sent: large, eager); an answer header being written; a receive in
# flight's user words; the heap's wake word (``core.native._wake_words``; 0: none), counted after
# each write that is applied.
T_BASE, T_SIZE, T_RKEY, T_ANSWER_PARAMS, T_SELF, T_UNANSWERED, T_WORKER, T_RECEIVE_PARAMS, T_EAGER_PARAMS, \
    T_WINDOW, T_BUFFERED_PARAMS, T_BUFFERED_EAGER_PARAMS, T_WAKE = range(13)
T_ANSWER = 13
T_PENDING = T_ANSWER + ANSWER_WORDS
T_ANSWERS = T_PENDING + REQUEST_USER_BYTES // 8     # a batch's answers being written
TARGET_WORDS = T_ANSWERS + MAX_BATCH * ANSWER_WORDS
# The requester's ring (int64 words): its capacity, worker, parameters of rendezvous receives,
# its own address, a receive's ticket, the next ticket, the first slot not yet free, the
# request a post found in its way (``pgas.transport._ucx.post``: its ticket + 1); then one
# row per column: a slot's done mark (its ticket + 1), fetched value, syndrome, where a get's
# data lands, its operation, whether a thread waits for it, its PE, remote address and bytes.
# (And the PE's word for answers, counted when they land: ``core.native._wake_words``; 0: none;
# and the looks at the peers' wake words after one-sided writes, ``_wakes.Looks``: 0, none.)
R_CAPACITY, R_WORKER, R_RECEIVE_PARAMS, R_SELF, R_PENDING, R_NEXT, R_FREED, R_BLOCKED, R_WAKE, R_LOOKS = range(10)
RING_HEADER = 10
# (the requester's own columns: who waits for the slot, and what the request was, for errors)
C_DONE, C_RESULT, C_SYNDROME, C_LADDR, C_OP, C_WAITED, C_PE, C_RADDR, C_NBYTES = range(9)
COLUMNS = 9

# the numba signatures of an active-message handler (ucp_am_recv_callback_t: arg, header,
# header length, data, length, receive parameters) and of a receive's completion
HANDLER = types.int32(types.CPointer(types.int64), types.CPointer(types.int64), types.int64, types.int64,
                      types.int64, types.CPointer(types.int64))
COMPLETION = types.void(types.int64, types.int32, types.int64, types.CPointer(types.int64))
SENT = types.void(types.int64, types.int32, types.CPointer(types.int64))    # a send's completion
_ACCESS, _INVALID, _UNREACHABLE = mlx5.SYNDROME_REMOTE_ACCESS, mlx5.SYNDROME_REMOTE_INVALID, mlx5.SYNDROME_REMOTE_OP
_REPLY_EP_FIELD, _RENDEZVOUS = ucp.AM_RECV_ATTR_FIELD_REPLY_EP, ucp.AM_RECV_ATTR_FLAG_RNDV


# The helpers the callbacks call are module globals, so that the callbacks can be cached
# (a dispatcher held in a closure makes numba's cache key differ in every process).

@njit(nogil=True, cache=True)
def _send_answer(state, reply_ep, ticket, syndrome, fetched, data, length, buffered):
    """Send the answer to request ``ticket`` (with ``length`` bytes at ``data``; ``buffered``:
    in a buffer of their own, which ``on_buffer_sent`` frees). UCX's request (> 0: in
    flight; 0: sent; < 0: not sent, counted in ``T_UNANSWERED``)."""
    state[T_ANSWER], state[T_ANSWER + 1], state[T_ANSWER + 2] = ticket, syndrome, fetched
    eager = length <= EAGER_BYTES
    params = (T_BUFFERED_EAGER_PARAMS if eager else T_BUFFERED_PARAMS) if buffered else \
        (T_EAGER_PARAMS if eager else T_ANSWER_PARAMS)
    request = _native.ucp_am_send_nbx(reply_ep, AM_ANSWER, state[T_SELF] + 8 * T_ANSWER, 8 * ANSWER_WORDS, data,
                                      length, state[params])
    if request < 0:
        state[T_UNANSWERED] += 1
    return request


@njit(nogil=True, cache=True)
def _answer(state, reply_ep, ticket, syndrome, fetched, data, length):
    """Send the answer to request ``ticket`` (with ``length`` bytes at ``data``, the heap's)."""
    request = _send_answer(state, reply_ep, ticket, syndrome, fetched, data, length, False)
    if request > 0:
        _native.ucp_request_free(request)      # UCX completes it; the heap outlives it


@njit(nogil=True, cache=True)
def outside(base, heap_size, heap_rkey, rkey, raddr, nbytes):
    """True when a request's bytes are not all in the heap [``base``, ``base + heap_size``),
    or its rkey is not the heap's (the target's check, and the requester's before a
    one-sided request: ``pgas.transport._ucx``, ``_nic_code``)."""
    return rkey != heap_rkey or nbytes < 0 or nbytes > heap_size or raddr < base or raddr - base > heap_size - nbytes


@njit(nogil=True, cache=True)
def _outside_heap(state, rkey, raddr, nbytes):
    """True when a request's bytes are not all in the heap, or its rkey is not the heap's."""
    return outside(state[T_BASE], state[T_SIZE], state[T_RKEY], rkey, raddr, nbytes)


@njit(nogil=True, cache=True)
def _store(state, raddr, data, nbytes):
    """``nbytes`` at host address ``data`` into the heap at ``raddr``; a syndrome."""
    if state[T_WINDOW] == 0:
        _native.memcpy(raddr, data, nbytes)
        return 0
    return 0 if window.write(state[T_WINDOW], raddr, data, nbytes) else _UNREACHABLE


@njit(nogil=True, cache=True)
def wake_at(address):
    """Count a write into a PE's heap, or answers landed for it, at its wake word at
    ``address`` (``core.native._wake_words``; 0: none), waking the threads that sleep on it."""
    if address != 0:
        _native.wake(address)


@njit(nogil=True, cache=True)
def _from_buffer(state, buffer, raddr, nbytes, status):
    """A put's data received into ``buffer`` (GPU heap: host memory first) goes to the heap,
    and the buffer is freed; a syndrome (``status``: the receive's)."""
    syndrome = _INVALID if status != 0 else 0
    if buffer != 0:
        if syndrome == 0:
            syndrome = _store(state, raddr, buffer, nbytes)
        _native.free(buffer)
    return syndrome


@njit(nogil=True, cache=True)
def _answer_from_window(state, reply_ep, ticket, raddr, nbytes):
    """Answer a get from a GPU heap: its bytes copied out into a buffer of their own, sent
    from there, and the buffer freed once sent (``on_buffer_sent``)."""
    buffer = _native.malloc(nbytes)
    if buffer == 0 or not window.read(state[T_WINDOW], buffer, raddr, nbytes):
        if buffer != 0:
            _native.free(buffer)
        _answer(state, reply_ep, ticket, _UNREACHABLE, 0, 0, 0)
        return
    request = _send_answer(state, reply_ep, ticket, 0, 0, buffer, nbytes, True)
    if request > 0:     # (inside a handler: its completion cannot run before this store)
        carray(window.words_at(request), (1,))[0] = buffer
    else:
        _native.free(buffer)


_atomic_result = njit(nogil=True, cache=True)(mlx5.atomic_result)


@njit(nogil=True, cache=True)
def _masked(opcode, size, address, o0, o1, o2, o3):
    """An mlx5 masked atomic as a compare-and-swap loop on the word (what
    ``mlx5.atomic_result`` says it becomes); its old value."""
    old = apply_atomic(AMO_FETCH, size, address, 0, 0)
    while True:
        new, changes = _atomic_result(opcode, size, o0, o1, o2, o3, old)
        if not changes:
            return old
        seen = apply_atomic(AMO_CAS, size, address, np.int64(new), old)
        if seen == old:
            return old
        old = seen


@njit(nogil=True, cache=True)
def _atomic(h, raddr, nbytes, through):
    """(syndrome, old value) of the atomic of request header ``h`` on the heap word at
    ``raddr`` (``through``: the heap's window, or 0)."""
    op, size = h[H_OP], h[H_SIZE] & 0xFF
    if (size != 4 and size != 8) or nbytes != size or raddr % size != 0 or op < AMO_ADD or op > AMO_MLX5:
        return _INVALID, 0
    if op == AMO_MLX5:
        opcode = h[H_SIZE] >> 8
        if opcode != mlx5.OP_MASKED_CS and opcode != mlx5.OP_MASKED_FA:
            return _INVALID, 0
    if through != 0:
        opcode, o0, o1, o2, o3 = window.as_mlx5(op, h[H_SIZE], h[H_VALUE], h[H_COMPARE], h[H_MASK],
                                                 h[H_COMPARE_MASK])
        ok, old = window.atomic(through, raddr, opcode, size, o0, o1, o2, o3)
        return (0 if ok else _UNREACHABLE), old
    if op == AMO_MLX5:
        return 0, _masked(h[H_SIZE] >> 8, size, raddr, h[H_VALUE], h[H_COMPARE], h[H_MASK], h[H_COMPARE_MASK])
    return 0, apply_atomic(op, size, raddr, h[H_VALUE], h[H_COMPARE])


@njit(nogil=True, cache=True)
def _land(ring, capacity, ticket, syndrome, result):
    """Request ``ticket`` is answered: its result and syndrome, then its done mark."""
    slot = ticket % capacity
    ring[RING_HEADER + C_RESULT * capacity + slot] = result
    ring[RING_HEADER + C_SYNDROME * capacity + slot] = syndrome
    fence()                         # the data and the result before the done mark
    ring[RING_HEADER + C_DONE * capacity + slot] = ticket + 1


def _build_callbacks():
    """(on_request, on_answer, on_put_received, on_get_received, on_batch, on_answers,
    on_buffer_sent): the active-message handlers, the completions of their rendezvous
    receives and of answers sent from a buffer of their own, compiled (or loaded from
    numba's cache)."""
    from numba import cfunc

    ucp.load()
    atomics()
    window.symbols()
    wake_words.functions()      # (registers ``pgas_wake``)
    handler, completion = HANDLER, COMPLETION

    @cfunc(handler, nopython=True, cache=True)
    def on_request(arg, header, header_length, data, length, param):
        state = carray(arg, (TARGET_WORDS,))
        h = carray(header, (REQUEST_WORDS,))
        op, raddr, nbytes = h[H_OP], h[H_RADDR], h[H_NBYTES]
        syndrome, fetched, answer_data, answer_length = 0, 0, 0, 0
        if param[0] & _REPLY_EP_FIELD == 0:
            state[T_UNANSWERED] += 1       # cannot happen: every request asks for a reply endpoint
            return 0
        if _outside_heap(state, h[H_RKEY], raddr, nbytes):
            syndrome = _ACCESS             # (rendezvous data not received is dropped by UCX)
        elif op == PUT or op == PUT_INLINE:
            if length != nbytes:
                syndrome = _INVALID
            elif param[0] & _RENDEZVOUS == 0:
                syndrome = _store(state, raddr, data, nbytes)
            else:                          # straight into the heap (a GPU heap: a buffer first); answered when landed
                buffer = 0 if state[T_WINDOW] == 0 else _native.malloc(nbytes)
                if state[T_WINDOW] != 0 and buffer == 0:
                    syndrome = _UNREACHABLE
                else:
                    request = _native.ucp_am_recv_data_nbx(state[T_WORKER], data, raddr if buffer == 0 else buffer,
                                                           nbytes, state[T_RECEIVE_PARAMS])
                    if request > 0:
                        state[T_PENDING], state[T_PENDING + 1], state[T_PENDING + 2] = h[H_TICKET], param[1], buffer
                        state[T_PENDING + 3], state[T_PENDING + 4] = raddr, nbytes
                        _native.memcpy(request, state[T_SELF] + 8 * T_PENDING, REQUEST_USER_BYTES)
                        return 0
                    syndrome = _from_buffer(state, buffer, raddr, nbytes, 0 if request == 0 else -1)
        elif op == GET:
            if state[T_WINDOW] != 0 and nbytes > 0:
                _answer_from_window(state, param[1], h[H_TICKET], raddr, nbytes)
                return 0
            answer_data, answer_length = raddr, nbytes
        else:
            syndrome, fetched = _atomic(h, raddr, nbytes, state[T_WINDOW])
        if syndrome == 0 and op != GET:
            wake_at(state[T_WAKE])
        _answer(state, param[1], h[H_TICKET], syndrome, fetched, answer_data, answer_length)
        return 0

    @cfunc(handler, nopython=True, cache=True)
    def on_batch(arg, header, header_length, data, length, param):
        """A batch of requests that need no data beyond their header (inline puts of up to
        8 bytes, atomics), applied in order and answered in one message."""
        state = carray(arg, (TARGET_WORDS,))
        count = header_length // (8 * REQUEST_WORDS)
        if param[0] & _REPLY_EP_FIELD == 0 or count > MAX_BATCH:
            state[T_UNANSWERED] += count
            return 0
        requests = carray(header, (count, REQUEST_WORDS))
        for i in range(count):
            h = requests[i]
            op, raddr, nbytes = h[H_OP], h[H_RADDR], h[H_NBYTES]
            syndrome, fetched = 0, 0
            if _outside_heap(state, h[H_RKEY], raddr, nbytes):
                syndrome = _ACCESS
            elif op == PUT_INLINE:
                if nbytes > 8:
                    syndrome = _INVALID
                else:
                    syndrome = _store(state, raddr, requests.ctypes.data + 8 * (i * REQUEST_WORDS + H_VALUE), nbytes)
            elif op == PUT or op == GET:
                syndrome = _INVALID         # they carry or fetch data: never batched
            else:
                syndrome, fetched = _atomic(h, raddr, nbytes, state[T_WINDOW])
            at = T_ANSWERS + i * ANSWER_WORDS
            state[at], state[at + 1], state[at + 2] = h[H_TICKET], syndrome, fetched
        wake_at(state[T_WAKE])
        request = _native.ucp_am_send_nbx(param[1], AM_ANSWERS, state[T_SELF] + 8 * T_ANSWERS,
                                          8 * ANSWER_WORDS * count, 0, 0, state[T_ANSWER_PARAMS])
        if request > 0:
            _native.ucp_request_free(request)
        elif request < 0:
            state[T_UNANSWERED] += count
        return 0

    @cfunc(completion, nopython=True, cache=True)
    def on_put_received(request, status, length, arg):
        state = carray(arg, (TARGET_WORDS,))
        _native.memcpy(state[T_SELF] + 8 * T_PENDING, request, REQUEST_USER_BYTES)
        _native.ucp_request_free(request)
        syndrome = _from_buffer(state, state[T_PENDING + 2], state[T_PENDING + 3], state[T_PENDING + 4], status)
        if syndrome == 0:
            wake_at(state[T_WAKE])
        _answer(state, state[T_PENDING + 1], state[T_PENDING], syndrome, 0, 0, 0)

    @cfunc(SENT, nopython=True, cache=True)
    def on_buffer_sent(request, status, arg):
        """An answer sent from a buffer of its own (a GPU heap's bytes): the buffer is freed."""
        _native.free(carray(window.words_at(request), (1,))[0])
        _native.ucp_request_free(request)

    @cfunc(handler, nopython=True, cache=True)
    def on_answer(arg, header, header_length, data, length, param):
        h = carray(header, (ANSWER_WORDS,))
        capacity = arg[R_CAPACITY]
        ring = carray(arg, (RING_HEADER + COLUMNS * capacity,))
        ticket = h[0]
        slot = ticket % capacity
        syndrome = h[1]
        if syndrome == 0 and ring[RING_HEADER + C_OP * capacity + slot] == GET and length > 0:
            laddr = ring[RING_HEADER + C_LADDR * capacity + slot]
            if param[0] & _RENDEZVOUS == 0:
                _native.memcpy(laddr, data, length)
            else:                       # straight into the caller's buffer; done when it has landed
                request = _native.ucp_am_recv_data_nbx(ring[R_WORKER], data, laddr, length, ring[R_RECEIVE_PARAMS])
                if request > 0:
                    ring[R_PENDING] = ticket
                    _native.memcpy(request, ring[R_SELF] + 8 * R_PENDING, 8)
                    return 0
                if request < 0:
                    syndrome = _INVALID
        _land(ring, capacity, ticket, syndrome, h[2])
        wake_at(ring[R_WAKE])
        return 0

    @cfunc(handler, nopython=True, cache=True)
    def on_answers(arg, header, header_length, data, length, param):
        """The answers to a batch (no data: a batch neither gets nor fetches for a waiter)."""
        capacity = arg[R_CAPACITY]
        ring = carray(arg, (RING_HEADER + COLUMNS * capacity,))
        count = header_length // (8 * ANSWER_WORDS)
        answers = carray(header, (count, ANSWER_WORDS))
        for i in range(count):
            _land(ring, capacity, answers[i, 0], answers[i, 1], answers[i, 2])
        wake_at(ring[R_WAKE])
        return 0

    @cfunc(completion, nopython=True, cache=True)
    def on_get_received(request, status, length, arg):
        capacity = arg[R_CAPACITY]
        ring = carray(arg, (RING_HEADER + COLUMNS * capacity,))
        _native.memcpy(ring[R_SELF] + 8 * R_PENDING, request, 8)
        _native.ucp_request_free(request)
        _land(ring, capacity, ring[R_PENDING], 0 if status == 0 else _INVALID, 0)
        wake_at(ring[R_WAKE])

    return on_request, on_answer, on_put_received, on_get_received, on_batch, on_answers, on_buffer_sent


callbacks = built_once(_build_callbacks)


def serve_heap(worker, base: int, size: int, rkey: int, wake: int = 0) -> list:
    """Check and apply, in native code, the requests and batches that arrive at ``worker``
    (a ``_worker.Worker``, before it starts) for the heap [base, base + size) named by
    ``rkey`` (``size`` 0: every request refused until ``reach_through``), counting each
    write at the heap's wake word at address ``wake`` (0: none); what must stay
    alive as long as the worker (the target's state, first, and its requests' parameters)."""
    on_request, _, on_put_received, _, on_batch, _, on_buffer_sent = callbacks()
    state = np.zeros(TARGET_WORDS, np.int64)
    answer_params = ucp.request_params(ucp.AM_SEND_FLAG_COPY_HEADER)
    eager_params = ucp.request_params(ucp.AM_SEND_FLAG_COPY_HEADER | ucp.AM_SEND_FLAG_EAGER)
    receive_params = ucp.request_params(0, on_put_received, state)
    buffered_params = ucp.request_params(ucp.AM_SEND_FLAG_COPY_HEADER, on_buffer_sent, state)
    buffered_eager_params = ucp.request_params(ucp.AM_SEND_FLAG_COPY_HEADER | ucp.AM_SEND_FLAG_EAGER,
                                               on_buffer_sent, state)
    state[[T_BASE, T_SIZE, T_RKEY, T_ANSWER_PARAMS, T_SELF, T_WORKER, T_RECEIVE_PARAMS, T_EAGER_PARAMS,
           T_BUFFERED_PARAMS, T_BUFFERED_EAGER_PARAMS, T_WAKE]] = (
        base, size, rkey, answer_params.ctypes.data, state.ctypes.data, worker.handle, receive_params.ctypes.data,
        eager_params.ctypes.data, buffered_params.ctypes.data, buffered_eager_params.ctypes.data, wake)
    worker.handle_messages(AM_REQUEST, on_request, state.ctypes.data)
    worker.handle_messages(AM_BATCH, on_batch, state.ctypes.data)
    return [state, answer_params, eager_params, receive_params, buffered_params, buffered_eager_params]


def reach_through(served: list, through: int, size: int) -> None:
    """The heap that ``serve_heap`` serves (``served``: what it returned) is GPU memory of
    ``size`` bytes, reached through the window at ``through`` (``_window``) from now on."""
    state = served[0]
    state[T_WINDOW] = through       # before the size that lets requests in (stores stay in order on x86)
    state[T_SIZE] = size
