"""Symmetric memory: same offsets, alignment, contents, peer views, reuse."""
import os

import numpy as np

import pgas
import pytest
from _util import heap_offset, node_pes, world


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


def check_info_reports_backend_heap_and_transports():
    info = pgas.info()
    me, n = pgas.my_pe(), pgas.n_pes()
    assert info["backend"] == pgas.backend() == "simulator"
    assert info["n_pes"] == n and info["my_pe"] == me
    assert info["heap_size"] == 256 << 20 and 0 < info["heap_used"] < info["heap_size"]
    assert info["transports"][me] == "self"
    node = node_pes()
    remote = os.environ.get("PGAS_REMOTE_TRANSPORT", "ibgda")
    assert all(info["transports"][pe] == ("p2p" if pe in node else remote) for pe in range(n) if pe != me)
    regions = info["memory_regions"]    # every PE's registered heap, as exchanged at init
    assert [r["pe"] for r in regions] == list(range(n)) and all(r["size"] == 256 << 20 for r in regions)
    assert len({r["rkey"] for r in regions}) == n and "lkey" in regions[me]
