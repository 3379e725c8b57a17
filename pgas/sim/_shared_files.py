"""Shared file mappings of this process: which file backs some memory (``/proc/self/maps``),
and mapping a file's pages over an existing mapping (``mmap`` with ``MAP_FIXED``).

This is how the simulator makes memory it did not allocate symmetric: memory that is a
shared mapping of a file (``multiprocessing.shared_memory``, an mmap of a /dev/shm file) can
be mapped again into every heap view, as NVSHMEM maps a VMM allocation's exported handle.
Private memory (a plain numpy array) cannot be reached by another process at all.
"""
from __future__ import annotations

import ctypes
import mmap
import os

from ..core._errors import PgasError, PgasValueError

__all__ = ["map_fixed", "shared_file_of"]

_MAP_FAILED = ctypes.c_void_p(-1).value

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]


def map_fixed(address: int, nbytes: int, fd: int, file_offset: int) -> None:
    """Map ``nbytes`` of file ``fd`` from ``file_offset``, shared and writable, at exactly
    ``address``, replacing whatever was mapped there (all page-aligned)."""
    got = _libc.mmap(address, nbytes, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED | 0x10, fd, file_offset)
    if got == _MAP_FAILED or got != address:   # 0x10: MAP_FIXED
        raise PgasError(f"cannot map {nbytes} bytes of a shared file at {address:#x}: "
                        f"{os.strerror(ctypes.get_errno())}")


def shared_file_of(address: int, nbytes: int, fn: str, what: str) -> tuple[str, int]:
    """(path, offset in the file) of the shared file mapping that holds all of
    [address, address + nbytes); PgasValueError naming ``fn`` and ``what`` saying why not."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            start, end = (int(x, 16) for x in fields[0].split("-"))
            if start <= address < end:
                break
        else:
            raise PgasValueError(f"{fn}: {what} is not mapped memory")
    path = fields[5].strip() if len(fields) > 5 else ""
    if fields[1][3] != "s" or not path.startswith("/"):
        raise PgasValueError(
            f"{fn}: {what} must be memory shared through a file (multiprocessing.shared_memory, or an mmap of "
            f"a file in /dev/shm opened MAP_SHARED), got {'private' if fields[1][3] != 's' else 'anonymous'} "
            "memory, which no other process can map (as NVSHMEM needs memory with an exportable handle)")
    if path.endswith(" (deleted)"):
        raise PgasValueError(f"{fn}: {what} is a mapping of {path[:-10]}, which was deleted: the other PEs of the "
                             "node open it by name, so delete it only after the registration")
    if address + nbytes > end:
        raise PgasValueError(f"{fn}: {what} runs past the end of its mapping of {path}")
    return path, int(fields[2], 16) + address - start
