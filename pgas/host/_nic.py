"""The emulated NIC of one PE: memory regions, queue pairs, completion queues, and the wire.

One NIC per PE, a thread of the PE's process (so it reaches the heap as a NIC's DMA does,
with no mapping of its own). Whoever drives it (the CPU proxy today, device threads on the
GPU-initiated path) writes mlx5 WQEs into a queue pair's send queue, updates the doorbell
record and rings the doorbell. At a doorbell the NIC reads the new WQEs, checks each local
key and address, groups them per destination and sends them as one message over MPI (a
communicator of its own). The target's NIC checks every request's rkey and bounds, applies
writes, answers reads, and applies atomics with pgas's CPU atomics (so they stay atomic with
same-node PEs' loads, stores and atomics on the same word). Responses come back in order;
the requester's NIC writes fetched data and CQEs, error CQEs for refused requests.

Nothing spins: the thread sleeps on its doorbell event with a back-off between polls of
the wire (docs/transports.md: threads and who waits for whom).
"""
from __future__ import annotations

import os
import secrets
import sys
import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from .. import _cpu_atomics
from .._errors import PgasError
from . import _mlx5 as mlx5

__all__ = ["Nic", "MemoryRegion", "RemoteRegion", "QueuePair", "ACCESS_LOCAL", "ACCESS_REMOTE"]

ACCESS_LOCAL_WRITE, ACCESS_REMOTE_WRITE, ACCESS_REMOTE_READ, ACCESS_REMOTE_ATOMIC = 1, 2, 4, 8
ACCESS_LOCAL = ACCESS_LOCAL_WRITE
ACCESS_REMOTE = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC

SQ_DEPTH = 1024                  # basic blocks per send queue (and CQEs per completion queue)
PACK_LIMIT = 64 << 10            # payloads up to this travel inside the batch message
_TAG_REQUEST, _TAG_REQUEST_DATA, _TAG_RESPONSE, _TAG_RESPONSE_DATA = 0x51, 0x52, 0x53, 0x54
_MAX_PAUSE_S = 1e-3              # idle back-off ceiling between polls of the wire
_HOT_PAUSE_S = 30e-6             # the ceiling while busy: requests in flight, or traffic lately
_SWITCH_INTERVAL_S = 50e-6       # see connect()
_HOT_FOR_S = 20e-3               # how long traffic keeps the NIC polling fast (as NAPI does)

# One request on the wire (what IB's BTH/RETH/AtomicETH headers carry).
PACKET = np.dtype([("opcode", "u1"), ("opmod", "u1"), ("flags", "u1"), ("pad", "u1"), ("rkey", "u4"),
                   ("raddr", "u8"), ("length", "u8"), ("operands", "u8", (4,))])
_PACKED, _FOLLOWS = 1, 2         # flags: payload inside the batch / in its own message
RESULT = np.dtype([("syndrome", "u1"), ("pad", "u1", (7,)), ("value", "u8")])
_HEADER = 16                     # count, payload bytes (u8 each)


@dataclass
class MemoryRegion:
    """Registered memory [base, base + size). ``view`` (uint8) is how the NIC thread reaches
    host memory; GPU memory is registered by its dma-buf (``dmabuf_fd``) and has no view."""

    base: int
    size: int
    lkey: int
    rkey: int
    access: int
    view: np.ndarray | None = None
    dmabuf_fd: int | None = None

    def slice(self, address: int, nbytes: int) -> np.ndarray | None:
        """The bytes [address, address + nbytes) if all inside the region (and reachable
        by the NIC thread), else None."""
        offset = address - self.base
        if self.view is None or nbytes < 0 or offset < 0 or offset + nbytes > self.size:
            return None
        return self.view[offset:offset + nbytes]


@dataclass(frozen=True)
class RemoteRegion:
    """A peer's registered heap, as exchanged at init: what a WQE names it by."""

    base: int
    size: int
    rkey: int


@dataclass
class QueuePair:
    """A send queue to one peer, its doorbell record and its completion queue."""

    qpn: int
    peer: int
    sq: np.ndarray = field(default_factory=lambda: np.zeros((SQ_DEPTH, mlx5.BB), np.uint8))
    dbr: np.ndarray = field(default_factory=lambda: np.zeros(1, ">u4"))   # producer index & 0xffff
    cq: np.ndarray = field(default_factory=lambda: mlx5.empty_cq(SQ_DEPTH))
    nic_index: int = 0       # next WQE index the NIC reads (in basic blocks)
    cqes_written: int = 0    # CQEs the NIC has written

    @property
    def depth(self) -> int:
        return self.sq.shape[0]


