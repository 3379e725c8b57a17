"""The GPU-initiated NIC path's per-message code, as LLVM IR: post a WQE, read the completion queue.

What a device thread does per message (NVSHMEM's ``ibgda_device.cuh`` does the same on a
GPU): reserve send-queue basic blocks with an atomic on the producer index (a full queue
refuses; the caller polls completions and retries, never overwrites), write the mlx5 WQE
big-endian into the reserved blocks, then, in reservation order (an ordered hand-off: a
thread publishes only once every earlier reservation is published), write the doorbell
record and the doorbell register and mark the blocks ready. A ``rung`` word batches the
doorbells of many threads: only the thread that finds it clear asks the NIC to look.

One builder serves both backends, so the protocol and the byte layout exist once:
``_ibgda_code`` compiles it for the CPU (the simulator's device threads call it
through ctypes) and ``pgas/cuda/nic/_nic_library.py`` emits it into numba-cuda kernels. Only the
memory model differs, given as a ``memory`` object (``load``, ``store``, ``cas``, ``rmw``,
``pause``): LLVM atomics and ``sched_yield`` on the CPU; system-scope PTX and
``nanosleep`` on a GPU, where NVVM would lower LLVM's atomic orderings to relaxed,
GPU-scope atomics (and refuses atomic loads and stores).

The queue descriptor (uint64 words, one per queue pair; ``DESCRIPTOR`` names them):
the send queue, its depth in basic blocks, the QP number, the doorbell record (BE32), the
collapsed CQE, the error CQ (one CQE per refused WQE, ``depth`` entries), the result
cells (8 bytes per basic block: where fetched atomic values land), the ``waited`` flags
(one byte per basic block: a blocking caller will read this WQE's result; its blocks are
not reused until it has), then the counters: blocks reserved, blocks ready, the last
published WQE (+1), the completion floor (blocks known complete), error CQEs consumed,
the ``rung`` word, the doorbell register (the last control segment's first 8 bytes), the
number of WQEs posted, and where the rung word is that posters set (``rung_at``: the
descriptor's own on the simulator; on a GPU the descriptor and its counters are device
memory and the rung word host memory, which the NIC reads).
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from ..core.native._llvm import bswap
from ..nic import _mlx5 as mlx5

__all__ = ["DESCRIPTOR", "W", "KIND_DATA", "KIND_INLINE", "KIND_ATOMIC", "KIND_MASKED_CS_8", "POST_ARGS",
           "PUT", "PUT_INLINE", "GET", "AMO_ADD", "AMO_CAS", "AMO_SWAP", "AMO_AND", "AMO_OR", "AMO_XOR", "AMO_FETCH",
           "OP_NAMES", "atomic_segments", "define_post", "define_progress", "define_refused"]

# The requests a remote path carries (both engines, and the cuda device code)
PUT, PUT_INLINE, GET, AMO_ADD, AMO_CAS, AMO_SWAP, AMO_AND, AMO_OR, AMO_XOR, AMO_FETCH = range(10)
OP_NAMES = ("put", "inline put", "get", "atomic add", "atomic compare-swap", "atomic swap", "atomic and",
            "atomic or", "atomic xor", "atomic fetch")

DESCRIPTOR = ("sq", "depth", "qpn", "dbr", "cqe", "err_cq", "cells", "waited",
              "reserved", "ready", "last", "floor", "errors_read", "rung", "doorbell", "posted", "rung_at")
W = {name: i for i, name in enumerate(DESCRIPTOR)}
# WQE layouts: data segment (RDMA write/read), inline data (writes up to 8 bytes), atomic
# segment + data segment (one basic block), masked 8-byte compare-swap (two basic blocks)
KIND_DATA, KIND_INLINE, KIND_ATOMIC, KIND_MASKED_CS_8 = range(4)

I8, I32, I64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
_BB = 64                    # bytes per basic block
_OPMOD_4_BYTES = 8          # the masked atomics' opmod for 4-byte operands
_CQ_UPDATE = 8              # fm_ce_se: ask for a CQE
_NO_CQE = 15                # op_own >> 4 of a CQE slot the NIC has not written yet
_CQE_SYNDROME = 55          # byte of an error CQE
# ibgda_post's parameters: the descriptor, kind, opcode | opmod << 24, raddr, rkey, lkey,
# laddr, byte count, four operands (inline bytes or atomic segment words), waited
POST_ARGS = ("q", "kind", "opcode_opmod", "raddr", "rkey", "lkey", "laddr", "nbytes", "a0", "a1", "a2", "a3",
             "waited")
_POST_TYPES = (I64.as_pointer(), I32, I32, I64, I32, I32, I64, I32, I64, I64, I64, I64, I32)


def atomic_segments(op, size, value, compare, word=np.uint64):
    """(WQE kind, opcode | opmod << 24, four operand words) of the mlx5 atomic that does
    request ``op`` on ``size`` (4 or 8) bytes of bits ``value`` (and ``compare``).

    8-byte add and compare-swap are the standard atomics; everything else is a masked
    atomic (swap/and/or: masked compare-swap with no compare; xor: masked fetch-add with
    every bit a field of its own, so no carries), as NVSHMEM's IBGDA does. ``word`` makes
    the operand words (it takes an int or a value, and its results know ``&`` and ``~``):
    on the host ``int`` (the ibgda engine) or numpy's uint64 (the proxy); on the cuda
    backend, IR values (``op`` and ``size`` are then constants of the kernel, so the
    branches are taken when it compiles).
    """
    ones = word(0xFFFFFFFF if size == 4 else 0xFFFFFFFFFFFFFFFF)
    value = word(value) & ones
    compare = word(compare) & ones
    zero = word(0)
    opmod = (mlx5.OPMOD_EXT_ATOMIC_4 if size == 4 else mlx5.OPMOD_EXT_ATOMIC_8) << 24
    masked_cs = KIND_ATOMIC if size == 4 else KIND_MASKED_CS_8
    if op == AMO_ADD or op == AMO_FETCH:
        addend = value if op == AMO_ADD else zero
        if size == 8:
            return KIND_ATOMIC, mlx5.OP_ATOMIC_FA, addend, zero, zero, zero
        return KIND_ATOMIC, mlx5.OP_MASKED_FA | opmod, addend, zero, zero, zero
    if op == AMO_CAS:
        if size == 8:
            return KIND_ATOMIC, mlx5.OP_ATOMIC_CS, value, compare, zero, zero
        return KIND_ATOMIC, mlx5.OP_MASKED_CS | opmod, value, compare, ones, ones
    if op == AMO_XOR:
        return KIND_ATOMIC, mlx5.OP_MASKED_FA | opmod, value, ones, zero, zero
    if op == AMO_SWAP:
        return masked_cs, mlx5.OP_MASKED_CS | opmod, value, zero, ones, zero
    if op == AMO_AND:
        return masked_cs, mlx5.OP_MASKED_CS | opmod, zero, zero, ones & ~value, zero
    return masked_cs, mlx5.OP_MASKED_CS | opmod, value, zero, value, zero      # AMO_OR


def _c(value: int, typ=I64):
    return ir.Constant(typ, value)


class _Queue:
    """Reads a queue descriptor's words and addresses its send queue."""

    def __init__(self, builder, q):
        self.b, self.q = builder, q

    def word(self, name: str):
        return self.b.gep(self.q, [_c(W[name])])

    def value(self, name: str):
        return self.b.load(self.word(name), align=8)

    def pointer(self, name: str, typ=I8):
        return self.b.inttoptr(self.value(name), typ.as_pointer())


