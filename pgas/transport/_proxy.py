"""The CPU proxy: turns compact requests from device threads (and host calls) into WQEs.

A requester reserves a slot of the request ring (a lock on the producer ticket; a full
ring makes it wait, never drop), writes a compact request and marks it ready. The proxy
thread takes ready requests in ticket order, writes each as an mlx5 WQE into the queue
pair of its PE and rings the NIC's doorbell once per post, as ``ibv_post_send`` does. It
reads the completion queues, lands fetched values in the request's slot and advances the
completion counter: every ticket below it is complete. ``quiet`` waits for that counter to
pass the tickets issued before it; blocking calls wait for their own slot.

Requests to one PE go through one queue pair in ticket order and the NIC delivers them in
that order, so ``fence`` needs no work here (docs/transports.md, guarantees).
"""
from __future__ import annotations

import threading
import time
import traceback

import numpy as np

from ..core._errors import PgasError
from ..core._waiting import Wait, precise_sleeps, sleep_until
from ..nic import _mlx5 as mlx5
from ..nic._nic import Nic
from ..nic._regions import ACCESS_LOCAL
from ._ibgda_ir import (AMO_ADD, AMO_AND, AMO_CAS, AMO_FETCH, AMO_OR, AMO_SWAP, AMO_XOR, GET, OP_NAMES, PUT, PUT_INLINE,
                        atomic_segments)
from ._lanes import Lanes
from ..wire._nic_queues import NicQueues
from ..wire._worker import WAIT_SPINS, next_wait_pause

__all__ = ["Proxy", "PUT", "PUT_INLINE", "GET", "AMO_ADD", "AMO_CAS", "AMO_SWAP", "AMO_AND", "AMO_OR",
           "AMO_XOR", "AMO_FETCH", "OP_NAMES", "REQUEST", "atomic_wqe"]

CAPACITY = 1024
REQUEST = np.dtype([("ticket", "u8"), ("state", "u1"), ("op", "u1"), ("size", "u1"), ("waited", "u1"),
                    ("pe", "u4"), ("lane", "u4"), ("raddr", "u8"), ("laddr", "u8"), ("lkey", "u4"), ("syndrome", "u4"),
                    ("nbytes", "u8"), ("value", "u8"), ("compare", "u8"), ("result", "u8")])
_FREE, _READY, _POSTED, _DONE = range(4)
_MAX_PAUSE_S = 2e-3
_WAIT_BACKOFF_S = 100e-6    # longest sleep of a requester waiting for the NIC


