"""The few functions of the MPI library that native code calls: starting and testing
persistent point-to-point requests (``_mpi``). They are the library mpi4py loaded (found
through mpi4py's own module, whose dependencies include it), so they work with any MPI
mpi4py was built for: handles are passed by address, as arrays sized by mpi4py's
``MPI._sizeof``."""
from __future__ import annotations

import ctypes

from ._ucp import libc, register_symbol

__all__ = ["load", "natives"]

_int, _P = ctypes.c_int, ctypes.c_int64
_DECLARATIONS = {                   # name: (result, arguments); pointers as int64
    "MPI_Startall": (_int, (_int, _P)),                 # (count, requests)
    "MPI_Testall": (_int, (_int, _P, _P, _P)),          # (count, requests, flag, statuses)
}
_loaded: list = []


def natives() -> dict:
    """name -> the numba declaration of ``pgas_<name>`` (module ``_native`` holds them)."""
    from numba import types
    return {name: types.ExternalFunction(f"pgas_{name}", types.int32(types.int32, *[types.int64] * (len(args) - 1)))
            for name, (_, args) in _DECLARATIONS.items()}


def load() -> None:
    """Register MPI's functions (and libc's) for native code, once."""
    if _loaded:
        return
    from mpi4py import MPI
    library = ctypes.CDLL(MPI.__file__)
    for name, (result, arguments) in _DECLARATIONS.items():
        function = getattr(library, name)
        function.restype, function.argtypes = result, list(arguments)
        register_symbol(name, ctypes.cast(function, ctypes.c_void_p).value)
        _loaded.append(function)
    libc()
