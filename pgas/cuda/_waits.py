"""Groups and waits on the GPU: a thread's rank in its warp or block, group synchronization,
and wait loops that back off and trap past PGAS_TIMEOUT."""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.cuda import cgutils, nvvmutils
from numba.cuda.extending import intrinsic

from ..core._codes import BLOCK, THREAD
from ..core._device_errors import BARRIER_TIMEOUT, SET_TIMEOUT, TIMEOUT
from . import _ptx as ptx
from ._ir import compare_codegen
from ._jit import jit
from ._memory import _element_acquire, load_acquire, team_pe, team_size
from ._state_reads import fail as _fail, timed_out as _timed_out

__all__ = ["WARP_SIZE", "group_rank_and_size", "group_sync", "compare", "wait_for_value", "wait_start", "wait_pause",
           "wait_for_arrivals"]

WARP_SIZE = 32


def _group_rank_and_size(builder, kind):
    """(this thread's rank, the group's size) as int64 values for scope ``kind``."""
    i64 = ir.IntType(64)
    if kind == THREAD:
        return i64(0), i64(1)

    def sreg(name):
        return builder.zext(nvvmutils.call_sreg(builder, name), i64)
    width, height = sreg("ntid.x"), sreg("ntid.y")
    block = builder.mul(builder.mul(width, height), sreg("ntid.z"))
    tid = builder.add(sreg("tid.x"), builder.mul(width, builder.add(sreg("tid.y"), builder.mul(height, sreg("tid.z")))))
    if kind == BLOCK:
        return tid, block
    first = builder.and_(tid, i64(~(WARP_SIZE - 1)))
    left = builder.sub(block, first)
    return builder.sub(tid, first), builder.select(builder.icmp_signed("<", left, i64(WARP_SIZE)), left, i64(WARP_SIZE))


@intrinsic
def group_rank_and_size(typingctx, scope, fn):
    """This thread's rank in its thread / warp / block (``scope``, a literal) and the
    group's size (a partial last warp counts the threads it has)."""
    if not isinstance(scope, types.IntegerLiteral):
        return None
    result = types.UniTuple(types.int64, 2)

    def codegen(context, builder, sig, args):
        return context.make_tuple(builder, result, list(_group_rank_and_size(builder, scope.literal_value)))
    return result(scope, fn), codegen


@intrinsic
def group_sync(typingctx, scope, fn):
    """Synchronize the group of ``scope`` (a literal): the block (``bar.sync``), or the
    warp with the mask of the threads it has (a partial last warp); nothing for a thread."""
    if not isinstance(scope, types.IntegerLiteral):
        return None

    def codegen(context, builder, sig, args):
        kind = scope.literal_value
        if kind == BLOCK:
            barrier = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), ()),
                                                     "llvm.nvvm.barrier0")
            builder.call(barrier, ())
        elif kind != THREAD:
            i32 = ir.IntType(32)
            size = builder.trunc(_group_rank_and_size(builder, kind)[1], i32)
            mask = builder.lshr(i32(0xFFFFFFFF), builder.sub(i32(32), size))
            sync = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), (i32,)),
                                                  "llvm.nvvm.bar.warp.sync")
            builder.call(sync, (mask,))
        return context.get_dummy_value()
    return types.void(scope, fn), codegen


@intrinsic
def compare(typingctx, value, cmp, target):
    """``value <cmp> target`` in ``value``'s own type (``_ir.compare_codegen``)."""
    return types.boolean(value, cmp, target), compare_codegen


@jit
def wait_for_value(fn, word, what, cmp, value):
    target = ptx.cast_like(word[0], value)   # compared in the word's own type
    started = ptx.globaltimer()
    while True:
        seen = load_acquire(word, fn, what)
        if compare(seen, cmp, target):
            return seen
        if _timed_out(started):
            _fail(TIMEOUT, fn, what, word, cmp, target, seen)


@intrinsic
def wait_start(typingctx, fn):
    """The clock of one wait loop (``wait_pause``)."""
    def codegen(context, builder, sig, args):
        return ptx.read_globaltimer(builder)
    return types.int64(fn), codegen


@jit
def wait_pause(fn, clock, ivars, index, what, cmp, value):
    """Back off once in a wait on ``ivars``; past PGAS_TIMEOUT record ``what[index] <cmp>
    value`` (the first included ivar not satisfied) and the value seen there, and trap."""
    if _timed_out(clock):
        seen = _element_acquire(ivars, index)
        _fail(SET_TIMEOUT, fn, what, ivars, cmp + 8 * index, ptx.cast_like(seen, value), seen)


@jit
def wait_for_arrivals(fn, team, words, epoch):
    started = ptx.globaltimer()
    members = team_size(team, fn)
    for rank in range(members):
        while _element_acquire(words, rank) < epoch:
            if _timed_out(started):
                missing, count = np.int64(0), 0
                for r in range(members):
                    if _element_acquire(words, r) < epoch:
                        count += 1
                        pe = team_pe(team, r, fn)
                        if pe < 64:
                            missing |= np.int64(1) << pe
                _fail(BARRIER_TIMEOUT, fn, "", "", team, missing, count)
