"""Routing: the one place that decides how this PE reaches each PE.

Every device function and host call that touches another PE's memory goes through
``Transports``: its peer's heap mapped here (``self``/``p2p``: loads, stores and CPU
atomics on the mapping), or the NIC: ``ibgda`` (the calling thread posts mlx5 WQEs
itself, ``_ibgda``) or ``proxy`` (requests to the CPU proxy, which posts the WQEs,
``_proxy``). Both remote engines have one interface (submit, wait, quiet). Callers name
the target by their own copy of the symmetric array (same offset on every PE) and never
ask which path is taken.
"""
from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable

import numpy as np

from ..core.native import _cpu_atomics
from ..core._address import address_of
from ..core._device_errors import UNREACHABLE_WHY, device_error
from ..core._env import setting
from ..core._errors import PgasError, PgasTimeoutError
from ..nic import _mlx5 as mlx5
from ..nic._nic import Nic
from ..nic._regions import ACCESS_REMOTE
from . import _proxy as proxy
from ._ibgda import Ibgda
from ._registrations import RecentRegistrations
from ._ucx import Ucx
from ..wire._nic_queues import NicQueues
from ..wire import _rma as rma, _ucp as ucp

__all__ = ["Transports", "REMOTE_TRANSPORTS"]

REMOTE_TRANSPORTS = ("ibgda", "proxy", "ucx")   # the first two drive the emulated NIC (docs/transports.md)
_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}    # an element's bits, by its size
# native integer dtypes: (least, greatest, the mask of an element's bits)
_INT_LIMITS = {np.dtype(t): (int(np.iinfo(t).min), int(np.iinfo(t).max), (1 << (8 * np.dtype(t).itemsize)) - 1)
               for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)}
_MAX_FETCHES = 32      # posted fetching atomics whose answers wait for quiet, at most
_AMO = {"xchg": proxy.AMO_SWAP, "add": proxy.AMO_ADD, "and": proxy.AMO_AND, "or": proxy.AMO_OR,
        "xor": proxy.AMO_XOR}


