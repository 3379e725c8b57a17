"""The GPU instructions the cuda primitive layer is built from, as numba intrinsics.

Memory model (PTX, system scope, so peers on other GPUs and the CPU see it):

- ``ld_relaxed`` / ``st_relaxed``: strong (``.relaxed.sys``) loads and stores, what ``g``
  and ``p`` are: a loop around ``g`` re-reads memory (a weak load may be hoisted out of it,
  and a plain spin compiles to the non-coherent ``ld.global.nc``).
- ``load_codegen(..., "acquire", ...)``: what every wait polls with (``_cuda.load_acquire``).
- ``atomic`` / ``atomic_cas`` / ``ld_seq_cst``: sequentially consistent, as the device
  atomics are documented: ``fence.sc.sys`` then the ``.acquire`` atomic or load (the
  mapping libcu++ uses for ``memory_order_seq_cst``).

Every access takes an integer address and an array of the element type (``like``), so
the same intrinsic serves this PE's memory and a peer's mapped heap. Values of 8 and 16
bits travel in 16-bit registers; floats and booleans move as their bits.
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core.errors import TypingError
from numba.cuda import cgutils, nvvmutils
from numba.cuda.extending import intrinsic

from ..core._codes import RMW_ADD, RMW_AND, RMW_OR, RMW_XCHG, RMW_XOR
from ..core.native._cpu_atomics import check_dtype
from ..core._errors import PgasError
from ._error_record import FN_BYTES, TEXT_WORD, WHAT_BYTES, WHY_BYTES
from ._ir import constant_text

__all__ = ["inline_asm", "load_codegen", "name", "address_of", "address_codegen", "flat_view", "flat_or_none", "flat_codegen", "view_at",
           "array_at", "ld_relaxed", "ld_seq_cst", "st_relaxed", "atomic", "atomic_cas", "cast_like", "globaltimer",
           "read_globaltimer", "string_argument", "word_argument", "record_library", "call_record_error",
           "width_of", "to_bits", "from_bits"]

_I64 = ir.IntType(64)
_REGISTER = {8: "h", 16: "h", 32: "r", 64: "l"}


def inline_asm(builder, text, constraints, ret, args):
    """Emit one inline PTX statement (with side effects) and return its result."""
    fnty = ir.FunctionType(ret, [a.type for a in args])
    return builder.call(ir.InlineAsm(fnty, text, constraints, side_effect=True), args)


def width_of(context, dtype) -> int:
    return context.get_abi_sizeof(context.get_data_type(dtype)) * 8


def to_bits(context, builder, dtype, value):
    """``value`` of ``dtype`` as the integer register its bits travel in."""
    width = width_of(context, dtype)
    data = context.get_value_as_data(builder, dtype, value)
    bits = data if isinstance(data.type, ir.IntType) else builder.bitcast(data, ir.IntType(width))
    return builder.zext(bits, ir.IntType(16)) if width == 8 else bits


def from_bits(context, builder, dtype, bits):
    width = width_of(context, dtype)
    if width == 8:
        bits = builder.trunc(bits, ir.IntType(8))
    data_type = context.get_data_type(dtype)
    data = bits if isinstance(data_type, ir.IntType) else builder.bitcast(bits, data_type)
    return context.get_data_as_value(builder, dtype, data)


# Names, addresses and arrays ----------------------------------------------------------

@intrinsic
def name(typingctx, text):
    """A device function's name as a plain string rather than a literal one: the helpers it
    is passed to are then compiled once for every public function, not once per name
    (its characters stay a constant in the PTX, which the error record copies)."""
    if not isinstance(text, (types.StringLiteral, types.UnicodeType)):
        return None

    def codegen(context, builder, sig, args):
        return context.cast(builder, args[0], sig.args[0], types.unicode_type)
    return types.unicode_type(text), codegen


@intrinsic
def address_of(typingctx, arr):
    """The address of ``arr``'s first element."""
    def codegen(context, builder, sig, args):
        return address_codegen(context, builder, sig.args[0], args[0])
    return types.uint64(arr), codegen


def address_codegen(context, builder, array_type, array):
    """The address (i64) of ``array``'s first element."""
    return builder.ptrtoint(context.make_array(array_type)(context, builder, value=array).data, _I64)


