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
``ANSWER_WORDS`` words (ticket, syndrome, fetched value) and, for a get, the data.
"""
from __future__ import annotations

import ctypes

from ..core._llvm import built_once, compile_ir
from ..nic import _mlx5 as mlx5
from . import _ucp as ucp

__all__ = ["REQUEST_WORDS", "ANSWER_WORDS", "AM_REQUEST", "AM_ANSWER", "TARGET_WORDS", "COLUMNS", "callbacks"]

AM_REQUEST, AM_ANSWER = 0x50, 0x51
REQUEST_WORDS, ANSWER_WORDS = 8, 3
H_TICKET, H_OP, H_SIZE, H_RKEY, H_RADDR, H_NBYTES, H_VALUE, H_COMPARE = range(REQUEST_WORDS)
# The target's state (int64 words): the heap's base, size and rkey; the parameters of answers;
# the state's own address; refusals it could not answer; then an answer header being written.
T_BASE, T_SIZE, T_RKEY, T_ANSWER_PARAMS, T_SELF, T_UNANSWERED, T_ANSWER = 0, 1, 2, 3, 4, 5, 8
TARGET_WORDS = T_ANSWER + ANSWER_WORDS
# The requester's ring (int64 words): its capacity, then one row per column: a slot's done
# mark (its ticket + 1), fetched value, syndrome, where a get's data lands, its operation.
C_DONE, C_RESULT, C_SYNDROME, C_LADDR, C_OP = range(5)
COLUMNS = 5

# Operations, as the engines number them (pgas.transport._ibgda_ir)
PUT, PUT_INLINE, GET, AMO_ADD, AMO_CAS, AMO_SWAP, AMO_AND, AMO_OR, AMO_XOR, AMO_FETCH = range(10)

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
    """The compiled atomics, as ctypes functions numba can call (addresses as int64)."""

    def __init__(self):
        self._engine = compile_ir(_ATOMICS_IR)     # keeps the code alive
        address = self._engine.get_function_address
        i64 = ctypes.c_int64
        self.apply = ctypes.CFUNCTYPE(i64, i64, i64, i64, i64, i64)(address("apply_atomic"))
        self.fence = ctypes.CFUNCTYPE(None)(address("fence"))


def _build_callbacks():
    """(on_request, on_answer): the two active-message handlers, compiled."""
    from numba import carray, cfunc, types

    lib = ucp.load()
    send, free, memcpy = lib.ucp_am_send_nbx, lib.ucp_request_free, lib.memcpy
    atomics = _get_atomics()
    apply_atomic, fence = atomics.apply, atomics.fence
    access, invalid = mlx5.SYNDROME_REMOTE_ACCESS, mlx5.SYNDROME_REMOTE_INVALID
    reply_ep_field = ucp.AM_RECV_ATTR_FIELD_REPLY_EP
    signature = types.int32(types.CPointer(types.int64), types.CPointer(types.int64), types.int64, types.int64,
                            types.int64, types.CPointer(types.int64))

    @cfunc(signature, nopython=True)
    def on_request(arg, header, header_length, data, length, param):
        state = carray(arg, (TARGET_WORDS,))
        h = carray(header, (REQUEST_WORDS,))
        op, size, raddr, nbytes, value = h[H_OP], h[H_SIZE], h[H_RADDR], h[H_NBYTES], h[H_VALUE]
        syndrome, fetched, answer_data, answer_length = 0, 0, 0, 0
        base, heap_size = state[T_BASE], state[T_SIZE]
        if h[H_RKEY] != state[T_RKEY] or nbytes < 0 or nbytes > heap_size or raddr < base \
                or raddr - base > heap_size - nbytes:
            syndrome = access
        elif op == PUT or op == PUT_INLINE:
            if length != nbytes:
                syndrome = invalid
            else:
                memcpy(raddr, data, nbytes)
        elif op == GET:
            answer_data, answer_length = raddr, nbytes
        elif (size != 4 and size != 8) or nbytes != size or raddr % size != 0 or op < AMO_ADD or op > AMO_FETCH:
            syndrome = invalid
        else:
            fetched = apply_atomic(op, size, raddr, value, h[H_COMPARE])
        if param[0] & reply_ep_field == 0:
            state[T_UNANSWERED] += 1       # cannot happen: every request asks for a reply endpoint
            return 0
        state[T_ANSWER] = h[H_TICKET]
        state[T_ANSWER + 1] = syndrome
        state[T_ANSWER + 2] = fetched
        request = send(param[1], AM_ANSWER, state[T_SELF] + 8 * T_ANSWER, 8 * ANSWER_WORDS, answer_data,
                       answer_length, state[T_ANSWER_PARAMS])
        if request > 0:
            free(request)                  # UCX completes it; the heap outlives it
        elif request < 0:
            state[T_UNANSWERED] += 1
        return 0

    @cfunc(signature, nopython=True)
    def on_answer(arg, header, header_length, data, length, param):
        h = carray(header, (ANSWER_WORDS,))
        capacity = arg[0]
        ring = carray(arg, (1 + COLUMNS * capacity,))
        ticket = h[0]
        slot = ticket % capacity
        if h[1] == 0 and ring[1 + C_OP * capacity + slot] == GET and length > 0:
            memcpy(ring[1 + C_LADDR * capacity + slot], data, length)
        ring[1 + C_RESULT * capacity + slot] = h[2]
        ring[1 + C_SYNDROME * capacity + slot] = h[1]
        fence()                         # the data and the result before the done mark
        ring[1 + C_DONE * capacity + slot] = ticket + 1
        return 0

    return on_request, on_answer


_get_atomics = built_once(_Atomics)
callbacks = built_once(_build_callbacks)