@dataclass
class _Sent:
    """A WQE on its way: where its answer goes, and its payload send if it has one."""

    qp: QueuePair
    wqe: mlx5.Wqe
    local: np.ndarray | None = None       # local bytes the answer lands in (reads, atomics)
    data_send: object = None               # MPI request of a payload sent on its own
    local_error: bool = False              # refused here (lkey): never sent


class Nic:
    """One PE's NIC. ``register`` memory, ``connect`` (collective), then post WQEs on
    ``queue_pair(peer)`` and ``ring`` its doorbell; ``on_completion`` is called (from the
    NIC thread) after CQEs are written."""

    def __init__(self, comm, my_pe: int):
        self.comm = comm.Dup()      # the wire: a communicator of its own
        self.my_pe = my_pe
        self.regions: dict[int, MemoryRegion] = {}          # by lkey
        self._by_rkey: dict[int, MemoryRegion] = {}
        self.remote: list[RemoteRegion | None] = []
        self.qps: dict[int, QueuePair] = {}                 # by peer
        self._by_qpn: dict[int, QueuePair] = {}
        self._rung: set[int] = set()
        self._rung_lock = threading.Lock()
        self._doorbell = threading.Event()
        self._inflight: dict[int, deque] = {}
        self._sends: list = []                              # (request, buffer kept alive)
        self._running = False
        self._thread: threading.Thread | None = None
        self.on_completion = lambda qp: None
        self.failure: str | None = None

    # Memory regions ---------------------------------------------------------------

    def register(self, view: np.ndarray, access: int) -> MemoryRegion:
        """Register the bytes of uint8 ``view`` (``ibv_reg_mr``): a new lkey and rkey."""
        view = view.reshape(-1).view(np.uint8)
        return self._add(MemoryRegion(view.__array_interface__["data"][0], view.size, 0, 0, access, view=view))

    def register_dmabuf(self, fd: int, base: int, size: int, access: int) -> MemoryRegion:
        """Register GPU memory [base, base + size) exported as dma-buf ``fd``
        (``ibv_reg_dmabuf_mr``); the region keeps the descriptor until it is deregistered."""
        return self._add(MemoryRegion(base, size, 0, 0, access, dmabuf_fd=fd))

    def _add(self, region: MemoryRegion) -> MemoryRegion:
        region.lkey = self._fresh_key(self.regions)
        region.rkey = self._fresh_key(self._by_rkey) if region.access & ~ACCESS_LOCAL_WRITE else 0
        self.regions[region.lkey] = region
        if region.rkey:
            self._by_rkey[region.rkey] = region
        return region

    def deregister(self, region: MemoryRegion) -> None:
        self.regions.pop(region.lkey, None)
        if region.rkey:
            self._by_rkey.pop(region.rkey, None)
        if region.dmabuf_fd is not None:
            os.close(region.dmabuf_fd)
            region.dmabuf_fd = None

    @staticmethod
    def _fresh_key(taken: dict) -> int:
        while True:
            key = secrets.randbits(32)
            if key and key not in taken:
                return key

    def connect(self, heap: MemoryRegion, peers) -> None:
        """Collective: exchange every PE's heap region (base, size, rkey) as verbs programs
        do through their bootstrap; create a queue pair to each of ``peers``; start the thread."""
        from mpi4py import MPI
        if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
            raise PgasError("the emulated NIC needs MPI_THREAD_MULTIPLE; this MPI granted less "
                            "(set mpi4py.rc.thread_level = 'multiple' before importing mpi4py.MPI)")
        self.remote = [RemoteRegion(*region) for region in
                       self.comm.allgather((heap.base, heap.size, heap.rkey))]
        for peer in peers:
            qp = QueuePair(qpn=0x100 + peer, peer=peer)
            self.qps[peer] = qp
            self._by_qpn[qp.qpn] = qp
            self._inflight[peer] = deque()
        if not self.qps:
            return      # every PE is load/store reachable: nothing will ever ring
        # Every hand-off between a requester, the proxy and the NIC needs the interpreter
        # lock; numba's simulator polls its threads in a loop that holds it until the
        # switch interval (5 ms) forces it out. A short interval bounds each hand-off.
        sys.setswitchinterval(min(sys.getswitchinterval(), _SWITCH_INTERVAL_S))
        precise_sleeps()    # the thread calling init, and the simulated threads it starts later
        self._running = True
        self._thread = threading.Thread(target=self._serve, name=f"pgas-nic-pe{self.my_pe}", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop the thread (every PE's requests to this one must be complete: a barrier first)."""
        if self._thread is not None:
            self._running = False
            self._doorbell.set()
            self._thread.join()
            self._thread = None
        for request, _ in self._sends:
            request.Wait()
        self._sends.clear()
        self.comm.Free()

    # Doorbell ---------------------------------------------------------------------

    def ring(self, ctrl: bytes) -> None:
        """The doorbell: the first 8 bytes of the last control segment posted."""
        qpn = int.from_bytes(ctrl[4:8], "big") >> 8
        with self._rung_lock:
            self._rung.add(qpn)
        self._doorbell.set()

    # The thread ---------------------------------------------------------------------

    def _serve(self) -> None:
        from mpi4py import MPI
        precise_sleeps()
        status = MPI.Status()
        pause, last_busy = 0.0, 0.0
        try:
            while self._running:
                self._doorbell.clear()   # a ring from now on sets it again: never missed
                busy = self._send_posted()
                for tag, handle in ((_TAG_REQUEST, self._respond), (_TAG_RESPONSE, self._complete)):
                    while True:
                        message = self.comm.improbe(MPI.ANY_SOURCE, tag, status)
                        if message is None:
                            break
                        buf = bytearray(status.Get_count(MPI.BYTE))
                        message.Recv(buf)
                        handle(status.Get_source(), buf)
                        busy = True
                self._reap_sends()
                now = time.monotonic()
                if busy:
                    pause, last_busy = 0.0, now
                    time.sleep(0)
                    continue
                hot = self._sends or any(self._inflight.values()) or now - last_busy < _HOT_FOR_S
                pause = min(pause * 2 + 5e-6, _HOT_PAUSE_S if hot else _MAX_PAUSE_S)
                self._doorbell.wait(pause)
        except BaseException:
            self._fail(traceback.format_exc())

    def _fail(self, text: str) -> None:
        """An internal NIC error ends the whole job (never a silent hang)."""
        self.failure = text
        sys.stderr.write("".join(f"[PE {self.my_pe}] pgas NIC thread: {line}\n" for line in text.splitlines()))
        sys.stderr.flush()
        from ._runtime import _end_job
        _end_job("its NIC thread failed", 1)

    def _reap_sends(self) -> None:
        if self._sends:
            self._sends = [(r, b) for r, b in self._sends if not r.Test()]

    # Requester side -------------------------------------------------------------------

    def _send_posted(self) -> bool:
        with self._rung_lock:
            rung, self._rung = self._rung, set()
        for qpn in rung:
            qp = self._by_qpn.get(qpn)
            if qp is not None:
                self._send_batch(qp)
        return bool(rung)

    def _send_batch(self, qp: QueuePair) -> None:
        """Read the WQEs posted since the last doorbell, send them as one batch."""
        producer = int(qp.dbr[0])
        entries, packets, payloads, follow = [], [], [], []
        while (qp.nic_index & 0xFFFF) != producer:
            wqe = mlx5.read_wqe(qp.sq, qp.nic_index)
            qp.nic_index += wqe.blocks
            entry = _Sent(qp, wqe)
            entries.append(entry)
            packet = self._packet(entry, payloads, follow)
            if packet is not None:
                packets.append(packet)
        if not entries:
            return
        sent = bool(packets)
        if sent:
            payload = b"".join(payloads)
            head = np.array([len(packets), len(payload)], np.uint64).tobytes()
            buf = head + np.array(packets, PACKET).tobytes() + payload
            self._isend(buf, qp.peer, _TAG_REQUEST)
            for entry, data in follow:
                entry.data_send = self.comm.Isend(data, qp.peer, _TAG_REQUEST_DATA)
        self._inflight[qp.peer].append((sent, entries))
        self._finish_unsent(qp.peer)

    def _packet(self, entry: _Sent, payloads: list, follow: list):
        """The wire packet of one WQE (None if refused here: a local protection error)."""
        wqe = entry.wqe
        size = wqe.atomic_size
        flags = 0
        if wqe.opcode == mlx5.OP_RDMA_WRITE and wqe.inline is not None:
            payloads.append(wqe.inline)
            flags = _PACKED
        elif wqe.opcode in (mlx5.OP_RDMA_WRITE, mlx5.OP_RDMA_READ) or size:
            region = self.regions.get(wqe.lkey)
            local = region.slice(wqe.laddr, size or wqe.nbytes) if region is not None else None
            if local is None:
                entry.local_error = True
                return None
            entry.local = local
            if wqe.opcode == mlx5.OP_RDMA_WRITE:
                if wqe.nbytes <= PACK_LIMIT:
                    payloads.append(local.tobytes())
                    flags = _PACKED
                else:
                    follow.append((entry, local))
                    flags = _FOLLOWS
        operands = (tuple(wqe.operands) + (0, 0, 0, 0))[:4]
        length = size or wqe.nbytes
        return (wqe.opcode, wqe.opmod, flags, 0, wqe.rkey, wqe.raddr, length, operands)

    def _isend(self, buf: bytes, dest: int, tag: int) -> None:
        self._sends.append((self.comm.Isend(buf, dest, tag), buf))

    def _finish_unsent(self, peer: int) -> None:
        """Complete batches at the head of ``peer``'s queue that expect no response."""
        queue = self._inflight[peer]
        while queue and not queue[0][0]:
            _, entries = queue.popleft()
            for entry in entries:
                self._write_cqe(entry, mlx5.SYNDROME_LOCAL_PROT)

    def _complete(self, source: int, buf: bytearray) -> None:
        """A response from ``source``: land fetched data, write CQEs in WQE order."""
        sent, entries = self._inflight[source].popleft()
        count, packed = np.frombuffer(buf, np.uint64, 2)
        results = np.frombuffer(buf, RESULT, int(count), _HEADER)
        payload = memoryview(buf)[_HEADER + int(count) * RESULT.itemsize:]
        position, result_index = 0, 0
        for entry in entries:
            if entry.local_error:
                self._write_cqe(entry, mlx5.SYNDROME_LOCAL_PROT)
                continue
            syndrome = int(results[result_index]["syndrome"])
            value = int(results[result_index]["value"])
            result_index += 1
            wqe = entry.wqe
            if syndrome == 0 and wqe.opcode == mlx5.OP_RDMA_READ:
                if wqe.nbytes <= PACK_LIMIT:
                    entry.local[:] = np.frombuffer(payload, np.uint8, wqe.nbytes, position)
                    position += wqe.nbytes
                else:
                    self._wait(self.comm.Irecv(entry.local, source, _TAG_RESPONSE_DATA))
            elif syndrome == 0 and wqe.atomic_size:
                # the NIC writes fetched atomic values in network byte order, as ConnectX does
                entry.local[:] = np.frombuffer(value.to_bytes(8, "big")[8 - wqe.atomic_size:], np.uint8)
            if entry.data_send is not None:
                self._wait(entry.data_send)
            self._write_cqe(entry, syndrome)
        self._finish_unsent(source)

    def _write_cqe(self, entry: _Sent, syndrome: int) -> None:
        qp, wqe = entry.qp, entry.wqe
        if wqe.signaled or syndrome:
            mlx5.write_cqe(qp.cq, qp.cqes_written, qp.qpn, wqe.index, syndrome,
                           0 if syndrome else (wqe.nbytes or wqe.atomic_size))
            qp.cqes_written += 1
            self.on_completion(qp)

    def _wait(self, request) -> None:
        """Wait for one MPI transfer that is already under way, yielding the core."""
        while not request.Test():
            time.sleep(0)

    # Responder side -------------------------------------------------------------------

    def _respond(self, source: int, buf: bytearray) -> None:
        """A batch of requests from ``source``: check, apply in order, answer."""
        count, _ = np.frombuffer(buf, np.uint64, 2)
        count = int(count)
        packets = np.frombuffer(buf, PACKET, count, _HEADER)
        payload = memoryview(buf)[_HEADER + count * PACKET.itemsize:]
        results = np.zeros(count, RESULT)
        out, large = [], []
        position = 0
        for i in range(count):
            packet = packets[i]
            opcode, flags, length = int(packet["opcode"]), int(packet["flags"]), int(packet["length"])
            incoming = None
            if flags & _PACKED:
                incoming = np.frombuffer(payload, np.uint8, length, position)
                position += length
            syndrome, value = self._apply(source, packet, opcode, length, incoming, out, large)
            results[i]["syndrome"], results[i]["value"] = syndrome, value
        packed = b"".join(out)
        self._isend(np.array([count, len(packed)], np.uint64).tobytes() + results.tobytes() + packed,
                    source, _TAG_RESPONSE)
        for data in large:
            self._isend(data, source, _TAG_RESPONSE_DATA)

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
                sink = target if target is not None else np.empty(length, np.uint8)
                self._wait(self.comm.Irecv(sink, source, _TAG_REQUEST_DATA))
            elif target is not None:
                _word(target, int(packet["raddr"]))[:] = _word(incoming, int(packet["raddr"]))
            return (0 if target is not None else mlx5.SYNDROME_REMOTE_ACCESS), 0
        if opcode == mlx5.OP_RDMA_READ:
            target = self._target(packet, length, ACCESS_REMOTE_READ)
            if target is None:
                return mlx5.SYNDROME_REMOTE_ACCESS, 0
            if length <= PACK_LIMIT:
                out.append(_word(target, int(packet["raddr"])).tobytes())
            else:
                large.append(target.copy())   # a snapshot: later requests may change the bytes
            return 0, 0
        size = {mlx5.OP_ATOMIC_CS: 8, mlx5.OP_ATOMIC_FA: 8}.get(opcode)
        if size is None and opcode in (mlx5.OP_MASKED_CS, mlx5.OP_MASKED_FA):
            size = {mlx5.OPMOD_EXT_ATOMIC_4: 4, mlx5.OPMOD_EXT_ATOMIC_8: 8}.get(int(packet["opmod"]))
        if size is None or length != size or int(packet["raddr"]) % size:
            return mlx5.SYNDROME_REMOTE_INVALID, 0
        target = self._target(packet, size, ACCESS_REMOTE_ATOMIC)
        if target is None:
            return mlx5.SYNDROME_REMOTE_ACCESS, 0
        word = target.view(np.uint32 if size == 4 else np.uint64)
        return 0, apply_atomic(word, opcode, [int(x) for x in packet["operands"]], size)


def precise_sleeps() -> None:
    """Let this thread's short sleeps end on time: Linux adds up to 50 us of timer slack to
    every sleep, which would make each hand-off between pgas's threads cost that much.
    Threads started later by this one inherit it."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(29, 1, 0, 0, 0)   # PR_SET_TIMERSLACK, 1 ns
    except (OSError, AttributeError):
        pass


def _word(data: np.ndarray, address: int) -> np.ndarray:
    """Aligned 2-, 4- and 8-byte accesses as one typed load or store (never torn, as on a
    NIC: a flag written remotely is seen whole or not at all); other bytes as they are."""
    size = data.size
    if size in (2, 4, 8) and address % size == 0:
        return data.view(f"u{size}")
    return data


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
        return _cas_loop(word, lambda old: _fielded_add(old, add, boundary, size), fn, what)
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

    def masked(old):
        if (old ^ compare) & compare_mask:
            return None
        return (old & ~swap_mask & ones) | (swap & swap_mask)
    return _cas_loop(word, masked, fn, what)


def _fielded_add(old: int, add: int, boundary: int, size: int) -> int:
    """Add ``add`` to ``old`` with carries stopped at the fields whose top bit ``boundary`` marks."""
    result, start = 0, 0
    for bit in range(8 * size):
        if boundary >> bit & 1 or bit == 8 * size - 1:
            mask = ((1 << (bit + 1)) - 1) ^ ((1 << start) - 1)
            result |= ((old & mask) + (add & mask)) & mask
            start = bit + 1
    return result


def _cas_loop(word: np.ndarray, new_value, fn: str, what: str) -> int:
    old = int(_cpu_atomics.load_acquire(word, fn, what))
    while True:
        new = new_value(old)
        if new is None:
            return old
        seen = int(_cpu_atomics.compare_swap(word, old, new, fn, what))
        if seen == old:
            return old
        old = seen
