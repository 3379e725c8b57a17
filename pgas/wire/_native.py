"""UCX's, MPI's, libc's and the wake words' functions as numba code calls them:
``_native.ucp_worker_progress(worker)``, declared by symbol (``_ucp.natives``,
``_mpi.natives``, ``core.native._wake_words.natives``), resolved once ``_ucp.load``, ``_mpi.load``
or ``_wake_words.functions`` has registered them. A module, since numba resolves a module's
attributes where it cannot a namespace object's."""
from ..core.native._wake_words import natives as wake_natives
from ._mpi_api import natives as mpi_natives
from ._ucp import natives

globals().update(natives())
globals().update(mpi_natives())
globals().update(wake_natives())
