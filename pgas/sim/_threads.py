"""Simulated threads that get the interpreter lock back soon.

numba's simulator runs a block's threads as Python threads and, while they run, the
launching thread polls them in a loop (``is_alive`` of each, over and over) that holds the
interpreter lock until the switch interval (5 ms) forces it out. Every time a simulated
thread lets the lock go (a native call without it, a sleep while it waits for a reply),
it then waited up to 5 ms to get it back, and a thread that never let it go ran only
half the time. Here each poll of a simulated thread first yields the lock (``sleep(0)``),
so the polling loop runs only when no simulated thread wants the lock. What the loop
does is unchanged.
"""
from __future__ import annotations

import threading
import time

__all__ = ["yield_while_polling"]


def yield_while_polling() -> None:
    """Make the simulator's poll of a block thread yield the interpreter lock first (once)."""
    from numba.cuda.simulator import kernel

    block_thread = kernel.BlockThread
    if getattr(block_thread.is_alive, "pgas_yields", False):
        return

    def is_alive(thread) -> bool:
        time.sleep(0)           # releases the lock to a thread that wants it
        return threading.Thread.is_alive(thread)

    is_alive.pgas_yields = True
    block_thread.is_alive = is_alive
