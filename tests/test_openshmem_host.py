"""OpenSHMEM's host calls that shmem4py users look for: point-to-point synchronization
(``wait_until``, ``test``, the set forms and their ``_vector`` forms, ``fence``), the
accessibility queries and host ``ptr``, ``pcontrol``, and ``global_exit``; on one node and
across emulated nodes."""
import pytest

from conftest import pe_lines, pgasrun

POINT_SYNC = r"""
import threading
import time
import numpy as np
import pgas
from pgas.runtime._state import runtime

pgas.init()
me, n = pgas.my_pe(), pgas.n_pes()
right, left = (me + 1) % n, (me - 1) % n
flag = pgas.zeros(1, np.int64)
flags = pgas.zeros(n, np.int32)
data = pgas.zeros(16, np.float64)
assert not pgas.test(flag, pgas.CMP_EQ, left + 1)      # (before the barrier: after it the left PE may have set it)
pgas.barrier_all()

pgas.atomic_set(flag, me + 1, right)
assert pgas.wait_until(flag, pgas.CMP_EQ, left + 1) == left + 1
assert pgas.test(flag, pgas.CMP_GE, left + 1) and not pgas.test(flag, pgas.CMP_GT, left + 1)
pgas.barrier_all()

# every PE raises its slot of flags on every PE, later PEs later
time.sleep(0.02 * me)
for pe in range(n):
    pgas.atomic_set(flags[me:], me + 10, pe)
pgas.wait_until_all(flags, None, pgas.CMP_GE, 10)
assert pgas.test_all(flags, None, pgas.CMP_GE, 10)
expected = np.arange(n, dtype=np.int32) + 10
pgas.wait_until_all_vector(flags, None, pgas.CMP_EQ, expected)
assert pgas.test_all_vector(flags, np.array([], np.int32), pgas.CMP_EQ, expected)
wrong = expected.copy(); wrong[-1] += 1
assert not pgas.test_all_vector(flags, None, pgas.CMP_EQ, wrong)
status = np.zeros(n, np.int32); status[-1] = 1           # leave the last one out
assert pgas.test_all_vector(flags, status, pgas.CMP_EQ, wrong)
assert pgas.wait_until_any(flags, None, pgas.CMP_EQ, n - 1 + 10) == n - 1
assert pgas.test_any(flags, status, pgas.CMP_EQ, n - 1 + 10) == -1
assert pgas.wait_until_any_vector(flags, None, pgas.CMP_EQ, wrong) == 0
assert pgas.wait_until_some(flags, None, pgas.CMP_GE, 11).tolist() == list(range(1, n))
assert pgas.test_some(flags, status, pgas.CMP_GE, 11).tolist() == list(range(1, n - 1))
assert pgas.test_some_vector(flags, None, pgas.CMP_NE, wrong).tolist() == [n - 1]
assert pgas.wait_until_any(flags, np.ones(n, bool), pgas.CMP_EQ, 0) == -1      # none included
pgas.barrier_all()

# fence: the data before the flag
values = np.arange(16, dtype=np.float64) + me
pgas.put(data, values, right)
pgas.fence()
pgas.atomic_set(flag, 1000 + me, right)
pgas.wait_until(flag, pgas.CMP_EQ, 1000 + left)
assert (data.copy_to_host() == np.arange(16) + left).all()
pgas.barrier_all()

# a wait that is never satisfied names the ivar; bad arguments name themselves
rt = runtime("test")
saved, rt.timeout = rt.timeout, 0.3
try:
    pgas.wait_until_all(flags, None, pgas.CMP_EQ, 77)
    raise AssertionError("the wait must time out")
except pgas.PgasTimeoutError as e:
    assert "ivars[0] == 77" in str(e), e
rt.timeout = saved
for call, text in [(lambda: pgas.wait_until(pgas.zeros(1, np.int8), pgas.CMP_EQ, 0), "ivar must have"),
                   (lambda: pgas.test_all(flags, np.zeros(n + 1), pgas.CMP_EQ, 0), "status"),
                   (lambda: pgas.test_all_vector(flags, None, pgas.CMP_EQ, np.zeros(n + 1)), "values"),
                   (lambda: pgas.test(flag, 99, 0), "cmp"),
                   (lambda: pgas.wait_until(np.zeros(1, np.int64), pgas.CMP_EQ, 0), "ivar")]:
    try:
        call()
        raise AssertionError(f"expected a PgasError about {text}")
    except pgas.PgasError as e:
        assert text in str(e), e

# pcontrol: every integer level is taken (pgas has no profiling library: nothing changes)
for level in (0, 1, 2, -1, 7, np.int32(2), np.uint8(0)):
    assert pgas.pcontrol(level) is None
for level in (1.0, "1", True, None, np.float64(2)):
    try:
        pgas.pcontrol(level)
        raise AssertionError(f"pcontrol({level!r}) must be refused")
    except pgas.PgasValueError as e:
        assert "pgas.pcontrol: level must be an integer" in str(e) and repr(level) in str(e), e
pgas.barrier_all()

# accessibility and host ptr
assert all(pgas.pe_accessible(pe) for pe in range(n))
assert not any(pgas.pe_accessible(pe) for pe in (n, -1, 1.5, True))
assert pgas.addr_accessible(data, right) and pgas.addr_accessible(data[3:], left)
assert not pgas.addr_accessible(np.zeros(4), right) and not pgas.addr_accessible(data, n)
for pe in range(n):
    address = pgas.ptr(data, pe)
    if pgas.info()["transports"][pe] in ("self", "p2p"):
        view = pgas.peer_array(data, pe)
        assert address == view.__array_interface__["data"][0] if hasattr(view, "__array_interface__") else address
        assert address != 0
    else:
        assert address == 0, (pe, address)
pgas.barrier_all()

# nvshmem4py's spellings: signal_wait (value before cmp), split configs, buffer options
signal = pgas.zeros(1, np.uint64)
pgas.barrier_all()
pgas.signal_op(signal, 5, pgas.SIGNAL_SET, right)
assert pgas.signal_wait(signal, 5, pgas.CMP_EQ) == 5
assert pgas.signal_wait(signal_var=signal, signal_val=4, cmp=pgas.CMP_GT) == 5
whole = pgas.team_split_strided(pgas.TEAM_WORLD, 0, 1, n, None, 0, new_team_name="everyone")
xteam, yteam = pgas.team_split_2d(pgas.TEAM_WORLD, 1, None, 0, None, 0)
assert pgas.team_n_pes(whole) == n and pgas.team_n_pes(xteam) == 1 and pgas.team_n_pes(yteam) == n
for team in (whole, xteam, yteam):
    pgas.team_destroy(team)
raw = pgas.buffer(16, release=True, except_on_del=False)
assert raw.dtype == np.uint8 and raw.size == 16
pgas.free(raw)
pgas.barrier_all()

# the op-named reductions and collect (a different count from each member)
src = pgas.full(n, me + 1, np.int64)
dest = pgas.zeros(n, np.int64)
pgas.max_reduce(pgas.TEAM_WORLD, dest, src)
assert (dest.copy_to_host() == n).all()
pgas.prod_reduce(pgas.TEAM_WORLD, dest, src)
assert (dest.copy_to_host() == np.prod(np.arange(1, n + 1))).all()
pgas.sum_reducescatter(pgas.TEAM_WORLD, dest[:1], src)
assert dest.copy_to_host()[0] == n * (n + 1) // 2
pieces = pgas.full(n, me, np.int32)
gathered = pgas.full(n * (n + 1) // 2 + 1, -1, np.int32)
pgas.collect(pgas.TEAM_WORLD, gathered, pieces[:me + 1])           # PE r gives r + 1 copies of r
assert gathered.copy_to_host().tolist() == [r for r in range(n) for _ in range(r + 1)] + [-1]
odds = pgas.team_split_strided(pgas.TEAM_WORLD, 1, 2, n // 2) if n > 1 else None
if odds is not None:
    rank = pgas.team_my_pe(odds)
    pgas.collect(odds, gathered, pieces[:rank])                     # member 0 gives nothing
    expected = [2 * r + 1 for r in range(n // 2) for _ in range(r)]
    assert gathered.copy_to_host()[:len(expected)].tolist() == expected
    pgas.team_destroy(odds)
for call, text in [(lambda: pgas.collect(pgas.TEAM_WORLD, gathered[:2], pieces[:me + 1]), "dest"),
                   (lambda: pgas.collect(pgas.TEAM_WORLD, gathered, pieces[me:me + 1]), "same symmetric address")]:
    if n == 1 and text == "same symmetric address":
        continue
    try:
        call()
        raise AssertionError(f"expected a PgasError about {text}")
    except pgas.PgasError as e:
        assert text in str(e), e
pgas.barrier_all()
pgas.finalize()
try:
    pgas.pcontrol(1)
    raise AssertionError("pcontrol after finalize must be refused")
except pgas.PgasError as e:
    assert "pgas.pcontrol was called after pgas.finalize()" in str(e), e
print("ok")
"""

