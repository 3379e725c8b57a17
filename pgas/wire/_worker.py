"""One PE's UCX worker: its context, its endpoints to the PEs it reaches over the wire,
active-message handlers, and a progress thread that sleeps until the wire has something.

The progress thread is a Python thread that enters one numba ``nogil`` function and stays
there until ``close``: it progresses the worker (which runs the handlers: native code, no
interpreter lock), then arms the worker's event descriptor and sleeps in ``poll`` until
UCX has something for it. Nothing polls on a timer. Threads that wait for a reply
progress the worker themselves (UCX's multi-thread mode serialises them).
"""
from __future__ import annotations

import ctypes
import os
import socket
import threading
import time

import numpy as np
from numba import njit

from ..core._errors import PgasError
from ..nic import _mlx5 as mlx5
from . import _batch as batch, _native, _nic_code as nic_code, _target as target, _ucp as ucp
from ._batch import B_SLEEPING, B_STAGED

__all__ = ["Worker", "WAIT_SPINS", "WAIT_MAX_PAUSE_S", "next_wait_pause"]

# words of the progress thread's state: stop, the worker's event descriptor, the worker,
# threads waiting in ``progress_until``, wake messages handled (``_wakes.AM_WAKE``)
_STOP, _EFD, _WORKER, _WAITERS, _WAKES = range(5)
_IDLE_POLL_MS = 1000                 # a sleep ends at an event; this bounds it anyway
# How long the thread keeps looking (yielding the core) after a message before it sleeps:
# _HOT_NS, and _HOT_SENDING_NS once it has sent what rung doorbells announced (the native
# NIC's send path: a stream of device calls a few tens of microseconds apart, whose
# thread would otherwise sleep between them and cost a wake-up, tens of microseconds, at
# each). Measured between two hosts (docs/benchmarks.md): 1 ms for every thread raised
# 64-128 device threads' rates but slowed a host put+quiet, where the caller sends and
# waits itself and a longer-spinning thread only competes with it for the two cores.
_HOT_NS = 100_000
_HOT_SENDING_NS = 1_000_000
# With queues whose posters cannot ring (GPU threads, ``nic_code.G_POLLED``) the thread
# never sleeps on the events alone: it naps, from _NAP_NS doubling to _MAX_NAP_NS (to
# _DEEP_NAP_NS after _DEEP_AFTER_NS without traffic), and reads their rung words between
# naps (NVSHMEM's CPU proxy polls them without sleeping). A lone request after a quiet
# spell waits up to a nap. Measured (an idle PE, 10 s): naps of at most 500 us cost 5% of
# a core here, each wake-up ~25 us.
_NAP_NS, _MAX_NAP_NS, _DEEP_NAP_NS, _DEEP_AFTER_NS = 20_000, 500_000, 5_000_000, 1_000_000_000
_CLOSE_PAUSE_S, _CLOSE_WAIT_S = 1e-4, 10.0
# How a thread waiting for an answer waits (the ucx engine's and the native NIC's): rounds of
# progress (``progress_until``, each yielding the core when idle) before it sleeps: few, since
# a waiter holds the interpreter lock meanwhile (the other simulated threads wait); then
# sleeps growing to WAIT_MAX_PAUSE_S between rounds.
WAIT_SPINS = 20
WAIT_MAX_PAUSE_S = 1e-3


def next_wait_pause(pause: float) -> float:
    """The sleep after ``pause`` between a waiter's rounds of progress: doubling from 10 us,
    at most WAIT_MAX_PAUSE_S."""
    return min(pause * 2 + 10e-6, WAIT_MAX_PAUSE_S)


@njit(nogil=True, cache=True)
def sleep_on_events(worker, pollfd, milliseconds):
    """Sleep until the worker has events (or ``milliseconds`` pass)."""
    if _native.ucp_worker_arm(worker) == ucp.UCS_OK:
        pollfd[1] = 1                # POLLIN, and revents cleared
        _native.poll(pollfd.ctypes.data, 1, milliseconds)


@njit(nogil=True, cache=True)
def _nap_on_events(worker, pollfd, timespec, nanoseconds):
    """Sleep until the worker has events or ``nanoseconds`` pass; True if it has events."""
    if _native.ucp_worker_arm(worker) != ucp.UCS_OK:
        return True
    pollfd[1] = 1
    timespec[0], timespec[1] = nanoseconds // 1_000_000_000, nanoseconds % 1_000_000_000
    return _native.ppoll(pollfd.ctypes.data, 1, timespec.ctypes.data, 0) != 0


