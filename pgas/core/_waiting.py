"""Comparisons of wait_until / signal_wait_until, and the clock of every wait loop."""
from __future__ import annotations

import ctypes
import os
import time

from . import _job
from ._constants import CMP_EQ, CMP_GE, CMP_GT, CMP_LE, CMP_LT, CMP_NAMES, CMP_NE
from ._device_errors import device_error, timeout_error, value_waited_for
from ._errors import PgasTimeoutError

__all__ = ["compare", "check_cmp", "Wait", "HOST_WAIT_BACKOFF_S", "wait_for_value", "sleep_until", "precise_sleeps",
           "before_waiting", "sleep_on", "Naps", "SHORT_FIRST_NAP_S", "LONG_FIRST_NAP_S", "LONG_NAP_S"]

# The longest sleep of a host thread waiting for a word another PE writes (wait_until,
# signal_wait_until, the host collectives' progress words): waits that only yielded kept
# a core busy.
HOST_WAIT_BACKOFF_S = 1e-3

# Called when a thread starts to wait: a remote engine that holds back small requests to
# send them together sends them now (what is waited for may depend on them).
before_waiting: list = []

# What waits sleep on (``_wake_words.Sleeper``s; the simulator backend from init to
# finalize), or None (they sleep their time): the wake word of this PE's heap (``Wait``),
# and its word for the answers to its requests through the NIC (``Naps``).
_sleeper = _answers = None
# A wait's first sleep on the wake word (they double up to its back-off): see ``sleep_on``.
_first_nap_s = SHORT_FIRST_NAP_S = 1e-6
LONG_FIRST_NAP_S = 30e-6
# A sleep this long or longer is a long nap: a writer on another node wakes it (a message
# to this PE), where it lets a shorter one end on its own (``_wake_words``).
LONG_NAP_S = 200e-6


def sleep_on(heap, answers, first_nap_s: float = SHORT_FIRST_NAP_S) -> None:
    """Waits started from now on sleep on ``heap`` and ``answers`` (``_wake_words.Sleeper``s,
    or None: plain sleeps), the first sleep of a wait ``first_nap_s`` long. Set at init,
    cleared before the heap is unmapped.

    Measured on 2 cores (docs/benchmarks.md, "pingpong"): a host ping-pong between two PEs
    of one node took 42-43 µs a round trip with waits whose sleeps start at 1 µs, 105 µs
    at 30 µs (a wake-up of a thread that sleeps long costs the waker and the woken more),
    but between PEs on two nodes short first sleeps took the core from the PE's progress
    thread as often as their timers fired, delaying what it sends: put_nbi + wait 307 µs a
    round trip, 99 µs at 30 µs. So a PE that reaches others through the NIC starts at
    LONG_FIRST_NAP_S, one that does not at SHORT_FIRST_NAP_S."""
    global _sleeper, _answers, _first_nap_s
    _sleeper, _answers, _first_nap_s = heap, answers, first_nap_s


class _OnWord:
    """One wait's sleeps on a wake word (a ``_wake_words.Sleeper``): ``look()`` before each
    check of what is waited for; ``sleep(seconds, plain)`` then sleeps until the word's
    count moves from that look (at most ``seconds``). Writers bump the count only once a
    sleeper has set the word's flag, so the first ``sleep`` after a look whose count it has
    not armed for sets the flag and returns at once: the caller checks once more (a write
    before the flag was set is seen then, one after it ends the sleep). After a sleep that
    a count ended (the caller sleeps again: the count was someone else's), or for no time,
    it sleeps ``plain`` seconds without the word, so that a stream of counts for others
    does not keep the waiter awake (many threads waiting at once would otherwise all wake
    at each)."""

    def __init__(self, word):
        self.word, self.seen, self.woken, self.armed_at, self.long_at = word, 0, False, None, None

    def look(self) -> None:
        self.seen = self.word.count()

    def sleep(self, seconds: float, plain: float) -> bool:
        """False when it only set the flag (no sleep yet: check again first). A sleep of
        ``LONG_NAP_S`` or more sets it to say so first (``_wake_words``: writers on other
        nodes wake only such sleepers)."""
        if self.woken or seconds <= 0:
            time.sleep(plain)
            self.woken = False
        elif self.armed_at != self.seen:
            self.word.arm()
            self.armed_at = self.seen
            return False
        elif seconds >= LONG_NAP_S and self.long_at != self.seen:
            self.word.arm(long=True)
            self.long_at = self.seen
            return False
        else:
            self.word.sleep(self.seen, seconds)
            self.woken = self.word.count() != self.seen
        return True


class Naps:
    """The back-off of a thread waiting for the answer to its request through the NIC:
    ``look()`` before it checks whether the answer has come, ``nap()`` if not. The naps grow
    by ``next_pause`` (from 0) and end early when answers land for this PE (its word for
    them: ``_OnWord``)."""

    def __init__(self, next_pause):
        self.pause = 0.0
        self._next_pause = next_pause
        self._answers = None if _answers is None else _OnWord(_answers)

    def look(self) -> None:
        """Before checking: the answers counted so far."""
        if self._answers is not None:
            self._answers.look()

    def nap(self, longest: float = float("inf")) -> None:
        """Sleep the current pause (at most ``longest``), or until answers land; then grow it."""
        seconds = min(self.pause, longest)
        if self._answers is None:
            time.sleep(seconds)
        elif not self._answers.sleep(seconds, seconds):
            return          # (the flag set: the caller looks again, then naps)
        self.pause = self._next_pause(self.pause)


