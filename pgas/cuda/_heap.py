"""The symmetric heap of the cuda backend: GPU memory shared with the node's PEs by CUDA IPC.

Before anything else, ``init`` reserves the device state block's fixed address
(``_state_block``), so that the heap cannot land on it. Each PE allocates its heap with
``cuMemAlloc`` on its device, exports it with ``cuIpcGetMemHandle``, and opens every
other local PE's handle (``cuIpcOpenMemHandle``), so a peer's heap is a device pointer
in this process: kernels reach it with loads and stores (over NVLink/PCIe between GPUs,
or in the same GPU when PEs share one; PEs on different GPUs check first that the GPUs
have peer access with native atomics), and the copy engines reach it with
``cuMemcpyAsync``. The same memory is what a NIC path registers for RDMA (``dmabuf_fd``).

The interface is the simulator heap's (``_heap.py``): ``offset_of``, ``view_on``,
``array_at``, ``zero``, ``reachable``, ``publish_team``, ``close``; arrays are numba
device arrays instead of numpy arrays. The heap also holds the runtime's internal stream
(``stream``), a non-blocking one that host operations with ``stream=None`` use, so they
neither wait for nor hold up the work of the legacy default stream and user streams.
"""
from __future__ import annotations

import ctypes

import numpy as np

from ..core._device_errors import device_error
from ..core._errors import PgasError
from ..runtime._arrays import array_span, check_span
from ..runtime._bootstrap import Bootstrap
from ._driver import check_peer_access, checked, create_stream, device_array_at, pci_bus_id, select_device, synchronize
from ._state_block import DeviceState, reserve_state_address

__all__ = ["GpuSymmetricHeap"]

_IPC_HANDLE_BYTES = 64


def _handle_bytes(handle) -> bytes:
    return (ctypes.c_char * _IPC_HANDLE_BYTES).from_address(handle.getPtr()).raw


def _handle_from(data: bytes):
    from cuda.bindings import driver

    handle = driver.CUipcMemHandle()
    (ctypes.c_char * _IPC_HANDLE_BYTES).from_address(handle.getPtr()).raw = data
    return handle


