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

OpenSHMEM 1.6's non-blocking fetching atomics (``atomic_fetch_nbi(fetch, dest, pe)``,
``atomic_swap_nbi``, ``atomic_compare_swap_nbi``, ``atomic_fetch_inc_nbi``,
``atomic_fetch_add/and/or/xor_nbi``) write the old value into local ``fetch[0]``; they are
generated from ``_NBI`` and complete on return (the value is in ``fetch`` already), a
correct, stronger form of OpenSHMEM's "complete at the next quiet".
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


# Non-blocking fetching atomics (OpenSHMEM 1.6) ----------------------------------------

# name -> (operands between dest and pe, what: "load", "cas", or an RMW_* code with the
# value fixed at one for "inc")
_NBI = {"atomic_fetch_nbi": ((), "load", 0), "atomic_swap_nbi": (("value",), "rmw", RMW_XCHG),
        "atomic_compare_swap_nbi": (("cond", "value"), "cas", 0), "atomic_fetch_inc_nbi": ((), "inc", RMW_ADD),
        **{f"atomic_fetch_{op}_nbi": (("value",), "rmw", code) for op, code in _BINARY.items()}}


@_p.jit
def _check_fetch(fn, fetch, dest):
    """Local ``fetch`` must have ``dest``'s dtype (on a GPU, refused when the kernel
    compiles) and at least one element."""
    _p.check_copy(fn, _p.plain(fetch, fn, "fetch"), "fetch", 1, dest, "dest", 1, 1)


@_p.jit
def _store(fn, fetch, old):
    _p.plain(fetch, fn, "fetch")[0] = old


def _make_nbi(name: str, operands: tuple, kind: str, rmw_op: int):
    label = f"pgas.device.{name}"
    if kind == "load":
        def atomic(fetch, dest, pe):
            fn = _p.name(label)
            d = _p.local(dest, fn, "dest")
            _check_fetch(fn, fetch, d)
            _store(fn, fetch, _p.remote_atomic_load(fn, d, pe, "dest"))
    elif kind == "cas":
        def atomic(fetch, dest, cond, value, pe):
            fn = _p.name(label)
            d = _p.local(dest, fn, "dest")
            _check_fetch(fn, fetch, d)
            _store(fn, fetch, _p.remote_compare_swap(fn, d, pe, cond, value, "dest"))
    elif kind == "inc":
        def atomic(fetch, dest, pe):
            fn = _p.name(label)
            d = _p.local(dest, fn, "dest")
            _check_fetch(fn, fetch, d)
            _store(fn, fetch, _p.remote_rmw(fn, d, pe, rmw_op, 1, "dest", True))
    else:
        def atomic(fetch, dest, value, pe):
            fn = _p.name(label)
            d = _p.local(dest, fn, "dest")
            _check_fetch(fn, fetch, d)
            _store(fn, fetch, _p.remote_rmw(fn, d, pe, rmw_op, value, "dest", True))
    blocking = name[:-len("_nbi")]
    atomic.__name__ = atomic.__qualname__ = name
    atomic.__doc__ = (f"{name}({', '.join(('fetch', 'dest', *operands, 'pe'))}): ``{blocking}`` with the old "
                      f"value written into local ``fetch[0]`` (OpenSHMEM 1.6 ``shmem_{name}``; ``fetch`` has "
                      f"``dest``'s dtype). Complete on return, which OpenSHMEM promises only at ``quiet``.")
    return atomic


for _name, _entry in _NBI.items():
    _f = _make_nbi(_name, *_entry)
    globals()[_name] = _f
    __all__.append(_name)
del _name, _entry, _f
