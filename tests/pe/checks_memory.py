"""Symmetric memory: same offsets, alignment, contents, peer views, reuse; Fortran order, calloc,
align, malloc_with_hints, byte buffers (registered external memory: checks_host_rma)."""
import os

import numpy as np

import pgas
import pytest
from _util import heap_offset, node_pes, on_simulator, pattern, ring_neighbours, world


def check_same_offset_on_every_pe_and_aligned():
    arrays = [pgas.empty(n, dt) for n, dt in [(1, np.int8), (3, np.float64), (1000, np.int32), ((4, 5), np.uint64)]]
    offsets = [heap_offset(a) for a in arrays]
    assert all(o % 256 == 0 for o in offsets), offsets
    everyone = world().allgather(offsets)
    assert all(o == offsets for o in everyone), everyone
    for a in reversed(arrays):
        pgas.free(a)


def check_zeros_full_empty_shapes_and_values():
    z = pgas.zeros((3, 4), np.float32)
    f = pgas.full(5, 7, np.int64)
    e = pgas.empty((2, 2, 2), np.uint32)
    assert z.shape == (3, 4) and z.dtype == np.float32 and np.all(z.copy_to_host() == 0)
    assert np.array_equal(f.copy_to_host(), np.full(5, 7, np.int64))
    assert e.shape == (2, 2, 2) and e.dtype == np.uint32
    zero_size = pgas.zeros(0, np.int32)
    assert zero_size.size == 0
    for a in (zero_size, e, f, z):
        pgas.free(a)


def check_bfloat16_arrays():
    a = pgas.full(4, 1.5, pgas.bfloat16)
    assert a.dtype == np.dtype(pgas.bfloat16) and a.nbytes == 8 and np.all(a.copy_to_host() == 1.5)
    pgas.free(a)


def check_copy_to_device_and_host_roundtrip():
    a = pgas.zeros(10, np.float64)
    a.copy_to_device(np.linspace(0, 1, 10))
    assert np.array_equal(a.copy_to_host(), np.linspace(0, 1, 10))
    pgas.free(a)


def check_peer_array_sees_the_peer_copy():
    me, node = pgas.my_pe(), node_pes()
    right, left = (node[(node.index(me) + k) % len(node)] for k in (1, -1))   # neighbours on this node
    a = pgas.full(4, me, np.int32)
    for pe in set(range(pgas.n_pes())) - set(node):
        with pytest.raises(pgas.PgasError, match=f"pgas.peer_array: PE {pe} is on another node"):
            pgas.peer_array(a, pe)
    pgas.barrier_all()
    view = pgas.peer_array(a, right)
    assert np.all(view.copy_to_host() == right)
    pgas.barrier_all()
    view[1] = 100 + me          # store into the right neighbour's copy
    pgas.barrier_all()
    assert a.copy_to_host()[1] == 100 + left
    used = pgas.info()["heap_used"]
    if right != me:
        pgas.free(view)         # a view of the peer's memory: a no-op (as in nvshmem4py), not collective
        pgas.free(view[1:])
    assert pgas.info()["heap_used"] == used
    pgas.barrier_all()
    assert pgas.peer_array(a, right).copy_to_host()[1] == 100 + me   # still there, still usable
    pgas.barrier_all()
    pgas.free(a)


def check_freed_space_is_reused():
    before = pgas.info()["heap_used"]
    a = pgas.empty(1000, np.float64)
    offset = heap_offset(a)
    pgas.free(a)
    b = pgas.empty(1000, np.float64)
    assert heap_offset(b) == offset
    pgas.free(b)
    assert pgas.info()["heap_used"] == before


