"""Every ``PGAS_*`` environment variable: its parser, default and meaning, in one table."""
from __future__ import annotations

import difflib
import math
import os
import re
from dataclasses import dataclass
from typing import Any, Callable

from ._errors import PgasConfigError

__all__ = ["Variable", "VARIABLES", "setting", "parse_size", "invalid_settings", "unknown_settings", "shown"]

_SIZE = re.compile(r"^\s*(\d+)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int:
    """Parse a byte count such as ``1048576``, ``512k``, ``64m`` or ``2g`` (powers of 1024)."""
    match = _SIZE.match(text)
    if not match:
        raise ValueError(f"expected a byte count such as 512m or 2g, got {text!r}")
    return int(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]


def _parse_bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"expected 0 or 1, got {text!r}")


def _choice(*allowed: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.strip().lower()
        if value not in allowed:
            raise ValueError(f"expected one of {', '.join(allowed)}, got {text!r}")
        return value
    return parse


def _heap_size(text: str) -> int:
    value = parse_size(text)
    if value <= 0:
        raise ValueError(f"expected a byte count > 0, got {text!r}")
    return value


def _positive(convert: Callable[[str], Any], expected: str) -> Callable[[str], Any]:
    """A parser of finite numbers > 0 (``convert``: int or float)."""
    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            value = math.nan
        if not (0 < value < math.inf):
            raise ValueError(f"expected {expected}, got {text!r}")
        return value
    return parse


_positive_float = _positive(float, "a finite number of seconds > 0")
_positive_int = _positive(int, "an integer > 0")


def _user_address(text: str) -> int:
    value = int(text, 0)
    if value <= 0 or value % (2 << 20) or value >= 1 << 47:
        raise ValueError(f"expected a 2 MiB-aligned user-space address such as 0x7e0000000000, got {text!r}")
    return value


@dataclass(frozen=True)
class Variable:
    """One ``PGAS_*`` variable: name, default (as text), parser and meaning."""

    name: str
    default: str | None
    parse: Callable[[str], Any]
    meaning: str


VARIABLES: dict[str, Variable] = {v.name: v for v in [
    Variable("PGAS_BACKEND", "auto", _choice("auto", "cuda", "simulator"),
             "auto | cuda | simulator: where kernels run (auto: cuda where a GPU is usable)"),
    Variable("PGAS_SYMMETRIC_SIZE", "1g", _heap_size,
             "bytes of symmetric heap per PE (k/m/g suffixes)"),
    Variable("PGAS_PES_PER_NODE", None, _positive_int,
             "split the PEs into emulated nodes of this many consecutive PEs "
             "(no load/store between nodes); unset: nodes are hosts"),
    Variable("PGAS_DISABLE_P2P", "0", _parse_bool,
             "1: no load/store between PEs at all, as if every PE were on its own node"),
    Variable("PGAS_REMOTE_TRANSPORT", "ibgda", _choice("ibgda", "proxy", "ucx"),
             "transport to PEs on other nodes: through the emulated NIC, ibgda (device threads "
             "post their own WQEs) or proxy (a CPU thread posts the device's requests); or ucx "
             "(UCX active messages, posted and answered in native code; simulator backend)"),
    Variable("PGAS_NIC_WIRE", "ucx", _choice("ucx", "mpi"),
             "simulator backend, ibgda and proxy: who executes the WQEs the paths post: ucx (native "
             "code reads them and sends them over UCX; where UCX cannot be loaded, mpi) or mpi (the "
             "emulated NIC's thread, over MPI)"),
    Variable("PGAS_TIMEOUT", "300", _positive_float,
             "seconds a blocking wait (wait_until, signal_wait_until, barriers, syncs) may take "
             "before it fails naming what it waited for (for barriers: the PEs that had not arrived)"),
    Variable("PGAS_STATE_ADDRESS", "0x7e0000000000", _user_address,
             "cuda backend: the fixed virtual address of the device state block that kernels read "
             "(change it only if pgas.init says the driver could not reserve it; the same on every PE)"),
    Variable("PGAS_CHECK", "0", _parse_bool,
             "1 (simulator backend): the checker: data races on symmetric memory, operations never "
             "completed, collectives whose arguments differ between PEs; reports at finalize, and the "
             "run fails when it found anything (docs/checker.md)"),
    Variable("PGAS_DEBUG", "0", _parse_bool,
             "1: extra checks: every PE makes the same allocations; the symmetric arguments of device "
             "functions and host calls lie inside live symmetric arrays (catches use after free)"),
]}


def setting(name: str) -> Any:
    """The parsed value of ``PGAS_*`` variable ``name`` (its default when unset).

    An unparsable value raises ``PgasConfigError`` naming the variable and the value.
    """
    var = VARIABLES[name]
    text = os.environ.get(name, var.default)
    if text is None:
        return None
    try:
        return var.parse(text)
    except ValueError as exc:
        raise PgasConfigError(f"{name}={os.environ.get(name)!r} is not valid: {exc}") from None


def invalid_settings() -> dict[str, str]:
    """Every ``PGAS_*`` variable whose value does not parse: name -> the error message."""
    bad = {}
    for name in VARIABLES:
        try:
            setting(name)
        except PgasConfigError as exc:
            bad[name] = str(exc)
    return bad


# What pgasrun sets for its PEs (not settings of the user's)
_LAUNCHER_VARIABLES = ("PGAS_RUN_DIR", "PGAS_JOB_ID", "PGAS_TAG_OUTPUT", "PGAS_BACKEND_NOTICE_GIVEN",
                       "PGAS_LAUNCHER_PID", "PGAS_LAUNCHER_HOST", "PGAS_STDIN_FIFO")


def unknown_settings() -> dict[str, str]:
    """Every ``PGAS_*`` variable set that pgas does not read (a misspelt name, most likely):
    name -> a warning that names the closest known variable."""
    unknown = {}
    for name in sorted(os.environ):
        if name.startswith("PGAS_") and name not in VARIABLES and name not in _LAUNCHER_VARIABLES:
            close = difflib.get_close_matches(name[5:], [known[5:] for known in VARIABLES], n=1, cutoff=0.7)
            hint = f"did you mean PGAS_{close[0]}?" if close else f"pgas reads {', '.join(VARIABLES)}"
            unknown[name] = f"{name} is not a pgas variable and is ignored: {hint}"
    return unknown


def shown(name: str) -> str:
    """``NAME=value`` as set, or ``NAME=default (default)``, for messages."""
    value = os.environ.get(name)
    return f"{name}={value}" if value is not None else f"{name}={VARIABLES[name].default} (default)"
