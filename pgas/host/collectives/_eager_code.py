"""A kept eager all-reduce's whole body in one native call.

Once an all-reduce has run ``_eager.COMPILE_AFTER`` times with the same arrays, its body
(contribute: copy ``src`` into my staging buffer and publish the call's number; gather:
wait for every member's number; fold the members' buffers into ``dest``) was three Python
functions around one compiled fold: 1.4 µs of Python at 8 bytes, against MPI's whole
``Allreduce`` of 1.6 µs on two PEs of one node. Here it is one numba call on a table of
the call's addresses (``table``), with the fold (``_fold_code``) called through its address.
Waiting stays in Python: the call returns what is left when a member is behind.
"""
from __future__ import annotations

import numpy as np
from cffi import FFI
from numba import carray, njit

from ...runtime._state import EAGER_REGIONS
from ...wire import _native, _target as target
from ...wire._window import call4, symbols, words_at

__all__ = ["table", "reduce_now", "fold_now"]

_ffi = FFI()
# the table: the team's two eager counts (calls so far, the highest call every member is
# known to have published), src, its bytes, dest, its elements, the fold, the members, my
# rank, the polls of a member's word before giving up (beyond the first); then each
# member's eager word; then, per region, each member's staging buffer (the fold's sources)
H_STATE, H_SOURCE, H_NBYTES, H_OUT, H_COUNT, H_FOLD, H_N, H_ME, H_POLLS, H_WORDS = range(10)


def table(counts: np.ndarray, s: np.ndarray, d: np.ndarray, fold, words: list, regions: list, me: int,
          polls: int) -> np.ndarray:
    """The table of a kept all-reduce of contiguous ``s`` into contiguous ``d``: ``counts``
    the team's eager counts (int64[2]), ``fold`` the compiled fold (cffi), ``words`` each
    member's eager word (int64 arrays of one element, mapped here), ``regions[r][rank]``
    the staging buffers."""
    symbols()           # (the atomics, memcpy and the call through a pointer, registered)
    head = [0] * H_WORDS
    head[H_STATE], head[H_SOURCE], head[H_NBYTES] = counts.ctypes.data, s.ctypes.data, s.nbytes
    head[H_OUT], head[H_COUNT] = d.ctypes.data, d.size
    head[H_FOLD] = int(_ffi.cast("intptr_t", fold))
    head[H_N], head[H_ME], head[H_POLLS] = len(words), me, polls
    staging = [buffer.ctypes.data for buffers in regions for buffer in buffers]
    return np.array(head + [word.ctypes.data for word in words] + staging, np.int64)


@njit(cache=True)
def reduce_now(t):
    """One eager all-reduce on table ``t``: -1 when done; 0 when nothing was done (a member
    has yet to finish reading the call that last used my buffer: the caller runs the
    whole call); else the call's number, contributed and published but not every member's
    yet (the caller gathers, then ``fold_now``). Every word is read atomically (acquire), mine
    written so (after my contribution is in its buffer)."""
    n, me, words = t[H_N], t[H_ME], H_WORDS
    state = carray(words_at(t[H_STATE]), (2,))
    number = state[0] + 1
    past = number - EAGER_REGIONS + 1       # my buffer was last read at call number - EAGER_REGIONS
    if state[1] < past:
        for rank in range(n):
            if rank != me and target.apply_atomic(target.AMO_FETCH, 8, t[words + rank], 0, 0) < past:
                return 0
        state[1] = past
    state[0] = number
    sources = words + n + (number % EAGER_REGIONS) * n
    _native.memcpy(t[sources + me], t[H_SOURCE], t[H_NBYTES])
    target.apply_atomic(target.AMO_SWAP, 8, t[words + me], number, 0)
    for rank in range(n):
        if rank != me:
            seen = False
            for _ in range(t[H_POLLS] + 1):
                if target.apply_atomic(target.AMO_FETCH, 8, t[words + rank], 0, 0) >= number:
                    seen = True
                    break
            if not seen:
                return number
    state[1] = number
    fold_now(t, number)
    return -1


@njit(cache=True)
def fold_now(t, number):
    """Fold call ``number``'s staging buffers (every member's published) into ``dest``,
    through the compiled fold's address."""
    n = t[H_N]
    sources = H_WORDS + n + (number % EAGER_REGIONS) * n
    call4(t[H_FOLD], t[H_OUT], t.ctypes.data + 8 * sources, n, t[H_COUNT])
