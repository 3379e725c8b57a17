"""The runtime state of an initialized PE, which every other call reaches."""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import numpy as np

from ..core._constants import MAX_TEAMS, TEAM_NODE, TEAM_WORLD
from ..core._env import shown
from ..core._errors import PgasConfigError, PgasError, PgasValueError
from ..core.native._wake_words import WAKE_BYTES, supported as wake_words_supported
from ..transport._direct import DirectCopies
from ..transport._routing import Transports
from ._allocator import HeapAllocator
from ._bootstrap import Bootstrap
from ._team_table import predefined_teams

__all__ = ["Runtime", "runtime", "current", "start", "stop", "COLLECTIVE_WORDS", "EAGER_REGIONS", "EAGER_BYTES",
           "EAGER_FIRST"]

COLLECTIVE_WORDS = 8  # per team: progress counters of the host collective algorithms
# The eager collectives (simulator backend only: on cuda the host collectives run device
# kernels; see _eager) stage through EAGER_REGIONS buffers per team on each PE, used by
# successive calls in turn; per team slot, the size of each (larger for the predefined
# teams, which most calls use, than for split teams) and the slot's offset among them.
EAGER_REGIONS = 4
EAGER_BYTES = tuple((512 << 10) if slot in (TEAM_WORLD, TEAM_NODE) else (16 << 10) for slot in range(MAX_TEAMS))
EAGER_FIRST = tuple(EAGER_REGIONS * sum(EAGER_BYTES[:slot]) for slot in range(MAX_TEAMS))


