"""OpenSHMEM's accessibility queries (``pe_accessible``, ``addr_accessible``), the host
``ptr``, and ``global_exit``."""
from __future__ import annotations

import numbers
import sys

import numpy as np

from ...core import _job
from ...core._checks import check_pe
from ...core._errors import PgasError, PgasValueError
from ...runtime import _failure
from ...runtime._arrays import array_span, as_ndarray
from ...runtime._state import runtime

__all__ = ["pe_accessible", "addr_accessible", "ptr", "global_exit"]


def _is_pe(pe, n_pes: int) -> bool:
    return (not isinstance(pe, (bool, np.bool_)) and isinstance(pe, numbers.Integral)
            and 0 <= pe < n_pes)


def pe_accessible(pe: int) -> bool:
    """Whether PE ``pe`` can be reached by pgas's RMA and atomics from this PE: every PE of
    the job can (through load/store or a NIC path); False for anything else."""
    rt = runtime("pgas.pe_accessible")
    return _is_pe(pe, rt.n_pes) and rt.transports.kinds[pe] != "unreachable"


def addr_accessible(a, pe: int) -> bool:
    """Whether ``a`` is symmetric memory (a pgas array or a slice of one) that PE ``pe``
    can reach: False for memory pgas did not allocate, or a PE outside the job."""
    fn = "pgas.addr_accessible"
    rt = runtime(fn)
    if not pe_accessible(pe):
        return False
    try:
        rt.symmetric_offset(as_ndarray(a, fn, "a"), fn, "a")
    except PgasError:
        return False
    return True


def ptr(a, pe: int) -> int:
    """ptr(a, pe) -> int: the address in this process of PE ``pe``'s copy of symmetric ``a``
    (its first element) where this PE can load from and store to it (this node), else 0,
    as the device ``ptr`` (and NVSHMEM's ``nvshmem_ptr``). ``peer_array`` gives the array."""
    fn = "pgas.ptr"
    rt = runtime(fn)
    pe = check_pe(fn, pe, rt.n_pes)
    data = as_ndarray(a, fn, "a")
    rt.symmetric_offset(data, fn, "a")
    if not rt.heap.reachable(pe):
        return 0
    return array_span(rt.heap.view_on(pe, data, fn, "a"), fn, "a")[0]


def global_exit(status: int = 0) -> None:
    """End every PE of the job at once with exit status ``status`` (OpenSHMEM
    ``shmem_global_exit``); pgasrun exits with it. Nothing after it runs on any PE."""
    if isinstance(status, (bool, np.bool_)) or not isinstance(status, numbers.Integral) or not 0 <= status < 256:
        raise PgasValueError(f"pgas.global_exit: status must be an integer in [0, 256), got {status!r}")
    rt = runtime("pgas.global_exit")
    sys.stdout.flush()
    print(f"[PE {rt.my_pe}] pgas.global_exit({status})", file=sys.stderr, flush=True)
    _failure.end_job(f"{_job.GLOBAL_EXIT}({status})", int(status))
