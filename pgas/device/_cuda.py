"""The cuda primitive layer: the same names as ``_sim.py``, compiled by numba for the GPU.

Device state is found without a context argument: the host maps a small state block at
the fixed virtual address ``STATE_ADDRESS`` in every PE's process (the same address
across a finalize/init cycle), so kernels compiled before or after ``init`` read it
there. Its words: this PE, the PE count, this PE's heap base and size, the wait
timeout in nanoseconds, then every PE's mapped heap base (0 where there is no
load/store path), then the team table (per slot: size, this PE's rank, then the world
PE of every rank). The barrier words of team slot t are the t-th row of ``n_pes + 1``
int64 at the start of the heap, as on the simulator.

Ordering uses the PTX memory model at system scope, so peers on other GPUs and the CPU
see it: polling is ``ld.acquire.sys`` (a plain spin compiles to ``ld.global.nc`` and
never sees a peer's store), flags are ``st.release.sys``, atomics are ``atom.*.sys``,
``fence``/``quiet`` are ``fence.sc.sys``. Argument checks are the host's and the
simulator's job: on the GPU the check functions compile to nothing, and a wait that
passes PGAS_TIMEOUT stops the kernel with ``trap``.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import cuda, types
from numba.cuda.extending import intrinsic

from .._env import setting
from .._waiting import compare
from ._codes import BLOCK, PRIMITIVES, RMW_ADD, RMW_AND, RMW_OR, RMW_XCHG, RMW_XOR, THREAD, reduce_code

__all__ = [*PRIMITIVES, "STATE_ADDRESS", "STATE_WORDS"]

WARP_SIZE = 32
STATE_ADDRESS = setting("PGAS_STATE_ADDRESS")   # mapped there by the host runtime in every PE
# state word indices
_MY_PE, _N_PES, _HEAP_BASE, _HEAP_SIZE, _TIMEOUT_NS = range(5)
_PEER_BASES = 8
STATE_WORDS = {"my_pe": _MY_PE, "n_pes": _N_PES, "heap_base": _HEAP_BASE, "heap_size": _HEAP_SIZE,
               "timeout_ns": _TIMEOUT_NS, "peer_bases": _PEER_BASES}
# reduction codes that _combine and _bitwise branch on
_SUM, _PROD, _MIN, _MAX, _AND, _OR = (reduce_code(op) for op in ("sum", "prod", "min", "max", "and", "or"))


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


device_function = jit


# Intrinsics -------------------------------------------------------------------------

@intrinsic
def _state_word(typingctx, index):
    """int64 word ``index`` of the state block at STATE_ADDRESS."""
    def codegen(context, builder, sig, args):
        i64 = ir.IntType(64)
        address = builder.add(ir.Constant(i64, STATE_ADDRESS), builder.mul(args[0], ir.Constant(i64, 8)))
        return builder.load(builder.inttoptr(address, i64.as_pointer()))
    return types.int64(types.int64), codegen


@intrinsic
def name(typingctx, text):
    """A device function's name as a plain string rather than a literal one: the helpers it
    is passed to are then compiled once for every public function, not once per name
    (its characters stay a constant in the PTX, which the error mailbox copies)."""
    if not isinstance(text, (types.StringLiteral, types.UnicodeType)):
        return None

    def codegen(context, builder, sig, args):
        return context.cast(builder, args[0], sig.args[0], types.unicode_type)
    return types.unicode_type(text), codegen


@intrinsic
def _address_of(typingctx, arr):
    """The address of ``arr``'s first element."""
    def codegen(context, builder, sig, args):
        data = context.make_array(sig.args[0])(context, builder, value=args[0]).data
        return builder.ptrtoint(data, ir.IntType(64))
    return types.uint64(arr), codegen


@intrinsic
def _pointer_like(typingctx, address, arr):
    """``address`` as a pointer to ``arr``'s element type."""
    def codegen(context, builder, sig, args):
        return builder.inttoptr(args[0], context.get_value_type(sig.return_type))
    return types.CPointer(arr.dtype)(types.uint64, arr), codegen


def _view(context, builder, array_type, address, count):
    """A 1-D C-contiguous array struct of ``count`` elements at integer ``address``."""
    out = context.make_array(array_type)(context, builder)
    itemsize = context.get_constant(types.intp, context.get_abi_sizeof(context.get_data_type(array_type.dtype)))
    data = builder.inttoptr(address, out.data.type)
    context.populate_array(out, data=data, shape=[count], strides=[itemsize], itemsize=itemsize, meminfo=None)
    return out._getvalue()


