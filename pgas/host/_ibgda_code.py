"""The hot path of the GPU-initiated NIC path, compiled: post a WQE, read the completion queue.

What a device thread does per message (NVSHMEM's ``ibgda_device.cuh`` does the same on a
GPU): reserve send-queue basic blocks with an atomic on the producer index (a full queue
refuses; the caller polls completions and retries, never overwrites), write the mlx5 WQE
big-endian into the reserved blocks, then, in reservation order (an ordered hand-off: a
thread publishes only once every earlier reservation is published), write the doorbell
record and the doorbell register and mark the blocks ready. A ``rung`` word batches the
doorbells of many threads: only the thread that finds it clear asks the NIC to look.

These few LLVM IR functions are compiled once with llvmlite (as ``_cpu_atomics`` is) and
called through ctypes. Python building a WQE field by field costs ~30 us under the
simulator's interpreter lock; this is one call.

The queue descriptor (uint64 words, one per queue pair; ``DESCRIPTOR`` names them):
the send queue, its depth in basic blocks, the QP number, the doorbell record (BE32), the
collapsed CQE, the error CQ (one CQE per refused WQE, ``depth`` entries), the result
cells (8 bytes per basic block: where fetched atomic values land), the ``waited`` flags
(one byte per basic block: a blocking caller will read this WQE's result; its blocks are
not reused until it has), then the counters: blocks reserved, blocks ready, the last
published WQE (+1), the completion floor (blocks known complete), error CQEs consumed,
the ``rung`` word, the doorbell register (the last control segment's first 8 bytes), and
the number of WQEs posted.
"""
from __future__ import annotations

import ctypes
import threading

__all__ = ["DESCRIPTOR", "KIND_DATA", "KIND_INLINE", "KIND_ATOMIC", "KIND_MASKED_CS_8", "compiled",
           "concurrent_post"]

DESCRIPTOR = ("sq", "depth", "qpn", "dbr", "cqe", "err_cq", "cells", "waited",
              "reserved", "ready", "last", "floor", "errors_read", "rung", "doorbell", "posted")
W = {name: i for i, name in enumerate(DESCRIPTOR)}
# WQE layouts: data segment (RDMA write/read), inline data (writes up to 8 bytes), atomic
# segment + data segment (one basic block), masked 8-byte compare-swap (two basic blocks)
KIND_DATA, KIND_INLINE, KIND_ATOMIC, KIND_MASKED_CS_8 = range(4)

