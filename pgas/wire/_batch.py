"""Coalescing of small requests: the requests that need no answer before ``quiet`` (inline
puts of up to 8 bytes, atomics that fetch nothing) wait in a per-endpoint batch and travel
BATCH requests to one active message, as a NIC rings its doorbell once for many work
requests. On TCP each message is a ``send`` system call, about half of what a small
request costs; a batch pays it once.

A batch goes when it is full, before any other request to the same PE (so requests to
one PE stay in order), at ``quiet``, when a thread of this PE starts to wait for anything
(``pgas.core._waiting``), at once while the worker's progress thread sleeps (no traffic
lately), and at the latest STALE_NS after its first request: the awake progress thread
sends it (``flush_stale``), so a lone put is delivered even when nobody waits or quiets. The batch is the message's header (UCX copies it at once), the target
applies the requests in order and answers them in one message.

The batches are one int64 array: GLOBAL_WORDS words (a lock, whether the progress thread
sleeps, how many requests are staged, the send parameters, send failures), then a row per
peer: its endpoint, how many requests it holds, when the first came, what the requester's
one-sided path needs (``pgas.transport._ucx``), and the requests.
Posting threads hold the interpreter lock; the progress thread does not, so both take the
batches' lock (a compare-and-swap word) while they touch them.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..core.native._llvm import built_once
from . import _native, _target as target, _ucp as ucp

__all__ = ["BATCH", "STALE_NS", "B_SLEEPING", "B_STAGED", "B_FAILED", "B_PARAMS", "B_EAGER_PARAMS", "B_UNFLUSHED",
           "GLOBAL_WORDS", "ROW_WORDS", "P_ENDPOINT", "P_FENCE", "P_RKEY", "P_KEY", "P_BASE", "P_SIZE", "P_UNFLUSHED",
           "P_LAST_SENT", "P_REGIONS", "new_batches", "batch_code"]

BATCH = target.MAX_BATCH     # requests per message (16: 1 KiB of header)
STALE_NS = 100_000           # the longest a request waits in a batch
# (and whether any row has one-sided writes not yet flushed)
B_LOCK, B_SLEEPING, B_STAGED, B_PARAMS, B_FAILED, B_PEERS, B_EAGER_PARAMS, B_UNFLUSHED, B_CLOCK = range(9)
GLOBAL_WORDS = B_CLOCK + 2          # the clock: a struct timespec the stagers read the time into
# a row: the endpoint, how many requests it holds, when the first came, the request whose
# data may land after what follows (its ticket + 1; 0: none: ``pgas.transport._ucx.post``),
# the peer heap's UCX key for this endpoint (0: no one-sided access), its key as pgas names it,
# its base and size, whether one-sided writes to it may not have landed yet (no flush
# since), and the last request sent to it as a message (its ticket + 1; 0: none since a
# one-sided one, which waits for it: ``pgas.transport._ucx.post``), and the address of the
# endpoint's table of UCX's keys to the peer's memory made symmetric (``_rma.key_at``; 0: none)
P_ENDPOINT, P_COUNT, P_FIRST_NS, P_FENCE, P_RKEY, P_KEY, P_BASE, P_SIZE, P_UNFLUSHED, P_LAST_SENT, P_REGIONS = \
    range(11)
P_REQUESTS = 11
ROW_WORDS = P_REQUESTS + BATCH * target.REQUEST_WORDS


def new_batches(endpoints: list[int], params_address: int, eager_params_address: int = 0,
                heaps: list[tuple[int, int, int, int, int]] | None = None) -> np.ndarray:
    """The batches of a requester whose peers' endpoints are ``endpoints`` (row i: peer i),
    sent with the ``ucp_request_param_t`` at ``params_address`` (as all its requests; those
    whose data must go eagerly with the one at ``eager_params_address``); ``heaps[i]``: peer
    i's heap for one-sided access (its UCX key for that endpoint, its pgas key, base, size,
    and the endpoint's table of keys to memory made symmetric there)."""
    batches = np.zeros(GLOBAL_WORDS + ROW_WORDS * len(endpoints), np.int64)
    batches[B_PARAMS], batches[B_EAGER_PARAMS], batches[B_PEERS] = params_address, eager_params_address, len(endpoints)
    for row, endpoint in enumerate(endpoints):
        at = GLOBAL_WORDS + row * ROW_WORDS
        batches[at + P_ENDPOINT] = endpoint
        if heaps is not None:
            batches[at + P_RKEY:at + P_SIZE + 1] = heaps[row][:4]
            batches[at + P_REGIONS] = heaps[row][4]
    return batches


