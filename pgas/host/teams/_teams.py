"""Teams on the host: split, query, translate, destroy, and team barriers.

A team is an integer handle (it passes into kernels as-is); ``None`` stands for "not a
member" (NVSHMEM's TEAM_INVALID). Splits are collective over the parent team: every
member calls with the same arguments. Each team has its own MPI communicator for host
synchronization and its own row of device barrier words, and keeps the configuration it
was made with (``TeamConfig``: ``num_contexts``), which ``team_get_config`` gives back.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from ...core._checks import check_pe
from ...core._constants import MAX_TEAMS, TEAM_NODE, TEAM_WORLD
from ...core._errors import PgasError, PgasValueError
from ...runtime._arrays import as_ndarray
from ...runtime._barrier import wait_all
from ...runtime._bootstrap import UniqueId, join_over_port, new_unique_id, port_opened_here
from ...runtime._state import Runtime, runtime
from ...runtime._team_table import Team, team_of
from ..memory._memory import _device_array
from ..synchronization._sync import team_barrier
from ._team_names import check_new_name, forget_team, name_team, team_named

__all__ = ["get_multicast_array", "get_multicast_buffer", "team_split_strided", "team_split_2d", "team_init",
           "get_team_unique_id", "TeamUniqueId", "TeamConfig", "team_get_config", "TEAM_NUM_CONTEXTS",
           "TEAM_CONFIG_MASK_NUM_CONTEXTS", "TEAM_CONFIG_MASK_UNIQUEID", "team_my_pe", "team_n_pes",
           "team_translate_pe", "team_destroy", "team_ptr", "barrier", "sync"]

# The bits of a config_mask: which fields of a team's config to use (OpenSHMEM's
# SHMEM_TEAM_NUM_CONTEXTS; NVSHMEM's NVSHMEM_TEAM_CONFIG_MASK_* with the same values).
TEAM_NUM_CONTEXTS = TEAM_CONFIG_MASK_NUM_CONTEXTS = 1 << 0
TEAM_CONFIG_MASK_UNIQUEID = 1 << 1   # config.uniqueid, which team_init's nvshmem4py form reads whatever the mask
_MASK_BITS = TEAM_NUM_CONTEXTS | TEAM_CONFIG_MASK_UNIQUEID


def _free_slots(rt: Runtime, parent: Team, count: int, fn: str, comm=None) -> list[int]:
    """``count`` slot numbers free on every member of ``parent`` (the same on all); agreed
    over ``comm`` where given (the members of a team being made) instead of the parent's."""
    from mpi4py import MPI

    mine = sum(1 << slot for slot, team in enumerate(rt.teams) if team is None)
    free_everywhere = (parent.comm if comm is None else comm).allreduce(mine, op=MPI.BAND)
    slots = [slot for slot in range(MAX_TEAMS) if free_everywhere >> slot & 1][:count]
    if len(slots) < count:
        raise PgasError(f"{fn}: no free team slot: at most pgas.MAX_TEAMS={MAX_TEAMS} teams may exist "
                        "at once on a PE (TEAM_WORLD and TEAM_NODE included); "
                        "release teams with pgas.team_destroy")
    return slots


def _install(rt: Runtime, slot: int, members: tuple[int, ...] | None, parent: Team,
             num_contexts: int) -> Team | None:
    """Collective over ``parent``: make the team of ``members`` (world PEs) at ``slot``."""
    from mpi4py import MPI

    mine = members is not None and rt.my_pe in members
    color = min(members) if mine else MPI.UNDEFINED
    comm = parent.comm.Split(color, members.index(rt.my_pe) if mine else 0)
    if not mine:
        return None
    team = Team(slot, members, members.index(rt.my_pe), comm, num_contexts)
    rt.reset_team_slot(slot)  # fresh barrier epochs; peers wait for this below
    rt.set_team(slot, team)
    return team


def _check_int(fn: str, what: str, value, minimum: int) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise PgasValueError(f"{fn}: {what} must be an integer, got {value!r}")
    if value < minimum:
        raise PgasValueError(f"{fn}: {what} must be >= {minimum}, got {value}")
    return int(value)


