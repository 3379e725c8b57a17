"""Communication contexts (``pgas.ctx_create``): RMA and atomics on a context, its own
``quiet``, team contexts, misuse; on one node and across emulated nodes over every remote
engine, where a context's ``quiet`` also shows that it completes (and reports the
failures of) only its own requests. ``CTX_INVALID``: what ``team_create_ctx`` gives for
TEAM_INVALID (None), refused by every call, also under PGAS_CHECK=1."""
import pytest

from conftest import backend_in_use, pe_lines, pgasrun, transport_env

CONTEXTS = r"""
import threading
import numpy as np
import pgas
from pgas.nic._regions import RemoteRegion
from pgas.runtime._state import runtime
from pgas.wire import _batch as batch
from mpi4py import MPI

pgas.init()
me, n = pgas.my_pe(), pgas.n_pes()
right, left = (me + 1) % n, (me - 1) % n
inbox = pgas.zeros(64, np.int64)
mine = pgas.full(64, me * 1000, np.int64)
counter = pgas.zeros(1, np.int64)
pgas.barrier_all()

ctx = pgas.ctx_create()
assert ctx.get_team() == pgas.TEAM_WORLD
source = np.arange(64, dtype=np.int64) + me * 1000
ctx.put_nbi(inbox, source, right)                 # from a numpy array
ctx.quiet()
pgas.barrier_all()
assert (inbox.copy_to_host() == np.arange(64) + left * 1000).all(), inbox.copy_to_host()
pgas.barrier_all()

got = pgas.zeros(64, np.int64)                    # symmetric dest: kept by the context
ctx.get_nbi(got, mine, left)
ctx.quiet()
assert (got.copy_to_host() == left * 1000).all(), got.copy_to_host()
back = np.zeros(64, np.int64)
ctx.get(back, mine, right)
assert (back == right * 1000).all()

# many small requests: more than a context keeps open at once
for i in range(100):
    ctx.put_nbi(inbox[i % 64:], mine[:1], right)
ctx.fence()
ctx.quiet()
pgas.barrier_all()
assert (inbox.copy_to_host() == left * 1000).all()
pgas.barrier_all()

# atomics on a context, exact counts from every PE
for _ in range(5):
    ctx.atomic_add(counter, 1, 0)
assert ctx.atomic_fetch(counter, 0) >= 5
pgas.barrier_all()
assert ctx.atomic_fetch(counter, pe=0) == 5 * n

# two threads, each with its own context, each completing only its own
def worker(k, out):
    mine_ctx = pgas.ctx_create(pgas.CTX_PRIVATE)
    data = np.full(8, me * 10 + k, np.int64)
    mine_ctx.put_nbi(inbox[8 * k:8 * k + 8], data, right)
    mine_ctx.quiet()
    mine_ctx.destroy()
    out[k] = True
done = [False, False]
threads = [threading.Thread(target=worker, args=(k, done)) for k in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
assert done == [True, True]
pgas.barrier_all()
seen = inbox.copy_to_host()
assert (seen[:8] == left * 10).all() and (seen[8:16] == left * 10 + 1).all(), seen
pgas.barrier_all()

# a team context takes PE numbers relative to its team
evens = pgas.team_split_strided(pgas.TEAM_WORLD, 0, 2, (n + 1) // 2)
if evens is not None:
    tctx = pgas.team_create_ctx(evens)
    size, rank = pgas.team_n_pes(evens), pgas.team_my_pe(evens)
    tctx.put_nbi(inbox[32:33], np.array([100 + me], np.int64), (rank + 1) % size)
    tctx.quiet()
    try:
        tctx.put(inbox, source, size)
        raise AssertionError("a PE outside the context's team must be refused")
    except pgas.PgasError as e:
        assert "pe" in str(e), e
    pgas.ctx_destroy(tctx)
pgas.barrier_all()
if evens is not None:
    rank, size = pgas.team_my_pe(evens), pgas.team_n_pes(evens)
    sender = 2 * ((rank - 1) % size)
    assert inbox.copy_to_host()[32] == 100 + sender, (inbox.copy_to_host()[32], sender)
    pgas.team_destroy(evens)

# the default context is the plain calls
pgas.CTX_DEFAULT.put_nbi(inbox[:1], np.array([7], np.int64), right)
pgas.CTX_DEFAULT.quiet()
for bad, text in [(lambda: pgas.ctx_create(8), "options"), (lambda: pgas.ctx_create(True), "options"),
                  (lambda: pgas.ctx_destroy(pgas.CTX_DEFAULT), "CTX_DEFAULT"),
                  (lambda: pgas.ctx_destroy("ctx"), "ctx must be"),
                  (lambda: pgas.team_create_ctx(30), "team 30 is not a team of PE")]:
    try:
        bad()
        raise AssertionError(f"expected a PgasError about {text}")
    except pgas.PgasError as e:
        assert text in str(e), e
# across nodes: PE 0 posts a request with a forged rkey on context A and a good one on B;
# B's quiet and the PE's quiet do not report A's refusal, A's quiet does, once (simulator)
remote = [pe for pe, kind in pgas.info()["transports"].items() if kind not in ("self", "p2p")]
far = MPI.COMM_WORLD.bcast(remote[0] if remote else None, root=0)     # PE 0's first PE on another node
fives, sixes = pgas.full(8, 5, np.int64), pgas.full(8, 6, np.int64)   # symmetric: the NIC reads them later
target = pgas.zeros(16, np.int64)
pgas.barrier_all()
if me == 0 and far is not None and pgas.backend() == "cuda":
    # a host put to another node completes on return there, on the host's queue pairs
    # (cuda/nic/_remote_rma.py): refused by the call itself
    a, b = pgas.ctx_create(), pgas.ctx_create()
    nic = runtime("test").transports.nic
    good = nic.remote[far]
    nic.remote[far] = RemoteRegion(good.base, good.size, good.rkey ^ 0x5A5A)
    try:
        a.put_nbi(target[:8], fives, far)
        raise AssertionError("a put with a forged rkey must be refused")
    except pgas.PgasError as e:
        assert "remote access error" in str(e), e
    nic.remote[far] = good
    b.put_nbi(target[8:], sixes, far)
    b.quiet()
    a.quiet()
    a.destroy(); b.destroy()
elif me == 0 and far is not None:
    a, b = pgas.ctx_create(), pgas.ctx_create()
    nic = runtime("test").transports.nic
    good = nic.remote[far]
    nic.remote[far] = RemoteRegion(good.base, good.size, good.rkey ^ 0x5A5A)
    a.put_nbi(target[:8], fives, far)
    pgas.quiet()        # completes A's request (the NIC has read the forged key) without reporting it
    nic.remote[far] = good
    b.put_nbi(target[8:], sixes, far)
    b.quiet()
    pgas.quiet()
    try:
        a.quiet()
        raise AssertionError("context A's refused put must fail A's quiet")
    except pgas.PgasError as e:
        assert "remote access error" in str(e), e
    a.quiet()       # reported once
    # each context sent on queue pairs of its own (a lane of the engine), not the PE's
    engine = runtime("test").transports.engine
    lane_a, lane_b = a._lanes[engine], b._lanes[engine]
    assert 0 not in (lane_a, lane_b) and lane_a != lane_b, (lane_a, lane_b)
    kind = pgas.info()["transports"][far]
    if kind == "ibgda":
        queues = [engine.lanes[lane][far] for lane in (0, lane_a, lane_b)]
        assert len({q.qp.qpn for q in queues}) == 3 and all(q.counter("last") > 0 for q in queues[1:])
    elif kind == "proxy":
        qps = [engine.lanes[lane][far] for lane in (0, lane_a, lane_b)]
        assert len({qp.qpn for qp in qps}) == 3 and all(engine._producer[qp.qpn] > 0 for qp in qps[1:])
    else:       # ucx: endpoints of their own, connections apart from the PE's
        rows = {tuple(engine.lanes[lane][batch.GLOBAL_WORDS + batch.P_ENDPOINT::batch.ROW_WORDS])
                for lane in (0, lane_a, lane_b)}
        assert len(rows) == 3, rows
    lanes = len(engine.lanes)
    a.destroy(); b.destroy()
    c = pgas.ctx_create()       # takes a destroyed context's lane: none made
    c.put_nbi(target[8:], sixes, far)
    c.quiet()
    assert c._lanes[engine] in (lane_a, lane_b) and len(engine.lanes) == lanes
    c.destroy()
pgas.barrier_all()
if me == far:
    assert target.copy_to_host().tolist() == [0] * 8 + [6] * 8, target.copy_to_host()

ctx.destroy()
for use in (lambda: ctx.put(inbox, source, right), lambda: ctx.quiet(), lambda: ctx.destroy()):
    try:
        use()
        raise AssertionError("a destroyed context must be refused")
    except pgas.PgasValueError as e:
        assert "destroyed" in str(e), e
pgas.barrier_all()
pgas.finalize()
print("ok")
"""

