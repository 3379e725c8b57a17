"""Device peer memory: peer_array and ptr (NVSHMEM's nvshmem_ptr) give the copies of this
node's PEs for direct loads and stores, and nothing (an empty array, address 0) for PEs on
other nodes."""
import re

import numpy as np
import pytest
from numba import cuda

import pgas
import pgas.device as dev
from _util import node_pes, simulator_only


@cuda.jit
def peer_kernel(a, addresses, extents, loads):
    me, n = dev.my_pe(), dev.n_pes()
    for pe in range(n):
        whole = dev.peer_array(a, pe)             # (n, 3)
        column = dev.peer_array(a[:, 1], pe)      # a strided slice of it
        addresses[pe, 0] = dev.ptr(a, pe)
        addresses[pe, 1] = dev.ptr(a[0, 1:], pe)
        extents[pe, 0] = whole.shape[0]
        extents[pe, 1] = whole.shape[1]
        extents[pe, 2] = column.size
        if whole.size:                            # load/store reachable: store into my row of its copy
            whole[me, 0] = 100 * me + pe
            column[me] = 1000 + me
    dev.barrier_all()                             # quiet (orders the stores), then every PE has stored
    for pe in range(n):
        whole = dev.peer_array(a, pe)
        if whole.size:
            loads[pe] = whole[pe, 2]              # what PE pe's host put in its own copy


def host_address(view) -> int:
    if hasattr(view, "__cuda_array_interface__"):
        return view.__cuda_array_interface__["data"][0]
    from pgas.runtime._arrays import as_ndarray
    return as_ndarray(view, "test", "view").__array_interface__["data"][0]


def check_peer_array_and_ptr_reach_this_nodes_pes_only():
    me, n = pgas.my_pe(), pgas.n_pes()
    near = node_pes()
    a = pgas.zeros((n, 3), np.int64)
    mine = np.zeros((n, 3), np.int64)
    mine[:, 2] = 10 + me
    a.copy_to_device(mine)
    pgas.barrier_all()                            # every copy initialized before peers store into it
    addresses = np.zeros((n, 2), np.uint64)
    extents = np.full((n, 3), -1, np.int64)
    loads = np.full(n, -1, np.int64)
    peer_kernel[1, 1](a, addresses, extents, loads)
    pgas.barrier_all()
    got = a.copy_to_host()
    for q in range(n):
        if q in near:
            assert got[q, 0] == 100 * q + me and got[q, 1] == 1000 + q, (q, got[q])
            assert extents[q].tolist() == [n, 3, n] and loads[q] == 10 + q, (q, extents[q], loads[q])
            assert int(addresses[q, 0]) == host_address(pgas.peer_array(a, q)) != 0, q
            assert int(addresses[q, 1]) - int(addresses[q, 0]) == 8, q
        else:                                     # another node: nothing stored, empty, address 0
            assert got[q, :2].tolist() == [0, 0], (q, got[q])
            assert extents[q].tolist() == [0, 0, 0] and loads[q] == -1, (q, extents[q], loads[q])
            assert addresses[q].tolist() == [0, 0], q
    assert int(addresses[me, 0]) == host_address(a)
    pgas.free(a)


@cuda.jit
def peer_array_of(a, pe):
    dev.peer_array(a, pe)[0] = 1


@cuda.jit
def ptr_of(a, pe, out):
    out[0] = dev.ptr(a, pe)


@simulator_only("a failed device check traps on a GPU, ending the CUDA context (tests/test_device_errors.py)")
def check_a_pe_out_of_range_is_an_error():
    n = pgas.n_pes()
    a = pgas.zeros(4, np.int32)
    with pytest.raises(pgas.PgasError, match=re.escape(f"pgas.device.peer_array: pe must be within [0, {n}), got {n}")):
        peer_array_of[1, 1](a, n)
    with pytest.raises(pgas.PgasError, match=re.escape(f"pgas.device.ptr: pe must be within [0, {n}), got -1")):
        ptr_of[1, 1](a, -1, np.zeros(1, np.uint64))
    with pytest.raises(pgas.PgasError, match="pgas.device.ptr: arr is not symmetric memory"):
        ptr_of[1, 1](np.zeros(4, np.int32), 0, np.zeros(1, np.uint64))
    pgas.free(a)


@cuda.jit
def multicast_store_kernel(team, arr, value):
    mc = dev.get_multicast_array(team, arr)
    if dev.team_my_pe(team) == 0:         # one member writes, every member's copy changes
        for i in range(arr.shape[0]):
            mc[i] = value


@cuda.jit
def multicast_load_kernel(team, arr, out):
    out[0] = dev.get_multicast_array(team, arr)[0]


@cuda.jit
def multicast_slice_kernel(mc, value):
    mc[1:3] = value                         # the host's multicast array, given to a kernel


def check_multicast_stores_reach_every_member_of_a_node_team():
    me, node = pgas.my_pe(), node_pes()
    arr = pgas.full(4, -1.0, np.float32)
    if pgas.backend() != "simulator":
        with pytest.raises(pgas.PgasError, match="pgas.get_multicast_array: no multicast memory on the cuda backend"):
            pgas.get_multicast_array(pgas.TEAM_NODE, arr)
        pgas.free(arr)
        return
    pgas.barrier_all()
    multicast_store_kernel[1, 1](pgas.TEAM_NODE, arr, 10.0 + node[0])
    pgas.barrier_all()
    assert np.all(arr.copy_to_host() == 10 + node[0]), arr.copy_to_host()
    mc = pgas.get_multicast_buffer(pgas.TEAM_NODE, arr)         # nvshmem4py's other name
    assert mc.shape == (4,) and mc.dtype == np.float32
    pgas.barrier_all()
    if me == node[-1]:
        multicast_slice_kernel[1, 1](mc, 3.5)
        mc[3] = 7.0                         # on the simulator the host may store too
    pgas.barrier_all()
    assert np.array_equal(arr.copy_to_host(), [10 + node[0], 3.5, 3.5, 7.0])
    if len(node) < pgas.n_pes():            # a team across nodes has no multicast object
        far = min(set(range(pgas.n_pes())) - set(node))
        with pytest.raises(pgas.PgasError, match=f"pgas.get_multicast_array: team member PE {far} is on another "
                                                 "node: multicast memory reaches only the PEs of one node"):
            pgas.get_multicast_array(pgas.TEAM_WORLD, arr)
    pgas.barrier_all()
    pgas.free(arr)


@simulator_only("a failed device check traps on a GPU, ending the CUDA context (tests/test_device_errors.py)")
def check_multicast_loads_and_members_on_other_nodes_are_refused():
    arr = pgas.zeros(4, np.int64)
    with pytest.raises(pgas.PgasError, match="pgas.device.get_multicast_array: a load from a multicast array"):
        multicast_load_kernel[1, 1](pgas.TEAM_NODE, arr, np.zeros(1, np.int64))
    with pytest.raises(pgas.PgasError, match="pgas.get_multicast_array: a load from a multicast array"):
        pgas.get_multicast_array(pgas.TEAM_NODE, arr)[0]
    node = node_pes()
    if len(node) < pgas.n_pes():
        far = min(set(range(pgas.n_pes())) - set(node))
        with pytest.raises(pgas.PgasError, match=f"pgas.device.get_multicast_array: PE {far} is on another node and "
                                                 "multicast memory reaches only the PEs of one node"):
            multicast_store_kernel[1, 1](pgas.TEAM_WORLD, arr, 1)
    pgas.barrier_all()
    pgas.free(arr)