class GpuSymmetricHeap:
    """This PE's heap in GPU memory and the IPC mappings of its node's heaps."""

    device_arrays = True    # its arrays are numba device arrays
    maps_external = False   # one cuMemAlloc block: no other memory can be mapped into it

    def __init__(self, boot: Bootstrap, size: int, timeout: float, device: int | None = None):
        from cuda.bindings import driver

        self.size, self.my_pe = size, boot.my_pe
        self._node_comm = boot.node_comm
        self.device = select_device(boot.local_pes.index(boot.my_pe), device)
        self.bases: list[int | None] = [None] * boot.n_pes
        self._opened: list[int] = []
        self.state = self.base = self.stream = None
        reserve_state_address(self.device)   # first: the heap must not take the state block's address
        try:
            self.stream = create_stream()
            self.base = int(checked(driver.cuMemAlloc(size), f"cuMemAlloc of the {size}-byte symmetric heap "
                                                             "(lower PGAS_SYMMETRIC_SIZE?)"))
            self.bases[self.my_pe] = self.base
            # Synchronous copies into the heap (numba's copy_to_device) then complete before they
            # return, as NVSHMEM makes them: host operations on the internal stream are not ordered
            # after the legacy default stream, so a pageable copy still in flight would be missed.
            checked(driver.cuPointerSetAttribute(1, driver.CUpointer_attribute.CU_POINTER_ATTRIBUTE_SYNC_MEMOPS,
                                                 self.base), "cuPointerSetAttribute (SYNC_MEMOPS on the heap)")
            self.zero(0, size)
            self._open_peers(boot)
            self.state = DeviceState(self.device, boot.my_pe, boot.n_pes, self.base, size, timeout, self.bases,
                                     self.stream)
        except Exception:
            self._release(wait_for_peers=False)
            raise

    def _open_peers(self, boot: Bootstrap) -> None:
        """Exchange IPC handles and GPUs over the node, check that this PE's GPU reaches each
        peer's, and open every peer's heap; all PEs of the node agree whether it worked, so a
        failure is an error on each of them (no hang)."""
        from cuda.bindings import driver

        mine = _handle_bytes(checked(driver.cuIpcGetMemHandle(self.base), "cuIpcGetMemHandle"))
        exchanged = boot.node_comm.allgather((mine, pci_bus_id(self.device)))
        problem = None
        try:
            for pe, (data, bus_id) in zip(boot.local_pes, exchanged):
                if pe != self.my_pe:
                    check_peer_access(self.device, f"PE {self.my_pe}", bus_id, f"PE {pe}")
                    flags = driver.CUipcMem_flags.CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS
                    peer = int(checked(driver.cuIpcOpenMemHandle(_handle_from(data), flags),
                                       f"cuIpcOpenMemHandle of PE {pe}'s heap"))
                    self._opened.append(peer)
                    self.bases[pe] = peer
        except PgasError as exc:
            problem = str(exc)
        problems = boot.node_comm.allgather(problem)
        if any(problems):
            text = "; ".join(f"PE {pe}: {p}" for pe, p in zip(boot.local_pes, problems) if p)
            raise PgasError(f"pgas.init: the PEs of this node could not map each other's heaps: {text}")

    # Addresses ------------------------------------------------------------------------

    def offset_of(self, arr, fn: str, what: str) -> int:
        """Heap offset of device array ``arr``; PgasValueError naming ``fn`` and ``what`` if
        it is not all in this PE's heap."""
        return check_span(array_span(arr, fn, what), self.base, self.size, fn, what)

    def view_on(self, pe: int, arr, fn: str, what: str):
        """The same elements as ``arr`` (in this PE's heap) in PE ``pe``'s mapped heap."""
        span = array_span(arr, fn, what)
        offset = check_span(span, self.base, self.size, fn, what)
        if self.bases[pe] is None:
            raise PgasError(f"{fn}: PE {pe} is on another node: its heap is not mapped here (only the NIC reaches "
                            "it: put/get, docs/transports.md)")
        _, shape, strides, _ = span
        return device_array_at(self.bases[pe] + offset, shape, arr.dtype, strides, owner=self)

    def array_at(self, offset: int, shape: tuple, dtype, order: str = "C"):
        """A device array of this PE's heap starting at ``offset``, its elements in memory
        order ``order`` ("C" or "F": Fortran strides, first index fastest)."""
        strides = None
        if order == "F":
            step, strides = np.dtype(dtype).itemsize, []
            for extent in shape:
                strides.append(step)
                step *= max(extent, 1)
            strides = tuple(strides)
        return device_array_at(self.base + offset, shape, dtype, strides, owner=self)

    def zero(self, offset: int, nbytes: int) -> None:
        """Zero bytes of this PE's heap, complete on return (a memset is asynchronous to
        the host, and peers may write there as soon as this PE reaches its next barrier)."""
        from cuda.bindings import driver

        checked(driver.cuMemsetD8Async(self.base + offset, 0, nbytes, self.stream), "cuMemsetD8Async")
        synchronize(self.stream)

    def multicast(self, pes, arr, fn: str):
        """Refused: pgas sets up no multicast objects (NVLink SHARP) on GPUs."""
        raise device_error("NO_MULTICAST", fn)

    def reachable(self, pe: int) -> bool:
        return self.bases[pe] is not None

    def publish_team(self, slot: int, team) -> None:
        """Tell the device about team slot ``slot`` (a Team, or None when freed)."""
        if team is None:
            self.state.set_team(slot, None, 0)
        else:
            self.state.set_team(slot, team.pes, team.my_index)

    def dmabuf_fd(self) -> int:
        """A dma-buf file descriptor of this PE's heap, for registering it with a NIC
        (``ibv_reg_dmabuf_mr``); the caller closes it."""
        from cuda.bindings import driver

        kind = driver.CUmemRangeHandleType.CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD
        return int(checked(driver.cuMemGetHandleForAddressRange(self.base, self.size, kind, 0),
                           "cuMemGetHandleForAddressRange"))

    def attach_nic(self, nic, region, n_pes: int, native=None):
        """The GPU-initiated path to the PEs ``nic`` reaches (``region``: this heap,
        registered with it): queue pairs the GPU posts into, and the window through which
        the NIC (``native``: the native NIC, else the NIC's thread) reaches this heap's
        memory (``_nic_host.GpuNicPath``; the caller closes it)."""
        from ._nic_host import GpuNicPath
        return GpuNicPath(nic, region, self, n_pes, native)

    def device_error(self):
        """The error a device check of this PE recorded in its mailbox (then trapped), or None."""
        return self.state.device_error() if self.state is not None else None

    def close(self) -> None:
        """Wait for this PE's GPU work, unmap the peers' heaps, then (once every PE of the
        node has unmapped) free this PE's heap, the state block and the internal stream."""
        from numba import cuda

        cuda.synchronize()
        self._node_comm.Barrier()   # no peer kernel still reads our heap
        self._release(wait_for_peers=True)

    def _release(self, wait_for_peers: bool) -> None:
        from cuda.bindings import driver

        for peer in self._opened:
            driver.cuIpcCloseMemHandle(peer)
        self._opened.clear()
        if wait_for_peers:
            self._node_comm.Barrier()   # every importer has closed its mapping of our heap
        if self.state is not None:
            self.state.close()
        if self.base is not None:
            driver.cuMemFree(self.base)
            self.base = None
        if self.stream is not None:
            driver.cuStreamDestroy(self.stream)
            self.stream = None
        self.bases = [None] * len(self.bases)
