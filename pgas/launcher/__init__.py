"""``pgasrun``: start the PEs through MPI's ``mpiexec`` (``_pgasrun``), guard each of them
(``_pe_guard``), and end the whole run cleanly when one fails."""
from ._pgasrun import main

__all__ = ["main"]
