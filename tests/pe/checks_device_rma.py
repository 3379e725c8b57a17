"""Device RMA inside kernels: p/g, put/get (thread, warp, block, nbi), strided, many threads."""
import numpy as np
import pytest
from numba import cuda

import pgas
import pgas.device as dev
from _util import DTYPES, SIZES, pattern, ring_neighbours, simulator_only


@cuda.jit
def put_kernel(dest, src, pe):
    dev.put(dest, src, pe)


@cuda.jit
def get_kernel(dest, src, pe):
    dev.get(dest, src, pe)


@cuda.jit
def nbi_kernel(dest, src, fetched, pe):
    dev.put_nbi(dest, src, pe)
    dev.get_nbi(fetched, src, pe)
    dev.quiet()


@cuda.jit
def block_kernel(dest, src, fetched, pe):
    dev.put_block(dest, src, pe)
    dev.get_block(fetched, src, pe)
    dev.fence()      # the second put to dest is delivered after the first
    dev.put_nbi_block(dest, src, pe)
    dev.get_nbi_block(fetched, src, pe)
    dev.quiet()


@cuda.jit
def warp_kernel(dest, src, fetched, pe, chunk):
    # Warp w moves elements [w*chunk, (w+1)*chunk) with the whole warp cooperating.
    w = cuda.threadIdx.x // 32
    lo = w * chunk
    dev.put_warp(dest[lo:lo + chunk], src[lo:lo + chunk], pe)
    dev.get_nbi_warp(fetched[lo:lo + chunk], src[lo:lo + chunk], pe)
    dev.quiet()


@cuda.jit
def p_kernel(dest, value, pe):
    i = cuda.threadIdx.x
    dev.p(dest[i:], value + i, pe)     # every thread writes its own element


@cuda.jit
def p_two_kernel(dest, first, second, pe):
    if cuda.threadIdx.x == 0:
        dev.p(dest[0:], first, pe)
    else:
        dev.p(dest[1:], second, pe)


@cuda.jit
def g_kernel(dest, got, pe):
    i = cuda.threadIdx.x
    got[i] = dev.g(dest[i:], pe)


@cuda.jit
def strided_kernel(dest, src, fetched, pe):
    dev.iput(dest, src, 3, 2, 5, pe)     # src[0,2,..,8] -> dest[0,3,..,12]
    dev.iget(fetched, src, 2, 3, 4, pe)  # peer src[0,3,6,9] -> fetched[0,2,4,6]


def check_put_and_get_every_size_and_dtype():
    me, n, right, left = ring_neighbours()
    for dtype in DTYPES:
        for size in SIZES:
            src = pgas.empty(size, dtype)
            src.copy_to_device(pattern(me, size, dtype))
            dest = pgas.zeros(size, dtype)
            fetched = pgas.zeros(size, dtype)
            put_kernel[1, 1](dest, src, right)
            get_kernel[1, 1](fetched, src, right)
            pgas.barrier_all()
            assert np.array_equal(dest.copy_to_host(), pattern(left, size, dtype)), (dtype, size)
            assert np.array_equal(fetched.copy_to_host(), pattern(right, size, dtype)), (dtype, size)
            pgas.barrier_all()
            for a in (fetched, dest, src):
                pgas.free(a)


def check_nbi_forms_complete_at_quiet():
    me, n, right, left = ring_neighbours()
    src = pgas.empty(1001, np.float64)
    src.copy_to_device(pattern(me, 1001, np.float64))
    dest, fetched = pgas.zeros(1001, np.float64), pgas.zeros(1001, np.float64)
    pgas.barrier_all()
    nbi_kernel[1, 1](dest, src, fetched, right)
    pgas.barrier_all()
    assert np.array_equal(dest.copy_to_host(), pattern(left, 1001, np.float64))
    assert np.array_equal(fetched.copy_to_host(), pattern(right, 1001, np.float64))
    for a in (fetched, dest, src):
        pgas.free(a)


