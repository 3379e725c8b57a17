"""Teams on the host: split, query, translate, destroy, and team barriers.

A team is an integer handle (it passes into kernels as-is); ``None`` stands for "not a
member" (NVSHMEM's TEAM_INVALID). Splits are collective over the parent team: every
member calls with the same arguments. Each team has its own MPI communicator for host
synchronization and its own row of device barrier words.
"""
from __future__ import annotations

import numbers

import numpy as np

from ..core._constants import MAX_TEAMS, TEAM_NODE, TEAM_WORLD
from ..core._errors import PgasError, PgasValueError
from ..runtime._barrier import wait_all
from ..runtime._state import Runtime, runtime
from ..runtime._team_table import Team, team_of
from ._sync import team_barrier

__all__ = ["team_split_strided", "team_split_2d", "team_my_pe", "team_n_pes",
           "team_translate_pe", "team_destroy", "barrier", "sync"]


def _free_slots(rt: Runtime, parent: Team, count: int, fn: str) -> list[int]:
    """``count`` slot numbers free on every member of ``parent`` (the same on all)."""
    from mpi4py import MPI

    mine = sum(1 << slot for slot, team in enumerate(rt.teams) if team is None)
    free_everywhere = parent.comm.allreduce(mine, op=MPI.BAND)
    slots = [slot for slot in range(MAX_TEAMS) if free_everywhere >> slot & 1][:count]
    if len(slots) < count:
        raise PgasError(f"{fn}: no free team slot: at most pgas.MAX_TEAMS={MAX_TEAMS} teams may exist "
                        "at once on a PE (TEAM_WORLD and TEAM_NODE included); "
                        "release teams with pgas.team_destroy")
    return slots


def _install(rt: Runtime, slot: int, members: tuple[int, ...] | None, parent: Team) -> Team | None:
    """Collective over ``parent``: make the team of ``members`` (world PEs) at ``slot``."""
    from mpi4py import MPI

    mine = members is not None and rt.my_pe in members
    color = min(members) if mine else MPI.UNDEFINED
    comm = parent.comm.Split(color, members.index(rt.my_pe) if mine else 0)
    if not mine:
        return None
    team = Team(slot, members, members.index(rt.my_pe), comm)
    rt.reset_team_slot(slot)  # fresh barrier epochs; peers wait for this below
    rt.set_team(slot, team)
    return team


def _check_int(fn: str, what: str, value, minimum: int) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise PgasValueError(f"{fn}: {what} must be an integer, got {value!r}")
    if value < minimum:
        raise PgasValueError(f"{fn}: {what} must be >= {minimum}, got {value}")
    return int(value)


def team_split_strided(parent, start: int, stride: int, size: int):
    """A team of ``size`` members of ``parent``: its PEs ``start, start+stride, ...``.

    Collective over ``parent`` (same arguments on every member). Returns the new team's
    handle on its members and ``None`` on the other PEs of ``parent``.
    """
    fn = "pgas.team_split_strided"
    rt = runtime(fn)
    par = team_of(rt, parent, fn, "parent")
    start = _check_int(fn, "start", start, 0)
    stride = _check_int(fn, "stride", stride, 1)
    size = _check_int(fn, "size", size, 1)
    last = start + (size - 1) * stride
    if last >= par.size:
        raise PgasValueError(f"{fn}: start + (size-1)*stride = {last} is outside the parent team "
                             f"of {par.size} PEs (start={start}, stride={stride}, size={size})")
    members = tuple(par.pes[start + i * stride] for i in range(size))
    slot, = _free_slots(rt, par, 1, fn)
    team = _install(rt, slot, members, par)
    wait_all(par.comm, fn, par.pes)
    return None if team is None else team.handle


def team_split_2d(parent, xrange: int):
    """Split ``parent`` into a 2-D grid with rows of ``xrange`` PEs: returns ``(xteam, yteam)``.

    ``xteam`` holds this PE's row (consecutive parent ranks; the last row may be
    shorter), ``yteam`` its column (parent ranks equal modulo ``xrange``). Collective over
    ``parent``; every member gets both.
    """
    fn = "pgas.team_split_2d"
    rt = runtime(fn)
    par = team_of(rt, parent, fn, "parent")
    xrange = _check_int(fn, "xrange", xrange, 1)
    xrange = min(xrange, par.size)
    me = par.my_index
    row_start, column = me - me % xrange, me % xrange
    row = par.pes[row_start:row_start + xrange]
    col = par.pes[column::xrange]
    xslot, yslot = _free_slots(rt, par, 2, fn)
    xteam = _install(rt, xslot, row, par)
    yteam = _install(rt, yslot, col, par)
    wait_all(par.comm, fn, par.pes)
    return xteam.handle, yteam.handle


def team_my_pe(team) -> int:
    """This PE's rank in ``team`` (-1 for ``None``, NVSHMEM's TEAM_INVALID)."""
    if team is None:
        return -1
    return team_of(runtime("pgas.team_my_pe"), team, "pgas.team_my_pe").my_index


def team_n_pes(team) -> int:
    """The number of PEs in ``team`` (-1 for ``None``)."""
    if team is None:
        return -1
    return team_of(runtime("pgas.team_n_pes"), team, "pgas.team_n_pes").size


def team_translate_pe(src_team, pe: int, dest_team) -> int:
    """The rank in ``dest_team`` of the PE that has rank ``pe`` in ``src_team``; -1 if it
    is not a member of ``dest_team`` (or either team is ``None``)."""
    fn = "pgas.team_translate_pe"
    rt = runtime(fn)
    if src_team is None or dest_team is None:
        return -1
    src, dest = team_of(rt, src_team, fn, "src_team"), team_of(rt, dest_team, fn, "dest_team")
    pe = _check_int(fn, "pe", pe, 0)
    if pe >= src.size:
        raise PgasValueError(f"{fn}: pe must be within [0, {src.size}) (the size of src_team), got {pe}")
    return dest.index_of(src.pes[pe])


def team_destroy(team) -> None:
    """Release ``team`` (collective over its members). The predefined teams cannot be destroyed."""
    fn = "pgas.team_destroy"
    rt = runtime(fn)
    if team is None:
        return
    found = team_of(rt, team, fn)
    if found.handle in (TEAM_WORLD, TEAM_NODE):
        raise PgasValueError(f"{fn}: TEAM_WORLD and TEAM_NODE cannot be destroyed")
    wait_all(found.comm, fn, found.pes)  # no member still uses it
    rt.set_team(found.handle, None)
    found.comm.Free()


def barrier(team, stream=None) -> None:
    """Complete this PE's RMA (``quiet``), then wait until every member of ``team`` calls this."""
    team_barrier("pgas.barrier", team, True, stream)


def sync(team, stream=None) -> None:
    """Wait until every member of ``team`` calls this (no completion of RMA implied)."""
    team_barrier("pgas.sync", team, False, stream)
