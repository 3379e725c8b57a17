"""The GPU-initiated NIC path (IBGDA-style): the calling device thread posts its own WQEs.

No CPU thread sits between a device thread and the NIC: ``submit`` is one compiled call
(``_ibgda_code``) that reserves send-queue blocks, writes the mlx5 WQE and publishes it in
order, and the caller rings the NIC only if no doorbell is pending. Completions are read
from the queue's collapsed CQE (its WQE counter: every WQE up to it is complete) by the
thread that needs them; nothing here runs on its own. Fetched values (fetching atomics)
land in the queue's result cell of the WQE's first basic block, big-endian, as ConnectX
writes them. A refused WQE gets an error CQE of its own; the thread that next looks
decodes the WQE it names into a PgasError, for the thread waiting for it or for the next
``quiet``.

Same interface as the proxy (``Proxy``): ``submit`` returns a ticket, ``wait`` returns the
fetched value, ``quiet`` completes everything issued so far. One queue pair per peer, so
everything to one PE is delivered in issue order (``fence`` needs nothing).
"""
from __future__ import annotations

import functools
import heapq
import itertools
import sys
import threading

import numpy as np
from numba import carray, njit, typeof, types

from ..core._errors import PgasError
from ..core._waiting import Naps, Wait, sleep_until
from ..nic import _mlx5 as mlx5
from ..nic._nic import Nic
from ..nic._regions import ACCESS_LOCAL
from ..wire import _cache as wire_cache, _nic_code as nic_code
from ..wire._nic_queues import NicQueues
from ..wire._window import bytes_at, words_at
from ..wire._worker import WAIT_SPINS, next_wait_pause
from . import _ibgda_code as code
from ._ibgda_ir import AMO_ADD, GET, OP_NAMES, PUT, PUT_INLINE, atomic_segments
from ._lanes import Lanes

__all__ = ["Ibgda", "DeviceQueue"]

_WAIT_BACKOFF_S = 100e-6     # longest sleep of a thread polling a completion queue
_OPCODE = {PUT: mlx5.OP_RDMA_WRITE, PUT_INLINE: mlx5.OP_RDMA_WRITE, GET: mlx5.OP_RDMA_READ}
_KIND = {PUT: code.KIND_DATA, PUT_INLINE: code.KIND_INLINE, GET: code.KIND_DATA}
# operand words are non-negative Python ints (``post_and_ring`` is compiled for uint64s,
# which it takes from ints in a quarter of the time of numpy's uint64 scalars)
_NO_OPERANDS = (0,) * 4
_WAITED, _LAST, _FLOOR = code.W["waited"], code.W["last"], code.W["floor"]
_COPY_OPCODES = (mlx5.OP_RDMA_READ, mlx5.OP_RDMA_WRITE)      # [to_peer]


@njit(cache=True)
def copy_once(table, keys, wqes, worker, waiters, q, descriptor, depth, opcode, raddr, rkey, lkey, laddr, nbytes):
    """A WQE moving ``nbytes`` between ``laddr`` (registered: ``lkey``) and ``raddr``
    (``rkey``) that the caller waits for, posted on queue ``q`` of the native NIC (its
    descriptor at ``descriptor``, ``depth`` blocks) and rung, then the worker progressed
    (at most ``WAIT_SPINS`` rounds) until its CQE: -1 when it completed unrefused (its
    block free again); its first block when the caller must wait for it (``Ibgda.wait``:
    not yet complete, or refused); -2 when the queue had no room (the caller submits it
    as any request). One native call for what took a dozen Python ones; it keeps the
    interpreter lock throughout, so no other thread reads the queue's CQEs meanwhile."""
    posted = nic_code.post_and_ring(table, keys, wqes, q, descriptor, code.KIND_DATA, opcode, raddr, rkey, lkey,
                                    laddr, nbytes, 0, 0, 0, 0, 1)
    if posted < 0:
        return -2
    start = posted >> 1
    nic_code.progress_until(worker, waiters, table, keys, wqes, nic_code.row_of(q) + nic_code.Q_DONE, start + 1,
                            WAIT_SPINS)
    # the floor stops at a refused WQE until its error is read (``Ibgda._read_errors``)
    if nic_code.read_cq(descriptor) <= start:
        return start
    carray(bytes_at(carray(words_at(descriptor), (_WAITED + 1,))[_WAITED]), (depth,))[start % depth] = 0
    return -1


