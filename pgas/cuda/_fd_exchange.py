"""File descriptors passed between the processes of one node (``SCM_RIGHTS``).

A descriptor means something only in its own process: another process gets its own copy
of the same open file by receiving it over a Unix domain socket. This is how the node's PEs
share the file descriptors of their VMM allocations (``_vmm``), as PyTorch's symmetric
memory and NCCL do. The sockets are in Linux's abstract namespace (no file anywhere: a
killed PE leaves nothing behind), named by a token that the node's first PE draws and
sends to the others over MPI, and they live for one exchange.
"""
from __future__ import annotations

import array
import os
import secrets
import socket

from ..core._errors import PgasError

__all__ = ["allgather_fds"]

_RANK_BYTES = 4


def _name(token: str, rank: int) -> bytes:
    return f"\0pgas-fds-{token}-{rank}".encode()


def allgather_fds(node_comm, fd: int, timeout: float, what: str) -> list[int]:
    """Collective over ``node_comm`` (the PEs of this node): each gives descriptor ``fd``;
    returns every PE's, in node rank order, as descriptors of this process (its own a
    duplicate): the caller closes them all. PgasError naming ``what`` when a PE's
    descriptor has not come after ``timeout`` seconds."""
    rank, size = node_comm.Get_rank(), node_comm.Get_size()
    if size == 1:
        return [os.dup(fd)]
    token = node_comm.bcast(secrets.token_hex(8) if rank == 0 else None, root=0)
    received: dict[int, int] = {rank: os.dup(fd)}
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        try:
            sock.bind(_name(token, rank))
            node_comm.Barrier()         # every socket is bound before anyone sends
            for peer in range(size):
                if peer != rank:
                    # (sendmsg: socket.send_fds ignores its address argument)
                    sock.sendmsg([rank.to_bytes(_RANK_BYTES, "little")],
                                 [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))], 0, _name(token, peer))
            sock.settimeout(timeout)
            while len(received) < size:
                message, fds, _, _ = socket.recv_fds(sock, _RANK_BYTES, 1)
                if len(fds) != 1 or len(message) != _RANK_BYTES:
                    for stray in fds:
                        os.close(stray)
                    _close_all(received)
                    raise PgasError(f"{what}: a message without a file descriptor came from another process")
                received[int.from_bytes(message, "little")] = fds[0]
        except TimeoutError:
            missing = sorted(set(range(size)) - set(received))
            _close_all(received)
            raise PgasError(f"{what}: the file descriptors of node ranks {missing} did not come within "
                            f"PGAS_TIMEOUT={timeout:g} s") from None
        except OSError as exc:
            _close_all(received)
            raise PgasError(f"{what}: passing file descriptors between the node's processes failed: {exc}") from None
    return [received[r] for r in range(size)]


def _close_all(fds: dict[int, int]) -> None:
    for fd in fds.values():
        os.close(fd)
