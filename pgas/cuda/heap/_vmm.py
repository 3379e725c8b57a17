"""GPU memory that the node's processes map: CUDA VMM allocations shared by file descriptor.

Physical memory from ``cuMemCreate``, whose handle exports as a POSIX file descriptor
(``cuMemExportToShareableHandle``); a process that receives the descriptor
(``_fd_exchange``) imports it (``cuMemImportFromShareableHandle``) and maps it into address
space it reserved (``cuMemMap``, then ``cuMemSetAccess`` for its device). Unlike one
``cuMemAlloc`` block opened by CUDA IPC, a reserved range can hold several allocations
side by side: the heap's own and, later, memory a user registers at a chosen offset
(``register_symmetric``).

VMM memory has no per-pointer ``CU_POINTER_ATTRIBUTE_SYNC_MEMOPS`` (the driver answers
NOT_SUPPORTED): ``sync_memops`` sets the context's flag instead, so that synchronous copies
into the heap have landed when they return, as with the attribute before.
"""
from __future__ import annotations

import os

from ...core._errors import PgasError
from .._driver import checked

__all__ = ["shareable_prop", "granularity", "round_up", "reserve", "create", "map_readwrite", "unmap", "release",
           "export_fd", "import_fd", "sync_memops", "restore_flags", "free_reservation"]


def shareable_prop(device: int):
    """The properties of pinned memory on ``device`` whose handle exports as a file descriptor."""
    from cuda.bindings import driver

    prop = driver.CUmemAllocationProp()
    prop.type = driver.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    prop.location.type = driver.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    prop.location.id = device
    prop.requestedHandleTypes = driver.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
    return prop


def granularity(prop) -> int:
    """The granularity of allocations and mappings of memory with ``prop``."""
    from cuda.bindings import driver

    minimum = driver.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM
    return int(checked(driver.cuMemGetAllocationGranularity(prop, minimum), "cuMemGetAllocationGranularity"))


def round_up(nbytes: int, grain: int) -> int:
    return -(-nbytes // grain) * grain


def reserve(nbytes: int, alignment: int) -> int:
    """The address of ``nbytes`` of reserved address space (nothing mapped yet)."""
    from cuda.bindings import driver

    return int(checked(driver.cuMemAddressReserve(nbytes, alignment, 0, 0), f"cuMemAddressReserve of {nbytes} bytes"))


def free_reservation(address: int, nbytes: int) -> None:
    from cuda.bindings import driver

    driver.cuMemAddressFree(address, nbytes)


def create(nbytes: int, prop, what: str):
    """A handle of ``nbytes`` of new physical memory with ``prop``."""
    from cuda.bindings import driver

    return checked(driver.cuMemCreate(nbytes, prop, 0), f"cuMemCreate of {what}")


def map_readwrite(address: int, nbytes: int, handle, device: int, what: str) -> None:
    """Map ``handle``'s memory at ``address`` (reserved) and let ``device`` read and write it."""
    from cuda.bindings import driver

    checked(driver.cuMemMap(address, nbytes, 0, handle, 0), f"cuMemMap of {what}")
    access = driver.CUmemAccessDesc()
    access.location.type = driver.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    access.location.id = device
    access.flags = driver.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
    try:
        checked(driver.cuMemSetAccess(address, nbytes, [access], 1), f"cuMemSetAccess of {what}")
    except PgasError:
        driver.cuMemUnmap(address, nbytes)
        raise


def unmap(address: int, nbytes: int) -> None:
    from cuda.bindings import driver

    driver.cuMemUnmap(address, nbytes)


def release(handle) -> None:
    """Drop this process's reference to an allocation (its memory lives while it is mapped)."""
    from cuda.bindings import driver

    driver.cuMemRelease(handle)


def export_fd(handle, what: str) -> int:
    """A file descriptor of ``handle``'s memory, for another process of the node (the caller closes it)."""
    from cuda.bindings import driver

    kind = driver.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
    return int(checked(driver.cuMemExportToShareableHandle(handle, kind, 0), f"cuMemExportToShareableHandle of {what}"))


def import_fd(fd: int, what: str):
    """The handle of the memory another process exported as ``fd`` (``fd`` is closed here)."""
    from cuda.bindings import driver

    kind = driver.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
    try:
        return checked(driver.cuMemImportFromShareableHandle(fd, kind), f"cuMemImportFromShareableHandle of {what}")
    finally:
        os.close(fd)


def sync_memops() -> int | None:
    """Make synchronous memory operations of the current context complete before they
    return (``CU_CTX_SYNC_MEMOPS``, added to the context's flags). The flags it had, for
    ``restore_flags``, or None when they had it already."""
    from cuda.bindings import driver

    flags = int(checked(driver.cuCtxGetFlags(), "cuCtxGetFlags"))
    wanted = flags | int(driver.CUctx_flags.CU_CTX_SYNC_MEMOPS)
    if wanted == flags:
        return None
    checked(driver.cuCtxSetFlags(wanted), "cuCtxSetFlags (CU_CTX_SYNC_MEMOPS)")
    return flags


def restore_flags(flags: int | None) -> None:
    """Give the current context back the flags ``sync_memops`` found (None: nothing to do)."""
    from cuda.bindings import driver

    if flags is not None:
        driver.cuCtxSetFlags(flags)
