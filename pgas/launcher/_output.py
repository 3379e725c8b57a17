"""How the PEs' output reaches pgasrun's stdout and stderr whole, a line at any length.

mpiexec (Hydra) merges the PEs' output streams into its own stdout and stderr in the
pieces it reads from each PE's pipe (up to 64 KiB at a time), so a line longer than a pipe
can take atomically (4096 bytes) would be cut and glued to other PEs' lines. Each PE's
guard therefore sends its output as records of at most 4096 bytes (``frame``): a write of
that size to a pipe is atomic, and Hydra reads the pipe in larger pieces, so a record is
never cut. pgasrun reads mpiexec's streams (``Relay``), collects each PE's records and
writes a unit (whole lines, or a partial line the guard gave up waiting for) when its
last record arrives: one writer, so units never mix. Bytes that are not records (mpiexec's
own messages) pass through as they come.
"""
from __future__ import annotations

import os
import selectors
import struct
import threading

__all__ = ["frame", "write_all", "Relay"]

_MAGIC = b"\x1e\x1fpgas"
_HEADER = struct.Struct("<6sIHB")       # magic, PE, payload bytes, last-record flag
_RECORD = 4096                          # PIPE_BUF: a write of at most this much is atomic
_PAYLOAD = _RECORD - _HEADER.size


def frame(pe: int, unit: bytes) -> list[bytes]:
    """``unit`` of PE ``pe`` as records, each to be written with one ``write``."""
    pieces = [unit[i:i + _PAYLOAD] for i in range(0, len(unit), _PAYLOAD)] or [b""]
    return [_HEADER.pack(_MAGIC, pe, len(piece), i == len(pieces) - 1) + piece for i, piece in enumerate(pieces)]


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data``; dropped when nobody reads any more."""
    try:
        while data:
            data = data[os.write(fd, data):]
    except OSError:
        pass


class _Stream:
    """One of mpiexec's streams, parsed into records, and the units of each PE on it."""

    def __init__(self, out_fd: int):
        self.out_fd = out_fd
        self.buffer = b""
        self.units: dict[int, list[bytes]] = {}

    def feed(self, data: bytes) -> None:
        self.buffer += data
        while self.buffer:
            if not self.buffer.startswith(_MAGIC[:len(self.buffer)]):
                self._pass_through()
                continue
            if len(self.buffer) < _HEADER.size:
                return                       # the rest of the header is on its way
            _, pe, size, last = _HEADER.unpack_from(self.buffer)
            if len(self.buffer) < _HEADER.size + size:
                return
            self.units.setdefault(pe, []).append(self.buffer[_HEADER.size:_HEADER.size + size])
            self.buffer = self.buffer[_HEADER.size + size:]
            if last:
                write_all(self.out_fd, b"".join(self.units.pop(pe)))

    def _pass_through(self) -> None:
        """Bytes up to the next record (or all of them): not a PE's, mpiexec's own."""
        end = self.buffer.find(_MAGIC[:1], 1)
        end = len(self.buffer) if end < 0 else end
        write_all(self.out_fd, self.buffer[:end])
        self.buffer = self.buffer[end:]

    def close(self) -> None:
        """At the end: whatever is left (a PE killed in the middle of a unit)."""
        for pieces in self.units.values():
            write_all(self.out_fd, b"".join(pieces))
        write_all(self.out_fd, self.buffer)
        self.units.clear()
        self.buffer = b""


class Relay:
    """A thread that passes mpiexec's stdout and stderr (read ends ``out`` and ``err``) on
    to this process's, a PE's unit at a time. It sleeps until there is output."""

    def __init__(self, out: int, err: int):
        self._streams = {out: _Stream(1), err: _Stream(2)}
        self._thread = threading.Thread(target=self._run, name="pgasrun-output", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        selector = selectors.DefaultSelector()
        for fd in self._streams:
            selector.register(fd, selectors.EVENT_READ)
        open_fds = set(self._streams)
        while open_fds:
            for key, _ in selector.select():
                data = os.read(key.fd, 1 << 16)
                if data:
                    self._streams[key.fd].feed(data)
                else:
                    selector.unregister(key.fd)
                    open_fds.discard(key.fd)
                    self._streams[key.fd].close()
                    os.close(key.fd)

    def join(self, seconds: float) -> None:
        """Wait until mpiexec's streams are closed and everything is written."""
        self._thread.join(seconds)
