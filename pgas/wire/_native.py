"""UCX's, MPI's and libc's functions as numba code calls them: ``_native.ucp_worker_progress(worker)``,
declared by symbol (``_ucp.natives``, ``_mpi.natives``), resolved once ``_ucp.load`` or
``_mpi.load`` has registered them. A module, since numba resolves a module's attributes
where it cannot a namespace object's."""
from ._mpi_api import natives as mpi_natives
from ._ucp import natives

globals().update(natives())
globals().update(mpi_natives())