@dataclass
class Runtime:
    """Everything an initialized PE knows."""

    boot: Bootstrap
    heap: object            # the backend's symmetric heap (pgas.sim or pgas.cuda)
    allocator: HeapAllocator
    debug: bool
    timeout: float
    # Device barrier words, at heap offset 0 on every PE: one row per team slot, holding
    # an arrival flag per team member, then this PE's barrier epoch for that team (at [n]).
    sync_words: np.ndarray = field(init=False)
    # Host collective progress words, a row per team slot (see host/collectives/_collectives.py).
    collective_words: np.ndarray = field(init=False)
    # Team slots (TEAM_WORLD, TEAM_NODE, then split teams); None where free.
    teams: list = field(init=False)
    # Host collectives called so far on each team slot (the same count on every member).
    collective_calls: list = field(init=False)
    # Per team slot: the bound progress-word accessors of host collectives (built lazily).
    collective_cache: dict = field(init=False, default_factory=dict)
    # Per team slot, [eager collectives called so far, the highest call number every member
    # is known to have published] (_eager); the heap offset of their staging buffers
    # (EAGER_REGIONS, EAGER_BYTES, EAGER_FIRST; None on the cuda backend).
    eager_counts: np.ndarray = field(init=False)
    eager_state: list = field(init=False)
    eager_offset: int | None = field(init=False, default=None)
    # The heap offset of the PEs' wake words (``core.native._wake_words``; simulator backend, where
    # the futex call is known; else None).
    wake_offset: int | None = field(init=False, default=None)
    # Per team slot: its members' staging buffers for eager calls, as bytes (_eager).
    eager_staging: dict = field(init=False, default_factory=dict)
    # Host collective calls kept for repeats, by collective, team, options and the ids of
    # dest and src (_collectives).
    collective_plans: dict = field(init=False, default_factory=dict)
    # Memory made symmetric by register_symmetric: heap offset -> (bytes mapped (whole pages),
    # the array's bytes, the user's array).
    symmetric_registrations: dict = field(init=False, default_factory=dict)
    # This PE's zero-byte symmetric arrays not yet freed (they take no heap space, so this is
    # how free tells them from freed ones): id -> the array behind the handle, held weakly.
    empty_arrays: weakref.WeakValueDictionary = field(init=False, default_factory=weakref.WeakValueDictionary)
    # How this PE reaches each PE (load/store or the NIC); set by init once the heap is up.
    transports: Transports | None = field(init=False, default=None)
    # The fast path of host put/get to PEs mapped here (DirectCopies on the simulator
    # backend, pgas.host's GpuDirectCopies on cuda; None under PGAS_DEBUG).
    direct: DirectCopies | None = field(init=False, default=None)
    # True on the cuda backend (arrays are numba device arrays in GPU memory); a field, not
    # a property, as the small host calls read it each time.
    on_gpu: bool = field(init=False)

    def __post_init__(self):
        self.on_gpu = self.heap.device_arrays
        n = self.boot.n_pes
        own_words = [MAX_TEAMS * (n + 1) * 8, MAX_TEAMS * COLLECTIVE_WORDS * 8]
        if not self.on_gpu:
            own_words.append(EAGER_REGIONS * sum(EAGER_BYTES))
        wakes = not self.on_gpu and wake_words_supported()
        if wakes:
            own_words.append(WAKE_BYTES)
        needed = sum(self.allocator.reserved_size(nbytes) for nbytes in own_words)
        if self.allocator.size < needed:
            kept = "synchronization words" + ("" if self.on_gpu else " and the staging buffers of small collectives")
            raise PgasConfigError(
                f"{shown('PGAS_SYMMETRIC_SIZE')} is too small: pgas keeps {needed} bytes of every PE's "
                f"heap for its own {kept} ({MAX_TEAMS} team slots on {n} PEs); give at least that plus what "
                "the program allocates")
        self._sync_offset = self.allocator.allocate(MAX_TEAMS * (n + 1) * 8)
        self.sync_words = self.heap.array_at(self._sync_offset, (MAX_TEAMS, n + 1), np.int64)
        self._collective_offset = self.allocator.allocate(MAX_TEAMS * COLLECTIVE_WORDS * 8)
        self.collective_words = self.heap.array_at(self._collective_offset, (MAX_TEAMS, COLLECTIVE_WORDS), np.int64)
        if not self.on_gpu:
            self.eager_offset = self.allocator.allocate(EAGER_REGIONS * sum(EAGER_BYTES))
        if wakes:
            self.wake_offset = self.allocator.allocate(WAKE_BYTES)
        self.heap.zero(0, self.allocator.bytes_used)
        self.teams = [None] * MAX_TEAMS
        for slot, team in enumerate(predefined_teams(self.boot)):
            if team is not None:
                self.set_team(slot, team)
        self.collective_calls = [0] * MAX_TEAMS
        # per team slot: [eager calls so far, the highest call every member is known to have
        # published], read and written by Python through memoryviews and by native code
        self.eager_counts = np.zeros((MAX_TEAMS, 2), np.int64)
        self.eager_state = [memoryview(row) for row in self.eager_counts]

    def set_team(self, slot: int, team) -> None:
        """Put ``team`` (or None: free the slot) in ``slot``, here and in the device state."""
        self.teams[slot] = team
        self.heap.publish_team(slot, team)

    def reset_team_slot(self, slot: int) -> None:
        """Fresh synchronization state for a team just created in ``slot``."""
        n = self.boot.n_pes
        self.heap.zero(self._sync_offset + slot * (n + 1) * 8, (n + 1) * 8)
        self.heap.zero(self._collective_offset + slot * COLLECTIVE_WORDS * 8, COLLECTIVE_WORDS * 8)
        self.collective_calls[slot] = 0
        self.eager_counts[slot] = 0
        self.collective_cache.pop(slot, None)
        self.eager_staging.pop(slot, None)


    def symmetric_offset(self, data, fn: str, what: str) -> int:
        """The heap offset of symmetric ``data`` (a PgasValueError naming ``fn`` and ``what``
        if it is not in this PE's heap). Under PGAS_DEBUG, also one unless it lies inside
        one live allocation: not freed, not past its end (catches use after free)."""
        offset = self.heap.offset_of(data, fn, what)
        if self.debug:
            end = offset + data.nbytes
            block = self.allocator.block_containing(offset) or self._registered_block(offset)
            if block is None or end > block[0] + block[1]:
                where = ("is not inside any live symmetric array (freed, or never allocated)" if block is None else
                         f"runs {end - block[0] - block[1]} bytes past the end of its symmetric array "
                         f"({block[1]} bytes reserved at heap offset {block[0]})")
                raise PgasValueError(f"{fn}: {what} (heap bytes [{offset}, {end})) {where}")
        return offset

    def _registered_block(self, offset: int) -> tuple[int, int] | None:
        """(offset, bytes) of the registered memory (``register_symmetric``) holding heap
        offset ``offset``: on cuda it lies outside the allocator's range."""
        for start, (mapped, _, _) in self.symmetric_registrations.items():
            if start <= offset < start + mapped:
                return start, mapped
        return None

    @property
    def my_pe(self) -> int:
        return self.boot.my_pe

    @property
    def n_pes(self) -> int:
        return self.boot.n_pes


_runtime: Runtime | None = None
_finalized_once = False


def runtime(fn: str) -> Runtime:
    """The live runtime, or a PgasError naming ``fn`` when pgas is not initialized."""
    if _runtime is None:
        when = "after pgas.finalize()" if _finalized_once else "before pgas.init()"
        raise PgasError(f"{fn} was called {when}; call pgas.init() first")
    return _runtime


def current() -> Runtime | None:
    """The live runtime, or None outside ``init``/``finalize`` (for error reports)."""
    return _runtime


def start(rt: Runtime) -> None:
    """Make ``rt`` the live runtime (``pgas.init``)."""
    global _runtime
    _runtime = rt


def stop() -> None:
    """No live runtime from now on (``pgas.finalize``)."""
    global _runtime, _finalized_once
    _runtime, _finalized_once = None, True
