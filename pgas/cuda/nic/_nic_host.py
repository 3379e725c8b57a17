"""The cuda backend's side of the GPU-initiated NIC path (``_nic_device``): the queues
GPU threads post into, and the NIC's window on GPU memory.

For each PE on another node: a queue pair and descriptor (``_ibgda.DeviceQueue``, the
simulator's) in pinned host memory mapped into the GPU (``cuMemHostAlloc`` with
DEVICEMAP; under unified addressing the GPU uses the host's addresses), whose rung word
the NIC polls (``Nic.poll``): a GPU thread cannot wake a CPU thread. The device state
gets the NIC rows (``_nic_device.ROW``) and the heap's local key.

The NIC thread has no view of GPU memory: ``GpuWindow`` copies bytes out and in through
pinned host memory of its own (``PinnedStaging``: the driver would stage a copy from
pageable memory itself, synchronously), on a stream of its own (non-blocking, so a kernel
waiting for the NIC keeps running), and
applies atomics with a one-thread kernel, a system-scope compare-and-swap loop on
``mlx5.atomic_result`` (so they stay atomic with the device's own atomics on the word).
The copies and the kernel need an SM and the copy engines while the user's kernels run:
a kernel whose blocks occupy every SM and wait on the NIC would wait on its atomics for
ever (PGAS_TIMEOUT ends it); NVSHMEM's NIC does atomics in hardware.
"""
from __future__ import annotations

import ctypes
import functools
import re
import threading

import numpy as np

from ...core._errors import PgasError
from ...nic import _mlx5 as mlx5
from ...nic._nic import Nic
from ...nic._regions import ACCESS_LOCAL
from ...transport._ibgda import DeviceQueue
from .._driver import checked, create_stream, synchronize

__all__ = ["PinnedMemory", "PinnedStaging", "GpuWindow", "GpuQueues", "GpuNicPath", "atomic_kernel_source",
           "libcuda_functions", "STAGING_BYTES"]

STAGING_BYTES = 4 << 20     # pinned bytes through which GPU memory is copied, a piece at a time


class PinnedMemory:
    """Makes zeroed numpy arrays in pinned host memory that the GPU maps (``cuMemHostAlloc``
    PORTABLE | DEVICEMAP), each at an address the GPU uses as it is; ``close`` frees them."""

    def __init__(self):
        self._blocks: list[int] = []

    def __call__(self, shape, dtype) -> np.ndarray:
        from cuda.bindings import driver

        dtype = np.dtype(dtype)
        count = int(np.prod(shape))
        nbytes = max(count * dtype.itemsize, 1)
        flags = driver.CU_MEMHOSTALLOC_PORTABLE | driver.CU_MEMHOSTALLOC_DEVICEMAP
        address = int(checked(driver.cuMemHostAlloc(nbytes, flags), "cuMemHostAlloc (the NIC's queues)"))
        self._blocks.append(address)
        mapped = int(checked(driver.cuMemHostGetDevicePointer(address, 0), "cuMemHostGetDevicePointer"))
        if mapped != address:
            raise PgasError(f"pgas.init: pinned host memory at {address:#x} is mapped into the GPU at {mapped:#x}; "
                            "the GPU-initiated NIC path needs unified addressing (a 64-bit Linux process)")
        ctypes.memset(address, 0, nbytes)
        return np.frombuffer((ctypes.c_uint8 * nbytes).from_address(address), dtype, count).reshape(shape)

    def close(self) -> None:
        from cuda.bindings import driver

        for address in self._blocks:
            driver.cuMemFreeHost(address)
        self._blocks = []


class PinnedStaging:
    """``STAGING_BYTES`` of pinned host memory through which bytes go between GPU memory and
    memory the CPU reads, a piece at a time: ``through``. With a ``nic`` the buffer is also
    registered with it (``lkey``), so that the NIC reads and writes it. One user at a time
    (``lock``). Made at ``init``, before any user kernel runs: a page-locked allocation may
    wait for the GPU's running work, and the NIC's thread makes its copies while kernels
    wait for it."""

    def __init__(self, pinned: PinnedMemory, nic: Nic | None = None):
        self._nic = nic
        self.buffer = pinned(STAGING_BYTES, np.uint8)
        self.region = nic.register(self.buffer, ACCESS_LOCAL) if nic is not None else None
        self.lock = threading.Lock()

    @property
    def lkey(self) -> int:
        """The buffer's local key at the NIC."""
        return self.region.lkey

    def through(self, address: int, nbytes: int, stream: int, to_gpu: bool, work, what: str) -> None:
        """``nbytes`` between GPU memory at ``address`` and the buffer, a piece at a time on
        ``stream``: ``work(offset, buffer address, length)`` fills piece ``offset`` of the
        buffer before its copy to the GPU (``to_gpu``), else takes it after its copy from
        the GPU. Each copy has landed before the buffer is used again; a failed one is a
        PgasError naming ``what``."""
        from cuda.bindings import driver

        staging = self.buffer.ctypes.data
        for offset in range(0, nbytes, STAGING_BYTES):
            length = min(STAGING_BYTES, nbytes - offset)
            if to_gpu:
                work(offset, staging, length)
                checked(driver.cuMemcpyHtoDAsync(address + offset, staging, length, stream),
                        f"{what}: cuMemcpyHtoDAsync")
            else:
                checked(driver.cuMemcpyDtoHAsync(staging, address + offset, length, stream),
                        f"{what}: cuMemcpyDtoHAsync")
            synchronize(stream)
            if not to_gpu:
                work(offset, staging, length)

    def close(self) -> None:
        """Deregister the buffer (its memory goes with ``PinnedMemory.close``)."""
        if self.region is not None:
            self._nic.deregister(self.region)
        self.buffer = self.region = None


