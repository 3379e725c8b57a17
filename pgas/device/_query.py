"""Device queries: which PE am I, how many are there."""
from __future__ import annotations

from ._primitives import prim as _p

__all__ = ["my_pe", "n_pes"]


def my_pe():
    """my_pe() -> this PE's number in TEAM_WORLD."""
    return _p.runtime("pgas.device.my_pe").my_pe


def n_pes():
    """n_pes() -> the number of PEs in the job."""
    return _p.runtime("pgas.device.n_pes").n_pes
