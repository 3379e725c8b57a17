"""Device atomics on element 0 of a symmetric array, at any PE (this one included).

Types: int32, int64, uint32, uint64; ``atomic_fetch``, ``atomic_set``, ``atomic_swap`` and
``atomic_compare_swap`` also float32 and float64 (compared and exchanged as bit patterns),
and ``atomic_add``/``atomic_fetch_add`` (and ``atomic_inc``/``atomic_fetch_inc``, an add of
one) also float32 and float64 (added in the type:
``atom.add.f32/.f64`` on a GPU; through a NIC, which has no float add, a compare-and-swap
loop on the bit pattern). Every atomic is sequentially consistent and atomic with respect
to atomics of every PE. The non-fetching forms (``atomic_set``, ``atomic_inc``,
``atomic_add``, ...) to a PE on another node return once the NIC has the request; they are
complete at ``quiet`` (a float ``atomic_add`` there waits for its loop, so it is complete on
return). Integer results wrap as on the GPU (``atomic_add(u64, -1)`` subtracts one).
"""
from __future__ import annotations

from ..core._codes import RMW_ADD, RMW_AND, RMW_OR, RMW_XCHG, RMW_XOR
from ._primitives import prim as _p

__all__ = ["atomic_fetch", "atomic_set", "atomic_swap", "atomic_compare_swap",
           "atomic_fetch_inc", "atomic_inc"]


def atomic_fetch(dest, pe):
    """atomic_fetch(dest, pe) -> value: read element 0 of PE ``pe``'s ``dest`` atomically."""
    fn = _p.name("pgas.device.atomic_fetch")
    return _p.remote_atomic_load(fn, _p.local(dest, fn, "dest"), pe, "dest")


def atomic_set(dest, value, pe):
    """atomic_set(dest, value, pe): atomically write ``value`` to PE ``pe``'s ``dest[0]``."""
    fn = _p.name("pgas.device.atomic_set")
    _p.remote_rmw(fn, _p.local(dest, fn, "dest"), pe, RMW_XCHG, value, "dest", False)


def atomic_swap(dest, value, pe):
    """atomic_swap(dest, value, pe) -> old: write ``value``, return what was there."""
    fn = _p.name("pgas.device.atomic_swap")
    return _p.remote_rmw(fn, _p.local(dest, fn, "dest"), pe, RMW_XCHG, value, "dest", True)


def atomic_compare_swap(dest, cond, value, pe):
    """atomic_compare_swap(dest, cond, value, pe) -> old: write ``value`` if ``dest[0] == cond``."""
    fn = _p.name("pgas.device.atomic_compare_swap")
    return _p.remote_compare_swap(fn, _p.local(dest, fn, "dest"), pe, cond, value, "dest")


def atomic_fetch_inc(dest, pe):
    """atomic_fetch_inc(dest, pe) -> old: add one to PE ``pe``'s ``dest[0]``."""
    fn = _p.name("pgas.device.atomic_fetch_inc")
    return _p.remote_rmw(fn, _p.local(dest, fn, "dest"), pe, RMW_ADD, 1, "dest", True)


def atomic_inc(dest, pe):
    """atomic_inc(dest, pe): add one to PE ``pe``'s ``dest[0]``."""
    fn = _p.name("pgas.device.atomic_inc")
    _p.remote_rmw(fn, _p.local(dest, fn, "dest"), pe, RMW_ADD, 1, "dest", False)


_BINARY = {"add": RMW_ADD, "and": RMW_AND, "or": RMW_OR, "xor": RMW_XOR}
_TYPES = {"add": "integer, float32 and float64 dtypes", "and": "integer dtypes", "or": "integer dtypes",
          "xor": "integer dtypes"}


def _make(op: str, fetch: bool):
    name = f"atomic_{'fetch_' if fetch else ''}{op}"
    label = f"pgas.device.{name}"
    rmw_op = _BINARY[op]

    if fetch:
        def atomic(dest, value, pe):
            fn = _p.name(label)
            return _p.remote_rmw(fn, _p.local(dest, fn, "dest"), pe, rmw_op, value, "dest", True)
        atomic.__doc__ = (f"{name}(dest, value, pe) -> old: atomically ``dest[0] = dest[0] {op} value`` "
                          f"on PE ``pe``; returns the old value ({_TYPES[op]}).")
    else:
        def atomic(dest, value, pe):
            fn = _p.name(label)
            _p.remote_rmw(fn, _p.local(dest, fn, "dest"), pe, rmw_op, value, "dest", False)
        atomic.__doc__ = (f"{name}(dest, value, pe): atomically ``dest[0] = dest[0] {op} value`` on PE ``pe`` "
                          f"({_TYPES[op]}).")
    atomic.__name__ = atomic.__qualname__ = name
    return atomic


for _op in _BINARY:
    for _fetch in (True, False):
        _f = _make(_op, _fetch)
        globals()[_f.__name__] = _f
        __all__.append(_f.__name__)
del _op, _fetch, _f
