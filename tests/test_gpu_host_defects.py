"""The cuda backend's host side, checked without a GPU: a fake CUDA driver records the
calls pgas makes (their order and their streams), so the places where a GPU run could
only fail now and then are pinned down here.

- the state block's address is reserved before the heap and kept across init cycles;
- host copies from pageable memory (state pushes, ``pgas.full``) have landed on return;
- ``stream=None`` is the runtime's internal stream, synchronized where the call blocks;
- a wait queued on a stream keeps its result word until the stream is done with it;
- nbi copies and signals are queued and not waited for; host atomics launch the device
  atomic and read back what it fetched;
- PEs of a node on different GPUs need peer access with native atomics;
- a strided signal is refused with the argument's name;
- the heap is VMM memory passed to the node's PEs by file descriptor (every descriptor
  closed), with room after it where register_symmetric maps a user's VMM allocation in
  every span; memory it cannot share is refused by what it lacks; the descriptor
  exchange takes only what each rank sent, does not deadlock with many ranks, and times
  out naming the rank missing;
- a host put/get with no stream within the node is one copy and a synchronize (the fast
  path, by cached addresses), and what it does not take goes the general way;
- host put/get to a PE on another node wait for the stream, then go through the NIC:
  host memory registered in place, device memory outside the heap through pinned
  staging a piece at a time, and the NIC's own copies of GPU memory through pinned
  memory too.
"""
from __future__ import annotations

import array
import ctypes
import os
import socket
import time
from types import SimpleNamespace

import numpy as np
import pytest
from cuda.bindings import driver

import pgas
from pgas.cuda.heap import _heap as _gpu_heap, _state_block as _gpu_state
from pgas.host import _gpu_ops
from pgas.host.collectives import _collective_call
from pgas.host.memory import _memory
from pgas.nic import _mlx5 as mlx5
from pgas.nic._regions import MemoryRegion
from pgas.runtime import _state as _runtime

SUCCESS = driver.CUresult.CUDA_SUCCESS
STATE_ADDRESS = 0x7E00_0000_0000
STATE_WORDS = {"my_pe": 0, "n_pes": 1, "heap_base": 2, "heap_size": 3, "timeout_ns": 4, "mailbox": 5, "peer_bases": 8}
INTERNAL = 0x5151          # the handle the fake cuStreamCreate gives
HEAP_BASE = 0x1000_0000
HEAP_SIZE = 4 << 20
GPU_MEMORY = 80 << 30


def _bus_id(device: int) -> bytes:
    return f"0000:{device + 1:02x}:00.0".encode().ljust(64, b"\0")


_HOST_BUFFERS: dict = {}   # pinned host memory, as the fake cuMemHostAlloc hands it out (kept alive)


class Fail:
    """A fake driver call's answer: ``error``, and ``values`` placeholders for its results."""

    def __init__(self, error=driver.CUresult.CUDA_ERROR_INVALID_VALUE, values: int = 1):
        self.error, self.values = error, values


class FakeDriver:
    """Stands in for the cuda-python driver calls pgas makes: each succeeds (or answers
    as ``answers`` says) and is recorded as (name, args)."""

    ANSWERS = {
        "cuMemAddressReserve": lambda size, alignment, address, flags: address or HEAP_BASE,
        "cuMemGetAllocationGranularity": 2 << 20,
        "cuStreamCreate": INTERNAL,
        "cuMemAlloc": HEAP_BASE,
        "cuMemAllocAsync": 0x2000_0000,
        "cuMemCreate": 0xA11,
        "cuDeviceGet": lambda ordinal: ordinal,
        "cuDeviceTotalMem": lambda device: GPU_MEMORY,
        "cuDeviceGetPCIBusId": lambda length, device: _bus_id(device),
        "cuDeviceGetByPCIBusId": lambda bus_id: int(bus_id.split(b":")[1], 16) - 1,
        "cuDeviceCanAccessPeer": 1,
        "cuDeviceGetP2PAttribute": 1,
        "cuGetErrorString": b"fake error",
        "cuMemHostAlloc": lambda size, flags: ctypes.addressof(_HOST_BUFFERS.setdefault(size, ctypes.create_string_buffer(size))),
        "cuMemHostGetDevicePointer": lambda host, flags: host,
        "cuCtxGetCurrent": 0xC7,
        "cuCtxGetFlags": 0,
        "cuMemExportToShareableHandle": lambda handle, kind, flags: os.open(os.devnull, os.O_RDONLY),
        "cuMemImportFromShareableHandle": lambda fd, kind: 0xB00 + fd,
        "cuMemRetainAllocationHandle": 0xC0DE,
        "cuMemGetAddressRange": lambda address: (address, 4 << 20),
    }
    CALLS = ["cuMemAddressFree", "cuStreamDestroy", "cuStreamSynchronize", "cuMemFree", "cuMemsetD8",
             "cuMemsetD8Async", "cuMemMap", "cuMemSetAccess", "cuMemcpyHtoD",
             "cuMemcpyHtoDAsync", "cuMemUnmap", "cuMemRelease", "cuMemFreeAsync", "cuMemcpyAsync",
             "cuMemcpyDtoHAsync", "cuPointerSetAttribute", "cuMemFreeHost", "cuCtxSynchronize", "cuCtxSetFlags"]

    def __init__(self, monkeypatch, **answers):
        self.calls: list[tuple[str, tuple]] = []
        self.answers = {**self.ANSWERS, **answers}
        for name in [*self.ANSWERS, *self.CALLS]:
            monkeypatch.setattr(driver, name, self._recorder(name))

    def _recorder(self, name: str):
        def call(*args):
            self.calls.append((name, args))
            answer = self.answers.get(name)
            value = answer(*args) if callable(answer) else answer
            if isinstance(value, Fail):
                return (value.error,) + (None,) * value.values
            return (SUCCESS,) if value is None else (SUCCESS, *value) if isinstance(value, tuple) else (SUCCESS, value)
        return call

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def args(self, name: str) -> list[tuple]:
        return [args for called, args in self.calls if called == name]


class NodeComm:
    """The node communicator of PE 0 among ``n`` PEs: peer k's contribution to an
    allgather is what ``peer(k, mine)`` makes of PE 0's."""

    def __init__(self, n: int, peer=lambda k, mine: mine):
        self.n, self.peer = n, peer

    def allgather(self, mine):
        return [mine] + [self.peer(k, mine) for k in range(1, self.n)]

    def Get_rank(self):
        return 0

    def Get_size(self):
        return self.n

    def Barrier(self):
        pass


def _boot(n: int = 1, peer=lambda k, mine: mine):
    return SimpleNamespace(my_pe=0, n_pes=n, local_pes=list(range(n)), node_comm=NodeComm(n, peer))


@pytest.fixture
def fake(monkeypatch):
    """A fake driver, a fake GPU 0, and no state reservation yet in this process."""
    from numba import cuda

    monkeypatch.setattr(_gpu_state, "_reserved", None, raising=False)
    monkeypatch.setattr(_gpu_state, "_state_layout", lambda: (STATE_ADDRESS, STATE_WORDS))
    monkeypatch.setattr(_gpu_heap, "select_device", lambda local_rank, chosen=None: 0)
    monkeypatch.setattr(cuda, "synchronize", lambda: None)
    # the node's other PEs pass a descriptor of their heaps: here copies of PE 0's
    monkeypatch.setattr(_gpu_heap, "allgather_fds", lambda comm, fd, timeout, what: [os.dup(fd)
                                                                                      for _ in range(comm.n)])
    return FakeDriver(monkeypatch)