@intrinsic
def _flat_view(typingctx, address, arr):
    """``arr``'s elements as a 1-D C array at ``address`` (built in place: no IR to inline)."""
    result = types.Array(arr.dtype, 1, "C")

    def codegen(context, builder, sig, args):
        count = context.make_array(sig.args[1])(context, builder, value=args[1]).nitems
        return _view(context, builder, result, args[0], count)
    return result(types.uint64, arr), codegen


@intrinsic
def _int64_view(typingctx, address, count):
    result = types.Array(types.int64, 1, "C")

    def codegen(context, builder, sig, args):
        return _view(context, builder, result, args[0], context.cast(builder, args[1], sig.args[1], types.intp))
    return result(types.uint64, count), codegen


@intrinsic
def _bitwise(typingctx, op, a, b):
    """a and/or/xor b for the and/or/xor reduction codes on integers; floats never get here
    (the host and the simulator refuse bitwise reductions of floats) and return a."""
    def codegen(context, builder, sig, args):
        op_value, x, y = args
        y = context.cast(builder, y, sig.args[2], sig.args[1])
        if not isinstance(sig.args[1], types.Integer):
            return x
        result = builder.xor(x, y)
        result = builder.select(builder.icmp_signed("==", op_value, ir.Constant(op_value.type, _OR)),
                                builder.or_(x, y), result)
        return builder.select(builder.icmp_signed("==", op_value, ir.Constant(op_value.type, _AND)),
                              builder.and_(x, y), result)
    return a(op, a, b), codegen


_PTX_TYPES = {types.int32: ("b32", "r"), types.uint32: ("b32", "r"), types.int64: ("b64", "l"),
              types.uint64: ("b64", "l"), types.float32: ("f32", "f"), types.float64: ("f64", "d")}


def _asm(builder, text, constraints, ret, args):
    fnty = ir.FunctionType(ret, [a.type for a in args])
    return builder.call(ir.InlineAsm(fnty, text, constraints, side_effect=True), args)


@intrinsic
def _ld_acquire(typingctx, ptr):
    kind, reg = _PTX_TYPES[ptr.dtype]

    def codegen(context, builder, sig, args):
        ret = context.get_value_type(sig.return_type)
        return _asm(builder, f"ld.acquire.sys.global.{kind} $0, [$1];", f"={reg},l,~{{memory}}", ret, args)
    return ptr.dtype(ptr), codegen


@intrinsic
def _st_release(typingctx, ptr, value):
    kind, reg = _PTX_TYPES[ptr.dtype]

    def codegen(context, builder, sig, args):
        value = context.cast(builder, args[1], sig.args[1], ptr.dtype)
        return _asm(builder, f"st.release.sys.global.{kind} [$0], $1;", f"l,{reg},~{{memory}}",
                    ir.VoidType(), [args[0], value])
    return types.void(ptr, value), codegen


_ATOM_OPS = {RMW_XCHG: "exch", RMW_ADD: "add", RMW_AND: "and", RMW_OR: "or", RMW_XOR: "xor"}


def _atom_ptx(op: int, dtype) -> str:
    name = _ATOM_OPS[op]
    if name == "add":
        kind = {types.int32: "s32", types.uint32: "u32", types.int64: "u64", types.uint64: "u64",
                types.float32: "f32", types.float64: "f64"}[dtype]
    else:
        kind = _PTX_TYPES[dtype][0].replace("f", "b")
    return f"atom.sys.global.{name}.{kind} $0, [$1], $2;"


@intrinsic
def _atom(typingctx, op, ptr, value):
    """Atomic ``op`` (an RMW_* literal) at ``ptr`` with ``value``; the old value."""
    if not isinstance(op, types.IntegerLiteral):
        return None
    text = _atom_ptx(op.literal_value, ptr.dtype)
    reg = _PTX_TYPES[ptr.dtype][1]
    as_bits = op.literal_value != RMW_ADD and reg in "fd"   # exchange and bitwise ops move bits
    if as_bits:
        reg = "r" if reg == "f" else "l"

    def codegen(context, builder, sig, args):
        ret = context.get_value_type(ptr.dtype)
        value = context.cast(builder, args[2], sig.args[2], ptr.dtype)
        if as_bits:
            bits = ir.IntType(32 if reg == "r" else 64)
            old = _asm(builder, text, f"={reg},l,{reg},~{{memory}}", bits, [args[1], builder.bitcast(value, bits)])
            return builder.bitcast(old, ret)
        return _asm(builder, text, f"={reg},l,{reg},~{{memory}}", ret, [args[1], value])
    return ptr.dtype(op, ptr, value), codegen