def atomic_kernel_source():
    """(python function, signature) of the NIC's atomic kernel ``(address, opcode, size, o0,
    o1, o2, o3, cell)``: mlx5 atomic ``opcode`` on the ``size``-byte word at ``address``, a
    system-scope compare-and-swap loop; the old value lands at ``cell`` (pinned host memory).
    Scalars only, so native code launches it (``pgas.wire._window``). The offline test
    compiles it too."""
    from numba import cuda, types

    from ...nic import _mlx5 as mlx5
    from .. import _ptx as ptx

    result = cuda.jit(device=True)(mlx5.atomic_result)

    @cuda.jit(device=True)
    def loop(address, like, opcode, size, o0, o1, o2, o3):
        """The old value; ``like``'s dtype is the word's (uint32 or uint64)."""
        old = ptx.ld_relaxed(address, like)
        while True:
            new, changes = result(opcode, size, o0, o1, o2, o3, np.uint64(old))
            if not changes:
                return old
            seen = ptx.atomic_cas(address, like, old, new)
            if seen == old:
                return old
            old = seen

    def apply(address, opcode, size, o0, o1, o2, o3, cell):
        word32, word64 = cuda.local.array(1, np.uint32), cuda.local.array(1, np.uint64)   # (their dtypes)
        if size == 4:
            old = np.uint64(loop(address, word32, opcode, size, o0, o1, o2, o3))
        else:
            old = loop(address, word64, opcode, size, o0, o1, o2, o3)
        ptx.st_relaxed(cell, word64, old)

    u64 = types.uint64
    return apply, (u64, types.int64, types.int64, u64, u64, u64, u64, u64)


@functools.cache
def _atomic_kernel() -> tuple[int, int]:
    """(module, function) handles of the atomic kernel, loaded into the current context."""
    from cuda.bindings import driver
    from numba import cuda

    function, signature = atomic_kernel_source()
    ptx, _ = cuda.compile_ptx(function, signature, cc=cuda.get_current_device().compute_capability)
    name = re.search(r"\.entry\s+([\w$]+)", ptx).group(1)
    module = checked(driver.cuModuleLoadData(ptx.encode() + b"\0"), "cuModuleLoadData (the NIC's atomic kernel)")
    kernel = checked(driver.cuModuleGetFunction(module, name.encode()), "cuModuleGetFunction")
    return int(module), int(kernel)


_DRIVER = {"get_context": "cuCtxGetCurrent", "set_context": "cuCtxSetCurrent", "copy_out": "cuMemcpyDtoHAsync_v2",
           "copy_in": "cuMemcpyHtoDAsync_v2", "synchronize": "cuStreamSynchronize", "launch": "cuLaunchKernel"}


@functools.cache
def libcuda_functions() -> dict:
    """The driver functions a window calls (``_window.DRIVER`` name -> address in libcuda)."""
    library = ctypes.CDLL("libcuda.so.1")
    return {name: ctypes.cast(getattr(library, symbol), ctypes.c_void_p).value for name, symbol in _DRIVER.items()}


