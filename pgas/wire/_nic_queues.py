"""The native NIC of one PE (``_nic_code``): its UCX worker, its table, the queue pairs it serves."""
from __future__ import annotations

import functools

import numpy as np
from numba import typeof, types

from ..core._errors import PgasError
from ..core._waiting import before_waiting, precise_sleeps
from ..nic import _mlx5 as mlx5
from . import _batch as batch, _nic_code as code, _rma as rma, _target as target, _ucp as ucp
from ._nic_code import (G_COMPLETIONS, G_EAGER_PARAMS, G_FLUSH_PARAMS, G_POLLED, G_READ_PARAMS, G_RECEIVE_PARAMS,
                        G_SEND_PARAMS, G_WAKE, G_WORKER, G_WRITE_PARAMS, G_QUEUES, DEPTH, MAX_QUEUES, Q_CQ, Q_CQES,
                        Q_COLLAPSED, Q_DBR, Q_DONE, Q_ENDPOINT, Q_ERR_CQ, Q_HEAP_BASE, Q_HEAP_KEY, Q_HEAP_SIZE,
                        Q_LOOK, Q_POLLED, Q_QPN, Q_REGIONS, Q_RMA_KEY, Q_RUNG, Q_SQ, TABLE_WORDS)
from ._worker import Worker

__all__ = ["NicQueues"]


