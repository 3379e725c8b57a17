"""The cuda primitive layer: the same names as ``_sim.py``, compiled by numba for the GPU.

Device state is read from the state block at a fixed address (``_cuda_state``). The
barrier words of team slot t are the t-th row of ``n_pes + 1`` int64 at the start of the
heap, as on the simulator. PEs of this node are reached by loads and stores into their
mapped heaps; PEs on other nodes through the NIC, the device thread posting its own
work requests (``_cuda_nic``).

Ordering follows the PTX memory model at system scope (``_cuda_ptx.py``): ``g``/``p`` are
strong relaxed accesses, waits poll with ``ld.acquire.sys``, atomics are sequentially
consistent (``fence.sc.sys`` + ``atom.acquire.sys``), ``fence``/``quiet`` are
``fence.sc.sys`` (``quiet`` first waits for the NIC's completions).

Checks: what a kernel's types decide (equal dtypes, a signal's dtype, a reduction's op on
its dtype) is refused when the kernel compiles. What only the values decide (a PE out of
range or unreachable, a team that does not exist, sizes, a root, cmp, sig_op) and a wait
that passes PGAS_TIMEOUT write an error record into the PE's mailbox and ``trap``; the
host raises it with the simulator's text (``pgas/_device_errors.py``).
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import cuda, types
from numba.core.errors import TypingError
from numba.cuda import cgutils, nvvmutils
from numba.cuda.extending import intrinsic

from .._constants import MAX_TEAMS
from .._cpu_atomics import ORDERED_DTYPES
from .._device_errors import BARRIER_TIMEOUT, KIND, REDUCTIONS_IN_PLACE, SET_TIMEOUT, TIMEOUT, UNREACHABLE_WHY
from .._errors import PgasError
from .._reductions import reduction_ufunc
from . import _cuda_nic as nic
from . import _cuda_ptx as ptx
from ._cuda_state import STATE_ADDRESS, STATE_WORDS, _HEAP_BASE, _MY_PE, _N_PES, _PEER_BASES
from ._cuda_state import fail as _fail, load_state as _load_state, record_failure as _record_failure
from ._cuda_state import timed_out as _timed_out
from ._cuda_ir import (FOLD_COPY, check_codegens, compare_codegen, copy_strided_codegen, copy_strided_type,
                       fold_codegen, fold_type)
from ._codes import BLOCK, DTYPE_SETS, PRIMITIVES, REDUCE_OPS, THREAD, reduce_code

__all__ = [*PRIMITIVES, "STATE_ADDRESS", "STATE_WORDS"]

WARP_SIZE = 32
# error kinds a device check records (texts in pgas/_device_errors.py)
_PE_RANGE, _UNREACHABLE, _TEAM = (KIND[k] for k in ("PE_RANGE", "UNREACHABLE", "TEAM"))


def jit(function):
    """How a shared device helper is compiled on the GPU: a device function of its own that
    NVVM inlines (``forceinline``). numba types and lowers it once per signature; with
    ``inline="always"`` it would copy the helper's IR into every call site instead, which
    made a kernel calling a block collective take seconds to compile."""
    return cuda.jit(device=True, forceinline=True)(function)


def jit_array(function):
    """A helper that returns an array (numba only returns arrays from device functions it
    inlines at the IR level: ``inline="always"``). Keep these small."""
    return cuda.jit(device=True, inline="always")(function)


def device_function(function):
    """A public device function: compiled as a helper (``jit``), or as ``jit_array`` where
    it returns an array (marked ``function.returns_array = True``)."""
    return jit_array(function) if getattr(function, "returns_array", False) else jit(function)


name = ptx.name


_CHECKS = check_codegens(_record_failure)


# State and teams: intrinsics (read in place, no helper to compile) ------------------

def _state_intrinsic(index: int, doc: str):
    @intrinsic
    def read(typingctx, fn):
        def codegen(context, builder, sig, args):
            return _load_state(builder, ir.IntType(64)(index))
        return types.int64(fn), codegen
    read.__doc__ = doc
    return read


my_pe = _state_intrinsic(_MY_PE, "my_pe(fn): this PE's number.")
n_pes = _state_intrinsic(_N_PES, "n_pes(fn): the number of PEs.")


def _team_word(context, builder, team_type, team, extra):
    """Word ``extra`` of team slot ``team``'s row (size, my rank, then the world PE of each rank)."""
    i64 = ir.IntType(64)
    n = _load_state(builder, i64(_N_PES))
    slot = context.cast(builder, team, team_type, types.int64)
    row = builder.add(builder.add(i64(_PEER_BASES), n), builder.mul(slot, builder.add(n, i64(2))))
    return _load_state(builder, builder.add(row, extra))