@njit(nogil=True, cache=True)
def now_ns(timespec, at=0):
    """CLOCK_MONOTONIC in nanoseconds, read into ``timespec[at:at + 2]``."""
    _native.clock_gettime(1, timespec.ctypes.data + 8 * at)
    return timespec[at] * 1_000_000_000 + timespec[at + 1]


@njit(nogil=True, cache=True)
def lock(batches):
    address = batches.ctypes.data + 8 * B_LOCK
    while target.apply_atomic(target.AMO_CAS, 8, address, 1, 0) != 0:
        _native.sched_yield()   # held for one send at most


@njit(nogil=True, cache=True)
def unlock(batches):
    target.apply_atomic(target.AMO_SWAP, 8, batches.ctypes.data + 8 * B_LOCK, 0, 0)


@njit(nogil=True, cache=True)
def send_row(batches, row):
    """Send row ``row``'s batch (under the lock)."""
    at = GLOBAL_WORDS + row * ROW_WORDS
    count = batches[at + P_COUNT]
    if count == 0:
        return
    request = _native.ucp_am_send_nbx(batches[at + P_ENDPOINT], target.AM_BATCH,
                                      batches.ctypes.data + 8 * (at + P_REQUESTS), 8 * target.REQUEST_WORDS * count,
                                      0, 0, batches[B_PARAMS])
    if request > 0:
        _native.ucp_request_free(request)           # the header is copied; UCX completes the send
    elif request < 0:
        batches[B_FAILED] += count
    batches[at + P_COUNT] = 0
    batches[B_STAGED] -= count


@njit(nogil=True, cache=True)
def stage(batches, row, header):
    """Add the request ``header`` (REQUEST_WORDS words) to row ``row``'s batch; send the
    batch when full, or at once when the progress thread sleeps: nothing came or went
    for a while, so nothing would join it soon, and only a wake-up (a system call and a
    thread switch, as dear as the send) could get the thread to send it later."""
    at = GLOBAL_WORDS + row * ROW_WORDS
    lock(batches)
    count = batches[at + P_COUNT]
    if count == 0:
        batches[at + P_FIRST_NS] = now_ns(batches, B_CLOCK)     # (under the lock)
    for word in range(target.REQUEST_WORDS):
        batches[at + P_REQUESTS + count * target.REQUEST_WORDS + word] = header[word]
    batches[at + P_COUNT] = count + 1
    batches[B_STAGED] += 1
    target.fence()              # the count before the look at the progress thread (it does the reverse)
    if count + 1 == BATCH or batches[B_SLEEPING] != 0:
        send_row(batches, row)
    unlock(batches)


@njit(nogil=True, cache=True)
def flush_row(batches, row):
    """Send row ``row``'s batch now (before another request to that PE)."""
    if batches[GLOBAL_WORDS + row * ROW_WORDS + P_COUNT] != 0:
        lock(batches)
        send_row(batches, row)
        unlock(batches)


@njit(nogil=True, cache=True)
def flush_all(batches):
    if batches[B_STAGED] != 0:
        lock(batches)
        for row in range(batches[B_PEERS]):
            send_row(batches, row)
        unlock(batches)


@njit(nogil=True, cache=True)
def flush_stale(batches, now):
    """Send the batches whose first request came STALE_NS ago or more; how many
    nanoseconds until the next one left is stale (0: none left). It looks before it
    locks: a thread that is about to stage must not wait for one that only looks."""
    wait = 0
    for row in range(batches[B_PEERS]):
        at = GLOBAL_WORDS + row * ROW_WORDS
        if batches[at + P_COUNT] == 0:
            continue
        age = now - batches[at + P_FIRST_NS]
        if age >= STALE_NS:
            lock(batches)
            if batches[at + P_COUNT] != 0 and now - batches[at + P_FIRST_NS] >= STALE_NS:
                send_row(batches, row)
            unlock(batches)
        elif wait == 0 or STALE_NS - age < wait:
            wait = STALE_NS - age
    return wait


def _build():
    """(stage, flush_row, flush_all, flush_stale, now_ns): numba ``njit`` functions that
    other native code calls (the requester's post, the progress thread's loop), once the
    symbols they call are there (compiled on first use, or loaded from numba's cache)."""
    ucp.load()
    target.atomics()
    return stage, flush_row, flush_all, flush_stale, now_ns


batch_code = built_once(_build)
