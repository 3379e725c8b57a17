"""The cuda primitive layer: the same names as ``pgas/sim/_primitives.py``, compiled by numba for the GPU.

Device state is read from the state block at a fixed address (``_state_reads``). The
barrier words of team slot t are the t-th row of ``n_pes + 1`` int64 at the start of the
heap, as on the simulator. PEs of this node are reached by loads and stores into their
mapped heaps; PEs on other nodes through the NIC, the device thread posting its own
work requests (``_nic_device``).

Ordering follows the PTX memory model at system scope (``_ptx.py``): ``g``/``p`` are
strong relaxed accesses, waits poll with ``ld.acquire.sys``, atomics are sequentially
consistent (``fence.sc.sys`` + ``atom.acquire.sys``), ``fence``/``quiet`` are
``fence.sc.sys`` (``quiet`` first waits for the NIC's completions).

Checks: what a kernel's types decide (equal dtypes, a signal's dtype, a reduction's op on
its dtype) is refused when the kernel compiles. What only the values decide (a PE out of
range or unreachable, a team that does not exist, sizes, a root, cmp, sig_op) and a wait
that passes PGAS_TIMEOUT write an error record into the PE's mailbox and ``trap``; the
host raises it with the simulator's text (``pgas/core/_device_errors.py``).

The layer is in four modules: ``_jit`` (how functions compile), ``_memory`` (state, teams,
arrays, other PEs, ordering and atomics), ``_waits`` (groups and wait loops) and ``_checks``.
"""
from __future__ import annotations

from ..core._codes import PRIMITIVES
from ._checks import *  # noqa: F401,F403
from ._jit import *  # noqa: F401,F403
from ._memory import *  # noqa: F401,F403
from ._waits import *  # noqa: F401,F403

__all__ = [*PRIMITIVES, "STATE_ADDRESS", "STATE_WORDS"]