def array_at(context, builder, array_type, address, count):
    """A 1-D C-contiguous array struct of ``count`` elements at integer ``address``."""
    out = context.make_array(array_type)(context, builder)
    itemsize = context.get_constant(types.intp, context.get_abi_sizeof(context.get_data_type(array_type.dtype)))
    data = builder.inttoptr(address, out.data.type)
    context.populate_array(out, data=data, shape=[count], strides=[itemsize], itemsize=itemsize, meminfo=None)
    return out._getvalue()


@intrinsic
def flat_view(typingctx, address, arr):
    """``arr``'s elements as a 1-D C array at ``address`` (built in place: no IR to inline)."""
    result = types.Array(arr.dtype, 1, "C")

    def codegen(context, builder, sig, args):
        count = context.make_array(sig.args[1])(context, builder, value=args[1]).nitems
        return array_at(context, builder, result, args[0], count)
    return result(types.uint64, arr), codegen


@intrinsic
def flat_or_none(typingctx, arr, fn, what):
    """An array's elements as a 1-D C array in place, or None for None (chosen by the type,
    so that None never becomes an Optional array). ``fn``/``what``: the primitive layer's
    arguments of ``local``/``plain_or_none``, unused here."""
    if isinstance(arr, types.NoneType):
        return arr(arr, fn, what), lambda context, builder, sig, args: context.get_constant_null(sig.return_type)
    if not isinstance(arr, types.Array):
        return None
    result = types.Array(arr.dtype, 1, "C")

    def codegen(context, builder, sig, args):
        return flat_codegen(context, builder, sig.args[0], args[0])
    return result(arr, fn, what), codegen


def flat_codegen(context, builder, array_type, array):
    """``array`` (of ``array_type``) as a 1-D C array of its elements, in place."""
    source = context.make_array(array_type)(context, builder, value=array)
    result = types.Array(array_type.dtype, 1, "C")
    return array_at(context, builder, result, builder.ptrtoint(source.data, _I64), source.nitems)


@intrinsic
def view_at(typingctx, address, arr):
    """An array of ``arr``'s type, shape and strides at ``address``; where ``address`` is 0,
    every extent is 0 (an empty array, as nvshmem_ptr's NULL)."""
    def codegen(context, builder, sig, args):
        source = context.make_array(sig.args[1])(context, builder, value=args[1])
        out = context.make_array(sig.return_type)(context, builder)
        null = builder.icmp_unsigned("==", args[0], ir.Constant(_I64, 0))
        zero = context.get_constant(types.intp, 0)
        shape = [builder.select(null, zero, extent) for extent in cgutils.unpack_tuple(builder, source.shape)]
        context.populate_array(out, data=builder.inttoptr(args[0], out.data.type), shape=shape,
                               strides=cgutils.unpack_tuple(builder, source.strides), itemsize=source.itemsize,
                               meminfo=None)
        return out._getvalue()
    return arr(types.uint64, arr), codegen


@intrinsic
def cast_like(typingctx, like, value):
    """``value`` converted to the type of ``like`` (compare a signal in its own integer type,
    not through float64 as numba unifies uint64 with int64)."""
    def codegen(context, builder, sig, args):
        return context.cast(builder, args[1], sig.args[1], sig.args[0])
    return like(like, value), codegen


# Loads, stores, atomics -----------------------------------------------------------------

def load_codegen(context, builder, order: str, dtype, address):
    """The element of ``dtype`` at ``address`` (an int64 value), loaded ``order``
    (relaxed, acquire or seq_cst)."""
    fence = "fence.sc.sys;\n\t" if order == "seq_cst" else ""
    semantics = "relaxed" if order == "relaxed" else "acquire"
    width = width_of(context, dtype)
    bits = inline_asm(builder, f"{fence}ld.{semantics}.sys.b{width} $0, [$1];", f"={_REGISTER[width]},l,~{{memory}}",
                      ir.IntType(max(width, 16)), [address])
    return from_bits(context, builder, dtype, bits)


def _load(order: str):
    @intrinsic
    def load(typingctx, address, like):
        def codegen(context, builder, sig, args):
            return load_codegen(context, builder, order, like.dtype, args[0])
        return like.dtype(types.uint64, like), codegen
    load.__doc__ = f"The element at ``address`` (``like``'s dtype), loaded {order}."
    return load


