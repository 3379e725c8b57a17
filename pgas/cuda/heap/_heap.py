"""The symmetric heap of the cuda backend: GPU memory shared with the node's PEs by CUDA VMM.

Before anything else, ``init`` reserves the device state block's fixed address
(``_state_block``), so that the heap cannot land on it. Then one range of address space is
reserved for the node's heaps, a span per PE; each PE creates its heap's memory with
``cuMemCreate`` on its device, maps it at the start of its own span, exports it as a file
descriptor and passes it to the node's other PEs (``_vmm``, ``_fd_exchange``), and maps
theirs into their spans. So a peer's heap is a device pointer in this process: kernels
reach it with loads and stores (over NVLink/PCIe between GPUs, or in the same GPU when PEs
share one; PEs on different GPUs check first that the GPUs have peer access with native
atomics), and the copy engines reach it with ``cuMemcpyAsync``. The same memory is what a
NIC path registers for RDMA (``dmabuf_fd``).

A span is twice the heap: its second half is room for memory the user registers
(``register_symmetric``: another VMM allocation, mapped there in every PE of the node), so
symmetric offsets run over the whole span (``size``); pgas's own allocations stay in the
first half (``capacity``).

The interface is the simulator heap's (``_heap.py``): ``offset_of``, ``view_on``,
``array_at``, ``zero``, ``reachable``, ``publish_team``, the external memory calls,
``close``; arrays are numba device arrays instead of numpy arrays. The heap also holds the
runtime's internal stream (``stream``), a non-blocking one that host operations with
``stream=None`` use, so they neither wait for nor hold up the work of the legacy default
stream and user streams.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from ...core._device_errors import device_error
from ...core._env import shown
from ...core._errors import PgasConfigError, PgasError, PgasValueError
from ...runtime._allocator import HeapAllocator
from ...runtime._arrays import array_span, check_span
from ...runtime._bootstrap import Bootstrap
from . import _vmm as vmm
from .._driver import (check_peer_access, checked, create_stream, device_array_at, pci_bus_id, select_device,
                      synchronize, total_memory)
from ._fd_exchange import allgather_fds
from ._state_block import DeviceState, reserve_state_address

__all__ = ["GpuSymmetricHeap"]


@dataclass
class ExternalMemory:
    """A user's VMM allocation being registered: its handle (retained here), a file
    descriptor of it for the node's other PEs, and how many bytes of it are mapped."""
    handle: object
    fd: int
    mapped: int


