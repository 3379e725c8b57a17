"""The NIC's decoder of a doorbell's worth of WQEs, compiled (llvmlite, as ``_ibgda_code``).

Under the simulator a PE's NIC thread shares one interpreter lock with every simulated
device thread. Decoding a batch with numpy took about 40 calls (90 us alone) and was
preempted between them: about 2 ms of wall time per batch at 64 threads (docs/benchmarks.md).
This is one call, with the lock held, for any mix of one- and two-block WQEs.

``decode_wqes(sq, depth, index, blocks, out)`` reads the WQEs in the ``blocks`` basic
blocks from WQE index ``index`` of send queue ``sq`` (``depth`` blocks, wrapping round)
into ``out``, an array of ``mlx5.WQE_FIELDS`` records, and returns how many it wrote.
"""
from __future__ import annotations

import ctypes

import numpy as np
from llvmlite import ir

from ..core.native._llvm import bswap, built_once, compile_ir
from . import _mlx5 as mlx5

__all__ = ["decoder", "read_wqes"]

_I1, _I8, _I32, _I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
_BYTES = _I8.as_pointer()
_FIELD = {name: (offset, dtype) for name, (dtype, offset) in mlx5.WQE_FIELDS.fields.items()}


def _c(value: int, typ=_I64):
    return ir.Constant(typ, value)


