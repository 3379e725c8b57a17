"""Host scans over a team (OpenSHMEM 1.6): ``<op>_inscan`` and ``<op>_exscan``.

``sum_inscan(team, dest, src)``: member r's ``dest`` = src_0 + ... + src_r, element-wise,
over the members' ``src`` in team-rank order; ``sum_exscan``: src_0 + ... + src_{r-1},
member 0 getting 0 (as OpenSHMEM 1.6 defines it). OpenSHMEM 1.6 has scans for sum only;
pgas also has ``prod``, ``min``, ``max``, ``and``, ``or`` and ``xor`` scans (an exscan's
member 0 gets the op's identity: ``pgas/core/_reductions.py``, ``identity``), on the
dtypes of the reductions. Every element is folded in rank order, ((s0 op s1) op s2) ...,
so the bits are numpy's. ``dest`` may be ``src`` (in place, as OpenSHMEM allows);
otherwise they must not overlap.

On a team whose members are all on this node, member r reads the ``src`` of members 0..r
(or 0..r-1) from their mapped heaps between a ready and a done step (``pull_all``) and
folds them. On a team that spans nodes they come by MPI on the team's communicator (as
the other host collectives there: ``_mpi_collectives.scan_runner``; small ones each
member's array sent to the members after it, larger ones MPI's all-gather) and each
folds its prefix.
On the cuda backend the device scan runs as a one-block kernel on ``stream``, like the
other host collectives; on a team that spans nodes (the device scan reads members' data
in place, within a node) it runs on host copies, as the simulator's does.
"""
from __future__ import annotations

import numpy as np

from ...core._reductions import OPS, REDUCTION_DTYPES, identity, ops_for, reduce_into
from ._collective_call import Call, on_gpu, pull_all, reduction_pair, repeat, staged
from ._mpi_collectives import scan_runner, spans_nodes

__all__: list[str] = []   # filled below: <op>_inscan and <op>_exscan for every op


def _scan(op: str, exclusive: bool, team, dest, src, stream) -> None:
    kind = "exscan" if exclusive else "inscan"
    key = (kind, team, op, id(dest), id(src))
    if type(team) is int and repeat(key, dest, src):
        return
    call = Call(f"pgas.{op}_{kind}", team)
    d, s, in_place, ufunc = reduction_pair(call, dest, src, op)
    last = call.me if exclusive else call.me + 1     # members 0 .. last-1 are folded
    start = identity(op, d.dtype)
    if staged(call, d, s, in_place, stream,
              lambda host_d, host_s: scan_runner(call, host_d, host_s, op, ufunc, last, start)()) or \
            on_gpu(call, f"{op}_{kind}", d, s, stream=stream):
        return
    if spans_nodes(call):
        call.keep(key, scan_runner(call, d, s, op, ufunc, last, start))
        return
    result = np.empty_like(d) if in_place else d

    def fold():
        if last == 0:
            result[...] = start
        else:
            reduce_into(result, [call.read(rank, "src") for rank in range(last)], ufunc)

    def run():
        pull_all(call, fold)             # nobody writes dest before every member has read
        if in_place:
            np.copyto(d, result)
    call.keep(key, call.general(run))


def _make(op: str, exclusive: bool):
    name = f"{op}_{'exscan' if exclusive else 'inscan'}"

    def scan(team, dest, src, stream=None) -> None:
        _scan(op, exclusive, team, dest, src, stream)

    scan.__name__ = scan.__qualname__ = name
    members = "0 .. r-1 (member 0 gets the op's identity: 0 for sum)" if exclusive else "0 .. r"
    dtypes = ", ".join(str(d) for d in REDUCTION_DTYPES if op in ops_for(d))
    scan.__doc__ = f"""{name}(team, dest, src, stream=None): collective over ``team``.

    Member r's ``dest`` = ``{op}`` over the ``src`` of members {members}, element-wise,
    folded in team-rank order (numpy's bits, the same on every member). ``dest`` and
    ``src`` are symmetric arrays of one dtype and size; ``dest`` may be ``src`` (in place),
    else they must not overlap. ``stream``: as the other host collectives (cuda: queued
    on it). Dtypes: {dtypes}.
    """
    return scan


for _op in OPS:
    for _exclusive in (False, True):
        _f = _make(_op, _exclusive)
        globals()[_f.__name__] = _f
        __all__.append(_f.__name__)
del _op, _exclusive, _f
