"""What each pgas call means to the checker: the memory it touches and the order it makes.

``record_call`` turns one host or device call (its name and bound arguments, after it
returned) into events of ``_recorder``:

- ``access``: an ``Access`` of one byte range of a PE's symmetric heap. ``pending``: the
  PE whose ``quiet`` completes it (a put's write at the target, an nbi put's read of its
  source), or -1 when it is complete on return (a get, a fetching atomic);
- ``quiet`` (the PEs it completes, None: all), ``fence``;
- ``release`` / ``acquire`` of a channel: a team's barrier and collectives (``("team",
  handle)``), a lock, the threads of a warp or block;
- ``wait``: a wait or test that saw ``value`` in a word: it acquires what the write that
  put ``value`` there released.

The meanings follow docs/device_api.md "Ordering" and docs/checker.md "The model".
"""
from __future__ import annotations

import inspect
import operator
import re
from typing import NamedTuple

import numpy as np

from ..core._constants import SIGNAL_ADD, SIGNAL_SET, TEAM_WORLD
from ..runtime._arrays import as_ndarray
from ..runtime._team_table import team_of

__all__ = ["Access", "record_call", "MODELLED", "COLLECTIVES", "SYNCS", "ALLOCATIONS", "updated",
           "describe_arguments", "team_key"]


class Access(NamedTuple):
    owner: int          # the PE whose heap holds the bytes
    lo: int             # heap offsets [lo, hi)
    hi: int
    write: bool
    atomic: bool
    rma: bool           # issued through pgas (put, get, atomics...), not a plain load or store
    pending: int        # the PE whose quiet completes it; -1: complete on return
    op: str             # the call, e.g. "pgas.device.put"
    site: str           # file:line of the user's call
    value: object = None      # single words: the value written, where known
    update: tuple = ()        # an atomic update whose result is not known here: (op, operand)
    carries: bool = False     # a put_signal's signal: delivered after the put before it


_SCOPE = re.compile(r"_(warp|block)$")
_COPIES = re.compile(r"^(put|get)(_nbi)?(_warp|_block)?$")
_PUT_SIGNAL = re.compile(r"^put_signal(_nbi)?(_warp|_block)?$")
SYNCS = re.compile(r"^(barrier_all|sync_all|barrier|sync)(_warp|_block)?$")
COLLECTIVES = re.compile(r"^(alltoalls?|broadcast|fcollect|collect|reduce|reducescatter|collective_on_buffer"
                          r"|(sum|prod|min|max|and|or|xor)_(reduce|reducescatter|inscan|exscan))(_warp|_block)?$")
_ATOMIC_UPDATES = {"atomic_add": "add", "atomic_inc": "add", "atomic_and": "and", "atomic_or": "or",
                   "atomic_xor": "xor", "atomic_set": "set"}
_WAITS = re.compile(r"^(wait_until|test)(_all|_any|_some)?(_vector)?$")
ALLOCATIONS = ("empty", "zeros", "full", "calloc", "align", "malloc_with_hints", "buffer")
MODELLED = re.compile("|".join(p.pattern for p in (_COPIES, _PUT_SIGNAL, SYNCS, COLLECTIVES, _WAITS))
                      + r"|^(p|g|iput|iget|ibput|ibget|quiet|fence|pe_quiet|signal_op|signal_add|signal_set"
                        r"|signal_fetch|signal_wait_until|signal_wait|set_lock|clear_lock|test_lock|free|flush"
                        r"|atomic_\w+|" + "|".join(ALLOCATIONS) + ")$")

_UPDATES = {"add": operator.add, "and": operator.and_, "or": operator.or_, "xor": operator.xor}
_signatures: dict = {}


def bind(function, args: tuple, kwargs: dict) -> dict:
    """The call's arguments by parameter name (defaults filled in)."""
    sig = _signatures.get(function)
    if sig is None:
        sig = _signatures[function] = inspect.signature(function)
    bound = sig.bind(*args, **kwargs)
    bound.apply_defaults()
    return bound.arguments


def _array(arr):
    try:
        return as_ndarray(arr, "pgas check", "array")
    except Exception:       # not an array: the call itself has said so
        return None


def _span_of(rec, arr):
    data = _array(arr)
    return None if data is None else rec.place(data)


def _strided(arr, stride, count, block=1) -> list:
    """The blocks (``block`` elements each, ``stride`` apart) a strided call touches, as views."""
    data = _array(arr)
    if data is None or count <= 0:
        return []
    flat = data.reshape(-1)
    return [flat[i * stride:i * stride + block] for i in range(count)]


