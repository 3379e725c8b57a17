"""What the device API does to memory on the GPU: this PE's state and teams, arrays, other
PEs' memory (loads and stores into their mapped heaps, or the NIC: ``_nic_device``), and
ordering and atomics on this PE's memory."""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.core.errors import TypingError
from numba.cuda import cgutils
from numba.cuda.extending import intrinsic

from ..core._codes import REDUCE_OPS
from ..core._constants import MAX_TEAMS
from ..core.native._cpu_atomics import ORDERED_DTYPES
from ..core._device_errors import KIND, REDUCTIONS_IN_PLACE, UNREACHABLE_WHY
from ..core._reductions import identity, is_float
from . import _ptx as ptx
from .nic import _nic_device as nic
from ._checks import literal, numpy_dtype, refuse, same_dtype_or_refuse
from ._ir import FOLD_COPY, combine, copy_strided_codegen, copy_strided_type, fold_codegen, fold_type
from ._jit import jit, jit_array
from ._state_reads import (STATE_ADDRESS, STATE_WORDS, _HEAP_BASE, _MY_PE, _N_PES, _PEER_BASES,
                           load_state as _load_state, record_failure as _record_failure)

__all__ = ["name", "my_pe", "n_pes", "team_rank", "team_size", "team_pe", "team_index_of", "check_team", "local",
           "plain", "plain_or_none", "part", "team_arrays", "barrier_words", "copy_strided", "reduce_from_peers",
           "scan_to_peers", "transfer", "remote_store", "remote_load", "remote_rmw", "remote_compare_swap",
           "remote_atomic_load",
           "load_acquire", "fence", "quiet", "atomic_rmw", "atomic_compare_swap", "peer_address", "peer_view",
           "multicast_view",
           "cast_like", "STATE_ADDRESS", "STATE_WORDS"]

# error kinds a device check records (texts in pgas/core/_device_errors.py)
_PE_RANGE, _UNREACHABLE, _TEAM = (KIND[k] for k in ("PE_RANGE", "UNREACHABLE", "TEAM"))

name = ptx.name
cast_like = ptx.cast_like


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
    same_dtype_or_refuse("dest", dest, "src", src)
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


_NO_MULTICAST = KIND["NO_MULTICAST"]


@jit_array
def multicast_view(arr, team, fn):
    """Refused (NO_MULTICAST, and the kernel traps): pgas sets up no multicast objects."""
    refuse(fn, _NO_MULTICAST)
    return arr


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
    16 bytes per load and store (``_ir``)."""
    return copy_strided_type(dst, dst_stride, src, src_stride, nelems, rank, size), copy_strided_codegen


@intrinsic
def _fold(typingctx, op, dst, dst_lo, src, src_lo, count, rank, size):
    """dst[dst_lo + i] = dst[dst_lo + i] ``op`` src[src_lo + i] (``FOLD_COPY``: a copy),
    threads ``rank`` of ``size`` sharing it (``_ir``)."""
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


@intrinsic
def _combine(typingctx, op, a, b):
    """a ``op`` b in their type, as numpy computes it (``_ir.combine``); ``op`` a literal."""
    if not isinstance(op, types.IntegerLiteral) or a != b:
        return None

    def codegen(context, builder, sig, args):
        return combine(builder, sig.args[0].literal_value, sig.args[1], args[1], args[2])
    return a(op, a, b), codegen


@intrinsic
def _identity(typingctx, op, like):
    """``op``'s identity (``pgas/core/_reductions.py``: ``identity``) in the element type of
    array ``like``; ``op`` a literal."""
    if not isinstance(op, types.IntegerLiteral) or not isinstance(like, types.Array):
        return None
    dtype = like.dtype

    def codegen(context, builder, sig, args):
        value = identity(REDUCE_OPS[sig.args[0].literal_value], numpy_dtype(dtype))
        data_type = context.get_data_type(dtype)
        if isinstance(data_type, ir.LiteralStructType):   # a complex number: {real, imag}
            part = data_type.elements[0]
            data = ir.Constant(data_type, [ir.Constant(part, float(value.real)), ir.Constant(part, float(value.imag))])
        elif not isinstance(data_type, ir.IntType):
            data = ir.Constant(data_type, float(value))
        elif is_float(numpy_dtype(dtype)):          # float16 and bfloat16 held as their bits
            data = ir.Constant(data_type, int(value.view(np.uint16)))
        else:
            data = ir.Constant(data_type, int(value))
        return context.get_data_as_value(builder, dtype, data)
    return dtype(op, like), codegen


@jit
def scan_to_peers(fn, dst, src, lo, count, team, op, exclusive, rank, size):
    """Elements [lo, lo + count) of every member's ``dst`` = the scan of those elements of
    the members' ``src`` with ``op`` in team-rank order (``exclusive``: of the members
    before it, rank 0 getting op's identity); threads ``rank`` of ``size`` share the
    elements. Each element is carried in a register from member to member, read from a
    member's ``src`` before that member's ``dst`` is written: ``dst`` may be ``src``."""
    dst_address, src_address = ptx.address_of(dst), ptx.address_of(src)
    n = team_size(team, fn)
    for i in range(lo + rank, lo + count, size):
        acc = _identity(op, dst)
        for q in range(n):
            pe = team_pe(team, q, fn)
            value = ptx.flat_view(_locate(src_address, pe, fn, name("src"), _MUST_MAP)[0], src)[i]
            theirs = ptx.flat_view(_locate(dst_address, pe, fn, name("dest"), _MUST_MAP)[0], dst)
            if exclusive:
                theirs[i] = acc
            if q == 0:
                acc = value
            else:
                acc = _combine(op, acc, value)
            if not exclusive:
                theirs[i] = acc


# Other PEs: loads and stores into their mapped heaps, or the NIC (``_nic_device``) --------

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
    _refuse_unordered(arr, literal(what))

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
