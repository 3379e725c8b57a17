"""The emulated NIC of one PE: memory regions, queue pairs, completion queues, and the wire.

One NIC per PE, a thread of the PE's process (so it reaches the heap as a NIC's DMA does,
with no mapping of its own). Whoever drives it (the CPU proxy today, device threads on the
GPU-initiated path) writes mlx5 WQEs into a queue pair's send queue, updates the doorbell
record and rings the doorbell. At a doorbell the NIC reads the new WQEs, checks each local
key and address, groups them per destination and sends them as one message over MPI (a
communicator of its own). The target's NIC checks every request's rkey and bounds, applies
writes, answers reads, and applies atomics with pgas's CPU atomics (so they stay atomic with
same-node PEs' loads, stores and atomics on the same word: ``_target``). Responses come back in order;
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
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..core.native import _cpu_atomics
from ..core._errors import PgasError
from ..core._waiting import precise_sleeps
from . import _mlx5 as mlx5
from ._packets import (FOLLOWS, HEADER, PACKED, PACKET, PACK_LIMIT, RESULT, TAG_REQUEST, TAG_REQUEST_DATA, TAG_RESPONSE,
                       TAG_RESPONSE_DATA)
from ._queue_pair import QueuePair
from ._regions import ACCESS_LOCAL_WRITE, DeviceSpan, KeyTable, MemoryRegion, RemoteRegion, read_local, write_local
from ._target import Responder
from ._wqe_code import read_wqes

__all__ = ["Nic"]

_MAX_PAUSE_S = 1e-3              # idle back-off ceiling between polls of the wire
_DEEP_PAUSE_S = 5e-3             # the ceiling after _DEEP_AFTER_S without traffic: an idle PE's
_DEEP_AFTER_S = 1.0              # NIC thread then costs ~0.5% of a core, not ~3% (a first
                                 # request from another node after that waits up to 5 ms more)
_HOT_PAUSE_S = 30e-6             # the ceiling while busy: requests in flight, or traffic lately
_SWITCH_INTERVAL_S = 50e-6       # see connect()
_HOT_FOR_S = 20e-3               # how long traffic keeps the NIC polling fast (as NAPI does)


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


class Nic(Responder):
    """One PE's NIC. ``register`` memory, ``connect`` (collective), then post WQEs on a
    ``create_qp(peer)`` and ``ring`` its doorbell; the queue pair's ``on_completion`` is
    called (from the NIC thread) after CQEs are written.

    ``on_failure``: called, from the NIC thread, when the NIC itself fails (after it has
    printed why): the owner ends the job there, so nothing waits for the NIC for ever. The
    NIC knows nothing of the runtime above it."""

    def __init__(self, comm, my_pe: int, on_failure: Callable[[], None]):
        self.comm = comm.Dup()      # the wire: a communicator of its own
        self.my_pe = my_pe
        self.on_failure = on_failure
        self.regions: dict[int, MemoryRegion] = {}          # by lkey
        self._by_rkey: dict[int, MemoryRegion] = {}
        self.keys = KeyTable()                              # the lkeys for native code
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
        self.on_written: Callable[[], None] | None = None    # after requests wrote local memory

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
        self.keys.add(region)
        if region.rkey:
            self._by_rkey[region.rkey] = region
        return region

    def deregister(self, region: MemoryRegion) -> None:
        self.regions.pop(region.lkey, None)
        self.keys.remove(region.lkey)
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

    def connect(self, heap: MemoryRegion, peers, serve: bool = True) -> None:
        """Collective: exchange every PE's heap region (base, size, rkey) as verbs programs
        do through their bootstrap; ``peers`` are the PEs reached through this NIC (whoever
        drives it creates its queue pairs to them, ``create_qp``). The thread starts now if
        ``serve`` (to answer peers' requests), else at the first queue pair."""
        from mpi4py import MPI
        if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
            raise PgasError("the emulated NIC needs MPI_THREAD_MULTIPLE; this MPI granted less "
                            "(set mpi4py.rc.thread_level = 'multiple' before importing mpi4py.MPI)")
        self.remote = [RemoteRegion(*region) for region in
                       self.comm.allgather((heap.base, heap.size, heap.rkey))]
        self.peers = list(peers)
        for peer in peers:
            self._inflight[peer] = deque()    # batches to the peer, of any of its queue pairs
        if peers and serve:
            self._start()

    def _start(self) -> None:
        """Start the thread (a PE whose PEs on other nodes are all reached through the ucx
        engine never needs it)."""
        # Every hand-off between a requester, the proxy and the NIC needs the interpreter
        # lock; numba's simulator polls its threads in a loop that holds it until the
        # switch interval (5 ms) forces it out. A short interval bounds each hand-off.
        sys.setswitchinterval(min(sys.getswitchinterval(), _SWITCH_INTERVAL_S))
        precise_sleeps()    # the calling thread, and the simulated threads it starts later
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

    def create_qp(self, peer: int, collapsed: bool = False, allocate=np.zeros, served: bool = True) -> QueuePair:
        """A new queue pair to ``peer`` (``ibv_create_qp``), its queues made by ``allocate``;
        see QueuePair for ``collapsed``. ``served``: this NIC's thread executes its WQEs
        (else native code does: ``pgas.wire._nic_code``)."""
        with self._rung_lock:     # threads of the PE make queue pairs (contexts): one number each
            qp = QueuePair(qpn=0x100 + len(self._by_qpn), peer=peer, collapsed=collapsed, allocate=allocate)
            self._by_qpn[qp.qpn] = qp
        if served and self._thread is None:
            self._start()
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
                for tag, handle in ((TAG_REQUEST, self._respond), (TAG_RESPONSE, self._complete)):
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
                ceiling = _HOT_PAUSE_S if hot else _DEEP_PAUSE_S if now - last_busy > _DEEP_AFTER_S else _MAX_PAUSE_S
                pause = min(pause * 2 + 5e-6, ceiling)
                self._doorbell.wait(pause)
        except BaseException:
            self._fail(traceback.format_exc())

    def _fail(self, text: str) -> None:
        """An internal NIC error ends the whole job, through ``on_failure`` (never a silent hang)."""
        self.failure = text
        sys.stderr.write("".join(f"[PE {self.my_pe}] pgas NIC thread: {line}\n" for line in text.splitlines()))
        sys.stderr.flush()
        self.on_failure()

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
        wqes = read_wqes(qp.sq, qp.nic_index, blocks)
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
            flags[:] = PACKED
        else:
            payloads = []
            for i in np.flatnonzero(writes).tolist():
                if inline[i]:
                    payloads.append(wqes["inline_data"][i, :int(nbytes[i])].tobytes())
                elif nbytes[i] <= PACK_LIMIT:
                    payloads.append(read_local(batch.local[i]).tobytes())
                else:
                    follow.append(read_local(batch.local[i]))
                    flags[i] = FOLLOWS
                    continue
                flags[i] = PACKED
            payload = b"".join(payloads)
        sent = ~batch.local_error
        count = int(sent.sum())
        if count:
            packets = np.zeros(count, PACKET)
            packets["opcode"], packets["opmod"], packets["flags"] = opcode[sent], wqes["opmod"][sent], flags[sent]
            packets["rkey"], packets["raddr"], packets["length"] = wqes["rkey"][sent], wqes["raddr"][sent], length[sent]
            packets["operands"] = wqes["operands"][sent]
            head = np.array([count, len(payload)], np.uint64).tobytes()
            self._isend(head + packets.tobytes() + payload, qp.peer, TAG_REQUEST)
            batch.data_sends = [self.comm.Isend(data, qp.peer, TAG_REQUEST_DATA) for data in follow]
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
        results = np.frombuffer(buf, RESULT, int(count), HEADER)
        payload = memoryview(buf)[HEADER + int(count) * RESULT.itemsize:]
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
                    write_local(local, np.frombuffer(payload, np.uint8, nbytes, position), 0)
                    position += nbytes
                else:
                    self._receive(local, source, TAG_RESPONSE_DATA)
            elif wqes["size"][i]:
                # the NIC writes fetched atomic values in network byte order, as ConnectX does
                size = int(wqes["size"][i])
                write_local(local, np.frombuffer(int(values[i]).to_bytes(8, "big")[8 - size:], np.uint8), 0)
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
            write_local(local, buffer, 0)

