"""Synchronization from the host (re-exported as ``pgas.*``): barriers across all PEs and
the team barriers' common path (``_sync``), point-to-point waits and tests and ``fence``
(``_point_sync``), and OpenSHMEM's locks (``_locks``)."""
from ._sync import *  # noqa: F401,F403
from ._sync import __all__ as _sync_all
from ._point_sync import *  # noqa: F401,F403
from ._point_sync import __all__ as _point_sync_all
from ._locks import *  # noqa: F401,F403
from ._locks import __all__ as _locks_all

__all__ = _sync_all + _point_sync_all + _locks_all
