"""Simulated threads that get the interpreter lock back soon.

numba's simulator runs a block's threads as Python threads and, while they run, the
launching thread polls them in a loop (``is_alive`` of each, over and over) that holds the
interpreter lock until the switch interval (5 ms) forces it out. Every time a simulated
thread lets the lock go (a native call without it, a sleep while it waits for a reply),
it then waited up to 5 ms to get it back, and a thread that never let it go ran only
half the time. Here each poll of a simulated thread first yields the lock (``sleep(0)``),
so the polling loop runs only when no simulated thread wants the lock, and once the loop
has polled for _POLL_BUSY_S since it last slept, it sleeps _POLL_PAUSE_S: a loop that only
yielded kept a core busy whenever its threads waited (each PE's launching thread ran
40-90% of a core through a device ping-pong between two emulated nodes, and the progress
threads that carry the messages got 6%: docs/simulator.md). What the loop does is unchanged.
"""
from __future__ import annotations

import threading
import time

__all__ = ["yield_while_polling"]

_POLL_BUSY_S = 20e-6
_POLL_PAUSE_S = 100e-6


def yield_while_polling() -> None:
    """Make the simulator's poll of a block thread yield the interpreter lock first (once)."""
    from numba.cuda.simulator import kernel

    block_thread = kernel.BlockThread
    if getattr(block_thread.is_alive, "pgas_yields", False):
        return

    slept = [time.monotonic()]      # when the loop last slept (any launching thread's: rarely more than one)

    def is_alive(thread) -> bool:
        now = time.monotonic()
        if now - slept[0] > _POLL_BUSY_S:
            time.sleep(_POLL_PAUSE_S)
            slept[0] = time.monotonic()
        else:
            time.sleep(0)           # releases the lock to a thread that wants it
        return threading.Thread.is_alive(thread)

    is_alive.pgas_yields = True
    block_thread.is_alive = is_alive
