"""Teams on the host (re-exported as ``pgas.*``): split, query, translate, destroy and
team barriers (``_teams``), and nvshmem4py's ``Teams``, the teams by name (``_team_names``)."""
from ._teams import *  # noqa: F401,F403
from ._teams import __all__ as _teams_all
from ._team_names import Teams  # noqa: F401

__all__ = _teams_all + ["Teams"]