class NicQueues:
    """The native NIC of one PE for the queue pairs ``add``ed to it (the GPU-initiated
    path's and the proxy's), on a UCX worker of its own that also serves this PE's heap to
    its peers. ``nic`` (``pgas.nic.Nic``) gives the peers, their heaps and the local keys;
    ``heap_region`` is this PE's heap as registered there. A heap in host memory (the
    simulator's) is also registered with UCX, and the peers' reached one-sided
    (``_rma.HeapKeys``; collective); a heap in GPU memory (the cuda backend: no ``view``)
    is refused to the peers until ``reach_heap`` gives its window, and reached by messages.
    ``wake``, ``answers``: the addresses of this PE's wake words (``core.native._wake_words``; 0:
    none): the target counts its writes into the heap at the first, the answers' handlers
    at the second. ``registered``: the memory made symmetric so far (heap offset -> bytes),
    registered with UCX apart from the heap (``_rma.HeapKeys``)."""

    def __init__(self, nic, heap_region, wake: int = 0, answers: int = 0, registered: dict[int, int] | None = None):
        from . import _cache as wire_cache
        from ._worker import serve
        wire_cache.drop_if_stale((code.drain, code.ring, code.post_and_ring, code.land, code.progress_until,
                                  serve))   # first
        on_answer, on_answers, on_get_received, on_read, on_flushed = code.callbacks()
        precise_sleeps()        # waiters' back-off sleeps end on time (this thread, and those it starts)
        self.nic = nic
        one_sided = heap_region.view is not None
        self.worker = Worker(nic.comm, nic.my_pe, nic.peers, request_bytes=target.REQUEST_USER_BYTES, rma=one_sided)
        try:
            self.heap_keys = rma.HeapKeys(self.worker, nic.comm, nic.my_pe, heap_region.base, heap_region.size,
                                          wake, registered) if one_sided else None
            self._looks = self.heap_keys.looks(self.worker.endpoints) if one_sided else None
        except BaseException:
            self.worker.close()
            raise
        self._rma_keys: dict[int, int] = {}     # endpoint -> UCX's key to its peer's heap
        self._heap_region = heap_region
        self._target = target.serve_heap(self.worker, heap_region.base, heap_region.size if one_sided else 0,
                                         heap_region.rkey, wake)
        self.table = np.zeros(TABLE_WORDS, np.int64)     # (untouched pages cost nothing)
        self._receive_params = ucp.request_params(0, on_get_received, self.table)
        self._send_params = ucp.request_params(ucp.AM_SEND_FLAG_REPLY | ucp.AM_SEND_FLAG_COPY_HEADER)
        self._eager_params = ucp.request_params(ucp.AM_SEND_FLAG_REPLY | ucp.AM_SEND_FLAG_COPY_HEADER
                                                | ucp.AM_SEND_FLAG_EAGER)
        # one-sided requests: a read's and a flush's completion (user data: the WQE's flight), a write's none
        self._read_params = ucp.request_params(0, on_read, self.table)
        self._flush_params = ucp.request_params(0, on_flushed, self.table)
        self._write_params = ucp.request_params(0)
        self.table[[G_WORKER, G_RECEIVE_PARAMS, G_SEND_PARAMS, G_EAGER_PARAMS, G_WAKE, G_READ_PARAMS, G_FLUSH_PARAMS,
                    G_WRITE_PARAMS]] = (
            self.worker.handle, self._receive_params.ctypes.data, self._send_params.ctypes.data,
            self._eager_params.ctypes.data, answers, self._read_params.ctypes.data, self._flush_params.ctypes.data,
            self._write_params.ctypes.data)
        self.worker.handle_messages(target.AM_ANSWER, on_answer, self.table.ctypes.data)
        self.worker.handle_messages(target.AM_ANSWERS, on_answers, self.table.ctypes.data)
        self.wqes = np.zeros(DEPTH, mlx5.WQE_FIELDS)         # room to decode a queue's worth of WQEs
        self._no_batches = batch.new_batches([], self._send_params.ctypes.data)   # the thread sends none
        self.worker.start(self._no_batches, (self.table, nic.keys.rows, np.zeros(DEPTH, mlx5.WQE_FIELDS)))
        self._queues = 0
        # ``progress_until``'s compiled form, its first five arguments bound: every blocking
        # request waits through it (the dispatcher's typing of eight took 0.7 µs more a call)
        waiting = (self.worker.handle, self.worker.waiters, self.table, nic.keys.rows, self.wqes)
        self._progress_until = functools.partial(
            code.progress_until.compile((*map(typeof, waiting), types.int64, types.int64, types.int64)), *waiting)
        if self._looks is not None:
            before_waiting.append(self._looks.look_due)

    @staticmethod
    def _row(q: int) -> int:
        """Queue ``q``'s row in the table (``_nic_code.row_of``, without a native call)."""
        return code.QUEUES_AT + q * code.QUEUE_WORDS

    def endpoints(self, lane: int) -> dict[int, int]:
        """The endpoints of lane ``lane`` (0: the worker's own; a new set of connections
        for each context's lane)."""
        return self.worker.endpoints if lane == 0 else self.worker.connect_again()

    def reach_heap(self, window) -> None:
        """This PE's heap is GPU memory reached through ``window`` (its ``native_address``:
        ``_window``): the peers' requests are applied through it from now on, and WQEs
        whose local side lies in the heap are copied through it."""
        region = self._heap_region
        region.window = window
        self.nic.keys.add(region)
        target.reach_through(self._target, window.native_address, region.size)

    def add(self, qp, endpoint: int, rung_at: int = 0, polled: bool = False) -> int:
        """Serve queue pair ``qp`` through ``endpoint``; ``rung_at``: the address of its
        rung word (0: none); ``polled``: its posters cannot ring (GPU threads), so the
        progress thread reads the rung word on every pass and never sleeps for long
        (``_worker.serve``). Its row in the table."""
        if qp.depth != DEPTH:
            raise PgasError(f"the native NIC serves queue pairs of {DEPTH} blocks (this is a bug of pgas)")
        if self._queues == MAX_QUEUES:
            raise PgasError(f"the native NIC serves at most {MAX_QUEUES} queue pairs (peers on other nodes x "
                            "communication contexts x paths); destroy contexts, or set PGAS_NIC_WIRE=mpi (the "
                            "emulated NIC's thread) or PGAS_REMOTE_TRANSPORT=ucx")
        q, self._queues = self._queues, self._queues + 1
        address = lambda array: 0 if array is None else array.__array_interface__["data"][0]    # noqa: E731
        self.table[self._row(q) + np.array([Q_SQ, Q_DBR, Q_RUNG, Q_CQ, Q_ERR_CQ, Q_QPN, Q_ENDPOINT, Q_COLLAPSED])] = (
            address(qp.sq), address(qp.dbr), rung_at, address(qp.cq), address(qp.err_cq), qp.qpn, endpoint,
            int(qp.collapsed))
        if self.heap_keys is not None:      # the peer's heap, reached one-sided
            base, size = self.heap_keys.ranges[qp.peer]
            self.table[self._row(q) + np.array([Q_RMA_KEY, Q_HEAP_BASE, Q_HEAP_SIZE, Q_HEAP_KEY, Q_LOOK,
                                                Q_REGIONS])] = (
                self._rma_key(qp.peer, endpoint), base, size, self.nic.remote[qp.peer].rkey,
                self._looks.address(qp.peer), self.heap_keys.regions_of(endpoint))
        if polled:
            self.table[self._row(q) + Q_POLLED] = 1
            self.table[G_POLLED] += 1
        self.table[G_QUEUES] = self._queues
        return q

    def _rma_key(self, pe: int, endpoint: int) -> int:
        """UCX's key to PE ``pe``'s heap for ``endpoint`` (unpacked once per endpoint)."""
        if endpoint not in self._rma_keys:
            self._rma_keys[endpoint] = self.heap_keys.unpack({pe: endpoint})[pe]
        return self._rma_keys[endpoint]

    def transports(self) -> dict[int, str]:
        """PE -> the UCX transports of the endpoint to it (``_rma.transports``)."""
        return rma.transports(self.worker)

    def poster(self, post_address: int, read_cq_address: int):
        """``post(q, descriptor, kind, opcode, raddr, rkey, lkey, laddr, nbytes, a0, a1, a2,
        a3, waited)``: post one WQE with the function at ``post_address`` (``post_wqe``'s
        signature: the GPU-initiated path's compiled poster), ring queue ``q``'s doorbell
        when it says so and read its CQ with the function at ``read_cq_address``
        (``read_cq``'s), in one native call (``_nic_code.post_and_ring``). What the poster
        returned. Its compiled form, called without the dispatcher's typing of 17
        arguments (their types never change: the rest are Python ints, the operands
        uint64)."""
        ucp.register_symbol("queue_post", post_address)
        ucp.register_symbol("queue_read_cq", read_cq_address)
        arguments = (self.table, self.nic.keys.rows, self.wqes)
        signature = (*map(typeof, arguments), *[types.int64] * 9, *[types.uint64] * 4, types.int64)
        return functools.partial(code.post_and_ring.compile(signature), *arguments)

    def bound(self, function):
        """``function`` given this NIC's table, keys, WQE scratch, worker and the worker's
        waiters count as its first five arguments: a requester's native call that posts,
        rings and progresses (``pgas.transport._ibgda.copy_once``)."""
        return functools.partial(function, self.table, self.nic.keys.rows, self.wqes, self.worker.handle,
                                 self.worker.waiters)

    def ring(self, q: int, waited: bool) -> None:
        """The doorbell of queue ``q``; ``waited``: the caller will wait for its WQE (``_nic_code.ring``)."""
        code.ring(self.table, q, self.nic.keys.rows, self.wqes, waited)

    def cqes_written(self, q: int) -> int:
        """CQEs written to queue ``q``'s CQ so far (its error CQ's, when collapsed)."""
        return int(self.table[self._row(q) + Q_CQES])

    def completions(self) -> int:
        """How many times CQEs were written, to any queue (a count that only grows)."""
        return int(self.table[G_COMPLETIONS])

    def progress_until(self, q: int, floor: int, spins: int) -> bool:
        """Progress the worker (at most ``spins`` rounds) until queue ``q``'s WQEs that
        start below block ``floor`` are complete (``q`` -1: until ``completions()`` has
        passed ``floor``); True when they are."""
        return self._progress_until(G_COMPLETIONS if q < 0 else self._row(q) + Q_DONE, floor, spins)

    def close(self) -> None:
        """After every PE is done with this one (a barrier): the worker, its thread, its
        endpoints, and the heap's registration."""
        if self._looks is not None and self._looks.look_due in before_waiting:
            before_waiting.remove(self._looks.look_due)
        if self.heap_keys is not None:
            self.heap_keys.close()
        self.worker.close()
