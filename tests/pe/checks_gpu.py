"""The cuda backend on a real GPU: device arrays, the state block, streams, interop.

Run by tests/test_gpu.py (marked gpu) with PGAS_BACKEND=cuda, several PEs on one GPU.
"""
import numpy as np
import pytest
from numba import cuda
from numba.cuda.cudadrv.devicearray import DeviceNDArray

import pgas
import pgas.device as dev
from _util import pattern, ring_neighbours


# Compiled now, at import: before pgas.init() (the runner initializes after loading this).
@cuda.jit("void(int64[::1])")
def write_my_pe_to_right(out):
    dev.p(out, dev.my_pe(), (dev.my_pe() + 1) % dev.n_pes())


@cuda.jit
def put_block_then_signal(dest, src, signal, pe):
    dev.put_signal_block(dest, src, signal, 1, dev.SIGNAL_ADD, pe)


class StreamProtocol:
    """Any object with CUDA's stream protocol (as cuda.core, CuPy and PyTorch have)."""

    def __init__(self, stream):
        self.stream = stream

    def __cuda_stream__(self):
        return (0, int(self.stream.handle))


def check_backend_is_cuda_and_every_local_peer_is_p2p():
    assert pgas.backend() == "cuda"
    info = pgas.info()
    assert all(t in ("self", "p2p") for t in info["transports"].values()), info["transports"]
    # the GPU heap is registered with the NIC by its dma-buf, keys exchanged at init
    regions = info["memory_regions"]
    assert [r["pe"] for r in regions] == list(range(pgas.n_pes())) and len({r["rkey"] for r in regions}) == len(regions)
    # the heap's whole span: the heap and room for register_symmetric (cuda/heap/_heap.py)
    assert all(r["memory"] == "gpu (dma-buf)" and r["size"] == 2 * info["heap_size"] for r in regions), regions


def check_symmetric_arrays_are_numba_device_arrays_in_the_heap():
    from pgas.runtime._state import runtime
    me, n, right, left = ring_neighbours()
    a = pgas.zeros((3, 5), np.float32)
    assert isinstance(a, DeviceNDArray)
    desc = a.__cuda_array_interface__
    assert desc["shape"] == (3, 5) and desc["typestr"] == "<f4"
    heap = runtime("test").heap
    assert heap.base <= desc["data"][0] < heap.base + heap.size
    assert np.array_equal(a.copy_to_host(), np.zeros((3, 5), np.float32))
    a.copy_to_device(np.full((3, 5), me, np.float32))
    pgas.barrier_all()
    peer = pgas.peer_array(a, right)
    assert isinstance(peer, DeviceNDArray)
    assert np.array_equal(peer.copy_to_host(), np.full((3, 5), right, np.float32))
    pgas.barrier_all()
    pgas.free(a)


def check_full_fills_on_the_device():
    a = pgas.full(1000, 2.5, np.float64)
    assert np.array_equal(a.copy_to_host(), np.full(1000, 2.5))
    pgas.free(a)


def check_kernel_compiled_before_init_works_across_finalize_init():
    me, n, right, left = ring_neighbours()
    for cycle in range(2):
        out = pgas.zeros(1, np.int64)
        write_my_pe_to_right[1, 1](out)
        pgas.barrier_all()
        assert int(out.copy_to_host()[0]) == left, cycle
        pgas.free(out)
        pgas.finalize()
        pgas.init()


def check_host_put_get_on_a_numba_stream_and_a_protocol_stream():
    me, n, right, left = ring_neighbours()
    for size in (1, 1001, 1 << 20):
        dest = pgas.zeros(size, np.int64)
        fetched = np.zeros(size, np.int64)
        src = cuda.to_device(pattern(me, size, np.int64))
        stream = cuda.stream()
        pgas.put(dest, src, right, stream=stream)
        pgas.barrier_all(stream=stream)          # queued: a barrier kernel on the stream
        pgas.get(fetched, dest, right, stream=StreamProtocol(stream))
        stream.synchronize()
        assert np.array_equal(dest.copy_to_host(), pattern(left, size, np.int64)), size
        assert np.array_equal(fetched, pattern(me, size, np.int64)), size
        pgas.barrier_all()
        pgas.free(dest)


