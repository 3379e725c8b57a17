"""The CUDA driver as the cuda backend's host side uses it: checked calls, the PE's
device, and the streams that host operations are ordered on.

pgas works in numba's primary context of the PE's device, so the arrays, kernels and
streams of numba, and the driver calls made here, all share one context.
"""
from __future__ import annotations

from .._errors import PgasError, PgasValueError

__all__ = ["checked", "select_device", "stream_handle", "numba_stream", "synchronize"]


def checked(result, what: str):
    """The values a cuda-python driver call returned, or a PgasError naming ``what``."""
    from cuda.bindings import driver

    err, *values = result
    if err != driver.CUresult.CUDA_SUCCESS:
        _, text = driver.cuGetErrorString(err)
        detail = text.decode() if isinstance(text, bytes) else str(text)
        raise PgasError(f"{what} failed: {getattr(err, 'name', err)} ({detail})")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def select_device(local_rank: int) -> int:
    """Make the device of local rank ``local_rank`` current (round robin over the visible
    devices, so CUDA_VISIBLE_DEVICES is honoured and several PEs may share one GPU)."""
    from numba import cuda

    count = len(cuda.gpus)
    if count == 0:
        raise PgasError("pgas.init: the cuda backend found no visible GPU (check CUDA_VISIBLE_DEVICES)")
    device = local_rank % count
    cuda.select_device(device)
    return device


def stream_handle(stream, fn: str) -> int:
    """The raw CUstream handle of ``stream``: None (the default stream), a numba stream,
    an object with ``__cuda_stream__`` (CUDA's stream protocol: cuda.core, CuPy,
    PyTorch), or a plain integer handle."""
    if stream is None:
        return 0
    protocol = getattr(stream, "__cuda_stream__", None)
    if protocol is not None:
        _version, handle = protocol() if callable(protocol) else protocol
        return int(handle)
    for attribute in ("cuda_stream", "ptr"):          # PyTorch, CuPy before the protocol
        if isinstance(getattr(stream, attribute, None), int):
            return getattr(stream, attribute)
    if isinstance(stream, int) and not isinstance(stream, bool):
        return stream
    raise PgasValueError(f"{fn}: stream must be None, a numba stream, an object with __cuda_stream__ "
                         f"or an integer CUstream handle, got {type(stream).__name__}")


def numba_stream(handle: int):
    """A numba stream object for raw handle ``handle`` (to launch kernels on it)."""
    from numba import cuda

    return cuda.default_stream() if handle == 0 else cuda.external_stream(handle)


def synchronize(handle: int) -> None:
    """Wait until the work queued on stream ``handle`` has finished."""
    from cuda.bindings import driver

    checked(driver.cuStreamSynchronize(handle), "cuStreamSynchronize")