def _store(semantics: str):
    @intrinsic
    def store(typingctx, address, like, value):
        dtype = like.dtype

        def codegen(context, builder, sig, args):
            width = width_of(context, dtype)
            bits = to_bits(context, builder, dtype, context.cast(builder, args[2], sig.args[2], dtype))
            inline_asm(builder, f"st.{semantics}.sys.b{width} [$0], $1;", f"l,{_REGISTER[width]},~{{memory}}",
                       ir.VoidType(), [args[0], bits])
            return context.get_dummy_value()
        return types.void(types.uint64, like, value), codegen
    store.__doc__ = f"Store ``value`` at ``address`` ({semantics})."
    return store


ld_relaxed, ld_seq_cst = _load("relaxed"), _load("seq_cst")
st_relaxed = _store("relaxed")

_ATOM_OPS = {RMW_XCHG: "exch", RMW_ADD: "add", RMW_AND: "and", RMW_OR: "or", RMW_XOR: "xor"}
_ADD_TYPES = {types.int32: "s32", types.uint32: "u32", types.int64: "u64", types.uint64: "u64",
              types.float32: "f32", types.float64: "f64"}
_SEQ_CST = "fence.sc.sys;\n\tatom.acquire.sys"


def _atomic_word(dtype):
    if dtype not in _ADD_TYPES:
        raise TypingError(f"pgas.device atomics take int32, uint32, int64, uint64, float32 or float64, "
                          f"got {dtype}")


def _bitwise_word(rmw: str, dtype):
    """The simulator's dtype rule for atomic ``rmw`` (and/or/xor: integers only), as a
    TypingError naming both functions that reach it."""
    try:
        check_dtype(str(dtype), f"pgas.device.atomic_{rmw} / atomic_fetch_{rmw}", "dest", rmw)
    except PgasError as exc:
        raise TypingError(str(exc)) from None


@intrinsic
def atomic(typingctx, op, address, like, value):
    """Sequentially consistent atomic ``op`` (an RMW_* literal) at ``address``; the old value."""
    if not isinstance(op, types.IntegerLiteral):
        return None
    dtype = like.dtype
    _atomic_word(dtype)
    rmw = _ATOM_OPS[op.literal_value]
    _bitwise_word(rmw, dtype)
    exact = rmw == "add"    # add does arithmetic in the type (atom.add.f32/.f64 for floats); the others move bits

    def codegen(context, builder, sig, args):
        width = width_of(context, dtype)
        reg = {types.float32: "f", types.float64: "d"}.get(dtype, _REGISTER[width]) if exact else _REGISTER[width]
        kind = _ADD_TYPES[dtype] if exact else f"b{width}"
        value = context.cast(builder, args[3], sig.args[3], dtype)
        operand = value if exact else to_bits(context, builder, dtype, value)
        old = inline_asm(builder, f"{_SEQ_CST}.{rmw}.{kind} $0, [$1], $2;", f"={reg},l,{reg},~{{memory}}",
                         operand.type, [args[1], operand])
        return old if exact else from_bits(context, builder, dtype, old)
    return dtype(op, types.uint64, like, value), codegen


@intrinsic
def atomic_cas(typingctx, address, like, cond, value):
    """Sequentially consistent compare-and-swap at ``address`` (bit patterns); the old value."""
    dtype = like.dtype
    _atomic_word(dtype)

    def codegen(context, builder, sig, args):
        width = width_of(context, dtype)
        reg = _REGISTER[width]
        cond, value = (to_bits(context, builder, dtype, context.cast(builder, v, t, dtype))
                       for v, t in ((args[2], sig.args[2]), (args[3], sig.args[3])))
        old = inline_asm(builder, f"{_SEQ_CST}.cas.b{width} $0, [$1], $2, $3;", f"={reg},l,{reg},{reg},~{{memory}}",
                         cond.type, [args[0], cond, value])
        return from_bits(context, builder, dtype, old)
    return dtype(types.uint64, like, cond, value), codegen


# Threads, time, errors ------------------------------------------------------------------

def read_globaltimer(builder):
    """The GPU's nanosecond clock (an int64 value)."""
    return inline_asm(builder, "mov.u64 $0, %globaltimer;", "=l", _I64, [])


@intrinsic
def globaltimer(typingctx):
    def codegen(context, builder, sig, args):
        return read_globaltimer(builder)
    return types.int64(), codegen


