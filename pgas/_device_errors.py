"""Errors that device functions report: their kinds, their texts, and the record a GPU writes.

The simulator raises these from its device functions as they happen. On the cuda backend a
device check that fails writes an error record into its PE's mailbox (pinned host memory
mapped into the GPU, ``host/_gpu_mailbox.py``) and traps; the host reads the record and
raises the same exception with the same text (``from_record``). Both build the text here,
so a message cannot differ between backends.

The record, in int64 words (``RECORD_WORDS``; the device writer is ``device/_cuda.py``):

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

from ._constants import CMP_NAMES
from ._errors import PgasError, PgasTimeoutError, PgasValueError

__all__ = ["KINDS", "device_error", "timeout_error", "from_record", "RECORD_WORDS", "FN_BYTES", "WHAT_BYTES",
           "WHY_BYTES", "TEXT_WORD", "MAILBOX_BYTES"]

FN_BYTES, WHAT_BYTES, WHY_BYTES = 64, 32, 96
TEXT_WORD = 9
RECORD_WORDS = TEXT_WORD + (FN_BYTES + WHAT_BYTES + WHY_BYTES) // 8
MAILBOX_BYTES = 512
_BITS21 = (1 << 21) - 1


def _not_empty(fn, what, why, a, b, c):
    return f"{fn}: {what} is empty; it needs at least one element"


def _negative(fn, what, why, a, b, c):
    return f"{fn}: {what} must be a non-negative integer, got {a}"


def _negative_stride(fn, what, why, a, b, c):
    return _negative(fn, f"{what} stride", why, a, b, c)


def _stride_zero(fn, what, why, a, b, c):
    return f"{fn}: the {what} stride must be >= 1, got 0"


def _copy_fits(fn, what, why, size, nelems, stride):
    return f"{fn}: {what} has {size} elements but {nelems} elements at stride {stride} need {(nelems - 1) * stride + 1}"


def _size(fn, what, why, have, need, c):
    return f"{fn}: {why}; {what} has {have} elements, {need} needed"


def _root(fn, what, why, root, team_size, c):
    return f"{fn}: root must be a team rank within [0, {team_size}), got {root}"


def _pe_range(fn, what, why, pe, n_pes, c):
    return f"{fn}: {what} must be within [0, {n_pes}), got {pe}"


def _unreachable(fn, what, why, pe, a, b):
    return (f"{fn}: PE {pe} is on another node and the cuda backend has no remote transport yet "
            "(docs/transports.md); run on the simulator backend, or keep the PEs on one node")


def _team(fn, what, why, handle, my_pe, c):
    return f"{fn}: {what} {handle} is not a team of PE {my_pe} (never created here, or destroyed)"


def _cmp(fn, what, why, cmp, b, c):
    return f"{fn}: cmp must be one of pgas.CMP_EQ/NE/GT/GE/LT/LE, got {cmp}"


def _sig_op(fn, what, why, sig_op, b, c):
    return f"{fn}: sig_op must be pgas.SIGNAL_SET or pgas.SIGNAL_ADD, got {sig_op}"


def _signal(fn, what, why, size, b, c):
    return f"{fn}: signal must be a non-empty uint64 (or int64) symmetric array, got {why} with {size} elements"


# kind -> (exception class, text); the codes are what the device writes
KINDS = {
    1: (PgasValueError, _not_empty), 2: (PgasValueError, _negative), 3: (PgasValueError, _stride_zero),
    4: (PgasValueError, _copy_fits), 5: (PgasValueError, _size), 6: (PgasValueError, _root),
    7: (PgasValueError, _pe_range), 8: (PgasError, _unreachable), 9: (PgasValueError, _team),
    10: (PgasValueError, _cmp), 11: (PgasValueError, _sig_op), 12: (PgasValueError, _signal),
    15: (PgasValueError, _negative_stride),
}
KIND = {text.__name__.strip("_").upper(): kind for kind, (_, text) in KINDS.items()}
TIMEOUT, BARRIER_TIMEOUT = 13, 14   # waits past PGAS_TIMEOUT (texts from timeout_error)


def device_error(kind: str, fn: str, what: str = "", why: str = "", a=0, b=0, c=0) -> PgasError:
    """The exception of a failed check, e.g. ``device_error("PE_RANGE", fn, "pe", a=pe, b=n)``."""
    cls, text = KINDS[KIND[kind]]
    return cls(text(fn, what, why, a, b, c))


def timeout_error(fn: str, timeout: float, waiting_for: str) -> PgasTimeoutError:
    """A wait that passed PGAS_TIMEOUT; ``waiting_for`` says what it waited for."""
    return PgasTimeoutError(f"{fn}: waited PGAS_TIMEOUT={timeout:g} s for {waiting_for}")


def value_waited_for(what: str, cmp, value, seen) -> str:
    return f"{what} {CMP_NAMES.get(cmp, cmp)} {value} (last value seen: {seen})"


def arrivals_waited_for(missing: list, team) -> str:
    return f"PEs {missing} to arrive (team {team})"


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
    elif kind == BARRIER_TIMEOUT:
        missing = [pe_ for pe_ in range(64) if b >> pe_ & 1] + (["..."] if c > bin(b).count("1") else [])
        error = timeout_error(fn, timeout, arrivals_waited_for(missing, a))
    elif kind in KINDS:
        cls, describe = KINDS[kind]
        error = cls(describe(fn, what, why, a, b, c))
    else:
        return PgasError(f"a device check on PE {pe} failed with an unknown error kind {kind}")
    where = f"tid={_unpack3(thread)} ctaid={_unpack3(block)}"
    return type(error)(f"{where}: {error} [on PE {pe}]")