@intrinsic
def team_size(typingctx, team, fn):
    def codegen(context, builder, sig, args):
        return _team_word(context, builder, sig.args[0], args[0], ir.IntType(64)(0))
    return types.int64(team, fn), codegen


@intrinsic
def team_rank(typingctx, team, fn):
    def codegen(context, builder, sig, args):
        return _team_word(context, builder, sig.args[0], args[0], ir.IntType(64)(1))
    return types.int64(team, fn), codegen


@intrinsic
def team_pe(typingctx, team, rank, fn):
    def codegen(context, builder, sig, args):
        rank = context.cast(builder, args[1], sig.args[1], types.int64)
        return _team_word(context, builder, sig.args[0], args[0], builder.add(rank, ir.IntType(64)(2)))
    return types.int64(team, rank, fn), codegen


def _check_team(context, builder, fn_type, fn, team_type, team):
    """``team`` must be a live slot (checked once per call that takes a team)."""
    i64 = ir.IntType(64)
    slot = context.cast(builder, team, team_type, types.int64)
    in_range = builder.and_(builder.icmp_signed(">=", slot, i64(0)), builder.icmp_signed("<", slot, i64(MAX_TEAMS)))
    size = _team_word(context, builder, types.int64, builder.select(in_range, slot, i64(0)), i64(0))
    failed = builder.or_(builder.not_(in_range), builder.icmp_signed("==", size, i64(0)))   # size 0: a free slot
    with cgutils.if_unlikely(builder, failed):
        _record_failure(context, builder, _TEAM, [(fn_type, fn), ("team", None), ("", None)],
                        [slot, _load_state(builder, i64(_MY_PE)), i64(0)])


@intrinsic
def check_team(typingctx, fn, team):
    def codegen(context, builder, sig, args):
        _check_team(context, builder, sig.args[0], args[0], sig.args[1], args[1])
        return context.get_dummy_value()
    return types.void(fn, team), codegen


@intrinsic
def team_arrays(typingctx, fn, team, dest, src):
    """A collective's arguments checked (``team`` live, equal dtypes) and its arrays as
    1-D C views: one intrinsic, no helper to compile or inline."""
    _same_dtype_or_refuse("dest", dest, "src", src)
    result = types.UniTuple(types.Array(dest.dtype, 1, "C"), 2)

    def codegen(context, builder, sig, args):
        _check_team(context, builder, sig.args[0], args[0], sig.args[1], args[1])
        views = [ptx.flat_codegen(context, builder, sig.args[k], args[k]) for k in (2, 3)]
        return context.make_tuple(builder, result, views)
    return result(fn, team, dest, src), codegen


@jit
def team_index_of(team, pe, fn):
    for rank in range(team_size(team, fn)):
        if team_pe(team, rank, fn) == pe:
            return rank
    return -1


# Arrays -----------------------------------------------------------------------------

# this PE's arrays, as 1-D C arrays built in place (intrinsics: no helper to compile)
local = plain = plain_or_none = ptx.flat_or_none


