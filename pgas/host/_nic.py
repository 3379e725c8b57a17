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

from .. import _cpu_atomics, _job
from .._errors import PgasError, PgasTimeoutError
from . import _mlx5 as mlx5

__all__ = ["Nic", "MemoryRegion", "DeviceSpan", "RemoteRegion", "QueuePair", "ACCESS_LOCAL", "ACCESS_REMOTE",
           "sleep_until"]

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
    host memory; GPU memory is registered by its dma-buf (``dmabuf_fd``), has no view and
    is reached through its ``window`` (copies and atomics by the GPU: ``_gpu_nic``)."""

    base: int
    size: int
    lkey: int
    rkey: int
    access: int
    view: np.ndarray | None = None
    dmabuf_fd: int | None = None
    window: object = None

    def slice(self, address: int, nbytes: int):
        """The bytes [address, address + nbytes) if all inside the region and reachable by
        the NIC thread, else None: a view of host memory, or a ``DeviceSpan``."""
        offset = address - self.base
        if nbytes < 0 or offset < 0 or offset + nbytes > self.size:
            return None
        if self.view is not None:
            return self.view[offset:offset + nbytes]
        return None if self.window is None else DeviceSpan(self.window, offset, nbytes)


@dataclass(frozen=True)
class DeviceSpan:
    """Bytes of a region that the NIC thread cannot load or store (GPU memory): its window
    copies them (``read``/``write``) and applies atomics (``atomic``) on the device."""

    window: object
    offset: int
    nbytes: int


def _read(local) -> np.ndarray:
    """A host array of the local bytes (a view of host memory, or a copy of device memory)."""
    return local.window.read(local.offset, local.nbytes) if isinstance(local, DeviceSpan) else local


def _write(local, data, address: int) -> None:
    """Store ``data`` (uint8) over the local bytes at ``address``; aligned words whole."""
    if isinstance(local, DeviceSpan):
        local.window.write(local.offset, np.asarray(data, np.uint8))
    else:
        _word(local, address)[:] = _word(data, address)


@dataclass(frozen=True)
class RemoteRegion:
    """A peer's registered heap, as exchanged at init: what a WQE names it by."""

    base: int
    size: int
    rkey: int


@dataclass
class QueuePair:
    """A send queue to one peer, its doorbell record and its completion queue.

    ``collapsed`` (the GPU-initiated path, as NVSHMEM's IBGDA sets its CQs up): the CQ is
    one CQE that the NIC overwrites once per response batch with the newest completed
    WQE's index, and each refused WQE gets an error CQE in ``err_cq`` (a ring of
    ``depth``), written before the collapsed CQE that passes it. ``rung`` (collapsed
    queues): the word posting threads set when they ask the NIC to look; the NIC clears it
    before it reads the doorbell record, so doorbells of many threads come as one.
    """

    qpn: int
    peer: int
    collapsed: bool = False
    allocate: object = np.zeros     # (shape, dtype) -> zeroed array: where the queues live
    sq: np.ndarray = None
    dbr: np.ndarray = None          # producer index & 0xffff, big-endian
    cq: np.ndarray = None
    err_cq: np.ndarray | None = None
    rung: np.ndarray | None = None
    on_completion: object = None    # called (from the NIC thread) after CQEs are written
    nic_index: int = 0       # next WQE index the NIC reads (in basic blocks)
    cqes_written: int = 0    # CQEs the NIC has written (error CQEs, when collapsed)

    def __post_init__(self):
        self.sq = self.allocate((SQ_DEPTH, mlx5.BB), np.uint8)
        self.dbr = self.allocate(1, ">u4")
        self.cq = mlx5.empty_cq(1 if self.collapsed else SQ_DEPTH, self.allocate)
        if self.collapsed:
            self.err_cq = mlx5.empty_cq(SQ_DEPTH, self.allocate)

    @property
    def depth(self) -> int:
        return self.sq.shape[0]


@dataclass
class _Batch:
    """The WQEs of one doorbell on their way: the decoded WQEs (``mlx5.WQE_FIELDS``), the
    local bytes each names (by position: payloads of writes, where reads and fetched
    atomic values land), payloads sent on their own, and those refused here (lkey)."""

    qp: QueuePair
    wqes: np.ndarray
    local: dict = field(default_factory=dict)          # position -> local bytes
    data_sends: list = field(default_factory=list)     # MPI requests of payloads sent on their own
    local_error: np.ndarray | None = None              # refused here: never sent


