"""The host runtime of pgas (re-exported as ``pgas.*``)."""
from ._atomics import *  # noqa: F401,F403
from ._atomics import __all__ as _atomics_all
from ._collectives import *  # noqa: F401,F403
from ._collectives import __all__ as _collectives_all
from ._info import *  # noqa: F401,F403
from ._info import __all__ as _info_all
from ._init import *  # noqa: F401,F403
from ._init import __all__ as _init_all
from ._memory import *  # noqa: F401,F403
from ._memory import __all__ as _memory_all
from ._rma import *  # noqa: F401,F403
from ._rma import __all__ as _rma_all
from ._signal import *  # noqa: F401,F403
from ._signal import __all__ as _signal_all
from ._sync import *  # noqa: F401,F403
from ._sync import __all__ as _sync_all
from ._locks import *  # noqa: F401,F403
from ._locks import __all__ as _locks_all
from ._scans import *  # noqa: F401,F403
from ._scans import __all__ as _scans_all
from ._contexts import *  # noqa: F401,F403
from ._contexts import __all__ as _contexts_all
from ._point_sync import *  # noqa: F401,F403
from ._point_sync import __all__ as _point_sync_all
from ._accessible import *  # noqa: F401,F403
from ._accessible import __all__ as _accessible_all
from ._named_collectives import *  # noqa: F401,F403
from ._named_collectives import __all__ as _named_collectives_all
from ._teams import *  # noqa: F401,F403
from ._teams import __all__ as _teams_all
from ._symmetric_registration import *  # noqa: F401,F403
from ._symmetric_registration import __all__ as _symmetric_registration_all
from ._team_names import Teams  # noqa: F401

__all__ = (_init_all + _memory_all + _rma_all + _signal_all + _atomics_all + _sync_all + _teams_all
           + _collectives_all + _info_all + _locks_all + _scans_all + _contexts_all
           + _point_sync_all + _accessible_all + _named_collectives_all + _symmetric_registration_all + ["Teams"])

from ..check import enabled as _checking  # noqa: E402

if _checking():     # PGAS_CHECK=1: the calls the checker models record themselves
    from ..check._host import checked_host_api as _checked_host_api
    from ._keywords import NVSHMEM4PY_NAMES as _NVSHMEM4PY_NAMES
    _checked_host_api(globals(), __all__, _NVSHMEM4PY_NAMES)
