"""The IR library of the GPU-initiated NIC path: ``pgas_nic_submit``, ``complete``,
``check_refused``, ``copy``, ``result`` and ``quiet``, LLVM IR functions defined once per
code generator and linked into the kernels that call them (``noinline``: one copy each).
They run the protocol of ``pgas/transport/_ibgda_ir.py`` (the simulator's: the same WQE
bytes) with the GPU's memory model (``GpuMemory``): system-scope PTX, since the CPU is
the other side of every word. The intrinsics that call them are in ``_nic_device``.
"""
from __future__ import annotations

from llvmlite import ir
from numba.cuda import cgutils

from ...core._device_errors import NIC_REFUSED, NIC_TIMEOUT, NOT_REGISTERED
from ...core.native._llvm import bswap
from ...nic import _mlx5 as mlx5
from ...transport._ibgda_ir import KIND_DATA, W, define_post, define_progress, define_refused
from .. import _ptx as ptx
from .._state_reads import (_HEAP_BASE, _HEAP_LKEY, _HEAP_SIZE, _MAILBOX, _MY_PE, _NIC_ROWS, _N_PES, load_state,
                           timed_out_codegen)

__all__ = ["ROW", "DESCRIPTOR", "CELLS_LKEY", "I1", "I32", "I64", "GpuMemory", "const", "row_word", "call"]

ROW = ("descriptor", "rkey", "heap_base", "cells_lkey")     # the words of a PE's NIC row
DESCRIPTOR, _RKEY, _REMOTE_BASE, CELLS_LKEY = range(len(ROW))
I1, _I8, _I16, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)
_TEXT = _I8.as_pointer()
_REGISTER = {8: "h", 32: "r", 64: "l"}
_WAITING_FOR_ROOM, _WAITING_FOR_COMPLETION = 0, 1


class GpuMemory:
    """The memory model ``_ibgda_ir`` is built with on a GPU: system-scope PTX (NVVM turns
    LLVM's atomic orderings into relaxed GPU-scope atomics, which the CPU-side NIC would
    not be ordered with) and ``nanosleep`` as the pause."""

    @staticmethod
    def load(builder, pointer, order: str):
        width = pointer.type.pointee.width
        semantics = "acquire" if order == "acquire" else "relaxed"
        value = ptx.inline_asm(builder, f"ld.{semantics}.sys.b{width} $0, [$1];", f"={_REGISTER[width]},l,~{{memory}}",
                               _I16 if width == 8 else ir.IntType(width), [builder.ptrtoint(pointer, I64)])
        return builder.trunc(value, _I8) if width == 8 else value

    @staticmethod
    def store(builder, value, pointer, order: str):
        width = value.type.width
        semantics = "release" if order == "release" else "relaxed"
        bits = builder.zext(value, _I16) if width == 8 else value
        ptx.inline_asm(builder, f"st.{semantics}.sys.b{width} [$0], $1;", f"l,{_REGISTER[width]},~{{memory}}",
                       ir.VoidType(), [builder.ptrtoint(pointer, I64), bits])

    @staticmethod
    def cas(builder, pointer, expected, new):
        old = ptx.inline_asm(builder, "atom.acq_rel.sys.cas.b64 $0, [$1], $2, $3;", "=l,l,l,l,~{memory}", I64,
                             [builder.ptrtoint(pointer, I64), expected, new])
        return builder.icmp_unsigned("==", old, expected)

    @staticmethod
    def rmw(builder, op: str, pointer, value):
        text = {"xchg": "fence.sc.sys;\n\tatom.acquire.sys.exch.b64", "add": "atom.relaxed.sys.add.u64",
                "umax": "atom.acq_rel.sys.max.u64"}[op]
        return ptx.inline_asm(builder, f"{text} $0, [$1], $2;", "=l,l,l,~{memory}", I64,
                              [builder.ptrtoint(pointer, I64), value])

    @staticmethod
    def pause(builder):
        ptx.inline_asm(builder, "nanosleep.u32 32;", "~{memory}", ir.VoidType(), [])


# The library: IR functions defined once per code generator, linked into the kernels
# that call them ---------------------------------------------------------------------

