"""Host collectives over a team (re-exported as ``pgas.*``): broadcast, fcollect, alltoall,
reduce and reducescatter (``_collectives``), the scans (``_scans``) and the collectives
OpenSHMEM and nvshmem4py name differently (``_named_collectives``); how one call runs
(``_collective_call``), the algorithms' pieces (eager rounds and their compiled fold, NCCL's
double binary tree), and across nodes by MPI (``_mpi_collectives``, ``_mpi_exchange``)."""
from ._collectives import *  # noqa: F401,F403
from ._collectives import __all__ as _collectives_all
from ._scans import *  # noqa: F401,F403
from ._scans import __all__ as _scans_all
from ._named_collectives import *  # noqa: F401,F403
from ._named_collectives import __all__ as _named_collectives_all

__all__ = _collectives_all + _scans_all + _named_collectives_all
