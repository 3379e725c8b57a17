"""Point-to-point synchronization on sets of ivars (OpenSHMEM 1.5): ``wait_until_all``,
``wait_until_any``, ``wait_until_some``, ``test_all``, ``test_any``, ``test_some``, and
their ``_vector`` forms.

Arguments, as OpenSHMEM's (the element count is the arrays' size):

- ``ivars``: a symmetric array (or a slice of one), C-contiguous, of the dtypes
  ``wait_until`` takes (int32, uint32, int64, uint64, float32, float64); this PE's copy
  is read, each element with acquire ordering, as ``wait_until`` reads its ``ivar``.
- ``status``: which ivars take part: ``None`` or an empty array (OpenSHMEM's NULL): all
  of them; else one entry per ivar, where a nonzero entry leaves that ivar out. Integer
  or bool dtype; any array (symmetric or not).
- ``indices`` (the ``_some`` forms): an int32/uint32/int64/uint64 array with room for
  one index per ivar; the indices of the satisfied ivars are written to its first
  ``count`` elements, in increasing order.
- ``cmp``: one of the CMP_* constants; ``value`` (one for every ivar) or, in the
  ``_vector`` forms, ``values`` (one per ivar: ``ivars[i] <cmp> values[i]``). Values are
  converted to the ivars' dtype before the comparison.

Results (an index is an int64; where OpenSHMEM returns SIZE_MAX these return -1):

- ``wait_until_all``: returns once every included ivar has been seen satisfied in one
  pass over the set (at once where none is included).
- ``wait_until_any`` -> the index of an included ivar seen satisfied: the lowest one in
  the pass that found one; -1 at once where none is included.
- ``wait_until_some`` -> the count (>= 1) of included ivars satisfied in the pass that
  found one, their indices in ``indices``; 0 at once where none is included.
- ``test_all`` -> bool (True where none is included), ``test_any`` -> the lowest
  satisfied index or -1 (none satisfied, or none included), ``test_some`` -> the count,
  possibly 0, and their indices: one pass, no waiting.

The waits back off between passes (``nanosleep`` on a GPU; the simulator yields the
core) and fail after PGAS_TIMEOUT with PgasTimeoutError naming the first included ivar
not satisfied, e.g. ``pgas.device.wait_until_all: waited PGAS_TIMEOUT=30 s for ivars[2]
== 7 (last value seen: 0), the first included one not satisfied``. Bad arguments (a
dtype, the size of ``status``, ``indices`` or ``values``, ``cmp``) raise PgasError naming
the argument (on a GPU, dtypes are refused when the kernel compiles).
"""
from __future__ import annotations

from ..core._codes import INDEX_DTYPES, MASK_DTYPES, WAIT_DTYPES
from ._primitives import prim as _p

__all__: list[str] = []

ALL, ANY, SOME = range(3)   # what a wait on the set waits for
_MODES = {"all": ALL, "any": ANY, "some": SOME}

@_p.jit
def _included(status, i):
    if status is None:
        return True
    return status.size == 0 or status[i] == 0


@_p.jit
def _target(value, values, i):
    """What ``ivars[i]`` is compared with: ``value``, or ``values[i]`` in the vector forms."""
    if values is None:
        return value
    return values[i]


@_p.jit
def _check(fn, ivars, status, cmp, values, indices):
    _p.check_cmp(fn, cmp)
    _p.check_dtype_set(fn, "ivars", ivars, WAIT_DTYPES)
    if status is not None:
        _p.check_dtype_set(fn, "status", status, MASK_DTYPES)
        if status.size != 0:
            _p.check_size(fn, "status", status.size, ivars.size, "status must be empty or have one entry per ivar")
    if values is not None:
        _p.check_size(fn, "values", values.size, ivars.size, "values must have one value per ivar")
    if indices is not None:
        _p.check_dtype_set(fn, "indices", indices, INDEX_DTYPES)
        if indices.size < ivars.size:
            _p.check_size(fn, "indices", indices.size, ivars.size, "indices must have room for every ivar")


@_p.jit
def _scan(fn, ivars, status, cmp, value, values, indices):
    """One pass over the included ivars: (how many are satisfied, how many are included,
    the first satisfied or -1, the first not satisfied or -1). The satisfied ones' indices
    go to ``indices`` where given."""
    held, included, first_held, first_not = 0, 0, -1, -1
    for i in range(ivars.size):
        if _included(status, i):
            included += 1
            seen = _p.load_acquire(ivars[i:], fn, "ivars")
            if _p.compare(seen, cmp, _p.cast_like(seen, _target(value, values, i))):
                if indices is not None:
                    indices[held] = i
                if first_held < 0:
                    first_held = i
                held += 1
            elif first_not < 0:
                first_not = i
    return held, included, first_held, first_not