@intrinsic
def part(typingctx, arr, lo, hi):
    """``arr[lo:hi]`` of a 1-D C array (``lo <= hi <= arr.size``), built in place: no slice
    for numba to type and lower."""
    if not (isinstance(arr, types.Array) and arr.ndim == 1 and arr.layout == "C"):
        raise TypingError(f"part: takes a 1-D C-contiguous array, got {arr}")

    def codegen(context, builder, sig, args):
        start, stop = (context.cast(builder, args[k], sig.args[k], types.int64) for k in (1, 2))
        data = context.make_array(sig.args[0])(context, builder, value=args[0]).data
        address = builder.ptrtoint(builder.gep(data, [start]), ir.IntType(64))
        return ptx.array_at(context, builder, sig.return_type, address, builder.sub(stop, start))
    return arr(arr, lo, hi), codegen


_MAPPED, _MUST_MAP, _ROUTE = range(3)     # what ``_locate`` does where PE ``pe``'s heap is not mapped


@intrinsic
def _locate(typingctx, address, pe, fn, what, mode):
    """(where ``address``, in this PE's heap, lies in PE ``pe``'s mapped heap, the queue
    pair to PE ``pe``), built in place (no helper to compile). ``pe`` out of range is a
    failure. Where the heap is not mapped (another node) the address is 0 and, by
    ``mode``: ``_MAPPED`` nothing more (the queue 0), ``_MUST_MAP`` a failure (device
    reductions read every member's data in place), ``_ROUTE`` the queue pair, a failure
    where there is none either."""
    if not isinstance(mode, types.IntegerLiteral):
        return None
    kind = mode.literal_value
    result = types.UniTuple(types.uint64, 2)

    def codegen(context, builder, sig, args):
        i64 = ir.IntType(64)
        address = context.cast(builder, args[0], sig.args[0], types.uint64)
        pe = context.cast(builder, args[1], sig.args[1], types.int64)
        fn_text = (sig.args[2], args[2])
        count = _load_state(builder, i64(_N_PES))
        with cgutils.if_unlikely(builder, builder.or_(builder.icmp_signed("<", pe, i64(0)),
                                                      builder.icmp_signed(">=", pe, count))):
            _record_failure(context, builder, _PE_RANGE, [fn_text, ("pe", None), ("", None)], [pe, count, i64(0)])
        base = _load_state(builder, builder.add(i64(_PEER_BASES), pe))
        mapped = builder.icmp_unsigned("!=", base, i64(0))
        peer = builder.select(mapped, builder.add(base, builder.sub(address, _load_state(builder, i64(_HEAP_BASE)))),
                              i64(0))
        queue = i64(0)
        if kind == _ROUTE:
            queue = builder.select(mapped, i64(0), nic.queue_codegen(builder, pe))
        if kind != _MAPPED:
            why = REDUCTIONS_IN_PLACE if kind == _MUST_MAP else UNREACHABLE_WHY
            nowhere = builder.and_(builder.not_(mapped), builder.icmp_unsigned("==", queue, i64(0)))
            with cgutils.if_unlikely(builder, nowhere):
                _record_failure(context, builder, _UNREACHABLE, [fn_text, (sig.args[3], args[3]), (why, None)],
                                [pe, i64(0), i64(0)])
        return context.make_tuple(builder, result, [peer, queue])
    return result(address, pe, fn, what, mode), codegen


@jit
def peer_address(arr, pe, fn):
    """The address of ``arr``'s first element in PE ``pe``'s mapped heap; 0 where this PE
    has no load/store path to it (another node)."""
    return _locate(ptx.address_of(arr), pe, fn, "", _MAPPED)[0]


@jit_array
def peer_view(arr, pe, fn):
    """PE ``pe``'s copy of ``arr`` (same type, shape and strides); every extent 0 where
    ``peer_address`` is 0."""
    return ptx.view_at(_locate(ptx.address_of(arr), pe, fn, "", _MAPPED)[0], arr)