@njit(nogil=True, cache=True)
def serve(state, pollfd, batches, doorbells, keys, wqes):
    """Progress; after the last message, keep looking (yielding the core each time)
    for _HOT_NS (_HOT_SENDING_NS after sending doorbells' WQEs), as a NIC's interrupt
    moderation does, then sleep on the events. While requests wait in ``batches``, stay
    awake and send each batch once it is stale. While
    awake, send what the native NIC's doorbells announce (``doorbells``, ``keys``, ``wqes``:
    ``_nic_code.drain_rung``; rung while it sleeps, the ringing thread sends them). While
    a thread waits in ``progress_until`` (``state[_WAITERS]``) and this one has not sent
    doorbells' WQEs, leave the worker to the waiter: sleep on the events at once, and
    the progress made meanwhile does not keep it awake. With queues whose rung words must
    be polled (GPU threads'), it naps instead of sleeping (``_NAP_NS``)."""
    worker = state[_WORKER]
    timespec, pause = np.zeros(2, np.int64), np.zeros(2, np.int64)
    last = batch.now_ns(timespec)
    nic_code.sleeping(doorbells, False)
    window, nap = _HOT_NS, _NAP_NS
    while state[_STOP] == 0:
        wakes = state[_WAKES]
        progressed = _native.ucp_worker_progress(worker) != 0
        sent = nic_code.drain_rung(doorbells, keys, wqes, True)     # (doorbells even while busy)
        waited_on = state[_WAITERS] != 0 and window == _HOT_NS     # (a sender stays hot)
        if sent or progressed:
            nap = _NAP_NS
            if sent:
                last, window = batch.now_ns(timespec), _HOT_SENDING_NS
            elif not waited_on and state[_WAKES] == wakes:
                # (answers a waiter polls for itself do not keep it hot, nor a wake message:
                # nothing follows one, and a thread kept hot takes a core from the woken)
                last = batch.now_ns(timespec)
            continue
        if state[_STOP] != 0:
            break
        if batches[B_STAGED] != 0:      # sleep until the oldest batch is stale, then send it
            wait = batch.flush_stale(batches, batch.now_ns(timespec))
            if wait > 0:
                pause[0], pause[1] = 0, wait
                _native.nanosleep(pause.ctypes.data, 0)
            continue
        if not waited_on and batch.now_ns(timespec) - last < window:
            _native.sched_yield()
            continue
        batches[B_SLEEPING] = 1      # a thread that stages from now on sends at once
        target.fence()
        woken = True
        if batches[B_STAGED] == 0 and nic_code.sleeping(doorbells, True):
            if doorbells[nic_code.G_POLLED] == 0:
                sleep_on_events(worker, pollfd, _IDLE_POLL_MS)
            else:           # a nap that ends quietly leaves it asleep: the next one is longer
                woken = _nap_on_events(worker, pollfd, pause, nap)
                deep = batch.now_ns(timespec) - last > _DEEP_AFTER_NS
                nap = min(2 * nap, _DEEP_NAP_NS if deep else _MAX_NAP_NS)
        nic_code.sleeping(doorbells, False)
        batches[B_SLEEPING] = 0
        if woken:
            last = batch.now_ns(timespec)
            window = _HOT_NS


@njit(cache=True)
def progress_until(worker, waiters, word, value, spins):
    """Progress until ``word[0] >= value``, at most ``spins`` rounds (yielding the
    core between empty ones); True when it got there. Counted in ``waiters[0]``
    (``Worker.waiters``: the progress thread leaves the worker to it meanwhile). It keeps
    the interpreter lock: a bounded wait, and a simulated thread that let the lock go would
    wait for numba's polling loop to hand it back (up to the 5 ms switch interval)."""
    waiters[0] += 1         # (waiters hold the interpreter lock: one at a time)
    for _ in range(spins):
        if word[0] >= value:
            break
        if _native.ucp_worker_progress(worker) == 0:
            _native.sched_yield()
    waiters[0] -= 1
    return word[0] >= value