class Transports:
    """How this PE reaches each PE; ``kinds[pe]`` is ``self``, ``p2p``, ``ibgda`` or ``proxy``.
    ``wakes``: the PEs' wake words (``core.native._wake_words.WakeWords``; None: none): each write
    into a heap mapped here is counted at its PE's, the remote target counts the writes it
    applies to this PE's heap at this PE's, and the remote engines' answers at this PE's
    word for answers."""

    def __init__(self, boot, heap, timeout: float, on_nic_failure: Callable[[], None], wakes=None):
        self.heap = heap
        self.wakes = wakes
        # (for native code: the target's writes, the answers' handlers)
        self._wake = (0, 0) if wakes is None else (wakes.addresses[boot.my_pe], wakes.answers)
        self.my_pe = boot.my_pe
        self.timeout = timeout
        self.remote = [pe for pe in range(boot.n_pes) if not heap.reachable(pe)]
        self.kinds = ["self" if pe == boot.my_pe else "p2p" if heap.reachable(pe) else "unreachable"
                      for pe in range(boot.n_pes)]
        self.engine = self.heap_region = None
        # copy_small(pe, offset, local, to_peer): the small-call fast path (``DirectCopies``)
        # to PE pe on another node, numpy ``local`` into (``to_peer``) or out of its heap at
        # ``offset``, complete on return (then True; False: take the general path, as for
        # a ``local`` that is not C-contiguous)
        self.copy_small = self._copy_through_nic
        self.engines: dict = {}          # remote transport name -> its engine, made on first use
        self.quieted: tuple = ()         # the engines that may hold requests for ``quiet`` (``engine``'s)
        self.remote_transport = setting("PGAS_REMOTE_TRANSPORT")
        self.gpu_path = None             # cuda: the GPU-initiated path (heap.attach_nic)
        self._fetches: list = []         # (engine, ticket, out, dtype, pe): answers that land at quiet
        self._fetches_lock = threading.Lock()
        self.registered: dict[int, tuple] = {}   # register_buffer: address -> (nbytes, array, region or None)
        self.symmetric: dict[int, int] = {}      # register_symmetric: heap offset -> bytes (``add_symmetric``)
        self.nic = Nic(boot.comm, boot.my_pe, on_nic_failure)
        if wakes is not None:
            self.nic.on_written = functools.partial(wakes.wake, boot.my_pe)
        self.recent = RecentRegistrations(self.nic)     # local buffers' registrations, kept
        self.native_nic = False          # the NIC's WQEs executed by native code over UCX (below)
        self.native = None               # ... by this NicQueues, made on first use
        if heap.device_arrays:
            self._connect_gpu(boot, heap)
            return
        self.heap_region = self.nic.register(heap.views[boot.my_pe], ACCESS_REMOTE)
        # the NIC's WQEs executed by native code over UCX where it loads
        self.native_nic = setting("PGAS_NIC_WIRE") == "ucx" and self._ucx_for_the_nic()
        # every PE chose the same: with ucx or the native NIC nobody sends this NIC's thread anything
        self.nic.connect(self.heap_region, self.remote, serve=not (self.native_nic or self.remote_transport == "ucx"))
        if self.remote:
            self.use_remote(self.remote_transport)

    def _connect_gpu(self, boot, heap) -> None:
        """cuda: the GPU heap registered by its dma-buf, and the GPU-initiated path to every
        PE on another node, which the heap attaches (``heap.attach_nic``: queue pairs the
        GPU posts into, and a window through which the NIC reaches GPU memory). The GPU
        drives the NIC itself: there is no proxy path on cuda, so where ibgda is not chosen,
        or cannot be set up (said once), those PEs stay unreachable (the device's error
        says why). Host put/get to them post on queue pairs of the host's (``Ibgda``, as
        on the simulator; ``pgas/cuda/nic/_remote_rma.py``). The native NIC serves both, as on
        the simulator, where UCX loads (else the NIC's thread over MPI)."""
        self.heap_region = self.nic.register_dmabuf(heap.dmabuf_fd(), heap.base, heap.size, ACCESS_REMOTE)
        ibgda = bool(self.remote) and self.remote_transport == "ibgda"
        self.native_nic = ibgda and setting("PGAS_NIC_WIRE") == "ucx" and self._ucx_for_the_nic()
        # collective, and so before anything that may fail here: the NIC, and the native
        # NIC's endpoints (it refuses requests to the heap until the heap's window is attached)
        self.nic.connect(self.heap_region, self.remote, serve=not self.native_nic)
        if not ibgda:
            return
        native = self._native_nic()
        try:
            # host put/get to those PEs: the host's own queue pairs, which the same NIC serves
            self.engine = self.engines["ibgda"] = Ibgda(self.nic, self.timeout, native)
            self.gpu_path = heap.attach_nic(self.nic, self.heap_region, boot.n_pes, native)
        except (PgasError, ImportError, OSError, RuntimeError) as e:    # (llvmlite cannot compile, too)
            sys.stderr.write(f"pgas (PE {self.my_pe}): the GPU-initiated NIC path cannot be set up here "
                             f"({type(e).__name__}: {e}); PEs on other nodes are unreachable from this one\n")
            return
        self.heap_region.window = self.gpu_path.window     # the NIC reaches the heap from now on
        self.quieted = (self.engine,)
        if native is not None:
            self._connected(self.engine, True)
        for pe in self.remote:
            self.kinds[pe] = "ibgda"

    def use_remote(self, name: str) -> None:
        """Reach the PEs on other nodes through ``name`` (``ibgda`` or ``proxy``) from now
        on. Call it after ``quiet``, between phases (``pgas.bench remote`` compares both in
        one run). Where the GPU-initiated path cannot be set up, this says so once and
        uses the proxy."""
        if name not in REMOTE_TRANSPORTS:
            raise PgasError(f"remote transport must be one of {', '.join(REMOTE_TRANSPORTS)}, got {name!r}")
        try:
            self.quiet("pgas.use_remote")       # (what the engine in use still holds)
        except PgasError as e:      # a failure kept for quiet: raised once every PE has switched
            failure = e
        else:
            failure = None
        self._switch(name)
        if failure is not None:
            raise failure

    def _switch(self, name: str) -> None:
        """``use_remote``'s switch to ``name`` (collective where an engine is made)."""
        if name == "ibgda" and name not in self.engines:
            native = self._native_nic()
            try:
                self.engines[name] = self._connected(Ibgda(self.nic, self.timeout, native), native is not None)
            except PgasError:
                raise                   # (a RuntimeError too, but not the llvmlite failure below)
            except (ImportError, OSError, RuntimeError) as e:     # llvmlite cannot compile its code here
                sys.stderr.write(f"pgas (PE {self.my_pe}): the GPU-initiated NIC path (ibgda) cannot be set up "
                                 f"here ({type(e).__name__}: {e}); using the CPU proxy for PEs on other nodes\n")
                name = "proxy"
        if name == "ucx" and self._ucx_engine("using the CPU proxy for PEs on other nodes") is None:
            name = "proxy"
        if name == "proxy" and name not in self.engines:
            native = self._native_nic()
            self.engines[name] = self._connected(proxy.Proxy(self.nic, self.timeout, native), native is not None)
        self.engine = self.engines[name]
        # (the ucx engine beside ibgda or the proxy takes only copies complete on return:
        # nothing to quiet, unless one timed out: ``_quiet_beside``)
        self.quieted = (self.engine,)
        self.copy_small = self._small_copies(name)
        self.remote_transport = name
        for pe in self.remote:
            self.kinds[pe] = name

    def _ucx_engine(self, otherwise: str) -> Ucx | None:
        """The ucx engine (made at the first call: collective), or None where it cannot be
        set up (no UCX in this MPI: said once, with what is done ``otherwise``)."""
        if "ucx" not in self.engines:
            try:
                self.engines["ucx"] = self._connected(Ucx(self.nic, self.heap_region, self.timeout, *self._wake,
                                                          registered=self.symmetric), True)
            except PgasError as e:
                sys.stderr.write(f"pgas (PE {self.my_pe}): the ucx engine cannot be set up here ({e}); "
                                 f"{otherwise}\n")
                return None
        return self.engines["ucx"]

    def _small_copies(self, name: str):
        """``copy_small`` for remote transport ``name``: the ucx engine's one-sided put or
        get (ucx; and ibgda's and the proxy's, with the native NIC: NVSHMEM's host calls
        take the host's transport rather than the GPU's queue pairs or its proxy thread,
        here about twice as fast as ibgda's queue pairs and 30-50 times the proxy thread's,
        but only while the path has nothing of this PE's in flight to the peer: the
        engine's guard, so that what was issued before to the same PE lands first); else
        one request through the NIC."""
        host = self.engines.get("ucx")
        beside = name in ("ibgda", "proxy") and self.native is not None
        if host is None:    # (collective: the ucx engine is made on every PE or on none)
            beside = all(self.nic.comm.allgather(beside))
        if beside:
            host = self._ucx_engine("host put/get to PEs on other nodes go through the NIC")
            if host is not None:
                host.guard_with(self.engine, self._copy_through_nic, functools.partial(self._quiet_beside, host))
                return host.copy_small
        elif host is not None:
            host.guard_with()
        return host.copy_small if name == "ucx" else self._copy_through_nic

    def _quiet_beside(self, host: Ucx) -> None:
        """A copy of the ucx engine beside ibgda or the proxy timed out (still in flight):
        ``quiet`` completes the ucx engine's requests too from now on."""
        if host not in self.quieted:
            self.quieted = (*self.quieted, host)

    def _connected(self, engine, over_ucx: bool):
        """``engine``, its UCX endpoints (``over_ucx``: the ucx engine's, or the native NIC's)
        connected now while every PE progresses (collective: an empty get from each peer).
        UCX connects an endpoint at its first message, which needs the peer to progress;
        left to a sleeping peer's first wake-up it could take long."""
        if over_ucx:
            for pe in self.nic.peers:
                engine.wait("pgas.init", engine.submit("pgas.init", proxy.GET, pe, self.nic.remote[pe].base))
        return engine

    def _ucx_for_the_nic(self) -> bool:
        """True when UCX loads; else says once why the NIC's thread and MPI carry the WQEs."""
        try:
            ucp.load()
        except PgasError as e:
            if self.remote:
                sys.stderr.write(f"pgas (PE {self.my_pe}): {e}; the emulated NIC's thread executes the "
                                 f"ibgda and proxy paths' requests over MPI\n")
            return False
        return True

    def _native_nic(self) -> NicQueues | None:
        """The native NIC that executes the WQEs of the ibgda and proxy paths (made at the
        first of them), or None: PGAS_NIC_WIRE=mpi, or UCX cannot be loaded (the emulated
        NIC's thread then executes them over MPI)."""
        if self.native_nic and self.native is None:
            self.native = NicQueues(self.nic, self.heap_region, *self._wake, registered=self.symmetric)
        return self.native

    def add_symmetric(self, offset: int, nbytes: int, fn: str) -> None:
        """Memory made symmetric at ``offset`` of every heap (``register_symmetric``, its
        ``nbytes`` mapped there): registered with UCX apart from the heap by each user of
        UCX that reaches the peers one-sided (collective), and by those made later. A
        PgasError naming the PEs where it could not be, nothing kept registered then."""
        done = []
        try:
            for keys in self._heap_keys():
                keys.add(offset, nbytes, fn)
                done.append(keys)
        except PgasError:
            for keys in done:
                keys.remove(offset)
            raise
        self.symmetric[offset] = nbytes

    def remove_symmetric(self, offset: int) -> None:
        """Undo ``add_symmetric`` (nobody reaches the memory any more)."""
        for keys in self._heap_keys():
            keys.remove(offset)
        del self.symmetric[offset]

    def ucx_memory(self) -> dict:
        """For ``pgas.info()``: the kinds of memory the loaded UCX registers (its context's
        memory types), whether this PE's heap is registered with it for one-sided access
        (the cuda backend's GPU heap is not: the native NIC reaches it through its window,
        by messages), and the memory made symmetric registered apart (heap offset ->
        bytes); empty where no user of UCX is made."""
        user = self.engines.get("ucx") or self.native
        if user is None:
            return {}
        keys = user.heap_keys
        return {"memory_types": rma.memory_types(user.worker),
                "heap": "registered" if keys is not None else "not registered: reached through its window, by messages",
                "made_symmetric": dict(self.symmetric) if keys is not None else {}}

    def _heap_keys(self) -> list:
        """The heap's registrations with UCX (``_rma.HeapKeys``): the ucx engine's and the
        native NIC's, where they reach the peers one-sided."""
        users = (self.engines.get("ucx"), self.native)
        return [user.heap_keys for user in users if user is not None and user.heap_keys is not None]

    def close(self) -> None:
        """Stop the remote engines and the NIC (every PE must be done with this one: after a barrier)."""
        for engine in self.engines.values():
            engine.close()
        if self.native is not None:
            self.native.close()
            self.native = None
        if self.nic is not None:
            self.recent.close()
            self.nic.deregister(self.heap_region)
            for _, _, region in self.registered.values():   # left registered: dropped with the NIC
                if region is not None:
                    self.nic.deregister(region)
            self.registered = {}
            self.nic.close()
        if self.gpu_path is not None:
            self.gpu_path.close(self.nic)       # after the NIC thread has stopped
        if self.wakes is not None:
            self.wakes.close()
        self.engines, self.engine, self.quieted, self.nic, self.gpu_path = {}, None, (), None, None

    def regions(self) -> list[dict]:
        """The registered memory regions, for ``pgas.info()``."""
        if self.nic is None:
            return []
        memory = "gpu (dma-buf)" if self.heap_region.dmabuf_fd is not None else "host"
        return [{"pe": pe, "base": hex(r.base), "size": r.size, "rkey": hex(r.rkey), "memory": memory,
                 **({"lkey": hex(self.heap_region.lkey)} if pe == self.my_pe else {})}
                for pe, r in enumerate(self.nic.remote)]

    # Helpers ------------------------------------------------------------------------

    def through_nic(self, fn: str, pe: int) -> bool:
        """True when PE ``pe`` is reached through the NIC; PgasError if not at all."""
        kind = self.kinds[pe]
        if kind == "unreachable":      # the device's check says the same
            raise device_error("UNREACHABLE", fn, why=UNREACHABLE_WHY, a=pe)
        return kind in REMOTE_TRANSPORTS

    def _written(self, pe: int) -> None:
        """This thread wrote PE ``pe``'s heap (mapped here): wake whoever waits for a word of it."""
        if self.wakes is not None:
            self.wakes.wake(pe)

    def _raddr(self, pe: int, local: np.ndarray, fn: str, what: str) -> int:
        """The address of symmetric ``local``'s element 0 in PE ``pe``'s registered heap."""
        return self.nic.remote[pe].base + self.heap.offset_of(local, fn, what)

    def local_key(self, data: np.ndarray):
        """(lkey, temporary registration or None) for the local bytes of flat ``data`` (maybe
        strided) that the NIC reads or writes: the heap's own key, that of a buffer the user
        registered (``pgas.register_buffer``), or a registration of just their span, used
        while the request lasts (``self.recent.release`` it then) and kept for the next."""
        span = (data.size - 1) * data.strides[0] + data.itemsize if data.size else 0
        return self._local_key_at(address_of(data), span)

    def _local_key_at(self, address: int, span: int):
        """``local_key`` of the ``span`` bytes at ``address``."""
        if self.heap_region.slice(address, span) is not None:
            return self.heap_region.lkey, None
        for _, _, region in self.registered.values():     # buffers the user registered
            if region is not None and region.slice(address, span) is not None:
                return region.lkey, None
        return self.recent.acquire(address, span)

    # Contiguous and strided copies ------------------------------------------------------

    def share(self, fn: str, pes, nelems: int, rank: int, size: int) -> tuple[int, int]:
        """(first, count): the part of a group operation (``size`` threads, this one ``rank``)
        on ``nelems`` elements of the PEs ``pes`` that this thread does. On load/store a
        contiguous piece each; when any of them is reached through the NIC the group's
        first thread does it all, in one request per PE (as a block-scoped put posts one
        WQE) rather than one per thread."""
        if any(self.through_nic(fn, pe) for pe in pes):
            return (0, nelems) if rank == 0 else (0, 0)
        first = nelems * rank // size
        return first, nelems * (rank + 1) // size - first

    def copy(self, fn: str, pe: int, to_peer: bool, sym: np.ndarray, sym_stride: int, other: np.ndarray,
             other_stride: int, first: int, count: int, nbi: bool, tickets: list | None = None,
             lane: int = 0) -> None:
        """Elements i in [first, first + count): ``to_peer``: ``other[i*other_stride]`` into
        PE ``pe``'s ``sym[i*sym_stride]``; else the reverse. Flat arrays; ``sym`` symmetric.
        ``tickets`` (a context's list, with ``nbi``): the NIC requests of the copy are kept
        there for ``complete`` instead of being left to ``quiet``; ``lane`` (a context's,
        from ``new_lane``): the queue pairs of the engine they travel on."""
        if count <= 0:
            return
        s = sym[first * sym_stride:(first + count - 1) * sym_stride + 1:sym_stride]
        o = other[first * other_stride:(first + count - 1) * other_stride + 1:other_stride]
        if not self.through_nic(fn, pe):
            theirs = self.heap.view_on(pe, s, fn, "dest" if to_peer else "src")
            if to_peer:
                np.copyto(theirs, o)
                self._written(pe)
            else:
                np.copyto(o, theirs)
            return
        if to_peer and nbi and tickets is None and count == 1 and s.itemsize <= 8:   # inline, as ``store``
            self.engine.put_inline(fn, pe, self._raddr(pe, s, fn, "dest"), s.itemsize,
                                   int.from_bytes(o.tobytes(), "little"))
            return
        # contiguous: a request per MAX_MESSAGE bytes; strided: one per element (as NVSHMEM's
        # iput over IB does)
        contiguous = s.flags.c_contiguous and o.flags.c_contiguous
        step = max(mlx5.MAX_MESSAGE // s.itemsize, 1) if contiguous else 1
        pieces = [(s[i:i + step], o[i:i + step]) for i in range(0, count, step)]
        lkey, temporary = self.local_key(o)
        blocking = not nbi or temporary is not None   # a temporary registration ends with the call
        # A blocking copy waits for each contiguous piece (a few of up to MAX_MESSAGE): a large
        # get's data may land after the answer to a later piece (ucx: its data comes by
        # rendezvous, the small last piece's eagerly). A strided copy's elements are small and
        # complete in order: the last one done means all are.
        kept = tickets is not None and not blocking
        waited = [kept or blocking and (contiguous or index == len(pieces) - 1) for index in range(len(pieces))]
        what = "dest" if to_peer else "src"
        posted = self._post_copies(fn, pe, to_peer, [(self._raddr(pe, theirs, fn, what), address_of(mine), mine.nbytes)
                                                     for theirs, mine in pieces], lkey, waited, lane)
        if kept:
            tickets.extend((self.engine, ticket) for ticket in posted)
        if blocking:
            try:
                self._wait_each(fn, [(self.engine, ticket) for ticket, waits in zip(posted, waited) if waits])
                self.engine.raise_failures(fn)
            finally:
                if temporary is not None:
                    self.recent.release(temporary)

    def _post_copies(self, fn: str, pe: int, to_peer: bool, pieces: list, lkey: int, waited: list,
                     lane: int) -> list:
        """Post a write (``to_peer``) or read per ``(raddr, laddr, nbytes)`` of ``pieces``
        between PE ``pe``'s heap and local memory registered under ``lkey``; their tickets."""
        return [self.engine.submit(fn, proxy.PUT if to_peer else proxy.GET, pe, raddr, laddr=laddr, lkey=lkey,
                                   nbytes=nbytes, waited=waits, lane=lane)
                for (raddr, laddr, nbytes), waits in zip(pieces, waited)]

    def copy_span(self, fn: str, pe: int, to_peer: bool, offset: int, laddr: int, lkey: int, nbytes: int) -> None:
        """``nbytes`` contiguous bytes between local address ``laddr`` (registered under
        ``lkey``) and PE ``pe``'s heap at ``offset``: into it when ``to_peer``, else out of
        it, a request per MAX_MESSAGE bytes, complete on return (the cuda backend's host
        copies to other nodes, ``pgas/cuda/nic/_remote_rma.py``)."""
        base, step = self.nic.remote[pe].base + offset, mlx5.MAX_MESSAGE
        pieces = [(base + start, laddr + start, min(step, nbytes - start)) for start in range(0, nbytes, step)]
        posted = self._post_copies(fn, pe, to_peer, pieces, lkey, [True] * len(pieces), 0)
        self._wait_each(fn, [(self.engine, ticket) for ticket in posted])
        self.engine.raise_failures(fn)

    @staticmethod
    def _wait_each(fn: str, requests: list, on_answer=None) -> None:
        """Wait for every ``(engine, ticket)`` in ``requests`` (each wait frees its slot, so
        all are waited for even after a refusal), handing request i's answer to
        ``on_answer(i, answer)``, then raise the first refusal."""
        refused = None
        for index, (engine, ticket) in enumerate(requests):
            try:
                answer = engine.wait(fn, ticket)
            except PgasTimeoutError:
                raise
            except PgasError as e:
                refused = refused or e
            else:
                if on_answer is not None:
                    on_answer(index, answer)
        if refused is not None:
            raise refused

    def new_lane(self) -> int:
        """A lane of the remote engine in use (``self.engine``): queue pairs of its own, one
        to each PE on another node, for a context (``copy``); ``engine.lanes.release``
        gives it back."""
        return self.engine.lanes.new()

    def complete(self, fn: str, tickets: list) -> None:
        """Complete the NIC requests a context kept in ``tickets`` (see ``copy``), and empty it."""
        requests, tickets[:] = list(tickets), []
        self._wait_each(fn, requests)

    def _copy_through_nic(self, pe: int, offset: int, local: np.ndarray, to_peer: bool) -> bool:
        """``copy_small`` through the emulated NIC (ibgda, proxy): one request, its local
        bytes' registration kept (``recent``); False where PE ``pe`` is unreachable,
        ``local`` exceeds one message or is not C-contiguous."""
        nbytes = local.nbytes
        if self.kinds[pe] not in REMOTE_TRANSPORTS or nbytes > mlx5.MAX_MESSAGE or not local.flags.c_contiguous:
            return False
        laddr = address_of(local)
        lkey, temporary = self._local_key_at(laddr, nbytes)
        try:
            self.engine.copy_now(pe, offset, laddr, lkey, nbytes, to_peer)
        finally:
            if temporary is not None:
                self.recent.release(temporary)
        return True

    def read(self, fn: str, pe: int, local: np.ndarray, what: str) -> np.ndarray:
        """PE ``pe``'s copy of contiguous symmetric ``local``: a view where mapped, else fetched."""
        if not self.through_nic(fn, pe):
            return self.heap.view_on(pe, local, fn, what)
        out = np.empty_like(local)
        flat = local.reshape(-1)
        self.copy(fn, pe, False, flat, 1, out.reshape(-1), 1, 0, flat.size, False)
        return out

    # Single words --------------------------------------------------------------------

    def store(self, fn: str, pe: int, word: np.ndarray, value, what: str) -> None:
        """PE ``pe``'s ``word[0] = value``; on the NIC an inline write, complete at ``quiet``."""
        # (``word`` whole, not ``word[:1]``: the heap keeps the offset of an array it has seen)
        if not self.through_nic(fn, pe):
            self.heap.word_view(pe, word, fn, what)[0] = value
            self._written(pe)
            return
        raddr = self._raddr(pe, word, fn, what)
        size, dtype = word.itemsize, word.dtype
        limits = _INT_LIMITS.get(dtype)
        if size > 8:
            self.copy(fn, pe, True, word[:1], 1, np.array([value], dtype), 1, 0, 1, False)
        elif limits is not None and (type(value) is dtype.type
                                     or type(value) is int and limits[0] <= value <= limits[1]):
            # an integer the word holds as it is (the common case: a tenth of the time of numpy's way)
            self.engine.put_inline(fn, pe, raddr, size, int(value) & limits[2])
        elif type(value) in (int, float, bool) and dtype.kind in "biufc" and dtype.isnative:
            # the bits from a numpy scalar's view (no array made); the same conversion and
            # errors as an array's for Python numbers (not for numpy scalars: np.int8 of an
            # np.int64 300 wraps where an array refuses)
            self.engine.put_inline(fn, pe, raddr, size, int(dtype.type(value).view(_UNSIGNED[size])))
        else:
            self.engine.put_inline(fn, pe, raddr, size, int.from_bytes(np.array([value], dtype).tobytes(), "little"))

    def load(self, fn: str, pe: int, word: np.ndarray, what: str, acquire: bool):
        """PE ``pe``'s ``word[0]`` (``acquire``: later loads see what was stored before it)."""
        if not self.through_nic(fn, pe):
            theirs = self.heap.word_view(pe, word, fn, what)    # (``word`` whole: see ``store``)
            return _cpu_atomics.load_acquire(theirs, fn, what) if acquire else theirs[0]
        return self.read(fn, pe, word[:1], what)[0]

    def rmw(self, fn: str, pe: int, word: np.ndarray, op: str, value, what: str, fetch: bool = True):
        """Atomic ``op`` (one of _cpu_atomics.RMW_OPS) on PE ``pe``'s ``word[0]``; the old value
        when ``fetch`` (else, through the NIC, nothing: complete at ``quiet``)."""
        if not self.through_nic(fn, pe):
            old = _cpu_atomics.rmw(self.heap.word_view(pe, word, fn, what), op, value, fn, what)
            self._written(pe)
            return old
        _cpu_atomics.check_word(word, fn, what, op)
        if op == "add" and word.dtype in _cpu_atomics.FLOAT_DTYPES:
            return self._float_add(fn, pe, word, value, what)
        return self._atomic(fn, pe, word, _AMO[op], value, 0, what, fetch)

    def _float_add(self, fn: str, pe: int, word: np.ndarray, value, what: str):
        """Float add through the NIC, which only adds integers: read the word, then
        compare-and-swap its bit pattern from ``old`` to ``old + value`` (added in the
        word's type, as the GPU does) until no other atomic came in between; the old value.
        It waits for each round trip, so a non-fetching float add is complete on return."""
        dtype = word.dtype
        addend = dtype.type(value)
        old = self._atomic(fn, pe, word, proxy.AMO_FETCH, 0, 0, what, True)
        while True:
            seen = self._atomic(fn, pe, word, proxy.AMO_CAS, old + addend, old, what, True)
            if _cpu_atomics.as_bits(dtype, seen) == _cpu_atomics.as_bits(dtype, old):
                return old
            old = seen      # another PE's atomic came first: try again from what it left

    def compare_swap(self, fn: str, pe: int, word: np.ndarray, cond, value, what: str):
        if not self.through_nic(fn, pe):
            old = _cpu_atomics.compare_swap(self.heap.word_view(pe, word, fn, what), cond, value, fn, what)
            self._written(pe)
            return old
        _cpu_atomics.check_word(word, fn, what, "cas")
        return self._atomic(fn, pe, word, proxy.AMO_CAS, value, cond, what, True)

    def atomic_load(self, fn: str, pe: int, word: np.ndarray, what: str):
        """An atomic read of PE ``pe``'s ``word[0]`` (acquire)."""
        if not self.through_nic(fn, pe):
            return _cpu_atomics.load_acquire(self.heap.word_view(pe, word, fn, what), fn, what)
        _cpu_atomics.check_word(word, fn, what, "load")
        return self._atomic(fn, pe, word, proxy.AMO_FETCH, 0, 0, what, True)

    def word_loader(self, fn: str, pe: int, word: np.ndarray, what: str):
        """A function that reads PE ``pe``'s int64 ``word[0]`` atomically (acquire), for hot
        polling loops: a bound CPU load where it is mapped, else an atomic read through the NIC."""
        if not self.through_nic(fn, pe):
            return _cpu_atomics.int64_word(self.heap.word_view(pe, word, fn, what), fn, what)[0]
        return functools.partial(self.atomic_load, fn, pe, word[:1], what)

    def _atomic(self, fn, pe, word, op, value, cond, what, fetch):
        ticket = self._post_atomic(fn, pe, word, op, value, cond, what, fetch)
        if fetch:
            return _cpu_atomics.from_bits(word.dtype, self.engine.wait(fn, ticket))
        return None

    def _post_atomic(self, fn, pe, word, op, value, cond, what, waited):
        item = word[:1]
        return self.engine.submit(fn, op, pe, self._raddr(pe, item, fn, what), size=item.itemsize,
                                  nbytes=item.itemsize, value=_cpu_atomics.as_bits(item.dtype, value),
                                  compare=_cpu_atomics.as_bits(item.dtype, cond), waited=waited)

    def atomic_into(self, fn: str, pe: int, word: np.ndarray, op: str, value, cond, what: str, out) -> None:
        """A fetching atomic (``op``: "load", "cas" or one of _cpu_atomics.RMW_OPS) on PE
        ``pe``'s ``word[0]`` whose old value lands in ``out[0]`` by the next ``quiet``:
        through the NIC it is posted and its answer landed at ``quiet`` (OpenSHMEM's
        fetching ``_nbi`` atomics); where the word is mapped, and for a float add through
        the NIC (a loop of round trips), it is done now."""
        if not self.through_nic(fn, pe) or (op == "add" and word.dtype in _cpu_atomics.FLOAT_DTYPES):
            out[0] = (self.atomic_load(fn, pe, word, what) if op == "load" else
                      self.compare_swap(fn, pe, word, cond, value, what) if op == "cas" else
                      self.rmw(fn, pe, word, op, value, what, fetch=True))
            return
        _cpu_atomics.check_word(word, fn, what, op)
        amo = proxy.AMO_FETCH if op == "load" else proxy.AMO_CAS if op == "cas" else _AMO[op]
        ticket = self._post_atomic(fn, pe, word, amo, value, cond, what, True)
        with self._fetches_lock:
            self._fetches.append((self.engine, ticket, out, word.dtype, pe))
            landed = self._fetches[:_MAX_FETCHES // 2] if len(self._fetches) >= _MAX_FETCHES else []
            del self._fetches[:len(landed)]
        self._land(fn, landed)     # a request's slot stays held until its answer is read

    def _land(self, fn: str, fetches: list) -> None:
        """Write the answers of posted fetching atomics into their ``out`` arrays (every one,
        each wait frees its slot), then raise the first refusal."""
        def write(index, answer):
            _, _, out, dtype, _ = fetches[index]
            out[0] = _cpu_atomics.from_bits(dtype, answer)
        self._wait_each(fn, [(engine, ticket) for engine, ticket, *_ in fetches], write)

    def quiet(self, fn: str, pes=None) -> None:
        """Complete every operation this PE issued through the NIC (to the PEs in set
        ``pes``; all when None), and land the answers of its posted fetching atomics."""
        if self._fetches:       # (one posted by another thread meanwhile is not this quiet's)
            with self._fetches_lock:
                fetches = [f for f in self._fetches if pes is None or f[4] in pes]
                self._fetches = [f for f in self._fetches if pes is not None and f[4] not in pes]
            self._land(fn, fetches)
        for engine in self.quieted:
            engine.quiet(fn, pes)