def _scalar(value):
    try:
        return np.asarray(value).item()
    except Exception:
        return None


def _word_value(arr):
    """The value of this PE's ``arr[0]`` now."""
    data = _array(arr)
    return None if data is None or data.size == 0 else data.reshape(-1)[0].item()


class _Call:
    """One call being turned into events: every event gets the call's site and the time
    before (writes, releases) or after it (acquires)."""

    def __init__(self, rec, layer: str, op: str, t_before: int, t_after: int, stream=None):
        self.rec, self.layer, self.op, self.t0, self.t1 = rec, layer, op, t_before, t_after
        self.site = rec.site()
        self.thread = rec.thread()
        # pgas documents its host RMA, signals and atomics without a stream as complete on return
        self.host_complete = layer == "host" and stream is None

    def until_quiet(self, pe: int) -> int:
        """``pending`` for an operation to ``pe`` that OpenSHMEM completes at quiet: -1 (complete
        on return) for the host calls pgas completes on return."""
        return -1 if self.host_complete else pe

    def event(self, kind, data, after=False):
        self.rec.add(kind, data, self.thread, self.t1 if after else self.t0)

    def access(self, arr, pe, write, *, rma=True, pending=-1, atomic=False, value=None, update=(),
               carries=False, whole=None):
        """An access of PE ``pe``'s copy of symmetric ``arr`` (``whole``: the view it covers)."""
        data = whole if whole is not None else _array(arr)
        if data is None:
            return
        placed = self.rec.place(data)
        if placed is None:
            return
        owner, lo, hi = placed
        if owner == self.rec.pe and pe != self.rec.pe:
            owner = pe                        # the same offsets in PE pe's heap
        self.event("access", Access(owner, lo, hi, write, atomic, rma, pending, self.op, self.site, value,
                                    update, carries))

    def local(self, arr, write, pending=-1, whole=None):
        """The caller's own (maybe symmetric) buffer: the source or destination of RMA."""
        self.access(arr, self.rec.pe, write, pending=pending, whole=whole)

    def blocks(self, views, pe, write, pending=-1):
        """One access per view (the blocks or elements of a strided copy)."""
        for view in views:
            self.access(None, pe, write, pending=pending, whole=view)


def team_key(rec, team) -> tuple:
    """A team as the replay names it: its slot and its members (a slot is reused by later
    teams, and ``team_split_2d`` gives every row the same slot)."""
    try:
        found = team_of(rec.rt, team, "pgas check")
    except Exception:       # the call itself refused the team
        return ("team", repr(team), ())
    return ("team", found.handle, found.pes)