class DeviceQueue:
    """One queue pair driven by device threads: the NIC's QP (collapsed CQ) plus what the
    compiled code needs, in one descriptor (``_ibgda_code.DESCRIPTOR``). ``allocate(shape,
    dtype)`` makes its memory (zeroed): pinned host memory the GPU maps, on cuda."""

    def __init__(self, nic: Nic, peer: int, allocate=np.zeros, native=None, endpoint: int = 0, polled: bool = False):
        self.peer = peer
        self.heap_base, self.heap_rkey = nic.remote[peer].base, nic.remote[peer].rkey     # the peer's heap
        self.qp = nic.create_qp(peer, collapsed=True, allocate=allocate, served=native is None)
        self.depth = depth = self.qp.depth
        self.cells = allocate(depth, np.uint64)          # fetched values, one per basic block
        self.cells_region = nic.register(self.cells.view(np.uint8), ACCESS_LOCAL)
        self.waited = allocate(depth, np.uint8)          # a blocking caller still reads the result
        self.descriptor = allocate(len(code.DESCRIPTOR), np.uint64)
        words = {"sq": self.qp.sq, "dbr": self.qp.dbr, "cqe": self.qp.cq, "err_cq": self.qp.err_cq,
                 "cells": self.cells, "waited": self.waited}
        for name, array in words.items():
            self.descriptor[code.W[name]] = array.__array_interface__["data"][0]
        self.descriptor[code.W["depth"]] = depth
        self.descriptor[code.W["qpn"]] = self.qp.qpn
        self.address = self.descriptor.__array_interface__["data"][0]
        self.words = memoryview(self.descriptor)    # its words as Python ints (a third of numpy's reads)
        self.qp.rung = self.descriptor[code.W["rung"]:code.W["rung"] + 1]
        self.descriptor[code.W["rung_at"]] = self.qp.rung.__array_interface__["data"][0]
        self.sleepers: list = []        # heap of (completion floor awaited, id, event)
        self.lkey = self.cells_region.lkey
        self.native = native            # the native NIC serving it (``NicQueues``), or None: the NIC's thread
        # (``polled``: its posters cannot ring, GPU threads: the native NIC reads its rung word)
        self.row = native.add(self.qp, endpoint, int(self.descriptor[code.W["rung_at"]]), polled) if native else -1

    def counter(self, name: str) -> int:
        return self.words[code.W[name]]

    @property
    def unread_errors(self) -> bool:
        """The NIC has written error CQEs that nobody has read yet."""
        written = self.native.cqes_written(self.row) if self.native is not None else self.qp.cqes_written
        return written != self.counter("errors_read")


