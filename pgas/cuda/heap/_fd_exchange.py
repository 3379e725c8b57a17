"""File descriptors passed between the processes of one node (``SCM_RIGHTS``).

A descriptor means something only in its own process: another process gets its own copy
of the same open file by receiving it over a Unix domain socket. This is how the node's PEs
share the file descriptors of their VMM allocations (``_vmm``), as PyTorch's symmetric
memory and NCCL do. The sockets are in Linux's abstract namespace (no file anywhere: a
killed PE leaves nothing behind), named by a token that the node's first PE draws and
sends to the others over MPI, and they live for one exchange. A descriptor is taken only
from the socket of the PE it names (the kernel gives the sender's bound name).
"""
from __future__ import annotations

import array
import os
import secrets
import select
import socket
import time

from ...core._errors import PgasError

__all__ = ["allgather_fds"]

_RANK_BYTES = 4
_FIRST_PAUSE_S, _MAX_PAUSE_S = 1e-4, 1e-2


def _name(token: str, rank: int) -> bytes:
    return f"\0pgas-fds-{token}-{rank}".encode()


def allgather_fds(node_comm, fd: int | None, timeout: float, what: str) -> list[int]:
    """Collective over ``node_comm`` (the PEs of this node): each gives descriptor ``fd``
    (None: it has none, having failed to make it); returns every PE's, in node rank order,
    as descriptors of this process (its own a duplicate): the caller closes them all.
    PgasError naming ``what`` on every PE when a PE has no descriptor or no socket; on this
    PE when a PE's descriptor has not come after ``timeout`` seconds."""
    rank, size = node_comm.Get_rank(), node_comm.Get_size()
    token = node_comm.bcast(secrets.token_hex(8) if rank == 0 else None, root=0)
    received: dict[int, int] = {}
    sock, problem = None, None
    try:
        if fd is None:
            problem = "it has no descriptor to give (see its error)"
        else:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            sock.bind(_name(token, rank))
            received[rank] = os.dup(fd)
    except OSError as exc:
        problem = f"it cannot open its socket: {exc}"
    try:
        problems = node_comm.allgather(problem)     # every socket is bound (or all give up) before anyone sends
        if any(problems):
            raise PgasError(f"{what}: " + "; ".join(f"node rank {r}: {p}" for r, p in enumerate(problems) if p))
        _exchange(sock, token, rank, size, fd, received, timeout, what)
        return [received[r] for r in range(size)]
    except BaseException:
        for got in received.values():
            os.close(got)
        raise
    finally:
        if sock is not None:
            sock.close()


def _exchange(sock, token: str, rank: int, size: int, fd: int, received: dict, timeout: float, what: str) -> None:
    """Send ``fd`` to every other rank and receive theirs into ``received``. Sends do not
    block: a peer's queue holds only a few datagrams (net.unix.max_dgram_qlen), so a send
    that finds it full waits until this PE has received what is there for it."""
    sock.setblocking(False)
    message = rank.to_bytes(_RANK_BYTES, "little")
    rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))]
    unsent = [(rank + k) % size for k in range(1, size)]
    deadline, pause = time.monotonic() + timeout, _FIRST_PAUSE_S
    try:
        while unsent or len(received) < size:
            progressed = False
            while unsent:
                try:
                    # (sendmsg: socket.send_fds ignores its address argument)
                    sock.sendmsg([message], rights, 0, _name(token, unsent[0]))
                except BlockingIOError:
                    break
                unsent.pop(0)
                progressed = True
            while len(received) < size:
                try:
                    data, fds, _, sender = socket.recv_fds(sock, _RANK_BYTES, 1)
                except BlockingIOError:
                    break
                progressed = _accept(token, size, data, fds, sender, received) or progressed
            if not unsent and len(received) == size:
                return
            if time.monotonic() > deadline:
                missing = sorted(set(range(size)) - set(received))
                raise PgasError(f"{what}: the file descriptors of node ranks {missing} did not come within "
                                f"PGAS_TIMEOUT={timeout:g} s" + (f" (ranks {sorted(unsent)} could not be sent theirs)"
                                                                 if unsent else ""))
            pause = _FIRST_PAUSE_S if progressed else min(2 * pause, _MAX_PAUSE_S)
            select.select([sock], [], [], pause)    # wakes at once when a descriptor comes
    except OSError as exc:
        raise PgasError(f"{what}: passing file descriptors between the node's processes failed: {exc}") from None


def _accept(token: str, size: int, data: bytes, fds: list, sender, received: dict) -> bool:
    """Keep a descriptor that node rank ``r`` sent from its own socket; close anything else."""
    r = int.from_bytes(data, "little") if len(data) == _RANK_BYTES else -1
    if len(fds) == 1 and 0 <= r < size and r not in received and sender == _name(token, r):
        received[r] = fds[0]
        return True
    for stray in fds:
        os.close(stray)
    return False
