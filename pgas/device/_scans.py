"""Device scans over a team (OpenSHMEM 1.6): <op>_inscan and <op>_exscan.

``sum_inscan(team, dest, src)``: member r's ``dest`` = src_0 + src_1 + ... + src_r,
element-wise, over the members' ``src`` in team-rank order; ``sum_exscan``: src_0 + ...
+ src_{r-1}, and member 0 gets 0 (OpenSHMEM 1.6 defines ``dest`` of PE 0 as 0).
OpenSHMEM 1.6 defines scans for sum only; pgas also has them for ``prod``, ``min``,
``max``, ``and``, ``or`` and ``xor`` (member 0 of an exscan gets the op's identity:
``pgas/core/_reductions.py``, ``identity``), on the reductions' dtypes.

Member j walks the element block j of every member's arrays in team-rank order, carrying
the running fold, so each element is folded once, ((s0 op s1) op s2) ..., numpy's bits,
the same on every member; between two team synchronizations (the first says every
``src`` is ready, the last that every ``dest`` is written). No one else touches block j,
and a member's ``src`` elements are read before its ``dest`` elements are written, so
``dest`` may be ``src`` (in place, as OpenSHMEM allows). Members on other nodes are
reached through the NIC on the simulator; on the cuda backend, like the device
reductions, every member must be on this node.
"""
from __future__ import annotations

from ..core._codes import reduce_code
from ..core._reductions import DEVICE_REDUCTION_DTYPES, OPS, ops_for
from ._collectives import _SCOPES
from ._primitives import prim as _p
from ._sync import _grouped_sync

__all__: list[str] = []   # filled below, one entry per generated function


@_p.jit
def _scan(fn, scope, team, dest, src, op, exclusive):
    d, s = _p.team_arrays(fn, team, dest, src)
    _p.check_reduction(fn, op, d)
    _p.check_size(fn, "dest", d.size, s.size, "dest and src must have the same size")
    n = _p.team_size(team, fn)
    me = _p.team_rank(team, fn)
    rank, size = _p.group_rank_and_size(scope, fn)
    _grouped_sync(fn, scope, team, False)
    lo = d.size * me // n
    _p.scan_to_peers(fn, d, s, lo, d.size * (me + 1) // n - lo, team, op, exclusive, rank, size)
    _grouped_sync(fn, scope, team, False)


def _make_scan(op, exclusive, suffix):
    scope, who = _SCOPES[suffix]
    name = f"{op}_{'exscan' if exclusive else 'inscan'}{suffix}"
    label = f"pgas.device.{name}"
    code = reduce_code(op)

    if exclusive:
        def scan(team, dest, src):
            _scan(_p.name(label), scope, team, dest, src, code, True)
    else:
        def scan(team, dest, src):
            _scan(_p.name(label), scope, team, dest, src, code, False)

    scan.__name__ = scan.__qualname__ = name
    what = ("src_0 .. src_{r-1} (member 0: the op's identity, 0 for sum)" if exclusive else "src_0 .. src_r")
    dtypes = ", ".join(str(d) for d in DEVICE_REDUCTION_DTYPES if op in ops_for(d))
    scan.__doc__ = (f"{name}(team, dest, src): member r's ``dest`` = {op} over {what}, element-wise, folded "
                    f"in team-rank order; ``dest`` may be ``src``. {who} Dtypes: {dtypes}.")
    return scan


for _suffix in _SCOPES:
    for _op in OPS:
        for _exclusive in (False, True):
            _f = _make_scan(_op, _exclusive, _suffix)
            globals()[_f.__name__] = _f
            __all__.append(_f.__name__)
del _suffix, _op, _exclusive, _f