def check_host_put_signal_and_wait_on_a_stream():
    me, n, right, left = ring_neighbours()
    dest = pgas.zeros(4096, np.float32)
    signal = pgas.zeros(1, np.uint64)
    stream = cuda.stream()
    pgas.put_signal(dest, np.full(4096, me, np.float32), signal, 1, pgas.SIGNAL_ADD, right, stream=stream)
    assert pgas.signal_wait_until(signal, pgas.CMP_GE, 1, stream=stream) is None
    stream.synchronize()
    assert np.array_equal(dest.copy_to_host(), np.full(4096, left, np.float32))
    assert pgas.signal_wait_until(signal, pgas.CMP_EQ, 1) == 1     # no stream: waits, returns the value
    pgas.barrier_all()
    pgas.free(signal)
    pgas.free(dest)


def check_device_put_signal_block_is_seen_by_a_host_wait():
    me, n, right, left = ring_neighbours()
    dest = pgas.zeros(10_000, np.int32)
    signal = pgas.zeros(1, np.uint64)
    src = cuda.to_device(np.arange(10_000, dtype=np.int32) + me)
    put_block_then_signal[1, 256](dest, src, signal, right)
    assert pgas.signal_wait_until(signal, pgas.CMP_EQ, 1) == 1
    assert np.array_equal(dest.copy_to_host(), np.arange(10_000, dtype=np.int32) + left)
    pgas.barrier_all()
    pgas.free(signal)
    pgas.free(dest)


def check_host_collectives_queued_on_a_stream():
    me, n = pgas.my_pe(), pgas.n_pes()
    stream = cuda.stream()
    src = pgas.empty(3000, np.float64)
    dest = pgas.zeros(3000, np.float64)
    gathered = pgas.zeros(3000 * n, np.float64)
    src.copy_to_device(pattern(me, 3000, np.float64))
    pgas.reduce(pgas.TEAM_WORLD, dest, src, "sum", stream=stream)
    pgas.fcollect(pgas.TEAM_WORLD, gathered, src, stream=stream)
    stream.synchronize()
    assert np.array_equal(dest.copy_to_host(), sum(pattern(pe, 3000, np.float64) for pe in range(n)))
    assert np.array_equal(gathered.copy_to_host(), np.concatenate([pattern(pe, 3000, np.float64) for pe in range(n)]))
    pgas.barrier_all()
    for a in (gathered, dest, src):
        pgas.free(a)


def check_explicit_host_algorithms_are_refused_on_cuda():
    a = pgas.zeros(4, np.float32)
    with pytest.raises(pgas.PgasError, match=r"pgas.reduce: algorithm='ring' is one of the simulator's host "
                                             r"algorithms; on the cuda backend"):
        pgas.reduce(pgas.TEAM_WORLD, a, a, algorithm="ring")
    pgas.free(a)


def check_bad_stream_argument():
    a = pgas.zeros(4, np.float32)
    with pytest.raises(pgas.PgasError, match=r"pgas.put: stream must be None, a numba stream, an object with "
                                             r"__cuda_stream__ or an integer CUstream handle, got str"):
        pgas.put(a, np.zeros(4, np.float32), 0, stream="fast")
    pgas.free(a)


def check_cupy_and_torch_wrap_symmetric_arrays_without_a_copy():
    """Where CuPy or PyTorch is installed: they wrap a symmetric array in place, and pgas
    takes their arrays as sources."""
    a = pgas.zeros(8, np.float32)
    address = a.__cuda_array_interface__["data"][0]
    try:
        import cupy
    except ImportError:
        cupy = None
    if cupy is not None:
        assert cupy.asarray(a).data.ptr == address
        source = cupy.arange(8, dtype=cupy.float32)
        cupy.cuda.Device().synchronize()   # host calls are not ordered after other streams' work
        pgas.put(a, source, pgas.my_pe())
        assert np.array_equal(a.copy_to_host(), np.arange(8, dtype=np.float32))
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        assert torch.as_tensor(a, device="cuda").data_ptr() == address
        source = torch.ones(8, dtype=torch.float32, device="cuda")
        torch.cuda.synchronize()
        pgas.put(a, source, pgas.my_pe())
        assert np.array_equal(a.copy_to_host(), np.ones(8, dtype=np.float32))
    pgas.free(a)
    if cupy is None and torch is None:
        pytest.skip("neither CuPy nor PyTorch is installed")
