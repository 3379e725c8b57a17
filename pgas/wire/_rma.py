"""One-sided access over UCX: a PE's heap registered with its worker's context
(``ucp_mem_map``), its remote key packed (``ucp_rkey_pack``) and exchanged, each peer's
key unpacked once per endpoint (``ucp_ep_rkey_unpack``); and the completion of one-sided
requests (``ucp_put_nbx``/``ucp_get_nbx``), which marks their slot of the requester's ring.

UCX then moves the bytes without the target: a NIC's RDMA engine, or where UCX finds the
peer on the same machine, CMA (``process_vm_writev``), neither of which involves the
target's CPU. Over TCP, UCX emulates RMA with its own messages, which the target's worker
answers as it progresses (its progress thread): UCX's business, pgas stays one-sided.

After one-sided writes land, a look at the peer's wake word is due: ``_wakes``.
"""
from __future__ import annotations

import ctypes
import resource

import numpy as np
from numba import carray, cfunc, njit

from ..core._errors import PgasError
from ..core.native._llvm import built_once
from ..nic import _mlx5 as mlx5
from . import _native, _target as target, _ucp as ucp, _window as window
from ._wakes import AM_WAKE, Looks, cell_of, look_later, wake_handler

__all__ = ["HeapKeys", "transports", "completion", "mark_done", "slot_params"]


def _memlock_limit() -> str:
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return "unlimited" if soft == resource.RLIM_INFINITY else f"{soft} bytes"


class HeapKeys:
    """The heap [``base``, ``base + size``) of PE ``my_pe`` registered with ``worker``'s
    context, and every PE's packed key and heap range (an allgather over ``comm``:
    collective). ``unpack(endpoints)`` gives the peers' keys for those endpoints,
    ``looks(endpoints)`` the looks at their wake words. ``wake``: the address of this
    PE's wake word (``core.native._wake_words``; 0: none), which ``AM_WAKE`` wakes, at
    the same offset in every heap."""

    def __init__(self, worker, comm, my_pe: int, base: int, size: int, wake: int = 0):
        lib = self._lib = worker.lib
        self._worker = worker
        self._wake_offset = wake - base if wake else None
        self._wake_words = np.array([wake, worker.wakes_address], np.int64)
        worker.handle_messages(AM_WAKE, wake_handler(), self._wake_words.ctypes.data)
        self._context = worker.context
        self._unpacked: list[int] = []     # the keys ``unpack`` made
        params = ucp.MemMapParams(field_mask=ucp.MEM_MAP_PARAM_FIELD_ADDRESS | ucp.MEM_MAP_PARAM_FIELD_LENGTH,
                                  address=base, length=size)
        memh = ctypes.c_int64()
        status = lib.ucp_mem_map(self._context, ctypes.addressof(params), ctypes.addressof(memh))
        packed = b""
        if status == ucp.UCS_OK:
            self._memh = memh.value
            buffer, length = ctypes.c_int64(), ctypes.c_size_t()
            status = lib.ucp_rkey_pack(self._context, self._memh, ctypes.addressof(buffer), ctypes.addressof(length))
            if status == ucp.UCS_OK:
                packed = ctypes.string_at(buffer.value, length.value)
                lib.ucp_rkey_buffer_release(buffer.value)
        else:
            self._memh = 0
        failure = "" if status == ucp.UCS_OK else (
            f"PE {my_pe}: UCX could not register its heap for one-sided access ({size} bytes at {base:#x}; "
            f"ucs_status_t {status}; the locked-memory limit, ulimit -l, is {_memlock_limit()})")
        everyone = comm.allgather((packed, base, size, failure))    # (every PE learns of a failure)
        failures = [f for *_, f in everyone if f]
        if failures:
            self.close()
            raise PgasError("pgas.init: " + "; ".join(failures))
        self.ranges = [(b, s) for _, b, s, _ in everyone]
        self._packed = [p for p, *_ in everyone]

    def unpack(self, endpoints: dict[int, int]) -> dict[int, int]:
        """PE -> its heap's key for the endpoint to it (``endpoints``: PE -> endpoint);
        destroyed with these keys (``close``)."""
        keys = {}
        for pe, endpoint in endpoints.items():
            packed = ctypes.create_string_buffer(self._packed[pe], len(self._packed[pe]))
            rkey = ctypes.c_int64()
            ucp.check(self._lib.ucp_ep_rkey_unpack(endpoint, ctypes.addressof(packed), ctypes.addressof(rkey)),
                      f"ucp_ep_rkey_unpack (PE {pe}'s heap)")
            keys[pe] = rkey.value
            self._unpacked.append(rkey.value)
        return keys

    def looks(self, endpoints: dict[int, int]) -> Looks:
        """The looks at the wake words of the PEs of ``endpoints`` (PE -> endpoint),
        through their keys for those endpoints (``unpack``)."""
        keys = self.unpack(endpoints)
        flags = {pe: 0 if self._wake_offset is None else self.ranges[pe][0] + self._wake_offset + 4
                 for pe in endpoints}
        return Looks(self._worker, len(self.ranges), endpoints, keys, flags)

    def close(self) -> None:
        """Destroy the unpacked keys and unregister the heap (before the worker goes)."""
        for rkey in self._unpacked:
            self._lib.ucp_rkey_destroy(rkey)
        self._unpacked = []
        if self._memh:
            self._lib.ucp_mem_unmap(self._context, self._memh)
            self._memh = 0