def string_argument(context, builder, typ, value):
    """(address, int64 length) of an error record's text: a runtime string, a string literal,
    an array (its dtype's name), or a plain Python string as ``typ``."""
    if isinstance(typ, types.UnicodeType):
        string = context.make_helper(builder, typ, value=value)
        return [string.data, context.cast(builder, string.length, types.intp, types.int64)]
    text = constant_text(typ)
    encoded = text.encode()
    return [context.insert_string_const_addrspace(builder, text), ir.Constant(_I64, len(encoded))]


def word_argument(context, builder, typ, value):
    """``value``'s bits as an int64 (integers widened, floats reinterpreted)."""
    if isinstance(typ, types.Float):
        raw = builder.bitcast(value, ir.IntType(width_of(context, typ)))
        return builder.zext(raw, _I64) if raw.type != _I64 else raw
    return context.cast(builder, value, typ, types.int64)


def _packed_index(builder, register):
    """x | y << 21 | z << 42 of a special register triple (tid or ctaid)."""
    total = ir.Constant(_I64, 0)
    for shift, axis in ((0, "x"), (21, "y"), (42, "z")):
        part = builder.zext(nvvmutils.call_sreg(builder, f"{register}.{axis}"), _I64)
        total = builder.or_(total, builder.shl(part, ir.Constant(_I64, shift)))
    return total


def _record_error_body(context, function):
    """``pgas_record_error(mailbox, pe, kind, fn, fn_length, what, what_length, why,
    why_length, a, b, c)``: write an error record (layout: ``_error_record.py``) at
    ``mailbox`` unless another thread got there first, then stop the kernel with ``trap``."""
    builder = ir.IRBuilder(function.append_basic_block("entry"))
    args = function.args
    base = builder.inttoptr(args[0], _I64.as_pointer())

    def word(index):
        return builder.gep(base, [ir.Constant(ir.IntType(32), index)])

    claimed = builder.cmpxchg(word(0), ir.Constant(_I64, 0), ir.Constant(_I64, 1), "monotonic", "monotonic")
    with builder.if_then(builder.extract_value(claimed, 1)):
        for index, value in ((1, args[2]), (2, args[9]), (3, args[10]), (4, args[11]), (5, args[1]),
                             (6, _packed_index(builder, "tid")), (7, _packed_index(builder, "ctaid"))):
            builder.store(value, word(index))
        text_base = builder.bitcast(word(TEXT_WORD), ir.IntType(8).as_pointer())
        lengths, offset = ir.Constant(_I64, 0), 0
        for slot, capacity in enumerate((FN_BYTES, WHAT_BYTES, WHY_BYTES)):
            source, length = args[3 + 2 * slot], args[4 + 2 * slot]
            length = builder.select(builder.icmp_signed(">", length, ir.Constant(_I64, capacity)),
                                    ir.Constant(_I64, capacity), length)
            cgutils.memcpy(builder, builder.gep(text_base, [ir.Constant(_I64, offset)]), source, length)
            lengths = builder.or_(lengths, builder.shl(length, ir.Constant(_I64, 16 * slot)))
            offset += capacity
        builder.store(lengths, word(8))
        inline_asm(builder, "fence.sc.sys;\n\tst.release.sys.b64 [$0], $1;", "l,l,~{memory}", ir.VoidType(),
                   [builder.ptrtoint(word(0), _I64), ir.Constant(_I64, 2)])
    inline_asm(builder, "trap;", "", ir.VoidType(), [])
    builder.ret_void()


_record_libraries: dict = {}   # codegen -> the library holding pgas_record_error


def record_library(context, fnty):
    """The one code library that defines ``pgas_record_error``: every kernel links it,
    rather than each helper's module carrying (and NVVM reading) a copy of its body."""
    codegen = context.codegen()
    if codegen not in _record_libraries:
        module = context.create_module("pgas_record_error")
        function = ir.Function(module, fnty, "pgas_record_error")
        function.attributes.add("noinline")
        _record_error_body(context, function)
        library = codegen.create_library("pgas_record_error")
        library.add_ir_module(module)
        library.finalize()
        _record_libraries[codegen] = library
    return _record_libraries[codegen]


def call_record_error(builder, context, arguments):
    """Call ``pgas_record_error`` (``noinline``, so a failure site costs a call) with its
    arguments (see ``_record_error_body``)."""
    fnty = ir.FunctionType(ir.VoidType(), [a.type for a in arguments])
    context.active_code_library.add_linking_library(record_library(context, fnty))
    builder.call(cgutils.get_or_insert_function(builder.module, fnty, "pgas_record_error"), arguments)
