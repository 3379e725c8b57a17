"""pgas: NVSHMEM-style symmetric memory for Python and numba kernels.

``import pgas`` chooses the backend (see ``PGAS_BACKEND``) before ``numba.cuda`` is
imported, so import pgas first in programs not started by ``pgasrun``. The host API
(``pgas.host``) is imported at the first use of one of its names.
"""
import pkgutil as _pkgutil

from .core._version import __version__

from .core._backend import backend_name as _backend_name
from .core._constants import *  # noqa: F401,F403
from .core._errors import *  # noqa: F401,F403
from .core._errors import PgasConfigError as _PgasConfigError

try:
    _backend_name()
except _PgasConfigError:
    pass  # a bad PGAS_BACKEND: pgas.init and pgas.device raise it; pgasrun and pgas-info report it


_PACKAGES = {module.name for module in _pkgutil.iter_modules(__path__)}   # pgas's subpackages (listed, not imported)


def _host_api() -> dict:
    """The host API (``pgas.host``'s names) and ``bfloat16`` (ml_dtypes', a numpy dtype as
    np.float32; reductions take it)."""
    import importlib

    from ml_dtypes import bfloat16

    host = importlib.import_module("pgas.host")   # (not ``from . import host``: that asks this module first)
    return {**{name: getattr(host, name) for name in host.__all__}, "bfloat16": bfloat16}


def __getattr__(name: str):
    """The host API, imported at its first use (with numba behind it): the
    launcher's processes (``pgasrun``, the guard of each PE) import only ``pgas.launcher``
    and the core, half a second less each."""
    if name.startswith("__") and name != "__all__" or name in _PACKAGES:   # a subpackage: the import system's
        raise AttributeError(f"module 'pgas' has no attribute {name!r}")
    names = globals()
    for key, value in _host_api().items():
        names.setdefault(key, value)
    if name == "__all__":        # ``from pgas import *``: every public name, as without one
        return sorted(key for key in list(names) if not key.startswith("_"))
    if name not in names:
        raise AttributeError(f"module 'pgas' has no attribute {name!r}")
    return names[name]


def __dir__() -> list:
    return sorted({*globals(), *_host_api()})
