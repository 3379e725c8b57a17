"""One-sided communication from the host (re-exported as ``pgas.*``): put and get
(``_rma``), signals (``_signal``), atomics (``_atomics``), communication contexts
(``_contexts``), and nvshmem4py's keyword names for them (``_keywords``)."""
from ._rma import *  # noqa: F401,F403
from ._rma import __all__ as _rma_all
from ._signal import *  # noqa: F401,F403
from ._signal import __all__ as _signal_all
from ._atomics import *  # noqa: F401,F403
from ._atomics import __all__ as _atomics_all
from ._contexts import *  # noqa: F401,F403
from ._contexts import __all__ as _contexts_all

__all__ = _rma_all + _signal_all + _atomics_all + _contexts_all
