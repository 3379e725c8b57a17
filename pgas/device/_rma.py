"""Device RMA: p, g, put, get, their nbi, strided (iput/iget), blocked strided (ibput/ibget,
OpenSHMEM 1.6), block and warp forms.

Between the PEs of a node these are loads and stores into the peer's mapped heap; to a PE
on another node they are NIC requests (RDMA writes and reads; ``p`` an inline write). A
blocking ``put`` returns once ``src`` may be reused; the data is visible to the peer after
``quiet`` (or a barrier). On the load/store path every store is issued at the call, so the
``_nbi`` forms behave as the blocking ones and ``quiet`` only orders memory.
"""
from __future__ import annotations

from ..core._codes import BLOCK, THREAD, WARP
from ._primitives import prim as _p

__all__ = ["p", "g", "put", "get", "put_nbi", "get_nbi", "iput", "iget", "ibput", "ibget"]


def p(dest, value, pe):
    """p(dest, value, pe): write ``value`` to element 0 of PE ``pe``'s ``dest``."""
    fn = _p.name("pgas.device.p")
    mine = _p.local(dest, fn, "dest")
    _p.check_not_empty(fn, "dest", mine)
    _p.remote_store(fn, mine, pe, value, "dest")


def g(src, pe):
    """g(src, pe) -> value: element 0 of PE ``pe``'s ``src``."""
    fn = _p.name("pgas.device.g")
    mine = _p.local(src, fn, "src")
    _p.check_not_empty(fn, "src", mine)
    return _p.remote_load(fn, mine, pe, "src")


@_p.jit
def _copy_strided(fn, dest, src, pe, to_peer, scope, dst_stride, src_stride, nelems, whole, nbi):
    """The one copy behind every put/get form: ``to_peer`` says which side is PE ``pe``'s.

    ``whole``: copy ``src.size`` elements for puts, ``dest.size`` for gets (``nelems`` is
    ignored). Threads of the group (``scope``) share the elements, then synchronize.
    """
    rank, size = _p.group_rank_and_size(scope, fn)
    if to_peer:
        d = _p.local(dest, fn, "dest")
        s = _p.plain(src, fn, "src")
    else:
        d = _p.plain(dest, fn, "dest")
        s = _p.local(src, fn, "src")
    if whole:
        nelems = s.size if to_peer else d.size
    _p.check_copy(fn, d, "dest", dst_stride, s, "src", src_stride, nelems)
    _p.transfer(fn, to_peer, pe, d, dst_stride, s, src_stride, nelems, rank, size, nbi)
    _p.group_sync(scope, fn)


@_p.jit
def _copy(fn, dest, src, pe, to_peer, scope, nbi):
    _copy_strided(fn, dest, src, pe, to_peer, scope, 1, 1, 0, True, nbi)


def iput(dest, src, dst_stride, src_stride, nelems, pe):
    """iput(dest, src, dst_stride, src_stride, nelems, pe): strided put.

    Element ``i`` (``i < nelems``) of ``src`` at ``i*src_stride`` goes to ``i*dst_stride`` of
    PE ``pe``'s ``dest``; strides count elements.
    """
    _copy_strided("pgas.device.iput", dest, src, pe, True, THREAD, dst_stride, src_stride, nelems, False, False)


def iget(dest, src, dst_stride, src_stride, nelems, pe):
    """iget(dest, src, dst_stride, src_stride, nelems, pe): strided get from PE ``pe``'s ``src``."""
    _copy_strided("pgas.device.iget", dest, src, pe, False, THREAD, dst_stride, src_stride, nelems, False, False)


