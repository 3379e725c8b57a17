"""Host point-to-point synchronization (OpenSHMEM's, as shmem4py has it on the host):
``wait_until``, ``test``, the set forms ``wait_until_all/any/some``, ``test_all/any/some``
and their ``_vector`` forms, and ``fence``.

They read this PE's copy of symmetric ``ivars`` (any of the dtypes the device waits
take: int32, uint32, int64, uint64, float32, float64), with acquire ordering: once a
value is seen, so is what the PE that wrote it stored before. Values are converted to
the ivars' dtype before comparing (integers wrap, as on the device). Arguments and
results are the device forms' (``pgas.device``; OpenSHMEM C's order ``ivars, status,
cmp, value``), except that the ``_some`` forms return the satisfied indices as an int64
array rather than writing them into an ``indices`` argument:

- ``status``: ``None`` or an empty array: every ivar takes part; else one entry per ivar,
  a nonzero entry leaves that ivar out;
- ``wait_until_any``/``test_any`` -> the lowest satisfied included index, -1 where none
  is included (``test_any``: or none is satisfied; OpenSHMEM's SIZE_MAX);
- ``wait_until_some``/``test_some`` -> the satisfied included indices, in increasing order.

Waits back off (sleeps growing to 1 ms), and fail after PGAS_TIMEOUT naming the first
included ivar not satisfied. On the cuda backend each pass copies the ivars from GPU
memory (a GPU's stores reach it at system scope).
"""
from __future__ import annotations

import numpy as np

from ...core.native import _cpu_atomics
from ...core._checks import check_contiguous
from ...core._codes import DTYPE_SETS, MASK_DTYPES, WAIT_DTYPES
from ...core._device_errors import value_waited_for
from ...core._errors import PgasValueError
from ...core._waiting import HOST_WAIT_BACKOFF_S, Wait, check_cmp, compare
from ...runtime._arrays import as_ndarray
from ...runtime._state import Runtime, runtime
from ..rma._atomics import check_operand
from ..rma._rma import quiet

__all__ = ["wait_until", "test", "fence"]    # + the set forms, generated below


def _local_ivars(rt: Runtime, fn: str, ivars, what: str) -> np.ndarray:
    """This PE's copy of symmetric ``ivars``, flat, checked."""
    data = as_ndarray(ivars, fn, what)
    if str(data.dtype) not in DTYPE_SETS[WAIT_DTYPES]:
        raise PgasValueError(f"{fn}: {what} must have one of the dtypes {', '.join(DTYPE_SETS[WAIT_DTYPES])}, "
                             f"got {data.dtype}")
    check_contiguous(fn, what, data)
    if data.size:
        rt.symmetric_offset(data, fn, what)
    return data.reshape(-1)


def _reader(rt: Runtime, fn: str, data: np.ndarray):
    """A function returning the current values of local symmetric ``data`` (acquire)."""
    if rt.on_gpu:
        from .. import _gpu_ops

        def read():
            out = np.empty(data.size, data.dtype)
            _gpu_ops.copy(out, data, data.size, None, fn)
            return out
        return read

    def read():
        seen = data.copy()
        _cpu_atomics.fence()        # later loads see what was stored before the values seen
        return seen
    return read


def _included(fn: str, status, size: int) -> np.ndarray:
    """Which of ``size`` ivars take part, as a bool array."""
    if status is None:
        return np.ones(size, bool)
    mask = np.asarray(status.copy_to_host() if hasattr(status, "copy_to_host") else status).reshape(-1)
    if mask.size == 0:
        return np.ones(size, bool)
    if str(mask.dtype) not in DTYPE_SETS[MASK_DTYPES]:
        raise PgasValueError(f"{fn}: status must be None or an integer or bool array, got dtype {mask.dtype}")
    if mask.size != size:
        raise PgasValueError(f"{fn}: status must have one entry per ivar ({size}), got {mask.size}")
    return mask == 0


def _targets(fn: str, cmp, value, values, data: np.ndarray) -> list:
    """What each ivar is compared with, in the ivars' dtype."""
    check_cmp(fn, cmp)
    if values is None:
        return [check_operand(fn, "value", value, data.dtype, of="ivars")] * data.size
    vector = np.asarray(values.copy_to_host() if hasattr(values, "copy_to_host") else values).reshape(-1)
    if vector.size != data.size:
        raise PgasValueError(f"{fn}: values must have one entry per ivar ({data.size}), got {vector.size}")
    return [check_operand(fn, "values", v.item(), data.dtype, of="ivars") for v in vector]


