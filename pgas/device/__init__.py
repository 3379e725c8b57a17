"""pgas device functions, called from ``numba.cuda.jit`` kernels.

No context argument: the functions find the PE's runtime themselves. Symmetric
arguments (``dest``, ``src``, ``ivar``) are arrays from ``pgas.empty/zeros/full`` or
slices of them; scalar operations act on element 0 (pass ``a[i:]`` for element i).
"""
from .._constants import *  # noqa: F401,F403
from .._constants import __all__ as _constants_all
from ._query import *  # noqa: F401,F403
from ._query import __all__ as _query_all
from ._rma import *  # noqa: F401,F403
from ._rma import __all__ as _rma_all
from ._sync import *  # noqa: F401,F403
from ._sync import __all__ as _sync_all

__all__ = _constants_all + _query_all + _rma_all + _sync_all
