"""The error record a failed device check writes on the cuda backend, and the exception the
host raises from it (with the simulator's text: ``pgas/core/_device_errors.py``).

A device check that fails writes the record into its PE's mailbox (pinned host memory
mapped into the GPU, ``_mailbox.py``) and traps; the host reads it (``from_record``).

The record, in int64 words (``RECORD_WORDS``; the device writer is ``_ptx.py``):

====  =================================================================
0     state: 0 empty, 1 being written, 2 complete (only the first failing thread writes)
1     kind (one of ``KINDS``)
2-4   values a, b, c (their meaning per kind, below)
5     the PE
6     thread index x, y, z (21 bits each)
7     block index x, y, z (21 bits each)
8     byte lengths of the three texts: fn | what << 16 | why << 32
9-    fn (FN_BYTES), then what (WHAT_BYTES), then why (WHY_BYTES), UTF-8
====  =================================================================
"""
from __future__ import annotations

import numpy as np

from ..core._device_errors import (BARRIER_TIMEOUT, KINDS, NIC_KINDS, NIC_REFUSED, NIC_TIMEOUT, SET_TIMEOUT, TIMEOUT,
                                   arrivals_waited_for, describe, ivar_waited_for, timeout_error, value_waited_for)
from ..core._errors import PgasError
from ..nic import _mlx5 as mlx5

__all__ = ["from_record", "RECORD_WORDS", "FN_BYTES", "WHAT_BYTES", "WHY_BYTES", "TEXT_WORD", "MAILBOX_BYTES"]

FN_BYTES, WHAT_BYTES, WHY_BYTES = 64, 32, 96
TEXT_WORD = 9
RECORD_WORDS = TEXT_WORD + (FN_BYTES + WHAT_BYTES + WHY_BYTES) // 8
MAILBOX_BYTES = 512
_BITS21 = (1 << 21) - 1


def _as_dtype(bits: int, dtype_name: str):
    """A value the device wrote as the 64 bits of an int64, shown as its own dtype."""
    try:
        dtype = np.dtype(dtype_name)
    except TypeError:
        return bits
    raw = np.array([bits], np.int64).view(np.uint8)[:dtype.itemsize].view(dtype)[0]
    return raw.item()


def _unpack3(word: int) -> list:
    return [(word >> shift) & _BITS21 for shift in (0, 21, 42)]


def _refusal(fn: str, pe: int, raddr: int, summary: int) -> PgasError:
    """The error of a WQE the NIC refused, from what the device read of it."""
    opcode, opmod, count, syndrome = summary & 0xFF, (summary >> 8) & 0xFF, (summary >> 16) & 0x7FFFFFFF, \
        (summary >> 56) & 0xFF
    what = mlx5.OPCODE_NAMES.get(opcode, f"opcode {opcode:#x}")
    nbytes = mlx5.atomic_size(opcode, opmod) or count        # an atomic's size, else the byte count
    return PgasError(mlx5.refusal(fn, what, pe, raddr & (2 ** 64 - 1), nbytes, syndrome))


def from_record(words: np.ndarray, timeout: float) -> PgasError | None:
    """The exception a complete mailbox record (int64 ``words``) describes, else None.

    ``timeout``: PGAS_TIMEOUT of the run (the device waited that long)."""
    if int(words[0]) != 2:
        return None
    kind, a, b, c, pe, thread, block, lengths = (int(w) for w in words[1:TEXT_WORD])
    text = words[TEXT_WORD:RECORD_WORDS].view(np.uint8).tobytes()
    sizes = [min(lengths & 0xFFFF, FN_BYTES), min((lengths >> 16) & 0xFFFF, WHAT_BYTES),
             min((lengths >> 32) & 0xFFFF, WHY_BYTES)]
    starts = [0, FN_BYTES, FN_BYTES + WHAT_BYTES]
    fn, what, why = (text[s:s + n].decode("utf-8", "replace") for s, n in zip(starts, sizes))
    if kind == TIMEOUT:
        error = timeout_error(fn, timeout, value_waited_for(what, a, _as_dtype(b, why), _as_dtype(c, why)))
    elif kind == SET_TIMEOUT:
        error = timeout_error(fn, timeout, ivar_waited_for(what, a >> 3, a & 7, _as_dtype(b, why), _as_dtype(c, why)))
    elif kind == BARRIER_TIMEOUT:
        missing = [pe_ for pe_ in range(64) if b >> pe_ & 1] + (["..."] if c > bin(b).count("1") else [])
        error = timeout_error(fn, timeout, arrivals_waited_for(missing, a))
    elif kind == NIC_REFUSED:
        error = _refusal(fn, a, b, c)
    elif kind == NIC_TIMEOUT:
        error = timeout_error(fn, timeout, f"room in the send queue to PE {a}" if b == 0 else
                              f"the NIC to complete the requests to PE {a}")
    elif kind in KINDS or kind in NIC_KINDS:
        error = describe(kind, fn, what, why, a, b, c)
    else:
        return PgasError(f"a device check on PE {pe} failed with an unknown error kind {kind}")
    where = f"tid={_unpack3(thread)} ctaid={_unpack3(block)}"
    return type(error)(f"{where}: {error} [on PE {pe}]")
