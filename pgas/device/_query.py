"""Device queries: which PE am I, how many are there, and the same within a team."""
from __future__ import annotations

import numpy as np

from ..core._version import SPEC_VERSION, VENDOR_NAME, VERSION
from ._primitives import prim as _p

__all__ = ["my_pe", "n_pes", "team_my_pe", "team_n_pes", "team_translate_pe", "vendor_get_version_info",
           "info_get_version", "info_get_name"]

# compile-time constants of the kernels that ask
_MAJOR, _MINOR, _PATCH = VERSION
_SPEC_MAJOR, _SPEC_MINOR = SPEC_VERSION
_NAME = np.frombuffer(VENDOR_NAME.encode("ascii") + b"\0", np.uint8)   # a constant array in kernels


def my_pe():
    """my_pe() -> this PE's number in TEAM_WORLD."""
    return _p.my_pe("pgas.device.my_pe")


def n_pes():
    """n_pes() -> the number of PEs in the job."""
    return _p.n_pes("pgas.device.n_pes")


def team_my_pe(team):
    """team_my_pe(team) -> this PE's rank in ``team``."""
    fn = _p.name("pgas.device.team_my_pe")
    _p.check_team(fn, team)
    return _p.team_rank(team, fn)


def team_n_pes(team):
    """team_n_pes(team) -> the number of PEs in ``team``."""
    fn = _p.name("pgas.device.team_n_pes")
    _p.check_team(fn, team)
    return _p.team_size(team, fn)


def team_translate_pe(src_team, pe, dest_team):
    """team_translate_pe(src_team, pe, dest_team) -> the rank in ``dest_team`` of the PE
    with rank ``pe`` in ``src_team``, or -1 if it is not a member of ``dest_team``."""
    fn = _p.name("pgas.device.team_translate_pe")
    _p.check_team(fn, src_team)
    _p.check_team(fn, dest_team)
    if pe < 0 or pe >= _p.team_size(src_team, fn):
        return -1
    return _p.team_index_of(dest_team, _p.team_pe(src_team, pe, fn), fn)


def vendor_get_version_info(major=None, minor=None, patch=None):
    """vendor_get_version_info() -> (major, minor, patch), or
    vendor_get_version_info(major, minor, patch): the version of pgas (NVSHMEM's
    ``nvshmemx_vendor_get_version_info``).

    Called with no argument it returns the three numbers as a tuple; called with three
    integer arrays (nvshmem4py's form, NVSHMEM's three pointers) it writes them into element
    0 of each and returns nothing. Pass all three arrays or none. Any thread may call it.
    """
    # the form is chosen when the kernel compiles: numba prunes the branch of an omitted
    # argument, so each form is typed on its own (a tuple, or nothing)
    if major is None:
        return _MAJOR, _MINOR, _PATCH
    major[0] = _MAJOR
    minor[0] = _MINOR
    patch[0] = _PATCH


def info_get_version():
    """info_get_version() -> (major, minor): the OpenSHMEM specification pgas follows, (1, 6)
    (``nvshmem_info_get_version``)."""
    return _SPEC_MAJOR, _SPEC_MINOR


def info_get_name(name):
    """info_get_name(name) -> the number of bytes written: pgas's name (the host's
    ``pgas.info_get_name()``) as a NUL-terminated string into int8 or uint8 array ``name``
    (NVSHMEM's ``nvshmem_info_get_name(char *name)``); cut short to fit, NUL included."""
    count = min(_NAME.size, name.size)
    for i in range(count - 1):
        name[i] = _NAME[i]
    if count > 0:
        name[count - 1] = 0
    return count
