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
