"""Device collectives over a team: broadcast, fcollect, alltoall, <op>_reduce, <op>_reducescatter.

One thread per PE calls the plain forms; every thread of one block calls the ``_block``
forms, with the same arguments, and they share the work. Every member reads what it
needs from its peers' copies (the same path as ``get``: load/store between the PEs of a
node) between two team synchronizations: the first says every member's ``src`` is
ready, the second that every member has finished reading. A reduction computes its
result before the second synchronization and stores it after, so ``dest`` may be ``src``.
Results are identical on every member (the same reduction order everywhere).
"""
from __future__ import annotations

from .._reductions import OPS
from ._primitives import prim as _p
from ._sync import _grouped_sync

__all__ = ["broadcast", "fcollect", "alltoall", "broadcast_block", "fcollect_block", "alltoall_block"]


def _arrays(fn, dest, src):
    d, s = _p.local(dest, fn, "dest"), _p.local(src, fn, "src")
    _p.check_dtypes_match(fn, d, s)
    return d, s


def _broadcast(fn, scope, team, dest, src, root):
    members = _p.team(team, fn)
    d, s = _arrays(fn, dest, src)
    _p.check_size(fn, "dest", d.size, s.size, "dest and src must have the same size")
    _p.check_root(fn, root, members.size)
    rank, size = _p.group_rank_and_size(scope, fn)
    _grouped_sync(fn, scope, team, False)
    source = s if members.my_index == root else _p.peer(src, members.pes[root], fn, "src")
    _p.copy_strided(d, 1, source, 1, d.size, rank, size)
    _grouped_sync(fn, scope, team, False)


def _fcollect(fn, scope, team, dest, src):
    members = _p.team(team, fn)
    d, s = _arrays(fn, dest, src)
    m = s.size
    _p.check_size(fn, "dest", d.size, members.size * m, "dest must hold team size x src.size elements")
    rank, size = _p.group_rank_and_size(scope, fn)
    _grouped_sync(fn, scope, team, False)
    for q in range(members.size):
        _p.copy_strided(d.reshape(-1)[q * m:(q + 1) * m], 1, _p.peer(src, members.pes[q], fn, "src"), 1,
                        m, rank, size)
    _grouped_sync(fn, scope, team, False)


def _alltoall(fn, scope, team, dest, src):
    members = _p.team(team, fn)
    d, s = _arrays(fn, dest, src)
    _p.check_size(fn, "dest", d.size, s.size, "dest and src must have the same size")
    m = s.size // members.size
    _p.check_size(fn, "src", s.size, members.size * m, "src.size must be a multiple of the team size")
    rank, size = _p.group_rank_and_size(scope, fn)
    me = members.my_index
    _grouped_sync(fn, scope, team, False)
    for q in range(members.size):
        theirs = _p.peer(src, members.pes[q], fn, "src").reshape(-1)[me * m:(me + 1) * m]
        _p.copy_strided(d.reshape(-1)[q * m:(q + 1) * m], 1, theirs, 1, m, rank, size)
    _grouped_sync(fn, scope, team, False)


def _reduce(fn, scope, team, dest, src, op, scatter):
    members = _p.team(team, fn)
    d, s = _arrays(fn, dest, src)
    ufunc = _p.reduction_ufunc(fn, op, d.dtype)
    m = d.size
    if scatter:
        _p.check_size(fn, "src", s.size, members.size * m, "src must hold team size x dest.size elements")
    else:
        _p.check_size(fn, "dest", d.size, s.size, "dest and src must have the same size")
    lo = members.my_index * m if scatter else 0
    rank, size = _p.group_rank_and_size(scope, fn)
    _grouped_sync(fn, scope, team, False)
    views = [_p.peer(src, pe, fn, "src").reshape(-1)[lo:lo + m] for pe in members.pes]
    share = _p.reduce_shares(views, ufunc, rank, size)
    _grouped_sync(fn, scope, team, False)
    _p.store_share(d, share, rank, size)
    _p.group_sync(scope, fn)


_SCOPES = {"": (_p.THREAD, "One thread per PE calls it."),
           "_block": (_p.BLOCK, "Every thread of one block calls it with the same arguments; they share the work.")}


def _make_data_movers(suffix):
    scope, who = _SCOPES[suffix]

    def broadcast(team, dest, src, root):
        _broadcast(f"pgas.device.broadcast{suffix}", scope, team, dest, src, root)

    def fcollect(team, dest, src):
        _fcollect(f"pgas.device.fcollect{suffix}", scope, team, dest, src)

    def alltoall(team, dest, src):
        _alltoall(f"pgas.device.alltoall{suffix}", scope, team, dest, src)

    broadcast.__doc__ = (f"broadcast{suffix}(team, dest, src, root): ``dest`` on every member = team rank "
                         f"``root``'s ``src``. {who}")
    fcollect.__doc__ = (f"fcollect{suffix}(team, dest, src): ``dest`` = every member's ``src``, concatenated "
                        f"in team-rank order. {who}")
    alltoall.__doc__ = (f"alltoall{suffix}(team, dest, src): block j of member i's ``src`` goes to block i "
                        f"of member j's ``dest``. {who}")
    for f in (broadcast, fcollect, alltoall):
        f.__name__ = f.__qualname__ = f.__name__ + suffix
    return broadcast, fcollect, alltoall


def _make_reduction(op, scatter, suffix):
    scope, who = _SCOPES[suffix]
    name = f"{op}_{'reducescatter' if scatter else 'reduce'}{suffix}"
    fn = f"pgas.device.{name}"

    def reduction(team, dest, src):
        _reduce(fn, scope, team, dest, src, op, scatter)

    reduction.__name__ = reduction.__qualname__ = name
    what = ("member i keeps block i of the element-wise result in ``dest``" if scatter else
            "``dest`` on every member = the element-wise result over all members' ``src``")
    reduction.__doc__ = f"{name}(team, dest, src): reduce with {op}; {what}. {who}"
    return reduction


for _suffix in _SCOPES:
    for _f in _make_data_movers(_suffix):
        globals()[_f.__name__] = _f
    for _op in OPS:
        for _scatter in (False, True):
            _f = _make_reduction(_op, _scatter, _suffix)
            globals()[_f.__name__] = _f
            __all__.append(_f.__name__)
del _suffix, _f, _op, _scatter
