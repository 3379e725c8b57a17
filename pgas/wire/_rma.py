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

__all__ = ["HeapKeys", "key_at", "memory_types", "transports", "completion", "mark_done", "slot_params"]

# memory made symmetric that may be registered apart from the heap at once; an endpoint's
# table of them (``HeapKeys.regions_of``): how many slots are used, then per slot the heap
# offset, the bytes (0: a free slot) and UCX's key for that endpoint
MAX_REGISTRATIONS = 64
REGION_WORDS = 3
REGIONS_WORDS = 1 + MAX_REGISTRATIONS * REGION_WORDS


def _memlock_limit() -> str:
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return "unlimited" if soft == resource.RLIM_INFINITY else f"{soft} bytes"


class HeapKeys:
    """The heap [``base``, ``base + size``) of PE ``my_pe`` registered with ``worker``'s
    context, and every PE's packed key and heap range (an allgather over ``comm``:
    collective). ``unpack(endpoints)`` gives the peers' keys for those endpoints,
    ``looks(endpoints)`` the looks at their wake words. ``wake``: the address of this
    PE's wake word (``core.native._wake_words``; 0: none), which ``AM_WAKE`` wakes, at
    the same offset in every heap.

    Memory made symmetric (``register_symmetric``: another file's pages mapped over a
    range of the heap) is registered apart (``add``; those of ``registered``, heap offset
    -> bytes, at once): a NIC that pinned the heap's own pages would not reach the pages
    mapped over them. Its keys, unpacked for every endpoint the heap's were, wait in
    that endpoint's table (``regions_of``), where ``key_at`` finds them by offset."""

    def __init__(self, worker, comm, my_pe: int, base: int, size: int, wake: int = 0,
                 registered: dict[int, int] | None = None):
        self._lib = worker.lib
        self._worker, self._comm, self._my_pe, self._base = worker, comm, my_pe, base
        self._wake_offset = wake - base if wake else None
        self._wake_words = np.array([wake, worker.wakes_address], np.int64)
        worker.handle_messages(AM_WAKE, wake_handler(), self._wake_words.ctypes.data)
        self._context = worker.context
        self._unpacked: list[int] = []     # the keys ``unpack`` made for the heap
        self._tables: dict[int, tuple[int, np.ndarray]] = {}    # endpoint -> (its PE, its table of registrations)
        self._registrations: dict[int, tuple[int, int, list[bytes]]] = {}    # offset -> (bytes, memh, packed keys)
        self._memh, packed, failure = self._map(base, size, "its heap")
        everyone = comm.allgather((packed, base, size, failure))    # (every PE learns of a failure)
        failures = [f for *_, f in everyone if f]
        if failures:
            self.close()
            raise PgasError("pgas.init: " + "; ".join(failures))
        self.ranges = [(b, s) for _, b, s, _ in everyone]
        self._packed = [p for p, *_ in everyone]
        try:
            for offset, nbytes in (registered or {}).items():
                self.add(offset, nbytes, "pgas.init")
        except PgasError:
            self.close()
            raise

    def _map(self, address: int, nbytes: int, what: str) -> tuple[int, bytes, str]:
        """Register [``address``, ``address + nbytes``) with the context: (its memh or 0,
        its packed key, what failed or "")."""
        lib = self._lib
        params = ucp.MemMapParams(field_mask=ucp.MEM_MAP_PARAM_FIELD_ADDRESS | ucp.MEM_MAP_PARAM_FIELD_LENGTH,
                                  address=address, length=nbytes)
        memh = ctypes.c_int64()
        status = lib.ucp_mem_map(self._context, ctypes.addressof(params), ctypes.addressof(memh))
        packed = b""
        if status == ucp.UCS_OK:
            buffer, length = ctypes.c_int64(), ctypes.c_size_t()
            status = lib.ucp_rkey_pack(self._context, memh.value, ctypes.addressof(buffer), ctypes.addressof(length))
            if status == ucp.UCS_OK:
                packed = ctypes.string_at(buffer.value, length.value)
                lib.ucp_rkey_buffer_release(buffer.value)
            else:
                lib.ucp_mem_unmap(self._context, memh.value)
        if status == ucp.UCS_OK:
            return memh.value, packed, ""
        return 0, b"", (f"PE {self._my_pe}: UCX could not register {what} for one-sided access ({nbytes} bytes at "
                        f"{address:#x}; ucs_status_t {status}; the locked-memory limit, ulimit -l, is "
                        f"{_memlock_limit()})")

    def _unpack_one(self, endpoint: int, packed: bytes, what: str) -> int:
        buffer = ctypes.create_string_buffer(packed, len(packed))
        rkey = ctypes.c_int64()
        ucp.check(self._lib.ucp_ep_rkey_unpack(endpoint, ctypes.addressof(buffer), ctypes.addressof(rkey)),
                  f"ucp_ep_rkey_unpack ({what})")
        return rkey.value

    def unpack(self, endpoints: dict[int, int]) -> dict[int, int]:
        """PE -> its heap's key for the endpoint to it (``endpoints``: PE -> endpoint);
        destroyed with these keys (``close``). The endpoints' tables of the memory made
        symmetric are filled too (``regions_of``)."""
        keys = {}
        for pe, endpoint in endpoints.items():
            keys[pe] = self._unpack_one(endpoint, self._packed[pe], f"PE {pe}'s heap")
            self._unpacked.append(keys[pe])
            if endpoint not in self._tables:
                self._tables[endpoint] = pe, np.zeros(REGIONS_WORDS, np.int64)
                for offset, (nbytes, _, packed) in self._registrations.items():
                    self._enter(endpoint, offset, nbytes, packed)
        return keys

    def regions_of(self, endpoint: int) -> int:
        """The address of ``endpoint``'s table of the memory made symmetric (``key_at``'s
        ``regions``), once ``unpack`` has seen it."""
        return self._tables[endpoint][1].ctypes.data

    def _enter(self, endpoint: int, offset: int, nbytes: int, packed: list[bytes]) -> None:
        """The key of the memory made symmetric at ``offset`` of ``endpoint``'s peer, in its table."""
        pe, table = self._tables[endpoint]
        key = self._unpack_one(endpoint, packed[pe], f"PE {pe}'s memory made symmetric at heap offset {offset}")
        free = [i for i in range(table[0]) if table[1 + i * REGION_WORDS + 1] == 0]
        slot = free[0] if free else table[0]
        at = 1 + slot * REGION_WORDS
        table[at], table[at + 2] = offset, key
        table[at + 1] = nbytes          # (last: a slot whose length is 0 is free to the readers)
        table[0] = max(table[0], slot + 1)

    def add(self, offset: int, nbytes: int, fn: str) -> None:
        """Register the ``nbytes`` at ``offset`` of the heap (memory made symmetric there)
        apart from it, and unpack every PE's key to them for each endpoint (collective);
        PgasError naming the PEs that could not register them."""
        if len(self._registrations) == MAX_REGISTRATIONS:
            failure = (f"PE {self._my_pe}: at most {MAX_REGISTRATIONS} ranges of memory made symmetric are "
                       "registered with UCX at once")
            memh, packed = 0, b""
        else:
            memh, packed, failure = self._map(self._base + offset, nbytes,
                                              f"the memory made symmetric at heap offset {offset}")
        everyone = self._comm.allgather((packed, failure))
        failures = [f for _, f in everyone if f]
        if failures:
            if memh:
                self._lib.ucp_mem_unmap(self._context, memh)
            raise PgasError(f"{fn}: " + "; ".join(failures))
        packed_keys = [p for p, _ in everyone]
        self._registrations[offset] = nbytes, memh, packed_keys
        for endpoint in self._tables:
            self._enter(endpoint, offset, nbytes, packed_keys)

    def remove(self, offset: int) -> None:
        """Undo ``add`` (nobody reaches the memory any more): the unpacked keys destroyed,
        the registration dropped."""
        _, memh, _ = self._registrations.pop(offset)
        for _, table in self._tables.values():
            for i in range(table[0]):
                at = 1 + i * REGION_WORDS
                if table[at + 1] != 0 and table[at] == offset:
                    table[at + 1] = 0
                    self._lib.ucp_rkey_destroy(table[at + 2])
        self._lib.ucp_mem_unmap(self._context, memh)

    def looks(self, endpoints: dict[int, int]) -> Looks:
        """The looks at the wake words of the PEs of ``endpoints`` (PE -> endpoint),
        through their keys for those endpoints (``unpack``)."""
        keys = self.unpack(endpoints)
        flags = {pe: 0 if self._wake_offset is None else self.ranges[pe][0] + self._wake_offset + 4
                 for pe in endpoints}
        return Looks(self._worker, len(self.ranges), endpoints, keys, flags)

    def close(self) -> None:
        """Destroy the unpacked keys and unregister the heap and the memory made symmetric
        (before the worker goes)."""
        for offset in list(self._registrations):
            self.remove(offset)
        for rkey in self._unpacked:
            self._lib.ucp_rkey_destroy(rkey)
        self._unpacked = []
        if self._memh:
            self._lib.ucp_mem_unmap(self._context, self._memh)
            self._memh = 0


