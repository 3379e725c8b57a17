"""What pgas knows of any array it is given: the array behind a wrapper, and the bytes it spans
(to place it in a symmetric heap, or to tell whether two arrays overlap)."""
from __future__ import annotations

import numpy as np

from ..core._address import address_of
from ..core._backend import backend_name
from ..core._errors import PgasValueError

__all__ = ["as_ndarray", "array_span", "c_strides", "check_span", "overlap"]


def as_ndarray(arr, fn: str, what: str):
    """The array behind ``arr``: a numpy array (on the simulator also behind its device
    arrays), or on the cuda backend a numba device array (wrapping, zero-copy, any object
    with ``__cuda_array_interface__`` such as a CuPy array or a PyTorch tensor)."""
    if backend_name() == "cuda":
        on_gpu = _gpu_array(arr, fn, what)
        if on_gpu is not None:
            return on_gpu
    while not isinstance(arr, np.ndarray):
        inner = arr.__dict__.get("_item", arr.__dict__.get("_ary")) if hasattr(arr, "__dict__") else None
        if inner is None:
            if hasattr(arr, "__array_interface__"):
                return np.asarray(arr)
            raise PgasValueError(f"{fn}: {what} must be an array, got {type(arr).__name__}")
        arr = inner
    return arr


def _gpu_array(arr, fn: str, what: str):
    """``arr`` as a numba device array when it is GPU memory (its ``__cuda_array_interface__``,
    read once: a CuPy array or PyTorch tensor builds it at each read), else None."""
    try:
        interface = getattr(arr, "__cuda_array_interface__", None)
    except TypeError:       # PyTorch's bfloat16 tensors: no typestr for it (DLPack has one)
        return _from_dlpack(arr, fn, what) if hasattr(arr, "__dlpack__") else None
    if interface is None:
        return None
    from numba import cuda
    from numba.cuda.cudadrv.devicearray import DeviceNDArrayBase
    return arr if isinstance(arr, DeviceNDArrayBase) else cuda.from_cuda_array_interface(interface, owner=arr)


def _from_dlpack(arr, fn: str, what: str):
    """A numba device array over a GPU tensor that only DLPack describes (bfloat16)."""
    from cuda.core.utils import StridedMemoryView

    from ..core._gpu_arrays import device_array_at
    from ..core._reductions import BFLOAT16
    view = StridedMemoryView.from_dlpack(arr, stream_ptr=-1)
    dtype = np.dtype(view.dtype)
    if dtype != BFLOAT16:
        raise PgasValueError(f"{fn}: {what} is a GPU tensor of dtype {dtype} without __cuda_array_interface__; "
                             "pgas takes those of bfloat16 only (through DLPack)")
    strides = None if view.strides is None else tuple(k * dtype.itemsize for k in view.strides)
    return device_array_at(view.ptr, view.shape, dtype, strides, owner=arr)


def _byte_bounds(address: int, shape: tuple, strides: tuple, itemsize: int) -> tuple[int, int]:
    """First and one-past-last byte address that an array at ``address`` touches."""
    low = high = address
    if 0 in shape:
        return low, low
    for extent, stride in zip(shape, strides):
        if stride < 0:
            low += (extent - 1) * stride
        else:
            high += (extent - 1) * stride
    return low, high + itemsize


def array_span(arr, fn: str, what: str) -> tuple[int, tuple, tuple, int]:
    """(address, shape, strides, itemsize) of a numpy array or of any array with
    ``__cuda_array_interface__``."""
    if isinstance(arr, np.ndarray):
        return address_of(arr), arr.shape, arr.strides, arr.itemsize
    desc = getattr(arr, "__cuda_array_interface__", None)
    if desc is None:
        raise PgasValueError(f"{fn}: {what} must be an array (a symmetric array from pgas.empty/zeros/full "
                             f"or a slice of one), got {type(arr).__name__}")
    itemsize = np.dtype(desc["typestr"]).itemsize
    shape = tuple(desc["shape"])
    strides = desc.get("strides") or c_strides(shape, itemsize)
    return desc["data"][0], shape, tuple(strides), itemsize


def c_strides(shape: tuple, itemsize: int) -> tuple:
    """The strides of a C-contiguous array of ``shape`` and ``itemsize``."""
    strides, step = [], itemsize
    for extent in reversed(shape):
        strides.append(step)
        step *= max(extent, 1)
    return tuple(reversed(strides))


def overlap(a, b, fn: str) -> bool:
    """True when arrays ``a`` and ``b`` (numpy or device) share bytes (by their extents)."""
    a_low, a_high = _byte_bounds(*array_span(a, fn, "dest"))
    b_low, b_high = _byte_bounds(*array_span(b, fn, "src"))
    return a_low < b_high and b_low < a_high


def check_span(span: tuple, base: int, size: int, fn: str, what: str) -> int:
    """Heap offset of the array ``span`` = (address, shape, strides, itemsize) describes;
    PgasValueError naming ``fn`` and ``what`` unless all its bytes are in [base, base+size)."""
    low, high = _byte_bounds(*span)
    if not (base <= low and high <= base + size):
        raise PgasValueError(
            f"{fn}: {what} is not symmetric memory: its bytes [{low:#x}, {high:#x}) are not inside "
            f"this PE's symmetric heap [{base:#x}, {base + size:#x}); "
            "allocate it with pgas.empty/zeros/full")
    return span[0] - base
