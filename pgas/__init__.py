"""pgas: NVSHMEM-style symmetric memory for Python and numba kernels.

``import pgas`` chooses the backend (see ``PGAS_BACKEND``) before ``numba.cuda`` is
imported, so import pgas first in programs not started by ``pgasrun``.
"""
from .core._version import __version__

from .core._backend import backend_name as _backend_name
from .core._constants import *  # noqa: F401,F403
from .core._errors import *  # noqa: F401,F403
from .core._errors import PgasConfigError as _PgasConfigError

try:
    _backend_name()
except _PgasConfigError:
    pass  # a bad PGAS_BACKEND: pgas.init and pgas.device raise it; pgasrun and pgas-info report it

from .host import *  # noqa: E402,F401,F403
from ml_dtypes import bfloat16  # noqa: E402,F401  (a numpy dtype, as np.float32; reductions take it)
