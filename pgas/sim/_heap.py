"""The symmetric heap of the simulator backend: one shared-memory file per PE.

Each PE creates its file, every PE of the node maps every file of the node, then the
files are unlinked: from then on the memory lives only in the mappings (and in the file
descriptors kept to map pages of them again), so a PE that is killed leaves nothing in
/dev/shm. PEs on other nodes get no mapping (``None``).

A range of pages of a mapped heap can show another shared file instead (``map_file``), and
the heap's own pages again (``restore``): how memory pgas did not allocate becomes
symmetric (``pgas.register_symmetric``).
"""
from __future__ import annotations

import mmap
import os
from contextlib import ExitStack
from dataclasses import dataclass

import numpy as np

from ..core._address import address_of
from ..core._env import shown
from ._multicast import MULTICAST_WHY, MulticastArray
from ._shared_files import map_fixed, shared_file_of
from ..core._errors import PgasConfigError, PgasError, PgasValueError
from ..core._job import SHM_DIR, shm_prefix
from ..runtime._arrays import array_span, check_span
from ..runtime._bootstrap import Bootstrap

__all__ = ["SymmetricHeap"]

_PAGE = os.sysconf("SC_PAGE_SIZE")
_KNOWN_ARRAYS = 256      # arrays whose heap offsets ``offset_of`` keeps (then it starts afresh)


@dataclass
class ExternalFile:
    """A user's shared file mapping being registered: the file, where in it, how many bytes."""
    path: str
    file_offset: int
    mapped: int


