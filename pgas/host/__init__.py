"""The host runtime of pgas (re-exported as ``pgas.*``), a sub-package per area:
``memory``, ``rma`` (put/get, signals, atomics, contexts), ``synchronization``, ``teams`` and
``collectives``; ``_init`` (init/finalize), ``_info`` and ``_gpu_ops`` (the cuda backend's
operations on a stream) beside them."""
from .rma import *  # noqa: F401,F403
from .rma import __all__ as _rma_all
from .collectives import *  # noqa: F401,F403
from .collectives import __all__ as _collectives_all
from ._info import *  # noqa: F401,F403
from ._info import __all__ as _info_all
from ._init import *  # noqa: F401,F403
from ._init import __all__ as _init_all
from .memory import *  # noqa: F401,F403
from .memory import __all__ as _memory_all
from .synchronization import *  # noqa: F401,F403
from .synchronization import __all__ as _synchronization_all
from .teams import *  # noqa: F401,F403
from .teams import __all__ as _teams_all

__all__ = (_init_all + _memory_all + _rma_all + _synchronization_all + _teams_all + _collectives_all
           + _info_all)

from ..check import enabled as _checking  # noqa: E402

if _checking():     # PGAS_CHECK=1: the calls the checker models record themselves
    from ..check._host import checked_host_api as _checked_host_api
    from .rma._keywords import NVSHMEM4PY_NAMES as _NVSHMEM4PY_NAMES
    _checked_host_api(globals(), __all__, _NVSHMEM4PY_NAMES)