GLOBAL_EXIT = r"""
import sys
import time
import pgas

pgas.init()
if pgas.my_pe() == 1:
    print("leaving", flush=True)
    pgas.global_exit(int(sys.argv[1]))
time.sleep(30)
print("not stopped", flush=True)
"""


def _program(tmp_path, text: str):
    script = tmp_path / "program.py"
    script.write_text(text)
    return str(script)


def test_point_to_point_sync_and_queries_on_one_node(tmp_path, clean_shm):
    proc = pgasrun(3, "python", _program(tmp_path, POINT_SYNC), options=["--tag-output"])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert pe_lines(proc) == ["[0] ok", "[1] ok", "[2] ok"]


@pytest.mark.parametrize("transport", ["ucx"])     # (every engine serves these calls through Transports)
def test_point_to_point_sync_and_queries_across_nodes(tmp_path, clean_shm, transport):
    proc = pgasrun(4, "python", _program(tmp_path, POINT_SYNC), options=["--pes-per-node", "2", "--tag-output"],
                   env={"PGAS_REMOTE_TRANSPORT": transport})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert pe_lines(proc) == [f"[{pe}] ok" for pe in range(4)]


@pytest.mark.parametrize("status", [0])     # 0 too: not the status of a failure (others: as sys.exit's)
def test_global_exit_ends_every_pe_with_its_status(tmp_path, clean_shm, status):
    proc = pgasrun(3, "python", _program(tmp_path, GLOBAL_EXIT), str(status), options=["--tag-output"])
    assert proc.returncode == status, proc.stderr[-3000:]
    assert "leaving" in proc.stdout and "not stopped" not in proc.stdout
    assert f"PE 1 called pgas.global_exit({status})" in proc.stderr, proc.stderr[-3000:]
