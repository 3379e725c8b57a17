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
from numba import njit, types

from ..core._llvm import built_once, compile_ir
from ..nic import _mlx5 as mlx5
from . import _native, _ucp as ucp

__all__ = ["REQUEST_WORDS", "ANSWER_WORDS", "AM_REQUEST", "AM_ANSWER", "AM_BATCH", "AM_ANSWERS", "MAX_BATCH",
           "TARGET_WORDS", "RING_HEADER", "COLUMNS", "REQUEST_USER_BYTES", "EAGER_BYTES", "callbacks", "atomics",
           "serve_heap"]

AM_REQUEST, AM_ANSWER, AM_BATCH, AM_ANSWERS = 0x50, 0x51, 0x52, 0x53
REQUEST_WORDS, ANSWER_WORDS = 10, 3
MAX_BATCH = 16              # requests in one AM_BATCH (pgas.wire._batch)
H_TICKET, H_OP, H_SIZE, H_RKEY, H_RADDR, H_NBYTES, H_VALUE, H_COMPARE, H_MASK, H_COMPARE_MASK = range(REQUEST_WORDS)
REQUEST_USER_BYTES = 16      # a receive in flight: its ticket, and (target) the endpoint to answer on
# Data of up to this many bytes travels eagerly, with its request or answer (UCX is told so),
# and the target applies it before the requests behind it. Larger data may go by rendezvous,
# which lands after them: whoever sends it sends nothing more to that PE until it has
# landed (its answer has come), so requests to one PE stay applied in order.
EAGER_BYTES = 64 << 10
# The target's state (int64 words): the heap's base, size and rkey; the parameters of answers
# (of small ones: eager); the state's own address; refusals it could not answer; the worker;
# the parameters of rendezvous receives; an answer header being written; a receive's ticket
# and reply endpoint.
T_BASE, T_SIZE, T_RKEY, T_ANSWER_PARAMS, T_SELF, T_UNANSWERED, T_WORKER, T_RECEIVE_PARAMS, T_EAGER_PARAMS = range(9)
T_ANSWER = 9
T_PENDING = T_ANSWER + ANSWER_WORDS
T_ANSWERS = T_PENDING + 2           # a batch's answers being written
TARGET_WORDS = T_ANSWERS + MAX_BATCH * ANSWER_WORDS
# The requester's ring (int64 words): its capacity, worker, parameters of rendezvous receives,
# its own address, a receive's ticket, the next ticket, the first slot not yet free, the
# request a post found in its way (``pgas.transport._ucx.post``: its ticket + 1); then one
# row per column: a slot's done mark (its ticket + 1), fetched value, syndrome, where a get's
# data lands, its operation, whether a thread waits for it, its PE, remote address and bytes.
R_CAPACITY, R_WORKER, R_RECEIVE_PARAMS, R_SELF, R_PENDING, R_NEXT, R_FREED, R_BLOCKED = range(8)
RING_HEADER = 8
# (the requester's own columns: who waits for the slot, and what the request was, for errors)
C_DONE, C_RESULT, C_SYNDROME, C_LADDR, C_OP, C_WAITED, C_PE, C_RADDR, C_NBYTES = range(9)
COLUMNS = 9

# Operations, as the engines number them (pgas.transport._ibgda_ir)
PUT, PUT_INLINE, GET, AMO_ADD, AMO_CAS, AMO_SWAP, AMO_AND, AMO_OR, AMO_XOR, AMO_FETCH = range(10)
# an mlx5 masked atomic no single operation above does (the native NIC's, pgas.wire._nic_code):
# its opcode in the size word's second byte, its four operands in value, compare and the masks
AMO_MLX5 = 10

_RMW = {AMO_ADD: "add", AMO_SWAP: "xchg", AMO_AND: "and", AMO_OR: "or", AMO_XOR: "xor"}


