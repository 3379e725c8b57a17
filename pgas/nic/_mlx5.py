"""The mlx5 work-queue layout the emulated NIC executes: WQEs, CQEs, opcodes.

Byte-exact to ConnectX's (rdma-core ``mlx5dv.h``): a send queue is a ring of 64-byte
basic blocks (WQEBBs), every field big-endian. A WQE is a control segment, a remote-address
segment, then a data segment (RDMA write/read), inline data (small writes) or an atomic
segment plus a data segment for the fetched value. The 8-byte masked compare-swap needs 80
bytes: it takes two basic blocks. Completions are 64-byte CQEs whose ``op_own`` carries the
opcode (13: error) and an owner bit that flips on each pass round the queue.

The CPU proxy writes WQEs with ``write_wqe``; the GPU-initiated path writes the same bytes
from compiled code (``_ibgda_code``; tests/test_ibgda.py compares them). The NIC decodes a
doorbell's worth at once with ``_wqe_code.read_wqes``. Its collapsed CQs hold one CQE that the NIC
overwrites (``write_collapsed_cqe``).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from ..core._errors import PgasError

__all__ = ["BB", "OP_RDMA_WRITE", "OP_RDMA_READ", "OP_ATOMIC_CS", "OP_ATOMIC_FA", "OP_MASKED_CS", "OP_MASKED_FA",
           "atomic_result", "atomic_size", "OPMOD_EXT_ATOMIC_4", "OPMOD_EXT_ATOMIC_8", "CQ_UPDATE", "MAX_INLINE",
           "MAX_MESSAGE", "check_message", "SYNDROME_LOCAL_PROT", "SYNDROME_REMOTE_INVALID", "SYNDROME_REMOTE_ACCESS",
           "SYNDROME_TRANSPORT", "SYNDROME_LOCAL_OP", "SYNDROME_REMOTE_OP", "SYNDROMES", "CQE_REQ", "CQE_REQ_ERR",
           "Wqe", "write_wqe", "read_wqe", "write_cqe",
           "read_cqe", "empty_cq", "write_collapsed_cqe", "refusal", "WQE_FIELDS", "OPCODE_NAMES"]

BB = 64                      # bytes per basic block
OP_RDMA_WRITE = 0x08
OP_RDMA_READ = 0x10
OP_ATOMIC_CS = 0x11          # 8-byte compare-swap
OP_ATOMIC_FA = 0x12          # 8-byte fetch-add
OP_MASKED_CS = 0x14          # masked compare-swap: swap/set/and/or, 4-byte compare-swap
OP_MASKED_FA = 0x15          # masked fetch-add: 4-byte add; xor (every bit its own field)
OPMOD_EXT_ATOMIC_4 = 0x08    # masked atomics on 4 bytes
OPMOD_EXT_ATOMIC_8 = 0x09    # masked atomics on 8 bytes
CQ_UPDATE = 0x08             # fm_ce_se: write a CQE for this WQE
INLINE_FLAG = 0x80000000
# The bytes one RDMA write or read carries here. A data segment's byte count has 31 bits
# (the top one marks inline data), so larger copies are split into messages of this size,
# as NVSHMEM does; a larger one is refused (``check_message``), never truncated.
MAX_MESSAGE = 1 << 30
MAX_INLINE = BB - 36         # inline bytes that fit the first basic block with ctrl + raddr

CQE_REQ, CQE_REQ_ERR, CQE_INVALID = 0, 13, 0xF
SYNDROME_LOCAL_PROT = 0x04
SYNDROME_REMOTE_INVALID = 0x12
SYNDROME_REMOTE_ACCESS = 0x13
SYNDROME_TRANSPORT = 0x15        # transport retry counter exceeded: the request never reached the peer
SYNDROME_LOCAL_OP = 0x02          # local QP operation error: the NIC could not reach the local memory
SYNDROME_REMOTE_OP = 0x14         # remote operation error: the target could not reach its memory
SYNDROMES = {SYNDROME_LOCAL_PROT: "local protection error (lkey or local address not registered)",
             SYNDROME_REMOTE_INVALID: "remote invalid request (unknown opcode or size)",
             SYNDROME_REMOTE_ACCESS: "remote access error (rkey unknown, or the address range is "
                                     "outside the registered region)",
             SYNDROME_TRANSPORT: "transport error (the request could not be sent to the peer)",
             SYNDROME_LOCAL_OP: "local operation error (the NIC could not copy the local GPU memory)",
             SYNDROME_REMOTE_OP: "remote operation error (the target could not reach its GPU memory)"}
OPCODE_NAMES = {OP_RDMA_WRITE: "RDMA write", OP_RDMA_READ: "RDMA read", OP_ATOMIC_CS: "compare-swap",
                OP_ATOMIC_FA: "fetch-add", OP_MASKED_CS: "masked compare-swap", OP_MASKED_FA: "masked fetch-add"}

_CTRL = struct.Struct(">IIBxxBI")          # opmod_idx_opcode, qpn_ds, signature, fm_ce_se, imm
_RADDR = struct.Struct(">QIxxxx")          # raddr, rkey
_DATA = struct.Struct(">IIQ")              # byte_count, lkey, addr
_ATOMIC = struct.Struct(">QQ")             # swap_add, compare (8-byte CS/FA; masked FA 8: add, boundary)
_MASKED_CS_8 = struct.Struct(">QQQQ")      # swap, compare, swap_mask, compare_mask
_MASKED_4 = struct.Struct(">IIII")         # CS: swap, compare, swap_mask, compare_mask; FA: add, boundary, 0, 0
_CQE_TAIL = struct.Struct(">IHBB")         # at 56: opcode/qpn, wqe_counter, signature, op_own
_CQE_SYNDROME = 55
_CQE_BYTE_CNT = struct.Struct(">I")        # at 44


@dataclass
class Wqe:
    """A decoded WQE (the fields the NIC acts on). ``operands`` are the atomic segment's
    words: (swap_add, compare) or (swap, compare, swap_mask, compare_mask) or (add, boundary)."""

    opcode: int
    opmod: int
    index: int
    qpn: int
    ds: int
    signaled: bool
    raddr: int
    rkey: int
    lkey: int = 0
    laddr: int = 0
    nbytes: int = 0
    inline: bytes | None = None
    operands: tuple = ()

    @property
    def blocks(self) -> int:
        """Basic blocks the WQE occupies."""
        return (self.ds * 16 + BB - 1) // BB

    @property
    def atomic_size(self) -> int:
        """Operand size of an atomic (4 or 8 bytes); 0 for RDMA reads and writes."""
        return atomic_size(self.opcode, self.opmod)


def atomic_size(opcode: int, opmod: int) -> int:
    """Operand size of atomic ``opcode`` with ``opmod`` (4 or 8 bytes); 0 for RDMA reads and writes."""
    if opcode in (OP_ATOMIC_CS, OP_ATOMIC_FA):
        return 8
    if opcode in (OP_MASKED_CS, OP_MASKED_FA):
        return 4 if opmod == OPMOD_EXT_ATOMIC_4 else 8
    return 0


def write_wqe(sq: np.ndarray, index: int, qpn: int, opcode: int, raddr: int, rkey: int, *,
              opmod: int = 0, lkey: int = 0, laddr: int = 0, nbytes: int = 0, inline: bytes | None = None,
              operands: tuple = (), signaled: bool = True) -> int:
    """Write one WQE at WQE index ``index`` of send queue ``sq`` (uint8, depth x 64); returns
    the number of basic blocks it took."""
    if inline is not None:
        ds = (36 + len(inline) + 15) // 16
    elif opcode == OP_MASKED_CS and opmod == OPMOD_EXT_ATOMIC_8:
        ds = 5
    elif opcode in (OP_RDMA_WRITE, OP_RDMA_READ):
        ds = 3
    else:
        ds = 4
    blocks = (ds * 16 + BB - 1) // BB
    buf = bytearray(blocks * BB)
    _CTRL.pack_into(buf, 0, (opmod << 24) | ((index & 0xFFFF) << 8) | opcode, (qpn << 8) | ds, 0,
                    CQ_UPDATE if signaled else 0, 0)
    _RADDR.pack_into(buf, 16, raddr, rkey)
    if inline is not None:
        struct.pack_into(">I", buf, 32, len(inline) | INLINE_FLAG)
        buf[36:36 + len(inline)] = inline
    elif opcode in (OP_RDMA_WRITE, OP_RDMA_READ):
        _DATA.pack_into(buf, 32, nbytes, lkey, laddr)
    elif ds == 5:
        _MASKED_CS_8.pack_into(buf, 32, *operands)
        _DATA.pack_into(buf, 64, 8, lkey, laddr)
    else:
        if opmod == OPMOD_EXT_ATOMIC_4:
            _MASKED_4.pack_into(buf, 32, *(tuple(operands) + (0, 0, 0, 0))[:4])
        else:
            _ATOMIC.pack_into(buf, 32, *operands)
        _DATA.pack_into(buf, 48, 4 if opmod == OPMOD_EXT_ATOMIC_4 else 8, lkey, laddr)
    depth = sq.shape[0]
    for b in range(blocks):   # a WQE may wrap round the end of the queue
        sq[(index + b) % depth] = np.frombuffer(buf, np.uint8, BB, b * BB)
    return blocks


def _read_blocks(sq: np.ndarray, index: int, blocks: int) -> bytes:
    depth = sq.shape[0]
    return b"".join(sq[(index + b) % depth].tobytes() for b in range(blocks))


def read_wqe(sq: np.ndarray, index: int) -> Wqe:
    """Decode the WQE at WQE index ``index`` of ``sq``."""
    first = sq[index % sq.shape[0]].tobytes()
    opmod_idx_opcode, qpn_ds, _, fm_ce_se, _ = _CTRL.unpack_from(first, 0)
    ds = qpn_ds & 0xFF
    blocks = (ds * 16 + BB - 1) // BB
    data = first if blocks == 1 else _read_blocks(sq, index, blocks)
    raddr, rkey = _RADDR.unpack_from(data, 16)
    wqe = Wqe(opcode=opmod_idx_opcode & 0xFF, opmod=opmod_idx_opcode >> 24, index=(opmod_idx_opcode >> 8) & 0xFFFF,
              qpn=qpn_ds >> 8, ds=ds, signaled=bool(fm_ce_se & CQ_UPDATE), raddr=raddr, rkey=rkey)
    if wqe.opcode in (OP_RDMA_WRITE, OP_RDMA_READ):
        (count,) = struct.unpack_from(">I", data, 32)
        if count & INLINE_FLAG:
            wqe.nbytes = count & ~INLINE_FLAG
            wqe.inline = data[36:36 + wqe.nbytes]
        else:
            wqe.nbytes, wqe.lkey, wqe.laddr = _DATA.unpack_from(data, 32)
    elif ds == 5:
        wqe.operands = _MASKED_CS_8.unpack_from(data, 32)
        wqe.nbytes, wqe.lkey, wqe.laddr = _DATA.unpack_from(data, 64)
    else:
        if wqe.opmod == OPMOD_EXT_ATOMIC_4:
            words = _MASKED_4.unpack_from(data, 32)
            wqe.operands = words if wqe.opcode == OP_MASKED_CS else words[:2]
        else:
            wqe.operands = _ATOMIC.unpack_from(data, 32)
        wqe.nbytes, wqe.lkey, wqe.laddr = _DATA.unpack_from(data, 48)
    return wqe


# Decoded WQEs, one row each (what ``Wqe`` holds, for many at once). ``size``: atomic
# operand size (0 for RDMA reads and writes); ``length``: the bytes the WQE moves (the
# atomic size, else the byte count); ``inline_data``: the bytes of an inline write.
WQE_FIELDS = np.dtype([("opcode", "u1"), ("opmod", "u1"), ("signaled", "?"), ("inline", "?"), ("index", "u4"),
                       ("qpn", "u4"), ("ds", "u4"), ("rkey", "u4"), ("lkey", "u4"), ("raddr", "u8"), ("laddr", "u8"),
                       ("nbytes", "u8"), ("size", "u8"), ("length", "u8"), ("operands", "u8", (4,)),
                       ("inline_data", "u1", (MAX_INLINE,))])


def check_message(fn: str, nbytes: int) -> None:
    """PgasError unless one WQE can carry ``nbytes`` (callers split larger copies)."""
    if not 0 <= nbytes <= MAX_MESSAGE:
        raise PgasError(f"{fn}: one NIC request carries at most {MAX_MESSAGE} bytes, got {nbytes} "
                        "(pgas splits larger copies: this is a bug of pgas)")


def empty_cq(depth: int, allocate=np.zeros) -> np.ndarray:
    """A completion queue of ``depth`` CQEs, every one invalid (hardware initializes it so),
    in memory from ``allocate(shape, dtype)``."""
    cq = allocate((depth, 64), np.uint8)
    cq[:, 63] = (CQE_INVALID << 4) | 1
    return cq


def write_cqe(cq: np.ndarray, position: int, qpn: int, wqe_counter: int, syndrome: int = 0,
              byte_count: int = 0) -> None:
    """Write the CQE number ``position`` (a running count): opcode REQ, or REQ_ERR with
    ``syndrome``; its owner bit is the pass round the queue."""
    cqe = cq[position % cq.shape[0]]
    buf = memoryview(cqe)
    _CQE_BYTE_CNT.pack_into(buf, 44, byte_count)
    cqe[_CQE_SYNDROME] = syndrome
    opcode = CQE_REQ_ERR if syndrome else CQE_REQ
    owner = (position // cq.shape[0]) & 1
    # the owner byte last: a consumer that sees it sees the whole CQE
    _CQE_TAIL.pack_into(buf, 56, qpn & 0xFFFFFF, wqe_counter & 0xFFFF, 0, 0xF0 | owner)
    cqe[63] = (opcode << 4) | owner


def read_cqe(cq: np.ndarray, position: int):
    """(qpn, wqe_counter, syndrome) of CQE number ``position``, or None while the NIC has not
    written it (invalid opcode, or the owner bit of an earlier pass)."""
    cqe = cq[position % cq.shape[0]]
    op_own = int(cqe[63])
    if op_own >> 4 == CQE_INVALID or (op_own & 1) != (position // cq.shape[0]) & 1:
        return None
    qpn, counter, _, _ = _CQE_TAIL.unpack_from(cqe.tobytes(), 56)
    syndrome = int(cqe[_CQE_SYNDROME]) if op_own >> 4 == CQE_REQ_ERR else 0
    return qpn & 0xFFFFFF, counter, syndrome


def write_collapsed_cqe(cq: np.ndarray, qpn: int, wqe_counter: int) -> None:
    """Overwrite the one CQE of a collapsed CQ: a requester completion of the WQE with
    index ``wqe_counter`` (and of every WQE before it). Its last 8 bytes (qpn, counter,
    op_own) go in one aligned store, so a reader never sees a torn counter."""
    tail = bytearray(8)
    _CQE_TAIL.pack_into(tail, 0, qpn & 0xFFFFFF, wqe_counter & 0xFFFF, 0, (CQE_REQ << 4))
    cq[0].view(np.uint64)[7] = np.frombuffer(tail, np.uint64)[0]


def refusal(fn: str, what: str, pe: int, raddr: int, nbytes: int, syndrome: int) -> str:
    """The error text of a refused request: the operation, the PE, the address, the reason."""
    reason = SYNDROMES.get(syndrome, f"syndrome {syndrome:#x}")
    return f"{fn}: the NIC refused the {what} to PE {pe} at address {raddr:#x} ({nbytes} bytes): {reason}"


def atomic_result(opcode, size, o0, o1, o2, o3, old):
    """(the value, whether it changes) that ``size`` (4 or 8) bytes holding ``old`` take
    under mlx5 atomic ``opcode`` with operands ``o0..o3`` (its atomic segment's words: add
    and field boundaries; swap, compare and their masks). Plain integer code, so the cuda
    backend's NIC runs it in a compare-swap loop on GPU memory; the CPU path uses it for
    the masked atomics that no single CPU atomic does."""
    ones = np.uint64(0xFFFFFFFF) if size == 4 else np.uint64(0xFFFFFFFFFFFFFFFF)
    old = np.uint64(old) & ones
    if opcode == OP_ATOMIC_FA:
        return (old + np.uint64(o0)) & ones, True
    if opcode == OP_ATOMIC_CS:
        if old == np.uint64(o1) & ones:
            return np.uint64(o0) & ones, True
        return old, False
    if opcode == OP_MASKED_FA:          # add with carries stopped at the fields' top bits
        add, boundary = np.uint64(o0) & ones, np.uint64(o1) & ones
        result, low = np.uint64(0), np.uint64(0)     # low: the bits below the current field
        for bit in range(8 * size):
            if (boundary >> np.uint64(bit)) & np.uint64(1) or bit == 8 * size - 1:
                mask = (np.uint64(0xFFFFFFFFFFFFFFFF) >> np.uint64(63 - bit)) ^ low
                result |= ((old & mask) + (add & mask)) & mask
                low |= mask
        return result, True
    swap, compare, swap_mask, compare_mask = (np.uint64(o0) & ones, np.uint64(o1) & ones, np.uint64(o2) & ones,
                                              np.uint64(o3) & ones)
    if (old ^ compare) & compare_mask:
        return old, False
    return (old & ~swap_mask & ones) | (swap & swap_mask), True