def const(value: int):
    return I64(value)


def _word_at(b, address):
    """The uint64 at integer ``address`` (``ld.acquire.sys``: words the NIC writes)."""
    return GpuMemory.load(b, b.inttoptr(address, I64.as_pointer()), "acquire")


def _descriptor_word(b, q, name: str):
    return _word_at(b, b.add(q, const(8 * W[name])))


def _big_endian(b, address, size: int):
    """The ``size``-byte big-endian number at ``address``, as i64."""
    word = _word_at(b, address)
    return b.zext(bswap(b, b.trunc(word, I32)), I64) if size == 4 else bswap(b, word)


def row_word(b, pe, column: int):
    rows = load_state(b, const(_NIC_ROWS))
    return load_state(b, b.add(rows, b.add(b.mul(pe, const(len(ROW))), const(column))))


def _cell(b, q, start):
    """(the result cell, the ``waited`` flag) of the WQE that starts at ``start``."""
    slot = b.urem(start, _descriptor_word(b, q, "depth"))
    return (b.add(_descriptor_word(b, q, "cells"), b.shl(slot, const(3))),
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
        empty = (ir.Constant(_TEXT, None), const(0))
        what = empty if what_text is None else what_text
        b.call(self.record, [load_state(b, const(_MAILBOX)), load_state(b, const(_MY_PE)), const(kind), *fn_text, *what,
                             *empty, a, b_, c])

    def build(self):
        module = self.module
        post = define_post(module, GpuMemory, "pgas_ibgda_post", "private")
        progress = define_progress(module, GpuMemory, "pgas_ibgda_progress", "private")
        refused = define_refused(module, GpuMemory, "pgas_ibgda_refused", "private")
        record_type = ir.FunctionType(ir.VoidType(), [I64, I64, I64, _TEXT, I64, _TEXT, I64, _TEXT, I64,
                                                      I64, I64, I64])
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
                              {"q": I64, "pe": I64, "fn": _TEXT, "fn_length": I64})
        q, pe, *fn_text = fn.args
        found = b.call(refused, [b.inttoptr(q, I64.as_pointer())])
        with b.if_then(b.icmp_signed(">=", found, const(0)), likely=False):
            start = b.ashr(found, const(8))
            depth, sq = _descriptor_word(b, q, "depth"), _descriptor_word(b, q, "sq")

            def field(offset, size):
                block = b.urem(b.add(start, const(offset // 64)), depth)
                return _big_endian(b, b.add(sq, b.add(b.shl(block, const(6)), const(offset % 64))), size)
            control = field(0, 4)                                   # opmod << 24 | index << 8 | opcode
            count = b.and_(field(32, 4), const(0x7FFFFFFF))
            summary = b.or_(b.and_(control, const(0xFF)), b.shl(b.lshr(control, const(24)), const(8)))
            summary = b.or_(summary, b.or_(b.shl(count, const(16)), b.shl(b.and_(found, const(0xFF)), const(56))))
            self.fail(b, NIC_REFUSED, fn_text, None, pe, field(16, 8), summary)
        b.ret_void()
        return fn

    def _complete(self, progress, check_refused):
        """``(q, pe, start, fn, fn_length)``: wait until the WQE at ``start`` is complete."""
        fn, b = self.function("pgas_nic_complete", ir.VoidType(),
                              {"q": I64, "pe": I64, "start": I64, "fn": _TEXT, "fn_length": I64})
        q, pe, start, *fn_text = fn.args
        started = ptx.read_globaltimer(b)
        loop, wait, done = (fn.append_basic_block(n) for n in ("loop", "wait", "done"))
        b.branch(loop)
        b.position_at_end(loop)
        floor = b.call(progress, [b.inttoptr(q, I64.as_pointer())])
        b.cbranch(b.icmp_signed(">", floor, start), done, wait)
        b.position_at_end(wait)
        b.call(check_refused, [q, pe, *fn_text])
        with b.if_then(timed_out_codegen(b, started), likely=False):
            self.fail(b, NIC_TIMEOUT, fn_text, None, pe, const(_WAITING_FOR_COMPLETION), const(0))
        b.branch(loop)
        b.position_at_end(done)
        b.ret_void()
        return fn

    def _submit(self, post, progress, check_refused):
        """``(q, pe, kind, opcode_opmod, address, lkey, laddr, nbytes, a0..a3, waited, fn,
        fn_length)``: post one WQE to PE ``pe`` about ``address`` (this PE's copy); returns its
        start block. A full queue is waited out on the completion queue, never overwritten;
        nothing is rung from a GPU (the NIC polls the rung word)."""
        arguments = {"q": I64, "pe": I64, "kind": I32, "opcode_opmod": I32, "address": I64, "lkey": I32,
                     "laddr": I64, "nbytes": I32, "a0": I64, "a1": I64, "a2": I64, "a3": I64,
                     "waited": I32, "fn": _TEXT, "fn_length": I64}
        fn, b = self.function("pgas_nic_submit", I64, arguments)
        q, pe, kind, opcode_opmod, address, lkey, laddr, nbytes, a0, a1, a2, a3, waited, *fn_text = fn.args
        raddr = b.add(row_word(b, pe, _REMOTE_BASE), b.sub(address, load_state(b, const(_HEAP_BASE))))
        rkey = b.trunc(row_word(b, pe, _RKEY), I32)
        descriptor = b.inttoptr(q, I64.as_pointer())
        started = ptx.read_globaltimer(b)
        loop, full, done = (fn.append_basic_block(n) for n in ("loop", "full", "done"))
        b.branch(loop)
        b.position_at_end(loop)
        posted = b.call(post, [descriptor, kind, opcode_opmod, raddr, rkey, lkey, laddr, nbytes, a0, a1, a2, a3,
                               waited])
        b.cbranch(b.icmp_signed(">=", posted, const(0)), done, full)
        b.position_at_end(full)
        b.call(progress, [descriptor])
        b.call(check_refused, [q, pe, *fn_text])
        with b.if_then(timed_out_codegen(b, started), likely=False):
            self.fail(b, NIC_TIMEOUT, fn_text, None, pe, const(_WAITING_FOR_ROOM), const(0))
        b.branch(loop)
        b.position_at_end(done)
        b.ret(b.ashr(posted, const(1)))
        return fn

    def _copy(self, submit, complete):
        """``(q, pe, to_peer, sym, sym_stride, other, other_stride, nelems, itemsize, nbi, fn,
        fn_length)``: ``to_peer``: the elements at ``other + i*other_stride*itemsize`` (this
        PE's heap) into PE ``pe``'s ``sym + i*sym_stride*itemsize``, else the reverse, for
        i < nelems: RDMA writes/reads of up to 1 GiB when both are contiguous, else one per
        element. Blocking unless ``nbi``."""
        arguments = {"q": I64, "pe": I64, "to_peer": I64, "sym": I64, "sym_stride": I64, "other": I64,
                     "other_stride": I64, "nelems": I64, "itemsize": I64, "nbi": I64, "fn": _TEXT,
                     "fn_length": I64}
        fn, b = self.function("pgas_nic_copy", ir.VoidType(), arguments)
        q, pe, to_peer, sym, sym_stride, other, other_stride, nelems, itemsize, nbi, *fn_text = fn.args
        writes = b.icmp_signed("!=", to_peer, const(0))
        nothing, work = fn.append_basic_block("nothing"), fn.append_basic_block("work")
        b.cbranch(b.icmp_signed("<=", nelems, const(0)), nothing, work)
        b.position_at_end(nothing)
        b.ret_void()
        b.position_at_end(work)
        span = b.mul(b.add(b.mul(b.sub(nelems, const(1)), other_stride), const(1)), itemsize)
        base = load_state(b, const(_HEAP_BASE))
        outside = b.or_(b.icmp_unsigned("<", other, base),
                        b.icmp_unsigned(">", b.add(other, span), b.add(base, load_state(b, const(_HEAP_SIZE)))))
        with b.if_then(outside, likely=False):
            texts = [(self.context.insert_string_const_addrspace(b, t), const(len(t))) for t in ("src", "dest")]
            what = [b.select(writes, texts[0][i], texts[1][i]) for i in range(2)]
            self.fail(b, NOT_REGISTERED, fn_text, what, pe, other, span)
        opcode = b.select(writes, I32(mlx5.OP_RDMA_WRITE), I32(mlx5.OP_RDMA_READ))
        lkey = b.trunc(load_state(b, const(_HEAP_LKEY)), I32)
        zero = const(0)

        def post(remote, local, nbytes):
            return b.call(submit, [q, pe, I32(KIND_DATA), opcode, remote, lkey, local, b.trunc(nbytes, I32),
                                   zero, zero, zero, zero, I32(0), *fn_text])
        contiguous = b.and_(b.icmp_signed("==", sym_stride, const(1)), b.icmp_signed("==", other_stride, const(1)))
        with b.if_else(contiguous) as (whole, strided):
            with whole:          # messages of at most 1 GiB (a byte count's top bit marks inline data)
                nbytes = b.mul(nelems, itemsize)
                pieces = b.udiv(b.add(nbytes, const(mlx5.MAX_MESSAGE - 1)), const(mlx5.MAX_MESSAGE))
                with cgutils.for_range(b, pieces) as loop:
                    offset = b.mul(loop.index, const(mlx5.MAX_MESSAGE))
                    left = b.sub(nbytes, offset)
                    post(b.add(sym, offset), b.add(other, offset),
                         b.select(b.icmp_unsigned("<", left, const(mlx5.MAX_MESSAGE)), left, const(mlx5.MAX_MESSAGE)))
            with strided:
                with cgutils.for_range(b, nelems) as loop:
                    i = loop.index
                    post(b.add(sym, b.mul(b.mul(i, sym_stride), itemsize)),
                         b.add(other, b.mul(b.mul(i, other_stride), itemsize)), itemsize)
        start = b.sub(_descriptor_word(b, q, "last"), const(1))     # the newest WQE: at or after this call's last
        with b.if_then(b.icmp_signed("==", nbi, const(0))):
            b.call(complete, [q, pe, start, *fn_text])      # one queue pair completes in order
        b.ret_void()

    def _result(self):
        """``(q, start, size, big_endian)``: the bits in the result cell of the WQE at
        ``start`` (fetched atomic values are big-endian, as ConnectX writes them; read
        data as it was read); frees its blocks for reuse."""
        fn, b = self.function("pgas_nic_result", I64, {"q": I64, "start": I64, "size": I64,
                                                         "big_endian": I64})
        q, start, size, big_endian = fn.args
        cell, flag = _cell(b, q, start)
        four = b.icmp_signed("==", size, const(4))
        swapped = b.select(four, _big_endian(b, cell, 4), _big_endian(b, cell, 8))
        value = b.select(b.icmp_signed("!=", big_endian, const(0)), swapped, _word_at(b, cell))
        _release_flag(b, flag)
        b.ret(value)

    def _quiet(self, complete):
        """``(fn, fn_length)``: wait until the NIC has completed every WQE posted so far."""
        fn, b = self.function("pgas_nic_quiet", ir.VoidType(), {"fn": _TEXT, "fn_length": I64})
        with b.if_then(b.icmp_signed("!=", load_state(b, const(_NIC_ROWS)), const(0))):
            with cgutils.for_range(b, load_state(b, const(_N_PES))) as loop:
                pe = loop.index
                q = row_word(b, pe, DESCRIPTOR)
                with b.if_then(b.icmp_signed("!=", q, const(0))):
                    last = _descriptor_word(b, q, "last")       # the newest published WQE's start + 1
                    with b.if_then(b.icmp_signed("!=", last, const(0))):
                        b.call(complete, [q, pe, b.sub(last, const(1)), *fn.args])
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


def call(context, builder, name: str, arguments):
    """Call library function ``name`` (declared here with the type it was defined with)."""
    library, module = _library(context)
    context.active_code_library.add_linking_library(library)
    fnty = module.globals[name].ftype
    fn = cgutils.get_or_insert_function(builder.module, fnty, name)
    return builder.call(fn, [builder.bitcast(a, t) if isinstance(t, ir.PointerType) else a
                             for a, t in zip(arguments, fnty.args)])
