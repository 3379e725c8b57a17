"""The GPU-initiated NIC path of the cuda backend: device threads post their own WQEs.

For each PE on another node the host (``host/_gpu_nic``) keeps a queue pair: what the
NIC reads or writes (send queue, doorbell record, completion queues, result cells, the
rung word) in pinned host memory mapped into the GPU, the descriptor with its counters
and the ``waited`` flags in device memory. The emulated NIC, a CPU thread, polls the
queues' rung words (a GPU cannot wake a CPU thread) and reaches the GPU heap with the
copy engines. Kernels run the code of ``pgas/_ibgda_ir`` (the simulator's: the same WQE
bytes) built with the GPU's memory model (``GpuMemory``): system-scope PTX, since the
CPU is the other side of every word.

The state block (``_cuda_state``) holds where the NIC rows start (0: no PE is reached
through the NIC) and the heap's local key; row ``pe`` holds the words ``ROW``: the queue
descriptor's address (0: no queue to that PE), the PE's rkey and registered heap base,
and the local key of the queue's result cells.

What each operation posts (one queue pair per PE: everything to one PE completes in
order, so ``fence`` needs nothing more):
- ``put``/``get``: RDMA writes/reads of up to 1 GiB for a contiguous copy, one per element
  for a strided one; the local side must lie in the symmetric heap (the NIC reaches only
  registered memory). The blocking forms wait for the last WQE's completion.
- ``p``: an inline write (up to 8 bytes); ``g``: an RDMA read into the WQE's result cell.
- atomics: the mlx5 atomics (``_ibgda_ir.atomic_segments``); fetched values land in the
  result cell, big-endian. A float add is a compare-swap loop, as on the simulator.
- ``quiet``: waits until every queue's completion floor passes its last posted WQE.
A refused WQE (an error CQE) is recorded as the device error ``NIC_REFUSED`` naming the
operation, the PE and the address; waits past PGAS_TIMEOUT as ``NIC_TIMEOUT``.

Everything here is LLVM IR: the operations are functions of one library linked into the
kernels that use them (``noinline``: one copy each), and the intrinsics below only convert
a dtype's values to bits at the call. numba compiles nothing per dtype or per kernel for
this path, which keeps kernels that may reach another node as quick to compile as before.
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.cuda import cgutils
from numba.cuda.extending import intrinsic

from ..core._codes import RMW_ADD, RMW_AND, RMW_OR, RMW_XCHG, RMW_XOR
from ..core._device_errors import NIC_REFUSED, NIC_TIMEOUT, NIC_WIDE, NOT_REGISTERED
from ..core._llvm import bswap
from ..nic import _mlx5 as mlx5
from ..transport._ibgda_ir import (AMO_ADD, AMO_AND, AMO_CAS, AMO_FETCH, AMO_OR, AMO_SWAP, AMO_XOR, KIND_DATA,
                                   KIND_INLINE, W, atomic_segments, define_post, define_progress, define_refused)
from . import _ptx as ptx
from ._state_reads import (_HEAP_BASE, _HEAP_LKEY, _HEAP_SIZE, _MAILBOX, _MY_PE, _NIC_ROWS, _N_PES, load_state,
                           record_failure, timed_out_codegen)

__all__ = ["ROW", "GpuMemory", "queue_codegen", "copy", "store", "load", "rmw", "compare_swap", "atomic_load", "quiet"]

ROW = ("descriptor", "rkey", "heap_base", "cells_lkey")     # the words of a PE's NIC row
_DESCRIPTOR, _RKEY, _REMOTE_BASE, _CELLS_LKEY = range(len(ROW))
_I1, _I8, _I16, _I32, _I64 = ir.IntType(1), ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)
_TEXT = _I8.as_pointer()
_REGISTER = {8: "h", 32: "r", 64: "l"}
_WAITING_FOR_ROOM, _WAITING_FOR_COMPLETION = 0, 1
_MAX_MESSAGE = 1 << 30      # bytes per RDMA write or read
_RMW_REQUEST = {RMW_ADD: AMO_ADD, RMW_AND: AMO_AND, RMW_OR: AMO_OR, RMW_XOR: AMO_XOR, RMW_XCHG: AMO_SWAP}


class GpuMemory:
    """The memory model ``_ibgda_ir`` is built with on a GPU: system-scope PTX (NVVM turns
    LLVM's atomic orderings into relaxed GPU-scope atomics, which the CPU-side NIC would
    not be ordered with) and ``nanosleep`` as the pause."""

    @staticmethod
    def load(builder, pointer, order: str):
        width = pointer.type.pointee.width
        semantics = "acquire" if order == "acquire" else "relaxed"
        value = ptx.inline_asm(builder, f"ld.{semantics}.sys.b{width} $0, [$1];", f"={_REGISTER[width]},l,~{{memory}}",
                               _I16 if width == 8 else ir.IntType(width), [builder.ptrtoint(pointer, _I64)])
        return builder.trunc(value, _I8) if width == 8 else value

    @staticmethod
    def store(builder, value, pointer, order: str):
        width = value.type.width
        semantics = "release" if order == "release" else "relaxed"
        bits = builder.zext(value, _I16) if width == 8 else value
        ptx.inline_asm(builder, f"st.{semantics}.sys.b{width} [$0], $1;", f"l,{_REGISTER[width]},~{{memory}}",
                       ir.VoidType(), [builder.ptrtoint(pointer, _I64), bits])

    @staticmethod
    def cas(builder, pointer, expected, new):
        old = ptx.inline_asm(builder, "atom.acq_rel.sys.cas.b64 $0, [$1], $2, $3;", "=l,l,l,l,~{memory}", _I64,
                             [builder.ptrtoint(pointer, _I64), expected, new])
        return builder.icmp_unsigned("==", old, expected)

    @staticmethod
    def rmw(builder, op: str, pointer, value):
        text = {"xchg": "fence.sc.sys;\n\tatom.acquire.sys.exch.b64", "add": "atom.relaxed.sys.add.u64",
                "umax": "atom.acq_rel.sys.max.u64"}[op]
        return ptx.inline_asm(builder, f"{text} $0, [$1], $2;", "=l,l,l,~{memory}", _I64,
                              [builder.ptrtoint(pointer, _I64), value])

    @staticmethod
    def pause(builder):
        ptx.inline_asm(builder, "nanosleep.u32 32;", "~{memory}", ir.VoidType(), [])


class _Word:
    """An i64 IR value that ``atomic_segments`` computes with (``&``, ``~``); ``words(builder)``
    makes them."""

    def __init__(self, builder, value):
        self.builder = builder
        self.value = value.value if isinstance(value, _Word) else _I64(value) if isinstance(value, int) else value

    def __and__(self, other):
        return _Word(self.builder, self.builder.and_(self.value, _Word(self.builder, other).value))

    def __invert__(self):
        return _Word(self.builder, self.builder.not_(self.value))

    @staticmethod
    def words(builder):
        return lambda value: _Word(builder, value)


# The library: IR functions defined once per code generator, linked into the kernels
# that call them ---------------------------------------------------------------------

def _c(value: int):
    return _I64(value)


def _word_at(b, address):
    """The uint64 at integer ``address`` (``ld.acquire.sys``: words the NIC writes)."""
    return GpuMemory.load(b, b.inttoptr(address, _I64.as_pointer()), "acquire")


def _descriptor_word(b, q, name: str):
    return _word_at(b, b.add(q, _c(8 * W[name])))


def _big_endian(b, address, size: int):
    """The ``size``-byte big-endian number at ``address``, as i64."""
    word = _word_at(b, address)
    return b.zext(bswap(b, b.trunc(word, _I32)), _I64) if size == 4 else bswap(b, word)


def _row(b, pe, column: int):
    rows = load_state(b, _c(_NIC_ROWS))
    return load_state(b, b.add(rows, b.add(b.mul(pe, _c(len(ROW))), _c(column))))


def _cell(b, q, start):
    """(the result cell, the ``waited`` flag) of the WQE that starts at ``start``."""
    slot = b.urem(start, _descriptor_word(b, q, "depth"))
    return (b.add(_descriptor_word(b, q, "cells"), b.shl(slot, _c(3))),
            b.add(_descriptor_word(b, q, "waited"), slot))


def _release_flag(b, address):
    """Clear a ``waited`` byte (release: the result was read before)."""
    GpuMemory.store(b, _I8(0), b.inttoptr(address, _I8.as_pointer()), "release")


class _Library:
    """Builds the NIC path's functions into one module (``build``)."""

    def __init__(self, context, module):
        self.context, self.module = context, module
        self.record = None

    def function(self, name: str, ret, arguments: dict):
        fn = ir.Function(self.module, ir.FunctionType(ret, list(arguments.values())), name)
        fn.attributes.add("noinline")
        for arg, arg_name in zip(fn.args, arguments):
            arg.name = arg_name
        return fn, ir.IRBuilder(fn.append_basic_block("entry"))

    def fail(self, b, kind: int, fn_text, what_text, a, b_, c):
        """Write the error record and trap (``pgas_record_error``)."""
        empty = (ir.Constant(_TEXT, None), _c(0))
        what = empty if what_text is None else what_text
        b.call(self.record, [load_state(b, _c(_MAILBOX)), load_state(b, _c(_MY_PE)), _c(kind), *fn_text, *what,
                             *empty, a, b_, c])

    def build(self):
        module = self.module
        post = define_post(module, GpuMemory, "pgas_ibgda_post", "private")
        progress = define_progress(module, GpuMemory, "pgas_ibgda_progress", "private")
        refused = define_refused(module, GpuMemory, "pgas_ibgda_refused", "private")
        record_type = ir.FunctionType(ir.VoidType(), [_I64, _I64, _I64, _TEXT, _I64, _TEXT, _I64, _TEXT, _I64,
                                                      _I64, _I64, _I64])
        self.record = cgutils.get_or_insert_function(module, record_type, "pgas_record_error")
        check_refused = self._check_refused(refused)
        complete = self._complete(progress, check_refused)
        submit = self._submit(post, progress, check_refused)
        self._copy(submit, complete)
        self._result()
        self._quiet(complete)
        return record_type

    def _check_refused(self, refused):
        """``(q, pe, fn, fn_length)``: if the queue holds a refused WQE, record its operation,
        PE and address (and trap)."""
        fn, b = self.function("pgas_nic_check_refused", ir.VoidType(),
                              {"q": _I64, "pe": _I64, "fn": _TEXT, "fn_length": _I64})
        q, pe, *fn_text = fn.args
        found = b.call(refused, [b.inttoptr(q, _I64.as_pointer())])
        with b.if_then(b.icmp_signed(">=", found, _c(0)), likely=False):
            start = b.ashr(found, _c(8))
            depth, sq = _descriptor_word(b, q, "depth"), _descriptor_word(b, q, "sq")

            def field(offset, size):
                block = b.urem(b.add(start, _c(offset // 64)), depth)
                return _big_endian(b, b.add(sq, b.add(b.shl(block, _c(6)), _c(offset % 64))), size)
            control = field(0, 4)                                   # opmod << 24 | index << 8 | opcode
            count = b.and_(field(32, 4), _c(0x7FFFFFFF))
            summary = b.or_(b.and_(control, _c(0xFF)), b.shl(b.lshr(control, _c(24)), _c(8)))
            summary = b.or_(summary, b.or_(b.shl(count, _c(16)), b.shl(b.and_(found, _c(0xFF)), _c(56))))
            self.fail(b, NIC_REFUSED, fn_text, None, pe, field(16, 8), summary)
        b.ret_void()
        return fn

    def _complete(self, progress, check_refused):
        """``(q, pe, start, fn, fn_length)``: wait until the WQE at ``start`` is complete."""
        fn, b = self.function("pgas_nic_complete", ir.VoidType(),
                              {"q": _I64, "pe": _I64, "start": _I64, "fn": _TEXT, "fn_length": _I64})
        q, pe, start, *fn_text = fn.args
        started = ptx.read_globaltimer(b)
        loop, wait, done = (fn.append_basic_block(n) for n in ("loop", "wait", "done"))
        b.branch(loop)
        b.position_at_end(loop)
        floor = b.call(progress, [b.inttoptr(q, _I64.as_pointer())])
        b.cbranch(b.icmp_signed(">", floor, start), done, wait)
        b.position_at_end(wait)
        b.call(check_refused, [q, pe, *fn_text])
        with b.if_then(timed_out_codegen(b, started), likely=False):
            self.fail(b, NIC_TIMEOUT, fn_text, None, pe, _c(_WAITING_FOR_COMPLETION), _c(0))
        b.branch(loop)
        b.position_at_end(done)
        b.ret_void()
        return fn

    def _submit(self, post, progress, check_refused):
        """``(q, pe, kind, opcode_opmod, address, lkey, laddr, nbytes, a0..a3, waited, fn,
        fn_length)``: post one WQE to PE ``pe`` about ``address`` (this PE's copy); returns its
        start block. A full queue is waited out on the completion queue, never overwritten;
        nothing is rung from a GPU (the NIC polls the rung word)."""
        arguments = {"q": _I64, "pe": _I64, "kind": _I32, "opcode_opmod": _I32, "address": _I64, "lkey": _I32,
                     "laddr": _I64, "nbytes": _I32, "a0": _I64, "a1": _I64, "a2": _I64, "a3": _I64,
                     "waited": _I32, "fn": _TEXT, "fn_length": _I64}
        fn, b = self.function("pgas_nic_submit", _I64, arguments)
        q, pe, kind, opcode_opmod, address, lkey, laddr, nbytes, a0, a1, a2, a3, waited, *fn_text = fn.args
        raddr = b.add(_row(b, pe, _REMOTE_BASE), b.sub(address, load_state(b, _c(_HEAP_BASE))))
        rkey = b.trunc(_row(b, pe, _RKEY), _I32)
        descriptor = b.inttoptr(q, _I64.as_pointer())
        started = ptx.read_globaltimer(b)
        loop, full, done = (fn.append_basic_block(n) for n in ("loop", "full", "done"))
        b.branch(loop)
        b.position_at_end(loop)
        posted = b.call(post, [descriptor, kind, opcode_opmod, raddr, rkey, lkey, laddr, nbytes, a0, a1, a2, a3,
                               waited])
        b.cbranch(b.icmp_signed(">=", posted, _c(0)), done, full)
        b.position_at_end(full)
        b.call(progress, [descriptor])
        b.call(check_refused, [q, pe, *fn_text])
        with b.if_then(timed_out_codegen(b, started), likely=False):
            self.fail(b, NIC_TIMEOUT, fn_text, None, pe, _c(_WAITING_FOR_ROOM), _c(0))
        b.branch(loop)
        b.position_at_end(done)
        b.ret(b.ashr(posted, _c(1)))
        return fn

    def _copy(self, submit, complete):
        """``(q, pe, to_peer, sym, sym_stride, other, other_stride, nelems, itemsize, nbi, fn,
        fn_length)``: ``to_peer``: the elements at ``other + i*other_stride*itemsize`` (this
        PE's heap) into PE ``pe``'s ``sym + i*sym_stride*itemsize``, else the reverse, for
        i < nelems: RDMA writes/reads of up to 1 GiB when both are contiguous, else one per
        element. Blocking unless ``nbi``."""
        arguments = {"q": _I64, "pe": _I64, "to_peer": _I64, "sym": _I64, "sym_stride": _I64, "other": _I64,
                     "other_stride": _I64, "nelems": _I64, "itemsize": _I64, "nbi": _I64, "fn": _TEXT,
                     "fn_length": _I64}
        fn, b = self.function("pgas_nic_copy", ir.VoidType(), arguments)
        q, pe, to_peer, sym, sym_stride, other, other_stride, nelems, itemsize, nbi, *fn_text = fn.args
        writes = b.icmp_signed("!=", to_peer, _c(0))
        nothing, work = fn.append_basic_block("nothing"), fn.append_basic_block("work")
        b.cbranch(b.icmp_signed("<=", nelems, _c(0)), nothing, work)
        b.position_at_end(nothing)
        b.ret_void()
        b.position_at_end(work)
        span = b.mul(b.add(b.mul(b.sub(nelems, _c(1)), other_stride), _c(1)), itemsize)
        base = load_state(b, _c(_HEAP_BASE))
        outside = b.or_(b.icmp_unsigned("<", other, base),
                        b.icmp_unsigned(">", b.add(other, span), b.add(base, load_state(b, _c(_HEAP_SIZE)))))
        with b.if_then(outside, likely=False):
            texts = [(self.context.insert_string_const_addrspace(b, t), _c(len(t))) for t in ("src", "dest")]
            what = [b.select(writes, texts[0][i], texts[1][i]) for i in range(2)]
            self.fail(b, NOT_REGISTERED, fn_text, what, pe, other, span)
        opcode = b.select(writes, _I32(mlx5.OP_RDMA_WRITE), _I32(mlx5.OP_RDMA_READ))
        lkey = b.trunc(load_state(b, _c(_HEAP_LKEY)), _I32)
        zero = _c(0)

        def post(remote, local, nbytes):
            return b.call(submit, [q, pe, _I32(KIND_DATA), opcode, remote, lkey, local, b.trunc(nbytes, _I32),
                                   zero, zero, zero, zero, _I32(0), *fn_text])
        contiguous = b.and_(b.icmp_signed("==", sym_stride, _c(1)), b.icmp_signed("==", other_stride, _c(1)))
        with b.if_else(contiguous) as (whole, strided):
            with whole:          # messages of at most 1 GiB (a byte count's top bit marks inline data)
                nbytes = b.mul(nelems, itemsize)
                pieces = b.udiv(b.add(nbytes, _c(_MAX_MESSAGE - 1)), _c(_MAX_MESSAGE))
                with cgutils.for_range(b, pieces) as loop:
                    offset = b.mul(loop.index, _c(_MAX_MESSAGE))
                    left = b.sub(nbytes, offset)
                    post(b.add(sym, offset), b.add(other, offset),
                         b.select(b.icmp_unsigned("<", left, _c(_MAX_MESSAGE)), left, _c(_MAX_MESSAGE)))
            with strided:
                with cgutils.for_range(b, nelems) as loop:
                    i = loop.index
                    post(b.add(sym, b.mul(b.mul(i, sym_stride), itemsize)),
                         b.add(other, b.mul(b.mul(i, other_stride), itemsize)), itemsize)
        start = b.sub(_descriptor_word(b, q, "last"), _c(1))     # the newest WQE: at or after this call's last
        with b.if_then(b.icmp_signed("==", nbi, _c(0))):
            b.call(complete, [q, pe, start, *fn_text])      # one queue pair completes in order
        b.ret_void()

    def _result(self):
        """``(q, start, size, big_endian)``: the bits in the result cell of the WQE at
        ``start`` (fetched atomic values are big-endian, as ConnectX writes them; read
        data as it was read); frees its blocks for reuse."""
        fn, b = self.function("pgas_nic_result", _I64, {"q": _I64, "start": _I64, "size": _I64,
                                                         "big_endian": _I64})
        q, start, size, big_endian = fn.args
        cell, flag = _cell(b, q, start)
        four = b.icmp_signed("==", size, _c(4))
        swapped = b.select(four, _big_endian(b, cell, 4), _big_endian(b, cell, 8))
        value = b.select(b.icmp_signed("!=", big_endian, _c(0)), swapped, _word_at(b, cell))
        _release_flag(b, flag)
        b.ret(value)

    def _quiet(self, complete):
        """``(fn, fn_length)``: wait until the NIC has completed every WQE posted so far."""
        fn, b = self.function("pgas_nic_quiet", ir.VoidType(), {"fn": _TEXT, "fn_length": _I64})
        with b.if_then(b.icmp_signed("!=", load_state(b, _c(_NIC_ROWS)), _c(0))):
            with cgutils.for_range(b, load_state(b, _c(_N_PES))) as loop:
                pe = loop.index
                q = _row(b, pe, _DESCRIPTOR)
                with b.if_then(b.icmp_signed("!=", q, _c(0))):
                    last = _descriptor_word(b, q, "last")       # the newest published WQE's start + 1
                    with b.if_then(b.icmp_signed("!=", last, _c(0))):
                        b.call(complete, [q, pe, b.sub(last, _c(1)), *fn.args])
        b.ret_void()


_libraries: dict = {}      # code generator -> (the library, its IR module)


def _library(context):
    codegen = context.codegen()
    if codegen not in _libraries:
        module = context.create_module("pgas_nic")
        record_type = _Library(context, module).build()
        library = codegen.create_library("pgas_nic")
        library.add_ir_module(module)
        library.add_linking_library(ptx.record_library(context, record_type))
        library.finalize()
        _libraries[codegen] = library, module
    return _libraries[codegen]


def _call(context, builder, name: str, arguments):
    """Call library function ``name`` (declared here with the type it was defined with)."""
    library, module = _library(context)
    context.active_code_library.add_linking_library(library)
    fnty = module.globals[name].ftype
    fn = cgutils.get_or_insert_function(builder.module, fnty, name)
    return builder.call(fn, [builder.bitcast(a, t) if isinstance(t, ir.PointerType) else a
                             for a, t in zip(arguments, fnty.args)])


# Intrinsics: what the primitive layer calls ----------------------------------------

def _int64(context, builder, sig, args, k):
    return context.cast(builder, args[k], sig.args[k], types.int64)


def _fn_text(context, builder, sig, args, k):
    return ptx.string_argument(context, builder, sig.args[k], args[k])


def _bits(context, builder, dtype, value):
    """A value of ``dtype`` (up to 8 bytes) as the i64 its bits travel in."""
    raw = ptx.to_bits(context, builder, dtype, value)
    return builder.zext(raw, _I64) if raw.type.width < 64 else raw


def _from_bits(context, builder, dtype, bits):
    """The value of ``dtype`` whose bits are the low bits of i64 ``bits``."""
    width = max(ptx.width_of(context, dtype), 16)      # 8-bit values travel in 16-bit registers
    return ptx.from_bits(context, builder, dtype, builder.trunc(bits, ir.IntType(width)) if width < 64 else bits)


def _itemsize(context, dtype) -> int:
    return ptx.width_of(context, dtype) // 8


def _refuse_wide(context, builder, sig, args, dtype, pe) -> bool:
    """A single element through the NIC travels in 8 bytes (inline data, a result cell):
    for a wider dtype, the call (its ``fn`` and ``what`` first) records NIC_WIDE (and
    traps). True when it did."""
    size = _itemsize(context, dtype)
    if size <= 8:
        return False
    record_failure(context, builder, NIC_WIDE, [(sig.args[0], args[0]), (sig.args[1], args[1]), ("", None)],
                   [_c(size), pe, _c(0)])
    return True


def queue_codegen(builder, pe):
    """The descriptor address (i64) of this PE's queue pair to PE ``pe`` (i64, checked
    before); 0 where there is none."""
    # with no rows, the word read is one of the state block's first ones: read, then ignored
    found = _row(builder, pe, _DESCRIPTOR)
    return builder.select(builder.icmp_signed("!=", load_state(builder, _c(_NIC_ROWS)), _c(0)), found, _c(0))


@intrinsic
def copy(typingctx, fn, pe, q, to_peer, sym, sym_stride, other, other_stride, nelems, itemsize, nbi):
    """``pgas_nic_copy``: addresses, strides in elements, ``itemsize`` bytes each."""
    def codegen(context, builder, sig, args):
        numbers = [_int64(context, builder, sig, args, k) for k in (2, 1, *range(3, 11))]   # q, pe, ...
        return _call(context, builder, "pgas_nic_copy", numbers + _fn_text(context, builder, sig, args, 0))
    return types.void(fn, pe, q, to_peer, sym, sym_stride, other, other_stride, nelems, itemsize, nbi), codegen


def _submit(context, builder, fn_text, q, pe, kind, opcode_opmod, address, lkey, nbytes, operands, waited):
    zero = _c(0)
    return _call(context, builder, "pgas_nic_submit",
                 [q, pe, _I32(kind), _I32(opcode_opmod), address, lkey, zero, _I32(nbytes), *operands,
                  waited, *fn_text])


@intrinsic
def store(typingctx, fn, what, pe, q, arr, value):
    """PE ``pe``'s ``arr[0] = value``: an inline write, complete at ``quiet``."""
    dtype = arr.dtype

    def codegen(context, builder, sig, args):
        fn_text, pe = _fn_text(context, builder, sig, args, 0), _int64(context, builder, sig, args, 2)
        if not _refuse_wide(context, builder, sig, args, dtype, pe):
            bits = _bits(context, builder, dtype, context.cast(builder, args[5], sig.args[5], dtype))
            _submit(context, builder, fn_text, _int64(context, builder, sig, args, 3), pe, KIND_INLINE,
                    mlx5.OP_RDMA_WRITE, ptx.address_codegen(context, builder, sig.args[4], args[4]), _I32(0),
                    _itemsize(context, dtype), [bits, _c(0), _c(0), _c(0)], _I32(0))
        return context.get_dummy_value()
    return types.void(fn, what, pe, q, arr, value), codegen


@intrinsic
def load(typingctx, fn, what, pe, q, arr):
    """PE ``pe``'s ``arr[0]``: an RDMA read into the WQE's result cell."""
    dtype = arr.dtype

    def codegen(context, builder, sig, args):
        fn_text, pe = _fn_text(context, builder, sig, args, 0), _int64(context, builder, sig, args, 2)
        if _refuse_wide(context, builder, sig, args, dtype, pe):
            return context.get_constant_null(dtype)
        q = _int64(context, builder, sig, args, 3)
        size = _itemsize(context, dtype)
        start = _submit(context, builder, fn_text, q, pe, KIND_DATA, mlx5.OP_RDMA_READ,
                        ptx.address_codegen(context, builder, sig.args[4], args[4]), builder.trunc(_row(builder, pe, _CELLS_LKEY),
                                                                                        _I32),
                        size, [_c(0)] * 4, _I32(1))
        _call(context, builder, "pgas_nic_complete", [q, pe, start, *fn_text])
        bits = _call(context, builder, "pgas_nic_result", [q, start, _c(size), _c(0)])
        return _from_bits(context, builder, dtype, bits)
    return dtype(fn, what, pe, q, arr), codegen


def _atomic_call(context, builder, sig, args, request, value, compare, fetch):
    """The common part of ``rmw``/``compare_swap``/``atomic_load``: (fn, pe, q, arr) first."""
    dtype = sig.args[3].dtype
    fn_text, pe, q = (_fn_text(context, builder, sig, args, 0), _int64(context, builder, sig, args, 1),
                      _int64(context, builder, sig, args, 2))
    address = ptx.address_codegen(context, builder, sig.args[3], args[3])
    size = _itemsize(context, dtype)
    fetched = _post_atomic(context, builder, fn_text, pe, q, address, size, request, value, compare, fetch)
    return _from_bits(context, builder, dtype, fetched)


def _post_atomic(context, builder, fn_text, pe, q, address, size, request, value, compare, fetch):
    """Post atomic ``request`` (AMO_*) with operand bits ``value``/``compare`` (i64); with
    ``fetch`` (an i1), wait and return the old value's bits, else 0."""
    kind, opcode_opmod, *operands = atomic_segments(request, size, value, compare, word=_Word.words(builder))
    start = _submit(context, builder, fn_text, q, pe, kind, opcode_opmod, address,
                    builder.trunc(_row(builder, pe, _CELLS_LKEY), _I32), size, [w.value for w in operands],
                    builder.zext(fetch, _I32))
    before = builder.block
    with builder.if_then(fetch):
        _call(context, builder, "pgas_nic_complete", [q, pe, start, *fn_text])
        fetched = _call(context, builder, "pgas_nic_result", [q, start, _c(size), _c(1)])
        fetched_block = builder.block
    result = builder.phi(_I64)
    result.add_incoming(fetched, fetched_block)
    result.add_incoming(_c(0), before)
    return result


@intrinsic
def rmw(typingctx, fn, pe, q, arr, op, value, fetch):
    """Atomic ``op`` (an RMW_* literal) on PE ``pe``'s ``arr[0]``; the old value when
    ``fetch`` (else complete at ``quiet``). A float add is a compare-swap loop: the NIC
    adds integers."""
    if not isinstance(op, types.IntegerLiteral):
        return None
    dtype = arr.dtype
    request = _RMW_REQUEST[op.literal_value]
    float_add = request == AMO_ADD and isinstance(dtype, types.Float)

    def codegen(context, builder, sig, args):
        value = context.cast(builder, args[5], sig.args[5], dtype)
        fetch = context.cast(builder, args[6], sig.args[6], types.boolean)
        if not float_add:
            return _atomic_call(context, builder, sig, args, request, _bits(context, builder, dtype, value), _c(0),
                                fetch)
        fn_text, pe, q = (_fn_text(context, builder, sig, args, 0), _int64(context, builder, sig, args, 1),
                          _int64(context, builder, sig, args, 2))
        address, size = ptx.address_codegen(context, builder, sig.args[3], args[3]), _itemsize(context, dtype)
        yes = _I1(1)
        first = _post_atomic(context, builder, fn_text, pe, q, address, size, AMO_FETCH, _c(0), _c(0), yes)
        entry = builder.block
        loop = builder.append_basic_block("float_add")
        done = builder.append_basic_block("float_added")
        builder.branch(loop)
        builder.position_at_end(loop)
        old = builder.phi(_I64)
        old.add_incoming(first, entry)
        new = _bits(context, builder, dtype, builder.fadd(_from_bits(context, builder, dtype, old), value))
        seen = _post_atomic(context, builder, fn_text, pe, q, address, size, AMO_CAS, new, old, yes)
        old.add_incoming(seen, builder.block)
        builder.cbranch(builder.icmp_unsigned("==", seen, old), done, loop)
        builder.position_at_end(done)
        return _from_bits(context, builder, dtype, old)
    return dtype(fn, pe, q, arr, op, value, fetch), codegen


@intrinsic
def compare_swap(typingctx, fn, pe, q, arr, cond, value):
    """Compare-and-swap of PE ``pe``'s ``arr[0]`` (bit patterns); the old value."""
    dtype = arr.dtype

    def codegen(context, builder, sig, args):
        cond, value = (_bits(context, builder, dtype, context.cast(builder, args[k], sig.args[k], dtype))
                       for k in (4, 5))
        return _atomic_call(context, builder, sig, args, AMO_CAS, value, cond, _I1(1))
    return dtype(fn, pe, q, arr, cond, value), codegen


@intrinsic
def atomic_load(typingctx, fn, pe, q, arr):
    """An atomic read of PE ``pe``'s ``arr[0]`` (a fetch-add of 0)."""
    def codegen(context, builder, sig, args):
        return _atomic_call(context, builder, sig, args, AMO_FETCH, _c(0), _c(0), _I1(1))
    return arr.dtype(fn, pe, q, arr), codegen


@intrinsic
def quiet(typingctx, fn):
    """Wait until the NIC has completed every WQE this PE posted so far, then a full fence
    (``fence.sc.sys``: every store to a peer is issued at the call on the load/store path)."""
    def codegen(context, builder, sig, args):
        _call(context, builder, "pgas_nic_quiet", _fn_text(context, builder, sig, args, 0))
        ptx.inline_asm(builder, "fence.sc.sys;", "~{memory}", ir.VoidType(), [])
        return context.get_dummy_value()
    return types.void(fn), codegen