def check_block_forms_with_many_threads():
    me, n, right, left = ring_neighbours()
    for size in (1, 33, 300_000):
        src = pgas.empty(size, np.int32)
        src.copy_to_device(pattern(me, size, np.int32))
        dest, fetched = pgas.zeros(size, np.int32), pgas.zeros(size, np.int32)
        pgas.barrier_all()
        block_kernel[1, 64](dest, src, fetched, right)
        pgas.barrier_all()
        assert np.array_equal(dest.copy_to_host(), pattern(left, size, np.int32)), size
        assert np.array_equal(fetched.copy_to_host(), pattern(right, size, np.int32)), size
        for a in (fetched, dest, src):
            pgas.free(a)


def check_warp_forms_each_warp_its_chunk():
    me, n, right, left = ring_neighbours()
    chunk, warps = 37, 3
    size = chunk * warps
    src = pgas.empty(size, np.int64)
    src.copy_to_device(pattern(me, size, np.int64))
    dest, fetched = pgas.zeros(size, np.int64), pgas.zeros(size, np.int64)
    pgas.barrier_all()
    warp_kernel[1, 32 * warps](dest, src, fetched, right, chunk)
    pgas.barrier_all()
    assert np.array_equal(dest.copy_to_host(), pattern(left, size, np.int64))
    assert np.array_equal(fetched.copy_to_host(), pattern(right, size, np.int64))
    for a in (fetched, dest, src):
        pgas.free(a)


def check_p_and_g_from_many_threads():
    me, n, right, left = ring_neighbours()
    threads = 96
    dest = pgas.zeros(threads, np.int64)
    got = np.zeros(threads, np.int64)
    pgas.barrier_all()
    p_kernel[1, threads](dest, 1000 * me, right)
    pgas.barrier_all()
    g_kernel[1, threads](dest, got, me)       # what the left neighbour wrote here ...
    assert got.tolist() == [1000 * left + i for i in range(threads)]     # ... read back through g
    pgas.barrier_all()
    assert dest.copy_to_host().tolist() == [1000 * left + i for i in range(threads)]
    pgas.free(dest)


def check_p_carries_the_extremes_of_every_type():
    """The least and greatest value of each integer dtype (a Python int, and a numpy scalar of
    that dtype) and floats arrive whole: through the NIC, their bits in an inline write."""
    me, n, right, left = ring_neighbours()
    integers = (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)
    cases = [(np.dtype(t), int(np.iinfo(t).min), t(np.iinfo(t).max)) for t in integers]
    cases += [(np.dtype(np.float64), -1.5, 2.0 ** 100), (np.dtype(np.float32), 0.1, np.float32(-3e38))]
    arrays = [pgas.zeros(2, dtype) for dtype, _, _ in cases]
    pgas.barrier_all()
    for dest, (_, first, second) in zip(arrays, cases):
        p_two_kernel[1, 2](dest, first, second, right)
    pgas.barrier_all()
    for dest, (dtype, first, second) in zip(arrays, cases):
        assert dest.copy_to_host().tolist() == np.array([first, second], dtype).tolist(), dtype
        pgas.free(dest)


def check_strided_iput_and_iget():
    me, n, right, left = ring_neighbours()
    src = pgas.empty(12, np.int32)
    src.copy_to_device(np.arange(12, dtype=np.int32) + 100 * me)
    dest = pgas.full(13, -1, np.int32)
    fetched = pgas.full(8, -1, np.int32)
    pgas.barrier_all()
    strided_kernel[1, 1](dest, src, fetched, right)
    pgas.barrier_all()
    expected = np.full(13, -1, np.int32)
    expected[0:13:3] = np.arange(0, 10, 2) + 100 * left
    assert np.array_equal(dest.copy_to_host(), expected)
    expected_fetch = np.full(8, -1, np.int32)
    expected_fetch[0:8:2] = np.arange(0, 12, 3) + 100 * right
    assert np.array_equal(fetched.copy_to_host(), expected_fetch)
    for a in (fetched, dest, src):
        pgas.free(a)