class SymmetricHeap:
    """This PE's heap and mapped views of the heaps of the PEs on its node."""

    device_arrays = False   # its arrays are numpy arrays (wrapped for kernels by _memory)

    def __init__(self, boot: Bootstrap, size: int, timeout: float, device: int | None = None):
        # ``device``: the simulator has one (0), which init has checked
        self.size = size
        self.my_pe = boot.my_pe
        self._node_comm, self._local_pes = boot.node_comm, boot.local_pes
        self._maps: dict[int, mmap.mmap] = {}
        self._files: dict[int, int] = {}     # PE -> a descriptor of its (unlinked) heap file
        self._external: dict[int, list[int]] = {}   # offset of registered memory -> the PEs mapped there
        self.views: list[np.ndarray | None] = [None] * boot.n_pes
        # id(array) -> (the array, its shape, its strides, its heap offset): a kernel passes
        # the same array objects call after call, and checking their span was a tenth of a
        # device call; the entry keeps the object alive, so its id is not reused meanwhile
        self._offsets: dict[int, tuple] = {}
        self._word_views: dict[int, tuple] = {}     # ``word_view``'s: id -> (array, shape, strides, dtype, {pe: view})
        with ExitStack() as rollback:
            self._map_node(boot, rollback)
            rollback.pop_all()
        self.base = self.views[boot.my_pe].__array_interface__["data"][0]

    def _path(self, boot: Bootstrap, pe: int) -> str:
        return os.path.join(SHM_DIR, shm_prefix(boot.job_id) + f"pe{pe}")

    def _check_room(self, boot: Bootstrap) -> None:
        """The heap files are sparse: a full /dev/shm shows only when a page is first
        touched, as a SIGBUS. So check first that the heaps of every PE on this machine fit."""
        stat = os.statvfs(SHM_DIR)
        free, needed = stat.f_bavail * stat.f_frsize, self.size * boot.pes_on_host
        if needed > free:
            raise PgasConfigError(
                f"{shown('PGAS_SYMMETRIC_SIZE')}: the symmetric heaps of the {boot.pes_on_host} PEs on this machine "
                f"need {needed} bytes of {SHM_DIR}, which has {free} free; give {SHM_DIR} more room (docker: "
                f"--shm-size; a tmpfs: mount -o remount,size=...) or use a smaller PGAS_SYMMETRIC_SIZE")

    def _map_node(self, boot: Bootstrap, rollback: ExitStack) -> None:
        self._check_room(boot)
        own = self._path(boot, boot.my_pe)
        try:
            fd = os.open(own, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        except OSError as exc:
            raise PgasError(f"cannot create the symmetric heap file {own}: {exc}") from None
        rollback.callback(_unlink_quietly, own)
        try:
            os.ftruncate(fd, self.size)
            self._map(boot.my_pe, fd)
        except OSError as exc:
            raise PgasConfigError(f"{shown('PGAS_SYMMETRIC_SIZE')}: cannot map a symmetric heap of {self.size} "
                                  f"bytes in {SHM_DIR} ({exc.strerror}); use a smaller PGAS_SYMMETRIC_SIZE") from None
        finally:
            os.close(fd)
        # Collective calls below are on the node communicator; a failure on one PE of
        # the node surfaces as an error on all of them (allreduce of success flags).
        boot.node_comm.Barrier()
        ok = True
        try:
            for pe in boot.local_pes:
                if pe != boot.my_pe:
                    fd = os.open(self._path(boot, pe), os.O_RDWR)
                    try:
                        self._map(pe, fd)
                    finally:
                        os.close(fd)
        except OSError:
            ok = False
        from mpi4py import MPI
        all_ok = boot.node_comm.allreduce(ok, op=MPI.LAND)
        _unlink_quietly(own)
        if not all_ok:
            self.close()
            raise PgasError("a PE of this node could not map its peers' symmetric heaps")
        rollback.callback(self.close)

    def _map(self, pe: int, fd: int) -> None:
        self._maps[pe] = mmap.mmap(fd, self.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self.views[pe] = np.frombuffer(self._maps[pe], dtype=np.uint8)
        self._files[pe] = os.dup(fd)

    def map_file(self, pe: int, offset: int, nbytes: int, fd: int, file_offset: int) -> None:
        """Show ``nbytes`` of file ``fd`` from ``file_offset`` at ``offset`` of PE ``pe``'s
        heap as mapped here, instead of the heap's own pages (all page-aligned)."""
        map_fixed(self.views[pe].ctypes.data + offset, nbytes, fd, file_offset)

    def restore(self, pe: int, offset: int, nbytes: int) -> None:
        """Undo ``map_file``: the heap's own pages at ``offset`` again."""
        self.map_file(pe, offset, nbytes, self._files[pe], offset)

    # Memory the user registers (register_symmetric); the cuda heap has the same calls ---------

    def external_memory(self, address: int, nbytes: int, fn: str) -> ExternalFile:
        """What of the user's memory at [address, address + nbytes) is mapped into the
        node's heaps: the shared file behind it (the node's PEs open it by name), from a
        page boundary; PgasValueError saying what it is not."""
        path, file_offset = shared_file_of(address, nbytes, fn, "a")
        if address % _PAGE:
            raise PgasValueError(f"{fn}: a must start at a page boundary (a multiple of {_PAGE} bytes), got "
                                 f"address {address:#x}: register the whole shared memory block, then slice the "
                                 "symmetric array returned")
        return ExternalFile(path, file_offset, -(-nbytes // _PAGE) * _PAGE)

    @staticmethod
    def external_offset(memory: ExternalFile, allocator) -> int:
        """A heap offset for ``memory``: pages of the heap (``allocator``), unused meanwhile."""
        return allocator.allocate(memory.mapped, _PAGE)

    @staticmethod
    def release_external_offset(offset: int, allocator) -> None:
        allocator.release(offset)

    def map_external(self, offset: int, memory: ExternalFile) -> str | None:
        """Collective over the node: map each PE's ``memory`` at ``offset`` of its heap, in
        every PE of the node. What failed here, or None (then ``unmap_external`` undoes
        what was done)."""
        sources = self._node_comm.allgather((memory.path, memory.file_offset))
        self._external[offset] = []
        for pe, (path, file_offset) in zip(self._local_pes, sources):
            try:
                fd = os.open(path, os.O_RDWR)
                try:
                    self.map_file(pe, offset, memory.mapped, fd, file_offset)
                finally:
                    os.close(fd)
            except (OSError, PgasError) as exc:
                return f"PE {self.my_pe} cannot map {path} (PE {pe}'s memory): {exc}"
            self._external[offset].append(pe)
        return None

    def unmap_external(self, offset: int, nbytes: int) -> None:
        """Undo ``map_external`` (what of it was done): the heaps' own pages again."""
        for pe in self._external.pop(offset, []):
            self.restore(pe, offset, nbytes)

    @staticmethod
    def forget_external(memory: ExternalFile) -> None:
        """Nothing is held: the file was opened by name for each mapping."""

    def close(self) -> None:
        """Unmap every heap (mappings still exported to live arrays stay until those die)."""
        self.views = [None] * len(self.views)
        self._offsets.clear()
        self._word_views.clear()
        for fd in self._files.values():
            os.close(fd)
        self._files.clear()
        for segment in self._maps.values():
            try:
                segment.close()
            except BufferError:
                pass  # an array still points into it; the mapping goes when the array does
        self._maps.clear()

    # Addresses ------------------------------------------------------------------------

    def offset_of(self, arr: np.ndarray, fn: str, what: str) -> int:
        """Heap offset of ``arr``'s data; PgasValueError naming ``fn`` and ``what`` if it is not all in the heap."""
        known = self._offsets.get(id(arr))
        if known is not None and known[0] is arr and known[1] == arr.shape and known[2] == arr.strides:
            return known[3]
        if type(arr) is np.ndarray and arr.size == 1:   # one element (a device call's word): the quick check
            offset = address_of(arr) - self.base
            if 0 <= offset <= self.size - arr.itemsize:
                return offset
        offset = check_span(array_span(arr, fn, what), self.base, self.size, fn, what)
        if type(arr) is np.ndarray:
            if len(self._offsets) >= _KNOWN_ARRAYS:
                self._offsets.clear()
            self._offsets[id(arr)] = (arr, arr.shape, arr.strides, offset)
        return offset

    def view_on(self, pe: int, arr: np.ndarray, fn: str, what: str) -> np.ndarray:
        """The same elements as ``arr`` (a view of this PE's heap) in PE ``pe``'s heap."""
        offset = self.offset_of(arr, fn, what)
        peer = self.views[pe]
        if peer is None:
            raise PgasError(f"{fn}: PE {pe} is on another node: it has no load/store path from this PE")
        return np.ndarray(arr.shape, arr.dtype, buffer=peer, offset=offset, strides=arr.strides)

    def word_view(self, pe: int, arr: np.ndarray, fn: str, what: str) -> np.ndarray:
        """``view_on`` for the caller's own reads and writes of ``arr``'s elements (a device
        call's word: never handed out, so never reshaped): kept by array object and PE
        (making a view on a mapping costs ~1.9 µs, a quarter of a simulated ``p`` + ``quiet``
        on one node). A kept view is checked against ``arr``'s shape, strides and dtype."""
        known = self._word_views.get(id(arr))
        if known is None or known[0] is not arr or known[1] != arr.shape or known[2] != arr.strides \
                or known[3] is not arr.dtype:
            if len(self._word_views) >= _KNOWN_ARRAYS:
                self._word_views.clear()
            known = self._word_views[id(arr)] = (arr, arr.shape, arr.strides, arr.dtype, {})
        view = known[4].get(pe)
        if view is None:
            view = known[4][pe] = self.view_on(pe, arr, fn, what)
        return view

    def array_at(self, offset: int, shape: tuple, dtype: np.dtype, order: str = "C") -> np.ndarray:
        """An array of this PE's heap starting at ``offset``, its elements in memory order
        ``order`` ("C" or "F")."""
        return np.ndarray(shape, dtype, buffer=self.views[self.my_pe], offset=offset, order=order)

    def multicast(self, pes, arr: np.ndarray, fn: str) -> MulticastArray:
        """``arr`` of every PE of ``pes`` as one array whose stores reach them all."""
        far = [pe for pe in pes if self.views[pe] is None]
        if far:
            raise PgasError(f"{fn}: team member PE {far[0]} is on another node: {MULTICAST_WHY}")
        return MulticastArray([self.view_on(pe, arr, fn, "a") for pe in pes], fn)

    def zero(self, offset: int, nbytes: int) -> None:
        self.views[self.my_pe][offset:offset + nbytes] = 0

    def reachable(self, pe: int) -> bool:
        """True when PE ``pe``'s heap is mapped here (load/store reachable)."""
        return self.views[pe] is not None

    @property
    def bases(self) -> list[int | None]:
        """The address of each PE's heap mapped here (None where not mapped)."""
        return [None if view is None else view.__array_interface__["data"][0] for view in self.views]

    def publish_team(self, slot: int, team) -> None:
        """Nothing to do: simulated device functions read the runtime's team table."""


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