INVALID = r"""
import numpy as np
import pgas

pgas.init()
me, n = pgas.my_pe(), pgas.n_pes()
inbox = pgas.zeros(4, np.int64)
counter = pgas.zeros(1, np.int64)
source = np.arange(4, dtype=np.int64)
got = np.zeros(4, np.int64)
pgas.barrier_all()
odds = pgas.team_split_strided(pgas.TEAM_WORLD, 1, 2, n // 2)     # None (TEAM_INVALID) on the even PEs
ctx = pgas.team_create_ctx(odds)
assert (ctx is pgas.CTX_INVALID) == (odds is None), (me, ctx)
assert pgas.team_create_ctx(None, pgas.CTX_PRIVATE) is pgas.CTX_INVALID
assert repr(pgas.CTX_INVALID) == "<pgas.Context CTX_INVALID>"
uses = [("Context.put", lambda c: c.put(inbox, source, 0)), ("Context.get", lambda c: c.get(got, inbox, 0)),
        ("Context.put_nbi", lambda c: c.put_nbi(inbox, source, 0)),
        ("Context.get_nbi", lambda c: c.get_nbi(got, inbox, 0)),
        ("Context.quiet", lambda c: c.quiet()), ("Context.fence", lambda c: c.fence()),
        ("Context.atomic_add", lambda c: c.atomic_add(counter, 1, 0)),
        ("Context.atomic_fetch", lambda c: c.atomic_fetch(counter, pe=0)),
        ("Context.atomic_compare_swap", lambda c: c.atomic_compare_swap(counter, 0, 1, 0)),
        ("Context.get_team", lambda c: c.get_team())]
for name, use in uses:
    try:
        use(pgas.CTX_INVALID)
        raise AssertionError(f"{name} on CTX_INVALID must be refused")
    except pgas.PgasValueError as e:
        assert f"pgas.{name}: ctx is pgas.CTX_INVALID, which is no context" in str(e), e
pgas.ctx_destroy(pgas.CTX_INVALID)            # OpenSHMEM 1.5: destroying it does nothing
pgas.CTX_INVALID.destroy()
assert repr(pgas.CTX_INVALID) == "<pgas.Context CTX_INVALID>"     # (still no context, still not destroyed)
try:                                          # a handle that is no team here: an error, not CTX_INVALID
    pgas.team_create_ctx(30)
    raise AssertionError("team 30 must be refused")
except pgas.PgasValueError as e:
    assert "pgas.team_create_ctx: team 30 is not a team of PE" in str(e), e
if odds is not None:                          # the members' context works beside it
    rank, size = pgas.team_my_pe(odds), pgas.team_n_pes(odds)
    ctx.put(inbox[:1], np.array([me], np.int64), (rank + 1) % size)
    ctx.atomic_add(counter, 1, 0)
    ctx.quiet()
    ctx.destroy()
pgas.barrier_all()
if odds is not None:
    assert inbox.copy_to_host()[0] == 2 * ((rank - 1) % size) + 1, inbox.copy_to_host()
    assert counter.copy_to_host()[0] == (size if rank == 0 else 0)
    pgas.team_destroy(odds)
pgas.barrier_all()
pgas.free(counter)
pgas.free(inbox)
pgas.finalize()
print("ok")
"""


