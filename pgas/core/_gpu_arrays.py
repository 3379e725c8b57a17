"""Numba device arrays over GPU memory pgas did not allocate through numba (the heap, a
peer's heap, a tensor that only DLPack describes)."""
from __future__ import annotations

import numpy as np

__all__ = ["device_array_at"]


def device_array_at(address: int, shape, dtype, strides=None, owner=None):
    """A numba device array over GPU memory at ``address`` (no copy; freeing it stays the
    caller's business, ``owner`` is kept alive with it). bfloat16 (a numpy "V2" dtype, which
    the array interface cannot name) is made as uint16 and viewed as bfloat16."""
    from numba import cuda

    dtype = np.dtype(dtype)
    named = np.dtype(f"u{dtype.itemsize}") if dtype.kind == "V" else dtype
    desc = {"shape": tuple(shape), "strides": strides, "typestr": named.str, "data": (address, False), "version": 3}
    array = cuda.from_cuda_array_interface(desc, owner=owner, sync=False)
    return array if named == dtype else array.view(dtype)
