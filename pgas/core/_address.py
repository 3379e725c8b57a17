"""The address of a numpy array's data, found quickly (the small host and device calls to
other nodes need it once or twice per call)."""
from __future__ import annotations

import ctypes

import numpy as np

__all__ = ["address_of"]


def address_of(arr: np.ndarray) -> int:
    """The address of ``arr``'s element 0: for a writable C-contiguous array through ctypes
    (0.33 µs, against 1.1 µs for ``__array_interface__``, which builds a dict)."""
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(arr))
    except (TypeError, ValueError, BufferError):    # strided, read-only or empty
        return arr.__array_interface__["data"][0]