def _run(tmp_path, program: str, n: int, options=(), env=None):
    script = tmp_path / "program.py"
    script.write_text(program)
    proc = pgasrun(n, "python", str(script), options=[*options, "--tag-output"], env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert pe_lines(proc) == [f"[{pe}] ok" for pe in range(n)]
    return proc


def test_contexts_on_one_node(tmp_path, clean_shm):
    _run(tmp_path, CONTEXTS, 3)


@pytest.mark.parametrize("transport", ["ibgda", "proxy", "ucx", "ibgda+mpi"])
def test_contexts_across_nodes(tmp_path, clean_shm, transport):
    _run(tmp_path, CONTEXTS, 4, ("--pes-per-node", "2"), transport_env(transport))


def test_ctx_invalid_on_one_node(tmp_path, clean_shm):
    _run(tmp_path, INVALID, 3)


@pytest.mark.skipif(backend_in_use() != "simulator", reason="the checker runs on the simulator backend")
def test_ctx_invalid_across_nodes_under_the_checker(tmp_path, clean_shm):
    """PGAS_CHECK=1 wraps the host API: CTX_INVALID is still what team_create_ctx gives."""
    proc = _run(tmp_path, INVALID, 4, ("--pes-per-node", "2"), {"PGAS_CHECK": "1"})
    assert "pgas check: no problems found" in proc.stderr, proc.stderr[-3000:]