def _satisfied(seen: np.ndarray, cmp, targets: list, included: np.ndarray) -> list[int]:
    return [i for i in range(seen.size) if included[i] and compare(seen[i], cmp, targets[i])]


def _wait(fn: str, ivars, status, cmp, value, values, mode: str, waiting: bool):
    rt = runtime(fn)
    data = _local_ivars(rt, fn, ivars, "ivars")
    included = _included(fn, status, data.size)
    targets = _targets(fn, cmp, value, values, data)
    read = _reader(rt, fn, data)
    clock = None
    while True:
        seen = read()
        hits = _satisfied(seen, cmp, targets, included)
        if mode == "all":
            done = len(hits) == int(included.sum())
        else:
            done = bool(hits) or not included.any()
        if done or not waiting:
            if mode == "all":
                return done, seen
            if mode == "any":
                return (hits[0] if hits else -1), seen
            return np.array(hits, np.int64), seen
        clock = clock or Wait(fn, rt.timeout, backoff_s=HOST_WAIT_BACKOFF_S)
        first = next(i for i in range(data.size) if included[i] and i not in hits)
        clock.pause(lambda: value_waited_for(f"ivars[{first}]", cmp, targets[first], seen[first])
                    + ("" if mode == "all" else ", the first included one"))


def wait_until(ivar, cmp, value):
    """wait_until(ivar, cmp, value) -> value

    Wait until this PE's ``ivar[0] <cmp> value`` (element 0 of a symmetric array);
    returns the value seen. Fails with PgasTimeoutError after PGAS_TIMEOUT seconds.
    """
    fn = "pgas.wait_until"
    rt = runtime(fn)
    word = _local_ivars(rt, fn, ivar, "ivar")[:1]
    if word.size == 0:
        raise PgasValueError(f"{fn}: ivar must have at least one element")
    return _wait(fn, word, None, cmp, value, None, "all", True)[1][0]


def test(ivar, cmp, value) -> bool:
    """test(ivar, cmp, value) -> bool: does this PE's ``ivar[0] <cmp> value`` hold now?"""
    fn = "pgas.test"
    rt = runtime(fn)
    word = _local_ivars(rt, fn, ivar, "ivar")[:1]
    if word.size == 0:
        raise PgasValueError(f"{fn}: ivar must have at least one element")
    return bool(_wait(fn, word, None, cmp, value, None, "all", False)[0])


def fence(stream=None) -> None:
    """fence(stream=None)

    Order this PE's earlier puts, atomics and signals to each PE before its later ones.
    pgas does it by completing them (``quiet``): a put through ucx may land after a later
    one to the same PE, so nothing weaker would do on every path.
    """
    quiet(stream)


_RETURNS = {"all": "True once every included ivar is satisfied (``test_all``: whether they are now)",
            "any": "the lowest satisfied included index (-1 where none is included; ``test_any``: or none is "
                   "satisfied)",
            "some": "the satisfied included indices, in increasing order (an int64 array)"}


def _make(mode: str, vector: bool, waiting: bool):
    name = f"{'wait_until' if waiting else 'test'}_{mode}{'_vector' if vector else ''}"
    operand = "values" if vector else "value"

    if vector:
        def sync(ivars, status, cmp, values):
            return _wait(f"pgas.{name}", ivars, status, cmp, None, values, mode, waiting)[0]
    else:
        def sync(ivars, status, cmp, value):
            return _wait(f"pgas.{name}", ivars, status, cmp, value, None, mode, waiting)[0]
    sync.__name__ = sync.__qualname__ = name
    sync.__doc__ = (f"{name}(ivars, status, cmp, {operand})\n\n"
                    f"{'Wait until' if waiting else 'Test whether'} ivars of this PE satisfy ``ivars[i] <cmp> "
                    f"{'values[i]' if vector else 'value'}`` (see the module); returns {_RETURNS[mode]}.")
    return sync


for _waiting in (True, False):
    for _mode in ("all", "any", "some"):
        for _vector in (False, True):
            _function = _make(_mode, _vector, _waiting)
            globals()[_function.__name__] = _function
            __all__.append(_function.__name__)
del _waiting, _mode, _vector, _function