@njit(nogil=True, cache=True)
def key_at(regions, heap_key, offset, nbytes):
    """UCX's key to the ``nbytes`` at ``offset`` of a peer's heap: that of the memory made
    symmetric there (``regions``: the address of the endpoint's table,
    ``HeapKeys.regions_of``; 0: none), else the heap's. 0 where they cross an edge of such
    memory: no one registration holds them (refused, as a NIC refuses a request that runs
    out of its memory region)."""
    if regions == 0:
        return heap_key
    table = carray(window.words_at(regions), (REGIONS_WORDS,))
    for i in range(table[0]):
        at = 1 + i * REGION_WORDS
        start, length = table[at], table[at + 1]
        if length != 0 and offset < start + length and offset + nbytes > start:
            return table[at + 2] if start <= offset and offset + nbytes <= start + length else 0
    return heap_key


def memory_types(worker) -> list[str]:
    """The kinds of memory ``worker``'s UCX context can register and reach one-sided
    ("host", "cuda", ...: ``ucp_context_query``'s memory types); ["?"] where it cannot say."""
    attr = ucp.ContextAttr(field_mask=ucp.ATTR_FIELD_MEMORY_TYPES)
    if worker.lib.ucp_context_query(worker.context, ctypes.addressof(attr)) != ucp.UCS_OK:
        return ["?"]
    return [ucp.MEMORY_TYPES[bit] if bit < len(ucp.MEMORY_TYPES) else f"type {bit}"
            for bit in range(64) if attr.memory_types >> bit & 1]


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