def check_a_zero_size_array_is_freed_once():
    """A zero-byte array takes no heap space, but free knows it: a second free of it, or a free
    of an empty slice of another array, is refused as for any array; on every PE alike."""
    used = pgas.info()["heap_used"]
    empty, shaped, other = pgas.empty(0, np.int64), pgas.zeros((3, 0), np.float32), pgas.buffer(0)
    full = pgas.full(4, 1, np.int32)
    assert pgas.info()["heap_used"] == used + 256
    refused = r"pgas.free: a must be an array returned by pgas.empty/zeros/full .* nor one already freed"
    for not_an_allocation in (full[4:], shaped[1:], empty[:]):       # empty slices: not the arrays themselves
        with pytest.raises(pgas.PgasValueError, match=refused):
            pgas.free(not_an_allocation)
    pgas.free(empty)
    with pytest.raises(pgas.PgasValueError, match=refused):
        pgas.free(empty)                                            # the second free
    pgas.free(shaped)
    pgas.free(other)
    for freed in (shaped, other):
        with pytest.raises(pgas.PgasValueError, match=refused):
            pgas.free(freed)
    pgas.free(full)
    with pytest.raises(pgas.PgasValueError, match=refused):
        pgas.free(full)
    assert pgas.info()["heap_used"] == used
    again = pgas.zeros(0, np.int8)                                  # a new one is freed as before
    pgas.free(again)
    assert world().allgather(pgas.info()["heap_used"]) == [used] * pgas.n_pes()


def check_info_reports_backend_heap_and_transports():
    info = pgas.info()
    me, n = pgas.my_pe(), pgas.n_pes()
    assert info["backend"] == pgas.backend() in ("simulator", "cuda")
    assert info["n_pes"] == n and info["my_pe"] == me
    assert info["heap_size"] == 256 << 20 and 0 < info["heap_used"] < info["heap_size"]
    assert info["transports"][me] == "self"
    node = node_pes()
    remote = os.environ.get("PGAS_REMOTE_TRANSPORT", "ibgda")
    assert all(info["transports"][pe] == ("p2p" if pe in node else remote) for pe in range(n) if pe != me)
    regions = info["memory_regions"]    # every PE's registered heap, as exchanged at init
    # (on cuda the heap's whole span: the heap and room for register_symmetric, cuda/heap/_heap.py)
    registered = (256 << 20) * (2 if info["backend"] == "cuda" else 1)
    assert [r["pe"] for r in regions] == list(range(n)) and all(r["size"] == registered for r in regions)
    assert len({r["rkey"] for r in regions}) == n and "lkey" in regions[me]


# Fortran order ---------------------------------------------------------------------------

def _host(a) -> np.ndarray:
    """The numpy array behind a simulator device array (its layout as it lies in the heap)."""
    from pgas.runtime._arrays import as_ndarray
    return as_ndarray(a, "test", "a")


def check_fortran_order_arrays_lie_column_major_in_the_heap():
    values = np.arange(12, dtype=np.int32).reshape(3, 4)
    f = pgas.full((3, 4), values, np.int32, order="F")
    z = pgas.zeros((2, 5), np.float64, morder="F")      # nvshmem4py's keyword
    e = pgas.empty((4, 3), np.int16, order="F")
    c = pgas.empty((4, 3), np.int16)
    for a in (f, z, e):
        assert a.copy_to_host().flags.f_contiguous and not a.copy_to_host().flags.c_contiguous
    assert c.copy_to_host().flags.c_contiguous
    if on_simulator():
        assert _host(f).flags.f_contiguous and not _host(f).flags.c_contiguous
    assert np.array_equal(f.copy_to_host(), values) and np.all(z.copy_to_host() == 0)
    # element (i, j) at byte (i + 3 j) * 4: column-major in the heap
    assert heap_offset(f[1:, 2:]) - heap_offset(f) == (1 + 3 * 2) * 4
    offsets = [heap_offset(a) for a in (f, z, e, c)]
    assert all(o == offsets for o in world().allgather(offsets))
    for a in (c, e, z, f):
        pgas.free(a)
    with pytest.raises(pgas.PgasValueError, match=r"pgas.empty: order must be 'C' \(row-major\) or 'F'.*got 'K'"):
        pgas.empty(4, order="K")
    with pytest.raises(pgas.PgasValueError, match=r"pgas.zeros: morder must be 'C'.*got 'f'"):
        pgas.zeros(4, morder="f")
    with pytest.raises(pgas.PgasValueError, match=r"pgas.full: order and morder name the same thing"):
        pgas.full(4, 1, order="C", morder="F")


