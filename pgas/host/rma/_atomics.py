"""Host atomics: the device atomics' names and argument order, with ``stream=None`` last.

Each acts on element 0 of PE ``pe``'s copy of symmetric ``dest`` (this PE included) and is
atomic with the device atomics of every PE, because it runs the same operation: on the
simulator backend the routing layer's atomics (``Transports``: CPU atomics on a mapped
heap, the NIC's atomics for a PE on another node), on the cuda backend the device atomic
itself, in a one-thread kernel (``_gpu_ops.atomic``). Every call is complete on return
(on cuda, a non-fetching one given a stream is queued on it; a fetching one waits for its
stream to return the value). The functions are generated from one table (``_ATOMICS``).
Keyword names of nvshmem4py are accepted (``dst=``, ``remote_pe=``).

OpenSHMEM 1.6's non-blocking fetching atomics (``atomic_fetch_nbi``, ``atomic_swap_nbi``,
``atomic_compare_swap_nbi``, ``atomic_fetch_inc_nbi``, ``atomic_fetch_add_nbi``,
``atomic_fetch_and/or/xor_nbi``) come from the same table: ``(fetch, dest, ..., pe,
stream=None)``, the old value in ``fetch[0]`` by the next ``quiet``. On the simulator, to a
PE on another node they are posted to the NIC and return; ``quiet`` (also ``barrier``'s)
lands their answers (``Transports.atomic_into``); on this node, and on the cuda backend,
they are complete on return (earlier than OpenSHMEM promises).
"""
from __future__ import annotations

import numbers

import numpy as np

from ...core.native import _cpu_atomics
from ...core._checks import check_contiguous, check_pe
from ...core._device_errors import device_error
from ...core._errors import PgasValueError
from ...runtime._arrays import as_ndarray
from ...runtime._state import runtime
from ._keywords import nvshmem4py_keywords
from ..memory._memory import element0

__all__: list[str] = []     # the table's names, added below

_BITWISE = _cpu_atomics.BITWISE_OPS
_SYMBOL = {"add": "+", "and": "&", "or": "|", "xor": "^"}

# name -> (operands between dest and pe, returns the old value, what it does: "load", "cas",
# "inc" or an RMW op of _cpu_atomics, and the docstring's summary)
_ATOMICS = {
    "atomic_fetch": ((), True, "load", "read ``dest[0]``."),
    "atomic_set": (("value",), False, "xchg", "write ``value`` to ``dest[0]``."),
    "atomic_swap": (("value",), True, "xchg", "write ``value`` to ``dest[0]``; return what was there."),
    "atomic_compare_swap": (("cond", "value"), True, "cas",
                            "write ``value`` to ``dest[0]`` if it equals ``cond`` (floats compare as bit "
                            "patterns); return what was there."),
    "atomic_fetch_inc": ((), True, "inc", "add one to ``dest[0]``; return the old value."),
    "atomic_inc": ((), False, "inc", "add one to ``dest[0]``."),
    **{f"atomic_fetch_{op}": (("value",), True, op, f"``dest[0] = dest[0] {symbol} value``; return the old value.")
       for op, symbol in _SYMBOL.items()},
    **{f"atomic_{op}": (("value",), False, op, f"``dest[0] = dest[0] {symbol} value``.")
       for op, symbol in _SYMBOL.items()},
}
_OPERAND_DOCS = {"value": "The operand", "cond": "The value compared with ``dest[0]``"}


def check_operand(fn: str, what: str, value, dtype, of: str = "dest"):
    """``value`` as an operand of ``dtype`` (a numpy scalar): an integer for integer dtypes,
    wrapped to the width as on the GPU (-1 is the largest uint64), a real number for
    floats; PgasValueError naming ``what`` otherwise."""
    dtype = np.dtype(dtype)
    integral = dtype.kind in "iu"
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral if integral else numbers.Real):
        expected = "an integer" if integral else "a real number"
        raise PgasValueError(f"{fn}: {what} must be {expected} ({of} is {dtype}), got {value!r}")
    return _cpu_atomics.from_bits(dtype, _cpu_atomics.as_bits(dtype, value))


def _apply(name: str, operands: tuple, fetch: bool, op: str, dest, cond, value, pe, stream, fn: str = "",
           into=None):
    """Run atomic ``name``; its old value where ``fetch``. ``into`` (the ``_nbi`` forms, on the
    simulator): a one-element array the old value lands in by the next ``quiet``."""
    fn = fn or f"pgas.{name}"
    rt = runtime(fn)
    pe = check_pe(fn, pe, rt.n_pes)
    word = element0(fn, dest, "dest")
    rmw_op = "add" if op == "inc" else op
    _cpu_atomics.check_dtype(word.dtype, fn, "dest", rmw_op)
    value = check_operand(fn, "value", 1 if op == "inc" else value if "value" in operands else 0, word.dtype)
    cond = check_operand(fn, "cond", cond if "cond" in operands else 0, word.dtype)
    rt.symmetric_offset(word, fn, "dest")
    if rt.on_gpu:
        from .. import _gpu_ops
        return _gpu_ops.atomic(name, len(operands), fetch, word, cond, value, pe, stream, fn)
    transports = rt.transports
    if into is not None:
        transports.atomic_into(fn, pe, word, rmw_op, value, cond, "dest", into)
        return None
    if op == "load":
        return transports.atomic_load(fn, pe, word, "dest")
    if op == "cas":
        return transports.compare_swap(fn, pe, word, cond, value, "dest")
    old = transports.rmw(fn, pe, word, rmw_op, value, "dest", fetch=True)   # waited for: complete on return
    return old if fetch else None


