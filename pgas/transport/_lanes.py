"""The lanes of a remote engine: lane 0 is the PE's own queue pairs (or endpoints), and
each communication context that sends through the engine gets one of its own, made at
its first request (``pgas/host/rma/_contexts.py``) and kept for the next context once it is
destroyed (making queue pairs costs registrations and, through UCX, connections)."""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["Lanes"]


class Lanes:
    """``lanes[i]``: lane i, ``first`` for lane 0, ``make()`` for each new one;
    ``several``: whether there is more than lane 0 (a plain attribute: it is read on
    every ``quiet``)."""

    def __init__(self, first: Any, make: Callable[[], Any]):
        self._all = [first]
        self.several = False
        self._make = make
        self._free: list[int] = []
        self._lock = threading.Lock()     # contexts are made from any thread

    def __getitem__(self, lane: int):
        return self._all[lane]

    def __len__(self) -> int:
        return len(self._all)

    def __iter__(self):
        return iter(list(self._all))

    def new(self) -> int:
        """A lane for a context: a released one, else a new one from ``make()``."""
        with self._lock:
            if self._free:
                return self._free.pop()
            self._all.append(self._make())
            self.several = True
            return len(self._all) - 1

    def release(self, lane: int) -> None:
        """Give back a context's lane (its requests complete) for the next context."""
        with self._lock:
            self._free.append(lane)