_IR = """
declare i32 @sched_yield()
declare i64 @llvm.bswap.i64(i64)
declare i32 @llvm.bswap.i32(i32)
declare i64 @llvm.umin.i64(i64, i64)
declare i64 @llvm.umax.i64(i64, i64)

define private ptr @word(ptr %q, i64 %i) alwaysinline {
  %p = getelementptr i64, ptr %q, i64 %i
  ret ptr %p
}

define private ptr @field(ptr %q, i64 %i) alwaysinline {
  %p = getelementptr i64, ptr %q, i64 %i
  %v = load i64, ptr %p, align 8
  %a = inttoptr i64 %v to ptr
  ret ptr %a
}

; byte OFF of the WQE that starts at basic block START (a WQE may wrap round the queue)
define private ptr @at(ptr %sq, i64 %depth, i64 %start, i64 %off) alwaysinline {
  %bb = lshr i64 %off, 6
  %blk0 = add i64 %start, %bb
  %blk = urem i64 %blk0, %depth
  %base = shl i64 %blk, 6
  %in = and i64 %off, 63
  %o = add i64 %base, %in
  %p = getelementptr i8, ptr %sq, i64 %o
  ret ptr %p
}

define private void @be32(ptr %sq, i64 %depth, i64 %start, i64 %off, i32 %v) alwaysinline {
  %p = call ptr @at(ptr %sq, i64 %depth, i64 %start, i64 %off)
  %s = call i32 @llvm.bswap.i32(i32 %v)
  store i32 %s, ptr %p, align 4
  ret void
}

define private void @be64(ptr %sq, i64 %depth, i64 %start, i64 %off, i64 %v) alwaysinline {
  %p = call ptr @at(ptr %sq, i64 %depth, i64 %start, i64 %off)
  %s = call i64 @llvm.bswap.i64(i64 %v)
  store i64 %s, ptr %p, align 8
  ret void
}

define private void @zero_block(ptr %sq, i64 %depth, i64 %block) alwaysinline {
  %p = call ptr @at(ptr %sq, i64 %depth, i64 %block, i64 0)
  call void @llvm.memset.p0.i64(ptr align 64 %p, i8 0, i64 64, i1 false)
  ret void
}
declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)

; the 64-bit index of the WQE whose 16-bit index is COUNTER: the newest one at or below READY
define private i64 @widen(i64 %ready, i64 %counter) alwaysinline {
  %d0 = sub i64 %ready, %counter
  %d = and i64 %d0, 65535
  %r = sub i64 %ready, %d
  ret i64 %r
}

; Post one WQE. Returns -1 when the queue has no room (or a blocking caller has not read
; the result of the WQE that last used these blocks), else start * 2 + (1 if the caller
; must ring the NIC's doorbell).
define i64 @ibgda_post(ptr %q, i32 %kind, i32 %opcode_opmod, i64 %raddr, i32 %rkey, i32 %lkey,
                       i64 %laddr, i32 %nbytes, i64 %a0, i64 %a1, i64 %a2, i64 %a3, i32 %waited) {
entry:
  %sq = call ptr @field(ptr %q, i64 0)
  %depthp = call ptr @word(ptr %q, i64 1)
  %depth = load i64, ptr %depthp, align 8
  %qpnp = call ptr @word(ptr %q, i64 2)
  %qpn64 = load i64, ptr %qpnp, align 8
  %qpn = trunc i64 %qpn64 to i32
  %flags = call ptr @field(ptr %q, i64 7)
  %resv = call ptr @word(ptr %q, i64 8)
  %readyp = call ptr @word(ptr %q, i64 9)
  %lastp = call ptr @word(ptr %q, i64 10)
  %floorp = call ptr @word(ptr %q, i64 11)
  %rungp = call ptr @word(ptr %q, i64 13)
  %bellp = call ptr @word(ptr %q, i64 14)
  %postedp = call ptr @word(ptr %q, i64 15)
  %two = icmp eq i32 %kind, 3
  %n = select i1 %two, i64 2, i64 1
  br label %reserve

reserve:
  %r = load atomic i64, ptr %resv monotonic, align 8
  %f = load atomic i64, ptr %floorp acquire, align 8
  %end = add i64 %r, %n
  %used = sub i64 %end, %f
  %full = icmp ugt i64 %used, %depth
  br i1 %full, label %refuse, label %slots

slots:
  %s0 = urem i64 %r, %depth
  %w0p = getelementptr i8, ptr %flags, i64 %s0
  %w0 = load atomic i8, ptr %w0p acquire, align 1
  %r1 = add i64 %r, 1
  %s1 = urem i64 %r1, %depth
  %w1p = getelementptr i8, ptr %flags, i64 %s1
  %w1raw = load atomic i8, ptr %w1p acquire, align 1
  %w1 = select i1 %two, i8 %w1raw, i8 0
  %busy = or i8 %w0, %w1
  %isbusy = icmp ne i8 %busy, 0
  br i1 %isbusy, label %refuse, label %take

take:
  %pair = cmpxchg ptr %resv, i64 %r, i64 %end acq_rel monotonic
  %ok = extractvalue { i64, i1 } %pair, 1
  br i1 %ok, label %write, label %reserve

refuse:
  ret i64 -1

write:
  call void @zero_block(ptr %sq, i64 %depth, i64 %r)
  br i1 %two, label %zero2, label %ctrl
zero2:
  call void @zero_block(ptr %sq, i64 %depth, i64 %r1)
  br label %ctrl

ctrl:
  %idx16 = and i64 %r, 65535
  %idx = trunc i64 %idx16 to i32
  %idxs = shl i32 %idx, 8
  %w0word = or i32 %opcode_opmod, %idxs
  call void @be32(ptr %sq, i64 %depth, i64 %r, i64 0, i32 %w0word)
  ; ds (16-byte units): data 3, inline (36 + n + 15) / 16, atomic 4, masked 8-byte CS 5
  %inl0 = add i32 %nbytes, 51
  %inl = lshr i32 %inl0, 4
  %isinl = icmp eq i32 %kind, 1
  %isatom = icmp eq i32 %kind, 2
  %dsa = select i1 %isinl, i32 %inl, i32 3
  %dsb = select i1 %isatom, i32 4, i32 %dsa
  %ds = select i1 %two, i32 5, i32 %dsb
  %qpns = shl i32 %qpn, 8
  %w1word = or i32 %qpns, %ds
  call void @be32(ptr %sq, i64 %depth, i64 %r, i64 4, i32 %w1word)
  call void @be32(ptr %sq, i64 %depth, i64 %r, i64 8, i32 8)          ; fm_ce_se: CQ update
  call void @be64(ptr %sq, i64 %depth, i64 %r, i64 16, i64 %raddr)
  call void @be32(ptr %sq, i64 %depth, i64 %r, i64 24, i32 %rkey)
  %cells = call ptr @field(ptr %q, i64 6)
  %cellsi = ptrtoint ptr %cells to i64
  %cello = shl i64 %s0, 3
  %cell = add i64 %cellsi, %cello
  %opmod = lshr i32 %opcode_opmod, 24
  %four = icmp eq i32 %opmod, 8
  switch i32 %kind, label %data [ i32 1, label %inline
                                  i32 2, label %atomic
                                  i32 3, label %masked8 ]

data:
  call void @be32(ptr %sq, i64 %depth, i64 %r, i64 32, i32 %nbytes)
  call void @be32(ptr %sq, i64 %depth, i64 %r, i64 36, i32 %lkey)
  call void @be64(ptr %sq, i64 %depth, i64 %r, i64 40, i64 %laddr)
  br label %publish_wait

inline:
  %count = or i32 %nbytes, 2147483648
  call void @be32(ptr %sq, i64 %depth, i64 %r, i64 32, i32 %count)
  %ip = call ptr @at(ptr %sq, i64 %depth, i64 %r, i64 36)
  store i64 %a0, ptr %ip, align 4                                          ; the bytes as they are
  br label %publish_wait

atomic:
  br i1 %four, label %atomic4, label %atomic8
atomic4:
  %b0 = trunc i64 %a0 to i32
  %b1 = trunc i64 %a1 to i32
  %b2 = trunc i64 %a2 to i32
  %b3 = trunc i64 %a3 to i32
  call void @be32(ptr %sq, i64 %depth, i64 %r, i64 32, i32 %b0)
  call void @be32(ptr %sq, i64 %depth, i64 %r, i64 36, i32 %b1)
  call void @be32(ptr %sq, i64 %depth, i64 %r, i64 40, i32 %b2)
  call void @be32(ptr %sq, i64 %depth, i64 %r, i64 44, i32 %b3)
  br label %atomic_data
atomic8:
  call void @be64(ptr %sq, i64 %depth, i64 %r, i64 32, i64 %a0)
  call void @be64(ptr %sq, i64 %depth, i64 %r, i64 40, i64 %a1)
  br label %atomic_data
atomic_data:
  %size = select i1 %four, i32 4, i32 8
  call void @be32(ptr %sq, i64 %depth, i64 %r, i64 48, i32 %size)
  call void @be32(ptr %sq, i64 %depth, i64 %r, i64 52, i32 %lkey)
  call void @be64(ptr %sq, i64 %depth, i64 %r, i64 56, i64 %cell)
  br label %publish_wait

masked8:
  call void @be64(ptr %sq, i64 %depth, i64 %r, i64 32, i64 %a0)
  call void @be64(ptr %sq, i64 %depth, i64 %r, i64 40, i64 %a1)
  call void @be64(ptr %sq, i64 %depth, i64 %r, i64 48, i64 %a2)
  call void @be64(ptr %sq, i64 %depth, i64 %r, i64 56, i64 %a3)
  call void @be32(ptr %sq, i64 %depth, i64 %r, i64 64, i32 8)
  call void @be32(ptr %sq, i64 %depth, i64 %r, i64 68, i32 %lkey)
  call void @be64(ptr %sq, i64 %depth, i64 %r, i64 72, i64 %cell)
  br label %publish_wait

publish_wait:
  %wflag = trunc i32 %waited to i8
  store atomic i8 %wflag, ptr %w0p monotonic, align 1
  br label %order

order:                                    ; every earlier reservation published first
  %rd = load atomic i64, ptr %readyp acquire, align 8
  %mine = icmp eq i64 %rd, %r
  br i1 %mine, label %publish, label %yield
yield:
  %y = call i32 @sched_yield()
  br label %order

publish:
  %lastv = add i64 %r, 1
  store atomic i64 %lastv, ptr %lastp release, align 8
  %dbr = call ptr @field(ptr %q, i64 3)
  %pi64 = and i64 %end, 65535
  %pi = trunc i64 %pi64 to i32
  %pibe = call i32 @llvm.bswap.i32(i32 %pi)
  store atomic i32 %pibe, ptr %dbr release, align 4                        ; doorbell record
  %c0 = call ptr @at(ptr %sq, i64 %depth, i64 %r, i64 0)
  %ctrl8 = load i64, ptr %c0, align 8
  store atomic i64 %ctrl8, ptr %bellp release, align 8                     ; doorbell register
  store atomic i64 %end, ptr %readyp release, align 8
  %old = atomicrmw xchg ptr %rungp, i64 1 seq_cst
  %cnt = atomicrmw add ptr %postedp, i64 1 monotonic
  %ring = icmp eq i64 %old, 0
  %ringbit = zext i1 %ring to i64
  %twice = shl i64 %r, 1
  %res = or i64 %twice, %ringbit
  ret i64 %res
}

; Read the collapsed CQE and the error CQ; advance and return the completion floor: every
; WQE that starts below it is complete and its result read by the NIC. A refused WQE not
; yet reported (its error CQE unread) holds the floor at its start, so its blocks, which
; the error report decodes, are not reused before then.
define i64 @ibgda_progress(ptr %q) {
entry:
  %depthp = call ptr @word(ptr %q, i64 1)
  %depth = load i64, ptr %depthp, align 8
  %readyp = call ptr @word(ptr %q, i64 9)
  %floorp = call ptr @word(ptr %q, i64 11)
  %curp = call ptr @word(ptr %q, i64 12)
  %cqe = call ptr @field(ptr %q, i64 4)
  %tailp = getelementptr i8, ptr %cqe, i64 56
  %tail = load atomic i64, ptr %tailp acquire, align 8
  %ready = load atomic i64, ptr %readyp acquire, align 8
  %opc = lshr i64 %tail, 60
  %none = icmp eq i64 %opc, 15
  %hi = lshr i64 %tail, 32
  %hib = and i64 %hi, 255
  %hish = shl i64 %hib, 8
  %lo0 = lshr i64 %tail, 40
  %lo = and i64 %lo0, 255
  %counter = or i64 %hish, %lo
  %done = call i64 @widen(i64 %ready, i64 %counter)
  %done1 = add i64 %done, 1
  %floor0 = select i1 %none, i64 0, i64 %done1
  %cur = load atomic i64, ptr %curp acquire, align 8
  %errcq = call ptr @field(ptr %q, i64 5)
  %slot = urem i64 %cur, %depth
  %eoff0 = shl i64 %slot, 6
  %eoff = add i64 %eoff0, 56
  %etailp = getelementptr i8, ptr %errcq, i64 %eoff
  %etail = load atomic i64, ptr %etailp acquire, align 8
  %eopc = lshr i64 %etail, 60
  %eown0 = lshr i64 %etail, 56
  %eown = and i64 %eown0, 1
  %pass0 = udiv i64 %cur, %depth
  %pass = and i64 %pass0, 1
  %written = icmp ne i64 %eopc, 15
  %thispass = icmp eq i64 %eown, %pass
  %err = and i1 %written, %thispass
  %ehi = lshr i64 %etail, 32
  %ehib = and i64 %ehi, 255
  %ehish = shl i64 %ehib, 8
  %elo0 = lshr i64 %etail, 40
  %elo = and i64 %elo0, 255
  %ecounter = or i64 %ehish, %elo
  %estart = call i64 @widen(i64 %ready, i64 %ecounter)
  %capped = call i64 @llvm.umin.i64(i64 %floor0, i64 %estart)
  %floor = select i1 %err, i64 %capped, i64 %floor0
  %old = atomicrmw umax ptr %floorp, i64 %floor acq_rel
  %now = call i64 @llvm.umax.i64(i64 %old, i64 %floor)
  ret i64 %now
}
"""