def transports(worker) -> dict[int, str]:
    """PE -> the UCX transports of ``worker``'s endpoint to it (``_endpoint_transports``)."""
    return {pe: _endpoint_transports(worker.lib, endpoint) for pe, endpoint in worker.endpoints.items()}


def _endpoint_transports(lib, endpoint: int) -> str:
    """The UCX transports (and devices) of ``endpoint``'s lanes, as ``ucp_ep_query`` says:
    "tcp/eth0 cma/memory"; "?" where this UCX cannot say."""
    entries = (ucp.TransportEntry * 16)()
    attr = ucp.EpAttr(field_mask=ucp.EP_ATTR_FIELD_TRANSPORTS, entries=ctypes.addressof(entries), num_entries=16,
                      entry_size=ctypes.sizeof(ucp.TransportEntry))
    if lib.ucp_ep_query(endpoint, ctypes.addressof(attr)) != ucp.UCS_OK:
        return "?"
    lanes = [f"{e.transport_name.decode()}/{e.device_name.decode()}" for e in entries[:attr.num_entries]]
    return " ".join(dict.fromkeys(lanes)) or "?"


@njit(nogil=True, cache=True)
def mark_done(ring, ticket, status, syndrome):
    """Request ``ticket`` of ``ring`` (the ucx engine's) is complete: ``status`` is UCX's
    (not 0: the wire failed it), ``syndrome`` a refusal before the wire (0: none); counted
    at the PE's word for answers. A put a thread waits for has landed then (its flush
    completed): a look at the peer's wake word is due (``look_later``)."""
    capacity = ring[target.R_CAPACITY]
    slot = target.RING_HEADER + ticket % capacity
    landed = status == 0 and syndrome == 0 and ring[slot + target.C_OP * capacity] == target.PUT \
        and ring[slot + target.C_WAITED * capacity] != 0 and ring[target.R_LOOKS] != 0
    look = cell_of(ring[target.R_LOOKS], ring[slot + target.C_PE * capacity]) if landed else 0
    target._land(ring, capacity, ticket, mlx5.SYNDROME_TRANSPORT if status != 0 else syndrome, status)
    look_later(look)
    target.wake_at(ring[target.R_WAKE])


def _build():
    """The completion of a one-sided request (``ucp_send_nbx_callback_t``): its user data
    is its slot's cell (the ring's address, the ticket: ``_ucx.post``)."""
    target.callbacks()      # (the symbols mark_done calls, registered)

    @cfunc(target.SENT, nopython=True, cache=True)
    def on_done(request, status, cell):
        header = window.words_at(cell[0])
        ring = carray(header, (target.RING_HEADER + target.COLUMNS * header[target.R_CAPACITY],))
        mark_done(ring, cell[1], status, 0)
        _native.ucp_request_free(request)

    return on_done


completion = built_once(_build)


def slot_params(on_done, capacity: int, ring: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(params, cells): a ``ucp_request_param_t`` per slot of ``ring`` calling ``on_done``
    with that slot's cell (``cells[slot]``: the ring's address, then the ticket, which
    ``post`` writes before each request)."""
    size = ctypes.sizeof(ucp.RequestParams)
    params = np.zeros((capacity, size), np.uint8)
    cells = np.zeros((capacity, 2), np.int64)
    cells[:, 0] = ring.ctypes.data
    for slot in range(capacity):
        struct = ucp.RequestParams.from_buffer(params[slot])
        struct.op_attr_mask = ucp.OP_ATTR_FIELD_CALLBACK | ucp.OP_ATTR_FIELD_USER_DATA
        struct.cb, struct.user_data = on_done.address, cells[slot:].ctypes.data
    return params, cells
