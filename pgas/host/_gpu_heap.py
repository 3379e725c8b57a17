"""The symmetric heap of the cuda backend: GPU memory shared with the node's PEs by CUDA IPC.

Each PE allocates its heap with ``cuMemAlloc`` on its device, exports it with
``cuIpcGetMemHandle``, and opens every other local PE's handle
(``cuIpcOpenMemHandle``), so a peer's heap is a device pointer in this process: kernels
reach it with loads and stores (over NVLink/PCIe between GPUs, or in the same GPU when
PEs share one), and the copy engines reach it with ``cuMemcpyAsync``. The same memory
is what a NIC path registers for RDMA (``dmabuf_fd``).

The interface is the simulator heap's (``_heap.py``): ``offset_of``, ``view_on``,
``array_at``, ``zero``, ``reachable``, ``publish_team``, ``close``; arrays are numba
device arrays instead of numpy arrays.
"""
from __future__ import annotations

import ctypes

import numpy as np

from .._errors import PgasError
from ._bootstrap import Bootstrap
from ._gpu_driver import checked, select_device, synchronize
from ._gpu_state import DeviceState
from ._heap import array_span, check_span

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

    def __init__(self, boot: Bootstrap, size: int, timeout: float):
        from cuda.bindings import driver

        self.size, self.my_pe = size, boot.my_pe
        self._node_comm = boot.node_comm
        self.device = select_device(boot.local_pes.index(boot.my_pe))
        self.bases: list[int | None] = [None] * boot.n_pes
        self._opened: list[int] = []
        self.state = None
        self.base = int(checked(driver.cuMemAlloc(size), f"cuMemAlloc of the {size}-byte symmetric heap "
                                                         "(lower PGAS_SYMMETRIC_SIZE?)"))
        self.bases[self.my_pe] = self.base
        try:
            self.zero(0, size)
            self._open_peers(boot)
            self.state = DeviceState(self.device, boot.my_pe, boot.n_pes, self.base, size, timeout, self.bases)
        except Exception:
            self._release(wait_for_peers=False)
            raise

    def _open_peers(self, boot: Bootstrap) -> None:
        """Exchange IPC handles over the node and open every peer's; all PEs of the node
        agree whether it worked, so a failure is an error on each of them (no hang)."""
        from cuda.bindings import driver

        mine = _handle_bytes(checked(driver.cuIpcGetMemHandle(self.base), "cuIpcGetMemHandle"))
        handles = boot.node_comm.allgather(mine)
        problem = None
        try:
            for pe, data in zip(boot.local_pes, handles):
                if pe != self.my_pe:
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
            raise PgasError(
                f"{fn}: PE {pe} is on another node: it has no load/store path from this PE, and "
                "remote transports are not available in this version of pgas")
        _, shape, strides, _ = span
        return _device_array(self.bases[pe] + offset, shape, strides, arr.dtype, self)

    def array_at(self, offset: int, shape: tuple, dtype):
        """A C-ordered device array of this PE's heap starting at ``offset``."""
        return _device_array(self.base + offset, shape, None, dtype, self)

    def zero(self, offset: int, nbytes: int) -> None:
        """Zero bytes of this PE's heap, complete on return (a memset is asynchronous to
        the host, and peers may write there as soon as this PE reaches its next barrier)."""
        from cuda.bindings import driver

        checked(driver.cuMemsetD8(self.base + offset, 0, nbytes), "cuMemsetD8")
        synchronize(0)

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

    def close(self) -> None:
        """Wait for this PE's GPU work, unmap the peers' heaps, then (once every PE of the
        node has unmapped) free this PE's heap and the state block."""
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
        self.bases = [None] * len(self.bases)


def _device_array(address: int, shape, strides, dtype, owner):
    from numba import cuda

    desc = {"shape": tuple(shape), "strides": strides, "typestr": np.dtype(dtype).str,
            "data": (address, False), "version": 3}
    return cuda.from_cuda_array_interface(desc, owner=owner, sync=False)
