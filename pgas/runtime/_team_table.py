"""What a PE knows about each team it belongs to (shared by the host and device APIs)."""
from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from ..core._constants import MAX_TEAMS, TEAM_NODE, TEAM_WORLD
from ..core._device_errors import device_error
from ..core._errors import PgasValueError

__all__ = ["Team", "predefined_teams", "team_of"]


@dataclass(frozen=True)
class Team:
    """One team, as seen by one of its members."""

    handle: int
    pes: tuple[int, ...]   # the PE (in TEAM_WORLD) of every team member, by team rank
    my_index: int          # this PE's rank in the team
    comm: object           # mpi4py communicator of the members, ranks = team ranks
    num_contexts: int = 0  # the contexts its config asked for (OpenSHMEM's default 0; team_get_config)

    @property
    def size(self) -> int:
        return len(self.pes)

    def index_of(self, pe: int) -> int:
        """Team rank of world PE ``pe``, or -1 when it is not a member."""
        try:
            return self.pes.index(pe)
        except ValueError:
            return -1


def predefined_teams(boot) -> list:
    """The team slots at init: TEAM_WORLD and TEAM_NODE filled, the rest free."""
    slots: list = [None] * MAX_TEAMS
    slots[TEAM_WORLD] = Team(TEAM_WORLD, tuple(range(boot.n_pes)), boot.my_pe, boot.comm)
    local = boot.local_pes
    slots[TEAM_NODE] = Team(TEAM_NODE, local, local.index(boot.my_pe), boot.node_comm)
    return slots


def team_of(rt, team, fn: str, what: str = "team") -> Team:
    """The Team behind handle ``team`` on this PE, or a PgasValueError naming ``fn``."""
    if team is None:
        raise PgasValueError(f"{fn}: {what} is None (this PE is not a member of that team)")
    if isinstance(team, (bool, np.bool_)) or not isinstance(team, numbers.Integral):
        raise PgasValueError(f"{fn}: {what} must be a team handle (an int such as pgas.TEAM_WORLD), got {team!r}")
    handle = int(team)
    found = rt.teams[handle] if 0 <= handle < MAX_TEAMS else None
    if found is None:
        raise device_error("TEAM", fn, what, a=handle, b=rt.my_pe)
    return found