def _atomics_ir(t: str) -> str:
    """LLVM IR of ``apply_<t>(op, address, value, compare)``: the atomic ``op`` (the engines'
    numbering) on the word of type ``t`` (i32 or i64) at ``address``; its old value,
    zero-extended. Operands come in as i64."""
    narrow = (lambda name, v: f"%{name} = trunc i64 {v} to {t}") if t == "i32" else \
        (lambda name, v: f"%{name} = add i64 {v}, 0")
    cases = " ".join(f"i64 {op}, label %op{op}" for op in (*_RMW, AMO_CAS, AMO_FETCH))
    blocks = "".join(f"""
op{op}:
  %old{op} = atomicrmw {name} {t}* %p, {t} %v seq_cst
  br label %done""" for op, name in _RMW.items())
    phis = ", ".join(f"[%old{op}, %op{op}]" for op in (*_RMW, AMO_CAS, AMO_FETCH))
    return f"""
define i64 @apply_{t}(i64 %op, i64 %a, i64 %value, i64 %compare) {{
entry:
  %p = inttoptr i64 %a to {t}*
  {narrow("v", "%value")}
  {narrow("c", "%compare")}
  switch i64 %op, label %other [{cases}]
{blocks}
op{AMO_CAS}:
  %pair = cmpxchg {t}* %p, {t} %c, {t} %v seq_cst seq_cst
  %old{AMO_CAS} = extractvalue {{ {t}, i1 }} %pair, 0
  br label %done
op{AMO_FETCH}:
  %old{AMO_FETCH} = load atomic {t}, {t}* %p seq_cst, align {4 if t == "i32" else 8}
  br label %done
other:
  ret i64 0
done:
  %old = phi {t} {phis}
  {"%w = zext i32 %old to i64" if t == "i32" else "%w = add i64 %old, 0"}
  ret i64 %w
}}"""


_ATOMICS_IR = _atomics_ir("i32") + _atomics_ir("i64") + """
define i64 @apply_atomic(i64 %op, i64 %size, i64 %a, i64 %value, i64 %compare) {
  %four = icmp eq i64 %size, 4
  br i1 %four, label %narrow, label %wide
narrow:
  %n = call i64 @apply_i32(i64 %op, i64 %a, i64 %value, i64 %compare)
  ret i64 %n
wide:
  %w = call i64 @apply_i64(i64 %op, i64 %a, i64 %value, i64 %compare)
  ret i64 %w
}
define void @fence() {
  fence seq_cst
  ret void
}
"""


class _Atomics:
    """The compiled atomics, callable from numba code by symbol (``apply_atomic``, ``fence``)."""

    def __init__(self):
        self._engine = compile_ir(_ATOMICS_IR)     # keeps the code alive
        ucp.register_symbol("wire_apply_atomic", self._engine.get_function_address("apply_atomic"))
        ucp.register_symbol("wire_fence", self._engine.get_function_address("fence"))


# apply_atomic(op, size, address, value, compare) -> old value, and a seq_cst fence: in numba
# code, once ``atomics()`` has compiled them
apply_atomic = types.ExternalFunction("pgas_wire_apply_atomic", types.int64(*[types.int64] * 5))
fence = types.ExternalFunction("pgas_wire_fence", types.void())
# the numba signatures of an active-message handler (ucp_am_recv_callback_t: arg, header,
# header length, data, length, receive parameters) and of a receive's completion
HANDLER = types.int32(types.CPointer(types.int64), types.CPointer(types.int64), types.int64, types.int64,
                      types.int64, types.CPointer(types.int64))
COMPLETION = types.void(types.int64, types.int32, types.int64, types.CPointer(types.int64))
_ACCESS, _INVALID = mlx5.SYNDROME_REMOTE_ACCESS, mlx5.SYNDROME_REMOTE_INVALID
_REPLY_EP_FIELD, _RENDEZVOUS = ucp.AM_RECV_ATTR_FIELD_REPLY_EP, ucp.AM_RECV_ATTR_FLAG_RNDV


# The helpers the callbacks call are module globals, so that the callbacks can be cached
# (a dispatcher held in a closure makes numba's cache key differ in every process).

@njit(nogil=True, cache=True)
def _answer(state, reply_ep, ticket, syndrome, fetched, data, length):
    """Send the answer to request ``ticket`` (with ``length`` bytes at ``data``)."""
    state[T_ANSWER], state[T_ANSWER + 1], state[T_ANSWER + 2] = ticket, syndrome, fetched
    request = _native.ucp_am_send_nbx(reply_ep, AM_ANSWER, state[T_SELF] + 8 * T_ANSWER, 8 * ANSWER_WORDS, data,
                                      length, state[T_EAGER_PARAMS if length <= EAGER_BYTES else T_ANSWER_PARAMS])
    if request > 0:
        _native.ucp_request_free(request)      # UCX completes it; the heap outlives it
    elif request < 0:
        state[T_UNANSWERED] += 1


