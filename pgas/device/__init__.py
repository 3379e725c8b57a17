"""pgas device functions, called from ``numba.cuda.jit`` kernels.

No context argument: the functions find the PE's runtime themselves. Symmetric
arguments (``dest``, ``src``, ``ivar``, ``signal``) are arrays from ``pgas.empty/zeros/full``
or slices of them; scalar operations act on element 0 (pass ``a[i:]`` for element i).
"""
from ..core._constants import *  # noqa: F401,F403
from ..core._constants import __all__ as _constants_all
from . import _atomics, _collectives, _peer, _query, _rma, _signal, _sync, _wait_sets, _locks, _scans
from ._primitives import prim as _prim

_MODULES = (_query, _rma, _atomics, _signal, _sync, _wait_sets, _collectives, _peer, _locks, _scans)
__all__ = list(_constants_all)
for _module in _MODULES:
    for _name in _module.__all__:
        globals()[_name] = _prim.device_function(getattr(_module, _name))
        __all__.append(_name)
del _module, _name