@intrinsic
def barrier_words(typingctx, team, fn):
    """Team slot ``team``'s row of ``n_pes + 1`` barrier words at the start of the heap."""
    result = types.Array(types.int64, 1, "C")

    def codegen(context, builder, sig, args):
        i64 = ir.IntType(64)
        count = builder.add(_load_state(builder, i64(_N_PES)), i64(1))
        row = builder.mul(context.cast(builder, args[0], sig.args[0], types.int64), builder.mul(count, i64(8)))
        return ptx.array_at(context, builder, result, builder.add(_load_state(builder, i64(_HEAP_BASE)), row), count)
    return result(team, fn), codegen


@intrinsic
def copy_strided(typingctx, dst, dst_stride, src, src_stride, nelems, rank, size):
    """Threads ``rank`` of ``size`` share the copy; contiguous, equally aligned copies move
    16 bytes per load and store (``_cuda_ir``)."""
    return copy_strided_type(dst, dst_stride, src, src_stride, nelems, rank, size), copy_strided_codegen


@intrinsic
def _fold(typingctx, op, dst, dst_lo, src, src_lo, count, rank, size):
    """dst[dst_lo + i] = dst[dst_lo + i] ``op`` src[src_lo + i] (``FOLD_COPY``: a copy),
    threads ``rank`` of ``size`` sharing it (``_cuda_ir``)."""
    signature = fold_type(op, dst, dst_lo, src, src_lo, count, rank, size)
    return None if signature is None else (signature, fold_codegen)


@jit
def reduce_from_peers(fn, dst, dst_lo, src, src_lo, count, team, op, rank, size):
    """dst[dst_lo + i] = op over every member's src[src_lo + i]: this PE's own value first,
    then the others in team-rank order (so ``dst`` may be ``src``)."""
    me = team_rank(team, fn)
    _fold(FOLD_COPY, dst, dst_lo, local(src, fn, "src"), src_lo, count, rank, size)
    address = ptx.address_of(src)
    for r in range(team_size(team, fn)):
        if r != me:   # each member's copy found once, then its elements combined in
            theirs = ptx.flat_view(_locate(address, team_pe(team, r, fn), fn, name("src"), _MUST_MAP)[0], src)
            _fold(op, dst, dst_lo, theirs, src_lo, count, rank, size)


# Other PEs: loads and stores into their mapped heaps, or the NIC (``_cuda_nic``) --------

@jit
def transfer(fn, to_peer, pe, dst, dst_stride, src, src_stride, nelems, rank, size, nbi):
    """The group's copy to (``to_peer``) or from PE ``pe``: threads share it on the
    load/store path; through the NIC the group's first thread posts it (one request)."""
    if to_peer:
        peer, queue = _locate(ptx.address_of(dst), pe, fn, name("dest"), _ROUTE)
        if peer != 0:
            copy_strided(ptx.flat_view(peer, dst), dst_stride, src, src_stride, nelems, rank, size)
        elif rank == 0:
            nic.copy(fn, pe, queue, True, ptx.address_of(dst), dst_stride, ptx.address_of(src), src_stride, nelems,
                     dst.itemsize, nbi)
    else:
        peer, queue = _locate(ptx.address_of(src), pe, fn, name("src"), _ROUTE)
        if peer != 0:
            copy_strided(dst, dst_stride, ptx.flat_view(peer, src), src_stride, nelems, rank, size)
        elif rank == 0:
            nic.copy(fn, pe, queue, False, ptx.address_of(src), src_stride, ptx.address_of(dst), dst_stride, nelems,
                     dst.itemsize, nbi)


@jit
def remote_store(fn, arr, pe, value, what):
    peer, queue = _locate(ptx.address_of(arr), pe, fn, name(what), _ROUTE)
    if peer != 0:
        ptx.st_relaxed(peer, arr, value)
    else:
        nic.store(fn, name(what), pe, queue, arr, value)


@jit
def remote_load(fn, arr, pe, what):
    peer, queue = _locate(ptx.address_of(arr), pe, fn, name(what), _ROUTE)
    if peer != 0:
        return ptx.ld_relaxed(peer, arr)
    return nic.load(fn, name(what), pe, queue, arr)


