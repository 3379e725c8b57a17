"""Device collectives over a team: broadcast, fcollect, alltoall, alltoalls (strided),
<op>_reduce, <op>_reducescatter.

One thread per PE calls the plain forms; every thread of one warp (block) calls the
``_warp`` (``_block``) forms, with the same arguments, and they share the work (where a
peer is reached through the NIC, the group's first thread posts the request). Every
member reads what it needs from its peers' copies (the same path as ``get``: load/store
between the PEs of a node, the NIC between nodes) between team synchronizations: the
first says every member's ``src`` is ready, the last that every member has finished
reading. An all-reduce is a reduce-scatter (member r reduces block r of everyone's
``src``) then an all-gather of the finished blocks, so each element is reduced once (by
its block's owner) and ``dest`` may be ``src``. Results are identical on every member.
Dtypes and ops: ``pgas/core/_reductions.py`` (every integer type, float16/32/64, bfloat16, bool,
and complex64/128 with sum and prod).
"""
from __future__ import annotations

from ..core._codes import BLOCK, THREAD, WARP, reduce_code
from ..core._reductions import DEVICE_REDUCTION_DTYPES, OPS, ops_for
from ._primitives import prim as _p
from ._sync import _grouped_sync

__all__: list[str] = []   # filled below, one entry per generated function


@_p.jit
def _broadcast(fn, scope, team, dest, src, root):
    d, s = _p.team_arrays(fn, team, dest, src)
    _p.check_size(fn, "dest", d.size, s.size, "dest and src must have the same size")
    _p.check_root(fn, root, _p.team_size(team, fn))
    rank, size = _p.group_rank_and_size(scope, fn)
    _grouped_sync(fn, scope, team, False)
    if _p.team_rank(team, fn) == root:
        _p.copy_strided(d, 1, s, 1, d.size, rank, size)
    else:
        _p.transfer(fn, False, _p.team_pe(team, root, fn), d, 1, s, 1, d.size, rank, size, False)
    _grouped_sync(fn, scope, team, False)


@_p.jit
def _fcollect(fn, scope, team, dest, src):
    d, s = _p.team_arrays(fn, team, dest, src)
    m = s.size
    n = _p.team_size(team, fn)
    _p.check_size(fn, "dest", d.size, n * m, "dest must hold team size x src.size elements")
    rank, size = _p.group_rank_and_size(scope, fn)
    _grouped_sync(fn, scope, team, False)
    for q in range(n):
        _p.transfer(fn, False, _p.team_pe(team, q, fn), _p.part(d, q * m, (q + 1) * m), 1, s, 1, m, rank, size, False)
    _grouped_sync(fn, scope, team, False)


@_p.jit
def _alltoall(fn, scope, team, dest, src):
    d, s = _p.team_arrays(fn, team, dest, src)
    n = _p.team_size(team, fn)
    _p.check_size(fn, "dest", d.size, s.size, "dest and src must have the same size")
    m = s.size // n
    _p.check_size(fn, "src", s.size, n * m, "src.size must be a multiple of the team size")
    rank, size = _p.group_rank_and_size(scope, fn)
    me = _p.team_rank(team, fn)
    _grouped_sync(fn, scope, team, False)
    for q in range(n):
        _p.transfer(fn, False, _p.team_pe(team, q, fn), _p.part(d, q * m, (q + 1) * m), 1,
                    _p.part(s, me * m, (me + 1) * m), 1, m, rank, size, False)
    _grouped_sync(fn, scope, team, False)


@_p.jit
def _alltoalls(fn, scope, team, dest, src, dst, sst, nelems):
    """OpenSHMEM's strided all-to-all: element k of block j of member i's ``src``, at
    ``(j*nelems + k)*sst``, goes to ``(i*nelems + k)*dst`` of member j's ``dest``. Each
    member pulls its blocks from the others."""
    d, s = _p.team_arrays(fn, team, dest, src)
    n = _p.team_size(team, fn)
    _p.check_copy(fn, d, "dest", dst, s, "src", sst, n * nelems)
    rank, size = _p.group_rank_and_size(scope, fn)
    me = _p.team_rank(team, fn)
    _grouped_sync(fn, scope, team, False)
    if nelems > 0:
        mine = me * nelems * sst
        for q in range(n):
            block = q * nelems * dst
            _p.transfer(fn, False, _p.team_pe(team, q, fn), _p.part(d, block, block + (nelems - 1) * dst + 1), dst,
                        _p.part(s, mine, mine + (nelems - 1) * sst + 1), sst, nelems, rank, size, False)
    _grouped_sync(fn, scope, team, False)


@_p.jit
def _reducescatter(fn, scope, team, dest, src, op):
    """Member i reduces block i of every member's ``src`` into its ``dest``."""
    d, s = _p.team_arrays(fn, team, dest, src)
    _p.check_reduction(fn, op, d)
    m = d.size
    _p.check_size(fn, "src", s.size, _p.team_size(team, fn) * m, "src must hold team size x dest.size elements")
    rank, size = _p.group_rank_and_size(scope, fn)
    _grouped_sync(fn, scope, team, False)
    _p.reduce_from_peers(fn, d, 0, src, _p.team_rank(team, fn) * m, m, team, op, rank, size)
    _grouped_sync(fn, scope, team, False)