def check_put_and_get_copy_fortran_arrays_whole():
    me, n, right, left = ring_neighbours()
    shape = (3, 5)
    mine = pattern(me, 15, np.int64).reshape(shape)
    src = pgas.full(shape, mine, np.int64, order="F")
    dest = pgas.zeros(shape, np.int64, order="F")
    pgas.barrier_all()
    pgas.put(dest, src, right)                  # symmetric F into symmetric F
    pgas.barrier_all()
    assert np.array_equal(dest.copy_to_host(), pattern(left, 15, np.int64).reshape(shape))
    pgas.barrier_all()
    pgas.put_nbi(dest, mine + 1000, right)      # a C-ordered numpy src: copied element for element
    pgas.quiet()
    pgas.barrier_all()
    assert np.array_equal(dest.copy_to_host(), pattern(left, 15, np.int64).reshape(shape) + 1000)
    out = np.zeros(shape, np.int64, order="F")
    pgas.get(out, src, right)
    assert np.array_equal(out, pattern(right, 15, np.int64).reshape(shape))
    out[...] = 0
    pgas.get_nbi(out, dest, left)               # left's dest holds its left's values + 1000
    pgas.quiet()
    assert np.array_equal(out, pattern((left - 1) % n, 15, np.int64).reshape(shape) + 1000)
    c_ordered = pgas.zeros(shape, np.int64)
    with pytest.raises(pgas.PgasValueError, match=r"pgas.put: dest and src must have the same memory order, got "
                                                  r"dest Fortran-ordered and src C-ordered"):
        pgas.put(dest, c_ordered, right)
    with pytest.raises(pgas.PgasValueError, match=r"pgas.get_nbi: dest and src must have the same memory order"):
        pgas.get_nbi(np.zeros(shape, np.int64), src, right)
    with pytest.raises(pgas.PgasValueError, match=r"pgas.get: dest must be C-contiguous or Fortran-contiguous"):
        pgas.get(np.zeros((3, 10), np.int64, order="F")[:, ::2], src, right)
    pgas.barrier_all()
    for a in (c_ordered, dest, src):
        pgas.free(a)


def check_collectives_take_fortran_arrays_in_memory_order():
    me, n, _, _ = ring_neighbours()
    shape = (3, 4)
    src = pgas.full(shape, pattern(me, 12, np.int32).reshape(shape), np.int32, order="F")
    dest = pgas.zeros(shape, np.int32, order="F")
    pgas.broadcast(pgas.TEAM_WORLD, dest, src, n - 1)
    assert np.array_equal(dest.copy_to_host(), pattern(n - 1, 12, np.int32).reshape(shape))
    pgas.reduce(pgas.TEAM_WORLD, dest, src, "sum")
    assert np.array_equal(dest.copy_to_host(), sum(pattern(pe, 12, np.int32) for pe in range(n)).reshape(shape))
    # fcollect in memory order: with column-major arrays PE r's columns land at columns [4r, 4r + 4)
    gathered = pgas.zeros((3, 4 * n), np.int32, order="F")
    pgas.fcollect(pgas.TEAM_WORLD, gathered, src)
    got = gathered.copy_to_host()
    for pe in range(n):
        assert np.array_equal(got[:, 4 * pe:4 * pe + 4], pattern(pe, 12, np.int32).reshape(shape)), pe
    c_ordered = pgas.zeros(shape, np.int32)
    with pytest.raises(pgas.PgasValueError, match=r"pgas.reduce: dest and src must have the same memory order"):
        pgas.reduce(pgas.TEAM_WORLD, c_ordered, src, "sum")
    pgas.barrier_all()
    for a in (c_ordered, gathered, dest, src):
        pgas.free(a)


# calloc, align, malloc_with_hints, buffer ------------------------------------------------