class Proxy:
    """The request ring and the proxy thread of one PE, posting to ``nic``."""

    def __init__(self, nic: Nic, timeout: float, native: NicQueues | None = None):
        self.nic = nic
        self.timeout = timeout
        self.native = native        # the native NIC executing the WQEs, or None: the NIC's thread
        self._rows: dict[int, int] = {}     # by queue pair number: its row in the native NIC
        self.ring = np.zeros(CAPACITY, REQUEST)
        # fetched atomic values land here (one 8-byte cell per slot, registered for the NIC)
        self.cells = np.zeros(CAPACITY, np.uint64)
        self.cells_region = nic.register(self.cells.view(np.uint8), ACCESS_LOCAL)
        self._next = 0          # next ticket to hand out
        self._freed = 0         # tickets below this have their slots free again
        self._taken = 0         # next ticket the proxy posts
        self._completed = 0     # the completion counter: every ticket below it is done
        # per PE: the completion counter, then its newest request's ticket + 1 (in flight
        # while the first is below the second: ``in_flight_words``)
        self._in_flight = np.zeros((len(nic.remote), 2), np.int64)
        self._reserve = threading.Lock()
        self._wake = threading.Event()
        self._completion = threading.Condition()     # notified after completions land
        self._posted: dict[int, dict] = {}      # by queue pair number: wqe index -> ticket
        self._producer: dict[int, int] = {}     # by queue pair number: basic blocks posted
        self._consumer: dict[int, int] = {}     # by queue pair number: basic blocks completed
        self._cqes_read: dict[int, int] = {}
        self._all_qps: tuple = ()           # replaced whole when a lane is added (the thread reads it)
        self.lanes = Lanes(self._new_qps(0), lambda: self._new_qps(len(self.lanes)))     # a QP to each peer per lane
        self.errors: list[str] = []         # failures of requests nobody waits for, for quiet
        self._running = True
        self._thread = threading.Thread(target=self._serve, name=f"pgas-proxy-pe{nic.my_pe}", daemon=True)
        self._thread.start()

    def _new_qps(self, lane: int) -> dict:
        """A queue pair to each peer, known to the proxy thread (made one lane at a time)."""
        qps = {peer: self.nic.create_qp(peer, served=self.native is None) for peer in self.nic.peers}
        endpoints = self.native.endpoints(lane) if self.native is not None else {}
        for peer, qp in qps.items():
            self._posted[qp.qpn], self._producer[qp.qpn], self._consumer[qp.qpn] = {}, 0, 0
            self._cqes_read[qp.qpn] = 0
            qp.on_completion = self._wake.set
            if self.native is not None:
                self._rows[qp.qpn] = self.native.add(qp, endpoints[peer])
        self._all_qps = self._all_qps + tuple(qps.values())
        return qps

    def close(self) -> None:
        self._running = False
        self._wake.set()
        self._thread.join()
        self.nic.deregister(self.cells_region)

    # Requesters --------------------------------------------------------------------

    def put_inline(self, fn: str, pe: int, raddr: int, size: int, bits: int) -> None:
        """An inline write of ``size`` bytes (``bits``) that nobody waits for (``Ibgda.put_inline``)."""
        self.submit(fn, PUT_INLINE, pe, raddr, size=size, nbytes=size, value=bits, waited=False)

    def submit(self, fn: str, op: int, pe: int, raddr: int, *, laddr: int = 0, lkey: int = 0, nbytes: int = 0,
               size: int = 8, value: int = 0, compare: int = 0, waited: bool = True, lane: int = 0) -> int:
        """Queue one request for the queue pair to ``pe`` of ``lane``; returns its ticket.
        ``waited``: the caller will ``wait`` for it (else a failure is kept for the next
        ``quiet``)."""
        mlx5.check_message(fn, nbytes)
        clock = None
        while True:
            with self._reserve:
                if self._next - self._reclaim() < CAPACITY:
                    ticket = self._next
                    self._next += 1
                    self._in_flight[pe, 1] = ticket + 1
                    break
            clock = clock or Wait(fn, self.timeout, backoff_s=_WAIT_BACKOFF_S)
            clock.pause(f"a free slot in the proxy's request ring ({CAPACITY} requests outstanding)")
        slot = self.ring[ticket % CAPACITY]
        slot["ticket"], slot["op"], slot["size"], slot["pe"], slot["raddr"] = ticket, op, size, pe, raddr
        slot["lane"] = lane
        slot["laddr"], slot["lkey"], slot["nbytes"], slot["value"], slot["compare"] = (
            laddr, lkey, nbytes, value & 0xFFFFFFFFFFFFFFFF, compare & 0xFFFFFFFFFFFFFFFF)
        slot["syndrome"], slot["waited"] = 0, waited
        slot["state"] = _READY      # last: the proxy takes the slot once it sees this
        self._wake.set()
        return ticket

    def in_flight_words(self) -> tuple[dict[int, int], int, int]:
        """Where a request to each PE shows as in flight: ``{pe: the address of its two
        words}`` and their indexes, the completion counter and its newest request's ticket
        + 1 (in flight while the first is below the second): the guard of the host's
        one-sided copies beside this path (``Ucx.guard_with``)."""
        return {pe: self._in_flight[pe:].ctypes.data for pe in self.nic.peers}, 0, 1

    def _reclaim(self) -> int:
        """Advance past done slots that nobody waits for any more (under the reserve lock)."""
        while self._freed < self._completed:
            slot = self.ring[self._freed % CAPACITY]
            if slot["waited"]:
                break
            slot["state"] = _FREE
            self._freed += 1
        return self._freed

    def copy_now(self, pe: int, offset: int, laddr: int, lkey: int, nbytes: int, to_peer: bool) -> None:
        """A put (``to_peer``) or get of ``nbytes`` at ``laddr`` (registered: ``lkey``) and
        ``offset`` of PE ``pe``'s heap, complete on return: one request, waited for."""
        fn, op = ("pgas.put", PUT) if to_peer else ("pgas.get", GET)
        self.wait(fn, self.submit(fn, op, pe, self.nic.remote[pe].base + offset, laddr=laddr, lkey=lkey,
                                  nbytes=nbytes))
        self.raise_failures(fn)

    def wait(self, fn: str, ticket: int) -> int:
        """Wait for request ``ticket``; its fetched value (atomics), or PgasError if refused."""
        slot = self.ring[ticket % CAPACITY]
        self._sleep_until(fn, lambda: slot["state"] == _DONE,
                          lambda: f"the NIC to complete the {OP_NAMES[int(slot['op'])]} to PE {int(slot['pe'])}",
                          lambda: [int(slot["pe"])])
        syndrome, result = int(slot["syndrome"]), int(slot["result"])
        message = self._describe(fn, slot) if syndrome else None
        slot["waited"] = 0          # the slot may be reused
        if message:
            raise PgasError(message)
        return result

    def quiet(self, fn: str, pes=None) -> None:
        """Wait until every request issued so far (to the PEs in set ``pes``) is complete;
        raise the first failure of a request nobody waited for."""
        target = self._next
        first = self._completed
        # the tickets to wait for (a slot below the counter may be reused: done anyway)
        tickets = [t for t in range(first, target) if pes is None or int(self.ring[t % CAPACITY]["pe"]) in pes]

        def outstanding():
            return [t for t in tickets if t >= self._completed and self.ring[t % CAPACITY]["state"] != _DONE]
        self._sleep_until(fn, lambda: not outstanding(),
                          lambda: f"the proxy to complete {len(outstanding())} outstanding "
                                  "operations to PEs on other nodes",
                          lambda: sorted({int(self.ring[t % CAPACITY]["pe"]) for t in outstanding()}))
        self.raise_failures(fn)

    def _sleep_until(self, fn: str, done, waiting_for, waits_for) -> None:
        """Sleep until ``done()`` (the proxy wakes its waiters after completions land);
        ``waits_for()``: the PEs of the requests waited for."""
        def block(seconds):
            with self._completion:      # checked under the lock the proxy notifies with: no lost wake-up
                if not done():
                    self._completion.wait(seconds)
        sleep_until(fn, self.timeout, done, waiting_for, self.nic.check_alive, block, waits_for)

    def raise_failures(self, fn: str) -> None:
        """Raise (and forget) the first failure of a completed request nobody waited for."""
        if self.errors:
            first, self.errors = self.errors[0], []
            raise PgasError(first)

    @staticmethod
    def _describe(fn: str, slot) -> str:
        return mlx5.refusal(fn, OP_NAMES[int(slot["op"])], int(slot["pe"]), int(slot["raddr"]), int(slot["nbytes"]),
                            int(slot["syndrome"]))

    # The proxy thread ----------------------------------------------------------------

    def _serve(self) -> None:
        precise_sleeps()
        pause = 0.0
        try:
            while self._running:
                self._wake.clear()
                seen = self.native.completions() if self.native is not None else 0
                busy = self._post_ready() | self._poll_completions()
                if busy:
                    pause = 0.0
                    time.sleep(0)
                elif self._completed == self._next:
                    pause = 0.0
                    self._wake.wait()       # idle: until a request (submit) or close wakes it
                elif self.native is not None:
                    # the native NIC writes CQEs without waking anyone: progress its worker
                    # (the answers' handlers run), then back off
                    if not self.native.progress_until(-1, seen + 1, WAIT_SPINS):
                        pause = next_wait_pause(pause)
                        self._wake.wait(pause)
                else:
                    pause = min(pause * 2 + 1e-5, _MAX_PAUSE_S)
                    self._wake.wait(pause)
        except BaseException:
            self.nic._fail("proxy thread:\n" + traceback.format_exc())

    def _post_ready(self) -> bool:
        """Post ready requests in ticket order while their send queues have room."""
        posted = False
        while self._taken < self._next:
            slot = self.ring[self._taken % CAPACITY]
            if slot["state"] != _READY or slot["ticket"] != self._taken:
                break
            qp = self.lanes[int(slot["lane"])][int(slot["pe"])]
            if qp.depth - (self._producer[qp.qpn] - self._consumer[qp.qpn]) < 2:
                break               # a full send queue: wait for completions
            self._post(qp, slot)
            slot["state"] = _POSTED
            self._taken += 1
            posted = True
        return posted

    def _post(self, qp, slot) -> None:
        op, size = int(slot["op"]), int(slot["size"])
        index = self._producer[qp.qpn]
        raddr, rkey = int(slot["raddr"]), self.nic.remote[qp.peer].rkey
        ticket = int(slot["ticket"])
        cell = self.cells_region.base + (ticket % CAPACITY) * 8
        lkey = self.cells_region.lkey
        if op == PUT:
            blocks = mlx5.write_wqe(qp.sq, index, qp.qpn, mlx5.OP_RDMA_WRITE, raddr, rkey, lkey=int(slot["lkey"]),
                                    laddr=int(slot["laddr"]), nbytes=int(slot["nbytes"]))
        elif op == PUT_INLINE:
            data = int(slot["value"]).to_bytes(8, "little")[:size]
            blocks = mlx5.write_wqe(qp.sq, index, qp.qpn, mlx5.OP_RDMA_WRITE, raddr, rkey, inline=data)
        elif op == GET:
            blocks = mlx5.write_wqe(qp.sq, index, qp.qpn, mlx5.OP_RDMA_READ, raddr, rkey, lkey=int(slot["lkey"]),
                                    laddr=int(slot["laddr"]), nbytes=int(slot["nbytes"]))
        else:
            opcode, opmod, operands = atomic_wqe(op, size, int(slot["value"]), int(slot["compare"]))
            blocks = mlx5.write_wqe(qp.sq, index, qp.qpn, opcode, raddr, rkey, opmod=opmod, lkey=lkey,
                                    laddr=cell, operands=operands)
        self._posted[qp.qpn][index & 0xFFFF] = (ticket, blocks)
        self._producer[qp.qpn] = index + blocks
        qp.dbr[0] = (index + blocks) & 0xFFFF                 # the doorbell record, then the doorbell
        if self.native is not None:
            self.native.ring(self._rows[qp.qpn], bool(slot["waited"]))
        else:
            self.nic.ring(qp.sq[index % qp.depth, :8].tobytes())

    def _poll_completions(self) -> bool:
        progressed = False
        for qp in self._all_qps:
            while True:
                cqe = mlx5.read_cqe(qp.cq, self._cqes_read[qp.qpn])
                if cqe is None:
                    break
                self._cqes_read[qp.qpn] += 1
                _, counter, syndrome = cqe
                ticket, blocks = self._posted[qp.qpn].pop(counter)
                self._consumer[qp.qpn] += blocks     # completions come in WQE order
                self._finish(ticket, syndrome)
                progressed = True
        if progressed:
            self._advance()
            with self._completion:
                self._completion.notify_all()
        return progressed

    def _finish(self, ticket: int, syndrome: int) -> None:
        slot = self.ring[ticket % CAPACITY]
        op, size = int(slot["op"]), int(slot["size"])
        if op >= AMO_ADD and not syndrome:
            fetched = self.cells[ticket % CAPACITY:ticket % CAPACITY + 1].view(np.uint8)[:size].tobytes()
            slot["result"] = int.from_bytes(fetched, "big")     # the NIC writes network byte order
        slot["syndrome"] = syndrome
        if syndrome and not slot["waited"]:
            self.errors.append(self._describe("pgas (non-blocking operation, reported at quiet)", slot))
        slot["state"] = _DONE

    def _advance(self) -> None:
        while self._completed < self._taken and self.ring[self._completed % CAPACITY]["state"] == _DONE:
            self._completed += 1
        self._in_flight[:, 0] = self._completed


def atomic_wqe(op: int, size: int, value: int, compare: int):
    """(opcode, opmod, operands) of the mlx5 atomic that does request ``op`` on ``size``
    bytes (``_ibgda_ir.atomic_segments``)."""
    _, opcode_opmod, *words = atomic_segments(op, size, value, compare)
    opcode = opcode_opmod & 0xFF
    return opcode, opcode_opmod >> 24, tuple(int(w) for w in words[:4 if opcode == mlx5.OP_MASKED_CS else 2])