@pytest.fixture
def fake_runtime(monkeypatch, fake):
    """A runtime whose heap holds the internal stream (what ``_gpu_ops`` reads)."""
    rt = SimpleNamespace(heap=SimpleNamespace(stream=INTERNAL, reachable=lambda pe: pe < 2), on_gpu=True, n_pes=1,
                         transports=SimpleNamespace(kinds=["self", "p2p", "unreachable", "unreachable"],
                                                    gpu_path=None))
    monkeypatch.setattr(_runtime, "_runtime", rt)
    return rt


def test_state_address_is_reserved_before_the_heap_and_kept_across_init_cycles(fake):
    for _cycle in range(2):
        _gpu_heap.GpuSymmetricHeap(_boot(), HEAP_SIZE, 1.0).close()
    names = fake.names()
    assert names.index("cuMemAddressReserve") < names.index("cuMemCreate")
    hints = [args[2] for args in fake.args("cuMemAddressReserve")]
    assert hints == [STATE_ADDRESS, 0, 0]       # the state's once; the heap's span at each init
    assert fake.args("cuMemAddressFree") == [(HEAP_BASE, 2 * HEAP_SIZE)] * 2    # the heap's, at each close
    assert names.count("cuMemMap") == names.count("cuMemUnmap") == 4   # state and heap, mapped again by each init


def test_a_state_address_the_driver_does_not_honour_is_refused_before_the_heap(monkeypatch, fake):
    fake.answers["cuMemAddressReserve"] = lambda size, alignment, address, flags: address + (2 << 20)
    with pytest.raises(pgas.PgasError, match=r"did not reserve the device state block at 0x7e0000000000 "
                                             r"\(it offered 0x7e0000200000\).*set PGAS_STATE_ADDRESS"):
        _gpu_heap.GpuSymmetricHeap(_boot(), HEAP_SIZE, 1.0)
    assert fake.args("cuMemAddressFree") == [(STATE_ADDRESS + (2 << 20), 64 << 20)]
    assert "cuMemCreate" not in fake.names() and "cuStreamCreate" not in fake.names()
    assert _gpu_state._reserved is None   # the next init tries again


def test_heap_zeroing_and_state_pushes_land_on_the_internal_stream_before_init_returns(fake):
    heap = _gpu_heap.GpuSymmetricHeap(_boot(), HEAP_SIZE, 1.0)
    heap.publish_team(2, SimpleNamespace(pes=(0,), my_index=0))
    heap.close()
    names = fake.names()
    assert "cuMemsetD8" not in names and "cuMemcpyHtoD" not in names   # legacy-stream forms
    for name in ("cuMemsetD8Async", "cuMemcpyHtoDAsync"):
        assert [args[-1] for args in fake.args(name)] == [INTERNAL] * names.count(name)
        for at in (i for i, called in enumerate(names) if called == name):
            assert fake.calls[at + 1] == ("cuStreamSynchronize", (INTERNAL,)), name
    assert names.count("cuMemcpyHtoDAsync") == 2     # init, then the team's row
    # users' synchronous copies land: VMM memory has no per-pointer SYNC_MEMOPS, the context gets the flag
    assert fake.args("cuCtxSetFlags") == [(int(driver.CUctx_flags.CU_CTX_SYNC_MEMOPS),), (0,)]   # given back at close
    assert "cuPointerSetAttribute" not in names
    assert fake.args("cuStreamDestroy") == [(INTERNAL,)]


def test_full_waits_for_its_copy_from_pageable_memory(fake_runtime, fake):
    view = np.zeros(6, np.float32)
    value = _memory._fill_value(2.5, view.shape, view.dtype, "pgas.full")
    _memory._fill(fake_runtime, view, 0, view.nbytes, value, "pgas.full")
    (dst, src, nbytes, stream), = fake.args("cuMemcpyAsync")
    assert (dst, nbytes, stream) == (view.ctypes.data, view.nbytes, INTERNAL)
    assert fake.calls[-1] == ("cuStreamSynchronize", (INTERNAL,))


def test_stream_none_is_the_internal_stream_and_a_given_stream_is_not_waited_for(fake_runtime, fake):
    dst, src = np.zeros(4), np.ones(4)
    _gpu_ops.copy(dst, src, 4, None, "pgas.put")
    assert fake.args("cuMemcpyAsync")[0][3] == INTERNAL and fake.calls[-1] == ("cuStreamSynchronize", (INTERNAL,))
    _gpu_ops.copy(dst, src, 4, 0x777, "pgas.put")
    assert fake.args("cuMemcpyAsync")[1][3] == 0x777 and fake.calls[-1][0] == "cuMemcpyAsync"


class _RecordedKernel:
    """Records launches into the fake driver's calls as ("launch", (stream, args))."""

    def __init__(self, fake):
        self.fake = fake

    def __getitem__(self, config):
        return lambda *args: self.fake.calls.append(("launch", (config[2], args)))


@pytest.fixture
def wait_kernel(monkeypatch, fake):
    monkeypatch.setattr(_gpu_ops, "_wait_kernel", _RecordedKernel(fake))
    monkeypatch.setattr(_gpu_ops, "numba_stream", lambda handle: handle)
    monkeypatch.setattr(_gpu_ops, "device_array_at", lambda address, shape, dtype: ("scratch", address),
                        raising=False)


def test_a_wait_queued_on_a_stream_frees_its_word_in_the_streams_order(fake_runtime, fake, wait_kernel):
    signal = np.zeros(1, np.uint64)
    assert _gpu_ops.signal_wait_until(signal, pgas.CMP_GE, 1, 0x777, "pgas.signal_wait_until") is None
    assert fake.names() == ["cuMemAllocAsync", "launch", "cuMemFreeAsync"]   # the host does not wait
    (nbytes, stream), (launched_on, args), (freed, free_stream) = (args for _, args in fake.calls)
    address = fake.answers["cuMemAllocAsync"]
    assert (nbytes, stream, launched_on, args[-1]) == (8, 0x777, 0x777, ("scratch", address))
    assert (freed, free_stream) == (address, 0x777)


def test_a_blocking_wait_reads_its_word_after_the_kernel_on_the_internal_stream(fake_runtime, fake, wait_kernel):
    def copy_out(host, device, nbytes, stream):
        ctypes.memmove(host, np.array([7], np.uint64).ctypes.data, nbytes)
    fake.answers["cuMemcpyDtoHAsync"] = copy_out
    seen = _gpu_ops.signal_wait_until(np.zeros(1, np.uint64), pgas.CMP_GE, 1, None, "pgas.signal_wait_until")
    assert seen == 7
    assert fake.names() == ["cuMemAllocAsync", "launch", "cuStreamSynchronize", "cuMemcpyDtoHAsync",
                            "cuStreamSynchronize", "cuMemFreeAsync"]
    assert {args[-1] for name, args in fake.calls if name != "launch"} | {fake.calls[1][1][0]} == {INTERNAL}