@_p.jit
def _reduce(fn, scope, team, dest, src, op):
    """All-reduce as reduce-scatter then all-gather, both reading peers directly: member
    r reduces block r of every member's ``src`` into block r of its ``dest``; after a
    sync every member copies the other finished blocks from their owners' ``dest``. Each
    member writes only its own block before the middle sync, and only others' blocks
    after it, so ``dest`` may be ``src``."""
    d, s = _p.team_arrays(fn, team, dest, src)
    _p.check_reduction(fn, op, d)
    _p.check_size(fn, "dest", d.size, s.size, "dest and src must have the same size")
    n = _p.team_size(team, fn)
    me = _p.team_rank(team, fn)
    rank, size = _p.group_rank_and_size(scope, fn)
    _grouped_sync(fn, scope, team, False)
    lo = d.size * me // n
    _p.reduce_from_peers(fn, d, lo, src, lo, d.size * (me + 1) // n - lo, team, op, rank, size)
    _grouped_sync(fn, scope, team, False)
    for q in range(n):
        if q != me:
            lo = d.size * q // n
            hi = d.size * (q + 1) // n
            block = _p.part(d, lo, hi)
            _p.transfer(fn, False, _p.team_pe(team, q, fn), block, 1, block, 1, hi - lo, rank, size, False)
    _grouped_sync(fn, scope, team, False)


_SCOPES = {"": (THREAD, "One thread per PE calls it."),
           "_warp": (WARP, "Every thread of one warp calls it with the same arguments; they share the work."),
           "_block": (BLOCK, "Every thread of one block calls it with the same arguments; they share the work.")}


def _make_data_movers(suffix):
    scope, who = _SCOPES[suffix]

    broadcast_fn, fcollect_fn, alltoall_fn, alltoalls_fn = (f"pgas.device.{name}{suffix}" for name in
                                                            ("broadcast", "fcollect", "alltoall", "alltoalls"))

    def broadcast(team, dest, src, root):
        _broadcast(_p.name(broadcast_fn), scope, team, dest, src, root)

    def fcollect(team, dest, src):
        _fcollect(_p.name(fcollect_fn), scope, team, dest, src)

    def alltoall(team, dest, src):
        _alltoall(_p.name(alltoall_fn), scope, team, dest, src)

    def alltoalls(team, dest, src, dst, sst, nelems):
        _alltoalls(_p.name(alltoalls_fn), scope, team, dest, src, dst, sst, nelems)

    broadcast.__doc__ = (f"broadcast{suffix}(team, dest, src, root): ``dest`` on every member = team rank "
                         f"``root``'s ``src``. {who}")
    fcollect.__doc__ = (f"fcollect{suffix}(team, dest, src): ``dest`` = every member's ``src``, concatenated "
                        f"in team-rank order. {who}")
    alltoall.__doc__ = (f"alltoall{suffix}(team, dest, src): block j of member i's ``src`` goes to block i "
                        f"of member j's ``dest``. {who}")
    alltoalls.__doc__ = (f"alltoalls{suffix}(team, dest, src, dst, sst, nelems): OpenSHMEM's strided "
                         f"all-to-all: element k of block j of member i's ``src``, at ``(j*nelems + k)*sst``, "
                         f"goes to ``(i*nelems + k)*dst`` of member j's ``dest``; strides count elements and "
                         f"are >= 1. {who}")
    for f in (broadcast, fcollect, alltoall, alltoalls):
        f.__name__ = f.__qualname__ = f.__name__ + suffix
    return broadcast, fcollect, alltoall, alltoalls


def _make_reduction(op, scatter, suffix):
    scope, who = _SCOPES[suffix]
    name = f"{op}_{'reducescatter' if scatter else 'reduce'}{suffix}"
    label = f"pgas.device.{name}"

    code = reduce_code(op)
    if scatter:
        def reduction(team, dest, src):
            _reducescatter(_p.name(label), scope, team, dest, src, code)
    else:
        def reduction(team, dest, src):
            _reduce(_p.name(label), scope, team, dest, src, code)

    reduction.__name__ = reduction.__qualname__ = name
    what = ("member i keeps block i of the element-wise result in ``dest``" if scatter else
            "``dest`` on every member = the element-wise result over all members' ``src``")
    dtypes = ", ".join(str(d) for d in DEVICE_REDUCTION_DTYPES if op in ops_for(d))
    reduction.__doc__ = f"{name}(team, dest, src): reduce with {op}; {what}. {who} Dtypes: {dtypes}."
    return reduction


def _make_named_reduction(scatter, suffix):
    """nvshmem4py's form, the op named by a string: ``reduce(team, dest, src, "sum")``."""
    scope, who = _SCOPES[suffix]
    name = f"{'reducescatter' if scatter else 'reduce'}{suffix}"
    label = f"pgas.device.{name}"

    if scatter:
        def reduction(team, dest, src, op):
            _reducescatter(_p.name(label), scope, team, dest, src, _p.reduce_op_code(op, label))
    else:
        def reduction(team, dest, src, op):
            _reduce(_p.name(label), scope, team, dest, src, _p.reduce_op_code(op, label))

    reduction.__name__ = reduction.__qualname__ = name
    reduction.__doc__ = (f"{name}(team, dest, src, op): ``<op>_{name}(team, dest, src)`` with ``op`` one of "
                         f"{', '.join(repr(o) for o in OPS)}, a constant string (nvshmem4py's form). {who}")
    return reduction


for _suffix in _SCOPES:
    for _f in (*_make_data_movers(_suffix),
               *(_make_reduction(op, scatter, _suffix) for op in OPS for scatter in (False, True)),
               *(_make_named_reduction(scatter, _suffix) for scatter in (False, True))):
        globals()[_f.__name__] = _f
        __all__.append(_f.__name__)
del _suffix, _f
