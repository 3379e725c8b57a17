"""Host-initiated RMA: ``put``, ``get``, ``quiet``.

On the simulator backend these are synchronous copies between mapped heaps (memory
speed); ``stream`` is accepted for source compatibility with the cuda backend.
"""
from __future__ import annotations

import numpy as np

from .._checks import check_contiguous, check_dtypes_match, check_fits, check_pe
from ._memory import as_ndarray
from ._runtime import runtime

__all__ = ["put", "get", "quiet"]


def put(dest, src, pe: int, stream=None) -> None:
    """Copy ``src.size`` elements of ``src`` into PE ``pe``'s copy of symmetric ``dest``.

    ``src`` is a local array (numpy or symmetric); ``dest`` must hold at least as many
    elements, with the same dtype. Complete on return on the simulator backend.
    """
    fn = "pgas.put"
    rt = runtime(fn)
    pe = check_pe(fn, pe, rt.n_pes)
    d, s = as_ndarray(dest, fn, "dest"), as_ndarray(src, fn, "src")
    check_dtypes_match(fn, d, s)
    check_contiguous(fn, "dest", d)
    check_fits(fn, "dest", d, s.size, "put copies src.size elements")
    remote = rt.heap.view_on(pe, d, fn, "dest").reshape(-1)
    np.copyto(remote[:s.size], s.reshape(-1))


def get(dest, src, pe: int, stream=None) -> None:
    """Copy ``dest.size`` elements of PE ``pe``'s copy of symmetric ``src`` into local ``dest``."""
    fn = "pgas.get"
    rt = runtime(fn)
    pe = check_pe(fn, pe, rt.n_pes)
    d, s = as_ndarray(dest, fn, "dest"), as_ndarray(src, fn, "src")
    check_dtypes_match(fn, d, s)
    check_contiguous(fn, "dest", d)
    check_contiguous(fn, "src", s)
    check_fits(fn, "src", s, d.size, "get copies dest.size elements")
    remote = rt.heap.view_on(pe, s, fn, "src").reshape(-1)
    np.copyto(d.reshape(-1), remote[:d.size])


def quiet(stream=None) -> None:
    """Complete every RMA this PE issued from the host.

    Host copies on the simulator backend are complete when they return, so this only
    checks that pgas is initialized.
    """
    runtime("pgas.quiet")