def _on_gpu_two(k, mine):
    """Peer k of PE 0 is on GPU k (the same granularity; problems: none)."""
    if isinstance(mine, int):
        return mine
    return _bus_id(k).rstrip(b"\0").decode() if isinstance(mine, str) and mine.startswith("0000:") else None


@pytest.mark.parametrize("missing,answers,expected", [
    ("peer access", {"cuDeviceCanAccessPeer": 0}, r"PE 0's GPU has no peer access to PE 1's "
                                                  r"\(cuDeviceCanAccessPeer is 0"),
    ("native atomics", {"cuDeviceGetP2PAttribute": 0}, r"the link from PE 0's GPU to PE 1's has no native atomics"),
])
def test_pes_on_gpus_without_peer_access_or_native_atomics_are_refused_by_name(fake, missing, answers, expected):
    fake.answers.update(answers)
    with pytest.raises(pgas.PgasError, match=r"could not map each other's heaps: PE 0: PE 0 \(GPU 0000:01:00.0\) "
                                             r"and PE 1 \(GPU 0000:02:00.0\) are on one node, but " + expected):
        _gpu_heap.GpuSymmetricHeap(_boot(2, _on_gpu_two), HEAP_SIZE, 1.0)
    assert "cuMemImportFromShareableHandle" not in fake.names(), missing
    assert fake.args("cuMemRelease")[-1] == (0xA11,) and fake.args("cuStreamDestroy") == [(INTERNAL,)]
    assert fake.args("cuMemAddressFree") == [(HEAP_BASE, 2 * 2 * HEAP_SIZE)]   # the node's spans


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_the_node_heaps_are_vmm_memory_passed_by_file_descriptor(fake):
    before = _open_fds()
    heap = _gpu_heap.GpuSymmetricHeap(_boot(2), HEAP_SIZE, 1.0)
    span = 2 * HEAP_SIZE        # the heap, then room for registered memory
    assert heap.bases == [HEAP_BASE, HEAP_BASE + span] and heap.size == span and heap.capacity == HEAP_SIZE
    assert fake.args("cuMemAddressReserve")[1][:2] == (2 * span, 2 << 20)      # one range for the node's spans
    size, prop, _ = fake.args("cuMemCreate")[0]
    posix_fd = driver.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
    assert size == HEAP_SIZE and prop.requestedHandleTypes == posix_fd   # exportable, as nvshmem needs
    assert [args[0] for args in fake.args("cuMemExportToShareableHandle")] == [0xA11]
    (imported,) = fake.args("cuMemImportFromShareableHandle")
    peer = 0xB00 + imported[0]
    assert fake.args("cuMemMap")[:2] == [(HEAP_BASE, HEAP_SIZE, 0, 0xA11, 0), (HEAP_BASE + span, HEAP_SIZE, 0, peer, 0)]
    accesses = fake.args("cuMemSetAccess")[:2]
    assert [(a[0], a[1], a[2][0].location.id, a[2][0].flags) for a in accesses] == [
        (base, HEAP_SIZE, 0, driver.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE) for base in heap.bases]
    assert (peer,) in fake.args("cuMemRelease")       # its mapping holds the peer's memory
    heap.close()
    assert set(fake.args("cuMemUnmap")) >= {(HEAP_BASE, HEAP_SIZE), (HEAP_BASE + span, HEAP_SIZE)}
    assert fake.args("cuMemAddressFree") == [(HEAP_BASE, 2 * span)] and (0xA11,) in fake.args("cuMemRelease")
    assert _open_fds() == before        # every descriptor exported, passed and imported is closed


@pytest.mark.parametrize("pes, other_gpu", [(1, False), (2, False), (2, True), (3, True)])
def test_heaps_larger_than_their_gpus_memory_are_a_settings_error_before_any_is_made(fake, monkeypatch, pes,
                                                                                      other_gpu):
    """The heaps of the PEs sharing a GPU (here 80 GiB) must fit in it: PGAS_SYMMETRIC_SIZE is
    named, as the simulator names /dev/shm, rather than cuMemCreate failing. ``other_gpu``:
    the node's last PE is on another GPU."""
    monkeypatch.setenv("PGAS_SYMMETRIC_SIZE", "50g")
    other = _bus_id(1).split(b"\0")[0].decode()
    boot = _boot(pes, lambda k, mine: other if other_gpu and k == pes - 1 and isinstance(mine, str) else mine)
    sharing = pes - other_gpu
    if sharing == 1:
        _gpu_heap.GpuSymmetricHeap(boot, 50 << 30, 1.0).close()
        return
    with pytest.raises(pgas.PgasConfigError, match=rf"PGAS_SYMMETRIC_SIZE=50g: the symmetric heaps of the {sharing} "
                                                   rf"PEs on GPU 0 need {sharing * (50 << 30)} bytes of its memory, "
                                                   rf"which has {GPU_MEMORY}; use a smaller PGAS_SYMMETRIC_SIZE"):
        _gpu_heap.GpuSymmetricHeap(boot, 50 << 30, 1.0)
    assert fake.names().count("cuMemAddressReserve") == 1 and "cuMemCreate" not in fake.names()   # (1: the state's)


def test_every_span_of_the_node_has_the_size_the_coarsest_granularity_allows(fake):
    """A peer's GPU with 4 MiB granularity (this one's: 2 MiB): 5 MiB heaps take 8 MiB each."""
    boot = _boot(2, lambda k, mine: 4 << 20 if isinstance(mine, int) else mine)
    heap = _gpu_heap.GpuSymmetricHeap(boot, 5 << 20, 1.0)
    assert (heap.granularity, heap.capacity, heap.bases[1] - heap.bases[0]) == (4 << 20, 8 << 20, 16 << 20)
    heap.close()


USER = 0x9000_0000


def test_the_users_vmm_memory_is_mapped_after_the_heap_in_every_span_of_the_node(fake):
    heap = _gpu_heap.GpuSymmetricHeap(_boot(2), HEAP_SIZE, 1.0)
    before = _open_fds()
    memory = heap.external_memory(USER, 3 << 20, "pgas.register_symmetric")
    assert memory.mapped == 4 << 20 and fake.args("cuMemRetainAllocationHandle") == [(USER,)]
    offset = heap.external_offset(memory, None)
    assert offset == HEAP_SIZE        # the first byte after the heap (pgas's own allocator is not used)
    assert heap.map_external(offset, memory) is None
    imported = 0xB00 + fake.args("cuMemImportFromShareableHandle")[-1][0]
    span = heap.size
    assert fake.args("cuMemMap")[-2:] == [(HEAP_BASE + offset, 4 << 20, 0, 0xC0DE, 0),
                                          (HEAP_BASE + span + offset, 4 << 20, 0, imported, 0)]
    heap.forget_external(memory)
    assert (0xC0DE,) in fake.args("cuMemRelease") and _open_fds() == before
    registered = _DeviceArray(np.zeros(8, np.int64), HEAP_BASE + offset)
    assert heap.offset_of(registered, "f", "a") == offset    # inside the symmetric span
    with pytest.raises(pgas.PgasError, match=r"no room for 8388608 more bytes of registered memory \(at most 4194304"):
        heap.external_offset(_gpu_heap.ExternalMemory(0, -1, 8 << 20), None)
    heap.unmap_external(offset, memory.mapped)
    assert fake.args("cuMemUnmap")[-2:] == [(HEAP_BASE + offset, 4 << 20), (HEAP_BASE + span + offset, 4 << 20)]
    heap.release_external_offset(offset, None)
    assert heap.external_offset(memory, None) == offset      # the room is free again
    heap.close()