class GpuWindow:
    """How the NIC reaches GPU memory at ``base`` (``Nic``'s ``DeviceSpan``; the native
    NIC's ``KeyTable`` row): a native window (``pgas.wire._window``) over libcuda, on a
    stream of its own and this PE's context, copying through a pinned staging buffer of
    its own, atomics by the one-thread kernel."""

    def __init__(self, base: int, device: int, pinned: PinnedMemory):
        from cuda.bindings import driver

        from ...wire import _window as window

        self.base, self.device = base, device
        cell = pinned(1, np.uint64)                    # where an atomic's old value lands
        staging = pinned(STAGING_BYTES, np.uint8)      # the window's alone
        context = int(checked(driver.cuCtxGetCurrent(), "cuCtxGetCurrent"))
        self._stream = create_stream()
        self.native = window.NativeWindow(libcuda_functions(), context, self._stream, staging, _atomic_kernel()[1],
                                          cell)
        self.native_address = self.native.address
        # run once now, on a scratch word, so that its module is in place before any user
        # kernel runs (CUDA's lazy loading may wait for running kernels)
        self._atomic_at(cell.ctypes.data, mlx5.OP_ATOMIC_FA, [0, 0, 0, 0], 8)

    def read(self, offset: int, nbytes: int) -> np.ndarray:
        from ...wire import _window as window

        host = np.empty(nbytes, np.uint8)
        self._check(window.read(self.native_address, host.ctypes.data, self.base + offset, nbytes), "copy out of")
        return host

    def write(self, offset: int, data: np.ndarray) -> None:
        """``data`` into GPU memory at ``offset``, landed on return, before the next request
        (a flag never lands before its data)."""
        from ...wire import _window as window

        data = np.ascontiguousarray(data, np.uint8)
        self._check(window.write(self.native_address, self.base + offset, data.ctypes.data, data.size), "copy into")

    def atomic(self, offset: int, opcode: int, operands: list, size: int) -> int:
        return self._atomic_at(self.base + offset, opcode, operands, size)

    def _atomic_at(self, address: int, opcode: int, operands: list, size: int) -> int:
        from ...wire import _window as window

        signed = [int(o) - (1 << 64) if int(o) >= 1 << 63 else int(o) for o in operands]    # (int64 words)
        ok, old = window.atomic(self.native_address, address, opcode, size, *signed)
        self._check(ok, "run the atomic kernel on")
        return int(old) & 0xFFFFFFFFFFFFFFFF

    def _check(self, ok: bool, what: str) -> None:
        if not ok:
            raise PgasError(f"pgas NIC: could not {what} GPU memory (a CUDA driver call failed)")

    def close(self) -> None:
        from cuda.bindings import driver

        if self._stream is not None:
            driver.cuStreamDestroy(self._stream)
            self._stream = None


class GpuQueues:
    """The device queue pairs to every PE on another node and their rows in the device state
    (``_nic_device``). What the NIC reads or writes (send queue, doorbell record, CQs,
    result cells, the rung word) is pinned host memory the GPU maps; what only GPU threads
    touch (the descriptor with its counters, the ``waited`` flags) is device memory, as
    NVSHMEM keeps it: GPU atomics on host memory are slow, and not atomic on every system."""

    def __init__(self, nic: Nic, pinned: PinnedMemory, heap_lkey: int, state, n_pes: int, native=None):
        from cuda.bindings import driver

        from ...transport._ibgda_code import W
        from ._nic_device import ROW

        endpoints = native.endpoints(0) if native is not None else {}
        self.queues = {peer: DeviceQueue(nic, peer, pinned, native, endpoints.get(peer, 0), polled=True)
                       for peer in nic.peers}
        self._device: list[int] = []
        rows = np.zeros((n_pes, len(ROW)), np.int64)
        for peer, queue in self.queues.items():
            words = queue.descriptor.copy()
            block = int(checked(driver.cuMemAlloc(words.nbytes + queue.qp.depth), "cuMemAlloc (a NIC queue)"))
            self._device.append(block)
            words[W["waited"]] = block + words.nbytes
            checked(driver.cuMemcpyHtoD(block, words.ctypes.data, words.nbytes), "cuMemcpyHtoD (a NIC queue)")
            checked(driver.cuMemsetD8(block + words.nbytes, 0, queue.qp.depth), "cuMemsetD8 (a NIC queue)")
            if native is None:            # (the native NIC polls it: DeviceQueue's polled)
                nic.poll(queue.qp)        # its rung word (rung_at) stays in the pinned descriptor
            remote = nic.remote[peer]
            rows[peer] = (block, remote.rkey, remote.base, queue.lkey)
        state.set_nic(rows, heap_lkey)

    def close(self, nic: Nic) -> None:
        """After the NIC thread has stopped."""
        from cuda.bindings import driver

        for queue in self.queues.values():
            nic.deregister(queue.cells_region)
        for block in self._device:
            driver.cuMemFree(block)
        self._device = []


class GpuNicPath:
    """The GPU-initiated path of one PE on cuda: pinned memory, the ``window`` through which
    the NIC reaches the GPU heap, the GPU's ``queues`` to every PE ``nic`` reaches, and the
    ``staging`` through which host put/get move device memory outside the heap. ``native``:
    the native NIC (``pgas.wire._nic_queues.NicQueues``) that serves the queues and the
    heap, or None: the NIC's thread does. Made by ``GpuSymmetricHeap.attach_nic``; what a
    failed step made is released."""

    def __init__(self, nic: Nic, region, heap, n_pes: int, native=None):
        self.pinned = self.window = self.queues = self.staging = None
        try:
            self.pinned = PinnedMemory()
            self.window = GpuWindow(heap.base, heap.device, self.pinned)
            self.queues = GpuQueues(nic, self.pinned, region.lkey, heap.state, n_pes, native)
            self.staging = PinnedStaging(self.pinned, nic)    # host RMA of device memory outside the heap
            if native is not None:      # last: nothing after it may fail and free the window
                native.reach_heap(self.window)
        except BaseException:
            self.close(nic)
            raise

    def close(self, nic: Nic) -> None:
        """After the NIC thread has stopped reading the queues and the heap."""
        if self.staging is not None:
            self.staging.close()
        if self.queues is not None:
            self.queues.close(nic)
        if self.window is not None:
            self.window.close()
        if self.pinned is not None:
            self.pinned.close()
        self.pinned = self.window = self.queues = self.staging = None
