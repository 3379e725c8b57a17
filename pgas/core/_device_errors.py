"""Errors that device functions report: their kinds and their texts.

The simulator raises these from its device functions as they happen. On the cuda backend a
device check that fails writes an error record into its PE's mailbox and traps; the host
reads the record and raises the same exception with the same text
(``pgas/cuda/_error_record.py``). Both build the text here, so a message cannot differ
between backends.
"""
from __future__ import annotations

from ._constants import CMP_NAMES
from ._errors import PgasError, PgasTimeoutError, PgasValueError

__all__ = ["KINDS", "KIND", "NIC_KINDS", "NOT_REGISTERED", "NIC_WIDE", "NIC_REFUSED", "NIC_TIMEOUT", "UNREACHABLE_WHY",
           "REDUCTIONS_IN_PLACE", "LOCK_DTYPE", "TIMEOUT", "BARRIER_TIMEOUT", "SET_TIMEOUT", "describe", "device_error",
           "timeout_error", "value_waited_for", "ivar_waited_for", "arrivals_waited_for"]

# kind -> (name, exception class, text with the fields fn, what, why, a, b, c); the codes are
# what the device writes
KINDS = {
    1: ("NOT_EMPTY", PgasValueError, "{fn}: {what} is empty; it needs at least one element"),
    2: ("NEGATIVE", PgasValueError, "{fn}: {what} must be a non-negative integer, got {a}"),
    3: ("STRIDE_ZERO", PgasValueError, "{fn}: the {what} stride must be >= 1, got 0"),
    4: ("COPY_FITS", PgasValueError, "{fn}: {what} has {a} elements but {b} elements at stride {c} need {need}"),
    5: ("SIZE", PgasValueError, "{fn}: {why}; {what} has {a} elements, {b} needed"),
    6: ("ROOT", PgasValueError, "{fn}: root must be a team rank within [0, {b}), got {a}"),
    7: ("PE_RANGE", PgasValueError, "{fn}: {what} must be within [0, {b}), got {a}"),
    8: ("UNREACHABLE", PgasError, "{fn}: PE {a} is on another node and {why} (docs/transports.md)"),
    9: ("TEAM", PgasValueError, "{fn}: {what} {a} is not a team of PE {b} (never created here, or destroyed)"),
    10: ("CMP", PgasValueError, "{fn}: cmp must be one of pgas.CMP_EQ/NE/GT/GE/LT/LE, got {a}"),
    11: ("SIG_OP", PgasValueError, "{fn}: sig_op must be pgas.SIGNAL_SET or pgas.SIGNAL_ADD, got {a}"),
    12: ("SIGNAL", PgasValueError, "{fn}: signal must be a non-empty uint64 (or int64) symmetric array, got {why} "
                                   "with {a} elements"),
    15: ("NEGATIVE_STRIDE", PgasValueError, "{fn}: {what} stride must be a non-negative integer, got {a}"),
    21: ("LOCK_NOT_HELD", PgasValueError, "{fn}: this PE does not hold lock"),
    22: ("LOCK_HELD", PgasValueError, "{fn}: this PE already holds lock (a PE must not hold a lock twice)"),
    23: ("NO_MULTICAST", PgasError, "{fn}: no multicast memory on the cuda backend: pgas does not set up NVLink "
                                    "SHARP multicast objects (docs/status.md); the simulator backend has them for "
                                    "teams within one node"),
}
# a lock's dtype, refused by the host calls, the simulator, and the cuda compiler alike
LOCK_DTYPE = "lock must be a symmetric int64 array (pgas.zeros(1, np.int64)), got {dtype}"
KIND = {name: kind for kind, (name, _, _) in KINDS.items()}
# what only the cuda backend's NIC path records (the simulator's NIC path registers any
# local memory for a call, and moves wider single elements as copies)
NOT_REGISTERED, NIC_WIDE = 19, 20
NIC_KINDS = {
    NOT_REGISTERED: ("NOT_REGISTERED", PgasValueError,
                     "{fn}: {what} (address {b:#x}, {c} bytes) is not in the symmetric heap; the NIC reaches "
                     "PE {a} on another node and reads or writes only registered memory: use a symmetric array"),
    NIC_WIDE: ("NIC_WIDE", PgasValueError, "{fn}: {what} has {a}-byte elements; a single element to or from PE {b} "
                                           "on another node travels in 8 bytes: use put or get"),
}
# why a PE on another node is unreachable: no NIC queue to it (the device and the host say the same)
UNREACHABLE_WHY = "the cuda backend reaches other nodes only through ibgda (PGAS_REMOTE_TRANSPORT=ibgda)"
# why a device reduction refuses a member on another node (cuda)
REDUCTIONS_IN_PLACE = "device reductions on the cuda backend read each member's data in place, within a node"


def describe(kind: int, fn: str, what: str, why: str, a, b, c) -> PgasError:
    _, cls, text = KINDS[kind] if kind in KINDS else NIC_KINDS[kind]
    need = (b - 1) * c + 1 if kind == KIND["COPY_FITS"] else None
    return cls(text.format(fn=fn, what=what, why=why, a=a, b=b, c=c, need=need))


TIMEOUT, BARRIER_TIMEOUT = 13, 14   # waits past PGAS_TIMEOUT (texts from timeout_error)
SET_TIMEOUT = 16    # a wait on a set of ivars: a = cmp + 8 * the index named, b = its value, c = the value seen
# the cuda NIC path: a = the PE; NIC_REFUSED: b = raddr, c = opcode | opmod << 8 | byte count << 16 |
# syndrome << 56 (of the refused WQE); NIC_TIMEOUT: b = 0 waiting for room in the send queue, 1 for a completion
NIC_REFUSED, NIC_TIMEOUT = 17, 18


def device_error(kind: str, fn: str, what: str = "", why: str = "", a=0, b=0, c=0) -> PgasError:
    """The exception of a failed check, e.g. ``device_error("PE_RANGE", fn, "pe", a=pe, b=n)``."""
    return describe(KIND[kind], fn, what, why, a, b, c)


def timeout_error(fn: str, timeout: float, waiting_for: str) -> PgasTimeoutError:
    """A wait that passed PGAS_TIMEOUT; ``waiting_for`` says what it waited for."""
    return PgasTimeoutError(f"{fn}: waited PGAS_TIMEOUT={timeout:g} s for {waiting_for}")


def value_waited_for(what: str, cmp, value, seen) -> str:
    return f"{what} {CMP_NAMES.get(cmp, cmp)} {value} (last value seen: {seen})"


def ivar_waited_for(what: str, index: int, cmp, value, seen) -> str:
    """A wait on a set of ivars (wait_until_all/any/some): the first included one not satisfied."""
    return f"{value_waited_for(f'{what}[{index}]', cmp, value, seen)}, the first included one not satisfied"


def arrivals_waited_for(missing: list, team) -> str:
    return f"PEs {missing} to arrive (team {team})"