@_p.jit
def _wait(fn, mode, ivars, status, cmp, value, values, indices):
    """Pass over the set until ``mode`` holds (ALL: every included ivar is satisfied; ANY,
    SOME: one is, or none is included), backing off between passes; ``_scan``'s result."""
    clock = _p.wait_start(fn)
    while True:
        result = _scan(fn, ivars, status, cmp, value, values, indices)
        held, included, first_not = result[0], result[1], result[3]
        if (held == included) if mode == ALL else (held > 0 or included == 0):
            return result
        _p.wait_pause(fn, clock, ivars, first_not, "ivars", cmp, _target(value, values, first_not))


@_p.jit
def _run(fn, wait, mode, ivars, indices, status, cmp, value, values):
    """Check the arguments, then wait (or test once); ``_scan``'s result."""
    words = _p.local(ivars, fn, "ivars")
    mask = _p.plain_or_none(status, fn, "status")
    targets = _p.plain_or_none(values, fn, "values")
    found = _p.plain_or_none(indices, fn, "indices")
    _check(fn, words, mask, cmp, targets, found)
    if wait:
        return _wait(fn, mode, words, mask, cmp, value, targets, found)
    return _scan(fn, words, mask, cmp, value, targets, found)


@_p.jit
def _nothing(result):
    return None


@_p.jit
def _all_hold(result):
    return result[0] == result[1]


@_p.jit
def _first(result):
    return result[2]


@_p.jit
def _count(result):
    return result[0]


# (function kind, mode) -> (what the call returns from _scan's result, what it does)
_RESULTS = {
    ("wait_until", ALL): (_nothing, "block until every included ivar satisfies {cond}"),
    ("wait_until", ANY): (_first, "block until an included ivar satisfies {cond}; its index (-1 where none "
                                  "is included)"),
    ("wait_until", SOME): (_count, "block until at least one included ivar satisfies {cond}; how many do (0 "
                                   "where none is included), their indices in ``indices``"),
    ("test", ALL): (_all_hold, "does every included ivar satisfy {cond} now?"),
    ("test", ANY): (_first, "the index of an included ivar that satisfies {cond} now, else -1"),
    ("test", SOME): (_count, "how many included ivars satisfy {cond} now (maybe 0); their indices in "
                             "``indices``"),
}


def _make(kind: str, mode_name: str, vector: bool):
    mode = _MODES[mode_name]
    name = f"{kind}_{mode_name}{'_vector' if vector else ''}"
    label = f"pgas.device.{name}"
    wait = kind == "wait_until"
    finish, what = _RESULTS[kind, mode]
    if mode == SOME and vector:
        def sync_op(ivars, indices, status, cmp, values):
            return finish(_run(_p.name(label), wait, mode, ivars, indices, status, cmp, 0, values))
    elif mode == SOME:
        def sync_op(ivars, indices, status, cmp, value):
            return finish(_run(_p.name(label), wait, mode, ivars, indices, status, cmp, value, None))
    elif vector:
        def sync_op(ivars, status, cmp, values):
            return finish(_run(_p.name(label), wait, mode, ivars, None, status, cmp, 0, values))
    else:
        def sync_op(ivars, status, cmp, value):
            return finish(_run(_p.name(label), wait, mode, ivars, None, status, cmp, value, None))
    arguments = ", ".join(["ivars", *(["indices"] if mode == SOME else []), "status", "cmp",
                           "values" if vector else "value"])
    returns = {_nothing: "", _all_hold: " -> bool", _first: " -> index", _count: " -> count"}[finish]
    condition = "``ivars[i] <cmp> values[i]``" if vector else "``ivars[i] <cmp> value``"
    sync_op.__name__ = sync_op.__qualname__ = name
    sync_op.__doc__ = (f"{name}({arguments}){returns}: {what.format(cond=condition)}.\n\n"
                       "On this PE's ivars; ``status`` None or empty: all included, else nonzero entries leave "
                       "ivars out (see the module).")
    return sync_op


for _kind in ("wait_until", "test"):
    for _mode_name in _MODES:
        for _vector in (False, True):
            _f = _make(_kind, _mode_name, _vector)
            globals()[_f.__name__] = _f
            __all__.append(_f.__name__)
del _kind, _mode_name, _vector, _f