class Nic:
    """One PE's NIC. ``register`` memory, ``connect`` (collective), then post WQEs on a
    ``create_qp(peer)`` and ``ring`` its doorbell; the queue pair's ``on_completion`` is
    called (from the NIC thread) after CQEs are written."""

    def __init__(self, comm, my_pe: int):
        self.comm = comm.Dup()      # the wire: a communicator of its own
        self.my_pe = my_pe
        self.regions: dict[int, MemoryRegion] = {}          # by lkey
        self._by_rkey: dict[int, MemoryRegion] = {}
        self.remote: list[RemoteRegion | None] = []
        self.peers: list[int] = []                          # the PEs reached through this NIC
        self._by_qpn: dict[int, QueuePair] = {}
        self._rung: set[int] = set()
        self._polled: list[QueuePair] = []                   # queue pairs whose rung word the NIC reads
        self._rung_lock = threading.Lock()
        self._doorbell = threading.Event()
        self._inflight: dict[int, deque] = {}
        self._sends: list = []                              # (request, buffer kept alive)
        self._running = False
        self._thread: threading.Thread | None = None
        self.failure: str | None = None

    # Memory regions ---------------------------------------------------------------

    def register(self, view: np.ndarray, access: int) -> MemoryRegion:
        """Register the bytes of uint8 ``view`` (``ibv_reg_mr``): a new lkey and rkey."""
        view = view.reshape(-1).view(np.uint8)
        return self._add(MemoryRegion(view.__array_interface__["data"][0], view.size, 0, 0, access, view=view))

    def register_dmabuf(self, fd: int, base: int, size: int, access: int, window=None) -> MemoryRegion:
        """Register GPU memory [base, base + size) exported as dma-buf ``fd``
        (``ibv_reg_dmabuf_mr``); the region keeps the descriptor until it is deregistered.
        ``window``: how the NIC thread reaches it (``DeviceSpan``); without one, requests
        naming it are refused."""
        return self._add(MemoryRegion(base, size, 0, 0, access, dmabuf_fd=fd, window=window))

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
        do through their bootstrap; start the thread if any ``peers`` are reached through
        this NIC (whoever drives it creates its queue pairs to them: ``create_qp``)."""
        from mpi4py import MPI
        if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
            raise PgasError("the emulated NIC needs MPI_THREAD_MULTIPLE; this MPI granted less "
                            "(set mpi4py.rc.thread_level = 'multiple' before importing mpi4py.MPI)")
        self.remote = [RemoteRegion(*region) for region in
                       self.comm.allgather((heap.base, heap.size, heap.rkey))]
        self.peers = list(peers)
        for peer in peers:
            self._inflight[peer] = deque()    # batches to the peer, of any of its queue pairs
        if not peers:
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

    def check_alive(self, fn: str) -> None:
        """PgasError naming ``fn`` if the NIC thread has failed (its waiters would wait forever)."""
        if self.failure is not None:
            raise PgasError(f"{fn}: the NIC thread failed:\n{self.failure}")

    def create_qp(self, peer: int, collapsed: bool = False, allocate=np.zeros) -> QueuePair:
        """A new queue pair to ``peer`` (``ibv_create_qp``), its queues made by ``allocate``;
        see QueuePair for ``collapsed``."""
        qp = QueuePair(qpn=0x100 + len(self._by_qpn), peer=peer, collapsed=collapsed, allocate=allocate)
        self._by_qpn[qp.qpn] = qp
        return qp

    def poll(self, qp: QueuePair) -> None:
        """Read ``qp``'s rung word on every pass (its posters cannot ring: GPU threads),
        polling briskly from now on (as NVSHMEM's CPU-assisted IBGDA proxy does)."""
        with self._rung_lock:
            self._polled.append(qp)

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
                hot = self._sends or self._polled or any(self._inflight.values()) or now - last_busy < _HOT_FOR_S
                pause = min(pause * 2 + 5e-6, _HOT_PAUSE_S if hot else _MAX_PAUSE_S)
                self._doorbell.wait(pause)
        except BaseException:
            self._fail(traceback.format_exc())

    def _fail(self, text: str) -> None:
        """An internal NIC error ends the whole job (never a silent hang)."""
        self.failure = text
        sys.stderr.write("".join(f"[PE {self.my_pe}] pgas NIC thread: {line}\n" for line in text.splitlines()))
        sys.stderr.flush()
        from ._runtime import _end_job, device_error_behind
        behind = device_error_behind()      # cuda: a kernel of this PE trapped, and the NIC then failed on its memory
        _end_job("its NIC thread failed" if behind is None else f"raised {type(behind).__name__}: {behind}", 1)

    def _reap_sends(self) -> None:
        if self._sends:
            self._sends = [(r, b) for r, b in self._sends if not r.Test()]

    # Requester side -------------------------------------------------------------------

    def _send_posted(self) -> bool:
        with self._rung_lock:
            rung, self._rung = self._rung, set()
            rung |= {qp.qpn for qp in self._polled if qp.rung[0]}
        for qpn in rung:
            qp = self._by_qpn.get(qpn)
            if qp is not None:
                self._send_batch(qp)
        return bool(rung)

    def _send_batch(self, qp: QueuePair) -> None:
        """Read the WQEs posted since the last doorbell (all at once), send them as one batch."""
        if qp.rung is not None:
            # cleared (a full barrier) before the doorbell record is read: a post after
            # this read finds it clear and rings again
            _cpu_atomics.rmw(qp.rung, "xchg", 0, "pgas NIC", "rung word")
        blocks = (int(qp.dbr[0]) - qp.nic_index) & 0xFFFF
        if not blocks:
            return
        wqes = mlx5.read_wqes(qp.sq, qp.nic_index, blocks)
        qp.nic_index += blocks
        batch = _Batch(qp, wqes, local_error=np.zeros(len(wqes), bool))
        opcode, inline, nbytes, length = wqes["opcode"], wqes["inline"], wqes["nbytes"], wqes["length"]
        for i in np.flatnonzero(~inline).tolist():      # local keys and ranges, as the NIC's DMA checks
            region = self.regions.get(int(wqes["lkey"][i]))
            local = region.slice(int(wqes["laddr"][i]), int(length[i])) if region is not None else None
            if local is None:
                batch.local_error[i] = True
            else:
                batch.local[i] = local
        flags = np.zeros(len(wqes), np.uint8)
        writes = (opcode == mlx5.OP_RDMA_WRITE) & ~batch.local_error
        follow = []
        if writes.all() and inline.all() and (nbytes == nbytes[0]).all():
            payload = wqes["inline_data"][:, :int(nbytes[0])].tobytes()    # small puts: one copy
            flags[:] = _PACKED
        else:
            payloads = []
            for i in np.flatnonzero(writes).tolist():
                if inline[i]:
                    payloads.append(wqes["inline_data"][i, :int(nbytes[i])].tobytes())
                elif nbytes[i] <= PACK_LIMIT:
                    payloads.append(_read(batch.local[i]).tobytes())
                else:
                    follow.append(_read(batch.local[i]))
                    flags[i] = _FOLLOWS
                    continue
                flags[i] = _PACKED
            payload = b"".join(payloads)
        sent = ~batch.local_error
        count = int(sent.sum())
        if count:
            packets = np.zeros(count, PACKET)
            packets["opcode"], packets["opmod"], packets["flags"] = opcode[sent], wqes["opmod"][sent], flags[sent]
            packets["rkey"], packets["raddr"], packets["length"] = wqes["rkey"][sent], wqes["raddr"][sent], length[sent]
            packets["operands"] = wqes["operands"][sent]
            head = np.array([count, len(payload)], np.uint64).tobytes()
            self._isend(head + packets.tobytes() + payload, qp.peer, _TAG_REQUEST)
            batch.data_sends = [self.comm.Isend(data, qp.peer, _TAG_REQUEST_DATA) for data in follow]
        self._inflight[qp.peer].append((bool(count), batch))
        self._finish_unsent(qp.peer)

    def _isend(self, buf: bytes, dest: int, tag: int) -> None:
        self._sends.append((self.comm.Isend(buf, dest, tag), buf))

    def _finish_unsent(self, peer: int) -> None:
        """Complete batches at the head of ``peer``'s queue that expect no response."""
        queue = self._inflight[peer]
        while queue and not queue[0][0]:
            _, batch = queue.popleft()
            self._write_cqes(batch, np.full(len(batch.wqes), mlx5.SYNDROME_LOCAL_PROT, np.uint8))

    def _complete(self, source: int, buf: bytearray) -> None:
        """A response from ``source``: land fetched data, write CQEs in WQE order."""
        _, batch = self._inflight[source].popleft()
        wqes = batch.wqes
        count, _ = np.frombuffer(buf, np.uint64, 2)
        results = np.frombuffer(buf, RESULT, int(count), _HEADER)
        payload = memoryview(buf)[_HEADER + int(count) * RESULT.itemsize:]
        syndromes = np.full(len(wqes), mlx5.SYNDROME_LOCAL_PROT, np.uint8)
        sent = ~batch.local_error
        syndromes[sent] = results["syndrome"]
        values = np.zeros(len(wqes), np.uint64)
        values[sent] = results["value"]
        position = 0
        for i, local in batch.local.items():     # in WQE order: read data comes back in that order
            if syndromes[i]:
                continue
            if wqes["opcode"][i] == mlx5.OP_RDMA_READ:
                nbytes = int(wqes["nbytes"][i])
                if nbytes <= PACK_LIMIT:
                    _write(local, np.frombuffer(payload, np.uint8, nbytes, position), 0)
                    position += nbytes
                else:
                    self._receive(local, source, _TAG_RESPONSE_DATA)
            elif wqes["size"][i]:
                # the NIC writes fetched atomic values in network byte order, as ConnectX does
                size = int(wqes["size"][i])
                _write(local, np.frombuffer(int(values[i]).to_bytes(8, "big")[8 - size:], np.uint8), 0)
        for request in batch.data_sends:
            self._wait(request)
        self._write_cqes(batch, syndromes)
        self._finish_unsent(source)

    def _write_cqes(self, batch: _Batch, syndromes: np.ndarray) -> None:
        """The CQEs of a batch, in WQE order: collapsed queues get an error CQE per refused
        WQE, then their one CQE overwritten with the newest index; the others a CQE per
        signalled or refused WQE."""
        qp, wqes = batch.qp, batch.wqes
        if qp.collapsed:
            for i in np.flatnonzero(syndromes).tolist():
                mlx5.write_cqe(qp.err_cq, qp.cqes_written, qp.qpn, int(wqes["index"][i]), int(syndromes[i]))
                qp.cqes_written += 1
            mlx5.write_collapsed_cqe(qp.cq, qp.qpn, int(wqes["index"][-1]))
        else:
            for i in np.flatnonzero(wqes["signaled"] | (syndromes != 0)).tolist():
                syndrome = int(syndromes[i])
                mlx5.write_cqe(qp.cq, qp.cqes_written, qp.qpn, int(wqes["index"][i]), syndrome,
                               0 if syndrome else int(wqes["length"][i]))
                qp.cqes_written += 1
        if qp.on_completion is not None:
            qp.on_completion()

    def _wait(self, request) -> None:
        """Wait for one MPI transfer that is already under way, yielding the core."""
        while not request.Test():
            time.sleep(0)

    def _receive(self, local, source: int, tag: int) -> None:
        """Receive a payload sent on its own into the local bytes (device memory: through a host buffer)."""
        buffer = np.empty(local.nbytes, np.uint8) if isinstance(local, DeviceSpan) else local
        self._wait(self.comm.Irecv(buffer, source, tag))
        if buffer is not local:
            _write(local, buffer, 0)

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
        if self._small_writes(packets, payload):
            count = 0                   # applied all at once
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
        self._isend(np.array([len(results), len(packed)], np.uint64).tobytes() + results.tobytes() + packed,
                    source, _TAG_RESPONSE)
        for data in large:
            self._isend(data, source, _TAG_RESPONSE_DATA)

    def _small_writes(self, packets: np.ndarray, payload) -> bool:
        """Apply a batch of aligned 8-byte writes into one region at once (the hot case: many
        threads' ``p``) and return True; False, having touched nothing, for any other batch
        or if any packet would be refused (the one-by-one path then answers each)."""
        if not (len(packets) > 1 and (packets["opcode"] == mlx5.OP_RDMA_WRITE).all()
                and (packets["flags"] == _PACKED).all() and (packets["length"] == 8).all()):
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
                              _TAG_REQUEST_DATA)
            elif target is not None:
                _write(target, incoming, int(packet["raddr"]))
            return (0 if target is not None else mlx5.SYNDROME_REMOTE_ACCESS), 0
        if opcode == mlx5.OP_RDMA_READ:
            target = self._target(packet, length, ACCESS_REMOTE_READ)
            if target is None:
                return mlx5.SYNDROME_REMOTE_ACCESS, 0
            if length <= PACK_LIMIT:
                out.append(_word(_read(target), int(packet["raddr"])).tobytes())
            else:
                large.append(np.array(_read(target)))   # a snapshot: later requests may change the bytes
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


def sleep_until(fn: str, timeout: float, done, waiting_for, nic: Nic, block) -> None:
    """Sleep until ``done()``: ``block(seconds)`` sleeps until whoever writes completions
    wakes this thread (no polling), or the seconds pass. PgasTimeoutError naming
    ``waiting_for()`` after ``timeout`` seconds; PgasError if the NIC thread failed."""
    if done():
        return
    started = time.monotonic()
    deadline = started + timeout
    heartbeat = _job.Heartbeat(fn, started)
    while not done():
        nic.check_alive(fn)
        now = time.monotonic()
        if now >= heartbeat.due:
            heartbeat.beat(now)
        left = deadline - now
        if left <= 0:
            raise PgasTimeoutError(f"{fn}: waited PGAS_TIMEOUT={timeout:g} s for {waiting_for()}")
        block(min(left, 0.1))


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