def check_calloc_align_and_hints_allocate_symmetric_arrays():
    me, n, right, left = ring_neighbours()
    used = pgas.info()["heap_used"]
    c = pgas.calloc(10, np.int32)
    assert c.shape == (10,) and c.dtype == np.int32 and np.all(c.copy_to_host() == 0)
    aligned = [pgas.align(alignment, 5, np.int64) for alignment in (4096, 1 << 16, 8)]
    offsets = [heap_offset(a) for a in aligned]
    assert offsets[0] % 4096 == 0 and offsets[1] % (1 << 16) == 0 and offsets[2] % 256 == 0, offsets
    assert offsets[1] != 0      # not aligned merely by being first in the heap
    assert all(o == offsets for o in world().allgather(offsets))
    h = pgas.malloc_with_hints(1, np.int64, pgas.MALLOC_ATOMICS_REMOTE | pgas.MALLOC_SIGNAL_REMOTE)
    h.copy_to_device(np.zeros(1, np.int64))
    pgas.barrier_all()
    pgas.atomic_add(h, me + 1, right)
    pgas.quiet()
    pgas.barrier_all()
    assert h.copy_to_host()[0] == left + 1
    for bad in (3, 0, -4, 1.5, True, "8"):
        with pytest.raises(pgas.PgasValueError, match=r"pgas.align: alignment must be a power of two"):
            pgas.align(bad, 4, np.int64)
    for bad in (4, -1, 1.0, "1"):
        with pytest.raises(pgas.PgasValueError, match=r"pgas.malloc_with_hints: hints must be 0 or a combination"):
            pgas.malloc_with_hints(4, np.int64, bad)
    pgas.barrier_all()
    for a in [h, *reversed(aligned), c]:
        pgas.free(a)
    assert pgas.info()["heap_used"] == used     # the gaps before aligned arrays were given back


def check_byte_buffers_work_with_rma_and_collectives():
    me, n, right, left = ring_neighbours()
    b = pgas.buffer(8)
    assert b.dtype == np.uint8 and b.shape == (8,)
    with pytest.raises(pgas.PgasValueError, match=r"pgas.buffer: size must be a non-negative integer"):
        pgas.buffer(-1)
    b.copy_to_device(np.full(8, me + 1, np.uint8))
    pgas.barrier_all()
    gathered = pgas.buffer(8 * n)
    pgas.fcollect(pgas.TEAM_WORLD, gathered, b)
    assert np.array_equal(gathered.copy_to_host(), np.repeat(np.arange(1, n + 1, dtype=np.uint8), 8))
    into = pgas.buffer(8)
    pgas.broadcast(pgas.TEAM_WORLD, into, b, n - 1)
    assert np.all(into.copy_to_host() == n)
    pgas.reduce(pgas.TEAM_WORLD, into, b, "sum")
    assert np.all(into.copy_to_host() == n * (n + 1) // 2)
    blocks, out = pgas.buffer(4 * n), pgas.buffer(4 * n)
    blocks.copy_to_device(np.array([16 * me + j for j in range(n) for _ in range(4)], np.uint8))
    pgas.alltoall(pgas.TEAM_WORLD, out, blocks)
    assert np.array_equal(out.copy_to_host(), np.array([16 * j + me for j in range(n) for _ in range(4)], np.uint8))
    pgas.put(into, np.arange(8, dtype=np.uint8) + me, right)
    pgas.barrier_all()
    assert np.array_equal(into.copy_to_host(), np.arange(8, dtype=np.uint8) + left)
    pgas.barrier_all()
    for a in (out, blocks, into, gathered, b):
        pgas.free(a)


# Registered buffers ----------------------------------------------------------------------


def check_the_node_passes_file_descriptors_between_its_processes():
    """How the cuda heap shares its VMM memory (``_fd_exchange``), over the node's PEs: each
    reads every other's descriptor, a file only that PE wrote."""
    from pgas.cuda.heap._fd_exchange import allgather_fds
    from pgas.runtime._state import runtime

    comm = runtime("test").boot.node_comm
    mine = os.memfd_create(f"pe{pgas.my_pe()}")
    os.write(mine, f"PE {pgas.my_pe()}".encode())
    fds = allgather_fds(comm, mine, 10.0, "the test's files")
    os.close(mine)
    try:
        assert [os.pread(fd, 16, 0).decode() for fd in fds] == [f"PE {pe}" for pe in node_pes()]
    finally:
        for fd in fds:
            os.close(fd)