def compare(value, cmp, target) -> bool:
    """``value <cmp> target`` for one of the CMP_* constants."""
    if cmp == CMP_EQ:
        return value == target
    if cmp == CMP_NE:
        return value != target
    if cmp == CMP_GT:
        return value > target
    if cmp == CMP_GE:
        return value >= target
    if cmp == CMP_LT:
        return value < target
    if cmp == CMP_LE:
        return value <= target
    return False


def check_cmp(fn: str, cmp) -> None:
    if cmp not in CMP_NAMES:
        raise device_error("CMP", fn, a=repr(cmp))


class Wait:
    """One wait loop's clock: ``pause()`` yields, and raises once PGAS_TIMEOUT has passed.

    ``spin_s``: for that long, pause only yields the core (``sched_yield``, microseconds)
    rather than sleeping (``time.sleep(0)`` releases the GIL, which simulated threads
    need, but costs the kernel's timer slack, about 50 us). Host waits spin first.
    ``backoff_s``: sleeps then grow exponentially up to that long (waits for the NIC).
    ``waits_for()``: the PEs the wait needs, if known (``_job.Heartbeat``).

    Where this PE has a wake word (``sleep_on``), a sleep ends early when someone writes
    this PE's heap (``_wake_words``): a wait for a word another PE writes then takes the
    time of the write and a wake-up, not the rest of a sleep. A sleep ended by a write
    that did not end the wait (the caller pauses again) is followed by one plain sleep
    (``_OnWord``).
    """

    def __init__(self, fn: str, timeout: float, spin_s: float = 0.0, backoff_s: float = 0.0, waits_for=None):
        for hook in before_waiting:
            hook()
        self.fn = fn
        self.timeout = timeout
        now = time.monotonic()
        self.heartbeat = _job.Heartbeat(fn, now, waits_for)   # pgasrun ends the run if a PE it needs is gone
        self.deadline = now + timeout
        self.spin_until = now + spin_s
        self.backoff_s = backoff_s      # > 0: sleeps grow from a yield up to this long
        self._sleep = 0.0
        self._heap = None if _sleeper is None else _OnWord(_sleeper)
        if self._heap is not None:
            self._heap.look()           # before the caller's first check
        self._nap = 0.0                 # the last sleep on the wake word

    def pause(self, waiting_for) -> None:
        """``waiting_for``: text, or a function giving it (only called on timeout)."""
        now = time.monotonic()
        if now < self.spin_until:
            os.sched_yield()
            return
        if now > self.deadline:
            raise timeout_error(self.fn, self.timeout, waiting_for() if callable(waiting_for) else waiting_for)
        if now >= self.heartbeat.due:
            self.heartbeat.beat(now)
        # let whoever we wait for run (a simulated thread, or a peer on this core)
        heap = self._heap
        if heap is not None and self.backoff_s:
            nap = self._nap
            if not heap.woken:          # (the sleeps on the word grow; a plain one uses _sleep)
                self._nap = min(2 * self._nap, self.backoff_s) if self._nap else min(_first_nap_s, self.backoff_s)
            if not heap.sleep(self._nap, self._sleep):
                self._nap = nap         # only the flag set: that sleep comes after one more check
                heap.look()
                return
        else:
            time.sleep(self._sleep)
        if heap is not None:
            heap.look()                 # before the caller checks again
        if self.backoff_s:       # many waiters (simulated threads) must not starve the one they wait for
            self._sleep = min(self._sleep * 2 + 1e-6, self.backoff_s)


def wait_for_value(fn: str, load, what: str, cmp, value, timeout: float, backoff_s: float = 0.0):
    """Call ``load()`` until its result ``<cmp> value``; returns that result. Between
    calls it pauses as ``Wait`` with ``backoff_s``.

    Fails after ``timeout`` seconds with a PgasTimeoutError naming ``what`` and the last
    value seen.
    """
    check_cmp(fn, cmp)
    clock = Wait(fn, timeout, backoff_s=backoff_s)
    while True:
        seen = load()
        if compare(seen, cmp, value):
            return seen
        clock.pause(lambda: value_waited_for(what, cmp, value, seen))


def sleep_until(fn: str, timeout: float, done, waiting_for, check_alive, block, waits_for=None) -> None:
    """Sleep until ``done()``: ``block(seconds)`` sleeps until whoever writes completions
    wakes this thread (no polling), or the seconds pass. PgasTimeoutError naming
    ``waiting_for()`` after ``timeout`` seconds; ``check_alive(fn)`` raises if whoever
    completes has failed (a NIC thread). ``waits_for()``: the PEs whose answers it waits for."""
    if done():
        return
    for hook in before_waiting:
        hook()
    started = time.monotonic()
    deadline = started + timeout
    heartbeat = _job.Heartbeat(fn, started, waits_for)
    while not done():
        check_alive(fn)
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
        ctypes.CDLL(None, use_errno=True).prctl(29, 1, 0, 0, 0)   # PR_SET_TIMERSLACK, 1 ns
    except (OSError, AttributeError):
        pass
