"""The target side of a NIC (the responder): every request from a peer is checked against
the region its rkey names (bounds and access rights: nothing outside a registered region is
ever touched), then applied in order; atomics with pgas's CPU atomics, so that they stay
atomic with same-node PEs' loads, stores and atomics on the same word."""
from __future__ import annotations

import numpy as np

from ..core.native import _cpu_atomics
from . import _mlx5 as mlx5
from ._packets import HEADER, PACKED, PACKET, PACK_LIMIT, RESULT, TAG_REQUEST_DATA, TAG_RESPONSE, TAG_RESPONSE_DATA
from ._regions import (ACCESS_REMOTE_ATOMIC, ACCESS_REMOTE_READ, ACCESS_REMOTE_WRITE, DeviceSpan, as_word, read_local,
                       write_local)

__all__ = ["Responder", "apply_atomic"]


class Responder:
    """The responder half of ``Nic`` (a base class of it): answers a batch of requests.
    It uses the NIC's regions by rkey (``_by_rkey``) and its wire (``_isend``, ``_receive``),
    and calls ``on_written`` (if set) after each batch, before answering it."""

    def _respond(self, source: int, buf: bytearray) -> None:
        """A batch of requests from ``source``: check, apply in order, answer."""
        count, _ = np.frombuffer(buf, np.uint64, 2)
        count = int(count)
        packets = np.frombuffer(buf, PACKET, count, HEADER)
        payload = memoryview(buf)[HEADER + count * PACKET.itemsize:]
        results = np.zeros(count, RESULT)
        out, large = [], []
        position = 0
        if self._small_writes(packets, payload):
            count = 0                   # applied all at once
        for i in range(count):
            packet = packets[i]
            opcode, flags, length = int(packet["opcode"]), int(packet["flags"]), int(packet["length"])
            incoming = None
            if flags & PACKED:
                incoming = np.frombuffer(payload, np.uint8, length, position)
                position += length
            syndrome, value = self._apply(source, packet, opcode, length, incoming, out, large)
            results[i]["syndrome"], results[i]["value"] = syndrome, value
        if self.on_written is not None:     # (whoever waits for a word of it looks again)
            self.on_written()
        packed = b"".join(out)
        self._isend(np.array([len(results), len(packed)], np.uint64).tobytes() + results.tobytes() + packed,
                    source, TAG_RESPONSE)
        for data in large:
            self._isend(data, source, TAG_RESPONSE_DATA)

    def _small_writes(self, packets: np.ndarray, payload) -> bool:
        """Apply a batch of aligned 8-byte writes into one region at once (the hot case: many
        threads' ``p``) and return True; False, having touched nothing, for any other batch
        or if any packet would be refused (the one-by-one path then answers each)."""
        if not (len(packets) > 1 and (packets["opcode"] == mlx5.OP_RDMA_WRITE).all()
                and (packets["flags"] == PACKED).all() and (packets["length"] == 8).all()):
            return False
        rkey = packets["rkey"][0]
        region = self._by_rkey.get(int(rkey))
        if region is None or region.view is None or not region.access & ACCESS_REMOTE_WRITE \
                or (packets["rkey"] != rkey).any() or region.base % 8:
            return False
        raddr = packets["raddr"]
        if (raddr % 8).any() or (raddr < region.base).any() or (raddr - region.base + 8 > region.size).any():
            return False
        words = ((raddr - region.base) // 8).astype(np.intp)
        heap = region.view[:region.size - region.size % 8].view(np.uint64)
        for word, value in zip(words.tolist(), np.frombuffer(payload, np.uint64, len(packets)).tolist()):
            heap[word] = value      # in issue order, one 8-byte store each (a flag never before its data)
        return True

    def _target(self, packet, length: int, access: int) -> np.ndarray | None:
        """The local bytes a request names, if its rkey grants ``access`` to all of them."""
        region = self._by_rkey.get(int(packet["rkey"]))
        if region is None or not region.access & access:
            return None
        return region.slice(int(packet["raddr"]), length)

    def _apply(self, source, packet, opcode, length, incoming, out: list, large: list):
        """Execute one request; (syndrome, fetched value)."""
        if opcode == mlx5.OP_RDMA_WRITE:
            target = self._target(packet, length, ACCESS_REMOTE_WRITE)
            if incoming is None:       # the payload follows in its own message: take it even if refused
                self._receive(target if target is not None else np.empty(length, np.uint8), source,
                              TAG_REQUEST_DATA)
            elif target is not None:
                write_local(target, incoming, int(packet["raddr"]))
            return (0 if target is not None else mlx5.SYNDROME_REMOTE_ACCESS), 0
        if opcode == mlx5.OP_RDMA_READ:
            target = self._target(packet, length, ACCESS_REMOTE_READ)
            if target is None:
                return mlx5.SYNDROME_REMOTE_ACCESS, 0
            if length <= PACK_LIMIT:
                out.append(as_word(read_local(target), int(packet["raddr"])).tobytes())
            else:
                large.append(np.array(read_local(target)))   # a snapshot: later requests may change the bytes
            return 0, 0
        size = {mlx5.OP_ATOMIC_CS: 8, mlx5.OP_ATOMIC_FA: 8}.get(opcode)
        if size is None and opcode in (mlx5.OP_MASKED_CS, mlx5.OP_MASKED_FA):
            size = {mlx5.OPMOD_EXT_ATOMIC_4: 4, mlx5.OPMOD_EXT_ATOMIC_8: 8}.get(int(packet["opmod"]))
        if size is None or length != size or int(packet["raddr"]) % size:
            return mlx5.SYNDROME_REMOTE_INVALID, 0
        target = self._target(packet, size, ACCESS_REMOTE_ATOMIC)
        if target is None:
            return mlx5.SYNDROME_REMOTE_ACCESS, 0
        operands = [int(x) for x in packet["operands"]]
        if isinstance(target, DeviceSpan):
            return 0, target.window.atomic(target.offset, opcode, operands, size)
        return 0, apply_atomic(target.view(np.uint32 if size == 4 else np.uint64), opcode, operands, size)


def apply_atomic(word: np.ndarray, opcode: int, operands: list, size: int) -> int:
    """Apply an mlx5 atomic to ``word`` with CPU atomics; returns the old value."""
    ones = (1 << (8 * size)) - 1
    fn, what = "pgas NIC", "atomic target"
    if opcode == mlx5.OP_ATOMIC_FA:
        return int(_cpu_atomics.rmw(word, "add", operands[0], fn, what))
    if opcode == mlx5.OP_ATOMIC_CS:
        return int(_cpu_atomics.compare_swap(word, operands[1], operands[0], fn, what))
    if opcode == mlx5.OP_MASKED_FA:
        add, boundary = operands[0] & ones, operands[1] & ones
        if boundary == 0:
            return int(_cpu_atomics.rmw(word, "add", add, fn, what))
        if boundary == ones:          # every bit a field of its own: addition without carries
            return int(_cpu_atomics.rmw(word, "xor", add, fn, what))
        return _cas_loop(word, opcode, operands, size, fn, what)
    swap, compare, swap_mask, compare_mask = (x & ones for x in operands)
    if compare_mask == 0:
        if swap_mask == ones:
            return int(_cpu_atomics.rmw(word, "xchg", swap, fn, what))
        if swap & swap_mask == swap_mask:
            return int(_cpu_atomics.rmw(word, "or", swap_mask, fn, what))
        if swap & swap_mask == 0:
            return int(_cpu_atomics.rmw(word, "and", ones & ~swap_mask, fn, what))
    if compare_mask == ones and swap_mask == ones:
        return int(_cpu_atomics.compare_swap(word, compare, swap, fn, what))
    return _cas_loop(word, opcode, operands, size, fn, what)


def _cas_loop(word: np.ndarray, opcode: int, operands: list, size: int, fn: str, what: str) -> int:
    """A masked atomic no single CPU atomic does: compare-and-swap from what ``mlx5.atomic_result`` says."""
    old = int(_cpu_atomics.load_acquire(word, fn, what))
    while True:
        with np.errstate(over="ignore"):        # a field's sum wraps, as on the NIC
            new, changes = mlx5.atomic_result(opcode, size, *operands, old)
        if not changes:
            return old
        seen = int(_cpu_atomics.compare_swap(word, old, int(new), fn, what))
        if seen == old:
            return old
        old = seen