def _doc(name: str, operands: tuple, fetch: bool, op: str, summary: str) -> str:
    signature = ", ".join(("dest", *operands, "pe", "stream=None"))
    dtypes = _cpu_atomics.INTEGER_DTYPES if op in _BITWISE else _cpu_atomics.ORDERED_DTYPES
    lines = [f"{name}({signature}){' -> old' if fetch else ''}", "",
             f"On PE ``pe``'s copy of symmetric ``dest``: {summary}",
             "Atomic with the device atomics of every PE; complete on return (see the module).", "",
             "Parameters", "----------", "dest : symmetric array",
             "    C-contiguous; element 0 is the target (``dst=`` accepted, nvshmem4py's name).",
             f"    Dtypes: {', '.join(map(str, dtypes))}."]
    for operand in operands:
        lines += [f"{operand} : number",
                  f"    {_OPERAND_DOCS[operand]}, as ``dest``'s dtype (integers wrap to its width, as on the GPU)."]
    lines += ["pe : int", "    The target PE, in ``[0, n_pes())`` (``remote_pe=`` accepted).",
              "stream : optional", "    cuda backend: ordered on this stream."]
    if fetch:
        lines += ["", "Returns", "-------", "numpy scalar of ``dest``'s dtype", "    The value before the operation."]
    return "\n".join(lines)


def _make(name: str, operands: tuple, fetch: bool, op: str, summary: str):
    if not operands:
        def atomic(dest, pe, stream=None):
            return _apply(name, operands, fetch, op, dest, None, None, pe, stream)
    elif operands == ("value",):
        def atomic(dest, value, pe, stream=None):
            return _apply(name, operands, fetch, op, dest, None, value, pe, stream)
    else:
        def atomic(dest, cond, value, pe, stream=None):
            return _apply(name, operands, fetch, op, dest, cond, value, pe, stream)
    atomic.__name__ = atomic.__qualname__ = name
    atomic.__doc__ = _doc(name, operands, fetch, op, summary)
    return nvshmem4py_keywords("dst", "remote_pe")(atomic)


for _name, _entry in _ATOMICS.items():
    globals()[_name] = _make(_name, *_entry)
    __all__.append(_name)
del _name, _entry


# The non-blocking forms of the fetching atomics (OpenSHMEM 1.6) ------------------------

def _fetch_word(fn: str, fetch, dest):
    """Element 0 of local ``fetch`` (numpy or symmetric, C-contiguous, writable, ``dest``'s
    dtype) as a one-element array; PgasValueError naming ``fetch`` otherwise."""
    runtime(fn)
    word = element0(fn, dest, "dest")
    out = as_ndarray(fetch, fn, "fetch")
    if out.size == 0:
        raise device_error("NOT_EMPTY", fn, "fetch")
    check_contiguous(fn, "fetch", out)
    if out.dtype != word.dtype:
        raise PgasValueError(f"{fn}: fetch must have dest's dtype {word.dtype}, got {out.dtype}")
    if isinstance(out, np.ndarray) and not out.flags.writeable:
        raise PgasValueError(f"{fn}: fetch must be writable, got a read-only numpy array")
    return out.reshape(-1)[:1]


def _apply_nbi(name: str, operands: tuple, op: str, fetch, dest, cond, value, pe, stream) -> None:
    fn = f"pgas.{name}_nbi"
    out = _fetch_word(fn, fetch, dest)
    if not runtime(fn).on_gpu:      # through the NIC posted: its answer lands at quiet
        _apply(name, operands, True, op, dest, cond, value, pe, stream, fn, into=out)
        return
    old = _apply(name, operands, True, op, dest, cond, value, pe, stream, fn)
    if isinstance(out, np.ndarray):
        out[0] = old
    else:       # a device array on cuda
        out.copy_to_device(np.array([old], out.dtype))


def _doc_nbi(name: str, operands: tuple, op: str) -> str:
    signature = ", ".join(("fetch", "dest", *operands, "pe", "stream=None"))
    blocking = _doc(name, operands, True, op, "").split("Parameters")[1].split("Returns")[0]
    return (f"{name}_nbi({signature})\n\n"
            f"OpenSHMEM 1.6 ``shmem_{name}_nbi``: ``{name}`` with the old value in ``fetch[0]`` by\n"
            f"the next ``quiet``. To a PE on another node (simulator) it is posted and returns;\n"
            f"elsewhere it is complete on return (see the module).\n\n"
            f"Parameters\n----------\nfetch : array\n"
            f"    Local: numpy or symmetric, C-contiguous, writable, non-empty, with ``dest``'s dtype.\n"
            + blocking.split("----------\n", 1)[1].rstrip() + "\n")


def _make_nbi(name: str, operands: tuple, op: str):
    if not operands:
        def atomic(fetch, dest, pe, stream=None):
            _apply_nbi(name, operands, op, fetch, dest, None, None, pe, stream)
    elif operands == ("value",):
        def atomic(fetch, dest, value, pe, stream=None):
            _apply_nbi(name, operands, op, fetch, dest, None, value, pe, stream)
    else:
        def atomic(fetch, dest, cond, value, pe, stream=None):
            _apply_nbi(name, operands, op, fetch, dest, cond, value, pe, stream)
    atomic.__name__ = atomic.__qualname__ = f"{name}_nbi"
    atomic.__doc__ = _doc_nbi(name, operands, op)
    return nvshmem4py_keywords("dst", "remote_pe")(atomic)


for _name, (_operands, _fetch, _op, _summary) in _ATOMICS.items():
    if _fetch:
        globals()[f"{_name}_nbi"] = _make_nbi(_name, _operands, _op)
        __all__.append(f"{_name}_nbi")
del _name, _operands, _fetch, _op, _summary