@jit
def remote_rmw(fn, arr, pe, op, value, what, fetch):
    peer, queue = _locate(ptx.address_of(arr), pe, fn, name(what), _ROUTE)
    if peer != 0:
        return ptx.atomic(op, peer, arr, value)   # op: an RMW_* literal
    return nic.rmw(fn, pe, queue, arr, op, value, fetch)


@jit
def remote_compare_swap(fn, arr, pe, cond, value, what):
    peer, queue = _locate(ptx.address_of(arr), pe, fn, name(what), _ROUTE)
    if peer != 0:
        return ptx.atomic_cas(peer, arr, cond, value)
    return nic.compare_swap(fn, pe, queue, arr, cond, value)


@jit
def remote_atomic_load(fn, arr, pe, what):
    peer, queue = _locate(ptx.address_of(arr), pe, fn, name(what), _ROUTE)
    if peer != 0:
        return ptx.ld_seq_cst(peer, arr)
    return nic.atomic_load(fn, pe, queue, arr)


# Memory ordering and atomics on this PE's memory ------------------------------------

def _acquire_at(context, builder, array_type, array, index):
    """Element ``index`` (an int64 value) of ``array``, loaded with acquire ordering."""
    data = context.make_array(array_type)(context, builder, value=array).data
    address = builder.ptrtoint(builder.gep(data, [index]), ir.IntType(64))
    return ptx.load_codegen(context, builder, "acquire", array_type.dtype, address)


def _refuse_unordered(arr, what: str):
    """What a wait or test polls must be a type the GPU loads with acquire (the simulator's rule)."""
    names = [str(d) for d in ORDERED_DTYPES]
    if str(arr.dtype) not in names:
        raise TypingError(f"pgas.device: {what} must have one of the dtypes {', '.join(names)}, got {arr.dtype}")


@intrinsic
def load_acquire(typingctx, arr, fn, what):
    """Element 0 of ``arr``, loaded with acquire ordering."""
    _refuse_unordered(arr, _literal(what))

    def codegen(context, builder, sig, args):
        return _acquire_at(context, builder, sig.args[0], args[0], ir.IntType(64)(0))
    return arr.dtype(arr, fn, what), codegen


@intrinsic
def _element_acquire(typingctx, arr, index):
    """``arr[index]``, loaded with acquire ordering (no slice to type and build)."""
    _refuse_unordered(arr, "an ivar")
    def codegen(context, builder, sig, args):
        return _acquire_at(context, builder, sig.args[0], args[0],
                           context.cast(builder, args[1], sig.args[1], types.int64))
    return arr.dtype(arr, index), codegen


@intrinsic
def fence(typingctx, fn):
    def codegen(context, builder, sig, args):
        ptx.inline_asm(builder, "fence.sc.sys;", "~{memory}", ir.VoidType(), [])
        return context.get_dummy_value()
    return types.void(fn), codegen


quiet = nic.quiet     # the NIC's completions, then a full fence

@jit
def atomic_rmw(arr, op, value, fn, what):
    return ptx.atomic(op, ptx.address_of(arr), arr, value)


@jit
def atomic_compare_swap(arr, cond, value, fn, what):
    return ptx.atomic_cas(ptx.address_of(arr), arr, cond, value)


# Groups and waits -------------------------------------------------------------------

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
    """``value <cmp> target`` in ``value``'s own type (``_cuda_ir.compare_codegen``)."""
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


# Checks: values are checked here (a failure is recorded, then the kernel traps); types
# when the kernel compiles ----------------------------------------------------------------

@intrinsic
def check_not_empty(typingctx, fn, what, arr):
    return types.void(fn, what, arr), _CHECKS["not_empty"]


@intrinsic
def check_copy(typingctx, fn, dst, dst_name, dst_stride, src, src_name, src_stride, nelems):
    _same_dtype_or_refuse(_literal(dst_name), dst, _literal(src_name), src)
    return types.void(fn, dst, dst_name, dst_stride, src, src_name, src_stride, nelems), _CHECKS["copy"]


