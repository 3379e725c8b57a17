"""How the device API's functions and helpers are compiled on the GPU."""
from __future__ import annotations

from numba import cuda

__all__ = ["jit", "jit_array", "device_function"]


def jit(function):
    """How a shared device helper is compiled on the GPU: a device function of its own that
    NVVM inlines (``forceinline``). numba types and lowers it once per signature; with
    ``inline="always"`` it would copy the helper's IR into every call site instead, which
    made a kernel calling a block collective take seconds to compile."""
    return cuda.jit(device=True, forceinline=True)(function)


def jit_array(function):
    """A helper that returns an array (numba only returns arrays from device functions it
    inlines at the IR level: ``inline="always"``). Keep these small."""
    return cuda.jit(device=True, inline="always")(function)


def device_function(function):
    """A public device function: compiled as a helper (``jit``), or as ``jit_array`` where
    it returns an array (marked ``function.returns_array = True``)."""
    return jit_array(function) if getattr(function, "returns_array", False) else jit(function)