@pytest.mark.parametrize("answers,nbytes,expected", [
    ({"cuMemRetainAllocationHandle": Fail()}, 4096, r"cuMemRetainAllocationHandle of address 0x90000000 failed "
                                                    r"\(CUDA_ERROR_INVALID_VALUE\): it is not VMM memory"),
    ({"cuMemGetAddressRange": lambda address: (address - 4096, 4 << 20)}, 4096, r"starting at its allocation's "
                                                                                r"first byte"),
    ({}, 5 << 20, r"its 5242880 bytes, rounded up to the 2097152-byte granularity, pass the end of its 4194304-byte"),
    ({"cuMemExportToShareableHandle": Fail()}, 4096, r"its handle does not export as one.*"
                                                     r"requestedHandleTypes=CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR"),
])
def test_memory_register_symmetric_cannot_share_is_refused_by_what_it_lacks(fake, answers, nbytes, expected):
    heap = _gpu_heap.GpuSymmetricHeap(_boot(2), HEAP_SIZE, 1.0)
    fake.answers.update(answers)
    with pytest.raises(pgas.PgasValueError, match=r"pgas.register_symmetric: a must be GPU memory from cuMemCreate "
                                                  r"\(CUDA VMM\) with POSIX file descriptor handles.*" + expected):
        heap.external_memory(USER, nbytes, "pgas.register_symmetric")
    retained = "cuMemRetainAllocationHandle" not in answers
    assert ((0xC0DE,) in fake.args("cuMemRelease")) == retained     # a handle it retained is released
    heap.close()


def test_a_descriptor_that_does_not_come_is_an_error_naming_the_node_rank():
    from pgas.cuda.heap._fd_exchange import _name, allgather_fds

    peers = []

    def bcast(token, root):     # node rank 1 is there (its socket bound) but never sends
        peer = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        peer.bind(_name(token, 1))
        peers.append(peer)
        return token
    comm = SimpleNamespace(Get_rank=lambda: 0, Get_size=lambda: 2, bcast=bcast, Barrier=lambda: None,
                           allgather=lambda problem: [problem, None])
    fd = os.open(os.devnull, os.O_RDONLY)
    before = _open_fds()
    with pytest.raises(pgas.PgasError, match=r"sharing x: the file descriptors of node ranks \[1\] did not come "
                                             r"within PGAS_TIMEOUT=0.2 s"):
        allgather_fds(comm, fd, 0.2, "sharing x")
    peers[0].close()
    assert _open_fds() == before
    os.close(fd)


def _memfd(text: str) -> int:
    fd = os.memfd_create("pgas-test")
    os.write(fd, text.encode())
    return fd


def test_a_descriptor_is_taken_only_from_the_socket_of_the_rank_it_names():
    from pgas.cuda.heap._fd_exchange import _name, allgather_fds

    sockets, token = [], []

    def allgather(problem):     # after node rank 0 bound its socket: a forger and then rank 1 send
        forger = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        forger.bind(_name("not-the-token", 1))
        peer = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        peer.bind(_name(token[0], 1))
        sockets.extend([forger, peer])
        for sender, text in ((forger, "forged"), (peer, "genuine")):
            fd = _memfd(text)
            sender.sendmsg([(1).to_bytes(4, "little")], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                                          array.array("i", [fd]))], 0, _name(token[0], 0))
            os.close(fd)
        return [problem, None]
    comm = SimpleNamespace(Get_rank=lambda: 0, Get_size=lambda: 2, bcast=lambda t, root: token.append(t) or t,
                           allgather=allgather)
    mine = _memfd("mine")
    before = _open_fds()
    fds = allgather_fds(comm, mine, 5.0, "sharing x")
    assert [os.pread(fd, 16, 0).decode() for fd in fds] == ["mine", "genuine"]
    for fd in fds + [mine]:
        os.close(fd)
    for s in sockets:
        s.close()
    assert _open_fds() == before - 1        # the forged descriptor was closed too