def _build(module) -> None:
    fn = ir.Function(module, ir.FunctionType(_I64, [_BYTES, _I64, _I64, _I64, _BYTES]), "decode_wqes")
    sq, depth, index, blocks, out = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    loop, body, done = (fn.append_basic_block(n) for n in ("loop", "body", "done"))
    entry = b.block
    b.branch(loop)
    b.position_at_end(loop)
    position = b.phi(_I64)              # blocks read so far
    rows = b.phi(_I64)                  # WQEs written so far
    position.add_incoming(_c(0), entry)
    rows.add_incoming(_c(0), entry)
    b.cbranch(b.icmp_unsigned("<", position, blocks), body, done)

    b.position_at_end(body)
    start = b.add(index, position)

    def at(offset: int, typ):
        block = b.urem(b.add(start, _c(offset // mlx5.BB)), depth)
        byte = b.add(b.mul(block, _c(mlx5.BB)), _c(offset % mlx5.BB))
        return b.bitcast(b.gep(sq, [byte]), typ.as_pointer())

    def big_endian(offset: int, typ):
        value = bswap(b, b.load(at(offset, typ), align=1))
        return b.zext(value, _I64) if typ.width < 64 else value

    def be32(offset):
        return big_endian(offset, _I32)

    def be64(offset):
        return big_endian(offset, _I64)

    record = b.gep(out, [b.mul(rows, _c(mlx5.WQE_FIELDS.itemsize))])

    def put(name: str, value, element: int = 0):
        offset, dtype = _FIELD[name]
        width = (dtype.base.itemsize if dtype.subdtype else dtype.itemsize) * 8
        target = b.bitcast(b.gep(record, [_c(offset + element * width // 8)]), ir.IntType(width).as_pointer())
        if isinstance(value.type, ir.IntType) and value.type.width != width:
            value = b.trunc(value, ir.IntType(width)) if value.type.width > width else b.zext(value, ir.IntType(width))
        b.store(value, target, align=1)

    def select(condition, yes, no):
        return b.select(condition, yes, no)

    def equals(value, constant):
        return b.icmp_unsigned("==", value, _c(constant))

    ctrl0, ctrl1 = be32(0), be32(4)
    opcode, opmod = b.and_(ctrl0, _c(0xFF)), b.lshr(ctrl0, _c(24))
    ds = b.and_(ctrl1, _c(0xFF))
    two = b.icmp_unsigned(">", b.mul(ds, _c(16)), _c(mlx5.BB))      # the 8-byte masked compare-swap
    rw = b.or_(equals(opcode, mlx5.OP_RDMA_WRITE), equals(opcode, mlx5.OP_RDMA_READ))
    w32 = be32(32)
    inline = b.and_(equals(opcode, mlx5.OP_RDMA_WRITE), b.icmp_unsigned("!=", b.and_(w32, _c(mlx5.INLINE_FLAG)), _c(0)))
    masked = b.or_(equals(opcode, mlx5.OP_MASKED_CS), equals(opcode, mlx5.OP_MASKED_FA))
    four = b.and_(masked, equals(opmod, mlx5.OPMOD_EXT_ATOMIC_4))
    standard = b.or_(equals(opcode, mlx5.OP_ATOMIC_CS), equals(opcode, mlx5.OP_ATOMIC_FA))
    size = select(b.or_(standard, b.and_(masked, b.not_(four))), _c(8), select(four, _c(4), _c(0)))
    nbytes = select(inline, b.and_(w32, _c(~mlx5.INLINE_FLAG & 0xFFFFFFFF)),
                    select(rw, w32, select(two, be32(64), be32(48))))
    lkey = select(inline, _c(0), select(rw, be32(36), select(two, be32(68), be32(52))))
    laddr = select(inline, _c(0), select(rw, be64(40), select(two, be64(72), be64(56))))
    zero = _c(0)
    atomic = b.not_(rw)
    operands = [select(four, be32(32), select(atomic, be64(32), zero)),
                select(four, be32(36), select(atomic, be64(40), zero)),
                select(four, be32(40), select(b.and_(atomic, two), be64(48), zero)),
                select(four, be32(44), select(b.and_(atomic, two), be64(56), zero))]

    put("opcode", opcode)
    put("opmod", opmod)
    put("signaled", b.zext(b.icmp_unsigned("!=", b.and_(b.load(at(11, _I8)), _I8(mlx5.CQ_UPDATE)), _I8(0)), _I8))
    put("inline", b.zext(inline, _I8))
    put("index", b.and_(b.lshr(ctrl0, _c(8)), _c(0xFFFF)))
    put("qpn", b.lshr(ctrl1, _c(8)))
    put("ds", ds)
    put("rkey", be32(24))
    put("lkey", lkey)
    put("raddr", be64(16))
    put("laddr", laddr)
    put("nbytes", nbytes)
    put("size", size)
    put("length", select(b.icmp_unsigned(">", size, zero), size, nbytes))
    for k, operand in enumerate(operands):
        put("operands", operand, k)
    for k in range(mlx5.MAX_INLINE):       # the bytes of an inline write, as they are
        put("inline_data", select(inline, b.load(at(36 + k, _I8)), _I8(0)), k)

    following = select(two, _c(2), _c(1))
    position.add_incoming(b.add(position, following), b.block)
    rows.add_incoming(b.add(rows, _c(1)), b.block)
    b.branch(loop)

    b.position_at_end(done)
    b.ret(rows)


class _Compiled:
    def __init__(self):
        module = ir.Module("pgas_wqes")
        _build(module)
        self._engine = compile_ir(str(module))     # keeps the code alive
        # called with the interpreter lock held: one call, never preempted half way
        self.decode = ctypes.PYFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                                        ctypes.c_int64, ctypes.c_void_p)(
            self._engine.get_function_address("decode_wqes"))


_compiled = built_once(_Compiled)


def decoder():
    """``decode_wqes`` (built on first use; llvmlite errors propagate)."""
    return _compiled().decode


def read_wqes(sq: np.ndarray, index: int, blocks: int) -> np.ndarray:
    """Decode every WQE in the ``blocks`` basic blocks from WQE index ``index`` of ``sq``
    (a doorbell's worth): an ``mlx5.WQE_FIELDS`` array, in one compiled call."""
    out = np.zeros(blocks, mlx5.WQE_FIELDS)
    rows = decoder()(sq.__array_interface__["data"][0], sq.shape[0], index, blocks, out.__array_interface__["data"][0])
    return out[:rows]
