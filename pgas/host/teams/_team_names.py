"""nvshmem4py's ``Teams``: the predefined teams by name, and the teams named at creation.

``team_init(..., new_team_name="ROWS")`` (and the splits) register the new team under its
name on each member; then ``pgas.Teams.ROWS`` is its handle, ``"ROWS" in pgas.Teams`` and
``pgas.Teams.keys()`` list it, and ``team_destroy("ROWS")`` destroys it. The names are
this PE's (each member registers the name it was given) and end with the team, or with
``finalize``. A pgas team is still its integer handle: ``Teams.X`` is that integer.
"""
from __future__ import annotations

from ...core._constants import TEAM_NODE, TEAM_SHARED, TEAM_WORLD
from ...core._errors import PgasValueError
from ...runtime import _state
from ...runtime._state import Runtime

__all__ = ["Teams", "check_new_name", "name_team", "team_named", "forget_team"]

_PREDEFINED = {"TEAM_WORLD": TEAM_WORLD, "TEAM_NODE": TEAM_NODE, "TEAM_SHARED": TEAM_SHARED,
               "WORLD": TEAM_WORLD, "NODE": TEAM_NODE, "SHARED": TEAM_SHARED}
_named: dict[str, int] = {}       # name -> handle, for the runtime in _owner
_owner: list = [None]             # the runtime the names belong to (names end with finalize)


def _names(rt: Runtime | None = None) -> dict[str, int]:
    """The names of teams made in the current runtime (``rt``, when given), predefined first."""
    current = rt if rt is not None else _state.current()
    if _owner[0] is not current:
        _named.clear()
        _owner[0] = current
    return {**_PREDEFINED, **_named}


class _Registry(type):
    """``Teams.NAME``, ``Teams["NAME"]``, ``"NAME" in Teams``, ``Teams.keys()``."""

    def __getattr__(cls, name: str) -> int:
        names = _names()
        if name in names:
            return names[name]
        raise AttributeError(f"pgas.Teams has no team named {name!r} (named teams: {sorted(_named)})")

    def __getitem__(cls, name: str) -> int:
        return team_named(name, "pgas.Teams")

    def __contains__(cls, name) -> bool:
        return name in _names()

    def __iter__(cls):
        return iter(_names())

    def keys(cls) -> list[str]:
        return list(_names())


class Teams(metaclass=_Registry):
    """The teams by name (nvshmem4py's ``Teams``): ``Teams.TEAM_WORLD``, ``Teams.TEAM_NODE``,
    ``Teams.TEAM_SHARED`` (also without ``TEAM_``), and every team created with a
    ``new_team_name`` on this PE and not yet destroyed."""


def check_new_name(rt: Runtime, name, fn: str) -> None:
    """A PgasValueError unless ``name`` (a ``new_team_name``) is None or a free name."""
    if name is None:
        return
    if not isinstance(name, str) or not name.isidentifier():
        raise PgasValueError(f"{fn}: new_team_name must be a name usable as an attribute (letters, digits, "
                             f"underscores), got {name!r}")
    if name in _names(rt):
        raise PgasValueError(f"{fn}: a team named {name!r} exists already (team_destroy it first)")


def name_team(name: str | None, handle: int) -> None:
    """Register ``handle`` under ``name`` (checked by ``check_new_name``; None: nothing)."""
    if name is not None:
        _named[name] = handle


def team_named(name: str, fn: str) -> int:
    """The handle of the team registered as ``name``."""
    names = _names()
    if name not in names:
        raise PgasValueError(f"{fn}: no team is named {name!r} on this PE (named teams: {sorted(_named)}; "
                             "a name is given with new_team_name and ends with team_destroy)")
    return names[name]


def forget_team(handle: int) -> None:
    """Drop the names of ``handle`` (it was destroyed)."""
    for name in [n for n, h in _named.items() if h == handle]:
        del _named[name]