@intrinsic
def _atom_cas(typingctx, ptr, cond, value):
    kind, reg = _PTX_TYPES[ptr.dtype]
    kind = kind.replace("f", "b")
    reg = {"f": "r", "d": "l"}.get(reg, reg)

    def codegen(context, builder, sig, args):
        ret = context.get_value_type(ptr.dtype)
        cond = context.cast(builder, args[1], sig.args[1], ptr.dtype)
        value = context.cast(builder, args[2], sig.args[2], ptr.dtype)
        text = f"atom.sys.global.cas.{kind} $0, [$1], $2, $3;"
        if ret in (ir.FloatType(), ir.DoubleType()):
            bits = ir.IntType(32 if reg == "r" else 64)
            old = _asm(builder, text, f"={reg},l,{reg},{reg},~{{memory}}", bits,
                       [args[0], builder.bitcast(cond, bits), builder.bitcast(value, bits)])
            return builder.bitcast(old, ret)
        return _asm(builder, text, f"={reg},l,{reg},{reg},~{{memory}}", ret, [args[0], cond, value])
    return ptr.dtype(ptr, cond, value), codegen


@intrinsic
def _fence_sc_sys(typingctx):
    def codegen(context, builder, sig, args):
        _asm(builder, "fence.sc.sys;", "~{memory}", ir.VoidType(), [])
        return context.get_dummy_value()
    return types.void(), codegen


@intrinsic
def _globaltimer(typingctx):
    def codegen(context, builder, sig, args):
        return _asm(builder, "mov.u64 $0, %globaltimer;", "=l", ir.IntType(64), [])
    return types.int64(), codegen


@intrinsic
def _trap(typingctx):
    def codegen(context, builder, sig, args):
        _asm(builder, "trap;", "", ir.VoidType(), [])
        return context.get_dummy_value()
    return types.void(), codegen


# State and teams --------------------------------------------------------------------

@jit
def my_pe(fn):
    return _state_word(_MY_PE)


@jit
def n_pes(fn):
    return _state_word(_N_PES)


@jit
def _team_row(team):
    """Index of team slot ``team``'s first word: size, my rank, then n_pes world PEs."""
    n = _state_word(_N_PES)
    return _PEER_BASES + n + team * (n + 2)


@jit
def team_size(team, fn):
    return _state_word(_team_row(team))


@jit
def team_rank(team, fn):
    return _state_word(_team_row(team) + 1)


@jit
def team_pe(team, rank, fn):
    return _state_word(_team_row(team) + 2 + rank)


@jit
def team_index_of(team, pe, fn):
    row = _team_row(team)
    for rank in range(_state_word(row)):
        if _state_word(row + 2 + rank) == pe:
            return rank
    return -1


# Arrays -----------------------------------------------------------------------------

@jit_array
def local(arr, fn, what):
    return _flat_view(_address_of(arr), arr)


plain = local


@jit_array
def peer(arr, pe, fn, what):
    """PE ``pe``'s copy of symmetric ``arr``: the same heap offset in its mapped heap."""
    offset = _address_of(arr) - np.uint64(_state_word(_HEAP_BASE))
    base = np.uint64(_state_word(_PEER_BASES + pe))
    return _flat_view(base + offset, arr)


@jit_array
def barrier_words(team, fn):
    n = _state_word(_N_PES)
    address = np.uint64(_state_word(_HEAP_BASE) + team * (n + 1) * 8)
    return _int64_view(address, n + 1)


@jit
def copy_strided(dst, dst_stride, src, src_stride, nelems, rank, size):
    for i in range(rank, nelems, size):
        dst[i * dst_stride] = src[i * src_stride]


@jit
def _combine(op, a, b):
    if op == _SUM:
        return a + b
    if op == _PROD:
        return a * b
    if op == _MIN:
        return a if a < b else b
    if op == _MAX:
        return a if a > b else b
    return _bitwise(op, a, b)


@jit
def reduce_from_peers(fn, dst, dst_lo, src, src_lo, count, team, op, rank, size):
    """dst[dst_lo + i] = op over every member's src[src_lo + i]: this PE's own value first,
    then the others in team-rank order (so ``dst`` may be ``src``)."""
    me = team_rank(team, fn)
    members = team_size(team, fn)
    mine = local(src, fn, "src")
    for i in range(rank, count, size):
        acc = mine[src_lo + i]
        for r in range(members):
            if r != me:
                acc = _combine(op, acc, peer(src, team_pe(team, r, fn), fn, "src")[src_lo + i])
        dst[dst_lo + i] = acc


