"""A queue pair: the send queue to one peer, its doorbell record and its completion queue(s)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import _mlx5 as mlx5

__all__ = ["QueuePair", "SQ_DEPTH"]

SQ_DEPTH = 1024                  # basic blocks per send queue (and CQEs per completion queue)


@dataclass
class QueuePair:
    """A send queue to one peer, its doorbell record and its completion queue.

    ``collapsed`` (the GPU-initiated path, as NVSHMEM's IBGDA sets its CQs up): the CQ is
    one CQE that the NIC overwrites once per response batch with the newest completed
    WQE's index, and each refused WQE gets an error CQE in ``err_cq`` (a ring of
    ``depth``), written before the collapsed CQE that passes it. ``rung`` (collapsed
    queues): the word posting threads set when they ask the NIC to look; the NIC clears it
    before it reads the doorbell record, so doorbells of many threads come as one.
    """

    qpn: int
    peer: int
    collapsed: bool = False
    allocate: object = np.zeros     # (shape, dtype) -> zeroed array: where the queues live
    sq: np.ndarray = None
    dbr: np.ndarray = None          # producer index & 0xffff, big-endian
    cq: np.ndarray = None
    err_cq: np.ndarray | None = None
    rung: np.ndarray | None = None
    on_completion: object = None    # called (from the NIC thread) after CQEs are written
    nic_index: int = 0       # next WQE index the NIC reads (in basic blocks)
    cqes_written: int = 0    # CQEs the NIC has written (error CQEs, when collapsed)

    def __post_init__(self):
        self.sq = self.allocate((SQ_DEPTH, mlx5.BB), np.uint8)
        self.dbr = self.allocate(1, ">u4")
        self.cq = mlx5.empty_cq(1 if self.collapsed else SQ_DEPTH, self.allocate)
        if self.collapsed:
            self.err_cq = mlx5.empty_cq(SQ_DEPTH, self.allocate)

    @property
    def depth(self) -> int:
        return self.sq.shape[0]