cast_like = ptx.cast_like


@intrinsic
def check_cmp(typingctx, fn, cmp):
    return types.void(fn, cmp), _CHECKS["cmp"]


@intrinsic
def check_signal(typingctx, fn, signal):
    _refuse_signal_dtype(signal)
    return types.void(fn, signal), _CHECKS["signal"]


@intrinsic
def check_sig_op(typingctx, fn, sig_op):
    return types.void(fn, sig_op), _CHECKS["sig_op"]


@intrinsic
def check_size(typingctx, fn, what, have, need, why):
    return types.void(fn, what, have, need, why), _CHECKS["size"]


@intrinsic
def check_root(typingctx, fn, root, team_size):
    return types.void(fn, root, team_size), _CHECKS["root"]


def _noop(context, builder, sig, args):
    return context.get_dummy_value()


def _literal(text) -> str:
    return text.literal_value if isinstance(text, types.StringLiteral) else "the arrays"


def _same_dtype_or_refuse(first: str, a, second: str, b):
    if a.dtype != b.dtype:
        raise TypingError(f"pgas.device: {first} and {second} must have the same dtype, got {first} {a.dtype} "
                          f"and {second} {b.dtype}")


@intrinsic
def _same_dtype(typingctx, name_a, a, name_b, b):
    _same_dtype_or_refuse(_literal(name_a), a, _literal(name_b), b)
    return types.void(name_a, a, name_b, b), _noop


@intrinsic
def check_dtype_set(typingctx, fn, what, arr, allowed):
    """Refuse ``arr`` unless its dtype is in DTYPE_SETS[allowed]: an intrinsic, so that the
    caller's constant code arrives as a literal (typed only then: None makes numba retype
    the call with the literal)."""
    if not isinstance(allowed, types.IntegerLiteral):
        return None
    names = DTYPE_SETS[allowed.literal_value]
    if str(arr.dtype) not in names:
        raise TypingError(f"pgas.device: {_literal(what)} must have one of the dtypes {', '.join(names)}, "
                          f"got {arr.dtype}")
    return types.void(fn, what, arr, allowed), _noop


def _refuse_signal_dtype(signal):
    if str(signal.dtype) not in ("uint64", "int64"):
        raise TypingError(f"pgas.device: signal must be a uint64 (or int64) symmetric array, got {signal.dtype}")


@intrinsic
def reduce_op_code(typingctx, op, label):
    """The code of the reduction named by constant string ``op``, as a literal (so that
    ``check_reduction`` checks it against the dtype when the kernel compiles)."""
    fn = _literal(label)
    if not isinstance(op, types.StringLiteral) or op.literal_value not in REDUCE_OPS:
        shown = repr(op.literal_value) if isinstance(op, types.StringLiteral) else f"a {op} that is not a constant"
        raise TypingError(f"{fn}: op must be one of {', '.join(REDUCE_OPS)} (a constant string), got {shown}")
    code = reduce_code(op.literal_value)

    def codegen(context, builder, sig, args):
        return context.get_constant(types.int64, code)
    return types.IntegerLiteral(code)(op, label), codegen


@intrinsic
def check_reduction(typingctx, fn, op, arr):
    """Refuse a reduction of ``arr``'s dtype that ``op`` does not take. Typed only with a
    literal op (None otherwise makes numba retype the callers with the literal code)."""
    if not isinstance(op, types.IntegerLiteral):
        return None
    try:
        reduction_ufunc("pgas.device", REDUCE_OPS[op.literal_value], np.dtype(str(arr.dtype)))
    except PgasError as exc:
        raise TypingError(str(exc)) from None
    return types.void(fn, op, arr), _noop


@intrinsic
def check_dtypes_match(typingctx, fn, dest, src):
    _same_dtype_or_refuse("dest", dest, "src", src)
    return types.void(fn, dest, src), _noop