class Worker:
    """A UCP worker with active messages (and with ``rma``, one-sided access: ``_rma``),
    connected to ``peers`` (PE numbers) through ``comm`` (collective over it). ``handle(id, callback, arg)`` installs a handler before
    ``start``; ``endpoints[pe]`` is the handle to send to PE ``pe``. Every UCX request of
    the worker has ``request_bytes`` of its own for the caller (at the request's handle)."""

    def __init__(self, comm, my_pe: int, peers, request_bytes: int = 0, rma: bool = False):
        self.lib = lib = ucp.load()
        self.my_pe = my_pe
        hosts = comm.allgather(socket.gethostname())
        config = ctypes.c_int64()
        ucp.check(lib.ucp_config_read(0, 0, ctypes.addressof(config)), "ucp_config_read")
        if any(hosts[pe] != hosts[my_pe] for pe in peers) and "UCX_TLS" not in os.environ:
            # Peers on other hosts are never reached by shared memory, but hosts that are
            # network namespaces of one machine look like one node to UCX: its shared memory
            # would carry the messages while its wake-ups (per namespace) never arrive. With
            # one-sided access (``rma``) UCX may still reach their memory by CMA, which
            # carries no messages and needs no wake-up (as MPI's windows are reached there).
            tls = b"^posix,sysv,xpmem" if rma else b"^shm"
            ucp.check(lib.ucp_config_modify(config.value, b"TLS", tls), "ucp_config_modify")
        features = ucp.FEATURE_AM | ucp.FEATURE_WAKEUP | (ucp.FEATURE_RMA if rma else 0)
        params = ucp.Params(field_mask=ucp.PARAM_FIELD_FEATURES | ucp.PARAM_FIELD_ESTIMATED_NUM_EPS
                            | ucp.PARAM_FIELD_REQUEST_SIZE, features=features,
                            estimated_num_eps=comm.Get_size(), request_size=request_bytes)
        context = ctypes.c_int64()
        status = lib.ucp_init_version(ucp.API_MAJOR, ucp.API_MINOR, ctypes.addressof(params), config.value,
                                      ctypes.addressof(context))
        lib.ucp_config_release(config.value)
        ucp.check(status, "ucp_init")
        self.context = context.value
        worker_params = ucp.WorkerParams(field_mask=ucp.WORKER_PARAM_FIELD_THREAD_MODE,
                                         thread_mode=ucp.UCS_THREAD_MODE_MULTI)
        worker = ctypes.c_int64()
        ucp.check(lib.ucp_worker_create(self.context, ctypes.addressof(worker_params), ctypes.addressof(worker)),
                  "ucp_worker_create")
        self.handle = worker.value
        efd = ctypes.c_int()
        ucp.check(lib.ucp_worker_get_efd(self.handle, ctypes.addressof(efd)), "ucp_worker_get_efd")
        self.state = np.array([0, efd.value, self.handle, 0, 0], np.int64)
        self.waiters = self.state[_WAITERS:_WAITERS + 1]    # for ``progress_until``
        self.wakes_address = self.state.ctypes.data + 8 * _WAKES    # counted by ``_wakes``' handler
        self._comm = comm
        self._addresses: dict[int, bytes] = {}      # peers' worker addresses, for more endpoints
        self._more_endpoints: list[int] = []         # made by connect_again, closed with the worker
        self.endpoints = self._connect(comm, peers)
        batch.batch_code()      # the symbols the loops call
        nic_code.symbols()
        self._serve, self.sleep_on_events, self.progress_until = serve, sleep_on_events, progress_until
        self._handlers = []            # keep the callbacks alive
        self._thread = None

    def _connect(self, comm, peers) -> dict[int, int]:
        """Exchange worker addresses (an allgather over ``comm``) and make an endpoint per peer."""
        lib = self.lib
        address, length = ctypes.c_int64(), ctypes.c_size_t()
        ucp.check(lib.ucp_worker_get_address(self.handle, ctypes.addressof(address), ctypes.addressof(length)),
                  "ucp_worker_get_address")
        mine = ctypes.string_at(address.value, length.value)
        lib.ucp_worker_release_address(self.handle, address.value)
        everyone = comm.allgather(mine)
        self._addresses = {pe: everyone[pe] for pe in peers}
        return {pe: self._endpoint(pe) for pe in peers}

    def _endpoint(self, pe: int) -> int:
        """A new endpoint to PE ``pe``'s worker (a connection of its own)."""
        theirs = ctypes.create_string_buffer(self._addresses[pe], len(self._addresses[pe]))
        params = ucp.EpParams(field_mask=ucp.EP_PARAM_FIELD_REMOTE_ADDRESS | ucp.EP_PARAM_FIELD_ERR_HANDLING_MODE,
                              address=ctypes.addressof(theirs), err_mode=ucp.ERR_HANDLING_MODE_NONE)
        endpoint = ctypes.c_int64()
        ucp.check(self.lib.ucp_ep_create(self.handle, ctypes.addressof(params), ctypes.addressof(endpoint)),
                  f"ucp_ep_create (to PE {pe})")
        return endpoint.value

    def connect_again(self) -> dict[int, int]:
        """A second set of endpoints, one to each peer (not collective: the peers' workers
        take the new connections as they progress); closed with the worker."""
        endpoints = {pe: self._endpoint(pe) for pe in self._addresses}
        self._more_endpoints += endpoints.values()
        return endpoints

    def handle_messages(self, am_id: int, callback, arg: int) -> None:
        """Call numba ``cfunc`` ``callback`` (``ucp_am_recv_callback_t``) with ``arg`` for
        every whole active message ``am_id`` that arrives."""
        params = ucp.AmHandlerParams(field_mask=ucp.AM_HANDLER_PARAM_FIELDS, id=am_id, flags=ucp.AM_FLAG_WHOLE_MSG,
                                     cb=callback.address, arg=arg)
        ucp.check(self.lib.ucp_worker_set_am_recv_handler(self.handle, ctypes.addressof(params)),
                  "ucp_worker_set_am_recv_handler")
        self._handlers.append(callback)

    def start(self, batches: np.ndarray, doorbells: tuple | None = None) -> None:
        """Start the progress thread (after the handlers are in); it sends the stale
        batches of ``batches`` (``pgas.wire._batch``) and what the doorbells of
        ``doorbells`` announce (the native NIC's table, keys and room to decode WQEs)."""
        pollfd = np.zeros(2, np.int32)          # struct pollfd: fd, events | revents << 16
        pollfd[0] = self.state[_EFD]
        if doorbells is None:                   # no NIC: a table with no queues
            doorbells = (np.zeros(nic_code.GLOBAL_WORDS, np.int64), np.zeros((1, 4), np.int64),
                         np.zeros(1, mlx5.WQE_FIELDS))
        self._kept = batches, doorbells         # alive while the thread reads them
        self._thread = threading.Thread(target=self._serve, args=(self.state, pollfd, batches, *doorbells),
                                        name=f"pgas-wire-pe{self.my_pe}", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Close the endpoints, then (once every PE has: collective over the ``comm`` of
        init) stop the thread and free the worker. Every peer must be done with this PE:
        after a barrier."""
        lib = self.lib
        params = ucp.RequestParams()
        for endpoint in [*self.endpoints.values(), *self._more_endpoints]:
            request = lib.ucp_ep_close_nbx(endpoint, ctypes.addressof(params))
            if request > 0:
                while lib.ucp_request_check_status(request) == ucp.UCS_INPROGRESS:
                    lib.ucp_worker_progress(self.handle)
                    time.sleep(_CLOSE_PAUSE_S)
                lib.ucp_request_free(request)
        self.endpoints, self._more_endpoints = {}, []
        # no worker goes while a peer still flushes its endpoint to it (it would be told
        # "Connection reset by remote peer"); a peer that never comes is not waited for long
        everyone = self._comm.Ibarrier()
        deadline = time.monotonic() + _CLOSE_WAIT_S
        while not everyone.Test() and time.monotonic() < deadline:
            time.sleep(_CLOSE_PAUSE_S)
        if self._thread is not None:
            self.state[_STOP] = 1
            lib.ucp_worker_signal(self.handle)
            self._thread.join()
            self._thread = None
        lib.ucp_worker_destroy(self.handle)
        lib.ucp_cleanup(self.context)


def version() -> str:
    """UCX's version, or why it cannot be loaded."""
    try:
        return ucp.load().version
    except PgasError as e:
        return f"unavailable: {e}"