def record_call(rec, layer: str, name: str, args: dict, result, t_before: int, t_after: int) -> None:
    """The events of call ``name`` (``layer``: "host" or "device") that returned ``result``."""
    c = _Call(rec, layer, f"pgas.{'device.' if layer == 'device' else ''}{name}", t_before, t_after,
              args.get("stream"))
    me = rec.pe
    group = _SCOPE.search(name) if c.thread[0] == "kernel" else None
    base = _SCOPE.sub("", name)
    if group:     # every thread of the warp or block calls it: one records the data, all are ordered
        scope = group.group(1)
        channel = ("group", me, c.thread[1], c.thread[2], scope, c.thread[4] // 32 if scope == "warp" else 0)
        # a barrier or collective: each thread takes part (its own quiet, its place in the team's order)
        first = _group_rank(c.thread, scope) == 0 or bool(SYNCS.match(base) or COLLECTIVES.match(base))
    else:
        first = True
    if first:
        leader = not group or _group_rank(c.thread, group.group(1)) == 0
        _record_base(c, me, base, name, args, result, leader)
    if group:
        c.event("release", channel)
        c.event("acquire", channel, after=True)


def _group_rank(thread, scope):
    linear = thread[4]
    return linear % 32 if scope == "warp" else linear


def _record_base(c: _Call, me: int, base: str, name: str, a: dict, result, leader: bool = True) -> None:
    copy = _COPIES.match(base)
    signal = _PUT_SIGNAL.match(base)
    if copy or signal:
        nbi = bool(copy.group(2) if copy else signal.group(1))
        pe = int(a["pe"])
        dest, src = _array(a["dest"]), _array(a["src"])
        if dest is None or src is None:
            return
        if copy and copy.group(1) == "get":      # dest.size elements of PE pe's src
            c.access(None, pe, False, pending=pe if nbi else -1, whole=_elements(src, dest.size))
            c.local(None, True, pending=pe if nbi else -1, whole=dest)
            return
        c.local(None, False, pending=pe if nbi else -1, whole=src)   # src.size elements into dest
        done = -1 if nbi else c.until_quiet(pe)       # a device put's write completes at quiet
        value = src.reshape(-1)[0].item() if src.size == 1 else None
        c.access(None, pe, True, pending=pe if nbi else done, value=value, whole=_elements(dest, src.size))
        if signal:
            _signal_update(c, a["signal"], a["value"], a["sig_op"], pe, carries=True, pending=pe if nbi else done)
        return
    if base in ("p", "g"):
        pe = int(a["pe"])
        if base == "p":
            c.access(a["dest"], pe, True, pending=pe, value=_scalar(a["value"]), whole=_first(a["dest"]))
        else:
            c.access(a["src"], pe, False, whole=_first(a["src"]))
        return
    if base in ("iput", "iget", "ibput", "ibget"):
        _strided_copy(c, base, a)
        return
    if base in ("signal_op", "signal_add", "signal_set"):
        sig_op = a.get("sig_op", SIGNAL_ADD if base == "signal_add" else SIGNAL_SET)
        pe = int(a["pe"])
        _signal_update(c, a["signal"], a["value"], sig_op, pe, pending=c.until_quiet(pe))
        return
    if base.startswith("atomic_"):
        _atomic(c, base, a, result)
        return
    if base in ("quiet", "pe_quiet", "flush"):   # flush: taken as quiet (it completes at least the sources)
        pes = a.get("pes")
        c.event("quiet", tuple(int(pe) for pe in np.atleast_1d(pes)) if base == "pe_quiet" else None)
        return
    if base == "fence":
        c.event("fence", None)
        return
    sync = SYNCS.match(base)
    if sync:
        if base.startswith("barrier"):
            c.event("quiet", None)
        key = team_key(c.rec, a["team"] if "team" in a else TEAM_WORLD)
        c.event("release", key)
        c.event("acquire", key, after=True)
        return
    if COLLECTIVES.match(base):
        key = team_key(c.rec, a.get("team", TEAM_WORLD))
        if c.layer == "device" and leader:    # compared between the members at finalize (_replay)
            c.event("collective", (key, f"{name}({describe_arguments(a, skip=('team',))})", c.site))
        c.event("release", key)
        c.event("acquire", key, after=True)
        return
    if _WAITS.match(base) or base in ("signal_wait_until", "signal_wait", "signal_fetch"):
        _wait(c, base, a, result)
        return
    if base in ("set_lock", "test_lock"):
        if base == "set_lock" or int(result) == 0:
            c.event("acquire", _lock_key(c, a["lock"]), after=True)
        return
    if base == "clear_lock":
        c.event("quiet", None)
        c.event("release", _lock_key(c, a["lock"]))
        return


def _elements(data, count: int):
    """The first ``count`` elements of ``data`` in its memory order (C or Fortran)."""
    order = "F" if data.ndim > 1 and data.flags.f_contiguous and not data.flags.c_contiguous else "C"
    return data.reshape(-1, order=order)[:count] if data.flags.c_contiguous or data.flags.f_contiguous else data


def describe_arguments(arguments: dict, skip: tuple = ()) -> str:
    """A call's arguments as members compare them: arrays by dtype and shape (not contents),
    other values as they are."""
    shown = []
    for name, value in arguments.items():
        if name in skip or name == "stream":
            continue
        if value is None or isinstance(value, (str, bytes, int, float, np.number, np.bool_)):
            shown.append(f"{name}={value!r}")
            continue
        data = _array(value)
        shown.append(f"{name}={type(value).__name__}" if data is None else f"{name}={data.dtype}{list(data.shape)}")
    return ", ".join(shown)


def _first(arr):
    data = _array(arr)
    return None if data is None or data.size == 0 else data.reshape(-1)[:1]


def _lock_key(c: _Call, lock) -> tuple:
    placed = _span_of(c.rec, lock)
    return ("lock", placed[1] if placed else id(lock))


def _signal_update(c: _Call, signal, value, sig_op, pe: int, pending: int, carries: bool = False) -> None:
    value = _scalar(value)
    if sig_op == SIGNAL_ADD:
        c.access(signal, pe, True, pending=pending, atomic=True, update=("add", value), carries=carries,
                 whole=_first(signal))
    else:
        c.access(signal, pe, True, pending=pending, atomic=True, value=value, carries=carries, whole=_first(signal))


def _atomic(c: _Call, base: str, a: dict, result) -> None:
    pe = int(a["pe"])
    dest = _first(a["dest"])
    operand = _scalar(a.get("value", 1))
    if base in _ATOMIC_UPDATES:        # non-fetching: delivered by quiet (host: complete on return)
        op = _ATOMIC_UPDATES[base]
        if op == "set":
            c.access(None, pe, True, pending=c.until_quiet(pe), atomic=True, value=operand, whole=dest)
        else:
            c.access(None, pe, True, pending=c.until_quiet(pe), atomic=True, update=(op, operand), whole=dest)
        return
    nbi = base.endswith("_nbi")
    # a host nbi fetch to another node lands at quiet: its old value is not known on return
    landed_later = nbi and c.layer == "host"
    old = None if landed_later else _word_value(a["fetch"]) if nbi else _scalar(result)
    kind = base[len("atomic_"):-len("_nbi")] if nbi else base[len("atomic_"):]
    if kind == "fetch":
        c.access(None, pe, False, atomic=True, whole=dest)
    else:
        new = _after(kind, old, operand, _scalar(a.get("cond")))
        c.access(None, pe, True, atomic=True, value=new, whole=dest)
    placed = c.rec.place(dest) if dest is not None else None
    if placed is not None and old is not None:   # it read the word: ordered after the write it read
        c.event("wait", (pe if placed[0] == c.rec.pe else placed[0], placed[1], old), after=True)
    if nbi:
        c.local(a["fetch"], True, pending=pe if landed_later else -1, whole=_first(a["fetch"]))


def updated(op: str, before, operand):
    """The value an atomic update ``op`` ("add", "and", "or", "xor", "set") with
    ``operand`` leaves in a word that held ``before``; None where that is not known."""
    if op == "set":
        return operand
    if before is None or operand is None:
        return None
    try:
        return _UPDATES[op](before, operand)
    except (KeyError, TypeError):       # an unknown op; a bitwise op on a float
        return None


def _after(kind: str, old, operand, cond):
    """The value a fetching atomic (``kind``: "swap", "fetch_add", ...) leaves in the
    word, from the old value it fetched."""
    if kind == "compare_swap":
        return None if old is None else operand if old == cond else old
    if kind == "swap":
        return operand
    if kind == "fetch_inc":
        return updated("add", old, 1)
    return updated(kind[len("fetch_"):], old, operand) if kind.startswith("fetch_") else None


def _strided_copy(c: _Call, base: str, a: dict) -> None:
    pe = int(a["pe"])
    blocked = base.startswith("ib")
    count = int(a["nblocks"] if blocked else a["nelems"])
    block = int(a["blocksize"]) if blocked else 1
    dest = _strided(a["dest"], int(a["dst_stride"]), count, block)
    src = _strided(a["src"], int(a["src_stride"]), count, block)
    if base.endswith("put"):
        c.blocks(src, c.rec.pe, False)
        c.blocks(dest, pe, True, pending=c.until_quiet(pe))
    else:
        c.blocks(src, pe, False)
        c.blocks(dest, c.rec.pe, True)


def _wait(c: _Call, base: str, a: dict, result) -> None:
    """A wait, or a test that found its condition, acquires from each word it saw satisfy it."""
    ivars = _array(a.get("ivars", a.get("ivar", a.get("signal"))))
    placed = c.rec.place(ivars) if ivars is not None else None
    if placed is None:
        return
    flat = ivars.reshape(-1)
    if base in ("wait_until", "test", "signal_wait_until", "signal_wait", "signal_fetch"):
        if base == "test" and not result:
            return
        seen = result if base in ("signal_wait_until", "signal_fetch") and result is not None else flat[0].item()
        words = {0: _scalar(seen)}
    elif "_any" in base:            # the index of one that holds, or -1
        index = int(result)
        words = {index: flat[index].item()} if index >= 0 else {}
    elif "_some" in base:           # how many hold; their indices in ``indices``
        indices = _array(a["indices"]).reshape(-1)[:int(result)]
        words = {int(i): flat[int(i)].item() for i in indices}
    else:                           # _all: every included one (a test: only when it returned true)
        if base.startswith("test") and not result:
            return
        status = _array(a.get("status"))
        excluded = status.reshape(-1) if status is not None and status.size else np.zeros(flat.size)
        words = {i: flat[i].item() for i in range(flat.size) if not excluded[i]}
    for i, value in words.items():
        c.event("wait", (placed[0], placed[1] + i * flat.itemsize, value), after=True)
