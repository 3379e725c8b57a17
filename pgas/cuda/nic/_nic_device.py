"""The GPU-initiated NIC path of the cuda backend: device threads post their own WQEs.

For each PE on another node the host (``_nic_host``) keeps a queue pair: what the
NIC reads or writes (send queue, doorbell record, completion queues, result cells, the
rung word) in pinned host memory mapped into the GPU, the descriptor with its counters
and the ``waited`` flags in device memory. The emulated NIC, a CPU thread, polls the
queues' rung words (a GPU cannot wake a CPU thread) and reaches the GPU heap with the
copy engines. Kernels run the code of ``pgas/transport/_ibgda_ir`` (the simulator's: the same WQE
bytes) built with the GPU's memory model (``GpuMemory``): system-scope PTX, since the
CPU is the other side of every word.

The state block (``_state_reads``) holds where the NIC rows start (0: no PE is reached
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

Everything is LLVM IR: the operations are functions of one library linked into the
kernels that use them (``_nic_library``), and the intrinsics here only convert a dtype's
values to bits at the call. numba compiles nothing per dtype or per kernel for
this path, which keeps kernels that may reach another node as quick to compile as before.
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.cuda.extending import intrinsic

from ...core._codes import RMW_ADD, RMW_AND, RMW_OR, RMW_XCHG, RMW_XOR
from ...core._device_errors import NIC_WIDE
from ...nic import _mlx5 as mlx5
from ...transport._ibgda_ir import (AMO_ADD, AMO_AND, AMO_CAS, AMO_FETCH, AMO_OR, AMO_SWAP, AMO_XOR, KIND_DATA,
                                   KIND_INLINE, atomic_segments)
from .. import _ptx as ptx
from ._nic_library import CELLS_LKEY, DESCRIPTOR, I1, I32, I64, ROW, call, const, row_word
from .._state_reads import _NIC_ROWS, load_state, record_failure

__all__ = ["ROW", "queue_codegen", "copy", "store", "load", "rmw", "compare_swap", "atomic_load", "quiet"]

_RMW_REQUEST = {RMW_ADD: AMO_ADD, RMW_AND: AMO_AND, RMW_OR: AMO_OR, RMW_XOR: AMO_XOR, RMW_XCHG: AMO_SWAP}


class Word:
    """An i64 IR value that ``atomic_segments`` computes with (``&``, ``~``); ``words(builder)``
    makes them."""

    def __init__(self, builder, value):
        self.builder = builder
        self.value = value.value if isinstance(value, Word) else I64(value) if isinstance(value, int) else value

    def __and__(self, other):
        return Word(self.builder, self.builder.and_(self.value, Word(self.builder, other).value))

    def __invert__(self):
        return Word(self.builder, self.builder.not_(self.value))

    @staticmethod
    def words(builder):
        return lambda value: Word(builder, value)


def _int64(context, builder, sig, args, k):
    return context.cast(builder, args[k], sig.args[k], types.int64)


def _fn_text(context, builder, sig, args, k):
    return ptx.string_argument(context, builder, sig.args[k], args[k])


def _bits(context, builder, dtype, value):
    """A value of ``dtype`` (up to 8 bytes) as the i64 its bits travel in."""
    raw = ptx.to_bits(context, builder, dtype, value)
    return builder.zext(raw, I64) if raw.type.width < 64 else raw


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
                   [const(size), pe, const(0)])
    return True


def queue_codegen(builder, pe):
    """The descriptor address (i64) of this PE's queue pair to PE ``pe`` (i64, checked
    before); 0 where there is none."""
    # with no rows, the word read is one of the state block's first ones: read, then ignored
    found = row_word(builder, pe, DESCRIPTOR)
    return builder.select(builder.icmp_signed("!=", load_state(builder, const(_NIC_ROWS)), const(0)), found, const(0))


@intrinsic
def copy(typingctx, fn, pe, q, to_peer, sym, sym_stride, other, other_stride, nelems, itemsize, nbi):
    """``pgas_nic_copy``: addresses, strides in elements, ``itemsize`` bytes each."""
    def codegen(context, builder, sig, args):
        numbers = [_int64(context, builder, sig, args, k) for k in (2, 1, *range(3, 11))]   # q, pe, ...
        return call(context, builder, "pgas_nic_copy", numbers + _fn_text(context, builder, sig, args, 0))
    return types.void(fn, pe, q, to_peer, sym, sym_stride, other, other_stride, nelems, itemsize, nbi), codegen


def _submit(context, builder, fn_text, q, pe, kind, opcode_opmod, address, lkey, nbytes, operands, waited):
    zero = const(0)
    return call(context, builder, "pgas_nic_submit",
                 [q, pe, I32(kind), I32(opcode_opmod), address, lkey, zero, I32(nbytes), *operands,
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
                    mlx5.OP_RDMA_WRITE, ptx.address_codegen(context, builder, sig.args[4], args[4]), I32(0),
                    _itemsize(context, dtype), [bits, const(0), const(0), const(0)], I32(0))
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
                        ptx.address_codegen(context, builder, sig.args[4], args[4]), builder.trunc(row_word(builder, pe, CELLS_LKEY),
                                                                                        I32),
                        size, [const(0)] * 4, I32(1))
        call(context, builder, "pgas_nic_complete", [q, pe, start, *fn_text])
        bits = call(context, builder, "pgas_nic_result", [q, start, const(size), const(0)])
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
    kind, opcode_opmod, *operands = atomic_segments(request, size, value, compare, word=Word.words(builder))
    start = _submit(context, builder, fn_text, q, pe, kind, opcode_opmod, address,
                    builder.trunc(row_word(builder, pe, CELLS_LKEY), I32), size, [w.value for w in operands],
                    builder.zext(fetch, I32))
    before = builder.block
    with builder.if_then(fetch):
        call(context, builder, "pgas_nic_complete", [q, pe, start, *fn_text])
        fetched = call(context, builder, "pgas_nic_result", [q, start, const(size), const(1)])
        fetched_block = builder.block
    result = builder.phi(I64)
    result.add_incoming(fetched, fetched_block)
    result.add_incoming(const(0), before)
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
            return _atomic_call(context, builder, sig, args, request, _bits(context, builder, dtype, value), const(0),
                                fetch)
        fn_text, pe, q = (_fn_text(context, builder, sig, args, 0), _int64(context, builder, sig, args, 1),
                          _int64(context, builder, sig, args, 2))
        address, size = ptx.address_codegen(context, builder, sig.args[3], args[3]), _itemsize(context, dtype)
        yes = I1(1)
        first = _post_atomic(context, builder, fn_text, pe, q, address, size, AMO_FETCH, const(0), const(0), yes)
        entry = builder.block
        loop = builder.append_basic_block("float_add")
        done = builder.append_basic_block("float_added")
        builder.branch(loop)
        builder.position_at_end(loop)
        old = builder.phi(I64)
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
        return _atomic_call(context, builder, sig, args, AMO_CAS, value, cond, I1(1))
    return dtype(fn, pe, q, arr, cond, value), codegen


@intrinsic
def atomic_load(typingctx, fn, pe, q, arr):
    """An atomic read of PE ``pe``'s ``arr[0]`` (a fetch-add of 0)."""
    def codegen(context, builder, sig, args):
        return _atomic_call(context, builder, sig, args, AMO_FETCH, const(0), const(0), I1(1))
    return arr.dtype(fn, pe, q, arr), codegen


@intrinsic
def quiet(typingctx, fn):
    """Wait until the NIC has completed every WQE this PE posted so far, then a full fence
    (``fence.sc.sys``: every store to a peer is issued at the call on the load/store path)."""
    def codegen(context, builder, sig, args):
        call(context, builder, "pgas_nic_quiet", _fn_text(context, builder, sig, args, 0))
        ptx.inline_asm(builder, "fence.sc.sys;", "~{memory}", ir.VoidType(), [])
        return context.get_dummy_value()
    return types.void(fn), codegen