class GpuSymmetricHeap:
    """This PE's heap in GPU memory and the mappings of its node's heaps."""

    device_arrays = True    # its arrays are numba device arrays

    def __init__(self, boot: Bootstrap, size: int, timeout: float, device: int | None = None):
        self.my_pe = boot.my_pe
        self._node_comm, self._local_pes, self._timeout = boot.node_comm, boot.local_pes, timeout
        self.device = select_device(boot.local_pes.index(boot.my_pe), device)
        self.bases: list[int | None] = [None] * boot.n_pes
        self._mappings: dict[int, int] = {}      # address -> bytes of every mapping made here
        self._range = self._handle = self._context_flags = None
        self.state = self.base = self.stream = None
        reserve_state_address(self.device)   # first: the heap must not take the state block's address
        try:
            self.stream = create_stream()
            # synchronous copies into the heap (numba's copy_to_device) complete before they return, as
            # NVSHMEM makes them: host operations on the internal stream are not ordered after the legacy
            # default stream, so a pageable copy still in flight would be missed
            self._context_flags = vmm.sync_memops()     # given back at close
            self._prop = vmm.shareable_prop(self.device)
            # the node's coarsest granularity (GPUs of different kinds may differ; powers of two): every
            # span the same size, and a peer's memory mapped at offsets its GPU allows
            self.granularity = max(boot.node_comm.allgather(vmm.granularity(self._prop)))
            self.capacity = vmm.round_up(size, self.granularity)
            buses = boot.node_comm.allgather(pci_bus_id(self.device))     # each local PE's GPU, by PCI bus id
            self._check_room(buses)
            self.size = 2 * self.capacity
            self._range = (vmm.reserve(len(boot.local_pes) * self.size, self.granularity),
                           len(boot.local_pes) * self.size)
            for k, pe in enumerate(boot.local_pes):
                self.bases[pe] = self._range[0] + k * self.size
            self.base = self.bases[self.my_pe]
            self._handle = vmm.create(self.capacity, self._prop, f"the {self.capacity}-byte symmetric heap (lower "
                                                                 "PGAS_SYMMETRIC_SIZE?)")
            self._map(self.base, self.capacity, self._handle, "the symmetric heap")
            self.zero(0, self.capacity)
            self._external_room = HeapAllocator(self.capacity)
            self._check_peers(boot, buses)
            failure = self._map_node(0, self.capacity, self._handle, "symmetric heap")
            self._agree(failure, "pgas.init: the PEs of this node could not map each other's heaps")
            self.state = DeviceState(self.device, boot.my_pe, boot.n_pes, self.base, self.size, timeout, self.bases,
                                     self.stream)
        except Exception:
            self._release(wait_for_peers=False)
            raise

    def _check_room(self, buses: list[str]) -> None:
        """The heaps of the node's PEs on this PE's GPU (``buses``: each local PE's) must
        fit in its memory: said as a setting's error, where cuMemCreate would fail with out
        of memory (every PE of the node makes the same check on the same figures)."""
        sharing = buses.count(buses[self._local_pes.index(self.my_pe)])
        memory = total_memory(self.device)
        if self.capacity * sharing > memory:
            raise PgasConfigError(
                f"{shown('PGAS_SYMMETRIC_SIZE')}: the symmetric heaps of the {sharing} PEs on GPU {self.device} "
                f"need {self.capacity * sharing} bytes of its memory, which has {memory}; use a smaller "
                "PGAS_SYMMETRIC_SIZE (or fewer PEs per GPU)")

    def _map(self, address: int, nbytes: int, handle, what: str) -> None:
        vmm.map_readwrite(address, nbytes, handle, self.device, what)
        self._mappings[address] = nbytes

    def _check_peers(self, boot: Bootstrap, buses: list[str]) -> None:
        """Check that this PE's GPU reaches each local peer's (``buses``: theirs); all PEs
        of the node agree whether they do, so a failure is an error on each of them (no hang)."""
        problem = None
        try:
            for pe, bus_id in zip(boot.local_pes, buses):
                if pe != self.my_pe:
                    check_peer_access(self.device, f"PE {self.my_pe}", bus_id, f"PE {pe}")
        except PgasError as exc:
            problem = str(exc)
        self._agree(problem, "pgas.init: the PEs of this node could not map each other's heaps")

    def _agree(self, problem: str | None, summary: str) -> None:
        """Collective over the node: PgasError on every PE when any PE has a ``problem``."""
        problems = self._node_comm.allgather(problem)
        if any(problems):
            text = "; ".join(f"PE {pe}: {p}" for pe, p in zip(self._local_pes, problems) if p)
            raise PgasError(f"{summary}: {text}")

    def _map_node(self, offset: int, nbytes: int, handle, what: str) -> str | None:
        """Collective over the node: each PE gives ``handle`` (mapped at ``offset`` of its own
        span); this PE maps every other PE's at ``offset`` of that PE's span. What failed
        here, or None."""
        mine, problem = None, None
        try:
            mine = vmm.export_fd(handle, what)
        except PgasError as exc:
            problem = str(exc)      # (the exchange still takes place: every PE then fails it)
        try:
            fds = list(zip(self._local_pes, allgather_fds(self._node_comm, mine, self._timeout,
                                                          f"sharing the {what}")))
        except PgasError as exc:
            return problem or str(exc)
        finally:
            if mine is not None:
                os.close(mine)
        try:
            while fds:
                pe, fd = fds.pop()
                if pe == self.my_pe:
                    os.close(fd)
                    continue
                theirs = vmm.import_fd(fd, f"PE {pe}'s {what}")     # (closes fd)
                try:
                    self._map(self.bases[pe] + offset, nbytes, theirs, f"PE {pe}'s {what}")
                finally:
                    vmm.release(theirs)     # the mapping holds the memory
            return None
        except (PgasError, OSError) as exc:
            return str(exc)
        finally:
            for _, fd in fds:
                os.close(fd)

    # Memory the user registers (register_symmetric) -------------------------------------

    def external_memory(self, address: int, nbytes: int, fn: str) -> ExternalMemory:
        """What of the user's memory at [address, address + nbytes) is mapped into the
        node's spans: it must be the start of a VMM allocation (``cuMemCreate``) whose
        handle exports as a file descriptor, as NVSHMEM's registration needs;
        PgasValueError saying what it is not. The caller hands it to ``map_external``,
        then ``forget_external``."""
        from cuda.bindings import driver

        what = f"{fn}: a must be GPU memory from cuMemCreate (CUDA VMM) with POSIX file descriptor handles"
        err, handle = driver.cuMemRetainAllocationHandle(address)
        if err != driver.CUresult.CUDA_SUCCESS:
            raise PgasValueError(f"{what}; cuMemRetainAllocationHandle of address {address:#x} failed "
                                 f"({getattr(err, 'name', err)}): it is not VMM memory (cudaMalloc, CuPy's and "
                                 "PyTorch's default allocators use cuMemAlloc)")
        try:
            err, start, length = driver.cuMemGetAddressRange(address)
            if err != driver.CUresult.CUDA_SUCCESS or int(start) != address:
                raise PgasValueError(f"{what}, starting at its allocation's first byte; address {address:#x} is "
                                     "inside a mapping: register the whole allocation, then slice the symmetric "
                                     "array returned")
            mapped = vmm.round_up(nbytes, self.granularity)
            if mapped > int(length):
                raise PgasValueError(f"{what}; its {nbytes} bytes, rounded up to the {self.granularity}-byte "
                                     f"granularity, pass the end of its {int(length)}-byte mapping")
            err, fd = driver.cuMemExportToShareableHandle(
                handle, driver.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)
            if err != driver.CUresult.CUDA_SUCCESS:
                raise PgasValueError(f"{what}; its handle does not export as one ({getattr(err, 'name', err)}): "
                                     "create it with requestedHandleTypes=CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR")
        except PgasValueError:
            vmm.release(handle)
            raise
        return ExternalMemory(handle, int(fd), mapped)

    def external_offset(self, memory: ExternalMemory, allocator) -> int:
        """A heap offset for ``memory``: in the spans' second half (``allocator``, pgas's own
        allocations, is not used)."""
        try:
            return self.capacity + self._external_room.allocate(memory.mapped, self.granularity)
        except PgasError:
            raise PgasError(f"pgas.register_symmetric: no room for {memory.mapped} more bytes of registered memory "
                            f"(at most {self.capacity} in all, the heap's size: raise PGAS_SYMMETRIC_SIZE)") from None

    def release_external_offset(self, offset: int, allocator) -> None:
        self._external_room.release(offset - self.capacity)

    def map_external(self, offset: int, memory: ExternalMemory) -> str | None:
        """Collective over the node: map each PE's ``memory`` at ``offset`` of its span,
        here and in every PE of the node. What failed here, or None (then
        ``unmap_external`` undoes what was done)."""
        try:
            self._map(self.base + offset, memory.mapped, memory.handle, "the registered memory")
        except PgasError as exc:
            problem = str(exc)
        else:
            problem = None
        # (the exchange is collective: made even when the own mapping failed)
        return self._map_node(offset, memory.mapped, memory.handle, "registered memory") or problem

    def unmap_external(self, offset: int, nbytes: int) -> None:
        """Undo ``map_external`` (what of it was done) on every span of the node here."""
        for pe in self._local_pes:
            address = self.bases[pe] + offset
            if self._mappings.pop(address, None) is not None:
                vmm.unmap(address, nbytes)

    @staticmethod
    def forget_external(memory: ExternalMemory) -> None:
        """Drop this process's handle and descriptor of ``memory`` (its mappings keep it)."""
        os.close(memory.fd)
        vmm.release(memory.handle)

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

    word_view = view_on     # (the simulator's heap keeps its word views; here each is made anew)

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
        return int(checked(driver.cuMemGetHandleForAddressRange(self.base, self.capacity, kind, 0),
                           "cuMemGetHandleForAddressRange"))

    def attach_nic(self, nic, region, n_pes: int, native=None):
        """The GPU-initiated path to the PEs ``nic`` reaches (``region``: this heap,
        registered with it): queue pairs the GPU posts into, and the window through which
        the NIC (``native``: the native NIC, else the NIC's thread) reaches this heap's
        memory (``_nic_host.GpuNicPath``; the caller closes it)."""
        from ..nic._nic_host import GpuNicPath
        return GpuNicPath(nic, region, self, n_pes, native)

    def device_error(self):
        """The error a device check of this PE recorded in its mailbox (then trapped), or None."""
        return self.state.device_error() if self.state is not None else None

    def close(self) -> None:
        """Wait for this PE's GPU work, then (once no peer kernel reads it) unmap every
        heap and registered memory here and free this PE's heap, the state block and the
        internal stream."""
        from numba import cuda

        cuda.synchronize()
        self._node_comm.Barrier()   # no peer kernel still reads our heap
        self._release(wait_for_peers=True)

    def _release(self, wait_for_peers: bool) -> None:
        from cuda.bindings import driver

        for address, nbytes in self._mappings.items():
            vmm.unmap(address, nbytes)
        self._mappings.clear()
        if wait_for_peers:
            self._node_comm.Barrier()   # every PE has unmapped the node's heaps
        if self.state is not None:
            self.state.close()
        if self._handle is not None:
            vmm.release(self._handle)
            self._handle = None
        if self._range is not None:
            vmm.free_reservation(*self._range)
            self._range = None
        self.base = None
        if self.stream is not None:
            driver.cuStreamDestroy(self.stream)
            self.stream = None
        vmm.restore_flags(self._context_flags)     # the user's context as pgas found it
        self._context_flags = None
        self.bases = [None] * len(self.bases)