def team_split_strided(parent, start: int, stride: int, size: int, config=None, config_mask: int | None = None,
                       new_team_name: str | None = None):
    """A team of ``size`` members of ``parent``: its PEs ``start, start+stride, ...``.

    ``config``: the new team's configuration (a ``TeamConfig``, a dict of its fields such
    as ``{"num_contexts": 2}``, or None for the defaults), which ``team_get_config`` gives
    back; ``config_mask`` (OpenSHMEM's, nvshmem4py's) the fields of it to use
    (``TEAM_NUM_CONTEXTS``; 0: none, the defaults), or None for all of them.
    ``new_team_name``: the new team is also ``pgas.Teams.<name>`` on its members
    (``_team_names``).

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
    num_contexts = _requested_contexts(fn, config, config_mask)
    if rt.my_pe in members:
        check_new_name(rt, new_team_name, fn)
    slot, = _free_slots(rt, par, 1, fn)
    team = _install(rt, slot, members, par, num_contexts)
    wait_all(par.comm, fn, par.pes)
    if team is None:
        return None
    name_team(new_team_name, team.handle)
    return team.handle


def team_split_2d(parent, xrange: int, xaxis_config=None, xaxis_mask: int | None = None, yaxis_config=None,
                  yaxis_mask: int | None = None, new_team_name: str | None = None):
    """Split ``parent`` into a 2-D grid with rows of ``xrange`` PEs: returns ``(xteam, yteam)``.

    ``xaxis_config``/``xaxis_mask`` configure ``xteam`` and ``yaxis_config``/``yaxis_mask``
    ``yteam``, as ``config``/``config_mask`` of ``team_split_strided`` do. ``new_team_name``
    is accepted and ignored (one name for two teams: neither is registered in ``pgas.Teams``).

    ``xteam`` holds this PE's row (consecutive parent ranks; the last row may be
    shorter), ``yteam`` its column (parent ranks equal modulo ``xrange``). Collective over
    ``parent``; every member gets both.
    """
    fn = "pgas.team_split_2d"
    rt = runtime(fn)
    par = team_of(rt, parent, fn, "parent")
    xrange = _check_int(fn, "xrange", xrange, 1)
    xrange = min(xrange, par.size)
    xcontexts = _requested_contexts(fn, xaxis_config, xaxis_mask, "xaxis_config", "xaxis_mask")
    ycontexts = _requested_contexts(fn, yaxis_config, yaxis_mask, "yaxis_config", "yaxis_mask")
    me = par.my_index
    row_start, column = me - me % xrange, me % xrange
    row = par.pes[row_start:row_start + xrange]
    col = par.pes[column::xrange]
    xslot, yslot = _free_slots(rt, par, 2, fn)
    xteam = _install(rt, xslot, row, par, xcontexts)
    yteam = _install(rt, yslot, col, par, ycontexts)
    wait_all(par.comm, fn, par.pes)
    return xteam.handle, yteam.handle


class TeamUniqueId(UniqueId):
    """What ``pgas.get_team_unique_id()`` returns (nvshmem4py's ``TeamUniqueId``): the MPI
    port on which the PE that made it, team rank 0, accepts the other members in ``team_init``."""

    @property
    def value(self) -> bytes:
        return bytes(self)


@dataclass
class TeamConfig:
    """A team's configuration (OpenSHMEM's ``shmem_team_config_t``, nvshmem4py's ``TeamConfig``):
    what the team splits and ``team_init`` take as ``config``, and ``team_get_config`` returns.

    ``num_contexts``: how many contexts the program means to make on the team at once
    (OpenSHMEM's hint to reserve resources; default 0). pgas keeps it for
    ``team_get_config``; its contexts take no reserved resources, so more may be made.
    ``uniqueid``: for nvshmem4py's form of ``team_init`` only, an id from
    ``get_team_unique_id()``. ``version``: nvshmem4py's layout version, not read.
    """

    uniqueid: TeamUniqueId | None = None
    num_contexts: int = 0
    version: int = 2


_CONFIG_FIELDS = ("uniqueid", "num_contexts", "version")


def _as_team_config(fn: str, config, what: str):
    """``config`` as an object with TeamConfig's fields: a TeamConfig (or any object with
    ``num_contexts`` or ``uniqueid``, as nvshmem4py's own), a dict of its fields, or None
    (the defaults)."""
    if config is None:
        return TeamConfig()
    if isinstance(config, dict):
        unknown = [key for key in config if key not in _CONFIG_FIELDS]
        if unknown:
            raise PgasValueError(f"{fn}: {what} has no field {unknown[0]!r}: a team configuration has "
                                 f"{', '.join(_CONFIG_FIELDS)}")
        return TeamConfig(**config)
    if hasattr(config, "num_contexts") or hasattr(config, "uniqueid"):
        return config
    raise PgasValueError(f"{fn}: {what} must be a pgas.TeamConfig, a dict such as {{'num_contexts': 2}}, or None, "
                         f"got {config!r}")


def _check_mask(fn: str, mask, what: str) -> int | None:
    """``mask`` (a config_mask) checked: None (every field of the config) or a combination of
    the TEAM_CONFIG_MASK_* bits."""
    if mask is None:
        return None
    if isinstance(mask, (bool, np.bool_)) or not isinstance(mask, numbers.Integral) or mask < 0 or mask & ~_MASK_BITS:
        raise PgasValueError(f"{fn}: {what} must be None (every field of the config), 0 (none: the defaults) or a "
                             f"combination of pgas.TEAM_NUM_CONTEXTS ({TEAM_NUM_CONTEXTS}) and "
                             f"pgas.TEAM_CONFIG_MASK_UNIQUEID ({TEAM_CONFIG_MASK_UNIQUEID}), got {mask!r}")
    return int(mask)


def _requested_contexts(fn: str, config, mask, what: str = "config", mask_what: str = "config_mask") -> int:
    """The ``num_contexts`` a team made with ``config`` and ``mask`` has: the config's where the
    mask is None or has TEAM_NUM_CONTEXTS, else the default 0 (OpenSHMEM's rule)."""
    mask = _check_mask(fn, mask, mask_what)
    if config is None and mask:
        raise PgasValueError(f"{fn}: {mask_what}={mask} names fields of {what}, but {what} is None; give a "
                             f"pgas.TeamConfig, or {mask_what}=0")
    config = _as_team_config(fn, config, what)
    if mask is not None and not mask & TEAM_NUM_CONTEXTS:
        return 0
    return _check_int(fn, f"{what}.num_contexts", getattr(config, "num_contexts", 0), 0)


def team_get_config(team, config_mask: int | None = None, config: TeamConfig | None = None) -> TeamConfig:
    """The configuration ``team`` was made with (OpenSHMEM's ``shmem_team_get_config``,
    nvshmem4py's ``team_get_config``). Not collective.

    Parameters
    ----------
    team : int
        A team this PE belongs to: ``TEAM_WORLD``, ``TEAM_NODE`` (``TEAM_SHARED``; these
        have the default configuration) or one made by a split or ``team_init`` and not
        destroyed (else PgasValueError; also for ``None``, the TEAM_INVALID of a non-member).
    config_mask : int, optional
        The fields to give (``TEAM_NUM_CONTEXTS``), OpenSHMEM's form; None: all of them.
    config : TeamConfig, optional
        Filled in, OpenSHMEM's form: the fields in ``config_mask`` are set, the others left
        as they are. Without it, a new ``TeamConfig`` (fields outside the mask at their defaults).

    Returns
    -------
    TeamConfig
        ``num_contexts`` as the team's creator asked (0 by default). ``uniqueid`` is not
        kept: the id of ``team_init`` is an MPI port, closed once the team is made.
    """
    fn = "pgas.team_get_config"
    found = team_of(runtime(fn), team, fn)
    mask = _check_mask(fn, config_mask, "config_mask")
    if config is None:
        config = TeamConfig()
    elif not isinstance(config, TeamConfig):
        raise PgasValueError(f"{fn}: config must be a pgas.TeamConfig to fill in (or None for a new one), "
                             f"got {config!r}")
    if mask is None or mask & TEAM_NUM_CONTEXTS:
        config.num_contexts = found.num_contexts
    return config


def get_team_unique_id() -> TeamUniqueId:
    """An id for nvshmem4py's form of ``team_init`` (NVSHMEM's ``nvshmemx_team_get_uniqueid``).

    Not collective. Made on the PE that will be rank 0 of the new team: it holds an MPI port
    that PE opens, on which it accepts the other members during ``team_init`` (the port is
    closed then). Pass it to the other members out of band (e.g. ``comm.bcast``).
    """
    runtime("pgas.get_team_unique_id")
    port = new_unique_id().port
    return TeamUniqueId(port)


def _check_pe_list(fn: str, pes, n_pes: int) -> tuple[int, ...]:
    """``pes`` as a tuple of distinct world PEs, or a PgasValueError naming ``pes``."""
    try:
        items = list(pes)
    except TypeError:
        raise PgasValueError(f"{fn}: pes must be a sequence of PE numbers, got {pes!r}") from None
    if not items:
        raise PgasValueError(f"{fn}: pes is empty; a team needs at least one PE")
    for pe in items:
        if isinstance(pe, (bool, np.bool_)) or not isinstance(pe, numbers.Integral):
            raise PgasValueError(f"{fn}: pes must hold PE numbers (integers), got {pe!r} in {items}")
        if not 0 <= pe < n_pes:
            raise PgasValueError(f"{fn}: pes must hold PEs within [0, {n_pes}), got {int(pe)} in {items}")
    members = tuple(int(pe) for pe in items)
    twice = sorted({pe for pe in members if members.count(pe) > 1})
    if twice:
        raise PgasValueError(f"{fn}: pes names PE{'s' if len(twice) > 1 else ''} "
                             f"{', '.join(map(str, twice))} more than once: {list(members)}")
    return members


def _install_over(rt: Runtime, members: tuple[int, ...], fn: str, num_contexts: int) -> int:
    """The members (only they take part) make the team of ``members``: its communicator from
    the world's group of them (``Create_group``, collective over the members only), a slot
    free on all of them, fresh synchronization words. Returns the handle."""
    world = rt.teams[TEAM_WORLD]
    group = world.comm.Get_group()
    try:
        subgroup = group.Incl(list(members))
        try:
            comm = world.comm.Create_group(subgroup)
        finally:
            subgroup.Free()
    finally:
        group.Free()
    try:
        slot, = _free_slots(rt, world, 1, fn, comm)
    except PgasError:
        comm.Free()
        raise
    team = Team(slot, members, members.index(rt.my_pe), comm, num_contexts)
    rt.reset_team_slot(slot)  # fresh barrier epochs; members wait for this below
    rt.set_team(slot, team)
    wait_all(comm, fn, members)
    return slot


def team_init(pes=None, config_mask: int | None = None, npes: int | None = None, pe_idx_in_team: int | None = None,
              new_team_name: str | None = None, *, config=None) -> int:
    """The team of exactly the world PEs ``pes``, in that order (``pes[i]`` gets team rank ``i``).

    Collective over those PEs only: each of them calls it with the same ``pes``; the others
    do not call it (an MPI communicator is made from the world's group of these PEs, so no
    other PE takes part).

    nvshmem4py's form is accepted too: ``team_init(config, config_mask, npes, pe_idx_in_team)``
    with ``config.uniqueid = pgas.get_team_unique_id()`` made on the member that passes
    ``pe_idx_in_team=0`` and given to the others out of band; every member passes the
    team's size and its own index in it (NVSHMEM's ``nvshmemx_team_init``).

    Parameters
    ----------
    pes : sequence of int, or TeamConfig
        The world PEs of the team, distinct and in range; this PE among them. Or
        nvshmem4py's ``config`` (a ``pgas.TeamConfig``, or anything with ``uniqueid``).
    config_mask, npes, pe_idx_in_team
        nvshmem4py's form: ``npes`` and ``pe_idx_in_team`` are required. ``config.uniqueid``
        is an id from ``get_team_unique_id()``, or, for a team of every PE (``npes ==
        n_pes()``), any integer that every PE passes (nvshmem4py's tests do so); the
        members are then ordered by ``pe_idx_in_team``.
    config : TeamConfig, dict or None, keyword
        With ``pes``: the new team's configuration (``num_contexts``, which
        ``team_get_config`` gives back), as for ``team_split_strided``; ``config_mask``
        (None: every field; 0: the defaults; ``TEAM_NUM_CONTEXTS``) picks its fields, in
        both forms.
    new_team_name : str, optional
        The new team is also ``pgas.Teams.<name>`` on its members, and
        ``team_destroy(name)`` destroys it.

    Returns
    -------
    int
        The new team's handle.
    """
    fn = "pgas.team_init"
    rt = runtime(fn)
    check_new_name(rt, new_team_name, fn)
    if hasattr(pes, "uniqueid") or (pes is None and config is not None):
        config = _as_team_config(fn, pes if hasattr(pes, "uniqueid") else config, "config")
        num_contexts = _requested_contexts(fn, config, config_mask)
        handle = _team_init_by_id(rt, config, npes, pe_idx_in_team, num_contexts, fn)
    else:
        if pes is None:
            raise PgasValueError(f"{fn}: give pes (the world PEs of the team), or nvshmem4py's config with npes "
                                 "and pe_idx_in_team")
        num_contexts = _requested_contexts(fn, config, config_mask)
        members = _check_pe_list(fn, pes, rt.n_pes)
        if rt.my_pe not in members:
            raise PgasValueError(f"{fn}: this PE ({rt.my_pe}) is not in pes {list(members)}: only the PEs of the "
                                 "new team call team_init")
        handle = _install_over(rt, members, fn, num_contexts)
    name_team(new_team_name, handle)
    return handle


def _team_init_by_id(rt: Runtime, config, npes, pe_idx_in_team, num_contexts: int, fn: str) -> int:
    uid = getattr(config, "uniqueid", None)
    agreed = isinstance(uid, numbers.Integral) and not isinstance(uid, (bool, np.bool_))
    if not agreed and (not isinstance(uid, UniqueId) or uid.is_empty):
        raise PgasValueError(f"{fn}: config.uniqueid must be an id from pgas.get_team_unique_id() (made on the "
                             f"member with pe_idx_in_team=0, passed to the others), or an integer that every PE "
                             f"passes for a team of every PE, got {uid!r}")
    if npes is None or pe_idx_in_team is None:
        raise PgasValueError(f"{fn}: nvshmem4py's form needs npes and pe_idx_in_team, got npes={npes!r}, "
                             f"pe_idx_in_team={pe_idx_in_team!r}")
    npes = _check_int(fn, "npes", npes, 1)
    if npes > rt.n_pes:
        raise PgasValueError(f"{fn}: npes must be within [1, {rt.n_pes}] (the PEs of the job), got {npes}")
    index = _check_int(fn, "pe_idx_in_team", pe_idx_in_team, 0)
    if index >= npes:
        raise PgasValueError(f"{fn}: pe_idx_in_team must be within [0, npes) = [0, {npes}), got {index}")
    if agreed:
        return _team_of_everyone(rt, int(uid), npes, index, num_contexts, fn)
    made_here = port_opened_here(uid.port)
    if (index == 0) != made_here:
        made = "made" if made_here else "did not make"
        raise PgasValueError(f"{fn}: the member with pe_idx_in_team=0 must be the PE that called "
                             f"pgas.get_team_unique_id() for this id (this PE {made} it, and has "
                             f"pe_idx_in_team={index})")
    joined = join_over_port(uid.port, index, npes, fn, what="pe_idx_in_team")
    try:
        members = tuple(joined.allgather(rt.my_pe))
    finally:
        joined.Free()
    return _install_over(rt, members, fn, num_contexts)


def _team_of_everyone(rt: Runtime, uid: int, npes: int, index: int, num_contexts: int, fn: str) -> int:
    """nvshmem4py's ``team_init`` with an integer id agreed in advance: only for a team of
    every PE, whose members meet over the world (collective over TEAM_WORLD); ordered by
    ``index`` (each PE's ``pe_idx_in_team``)."""
    if npes != rt.n_pes:
        raise PgasValueError(f"{fn}: an integer config.uniqueid ({uid}) names a team of every PE (npes == "
                             f"{rt.n_pes}), got npes={npes}; for fewer PEs use pgas.get_team_unique_id() or "
                             "team_init(pes)")
    world = rt.teams[TEAM_WORLD]
    seen = world.comm.allgather((uid, index))
    if len({u for u, _ in seen}) != 1:
        raise PgasValueError(f"{fn}: the PEs passed different integer uniqueids: "
                             f"{ {pe: u for pe, (u, _) in enumerate(seen)} }")
    if sorted(i for _, i in seen) != list(range(npes)):
        raise PgasValueError(f"{fn}: the {npes} PEs must give each pe_idx_in_team in [0, {npes}) once, got "
                             f"{ {pe: i for pe, (_, i) in enumerate(seen)} }")
    members = tuple(pe for _, pe in sorted((i, pe) for pe, (_, i) in enumerate(seen)))
    return _install_over(rt, members, fn, num_contexts)


def team_ptr(team, a, pe: int):
    """A view of the copy of symmetric array ``a`` on the PE of rank ``pe`` in ``team``, as
    ``pgas.peer_array(a, world_pe)`` (OpenSHMEM's ``shmem_team_ptr``): same node only, a
    PgasError for a PE on another node (no load/store path; use put/get there).

    Parameters
    ----------
    team : int
        A team this PE belongs to.
    a : symmetric array
        From ``pgas.empty/zeros/full`` (or a slice of one).
    pe : int
        A rank in ``team``, within ``[0, team_n_pes(team))``.
    """
    fn = "pgas.team_ptr"
    rt = runtime(fn)
    found = team_of(rt, team, fn)
    rank = check_pe(fn, pe, found.size)
    world_pe = found.pes[rank]
    data = as_ndarray(a, fn, "a")
    if not rt.heap.reachable(world_pe):
        raise PgasError(f"{fn}: team rank {rank} (PE {world_pe}) is on another node: its memory has no load/store "
                        f"path from this PE (transport {rt.transports.kinds[world_pe]!r}); use pgas.put/pgas.get")
    return _device_array(rt.heap.view_on(world_pe, data, fn, "a"))


def get_multicast_array(team, a):
    """Symmetric array ``a`` of every member of ``team`` as one array whose stores reach them
    all (nvshmem4py's ``get_multicast_array``/``get_multicast_buffer``; NVSHMEM's
    ``nvshmemx_mc_ptr``): give it to kernels, where ``mc[i] = v`` writes ``v`` into element
    ``i`` of each member's copy, as a ``multimem.st`` through an NVLink SHARP switch does (the
    simulator allows the same stores from the host). Stores only: loads are refused (on the
    hardware they are undefined). Not collective.

    Every member of ``team`` must be on this node (PgasError: a multicast object spans one
    NVLink domain). The cuda backend has none: pgas sets up no multicast objects there
    (PgasError), as NVSHMEM has none on GPUs without NVLink SHARP.

    Parameters
    ----------
    team : int
        A team this PE belongs to.
    a : symmetric array
        From ``pgas.empty/zeros/full`` (or a slice of one).
    """
    fn = "pgas.get_multicast_array"
    rt = runtime(fn)
    found = team_of(rt, team, fn)
    data = as_ndarray(a, fn, "a")
    rt.heap.offset_of(data, fn, "a")
    return rt.heap.multicast(found.pes, data, fn)


get_multicast_buffer = get_multicast_array     # nvshmem4py's name for byte buffers (pgas.buffer)


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
    """Release ``team`` (collective over its members): a handle, or the name it was given
    with ``new_team_name``. The predefined teams cannot be destroyed."""
    fn = "pgas.team_destroy"
    rt = runtime(fn)
    if team is None:
        return
    if isinstance(team, str):
        team = team_named(team, fn)
    found = team_of(rt, team, fn)
    if found.handle in (TEAM_WORLD, TEAM_NODE):
        raise PgasValueError(f"{fn}: TEAM_WORLD and TEAM_NODE cannot be destroyed")
    wait_all(found.comm, fn, found.pes)  # no member still uses it
    rt.set_team(found.handle, None)
    forget_team(found.handle)
    found.comm.Free()


def barrier(team, stream=None) -> None:
    """Complete this PE's RMA (``quiet``), then wait until every member of ``team`` calls this."""
    team_barrier("pgas.barrier", team, True, stream)


def sync(team, stream=None) -> None:
    """Wait until every member of ``team`` calls this (no completion of RMA implied)."""
    team_barrier("pgas.sync", team, False, stream)