class _Wqe:
    """Stores into the WQE that starts at basic block ``start`` (it may wrap round the queue)."""

    def __init__(self, builder, sq, depth, start):
        self.b, self.sq, self.depth, self.start = builder, sq, depth, start

    def at(self, offset: int, typ):
        b = self.b
        block = b.urem(b.add(self.start, _c(offset // _BB)), self.depth)
        byte = b.add(b.shl(block, _c(6)), _c(offset % _BB))
        return b.bitcast(b.gep(self.sq, [byte]), typ.as_pointer())

    def be(self, offset: int, value):
        """Big-endian ``value`` (i32 or i64) at ``offset``."""
        swapped = bswap(self.b, value)
        self.b.store(swapped, self.at(offset, value.type), align=value.type.width // 8)

    def raw32(self, offset: int, value):
        self.b.store(value, self.at(offset, I32), align=4)

    def zero_block(self, block_offset: int):
        for offset in range(block_offset, block_offset + _BB, 8):
            self.b.store(_c(0), self.at(offset, I64), align=8)


def _widen(builder, ready, counter):
    """The 64-bit index of the WQE whose 16-bit index is ``counter``: the newest at or below ``ready``."""
    return builder.sub(ready, builder.and_(builder.sub(ready, counter), _c(0xFFFF)))


def _cqe_counter(builder, tail):
    """The BE16 WQE counter of a CQE, from its last 8 bytes read as a native (little-endian) word."""
    high = builder.and_(builder.lshr(tail, _c(32)), _c(0xFF))
    low = builder.and_(builder.lshr(tail, _c(40)), _c(0xFF))
    return builder.or_(builder.shl(high, _c(8)), low)


def _umin(builder, a, b):
    return builder.select(builder.icmp_unsigned("<", a, b), a, b)


def define_post(module, memory, name: str = "ibgda_post", linkage: str = "") -> ir.Function:
    """Define ``name``: post one WQE. It returns -1 when the queue has no room (or a
    blocking caller has not read the result of the WQE that last used these blocks), else
    ``start * 2 + ring`` (ring: 1 when the caller must ring the NIC's doorbell)."""
    fn = ir.Function(module, ir.FunctionType(I64, _POST_TYPES), name)
    fn.linkage = linkage
    for arg, arg_name in zip(fn.args, POST_ARGS):
        arg.name = arg_name
    q, kind, opcode_opmod, raddr, rkey, lkey, laddr, nbytes, a0, a1, a2, a3, waited = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    queue = _Queue(b, q)
    sq, depth, flags = queue.pointer("sq"), queue.value("depth"), queue.pointer("waited")
    qpn = b.trunc(queue.value("qpn"), I32)
    two = b.icmp_signed("==", kind, _c(KIND_MASKED_CS_8, I32))
    blocks = b.select(two, _c(2), _c(1))
    reserve, refuse, slots, take, write = (fn.append_basic_block(n) for n in
                                           ("reserve", "refuse", "slots", "take", "write"))
    b.branch(reserve)

    b.position_at_end(reserve)
    start = memory.load(b, queue.word("reserved"), "monotonic")
    floor = memory.load(b, queue.word("floor"), "acquire")
    end = b.add(start, blocks)
    b.cbranch(b.icmp_unsigned(">", b.sub(end, floor), depth), refuse, slots)

    b.position_at_end(refuse)
    b.ret(_c(-1))

    b.position_at_end(slots)                 # blocks whose result a blocking caller still reads
    slot = b.urem(start, depth)
    own_flag = b.gep(flags, [slot])
    busy = memory.load(b, own_flag, "acquire")
    next_flag = memory.load(b, b.gep(flags, [b.urem(b.add(start, _c(1)), depth)]), "acquire")
    busy = b.or_(busy, b.select(two, next_flag, _c(0, I8)))
    b.cbranch(b.icmp_unsigned("!=", busy, _c(0, I8)), refuse, take)

    b.position_at_end(take)
    b.cbranch(memory.cas(b, queue.word("reserved"), start, end), write, reserve)

    b.position_at_end(write)
    wqe = _Wqe(b, sq, depth, start)
    wqe.zero_block(0)
    with b.if_then(two):
        wqe.zero_block(_BB)
    index = b.trunc(b.and_(start, _c(0xFFFF)), I32)
    wqe.be(0, b.or_(opcode_opmod, b.shl(index, _c(8, I32))))
    # ds (16-byte units): data 3, inline (36 + n + 15) / 16, atomic 4, masked 8-byte CS 5
    ds = b.select(b.icmp_signed("==", kind, _c(KIND_INLINE, I32)), b.lshr(b.add(nbytes, _c(51, I32)), _c(4, I32)),
                  _c(3, I32))
    ds = b.select(b.icmp_signed("==", kind, _c(KIND_ATOMIC, I32)), _c(4, I32), ds)
    ds = b.select(two, _c(5, I32), ds)
    wqe.be(4, b.or_(b.shl(qpn, _c(8, I32)), ds))
    wqe.be(8, _c(_CQ_UPDATE, I32))
    wqe.be(16, raddr)
    wqe.be(24, rkey)
    cell = b.add(queue.value("cells"), b.shl(slot, _c(3)))
    four = b.icmp_unsigned("==", b.lshr(opcode_opmod, _c(24, I32)), _c(_OPMOD_4_BYTES, I32))
    publish_wait = fn.append_basic_block("publish_wait")
    segments = {k: fn.append_basic_block(n) for k, n in
                ((KIND_DATA, "data"), (KIND_INLINE, "inline"), (KIND_ATOMIC, "atomic"), (KIND_MASKED_CS_8, "masked8"))}
    switch = b.switch(kind, segments[KIND_DATA])
    for k in (KIND_INLINE, KIND_ATOMIC, KIND_MASKED_CS_8):
        switch.add_case(_c(k, I32), segments[k])

    def data_segment(offset, count, address):
        wqe.be(offset, count)
        wqe.be(offset + 4, lkey)
        wqe.be(offset + 8, address)
        b.branch(publish_wait)

    b.position_at_end(segments[KIND_DATA])          # laddr 0: into the WQE's result cell (a g)
    data_segment(32, nbytes, b.select(b.icmp_unsigned("==", laddr, _c(0)), cell, laddr))

    b.position_at_end(segments[KIND_INLINE])
    wqe.be(32, b.or_(nbytes, _c(0x80000000, I32)))
    wqe.raw32(36, b.trunc(a0, I32))                 # the bytes as they are, as two aligned words
    wqe.raw32(40, b.trunc(b.lshr(a0, _c(32)), I32))
    b.branch(publish_wait)

    b.position_at_end(segments[KIND_ATOMIC])
    with b.if_else(four) as (then, otherwise):
        with then:
            for i, operand in enumerate((a0, a1, a2, a3)):
                wqe.be(32 + 4 * i, b.trunc(operand, I32))
        with otherwise:
            wqe.be(32, a0)
            wqe.be(40, a1)
    data_segment(48, b.select(four, _c(4, I32), _c(8, I32)), cell)

    b.position_at_end(segments[KIND_MASKED_CS_8])
    for i, operand in enumerate((a0, a1, a2, a3)):
        wqe.be(32 + 8 * i, operand)
    data_segment(64, _c(8, I32), cell)

    b.position_at_end(publish_wait)
    memory.store(b, b.trunc(waited, I8), own_flag, "monotonic")
    order, wait_turn, publish = (fn.append_basic_block(n) for n in ("order", "wait_turn", "publish"))
    b.branch(order)
    b.position_at_end(order)                 # every earlier reservation published first
    mine = b.icmp_unsigned("==", memory.load(b, queue.word("ready"), "acquire"), start)
    b.cbranch(mine, publish, wait_turn)
    b.position_at_end(wait_turn)
    memory.pause(b)
    b.branch(order)

    b.position_at_end(publish)
    memory.store(b, b.add(start, _c(1)), queue.word("last"), "release")
    producer = b.trunc(b.and_(end, _c(0xFFFF)), I32)
    memory.store(b, bswap(b, producer), queue.pointer("dbr", I32),
                 "release")                                                      # doorbell record
    memory.store(b, b.load(wqe.at(0, I64), align=8), queue.word("doorbell"), "release")   # doorbell register
    memory.store(b, end, queue.word("ready"), "release")
    rung_before = memory.rmw(b, "xchg", queue.pointer("rung_at", I64), _c(1))
    memory.rmw(b, "add", queue.word("posted"), _c(1))
    ring = b.zext(b.icmp_unsigned("==", rung_before, _c(0)), I64)
    b.ret(b.or_(b.shl(start, _c(1)), ring))
    return fn


def _oldest_unread_error(b, memory, queue, depth):
    """(is there one, its WQE counter (16 bits), its syndrome as i64) of the oldest error
    CQE nobody has read: written, and its owner bit the parity of this pass round the ring."""
    consumed = memory.load(b, queue.word("errors_read"), "acquire")
    offset = b.shl(b.urem(consumed, depth), _c(6))
    cqe = b.gep(queue.pointer("err_cq"), [offset])
    etail = memory.load(b, b.bitcast(b.gep(cqe, [_c(56)]), I64.as_pointer()), "acquire")
    owner = b.and_(b.lshr(etail, _c(56)), _c(1))
    this_pass = b.icmp_unsigned("==", owner, b.and_(b.udiv(consumed, depth), _c(1)))
    unread = b.and_(b.icmp_unsigned("!=", b.lshr(etail, _c(60)), _c(_NO_CQE)), this_pass)
    syndrome = b.zext(b.load(b.gep(cqe, [_c(_CQE_SYNDROME)])), I64)
    return unread, _cqe_counter(b, etail), syndrome


def define_refused(module, memory, name: str = "ibgda_refused", linkage: str = "") -> ir.Function:
    """Define ``name(q)``: ``start << 8 | syndrome`` of the oldest refused WQE whose error
    CQE nobody has read (its WQE is intact: the completion floor waits at it), else -1."""
    fn = ir.Function(module, ir.FunctionType(I64, [I64.as_pointer()]), name)
    fn.linkage = linkage
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    queue = _Queue(b, fn.args[0])
    unread, counter, syndrome = _oldest_unread_error(b, memory, queue, queue.value("depth"))
    ready = memory.load(b, queue.word("ready"), "acquire")    # after the CQE: never older than its WQE
    start = _widen(b, ready, counter)
    b.ret(b.select(unread, b.or_(b.shl(start, _c(8)), syndrome), _c(-1)))
    return fn


def define_progress(module, memory, name: str = "ibgda_progress", linkage: str = "") -> ir.Function:
    """Define ``name(q)``: read the collapsed CQE and the error CQ; advance and return the
    completion floor: every WQE that starts below it is complete and its result read by the
    NIC. A refused WQE not yet reported (its error CQE unread) holds the floor at its start,
    so its blocks, which the error report decodes, are not reused before then."""
    fn = ir.Function(module, ir.FunctionType(I64, [I64.as_pointer()]), name)
    fn.linkage = linkage
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    queue = _Queue(b, fn.args[0])
    depth = queue.value("depth")
    cqe = b.bitcast(b.gep(queue.pointer("cqe"), [_c(56)]), I64.as_pointer())
    tail = memory.load(b, cqe, "acquire")
    unread, error_counter, _ = _oldest_unread_error(b, memory, queue, depth)
    ready = memory.load(b, queue.word("ready"), "acquire")    # after the CQEs: never older than their WQEs
    written = b.icmp_unsigned("!=", b.lshr(tail, _c(60)), _c(_NO_CQE))
    floor = b.select(written, b.add(_widen(b, ready, _cqe_counter(b, tail)), _c(1)), _c(0))
    floor = b.select(unread, _umin(b, floor, _widen(b, ready, error_counter)), floor)
    before = memory.rmw(b, "umax", queue.word("floor"), floor)
    b.ret(b.select(b.icmp_unsigned(">", before, floor), before, floor))
    return fn
