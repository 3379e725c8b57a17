"""Peer memory: another PE's copy of a symmetric array, for direct loads and stores.

As NVSHMEM's ``nvshmem_ptr``: a PE whose heap this PE can load from and store to (``self``
and ``p2p`` in ``pgas.info()["transports"]``: the PEs of this node) gives its copy of the
array; a PE on another node, reached only through the NIC, gives an empty array
(``peer_array``) or the address 0 (``ptr``), never an error. A PE out of range is an
error, as everywhere.

The loads and stores through the array are plain ones: they are not atomic and carry no
ordering. Order them as other stores to a peer: ``fence``/``quiet`` before a flag the
peer waits on (``p``, ``signal_op``, an atomic), and read a peer's data after seeing
its flag (``wait_until``, ``signal_wait_until``). A loop polling a peer's element
through the array may never see it change on a GPU: poll with ``g`` or wait on a
local ivar instead.

Addresses: on the cuda backend, the virtual address of the peer's copy in this process
(its heap as mapped here by CUDA VMM), usable by this PE's kernels and by
``pgas.peer_array(arr, pe)``'s array on the host, which lies at the same address. On the
simulator, the address of the peer's copy in this process's mapping of that PE's heap
(``/dev/shm``), where the simulator's ``peer_array`` and the host's ``pgas.peer_array``
views lie. Either way it is meaningful in this process only.
"""
from __future__ import annotations

import numpy as np

from ._primitives import prim as _p

__all__ = ["peer_array", "ptr", "team_ptr", "get_multicast_array"]


def peer_array(arr, pe):
    """peer_array(arr, pe) -> array: PE ``pe``'s copy of symmetric ``arr`` for direct loads
    and stores.

    The same dtype, shape and strides as ``arr`` (a slice such as ``a[i:]`` or ``a[:, 1]``
    gives the same slice of the peer's copy). Where ``pe`` is not load/store reachable from
    this PE (another node) an empty array of the same dtype and number of dimensions,
    every extent 0 (``size == 0``). With ``pe == my_pe()``, ``arr``'s own elements. Plain,
    unordered accesses: see the module's notes.
    """
    return _p.peer_view(arr, pe, _p.name("pgas.device.peer_array"))


peer_array.returns_array = True   # compiled so that the array can be returned (``_cuda.device_function``)


def ptr(arr, pe):
    """ptr(arr, pe) -> uint64: the address of the first element of PE ``pe``'s copy of ``arr``
    in this process, or 0 where ``pe`` is not load/store reachable (another node).

    Non-zero exactly where ``pe`` is load/store reachable, and then the address of the
    first element of ``peer_array(arr, pe)``.
    """
    return _p.peer_address(arr, pe, _p.name("pgas.device.ptr"))


def team_ptr(team, arr, pe):
    """team_ptr(team, arr, pe) -> uint64: ``ptr(arr, world_pe)`` for the PE of rank ``pe`` in
    ``team`` (OpenSHMEM's ``shmem_team_ptr``): the address of its copy of ``arr`` in this
    process, or 0 where it is not load/store reachable (another node) or ``pe`` is not a rank
    of ``team`` (outside ``[0, team_n_pes(team))``).
    """
    fn = _p.name("pgas.device.team_ptr")
    _p.check_team(fn, team)
    if pe < 0 or pe >= _p.team_size(team, fn):
        return np.uint64(0)
    return _p.peer_address(arr, _p.team_pe(team, pe, fn), fn)


def get_multicast_array(team, arr):
    """get_multicast_array(team, arr) -> array: symmetric ``arr`` of every member of ``team``
    as one array whose stores reach them all (NVSHMEM's ``nvshmemx_mc_ptr``; nvshmem4py's
    device ``get_multicast_array``): ``mc[i] = v`` writes ``v`` into element ``i`` of each
    member's copy, as a ``multimem.st`` through an NVLink SHARP switch does.

    Stores only: a plain load from multicast memory is undefined on the hardware and refused
    on the simulator (read the PE's own ``arr``). Plain, unordered stores, as through
    ``peer_array``: ``quiet``/``fence`` or a barrier before the members read them. Every
    member of ``team`` must be on this node (UNREACHABLE otherwise). On the cuda backend
    there is none: pgas sets up no multicast objects (NO_MULTICAST is recorded and the kernel
    stops).
    """
    return _p.multicast_view(arr, team, _p.name("pgas.device.get_multicast_array"))


get_multicast_array.returns_array = True