@njit(nogil=True, cache=True)
def _outside_heap(state, rkey, raddr, nbytes):
    """True when a request's bytes are not all in the heap, or its rkey is not the heap's."""
    base, heap_size = state[T_BASE], state[T_SIZE]
    return rkey != state[T_RKEY] or nbytes < 0 or nbytes > heap_size or raddr < base \
        or raddr - base > heap_size - nbytes


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
def _atomic(h, raddr, nbytes):
    """(syndrome, old value) of the atomic of request header ``h`` on the heap word at ``raddr``."""
    op, size = h[H_OP], h[H_SIZE] & 0xFF
    if (size != 4 and size != 8) or nbytes != size or raddr % size != 0 or op < AMO_ADD or op > AMO_MLX5:
        return _INVALID, 0
    if op == AMO_MLX5:
        opcode = h[H_SIZE] >> 8
        if opcode != mlx5.OP_MASKED_CS and opcode != mlx5.OP_MASKED_FA:
            return _INVALID, 0
        return 0, _masked(opcode, size, raddr, h[H_VALUE], h[H_COMPARE], h[H_MASK], h[H_COMPARE_MASK])
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
    """(on_request, on_answer, on_put_received, on_get_received, on_batch, on_answers): the
    active-message handlers and the completions of their rendezvous receives, compiled
    (or loaded from numba's cache)."""
    from numba import carray, cfunc

    ucp.load()
    atomics()
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
                _native.memcpy(raddr, data, nbytes)
            else:                          # straight into the heap; answered when it has landed
                request = _native.ucp_am_recv_data_nbx(state[T_WORKER], data, raddr, nbytes, state[T_RECEIVE_PARAMS])
                if request > 0:
                    state[T_PENDING], state[T_PENDING + 1] = h[H_TICKET], param[1]
                    _native.memcpy(request, state[T_SELF] + 8 * T_PENDING, REQUEST_USER_BYTES)
                    return 0
                if request < 0:
                    syndrome = _INVALID
        elif op == GET:
            answer_data, answer_length = raddr, nbytes
        else:
            syndrome, fetched = _atomic(h, raddr, nbytes)
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
                    _native.memcpy(raddr, requests.ctypes.data + 8 * (i * REQUEST_WORDS + H_VALUE), nbytes)
            elif op == PUT or op == GET:
                syndrome = _INVALID         # they carry or fetch data: never batched
            else:
                syndrome, fetched = _atomic(h, raddr, nbytes)
            at = T_ANSWERS + i * ANSWER_WORDS
            state[at], state[at + 1], state[at + 2] = h[H_TICKET], syndrome, fetched
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
        _answer(state, state[T_PENDING + 1], state[T_PENDING], 0 if status == 0 else _INVALID, 0, 0, 0)

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
        return 0

    @cfunc(completion, nopython=True, cache=True)
    def on_get_received(request, status, length, arg):
        capacity = arg[R_CAPACITY]
        ring = carray(arg, (RING_HEADER + COLUMNS * capacity,))
        _native.memcpy(ring[R_SELF] + 8 * R_PENDING, request, 8)
        _native.ucp_request_free(request)
        _land(ring, capacity, ring[R_PENDING], 0 if status == 0 else _INVALID, 0)

    return on_request, on_answer, on_put_received, on_get_received, on_batch, on_answers


atomics = built_once(_Atomics)
callbacks = built_once(_build_callbacks)


def serve_heap(worker, base: int, size: int, rkey: int) -> list:
    """Check and apply, in native code, the requests and batches that arrive at ``worker``
    (a ``_worker.Worker``, before it starts) for the heap [base, base + size) named by
    ``rkey``; what must stay alive as long as the worker (the target's state and its
    requests' parameters)."""
    on_request, _, on_put_received, _, on_batch, _ = callbacks()
    state = np.zeros(TARGET_WORDS, np.int64)
    answer_params = ucp.request_params(ucp.AM_SEND_FLAG_COPY_HEADER)
    eager_params = ucp.request_params(ucp.AM_SEND_FLAG_COPY_HEADER | ucp.AM_SEND_FLAG_EAGER)
    receive_params = ucp.request_params(0, on_put_received, state)
    state[[T_BASE, T_SIZE, T_RKEY, T_ANSWER_PARAMS, T_SELF, T_WORKER, T_RECEIVE_PARAMS, T_EAGER_PARAMS]] = (
        base, size, rkey, answer_params.ctypes.data, state.ctypes.data, worker.handle, receive_params.ctypes.data,
        eager_params.ctypes.data)
    worker.handle_messages(AM_REQUEST, on_request, state.ctypes.data)
    worker.handle_messages(AM_BATCH, on_batch, state.ctypes.data)
    return [state, answer_params, eager_params, receive_params]