@_p.jit
def _copy_blocks(fn, dest, src, pe, to_peer, dst_stride, src_stride, blocksize, nblocks):
    """``nblocks`` blocks of ``blocksize`` contiguous elements, block ``b`` from
    ``b*src_stride`` of ``src`` to ``b*dst_stride`` of ``dest``; ``to_peer`` says which side is
    PE ``pe``'s. One contiguous copy per block (one NIC request each), complete on return."""
    if to_peer:
        d = _p.local(dest, fn, "dest")
        s = _p.plain(src, fn, "src")
    else:
        d = _p.plain(dest, fn, "dest")
        s = _p.local(src, fn, "src")
    if blocksize < 0:
        _p.check_size(fn, "blocksize", blocksize, 0, "blocksize must be >= 0")
    if nblocks < 0:
        _p.check_size(fn, "nblocks", nblocks, 0, "nblocks must be >= 0")
    _p.check_copy(fn, d, "dest", dst_stride, s, "src", src_stride, 0)   # dtypes, strides >= 1
    if dst_stride < blocksize:
        _p.check_size(fn, "each dest block", dst_stride, blocksize, "dst_stride must be >= blocksize (blocks may "
                      "not overlap)")
    if src_stride < blocksize:
        _p.check_size(fn, "each src block", src_stride, blocksize, "src_stride must be >= blocksize (blocks may "
                      "not overlap)")
    if nblocks > 0 and blocksize > 0:
        if (nblocks - 1) * dst_stride + blocksize > d.size:
            _p.check_size(fn, "dest", d.size, (nblocks - 1) * dst_stride + blocksize,
                          "the last block (at (nblocks - 1) * dst_stride, blocksize long) must end inside dest")
        if (nblocks - 1) * src_stride + blocksize > s.size:
            _p.check_size(fn, "src", s.size, (nblocks - 1) * src_stride + blocksize,
                          "the last block (at (nblocks - 1) * src_stride, blocksize long) must end inside src")
        for b in range(nblocks):
            _p.transfer(fn, to_peer, pe, d[b * dst_stride:], 1, s[b * src_stride:], 1, blocksize, 0, 1, False)


def ibput(dest, src, dst_stride, src_stride, blocksize, nblocks, pe):
    """ibput(dest, src, dst_stride, src_stride, blocksize, nblocks, pe): blocked strided put
    (OpenSHMEM 1.6 ``shmem_ibput``).

    ``nblocks`` blocks of ``blocksize`` contiguous elements: block ``b`` starts at element
    ``b*src_stride`` of local ``src`` and goes to element ``b*dst_stride`` of PE ``pe``'s
    ``dest``. Strides count elements and must be >= ``blocksize``. Called by one thread;
    ``src`` is reusable on return. Through the NIC each block is one request.
    """
    _copy_blocks("pgas.device.ibput", dest, src, pe, True, dst_stride, src_stride, blocksize, nblocks)


def ibget(dest, src, dst_stride, src_stride, blocksize, nblocks, pe):
    """ibget(dest, src, dst_stride, src_stride, blocksize, nblocks, pe): blocked strided get
    (OpenSHMEM 1.6 ``shmem_ibget``): block ``b`` (``blocksize`` elements at ``b*src_stride`` of
    PE ``pe``'s ``src``) goes to ``b*dst_stride`` of local ``dest``; the data is there on return.
    """
    _copy_blocks("pgas.device.ibget", dest, src, pe, False, dst_stride, src_stride, blocksize, nblocks)


_SCOPES = {"": THREAD, "_warp": WARP, "_block": BLOCK}
_SCOPE_DOCS = {
    "": "Called by one thread.",
    "_warp": "All threads of the warp must call this with the same arguments; they share the copy.",
    "_block": "All threads of the block must call this with the same arguments; they share the copy.",
}
_OPS = {
    "put": (True, "copy ``src.size`` elements of local ``src`` into PE ``pe``'s ``dest``."),
    "get": (False, "copy ``dest.size`` elements of PE ``pe``'s ``src`` into local ``dest``."),
}


def _make(op: str, nbi: bool, suffix: str):
    to_peer, what = _OPS[op]
    scope = _SCOPES[suffix]
    name = f"{op}{'_nbi' if nbi else ''}{suffix}"
    label = f"pgas.device.{name}"

    def rma(dest, src, pe):
        _copy(_p.name(label), dest, src, pe, to_peer, scope, nbi)

    rma.__name__ = rma.__qualname__ = name
    done = ("Returns once the copy is issued; it is complete after ``quiet``." if nbi else
            "Returns once the copy is done on the load/store path (``src`` reusable).")
    rma.__doc__ = f"{name}(dest, src, pe): {what}\n\n{_SCOPE_DOCS[suffix]} {done}"
    return rma


for _op in _OPS:
    for _nbi in (False, True):
        for _suffix in _SCOPES:
            _f = _make(_op, _nbi, _suffix)
            globals()[_f.__name__] = _f
            if _f.__name__ not in __all__:
                __all__.append(_f.__name__)
del _op, _nbi, _suffix, _f