# Other PEs: load/store into their mapped heaps (no remote transport on the GPU yet) ----

@jit
def transfer(fn, to_peer, pe, dst, dst_stride, src, src_stride, nelems, rank, size, nbi):
    if to_peer:
        copy_strided(peer(dst, pe, fn, "dest"), dst_stride, src, src_stride, nelems, rank, size)
    else:
        copy_strided(dst, dst_stride, peer(src, pe, fn, "src"), src_stride, nelems, rank, size)


@jit
def remote_store(fn, arr, pe, value, what, release):
    if release:
        store_release(peer(arr, pe, fn, what), value, fn, what)
    else:
        peer(arr, pe, fn, what)[0] = value


@jit
def remote_load(fn, arr, pe, what):
    return peer(arr, pe, fn, what)[0]


@jit
def remote_rmw(fn, arr, pe, op, value, what, fetch):
    return atomic_rmw(peer(arr, pe, fn, what), op, value, fn, what)


@jit
def remote_compare_swap(fn, arr, pe, cond, value, what):
    return atomic_compare_swap(peer(arr, pe, fn, what), cond, value, fn, what)


@jit
def remote_atomic_load(fn, arr, pe, what):
    return load_acquire(peer(arr, pe, fn, what), fn, what)


# Memory ordering and atomics --------------------------------------------------------

@jit
def load_acquire(arr, fn, what):
    return _ld_acquire(_pointer_like(_address_of(arr), arr))


@jit
def store_release(arr, value, fn, what):
    _st_release(_pointer_like(_address_of(arr), arr), value)


@jit
def fence(fn):
    _fence_sc_sys()


quiet = fence   # every store to a peer is issued at the call on the load/store path


@jit
def atomic_rmw(arr, op, value, fn, what):
    ptr = _pointer_like(_address_of(arr), arr)
    if op == RMW_XCHG:
        return _atom(RMW_XCHG, ptr, value)
    if op == RMW_ADD:
        return _atom(RMW_ADD, ptr, value)
    if op == RMW_AND:
        return _atom(RMW_AND, ptr, value)
    if op == RMW_OR:
        return _atom(RMW_OR, ptr, value)
    return _atom(RMW_XOR, ptr, value)


@jit
def atomic_compare_swap(arr, cond, value, fn, what):
    return _atom_cas(_pointer_like(_address_of(arr), arr), cond, value)


# Groups and waits -------------------------------------------------------------------

@jit
def group_rank_and_size(scope, fn):
    if scope == THREAD:
        return 0, 1
    block = cuda.blockDim.x * cuda.blockDim.y * cuda.blockDim.z
    tid = cuda.threadIdx.x + cuda.blockDim.x * (cuda.threadIdx.y + cuda.blockDim.y * cuda.threadIdx.z)
    if scope == BLOCK:
        return tid, block
    first = tid // WARP_SIZE * WARP_SIZE
    return tid - first, min(WARP_SIZE, block - first)


@jit
def group_sync(scope, fn):
    if scope == BLOCK:
        cuda.syncthreads()
    elif scope != THREAD:
        cuda.syncwarp()


_compare = jit(compare)


@jit
def _pause(started):
    """Back off; stop the kernel once PGAS_TIMEOUT has passed since ``started``."""
    cuda.nanosleep(200)
    if _globaltimer() - started > _state_word(_TIMEOUT_NS):
        _trap()


@jit
def wait_for_value(fn, word, what, cmp, value):
    started = _globaltimer()
    while True:
        seen = load_acquire(word, fn, what)
        if _compare(seen, cmp, value):
            return seen
        _pause(started)


@jit
def wait_for_arrivals(fn, team, words, epoch):
    started = _globaltimer()
    for rank in range(team_size(team, fn)):
        while load_acquire(words[rank:rank + 1], fn, "barrier flag") < epoch:
            _pause(started)


# Checks: done by the host and the simulator; nothing on the GPU ---------------------

@jit
def check_not_empty(fn, what, arr):
    pass


@jit
def check_copy(fn, dst, dst_name, dst_stride, src, src_name, src_stride, nelems):
    pass


@jit
def check_cmp(fn, cmp):
    pass


@jit
def check_signal(fn, signal):
    pass


@jit
def check_sig_op(fn, sig_op):
    pass


@jit
def check_size(fn, what, have, need, why):
    pass


@jit
def check_root(fn, root, team_size):
    pass


@jit
def check_dtypes_match(fn, dest, src):
    pass


@jit
def check_reduction(fn, op, arr):
    pass
