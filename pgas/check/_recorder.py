"""What one PE records for the checker (PGAS_CHECK=1): a list of events, in the order
each thread made them, stamped with the machine's monotonic clock.

An event is ``(time_ns, pe, thread, kind, data)``: ``thread`` is ``("host", n)`` for a
host thread or ``("kernel", launch, blockIdx, threadIdx, linear thread index in its block)``
for a simulated CUDA thread;
``kind`` and ``data`` are those ``_replay`` understands (``access``, ``quiet``, ``fence``,
``release``, ``acquire``, ``wait``, ``launch``, ``kernel_end``, ``allocate``, ``end``).
Memory is named by its owner PE and its byte range in that PE's symmetric heap (the same
offsets on every PE), so that the replay can put every PE's accesses side by side.
Everything here runs in the PE; the analysis runs once, at ``finalize`` (``_finish``).
"""
from __future__ import annotations

import itertools
import os
import sys
import threading
import time

import numpy as np

from ..runtime import _state

__all__ = ["Recorder", "recorder", "start", "stop", "source_site", "IGNORED_DIRS"]

_byte_bounds = getattr(np, "byte_bounds", None) or np.lib.array_utils.byte_bounds   # moved in numpy 2
_PGAS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Frames in these directories are not the user's: a site is the first frame outside them.
IGNORED_DIRS = (_PGAS_DIR + os.sep, os.path.dirname(threading.__file__) + os.sep)


def _numba_dirs() -> tuple:
    """numba's directory and numba-cuda's (a package of its own that installs numba.cuda)."""
    import numba
    import numba.cuda
    cuda = os.path.dirname(os.path.abspath(numba.cuda.__file__))
    return (os.path.dirname(os.path.abspath(numba.__file__)) + os.sep,
            os.path.dirname(os.path.dirname(cuda)) + os.sep)


def source_site(ignored: tuple = IGNORED_DIRS) -> str:
    """``file:line`` of the innermost frame that is the user's (not in a directory of
    ``ignored``: pgas, numba, the standard library), e.g. ``ring.py:41``, with the directory
    where it helps tell files apart."""
    frame = sys._getframe(1)
    while frame is not None:
        path = frame.f_code.co_filename
        if not path.startswith(ignored) and not path.startswith("<"):
            return f"{_short(path)}:{frame.f_lineno}"
        frame = frame.f_back
    return "?"


def _short(path: str) -> str:
    """A path as reports show it: relative to the working directory where it lies below it."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


class Recorder:
    """The events of this PE (``pe``), and where in its heap each symmetric array lies."""

    def __init__(self, rt: _state.Runtime):
        self.rt = rt
        self.pe = rt.my_pe
        self.events: list = []
        self._host_threads: dict[int, int] = {}
        self._launches = itertools.count(1)
        self._lock = threading.Lock()
        self._ignored = IGNORED_DIRS + _numba_dirs()
        # the heaps mapped here, fixed from init on: (PE, address)
        self._heaps = [(pe, base) for pe, base in enumerate(rt.heap.bases) if base is not None]
        self.launch = 0              # the kernel launch running now (the simulator runs one at a time)

    # Where ---------------------------------------------------------------------------

    def thread(self) -> tuple:
        """The calling thread as events name it (module docstring)."""
        current = threading.current_thread()
        block = getattr(current, "blockIdx", None)
        if block is not None and hasattr(current, "syncthreads"):
            t = current.threadIdx
            return ("kernel", self.launch, (block.x, block.y, block.z), (t.x, t.y, t.z), current.thread_id)
        ident = threading.get_ident()
        with self._lock:
            number = self._host_threads.setdefault(ident, len(self._host_threads))
        return ("host", number)

    def site(self) -> str:
        """``file:line`` of the user's code that made the current call."""
        return source_site(self._ignored)

    def place(self, arr) -> tuple[int, int, int] | None:
        """(owner PE, first byte, one past the last) of a numpy array in a symmetric heap as
        mapped here (this PE's or a node peer's); None where it lies in none."""
        if not isinstance(arr, np.ndarray) or arr.size == 0:
            return None
        start, end = _byte_bounds(arr)
        size = self.rt.heap.size
        for pe, base in self._heaps:
            if base <= start and end <= base + size:
                return pe, start - base, end - base
        return None

    # Events --------------------------------------------------------------------------

    def add(self, kind: str, data, thread: tuple | None = None, t: int | None = None) -> None:
        """Record an event (default: the calling thread's, now)."""
        self.events.append((time.monotonic_ns() if t is None else t, self.pe,
                            self.thread() if thread is None else thread, kind, data))

    def new_launch(self) -> int:
        """Number the kernel launch about to run (its threads' events carry the number)."""
        self.launch = next(self._launches)
        return self.launch


_current: Recorder | None = None


def recorder() -> Recorder | None:
    """This PE's recorder while PGAS_CHECK=1 and the PE is initialized, else None."""
    return _current


def start(rt) -> Recorder:
    """Record this PE's events from now on."""
    global _current
    _current = Recorder(rt)
    return _current


def stop() -> None:
    """Stop recording (the events were analysed)."""
    global _current
    _current = None
