"""The CUDA driver as the cuda backend's host side uses it: checked calls, the PE's
device and its peers, and the streams that host operations are ordered on.

pgas works in numba's primary context of the PE's device, so the arrays, kernels and
streams of numba, and the driver calls made here, all share one context.
"""
from __future__ import annotations

from contextlib import contextmanager


from ..core._errors import PgasError, PgasValueError
from ..core._gpu_arrays import device_array_at

__all__ = ["checked", "select_device", "check_peer_access", "pci_bus_id", "create_stream", "stream_handle",
           "numba_stream", "synchronize", "stream_scratch", "device_array_at"]

_BUS_ID_BYTES = 64   # room for "dddddddd:bb:dd.f" and its terminating NUL


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


def select_device(local_rank: int, chosen: int | None = None) -> int:
    """Make ``chosen`` current, or where None the device of local rank ``local_rank`` (round
    robin over the visible devices, so CUDA_VISIBLE_DEVICES is honoured and several PEs may
    share one GPU)."""
    from numba import cuda

    count = len(cuda.gpus)
    if count == 0:
        raise PgasError("pgas.init: the cuda backend found no visible GPU (check CUDA_VISIBLE_DEVICES)")
    device = local_rank % count if chosen is None else chosen
    cuda.select_device(device)
    return device


def total_memory(device: int) -> int:
    """Bytes of memory of visible device ``device``."""
    from cuda.bindings import driver

    return int(checked(driver.cuDeviceTotalMem(checked(driver.cuDeviceGet(device), "cuDeviceGet")),
                       "cuDeviceTotalMem"))


def pci_bus_id(device: int) -> str:
    """The PCI bus id of visible device ``device``: it names a GPU the same way in every
    process, whatever each one's CUDA_VISIBLE_DEVICES."""
    from cuda.bindings import driver

    handle = checked(driver.cuDeviceGet(device), "cuDeviceGet")
    raw = checked(driver.cuDeviceGetPCIBusId(_BUS_ID_BYTES, handle), "cuDeviceGetPCIBusId")
    return raw.split(b"\0")[0].decode() if isinstance(raw, bytes) else str(raw)


def check_peer_access(device: int, me: str, peer_bus_id: str, peer: str) -> None:
    """PgasError unless ``device`` (this PE's, named ``me``) can load, store and do atomics
    in the memory of the GPU at ``peer_bus_id`` (PE ``peer``'s). A GPU always reaches
    itself; two GPUs need a peer path (cuDeviceCanAccessPeer) with native atomics, since
    device atomics on a peer's heap are not atomic without them."""
    from cuda.bindings import driver

    mine = pci_bus_id(device)
    if peer_bus_id == mine:
        return
    pair = f"{me} (GPU {mine}) and {peer} (GPU {peer_bus_id})"
    try:
        other = checked(driver.cuDeviceGetByPCIBusId(peer_bus_id.encode()), "cuDeviceGetByPCIBusId")
    except PgasError:
        raise PgasError(f"{pair} are on one node, but {peer}'s GPU is not visible in {me}'s process: give the PEs of a "
                        "node the same CUDA_VISIBLE_DEVICES, so that each can map the others' heaps") from None
    handle = checked(driver.cuDeviceGet(device), "cuDeviceGet")
    if not checked(driver.cuDeviceCanAccessPeer(handle, other), "cuDeviceCanAccessPeer"):
        raise PgasError(f"{pair} are on one node, but {me}'s GPU has no peer access to {peer}'s "
                        "(cuDeviceCanAccessPeer is 0: no NVLink or PCIe peer path): run these PEs on GPUs "
                        "with peer access (choose them with CUDA_VISIBLE_DEVICES), or on one GPU")
    attribute = driver.CUdevice_P2PAttribute.CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED
    if not checked(driver.cuDeviceGetP2PAttribute(attribute, handle, other), "cuDeviceGetP2PAttribute"):
        raise PgasError(f"{pair} are on one node, but the link from {me}'s GPU to {peer}'s has no native atomics "
                        "(CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED is 0), so device atomics and "
                        "signals on each other's heaps would not be atomic: run these PEs on GPUs joined "
                        "by NVLink (choose them with CUDA_VISIBLE_DEVICES), or on one GPU")


def create_stream() -> int:
    """A new non-blocking stream of the current context: it does not wait for the legacy
    default stream, nor does that stream wait for it (cuStreamDestroy releases it)."""
    from cuda.bindings import driver

    flags = driver.CUstream_flags.CU_STREAM_NON_BLOCKING
    return int(checked(driver.cuStreamCreate(flags), "cuStreamCreate (pgas's internal stream)"))


def stream_handle(stream, fn: str, internal: int) -> int:
    """The raw CUstream handle of ``stream``: None (pgas's ``internal`` stream), a numba
    stream, an object with ``__cuda_stream__`` (CUDA's stream protocol: cuda.core, CuPy,
    PyTorch), or a plain integer handle."""
    if stream is None:
        return internal
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


def synchronize(handle: int | None) -> None:
    """Wait until the work queued on stream ``handle`` has finished (None: all the work of
    the current context)."""
    from cuda.bindings import driver

    if handle is None:
        checked(driver.cuCtxSynchronize(), "cuCtxSynchronize")
    else:
        checked(driver.cuStreamSynchronize(handle), "cuStreamSynchronize")


@contextmanager
def stream_scratch(nbytes: int, handle: int, fn: str):
    """Device memory (its address) for work queued on stream ``handle``, allocated and freed
    in the stream's order (cuMemAllocAsync, cuMemFreeAsync): it lives until that work is
    done even when the host call returns first."""
    from cuda.bindings import driver

    address = int(checked(driver.cuMemAllocAsync(nbytes, handle), f"{fn}: cuMemAllocAsync"))
    try:
        yield address
    except BaseException:
        driver.cuMemFreeAsync(address, handle)   # unchecked: the error on its way says what failed
        raise
    checked(driver.cuMemFreeAsync(address, handle), f"{fn}: cuMemFreeAsync")