class Ibgda:
    """The GPU-initiated path of one PE: a device queue pair to each PE on another node."""

    def __init__(self, nic: Nic, timeout: float, native: NicQueues | None = None):
        self.nic = nic
        self.timeout = timeout
        self.native = native
        wire_cache.drop_if_stale((copy_once,))      # (it bakes in the native NIC's table layout)
        self._code = code.compiled()
        # with the native NIC: post and ring in one native call; a blocking copy, posted and completed in one
        self._post_and_ring = native.poster(self._code.post_address, self._code.progress_address) \
            if native is not None else None
        if native is not None:
            # its compiled form, called without the dispatcher's typing of 14 arguments (a
            # tenth of the call): their types never change (the rest are Python ints)
            arguments = (native.table, native.nic.keys.rows, native.wqes, native.worker.handle, native.worker.waiters)
            self._copy_once = native.bound(copy_once.compile((*map(typeof, arguments), *[types.int64] * 9)))
        self.errors: list[str] = []           # failures of requests nobody waits for, for quiet
        self._failed: dict[tuple, tuple] = {}   # (queue pair number, WQE index) -> refusal of a waited request
        self._errors_lock = threading.Lock()
        self._wakeups_lock = threading.Lock()
        self._sleeper_ids = itertools.count()
        self.lanes = Lanes(self._new_queues(0), lambda: self._new_queues(len(self.lanes)))   # queues to every peer
        self.queues = self.lanes[0]
        self._host_words = [queue.words for queue in self.queues.values()]     # (for ``quiet``)

    def _new_queues(self, lane: int) -> dict[int, DeviceQueue]:
        if self.native is not None:
            endpoints = self.native.endpoints(lane)
            return {peer: DeviceQueue(self.nic, peer, native=self.native, endpoint=endpoints[peer])
                    for peer in self.nic.peers}
        queues = {peer: DeviceQueue(self.nic, peer) for peer in self.nic.peers}
        for queue in queues.values():
            queue.qp.on_completion = functools.partial(self._completed, queue)
        return queues

    def _all_queues(self) -> list[DeviceQueue]:
        return [queue for queues in self.lanes for queue in queues.values()]

    def close(self) -> None:
        for queue in self._all_queues():
            queue.qp.rung = None
            self.nic.deregister(queue.cells_region)

    # Requesters --------------------------------------------------------------------

    def submit(self, fn: str, op: int, pe: int, raddr: int, *, laddr: int = 0, lkey: int = 0, nbytes: int = 0,
               size: int = 8, value: int = 0, compare: int = 0, waited: bool = True, lane: int = 0):
        """Post one request (the ops of ``_proxy``) on the queue pair to ``pe`` of ``lane``;
        returns its ticket. ``waited``: the caller will ``wait`` for it (else a failure is
        kept for the next ``quiet``)."""
        mlx5.check_message(fn, nbytes)
        queue = self.lanes[lane][pe] if lane else self.queues[pe]
        rkey = self.nic.remote[pe].rkey
        operands = _NO_OPERANDS
        if op in _KIND:
            kind, opcode = _KIND[op], _OPCODE[op]
            if op == PUT_INLINE:
                nbytes = size
                operands = (value & ((1 << (8 * size)) - 1), 0, 0, 0)
        else:
            kind, opcode, *operands = atomic_segments(op, size, value, compare, word=int)
            lkey, nbytes = queue.lkey, size
        clock = None
        while (posted := self._post(queue, kind, opcode, raddr, rkey, lkey, laddr, nbytes, operands, int(waited))) < 0:
            clock = clock or Wait(fn, self.timeout, backoff_s=_WAIT_BACKOFF_S, waits_for=lambda: [pe])
            self._poll(queue)       # completions free blocks
            self.nic.check_alive(fn)
            clock.pause(lambda: f"room in the send queue to PE {pe} ({queue.qp.depth} basic blocks in flight)")
        return queue, posted >> 1, op, size

    def put_inline(self, fn: str, pe: int, raddr: int, size: int, bits: int) -> None:
        """``submit`` of an inline write of ``size`` bytes (``bits``, fitting them) that
        nobody waits for, on lane 0: a device ``p`` to another node, posted without the
        general request's sorting (with the native post stubbed out, 0.4 µs against
        ``submit``'s 1.0-1.7)."""
        queue = self.queues[pe]
        if self._post_and_ring is None or self._post_and_ring(
                queue.row, queue.address, code.KIND_INLINE, mlx5.OP_RDMA_WRITE, raddr, self.nic.remote[pe].rkey,
                0, 0, size, bits, 0, 0, 0, 0) < 0:      # (not posted: the general path, which waits for room)
            self.submit(fn, PUT_INLINE, pe, raddr, size=size, nbytes=size, value=bits, waited=False)

    def copy_now(self, pe: int, offset: int, laddr: int, lkey: int, nbytes: int, to_peer: bool) -> None:
        """A put (``to_peer``) or get of ``nbytes`` at ``laddr`` (registered: ``lkey``) and
        ``offset`` of PE ``pe``'s heap, complete on return: with the native NIC posted and,
        most often, completed in one native call (``copy_once``); else waited for as any
        request (or, when the queue had no room, submitted as any)."""
        queue = self.queues[pe]
        if self.native is not None:
            start = self._copy_once(queue.row, queue.address, queue.depth, _COPY_OPCODES[to_peer],
                                    queue.heap_base + offset, queue.heap_rkey, lkey, laddr, nbytes)
            if start != -1 or self.errors:
                self._finish_copy(queue, start, offset, laddr, lkey, nbytes, to_peer)
        else:
            self._finish_copy(queue, -2, offset, laddr, lkey, nbytes, to_peer)

    def in_flight_words(self) -> tuple[dict[int, int], int, int]:
        """Where a request to each PE on the host's queue pairs (lane 0, the kernels' too)
        shows as in flight: ``{pe: the address of its queue's descriptor}``, and the
        indexes of two of its words, the completion floor and the last WQE posted (in
        flight while the first is below the second)."""
        return {pe: queue.address for pe, queue in self.queues.items()}, _FLOOR, _LAST

    def _finish_copy(self, queue: DeviceQueue, start: int, offset: int, laddr: int, lkey: int, nbytes: int,
                     to_peer: bool) -> None:
        """``copy_now``'s request that ``copy_once`` did not complete: submitted (-2) and
        waited for; then the failures of requests nobody waited for."""
        fn, op = ("pgas.put", PUT) if to_peer else ("pgas.get", GET)
        if start != -1:
            ticket = self.submit(fn, op, queue.peer, queue.heap_base + offset, laddr=laddr, lkey=lkey,
                                 nbytes=nbytes) if start == -2 else (queue, start, op, nbytes)
            self.wait(fn, ticket)
        self.raise_failures(fn)

    def _post(self, queue: DeviceQueue, kind, opcode, raddr, rkey, lkey, laddr, nbytes, operands, waited) -> int:
        """Post one WQE (``ibgda_post``'s arguments) and ring the doorbell when the post
        says so; what the post returned (-1: no room)."""
        a0, a1, a2, a3 = operands
        if self._post_and_ring is not None:
            return self._post_and_ring(queue.row, queue.address, kind, opcode, raddr, rkey, lkey, laddr, nbytes,
                                       a0, a1, a2, a3, waited)
        posted = self._code.post(queue.address, kind, opcode, raddr, rkey, lkey, laddr, nbytes, a0, a1, a2, a3, waited)
        if posted >= 0 and posted & 1:
            self.nic.ring(queue.descriptor[code.W["doorbell"]:code.W["doorbell"] + 1].tobytes())
        return posted

    def wait(self, fn: str, ticket) -> int:
        """Wait for the request ``ticket``; its fetched value (atomics), or PgasError if refused."""
        queue, start, op, size = ticket
        key = (queue.qp.qpn, start)
        try:
            # a refused WQE's error is read before the floor passes it; with the native NIC
            # the first rounds of progress are tried at once (most answers come within them)
            done = lambda: self._poll(queue) > start or key in self._failed     # noqa: E731
            if queue.native is None or not queue.native.progress_until(queue.row, start + 1, WAIT_SPINS) \
                    or not done():
                self._sleep_until(fn, queue, start + 1, done,
                                  lambda: f"the NIC to complete the {OP_NAMES[op]} to PE {queue.peer}")
            if key in self._failed:
                raise PgasError(mlx5.refusal(fn, *self._failed.pop(key)))
            if op >= AMO_ADD:      # its cell's first ``size`` bytes, in network byte order
                cell = int(queue.cells[start % queue.qp.depth]).to_bytes(8, sys.byteorder)
                return int.from_bytes(cell[:size], "big")
            return 0
        finally:
            queue.waited[start % queue.qp.depth] = 0      # its blocks may be reused

    def quiet(self, fn: str, pes=None) -> None:
        """Wait until every request posted so far (to the PEs in set ``pes``: each has its
        own queue) is complete; raise the first failure of a request nobody waited for."""
        if not self.lanes.several:
            for words in self._host_words:
                if words[_FLOOR] < words[_LAST]:
                    break
            else:       # nothing in flight (the common case after blocking calls)
                if self.errors:
                    self.raise_failures(fn)
                return
        for queue in self._all_queues() if self.lanes.several else self.queues.values():
            words = queue.words
            last = words[_LAST]      # the newest published WQE's index + 1
            # (the floor stops at a refused WQE until its error is read: past ``last``, nothing to read)
            if words[_FLOOR] < last and (pes is None or queue.peer in pes) and self._poll(queue) < last:
                self._sleep_until(fn, queue, last, lambda: self._poll(queue) >= last,
                                  lambda: f"the NIC to complete {last - queue.counter('floor')} basic blocks "
                                          f"of WQEs to PE {queue.peer}")
        if self.errors:
            self.raise_failures(fn)

    def _sleep_until(self, fn: str, queue: DeviceQueue, floor: int, done, waiting_for) -> None:
        """Read the CQs until ``done()``; between reads, sleep until the NIC has completed
        the WQEs below ``floor`` (on a GPU the thread would spin on the CQE; here it must
        leave the core to the NIC thread). Only the threads a completion satisfies are
        woken, not every waiting thread at each completion. With the native NIC the thread
        progresses its worker itself (the answers' handlers write the CQEs), then backs off."""
        if queue.native is not None:
            naps = Naps(next_wait_pause)    # (the answers' handlers end a nap)

            def block(seconds):
                naps.look()
                if not queue.native.progress_until(queue.row, floor, WAIT_SPINS):
                    naps.nap(seconds)
            sleep_until(fn, self.timeout, done, waiting_for, self.nic.check_alive, block, lambda: [queue.peer])
            return

        def block(seconds):
            event = threading.Event()
            with self._wakeups_lock:
                heapq.heappush(queue.sleepers, (floor, next(self._sleeper_ids), event))
            if not done():      # re-read after registering: a completion in between is not missed
                event.wait(seconds)
        sleep_until(fn, self.timeout, done, waiting_for, self.nic.check_alive, block, lambda: [queue.peer])

    def _completed(self, queue: DeviceQueue) -> None:
        """From the NIC thread, after it wrote CQEs of ``queue``: wake the threads whose
        WQEs are now complete (all of them when there are errors to report)."""
        floor = self._code.progress(queue.address)
        errors = queue.unread_errors
        with self._wakeups_lock:
            woken = []
            while queue.sleepers and (errors or queue.sleepers[0][0] <= floor):
                woken.append(heapq.heappop(queue.sleepers)[2])
        for event in woken:
            event.set()

    def raise_failures(self, fn: str) -> None:
        """Raise (and forget) the first failure of a completed request nobody waited for."""
        if self.errors:
            with self._errors_lock:
                first, self.errors = self.errors[0], []
            raise PgasError(first)

    # Completions -------------------------------------------------------------------

    def _poll(self, queue: DeviceQueue) -> int:
        """Read the queue's CQs: report error CQEs, advance the completion floor; returns it."""
        floor = self._code.progress(queue.address)
        if queue.unread_errors:
            self._read_errors(queue)
            floor = self._code.progress(queue.address)
        return floor

    def _read_errors(self, queue: DeviceQueue) -> None:
        with self._errors_lock:
            while (found := self._code.refused(queue.address)) >= 0:
                start, syndrome = found >> 8, found & 0xFF
                wqe = mlx5.read_wqe(queue.qp.sq, start)    # intact: the floor waits at it
                what = mlx5.OPCODE_NAMES.get(wqe.opcode, f"opcode {wqe.opcode:#x}")
                nbytes = wqe.nbytes or wqe.atomic_size
                refusal = (what, queue.peer, wqe.raddr, nbytes, syndrome)
                if queue.waited[start % queue.qp.depth]:
                    self._failed[(queue.qp.qpn, start)] = refusal
                else:
                    self.errors.append(mlx5.refusal("pgas (non-blocking operation, reported at quiet)", *refusal))
                queue.descriptor[code.W["errors_read"]] += 1