@cuda.jit
def blocked_kernel(dest, src, fetched, pe):
    dev.ibput(dest, src, 5, 3, 3, 4, pe)     # src blocks [0:3],[3:6],[6:9],[9:12] -> dest[0:3],[5:8],..
    dev.ibget(fetched, src, 3, 4, 2, 3, pe)  # peer src [0:2],[4:6],[8:10] -> fetched[0:2],[3:5],[6:8]


@cuda.jit
def blocked_args_kernel(dest, src, dst_stride, src_stride, blocksize, nblocks, pe, get):
    if get:
        dev.ibget(dest, src, dst_stride, src_stride, blocksize, nblocks, pe)
    else:
        dev.ibput(dest, src, dst_stride, src_stride, blocksize, nblocks, pe)


def check_blocked_strided_ibput_and_ibget():
    me, n, right, left = ring_neighbours()
    src = pgas.empty(12, np.int32)
    src.copy_to_device(np.arange(12, dtype=np.int32) + 100 * me)
    dest = pgas.full(18, -1, np.int32)
    fetched = pgas.full(9, -1, np.int32)
    pgas.barrier_all()
    blocked_kernel[1, 1](dest, src, fetched, right)
    pgas.barrier_all()
    expected = np.full(18, -1, np.int32)
    for b in range(4):
        expected[b * 5:b * 5 + 3] = np.arange(b * 3, b * 3 + 3) + 100 * left
    assert dest.copy_to_host().tolist() == expected.tolist()
    expected_fetch = np.full(9, -1, np.int32)
    for b in range(3):
        expected_fetch[b * 3:b * 3 + 2] = np.arange(b * 4, b * 4 + 2) + 100 * right
    assert fetched.copy_to_host().tolist() == expected_fetch.tolist()
    pgas.barrier_all()
    # nothing moves with nblocks == 0 or blocksize == 0
    blocked_args_kernel[1, 1](dest, src, 3, 3, 3, 0, right, False)
    blocked_args_kernel[1, 1](fetched, src, 1, 1, 0, 5, right, True)
    pgas.barrier_all()
    assert dest.copy_to_host().tolist() == expected.tolist()
    assert fetched.copy_to_host().tolist() == expected_fetch.tolist()
    for a in (fetched, dest, src):
        pgas.free(a)


@simulator_only("device argument checks stop a kernel with a trap on a GPU")
def check_blocked_strided_errors_name_the_argument():
    dest = pgas.zeros(10, np.int32)
    src = pgas.zeros(10, np.int32)
    cases = [
        ((2, 3, 3, 2, False), r"pgas.device.ibput: dst_stride must be >= blocksize \(blocks may not overlap\); "
                              r"each dest block has 2 elements, 3 needed"),
        ((3, 2, 3, 2, True), r"pgas.device.ibget: src_stride must be >= blocksize \(blocks may not overlap\); "
                             r"each src block has 2 elements, 3 needed"),
        ((4, 3, 3, 3, False), r"pgas.device.ibput: the last block \(at \(nblocks - 1\) \* dst_stride, blocksize "
                              r"long\) must end inside dest; dest has 10 elements, 11 needed"),
        ((3, 4, 3, 3, True), r"pgas.device.ibget: the last block \(at \(nblocks - 1\) \* src_stride, blocksize "
                             r"long\) must end inside src; src has 10 elements, 11 needed"),
        ((0, 1, 1, 1, False), r"pgas.device.ibput: the dest stride must be >= 1, got 0"),
        ((1, -1, 1, 1, False), r"pgas.device.ibput: src stride must be a non-negative integer, got -1"),
        ((1, 1, -1, 1, True), r"pgas.device.ibget: blocksize must be >= 0; blocksize has -1 elements, 0 needed"),
        ((1, 1, 1, -2, True), r"pgas.device.ibget: nblocks must be >= 0; nblocks has -2 elements, 0 needed"),
    ]
    for (dst_stride, src_stride, blocksize, nblocks, get), message in cases:
        with pytest.raises(pgas.PgasValueError, match=message):
            blocked_args_kernel[1, 1](dest, src, dst_stride, src_stride, blocksize, nblocks, 0, get)
    assert dest.copy_to_host().tolist() == [0] * 10
    pgas.barrier_all()
    pgas.free(src)
    pgas.free(dest)
