"""What every part of the cuda primitive layer reads and how it fails: the device state
block, the error record, the wait clock.

Device state is found without a context argument: the host maps a small state block at
the fixed virtual address ``STATE_ADDRESS`` in every PE's process (the same address
across a finalize/init cycle), so kernels compiled before or after ``init`` read it
there. Its words: this PE, the PE count, this PE's heap base and size, the wait
timeout in nanoseconds, the address of the PE's error mailbox, where the NIC rows start
(0: no PE is reached through the NIC) and the heap's local key, then every PE's mapped
heap base (0 where there is no load/store path), then the team table (per slot: size,
this PE's rank, then the world PE of every rank; size 0 where the slot is free), then
the NIC rows (``_nic_device``).
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.cuda.extending import intrinsic

from ..core._env import setting
from . import _ptx as ptx

__all__ = ["STATE_ADDRESS", "STATE_WORDS", "load_state", "state_word", "record_failure", "fail", "timed_out",
           "timed_out_codegen"]

STATE_ADDRESS = setting("PGAS_STATE_ADDRESS")   # mapped there by the host runtime in every PE
# state word indices
_MY_PE, _N_PES, _HEAP_BASE, _HEAP_SIZE, _TIMEOUT_NS, _MAILBOX, _NIC_ROWS, _HEAP_LKEY = range(8)
_PEER_BASES = 8
STATE_WORDS = {"my_pe": _MY_PE, "n_pes": _N_PES, "heap_base": _HEAP_BASE, "heap_size": _HEAP_SIZE,
               "timeout_ns": _TIMEOUT_NS, "mailbox": _MAILBOX, "nic_rows": _NIC_ROWS, "heap_lkey": _HEAP_LKEY,
               "peer_bases": _PEER_BASES}


def load_state(builder, index):
    """int64 state word ``index`` (an LLVM int64 value)."""
    i64 = ir.IntType(64)
    address = builder.add(i64(STATE_ADDRESS), builder.mul(index, i64(8)))
    return builder.load(builder.inttoptr(address, i64.as_pointer()))


@intrinsic
def state_word(typingctx, index):
    """int64 word ``index`` of the state block at STATE_ADDRESS."""
    def codegen(context, builder, sig, args):
        return load_state(builder, context.cast(builder, args[0], sig.args[0], types.int64))
    return types.int64(index), codegen


def record_failure(context, builder, kind, texts, numbers):
    """Write an error record into this PE's mailbox and stop the kernel (``trap``); the host
    raises it. ``kind``: a KIND code or an int64 value; ``texts``: fn, what, why as (numba
    type, value) or (plain string, None); ``numbers``: a, b, c as int64 values."""
    i64 = ir.IntType(64)
    arguments = [load_state(builder, i64(_MAILBOX)), load_state(builder, i64(_MY_PE)),
                 i64(kind) if isinstance(kind, int) else kind]
    for typ, value in texts:
        arguments += ptx.string_argument(context, builder, typ, value)
    ptx.call_record_error(builder, context, arguments + list(numbers))


@intrinsic
def fail(typingctx, kind, fn, what, why, a, b, c):
    """Record a failed check (``record_failure``). ``what``/``why``: strings, or an array
    (its dtype's name); a, b, c: numbers."""
    def codegen(context, builder, sig, args):
        record_failure(context, builder, context.cast(builder, args[0], sig.args[0], types.int64),
                       list(zip(sig.args[1:4], args[1:4])),
                       [ptx.word_argument(context, builder, typ, value) for typ, value in zip(sig.args[4:], args[4:])])
        return context.get_dummy_value()
    return types.void(kind, fn, what, why, a, b, c), codegen


@intrinsic
def timed_out(typingctx, started):
    """Back off (``nanosleep``); True once PGAS_TIMEOUT has passed since ``started``."""
    def codegen(context, builder, sig, args):
        return timed_out_codegen(builder, args[0])
    return types.boolean(types.int64), codegen


def timed_out_codegen(builder, started):
    """``timed_out`` in place: back off, then whether PGAS_TIMEOUT has passed since ``started`` (an i1)."""
    ptx.inline_asm(builder, "nanosleep.u32 200;", "~{memory}", ir.VoidType(), [])
    now = ptx.read_globaltimer(builder)
    return builder.icmp_signed(">", builder.sub(now, started), load_state(builder, ir.IntType(64)(_TIMEOUT_NS)))
