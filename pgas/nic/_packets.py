"""What two NICs send each other over the wire: batches of requests and their responses."""
from __future__ import annotations

import numpy as np

__all__ = ["PACKET", "RESULT", "HEADER", "PACKED", "FOLLOWS", "PACK_LIMIT", "TAG_REQUEST", "TAG_REQUEST_DATA",
           "TAG_RESPONSE", "TAG_RESPONSE_DATA"]

PACK_LIMIT = 64 << 10            # payloads up to this travel inside the batch message
TAG_REQUEST, TAG_REQUEST_DATA, TAG_RESPONSE, TAG_RESPONSE_DATA = 0x51, 0x52, 0x53, 0x54
# One request on the wire (what IB's BTH/RETH/AtomicETH headers carry).
PACKET = np.dtype([("opcode", "u1"), ("opmod", "u1"), ("flags", "u1"), ("pad", "u1"), ("rkey", "u4"),
                   ("raddr", "u8"), ("length", "u8"), ("operands", "u8", (4,))])
PACKED, FOLLOWS = 1, 2         # flags: payload inside the batch / in its own message
RESULT = np.dtype([("syndrome", "u1"), ("pad", "u1", (7,)), ("value", "u8")])
HEADER = 16                     # count, payload bytes (u8 each)
