"""Helpers for PE-side checks."""
import numpy as np
from mpi4py import MPI

import pgas

DTYPES = [np.int8, np.int32, np.int64, np.uint64, np.float32, np.float64, np.complex128]
SIZES = [1, 7, 1001, 300_000]   # one, odd, and more than 1 MiB for 4- and 8-byte types
# (comparison, target, a value for which it holds, one for which it does not)
CMPS = [(pgas.CMP_EQ, 5, 5, 4), (pgas.CMP_NE, 5, 4, 5), (pgas.CMP_GT, 5, 6, 5),
        (pgas.CMP_GE, 5, 5, 4), (pgas.CMP_LT, 5, 4, 5), (pgas.CMP_LE, 5, 5, 6)]


def on_simulator() -> bool:
    return pgas.backend() == "simulator"


def simulator_only(reason: str):
    """Mark a check that tests what only the simulator backend has (the runner skips it on
    cuda and says why): device-side argument checks, PGAS_DEBUG's kernel checks, device
    waits that time out (on a GPU they stop the kernel with a trap, which ends the context)."""
    def mark(check):
        check.simulator_only = reason
        return check
    return mark


def world():
    return MPI.COMM_WORLD


def pattern(pe: int, n: int, dtype) -> np.ndarray:
    """Values that differ per PE and per element, exactly representable in ``dtype``."""
    values = (np.arange(n) * 7 + pe * 13 + 1) % 101
    return values.astype(dtype)


def ring_neighbours():
    me, n = pgas.my_pe(), pgas.n_pes()
    return me, n, (me + 1) % n, (me - 1) % n


def heap_offset(a) -> int:
    from pgas.runtime._arrays import as_ndarray
    from pgas.runtime._state import runtime
    return runtime("test").heap.offset_of(as_ndarray(a, "test", "a"), "test", "a")


def node_pes() -> list[int]:
    """The PEs on this PE's node (emulated nodes included), this one among them."""
    node_of = pgas.info()["node_of_pe"]
    return [pe for pe in range(pgas.n_pes()) if node_of[pe] == node_of[pgas.my_pe()]]


def reaches_other_nodes() -> bool:
    """True when some PE is on another node (emulated nodes included)."""
    return len(node_pes()) < pgas.n_pes()