def test_many_pes_of_a_node_pass_their_descriptors_without_waiting_for_each_other():
    """16 ranks (threads here): more than a datagram socket's queue holds (max_dgram_qlen,
    10 by default), which blocked sends would deadlock on."""
    import threading

    from pgas.cuda.heap._fd_exchange import allgather_fds

    size, shared, gate = 16, {"problems": [None] * 16}, threading.Barrier(16)

    class Comm:
        def __init__(self, rank):
            self.rank = rank

        def Get_rank(self):
            return self.rank

        def Get_size(self):
            return size

        def bcast(self, value, root):
            if self.rank == root:
                shared["token"] = value
            gate.wait()
            return shared["token"]

        def allgather(self, problem):
            shared["problems"][self.rank] = problem
            gate.wait()
            return list(shared["problems"])

        def Barrier(self):
            gate.wait()
    results = {}

    def run(rank):
        mine = _memfd(f"rank {rank}")
        fds = allgather_fds(Comm(rank), mine, 20.0, "sharing x")
        results[rank] = [os.pread(fd, 16, 0).decode() for fd in fds]
        for fd in fds + [mine]:
            os.close(fd)
    threads = [threading.Thread(target=run, args=(r,), daemon=True) for r in range(size)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    assert results == {r: [f"rank {k}" for k in range(size)] for r in range(size)}


def test_pes_sharing_a_gpu_need_no_peer_check(fake):
    _gpu_heap.GpuSymmetricHeap(_boot(2), HEAP_SIZE, 1.0).close()
    assert "cuDeviceCanAccessPeer" not in fake.names() and len(fake.args("cuMemImportFromShareableHandle")) == 1


@pytest.mark.parametrize("call", [
    lambda signal: pgas.signal_wait_until(signal, pgas.CMP_EQ, 0),
    lambda signal: pgas.put_signal(np.zeros(1), np.zeros(1), signal, 1, pgas.SIGNAL_SET, 0),
], ids=["signal_wait_until", "put_signal"])
def test_a_strided_signal_is_refused_by_name(fake_runtime, call):
    with pytest.raises(pgas.PgasValueError, match=r"pgas\.(signal_wait_until|put_signal): signal must be "
                                                  r"C-contiguous"):
        call(np.zeros(4, np.uint64)[::2])


def test_the_device_finds_the_mailbox_and_the_host_reads_what_a_check_wrote_there(fake):
    from pgas.core._device_errors import KIND
    from pgas.cuda._error_record import TEXT_WORD
    heap = _gpu_heap.GpuSymmetricHeap(_boot(), HEAP_SIZE, 1.0)
    mailbox = heap.state.mailbox
    assert heap.state.words[STATE_WORDS["mailbox"]] == mailbox.device_address != 0
    assert heap.device_error() is None
    fn = b"pgas.device.put"
    mailbox.words[1:9] = [KIND["PE_RANGE"], 5, 2, 0, 0, 0, 0, len(fn) | 2 << 16]
    mailbox.words[TEXT_WORD:].view(np.uint8)[:len(fn)] = np.frombuffer(fn, np.uint8)
    mailbox.words[TEXT_WORD:].view(np.uint8)[64:66] = np.frombuffer(b"pe", np.uint8)
    assert heap.device_error() is None                     # not complete until the state word says so
    mailbox.words[0] = 2
    error = heap.device_error()
    assert isinstance(error, pgas.PgasValueError)
    assert str(error) == "tid=[0, 0, 0] ctaid=[0, 0, 0]: pgas.device.put: pe must be within [0, 2), got 5 [on PE 0]"
    heap.close()
    assert fake.names().count("cuMemFreeHost") == 1


def test_nbi_copies_and_signals_are_queued_and_not_waited_for(fake_runtime, fake, monkeypatch):
    monkeypatch.setattr(_gpu_ops, "_signal_kernel", _RecordedKernel(fake))
    monkeypatch.setattr(_gpu_ops, "numba_stream", lambda handle: handle)
    _gpu_ops.copy(np.zeros(4), np.ones(4), 4, None, "pgas.put_nbi", nbi=True)
    _gpu_ops.signal_op(np.zeros(1, np.uint64), 1, pgas.SIGNAL_SET, 0, None, "pgas.put_signal_nbi", nbi=True)
    assert fake.names() == ["cuMemcpyAsync", "launch"]     # on the internal stream, nothing waited for
    assert fake.args("cuMemcpyAsync")[0][3] == INTERNAL and fake.calls[1][1][0] == INTERNAL
    _gpu_ops.flush(0x777, "pgas.flush")
    assert fake.calls[-1] == ("cuStreamSynchronize", (0x777,))
    _gpu_ops.flush(None, "pgas.flush")
    _gpu_ops.quiet(None, "pgas.quiet")
    assert fake.names()[-2:] == ["cuCtxSynchronize", "cuCtxSynchronize"]   # errors read as device errors


def test_host_atomics_and_signals_to_a_pe_the_gpu_cannot_reach_launch_nothing(fake_runtime, fake, monkeypatch):
    """A device check would trap, and a trap ends the CUDA context: the host refuses first."""
    monkeypatch.setattr(_gpu_ops, "_signal_kernel", _RecordedKernel(fake))
    monkeypatch.setattr(_gpu_ops, "_atomic_kernel", lambda *key: _RecordedKernel(fake))
    with pytest.raises(pgas.PgasError, match=r"pgas.atomic_add: PE 2 is on another node"):
        _gpu_ops.atomic("atomic_add", 1, False, np.zeros(1, np.int64), 0, 1, 2, None, "pgas.atomic_add")
    with pytest.raises(pgas.PgasError, match=r"pgas.signal_op: PE 3 is on another node"):
        _gpu_ops.signal_op(np.zeros(1, np.uint64), 1, pgas.SIGNAL_SET, 3, None, "pgas.signal_op")
    assert fake.calls == []


def test_host_atomics_run_the_device_atomic_and_fetch_its_value(fake_runtime, fake, monkeypatch):
    kernels = []

    def recorded(name, operands, fetch):
        kernels.append((name, operands, fetch))
        return _RecordedKernel(fake)
    monkeypatch.setattr(_gpu_ops, "_atomic_kernel", recorded)
    monkeypatch.setattr(_gpu_ops, "numba_stream", lambda handle: handle)
    monkeypatch.setattr(_gpu_ops, "device_array_at", lambda address, shape, dtype: ("scratch", address))
    fake.answers["cuMemcpyDtoHAsync"] = lambda host, device, nbytes, stream: ctypes.memmove(
        host, np.array([2.5], np.float32).ctypes.data, nbytes)
    dest = np.zeros(1, np.float32)
    old = _gpu_ops.atomic("atomic_fetch_add", 1, True, dest, np.float32(0), np.float32(1.5), 1, 0x777, "f")
    assert old == np.float32(2.5) and type(old) is np.float32
    # a fetching atomic waits for its stream, then reads the word the kernel wrote
    assert fake.names() == ["cuMemAllocAsync", "launch", "cuStreamSynchronize", "cuMemcpyDtoHAsync",
                            "cuStreamSynchronize", "cuMemFreeAsync"]
    assert fake.calls[1][1] == (0x777, (dest, np.float32(0), np.float32(1.5), 1, ("scratch", 0x2000_0000)))
    del fake.calls[:]
    assert _gpu_ops.atomic("atomic_inc", 0, False, dest, 0, 1, 0, 0x777, "f") is None
    assert fake.names() == ["launch"]                       # queued on the given stream
    _gpu_ops.atomic("atomic_inc", 0, False, dest, 0, 1, 0, None, "f")
    assert fake.calls[-1] == ("cuStreamSynchronize", (INTERNAL,))
    assert kernels == [("atomic_fetch_add", 1, True), ("atomic_inc", 0, False), ("atomic_inc", 0, False)]


class _DeviceArray:
    """A device array as pgas sees one (``__cuda_array_interface__``), over ``values``' host
    memory, or at ``address`` (where nothing may read it)."""

    def __init__(self, values: np.ndarray, address: int | None = None):
        self.values, self.dtype, self.shape, self.size = values, values.dtype, values.shape, values.size
        self.__cuda_array_interface__ = {"data": (address or values.ctypes.data, False), "shape": values.shape,
                                         "typestr": values.dtype.str, "version": 3}


@pytest.fixture
def direct(fake_runtime, fake, monkeypatch):
    """The cuda fast path of host put/get over a node of PEs 0 and 1 (PE 2 on another
    node); the fake driver's copies move real bytes, so the heap is host memory here."""
    from pgas.host.rma import _gpu_direct

    heaps = np.zeros((2, 64), np.int64)                       # PE 0's heap, PE 1's (mapped here)
    fake.answers["cuMemcpyAsync"] = lambda dst, src, nbytes, stream: ctypes.memmove(dst, src, nbytes) and None
    monkeypatch.setattr(_gpu_direct, "_device_array_type", lambda: _DeviceArray)
    base = heaps.ctypes.data
    heap = SimpleNamespace(bases=[base, base + heaps[0].nbytes, None], base=base, size=heaps[0].nbytes,
                           stream=INTERNAL)
    copies = _gpu_direct.GpuDirectCopies(heap, ["self", "p2p", "ibgda"])
    copies.heaps = heaps
    del fake.calls[:]
    return copies


def test_a_host_put_or_get_within_the_node_is_one_copy_and_a_synchronize(direct, fake):
    """cuda: a put or get with no stream to a PE whose heap is mapped here is one
    cuMemcpyAsync on the internal stream at the peer's base + the array's heap offset, and
    the stream's synchronize; a symmetric array's place is learned once (kept by object)."""
    heaps = direct.heaps
    sym = _DeviceArray(heaps[0, 8:16], heaps[0, 8:].ctypes.data)       # symmetric: heap offset 64
    assert direct.put(sym, np.arange(8, dtype=np.int64), 1)
    assert heaps[1, 8:16].tolist() == list(range(8)) and not heaps[0].any()
    assert fake.names() == ["cuMemcpyAsync", "cuStreamSynchronize"]
    assert fake.args("cuMemcpyAsync")[0][0] == heaps[1, 8:].ctypes.data and fake.args("cuMemcpyAsync")[0][2:] == (
        64, INTERNAL)
    sym.__cuda_array_interface__ = None            # a repeated call reads nothing of the array again
    back = np.zeros(5, np.int64)
    assert direct.get(back, sym, 1)
    assert back.tolist() == list(range(5))
    local = _DeviceArray(np.full(8, 7, np.int64))    # device memory outside the heap, to this PE's own copy
    assert direct.put(sym, local, 0) and heaps[0, 8:16].tolist() == [7] * 8


@pytest.mark.parametrize("case", ["another node", "pe not an int", "pe out of range", "too large", "other dtype",
                                  "not contiguous", "read-only dest", "not in the heap", "not an array"])
def test_a_host_put_or_get_the_fast_path_does_not_take_goes_the_general_way(direct, fake, case):
    """Everything but the plain case returns False (the general path checks it and raises
    the errors) and copies nothing."""
    heaps = direct.heaps
    sym = _DeviceArray(heaps[0, :8], heaps.ctypes.data)
    values = np.arange(8, dtype=np.int64)
    taken = {"another node": lambda: direct.put(sym, values, 2),
             "pe not an int": lambda: direct.put(sym, values, 1.0),
             "pe out of range": lambda: direct.put(sym, values, 5),
             "too large": lambda: direct.put(sym, np.arange(9, dtype=np.int64), 1),
             "other dtype": lambda: direct.put(sym, values.astype(np.int32), 1),
             "not contiguous": lambda: direct.put(sym, np.arange(16, dtype=np.int64)[::2], 1),
             "read-only dest": lambda: direct.get(_read_only(8), sym, 1),
             "not in the heap": lambda: direct.put(_DeviceArray(np.zeros(8, np.int64)), values, 1),
             "not an array": lambda: direct.put(sym, [1, 2], 1)}[case]()
    assert taken is False and fake.calls == [] and not heaps.any()


def _read_only(n: int) -> np.ndarray:
    a = np.zeros(n, np.int64)
    a.setflags(write=False)
    return a


@pytest.mark.parametrize("in_place", [False, True])
def test_a_host_reduction_over_nodes_goes_through_host_memory_after_the_streams_work(fake_runtime, fake, in_place):
    """The device reductions and scans read members' data in place, within a node: a host
    one over a team that spans nodes (PE 2 here) copies its src out behind the stream's
    work, runs on host copies (the simulator's MPI runner, here a stand-in) and copies the
    result back, each copy queued on the stream and waited for, complete on return; over a team within the node
    it is not staged (the device collective runs)."""
    fake.answers["cuMemcpyAsync"] = lambda dst, src, nbytes, stream: ctypes.memmove(dst, src, nbytes) and None
    src = _DeviceArray(np.arange(4.0))
    dest = src if in_place else _DeviceArray(np.zeros(4))
    given = []

    def on_host(host_d, host_s):
        given.append((host_d is host_s, host_s.tolist()))
        host_d[...] = host_s * 2

    def call(pes):
        return SimpleNamespace(rt=fake_runtime, team=SimpleNamespace(pes=pes), fn="pgas.sum_inscan")
    assert not _collective_call.staged(call((0, 1)), dest, src, in_place, None, on_host)
    assert fake.names() == [] and given == []
    assert _collective_call.staged(call((0, 2)), dest, src, in_place, 0x777, on_host)
    assert fake.names() == ["cuMemcpyAsync", "cuStreamSynchronize", "cuMemcpyAsync", "cuStreamSynchronize"]
    assert {args[-1] for args in fake.args("cuStreamSynchronize") + fake.args("cuMemcpyAsync")} == {0x777}
    (_, from_gpu, _, _), (to_gpu, _, nbytes, _) = fake.args("cuMemcpyAsync")
    assert (from_gpu, to_gpu, nbytes) == (src.values.ctypes.data, dest.values.ctypes.data, 32)
    assert given == [(in_place, [0.0, 1.0, 2.0, 3.0])] and dest.values.tolist() == [0.0, 2.0, 4.0, 6.0]


class _NicTransports:
    """What the cuda backend's host copies to other nodes need of ``Transports``: each
    ``copy_span`` is recorded (in ``spans``, and among the fake driver's calls, to see the
    order), and does what the NIC would (moves the bytes between the local address and
    ``remote``, PE 2's heap; this PE's heap only the NIC's window reads). ``local_key``
    checks that the array it registers is the memory the request names."""

    def __init__(self, remote: np.ndarray, fake):
        from pgas.cuda.nic._nic_host import PinnedMemory, PinnedStaging
        from pgas.transport._routing import Transports

        self.remote, self.spans, self.fake, self.registered = remote.view(np.uint8), [], fake, None
        self.kinds = ["self", "p2p", "ibgda", "unreachable"]
        self.heap_region = MemoryRegion(HEAP_BASE, HEAP_SIZE, 0x11, 0, 0, window=object())    # the GPU heap
        nic = SimpleNamespace(register=lambda view, access: SimpleNamespace(lkey=0x33), deregister=lambda region: None)
        self.gpu_path = SimpleNamespace(staging=PinnedStaging(PinnedMemory(), nic))
        self.recent = SimpleNamespace(release=lambda registration: self.spans.append(("released", registration)))
        self.through_nic = lambda fn, pe: Transports.through_nic(self, fn, pe)

    def local_key(self, data):
        self.registered = (data.__array_interface__["data"][0], data.nbytes)
        return 0x22, "kept registration"

    def copy_span(self, fn, pe, to_peer, offset, laddr, lkey, nbytes):
        self.spans.append((pe, to_peer, offset, lkey, nbytes))
        self.fake.calls.append(("copy_span", (pe, to_peer)))
        if lkey == 0x22:
            assert self.registered == (laddr, nbytes), (self.registered, laddr, nbytes)
        if HEAP_BASE <= laddr < HEAP_BASE + HEAP_SIZE:
            return
        if to_peer:
            self.remote[offset:offset + nbytes] = np.frombuffer((ctypes.c_uint8 * nbytes).from_address(laddr), np.uint8)
        else:
            ctypes.memmove(laddr, self.remote[offset:].ctypes.data, nbytes)


@pytest.fixture
def nic_runtime(fake_runtime, fake, monkeypatch):
    """PE 2 is on another node, reached through the NIC; its heap is ``.remote`` (at offset
    0x40 the symmetric array's bytes); the fake driver's copies move real bytes."""
    from pgas.cuda.nic import _nic_host

    fake_runtime.heap = SimpleNamespace(stream=INTERNAL,
                                        offset_of=lambda arr, fn, what: 0x40)
    fake.answers["cuMemcpyDtoHAsync"] = lambda host, device, nbytes, stream: ctypes.memmove(host, device, nbytes)
    fake.answers["cuMemcpyHtoDAsync"] = lambda device, host, nbytes, stream: ctypes.memmove(device, host, nbytes)
    monkeypatch.setattr(_nic_host, "STAGING_BYTES", 64)
    fake_runtime.transports = _NicTransports(np.zeros(64, np.int64), fake)
    del fake.calls[:]      # the staging buffer's allocation (at init)
    return fake_runtime


def test_host_put_and_get_to_another_node_go_through_the_nic_after_the_stream(nic_runtime, fake):
    """cuda: the copy engines reach only the node's heaps; a PE on another node is reached by
    requests on the host's queue pairs, after the work on the call's stream, and complete on
    return: host memory by its registration, this PE's heap through the NIC's window."""
    transports, sym = nic_runtime.transports, _DeviceArray(np.zeros(8, np.int64), HEAP_BASE + 0x40)
    mine = np.arange(9, dtype=np.int64)
    _gpu_ops.copy_with(2, True, sym, mine, 9, 0x777, "pgas.put_nbi", nbi=True)
    assert fake.calls == [("cuStreamSynchronize", (0x777,)), ("copy_span", (2, True))]
    assert transports.spans == [(2, True, 0x40, 0x22, 72), ("released", "kept registration")]
    assert transports.remote[0x40:0x40 + 72].view(np.int64).tolist() == list(range(9))
    back = np.zeros(9, np.int64)
    _gpu_ops.copy_with(2, False, sym, back, 9, None, "pgas.get", nbi=False)
    assert back.tolist() == list(range(9))
    assert fake.calls[-2:] == [("cuStreamSynchronize", (INTERNAL,)), ("copy_span", (2, False))]
    grid = np.asfortranarray(np.arange(6, dtype=np.int64).reshape(2, 3))   # in place, in its memory order
    _gpu_ops.copy_with(2, True, sym, grid, 6, None, "pgas.put", nbi=False)
    assert transports.remote[0x40:0x40 + 48].view(np.int64).tolist() == [0, 3, 1, 4, 2, 5]
    in_heap = _DeviceArray(np.zeros(4, np.int64), HEAP_BASE + 0x1000)
    _gpu_ops.copy_with(2, True, sym, in_heap, 4, None, "pgas.put", nbi=False)
    assert transports.spans[-1] == (2, True, 0x40, 0x11, 32)      # the heap's own key: the NIC's window
    with pytest.raises(pgas.PgasError, match=r"pgas.put: PE 3 is on another node and the cuda backend reaches"):
        _gpu_ops.copy_with(3, True, sym, mine, 9, None, "pgas.put", nbi=False)


def test_device_memory_outside_the_heap_goes_to_another_node_through_pinned_staging(nic_runtime, fake):
    """A device array pgas did not allocate is neither in the NIC's window nor host memory:
    it goes through the pinned staging buffer (registered with the NIC), a piece at a time,
    each copy landed on the internal stream before the buffer is used again."""
    transports, sym = nic_runtime.transports, _DeviceArray(np.zeros(25, np.int64), HEAP_BASE + 0x40)
    source = _DeviceArray(np.arange(25, dtype=np.int64) * 3)          # 200 bytes: pieces of 64, 64, 64, 8
    _gpu_ops.copy_with(2, True, sym, source, 25, 0x777, "pgas.put", nbi=False)
    assert fake.names() == ["cuStreamSynchronize", *["cuMemcpyDtoHAsync", "cuStreamSynchronize", "copy_span"] * 4]
    assert [args[3] for args in fake.args("cuMemcpyDtoHAsync")] == [INTERNAL] * 4
    assert transports.spans == [(2, True, 0x40 + start, 0x33, n) for start, n in ((0, 64), (64, 64), (128, 64),
                                                                                 (192, 8))]
    assert transports.remote[0x40:0x40 + 200].view(np.int64).tolist() == [3 * i for i in range(25)]
    del fake.calls[:], transports.spans[:]
    dest = _DeviceArray(np.zeros(25, np.int64))
    _gpu_ops.copy_with(2, False, sym, dest, 25, None, "pgas.get", nbi=False)
    assert fake.names() == ["cuStreamSynchronize", *["copy_span", "cuMemcpyHtoDAsync", "cuStreamSynchronize"] * 4]
    assert {args[3] for args in fake.args("cuMemcpyHtoDAsync")} == {INTERNAL}
    assert fake.args("cuStreamSynchronize") == [(INTERNAL,)] * 5
    assert dest.values.tolist() == [3 * i for i in range(25)] and len(transports.spans) == 4


def test_the_nics_window_on_gpu_memory_copies_through_pinned_memory(fake, monkeypatch):
    """The NIC (native code, or the NIC's thread through the same calls) reads and writes
    GPU memory a pinned piece at a time (a copy from pageable memory would be staged by the
    driver, synchronously), on its own stream in this PE's context, each piece synchronized
    before the next; atomics by the kernel, launched once at init. (libcuda's five calls
    by a stand-in over host memory: ``tests/window_standin.py``.)"""
    import window_standin
    from pgas.cuda.nic import _nic_host
    from pgas.wire import _window

    monkeypatch.setattr(_nic_host, "STAGING_BYTES", 64)
    monkeypatch.setattr(_nic_host, "libcuda_functions", window_standin.driver)
    monkeypatch.setattr(_nic_host, "_atomic_kernel", lambda: (0xE0, 0x4B))
    window_standin.reset()
    window_standin.context(0x99)
    gpu = np.zeros(40, np.int64)
    window = _nic_host.GpuWindow(gpu.ctypes.data, 0, _nic_host.PinnedMemory())
    assert window_standin.check_staged(window) == {"copy_out": 0, "copy_in": 0, "launch": 1}    # (at init)
    window.write(8, np.arange(30, dtype=np.int64).view(np.uint8))
    assert gpu[1:31].tolist() == list(range(30))
    assert window.read(16, 80).view(np.int64).tolist() == list(range(1, 11))
    gpu[5] = -3
    assert window.atomic(40, mlx5.OP_ATOMIC_FA, [5, 0, 0, 0], 8) == 2 ** 64 - 3 and gpu[5] == 2
    assert window_standin.check_staged(window) == {"copy_out": 2, "copy_in": 4, "launch": 2}
    # each call in the PE's context, the calling thread's own (here 0x99) put back after it
    sets = [call[1] for call in window_standin.calls() if call[0] == "set_context"]
    assert sets == [0xC7, 0x99] * 4 and window_standin.context() == 0x99, sets
    assert window.native.failures == 0 and window.native.table[_window.W_STREAM] == INTERNAL
    window_standin.fail(True)
    with pytest.raises(pgas.PgasError, match="could not copy out of GPU memory"):
        window.read(0, 8)
    window_standin.fail(False)


@pytest.mark.parametrize("native", [True, False])
def test_the_gpus_queues_are_polled_by_the_native_nic_or_by_the_nics_thread(fake, native):
    """Each GPU queue (pinned host memory, its descriptor copied to device memory) is added
    to the native NIC polled (GPU threads cannot ring), through that NIC's endpoint to its
    peer, with the rung word of its pinned descriptor; without the native NIC the NIC's
    thread serves and polls it. Either way the device state gets a NIC row per peer."""
    from pgas.cuda.nic import _nic_host
    from pgas.nic._queue_pair import QueuePair
    from pgas.nic._regions import RemoteRegion
    from pgas.transport import _ibgda_code as code

    class FakeNic:
        peers = [2, 3]
        remote = {2: RemoteRegion(0x7000, 64, 0x52), 3: RemoteRegion(0x9000, 64, 0x53)}

        def __init__(self):
            self.polled, self.qps = [], []

        def create_qp(self, peer, collapsed=False, allocate=np.zeros, served=True):
            qp = QueuePair(qpn=0x100 + len(self.qps), peer=peer, collapsed=collapsed, allocate=allocate)
            self.qps.append((qp, served))
            return qp

        def register(self, view, access):
            return SimpleNamespace(lkey=0x40 + len(self.qps))

        def poll(self, qp):
            self.polled.append(qp.peer)

    class FakeNative:
        def __init__(self):
            self.added = []

        def endpoints(self, lane):
            return {2: 0xE2, 3: 0xE3}

        def add(self, qp, endpoint, rung_at, polled):
            self.added.append((qp.peer, endpoint, rung_at, polled))
            return len(self.added) - 1

    nic, served_by = FakeNic(), FakeNative() if native else None
    state = SimpleNamespace()
    state.set_nic = lambda rows, lkey: setattr(state, "nic", (rows.copy(), lkey))
    queues = _nic_host.GpuQueues(nic, _nic_host.PinnedMemory(), 0x11, state, 4, served_by)
    assert [served for _, served in nic.qps] == [not native] * 2
    if native:
        assert [(peer, endpoint, polled) for peer, endpoint, _, polled in served_by.added] == [(2, 0xE2, True),
                                                                                          (3, 0xE3, True)]
        assert [added[2] for added in served_by.added] == [int(queue.descriptor[code.W["rung_at"]])
                                                           for queue in queues.queues.values()]
        assert nic.polled == []
    else:
        assert nic.polled == [2, 3]
    rows, lkey = state.nic
    assert lkey == 0x11 and rows[2, 1:3].tolist() == [0x52, 0x7000] and rows[3, 1:3].tolist() == [0x53, 0x9000]


class _NumbaLikeArray:
    """What numba's device arrays offer pgas's host calls: size, dtype, a ``flags`` dict,
    ``__cuda_array_interface__``; no ``itemsize``, no ``flags.c_contiguous``."""

    def __init__(self, address: int, shape: tuple, dtype):
        self.shape, self.dtype = shape, np.dtype(dtype)
        self.size = int(np.prod(shape))
        self.flags = {"C_CONTIGUOUS": True, "F_CONTIGUOUS": len(shape) == 1}
        self.__cuda_array_interface__ = {"data": (address, False), "shape": shape, "typestr": self.dtype.str,
                                         "version": 3}


class _RecordingHeap:
    """A heap's external-memory calls, recorded; ``failure``: what map_external reports."""

    def __init__(self, failure=None):
        self.calls, self.failure, self.bases, self.size = [], failure, [HEAP_BASE], HEAP_SIZE

    def external_memory(self, address, nbytes, fn):
        self.calls.append(("external_memory", address, nbytes))
        return SimpleNamespace(mapped=4 << 20)

    def external_offset(self, memory, allocator):
        self.calls.append(("external_offset",))
        return 2 * HEAP_SIZE

    def map_external(self, offset, memory):
        self.calls.append(("map_external", offset))
        return self.failure

    def unmap_external(self, offset, nbytes):
        self.calls.append(("unmap_external", offset, nbytes))

    def release_external_offset(self, offset, allocator):
        self.calls.append(("release_external_offset", offset))

    def forget_external(self, memory):
        self.calls.append(("forget_external",))

    def array_at(self, offset, shape, dtype, order="C"):
        self.calls.append(("array_at", offset, shape, order))
        return "the symmetric array"


@pytest.mark.parametrize("failure", [None, "PE 1 cannot map it"])
def test_register_symmetric_takes_gpu_arrays_and_undoes_a_failed_mapping(monkeypatch, failure):
    from pgas.host.memory import _symmetric_registration as registration

    heap = _RecordingHeap(failure)
    transports = SimpleNamespace(add_symmetric=lambda offset, nbytes, fn: heap.calls.append(("add_symmetric", offset,
                                                                                           nbytes)))
    rt = SimpleNamespace(heap=heap, boot=SimpleNamespace(comm=None), allocator=None, symmetric_registrations={},
                         my_pe=0, transports=transports)
    monkeypatch.setattr(registration, "runtime", lambda fn: rt)
    monkeypatch.setattr(registration, "as_ndarray", lambda a, fn, what: a)
    monkeypatch.setattr(registration, "wait_all", lambda comm, fn, record: None)
    user = _NumbaLikeArray(USER, (3, 1000), np.float32)
    if failure is None:
        assert registration.register_symmetric(user) == "the symmetric array"
        assert rt.symmetric_registrations == {2 * HEAP_SIZE: (4 << 20, 12000, user)}
        assert heap.calls[-1] == ("array_at", 2 * HEAP_SIZE, (3, 1000), "C")
        assert ("add_symmetric", 2 * HEAP_SIZE, 4 << 20) in heap.calls     # (registered for the NIC too)
    else:
        with pytest.raises(pgas.PgasError, match="pgas.register_symmetric: PE 1 cannot map it"):
            registration.register_symmetric(user)
        assert ("unmap_external", 2 * HEAP_SIZE, 4 << 20) in heap.calls and not rt.symmetric_registrations
        assert ("release_external_offset", 2 * HEAP_SIZE) in heap.calls
        assert not [call for call in heap.calls if call[0] == "add_symmetric"]
    assert heap.calls[:3] == [("external_memory", USER, 12000), ("external_offset",), ("map_external", 2 * HEAP_SIZE)]
    assert ("forget_external",) in heap.calls       # this process's handle and descriptor are dropped either way


def test_under_pgas_debug_registered_memory_outside_the_allocator_counts_as_live():
    from pgas.runtime._allocator import HeapAllocator
    from pgas.runtime._state import Runtime

    rt = Runtime.__new__(Runtime)       # (only what symmetric_offset reads)
    at = []
    rt.heap = SimpleNamespace(offset_of=lambda data, fn, what: at[0])
    rt.debug, rt.allocator = True, HeapAllocator(HEAP_SIZE)
    rt.symmetric_registrations = {2 * HEAP_SIZE: (2 << 20, 1000, None)}   # on cuda: after the heap
    data = np.zeros(100, np.uint8)
    at[:] = [2 * HEAP_SIZE + 8]
    assert rt.symmetric_offset(data, "f", "a") == 2 * HEAP_SIZE + 8
    at[:] = [2 * HEAP_SIZE + (2 << 20) - 50]
    with pytest.raises(pgas.PgasValueError, match="runs 50 bytes past the end of its symmetric array"):
        rt.symmetric_offset(data, "f", "a")
    at[:] = [3 * HEAP_SIZE]
    with pytest.raises(pgas.PgasValueError, match="is not inside any live symmetric array"):
        rt.symmetric_offset(data, "f", "a")