_ARGS = (ctypes.c_void_p, ctypes.c_int32, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint32,
         ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64,
         ctypes.c_int32)


class _Compiled:
    """``post`` and ``progress``, called with the interpreter lock held (PYFUNCTYPE): a
    simulated device thread never waits for the lock again after its call, which under
    the simulator's polling loop costs up to a switch interval. The protocol inside is the
    one concurrent GPU threads need (``concurrent_post`` calls it without the lock)."""

    def __init__(self):
        import llvmlite.binding as llvm

        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        module = llvm.parse_assembly(_IR)
        module.verify()
        machine = llvm.Target.from_default_triple().create_target_machine(opt=2)
        self._engine = llvm.create_mcjit_compiler(module, machine)    # keeps the code alive
        self._engine.finalize_object()
        self.post_address = self._engine.get_function_address("ibgda_post")
        self.progress_address = self._engine.get_function_address("ibgda_progress")
        self.post = ctypes.PYFUNCTYPE(ctypes.c_int64, *_ARGS)(self.post_address)
        self.progress = ctypes.PYFUNCTYPE(ctypes.c_uint64, ctypes.c_void_p)(self.progress_address)


_compiled: _Compiled | None = None
_compiling = threading.Lock()


def compiled() -> _Compiled:
    """The compiled functions (built on first use; llvmlite errors propagate)."""
    global _compiled
    if _compiled is None:
        with _compiling:
            if _compiled is None:
                _compiled = _Compiled()
    return _compiled


def concurrent_post():
    """``post`` called without the interpreter lock, so OS threads really run it at once
    (for the test of the reservation and ordered publication)."""
    return ctypes.CFUNCTYPE(ctypes.c_int64, *_ARGS)(compiled().post_address)
