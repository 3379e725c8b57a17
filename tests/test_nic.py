"""The emulated NIC: the mlx5 WQE/CQE layout byte by byte, the masked atomics, and
requests the target must refuse (forged keys, addresses outside the registered heap)."""
import functools
import os
import re
import struct

import numpy as np
import pytest

from conftest import NOT_ON_CUDA, pe_lines, pgasrun, skip_on_cuda, transport_env
from pgas.nic import _mlx5 as mlx5
from pgas.transport import _proxy as proxy
from pgas.nic._target import apply_atomic
from pgas.nic._wqe_code import read_wqes


def _be(fmt, data, offset):
    return struct.unpack_from(">" + fmt, data, offset)[0]


def test_rdma_write_wqe_is_byte_exact():
    sq = np.zeros((16, mlx5.BB), np.uint8)
    blocks = mlx5.write_wqe(sq, 5, 0x123, mlx5.OP_RDMA_WRITE, 0x1122334455667788, 0xCAFEF00D,
                            lkey=0xABCD1234, laddr=0x7F0000001000, nbytes=4096)
    raw = sq[5].tobytes()
    assert blocks == 1
    assert _be("I", raw, 0) == (5 << 8) | 0x08                 # opmod 0 | wqe index | opcode
    assert _be("I", raw, 4) == (0x123 << 8) | 3                 # qpn | ds (ctrl + raddr + data)
    assert raw[11] == mlx5.CQ_UPDATE
    assert _be("Q", raw, 16) == 0x1122334455667788 and _be("I", raw, 24) == 0xCAFEF00D
    assert (_be("I", raw, 32), _be("I", raw, 36), _be("Q", raw, 40)) == (4096, 0xABCD1234, 0x7F0000001000)
    assert raw[16:24] == bytes.fromhex("1122334455667788")      # big-endian on the wire
    wqe = mlx5.read_wqe(sq, 5)
    assert (wqe.opcode, wqe.index, wqe.qpn, wqe.ds, wqe.rkey, wqe.lkey, wqe.nbytes) == (
        mlx5.OP_RDMA_WRITE, 5, 0x123, 3, 0xCAFEF00D, 0xABCD1234, 4096)


def test_inline_and_atomic_wqes():
    sq = np.zeros((8, mlx5.BB), np.uint8)
    mlx5.write_wqe(sq, 0, 7, mlx5.OP_RDMA_WRITE, 0x1000, 9, inline=b"\x01\x02\x03\x04\x05\x06\x07\x08")
    raw = sq[0].tobytes()
    assert _be("I", raw, 4) & 0xFF == 3 and _be("I", raw, 32) == 8 | 0x80000000
    assert raw[36:44] == bytes(range(1, 9)) and mlx5.read_wqe(sq, 0).inline == bytes(range(1, 9))
    mlx5.write_wqe(sq, 1, 7, mlx5.OP_ATOMIC_FA, 0x2000, 9, lkey=3, laddr=0x5000, operands=(42, 0))
    raw = sq[1].tobytes()
    assert _be("I", raw, 0) == (1 << 8) | 0x12 and _be("I", raw, 4) & 0xFF == 4
    assert _be("Q", raw, 32) == 42 and (_be("I", raw, 48), _be("I", raw, 52), _be("Q", raw, 56)) == (8, 3, 0x5000)
    mlx5.write_wqe(sq, 2, 7, mlx5.OP_MASKED_FA, 0x2000, 9, opmod=mlx5.OPMOD_EXT_ATOMIC_4, lkey=3,
                   laddr=0x5000, operands=(5, 0))
    raw = sq[2].tobytes()
    assert _be("I", raw, 0) == (0x08 << 24) | (2 << 8) | 0x15 and _be("I", raw, 32) == 5
    assert _be("I", raw, 48) == 4                               # a 4-byte fetched value
    # the 8-byte masked compare-swap takes two basic blocks, here wrapping round the queue
    blocks = mlx5.write_wqe(sq, 7, 7, mlx5.OP_MASKED_CS, 0x3000, 9, opmod=mlx5.OPMOD_EXT_ATOMIC_8, lkey=3,
                            laddr=0x6000, operands=(1, 2, 3, 4))
    assert blocks == 2 and _be("I", sq[7].tobytes(), 4) & 0xFF == 5
    assert [_be("Q", sq[7].tobytes(), 32 + 8 * k) for k in range(4)] == [1, 2, 3, 4]
    assert (_be("I", sq[0].tobytes(), 0), _be("Q", sq[0].tobytes(), 8)) == (8, 0x6000)   # data seg, wrapped
    wqe = mlx5.read_wqe(sq, 7)
    assert wqe.blocks == 2 and wqe.operands == (1, 2, 3, 4) and wqe.laddr == 0x6000 and wqe.atomic_size == 8


def test_cqe_owner_bit_and_errors():
    cq = mlx5.empty_cq(2)
    assert mlx5.read_cqe(cq, 0) is None
    mlx5.write_cqe(cq, 0, 0x101, 17)
    mlx5.write_cqe(cq, 1, 0x101, 18, syndrome=mlx5.SYNDROME_REMOTE_ACCESS)
    assert mlx5.read_cqe(cq, 0) == (0x101, 17, 0) and mlx5.read_cqe(cq, 1) == (0x101, 18, 0x13)
    assert cq[1, 63] >> 4 == 13 and _be("H", cq[0].tobytes(), 60) == 17
    assert mlx5.read_cqe(cq, 2) is None                          # old pass: owner bit not flipped yet
    mlx5.write_cqe(cq, 2, 0x101, 19)
    assert mlx5.read_cqe(cq, 2) == (0x101, 19, 0)


def _expected(op, old, value, cond, bits):
    mask = (1 << bits) - 1
    return {proxy.AMO_ADD: (old + value) & mask, proxy.AMO_AND: old & value, proxy.AMO_OR: old | value,
            proxy.AMO_XOR: old ^ value, proxy.AMO_SWAP: value, proxy.AMO_FETCH: old,
            proxy.AMO_CAS: value if old == cond else old}[op]


@pytest.mark.parametrize("dtype", [np.uint32, np.uint64])
@pytest.mark.parametrize("op", [proxy.AMO_ADD, proxy.AMO_AND, proxy.AMO_OR, proxy.AMO_XOR, proxy.AMO_SWAP,
                                proxy.AMO_FETCH, proxy.AMO_CAS])
def test_every_atomic_request_maps_to_the_mlx5_atomic_that_does_it(op, dtype):
    """The proxy's encoding (standard or masked atomics) applied by the target's NIC."""
    bits = np.dtype(dtype).itemsize * 8
    rng = np.random.default_rng(op)
    for old, value in [(0b1100, 0b1010), (2 ** bits - 1, 1), *rng.integers(0, 2 ** bits - 1, (20, 2), dtype=dtype)]:
        for cond in (int(old), int(old) ^ 1):
            word = np.array([old], dtype)
            opcode, opmod, operands = proxy.atomic_wqe(op, bits // 8, int(value), cond)
            fetched = apply_atomic(word, opcode, list(operands), bits // 8)
            assert fetched == old
            assert int(word[0]) == _expected(op, int(old), int(value), cond, bits), (op, old, value, cond)


FORGED = r"""
import numpy as np
import pgas, pgas.device as dev
from numba import cuda
from pgas.nic import _mlx5 as mlx5
from pgas.transport import _proxy as proxy
from pgas.nic._regions import RemoteRegion
from pgas.runtime._arrays import as_ndarray
from pgas.runtime._state import runtime

@cuda.jit
def p_kernel(dest, pe):
    dev.p(dest[3:], 99, pe)
    dev.quiet()

pgas.init()
me = pgas.my_pe()
rt = runtime("test")
nic, px, heap_lkey = rt.transports.nic, rt.transports.engine, rt.transports.heap_region.lkey
canary = pgas.full(16, 7, np.int64)
mine = as_ndarray(canary, "test", "canary")
offset = rt.heap.offset_of(mine, "test", "canary")
pgas.barrier_all()
if me == 0:
    remote = nic.remote[1]
    local = mine.__array_interface__["data"][0]
    big = np.ones(1 << 20, np.uint8)      # large enough that UCX sends it by rendezvous
    def refused(why, op, raddr, nbytes=8, lkey=heap_lkey, size=8, laddr=local):
        ticket = px.submit("forged", op, 1, raddr, laddr=laddr, lkey=lkey, nbytes=nbytes, size=size)
        try:
            px.wait("forged", ticket)
        except pgas.PgasError as e:
            text = str(e)
            assert why in text and "to PE 1" in text and f"{raddr:#x}" in text, text
            return
        raise AssertionError(f"not refused: {why}")
    refused("remote access error", proxy.PUT, remote.base + remote.size - 8, nbytes=64)   # runs past the end
    refused("remote access error", proxy.PUT, remote.base - 64, nbytes=64)               # below the heap
    if rt.transports.remote_transport == "ucx":
        refused("remote access error", proxy.PUT, remote.base + remote.size - 64, nbytes=big.nbytes,
                laddr=big.ctypes.data)                                                      # a large one too
    refused("remote access error", proxy.GET, remote.base + remote.size, nbytes=8)
    refused("remote access error", proxy.AMO_ADD, remote.base + remote.size)
    refused("remote invalid request", proxy.AMO_ADD, remote.base + offset + 4)          # misaligned
    if rt.transports.remote_transport != "ucx":       # the ucx engine has no local keys to check
        refused("local protection error", proxy.PUT, remote.base + offset, lkey=heap_lkey ^ 0x77)
    nic.remote[1] = RemoteRegion(remote.base, remote.size, remote.rkey ^ 0x5A5A)         # a forged rkey
    refused("remote access error", proxy.PUT, remote.base + offset, nbytes=64)
    if rt.transports.remote_transport == "ucx":
        refused("remote access error", proxy.PUT, remote.base, nbytes=big.nbytes, laddr=big.ctypes.data)
    nic.remote[1] = remote
    px.submit("forged", proxy.PUT, 1, remote.base + remote.size, laddr=local, lkey=heap_lkey, nbytes=8,
              waited=False)                                                            # non-blocking: at quiet
    try:
        pgas.quiet()
        raise AssertionError("a refused non-blocking put must fail quiet")
    except pgas.PgasError as e:
        assert "remote access error" in str(e), e
    if rt.transports.remote_transport == "ibgda":   # a refusal already read (as a fetching atomic's wait
        px.submit("forged", proxy.PUT, 1, remote.base + remote.size, laddr=local, lkey=heap_lkey, nbytes=8,
                  waited=False)                                           # reads it): the next small put raises it
        while not px.errors:
            px._poll(px.queues[1])
        try:
            pgas.put(canary[:1], np.array([7], np.int64), 1)      # (over UCX: the NIC has nothing in flight)
            raise AssertionError("a blocking put after a refused put_nbi must raise its failure")
        except pgas.PgasError as e:
            assert "remote access error" in str(e), e
    if rt.transports.remote_transport == "ucx":     # refusals inside one batch of small requests
        canary_at = remote.base + offset
        px.submit("forged", proxy.AMO_ADD, 1, canary_at + 40, nbytes=8, value=1, waited=False)   # applied
        nic.remote[1] = RemoteRegion(remote.base, remote.size, remote.rkey ^ 0x5A5A)
        px.submit("forged", proxy.PUT_INLINE, 1, canary_at + 48, nbytes=8, value=5, waited=False)  # forged rkey
        nic.remote[1] = remote
        px.submit("forged", proxy.AMO_ADD, 1, canary_at + 52, nbytes=8, value=1, waited=False)   # misaligned
        px.submit("forged", proxy.PUT_INLINE, 1, remote.base + remote.size - 4, nbytes=8, value=5,
                  waited=False)                                                            # past the end
        try:
            pgas.quiet()
            raise AssertionError("a refused request of a batch must fail quiet")
        except pgas.PgasError as e:
            assert "remote access error" in str(e) and f"{canary_at + 48:#x}" in str(e), e
    # the WQE a device p wrote: an inline RDMA write to PE 1's copy, keys and address from init
    p_kernel[1, 1](canary, 1)
    if rt.transports.remote_transport != "ucx":     # the ucx engine has no WQEs: a header is the request
        if rt.transports.remote_transport == "ibgda":
            qp = px.queues[1].qp
            last = px.queues[1].counter("last") - 1
        else:
            qp = px.lanes[0][1]
            last = px._producer[qp.qpn] - 1
        wqe = mlx5.read_wqe(qp.sq, last)
        assert (wqe.opcode, wqe.qpn, wqe.ds, wqe.signaled) == (mlx5.OP_RDMA_WRITE, qp.qpn, 3, True), wqe
        assert wqe.rkey == remote.rkey and wqe.raddr == remote.base + offset + 24, wqe
        assert wqe.inline == np.int64(99).tobytes(), wqe
pgas.barrier_all()
expected = [7] * 16
if me == 1:
    expected[3] = 99
    if rt.transports.remote_transport == "ucx":
        expected[5] = 8
assert canary.copy_to_host().tolist() == expected, canary.copy_to_host()      # nothing else written
assert not rt.heap.views[me][-64:].any()       # the end of the heap, where the forged put aimed
pgas.finalize()
print("ok")
"""


@pytest.mark.parametrize("transport", ["ibgda", "proxy", "ucx", "ibgda+mpi", "proxy+mpi"])
def test_forged_and_out_of_range_requests_are_refused(tmp_path, clean_shm, transport):
    skip_on_cuda("it drives the engines by hand, with host addresses in the simulator's heap")
    _both_ok_as_two_nodes(tmp_path, FORGED, transport)


def _both_ok_as_two_nodes(tmp_path, program: str, transport: str, env: dict | None = None) -> None:
    """Run ``program`` on 2 PEs, one per node, over ``transport``: each prints ok."""
    script = tmp_path / "program.py"
    script.write_text(program)
    proc = pgasrun(2, "python", str(script), options=["--pes-per-node", "1", "--tag-output"],
                   env={**transport_env(transport), **(env or {})})
    assert proc.returncode == 0, proc.stderr
    assert pe_lines(proc) == ["[0] ok", "[1] ok"]


REGISTERED_APART = r"""
from multiprocessing import shared_memory
import numpy as np
import pgas, pgas.device as dev
from numba import cuda
from pgas.runtime._arrays import as_ndarray
from pgas.runtime._state import runtime
from pgas.transport import _proxy as proxy
from pgas.wire import _rma as rma

N = 3 * 512             # three pages of int64

@cuda.jit
def p_kernel(dest, value, pe):
    dev.p(dest[5:], value, pe)
    dev.quiet()

def keys_to(keys, offset):
    '''UCX's keys to the memory made symmetric at ``offset``, in every endpoint's table of ``keys``.'''
    found = []
    for _, table in keys._tables.values():
        for i in range(table[0]):
            at = 1 + i * rma.REGION_WORDS
            if table[at + 1] != 0 and table[at] == offset:
                found.append(int(table[at + 2]))
    return found

def registered_apart(offset):
    '''Every user of UCX holds keys to the memory at ``offset`` of its own, not the heap's.'''
    users = rt.transports._heap_keys()
    assert users, "nothing reaches the peers one-sided"
    for keys in users:
        found = keys_to(keys, offset)
        assert found and 0 not in found and not set(found) & set(keys._unpacked), (found, keys._unpacked)
        assert keys._registrations[offset][0] == N * 8

def round_trip(sym, mine, step):
    '''A host put and get and a device p into the other PE's registered memory.'''
    pgas.put(sym[:512], np.arange(512, dtype=np.int64) + 100 * me + step, other)
    p_kernel[1, 1](sym, 1000 * step + me, other)
    pgas.quiet()
    pgas.barrier_all()
    expected = np.arange(512) + 100 * other + step
    expected[5] = 1000 * step + other
    assert np.array_equal(mine[:512], expected), mine[:8]
    back = np.zeros(512, np.int64)
    pgas.get(back, sym[:512], other)
    expected[:] = np.arange(512) + 100 * me + step
    expected[5] = 1000 * step + me
    assert np.array_equal(back, expected), back[:8]
    pgas.barrier_all()

pgas.init()
me, other = pgas.my_pe(), 1 - pgas.my_pe()
rt = runtime("test")
shm = shared_memory.SharedMemory(create=True, size=N * 8)
mine = np.ndarray(N, np.int64, buffer=shm.buf)
mine[:] = -1
sym = pgas.register_symmetric(mine)
offset = rt.heap.offset_of(as_ndarray(sym, "test", "sym"), "test", "sym")
registered_apart(offset)
assert pgas.info()["ucx_memory"]["made_symmetric"] == {offset: N * 8}, pgas.info()["ucx_memory"]
round_trip(sym, mine, 1)
local = as_ndarray(pgas.zeros(2, np.int64), "test", "local")     # (in the heap: the NIC's key to it)
if me == 0:         # requests that cross an edge of the registered memory: no one key holds them
    remote = rt.transports.nic.remote[1]
    for engine in {id(e): e for e in (rt.transports.engine, rt.transports.engines.get("ucx")) if e}.values():
        for raddr in (remote.base + offset - 8, remote.base + offset + N * 8 - 8):
            ticket = engine.submit("crossing", proxy.PUT, 1, raddr, laddr=local.ctypes.data,
                                   lkey=rt.transports.heap_region.lkey, nbytes=16, size=8)
            try:
                engine.wait("crossing", ticket)
                raise AssertionError(f"a put across an edge of registered memory was not refused ({raddr:#x})")
            except pgas.PgasError as e:
                assert "remote access error" in str(e) and f"{raddr:#x}" in str(e), e
pgas.barrier_all()
if me == 1:         # nothing of them written
    assert mine[0] != 0 and mine[-1] == -1, (mine[0], mine[-1])
    assert not rt.heap.views[me][offset - 8:offset].any()
# an engine made after the registration registers it too
rt.transports.quiet("test")
pgas.barrier_all()
rt.transports.use_remote("ibgda" if rt.transports.remote_transport == "ucx" else "ucx")
registered_apart(offset)
round_trip(sym, mine, 2)
pgas.unregister_symmetric(sym)
for keys in rt.transports._heap_keys():     # the keys destroyed, the registration dropped
    assert not keys_to(keys, offset) and not keys._registrations
assert pgas.info()["ucx_memory"]["made_symmetric"] == {}
# a registration that fails on one PE fails the call on every PE, naming it, nothing kept
used = pgas.info()["heap_used"]
real_map = rma.HeapKeys._map
def refused_on_pe_1(self, address, nbytes, what):
    if me == 1:
        return 0, b"", f"PE 1: UCX could not register {what} (made to fail by the test)"
    return real_map(self, address, nbytes, what)
rma.HeapKeys._map = refused_on_pe_1
try:
    pgas.register_symmetric(mine)
    raise AssertionError("a failed registration must fail register_symmetric")
except pgas.PgasError as e:
    assert "pgas.register_symmetric: PE 1: UCX could not register the memory made symmetric at heap offset" \
        in str(e), e
rma.HeapKeys._map = real_map
for keys in rt.transports._heap_keys():
    assert not keys._registrations and not any(table[2::rma.REGION_WORDS].any() for _, table in keys._tables.values())
assert pgas.info()["heap_used"] == used
again = pgas.register_symmetric(mine)       # and it can be registered after all
registered_apart(rt.heap.offset_of(as_ndarray(again, "test", "again"), "test", "again"))
pgas.unregister_symmetric(again)
pgas.finalize()
shm.unlink()
shm.close()
print("ok")
"""


@pytest.mark.parametrize("transport", ["ibgda", "proxy", "ucx"])
def test_memory_made_symmetric_is_registered_with_ucx_apart_from_the_heap(tmp_path, clean_shm, transport):
    """``register_symmetric`` memory (another file's pages mapped over a range of the heap)
    gets a UCX registration and keys of its own in every user of UCX, made before or after
    it (a NIC that pinned the heap's pages would not reach it through the heap's key);
    puts, gets and a device ``p`` reach it; a request across its edge is refused, nothing
    written; ``unregister_symmetric`` destroys the keys; a registration that fails on one PE
    fails the call on every PE, naming that PE, and leaves nothing registered."""
    skip_on_cuda("register_symmetric over UCX: the simulator's host heap")
    _both_ok_as_two_nodes(tmp_path, REGISTERED_APART, transport)


LARGE_THEN_SIGNAL = r"""
import numpy as np
import pgas, pgas.device as dev
from numba import cuda

N = 1 << 18            # 2 MiB of int64: sent by rendezvous, its data landing after what follows it

@cuda.jit
def put_then_signal(dest, src, signal, value, pe):
    dev.put_signal_nbi(dest, src, signal, value, dev.SIGNAL_SET, pe)
    dev.quiet()

pgas.init()
me = pgas.my_pe()
dest = pgas.zeros(N, np.int64)
src = pgas.zeros(N, np.int64)
signal, ack = pgas.zeros(1, np.uint64), pgas.zeros(1, np.uint64)
pgas.barrier_all()
for round in range(1, 7):
    if me == 0:
        src[:] = round
        if round % 2:
            pgas.put_signal_nbi(dest, src, signal, round, pgas.SIGNAL_SET, 1)      # from the host
        else:
            put_then_signal[1, 1](dest, src, signal, round, 1)                       # from a kernel
        pgas.signal_wait_until(ack, pgas.CMP_EQ, round)
    else:
        pgas.signal_wait_until(signal, pgas.CMP_EQ, round)
        seen = dest.copy_to_host()
        assert (seen == round).all(), (round, int((seen != round).sum()), "elements not yet there")
        pgas.signal_op(ack, round, pgas.SIGNAL_SET, 0)
pgas.barrier_all()
pgas.finalize()
print("ok")
"""


@pytest.mark.parametrize("transport", ["ibgda", "proxy", "ucx", "ibgda+mpi"])
def test_a_signal_after_a_large_put_comes_after_all_its_data(tmp_path, clean_shm, transport):
    """Requests to one PE are applied in order, whatever their size: a put large enough to
    travel by UCX's rendezvous (its data lands after the requests behind it) holds back
    what follows until it is answered, so its signal is never seen before its data. (UCX
    over TCP, as between hosts: without the hold-back the signal overtook the data there
    in every run tried; over shared memory it seldom does.)"""
    _both_ok_as_two_nodes(tmp_path, LARGE_THEN_SIGNAL, transport, {"UCX_TLS": "tcp,self"})


NBI_THEN_BLOCKING = r"""
import numpy as np
import pgas
from pgas.runtime._state import runtime

pgas.init()
me = pgas.my_pe()
block, src = pgas.zeros(1 << 20, np.uint8), pgas.zeros(1 << 20, np.uint8)
word, back, one = pgas.zeros(1, np.int64), np.zeros(8, np.uint8), np.zeros(1, np.int64)
pgas.barrier_all()
if me == 0:
    for step in range(1, 21):
        src[:] = step       # (symmetric: put_nbi returns before the NIC has read it)
        pgas.put_nbi(block, src, 1)
        pgas.get(back, block[:8], 1)
        assert back.tolist() == [step] * 8, (step, back.tolist())
        pgas.put_nbi(block, src, 1)
        pgas.put(block[:8], np.full(8, 200 + step, np.uint8), 1)
        pgas.put_nbi(word, np.array([step], np.int64), 1)       # an inline write
        pgas.get(one, word, 1)
        assert one[0] == step, (step, one[0])
        pgas.atomic_set(word, -step, 1)                         # a message to the target
        pgas.get(one, word, 1)
        assert one[0] == -step, (step, one[0])
        pgas.quiet()
    transports = runtime("test").transports
    if transports.remote_transport == "ibgda" and transports.native is not None:
        # nothing in flight: the host's own put and get skip the NIC's queue pair
        queue = transports.engine.queues[1]
        posted = queue.counter("last")
        pgas.put(block[:8], np.full(8, 7, np.uint8), 1)
        pgas.get(back, block[:8], 1)
        assert queue.counter("last") == posted and back.tolist() == [7] * 8
        pgas.put(block[:8], np.full(8, 220, np.uint8), 1)
    if transports.remote_transport == "proxy" and transports.native is not None:
        # nothing in flight: the host's own put and get skip the proxy thread
        taken = transports.engine._next
        pgas.put(block[:8], np.full(8, 7, np.uint8), 1)
        pgas.get(back, block[:8], 1)
        assert transports.engine._next == taken and back.tolist() == [7] * 8
        pgas.put(block[:8], np.full(8, 220, np.uint8), 1)
pgas.barrier_all()
if me == 1:
    got = block.copy_to_host()
    assert got[:8].tolist() == [220] * 8 and np.all(got[8:] == 20), got[:16].tolist()
pgas.barrier_all()
pgas.finalize()
print("ok")
"""


@pytest.mark.parametrize("transport", ["ibgda", "proxy", "ibgda+mpi"])
def test_a_blocking_put_or_get_comes_after_the_put_nbi_before_it(tmp_path, clean_shm, transport):
    """Through the NIC what a PE issues to another lands in issue order: a blocking put or
    get just after a 1 MiB ``put_nbi``, an inline ``put_nbi`` or an ``atomic_set`` to the
    same PE comes after it. ibgda's and the proxy's small host
    calls go straight over UCX (the ucx engine's one-sided put and get) only while that
    path has nothing of this PE's in flight to that PE (then the NIC's queue pair, or the
    proxy thread, sees none of them). Over TCP the ``put_nbi`` is still in
    flight when the next call comes (without that rule the get read the bytes before it in
    every run tried); over shared memory the NIC has most often finished it already."""
    _both_ok_as_two_nodes(tmp_path, NBI_THEN_BLOCKING, transport, {"UCX_TLS": "tcp,self"})


MASKED = r"""
import numpy as np
import pgas
from pgas.nic import _mlx5 as mlx5
from pgas.runtime._arrays import as_ndarray
from pgas.runtime._state import runtime
from pgas.transport import _ibgda_code as code
from pgas.transport._ibgda_ir import AMO_ADD

# (opcode, size, operands, the word before): masked atomics whose masks no single CPU or
# wire operation does; the expected old values and results come from mlx5.atomic_result
CASES = [(mlx5.OP_MASKED_CS, 4, (0x12345678, 0x78, 0xFF00, 0xFF), 0xAABBCC78),          # compare matches
         (mlx5.OP_MASKED_CS, 4, (0x12345678, 0x79, 0xFF00, 0xFF), 0xAABBCC78),          # it does not
         (mlx5.OP_MASKED_CS, 8, (0x1122334455667788, 0x8, 0xFFFF0000FFFF0000, 0xF), 0x0123456789ABCDE8),
         (mlx5.OP_MASKED_FA, 4, (0x00018001, 0x80008000, 0, 0), 0x0001FFFF),           # two 16-bit fields
         (mlx5.OP_MASKED_FA, 8, (0x0000000180000001, 0x8000000080000000, 0, 0), 0x00000001FFFFFFFF)]

pgas.init()
me = pgas.my_pe()
rt = runtime("test")
engine = rt.transports.engine
words = pgas.zeros(len(CASES), np.uint64)
mine = as_ndarray(words, "test", "words")
for i, (_, size, _, before) in enumerate(CASES):
    mine[i] = before
pgas.barrier_all()
if me == 0:
    queue = engine.lanes[0][1]
    base = rt.transports.nic.remote[1].base + rt.heap.offset_of(mine, "test", "words")
    for i, (opcode, size, operands, before) in enumerate(CASES):
        opmod = mlx5.OPMOD_EXT_ATOMIC_4 if size == 4 else mlx5.OPMOD_EXT_ATOMIC_8
        kind = code.KIND_MASKED_CS_8 if (opcode, size) == (mlx5.OP_MASKED_CS, 8) else code.KIND_ATOMIC
        posted = engine._code.post(queue.address, kind, opcode | opmod << 24, base + 8 * i,
                                   rt.transports.nic.remote[1].rkey, queue.lkey, 0, size, *operands, 1)
        assert posted >= 0, posted
        if engine.native is not None:
            engine.native.ring(queue.row, True)
        else:
            engine.nic.ring(queue.descriptor[code.W["doorbell"]:code.W["doorbell"] + 1].tobytes())
        old = engine.wait("masked", (queue, posted >> 1, AMO_ADD, size))
        assert old == before & ((1 << 8 * size) - 1), (i, hex(old))
pgas.barrier_all()
if me == 1:
    for i, (opcode, size, operands, before) in enumerate(CASES):
        with np.errstate(over="ignore"):
            result, _ = mlx5.atomic_result(opcode, size, *operands, before)
        expected = (before & ~((1 << 8 * size) - 1)) | int(result)
        assert int(mine[i]) == expected, (i, hex(int(mine[i])), hex(expected))
pgas.finalize()
print("ok")
"""


@pytest.mark.parametrize("wire", ["ucx", "mpi"])
def test_masked_atomics_no_single_operation_does_are_applied_whole(tmp_path, clean_shm, wire):
    """A masked compare-swap or fetch-add with any masks (the GPU-initiated path posts only
    those one operation does; a NIC takes any): the native NIC sends it whole and the
    target applies it in a compare-and-swap loop, as the NIC's thread does."""
    _both_ok_as_two_nodes(tmp_path, MASKED, "ibgda", {"PGAS_NIC_WIRE": wire})


def test_the_native_nic_sends_each_atomic_as_the_one_operation_it_is():
    """The native NIC's mapping from an mlx5 atomic back to the wire's operation is the
    inverse of the GPU-initiated path's (``atomic_segments``) for every operation and size."""
    from pgas.transport._ibgda_ir import AMO_ADD, AMO_FETCH, OP_NAMES, atomic_segments
    from pgas.wire import _target as target
    from pgas.wire._nic_code import wire_request

    value, compare = 0x8000_0000_1234_5678, 0x0FED_CBA9_8765_4321
    for op in range(AMO_ADD, AMO_FETCH + 1):
        for size in (4, 8):
            ones = (1 << 8 * size) - 1
            _, opcode_opmod, *operands = atomic_segments(op, size, value, compare)
            signed = [int(w) - (1 << 64) if int(w) >> 63 else int(w) for w in operands]
            sent = wire_request(opcode_opmod & 0xFF, size, False, *signed)
            wanted = {AMO_FETCH: (AMO_ADD, 0, 0), target.AMO_CAS: (op, value & ones, compare & ones),
                      target.AMO_AND: (op, value & ones, 0)}.get(op, (op, value & ones, 0))
            assert [x & ones for x in sent[1:]] == list(wanted[1:]) and sent[0] == wanted[0], (OP_NAMES[op], size, sent)
    assert wire_request(0x77, 8, False, 0, 0, 0, 0)[0] == -1           # no such opcode: refused


UNWAITED = r"""
import time
import numpy as np
from numba import cuda
import pgas
import pgas.device as dev

@cuda.jit
def put_and_add(flags, pe):
    dev.p(flags, np.uint64(1), pe)          # no quiet, no wait: they may sit in a batch
    dev.signal_op(flags[1:], 1, pgas.SIGNAL_ADD, pe)

pgas.init()
me = pgas.my_pe()
flags, scratch = pgas.zeros(2, np.uint64), pgas.zeros(2, np.uint64)
put_and_add[1, 1](scratch, me)      # compiled before the clock starts (on a GPU that takes a while)
cuda.synchronize()
pgas.barrier_all()
if me == 0:
    put_and_add[1, 1](flags, 1)
    time.sleep(1.0)      # no pgas call here: only the progress thread can send what is held back
else:
    start = time.monotonic()
    pgas.signal_wait_until(flags[:1], pgas.CMP_EQ, 1)
    pgas.signal_wait_until(flags[1:], pgas.CMP_EQ, 1)
    waited = time.monotonic() - start
    assert waited < 0.5, f"the put and the signal came after {waited:.2f} s"
pgas.barrier_all()
pgas.finalize()
print("ok")
"""


@pytest.mark.parametrize("transport", ["ibgda", "proxy", "ucx", "proxy+mpi"])
def test_a_put_and_a_signal_nobody_quiets_or_waits_for_are_delivered(tmp_path, clean_shm, transport):
    _both_ok_as_two_nodes(tmp_path, UNWAITED, transport)


FALLBACK = r"""
import numpy as np
import pgas
from pgas.transport import _ibgda_code


def unavailable():
    raise RuntimeError("no LLVM here")


_ibgda_code.compiled = unavailable        # as where llvmlite cannot compile
pgas.init()
me, other = pgas.my_pe(), 1 - pgas.my_pe()
assert pgas.info()["transports"][other] == "proxy", pgas.info()["transports"]
a = pgas.zeros(4, np.int64)
pgas.put(a[me:me + 1], np.array([10 + me]), other)
pgas.barrier_all()
assert a.copy_to_host().tolist()[other] == 10 + other
pgas.finalize()
print("ok")
"""


def test_where_ibgda_cannot_be_set_up_pgas_says_so_once_and_uses_the_proxy(tmp_path, clean_shm):
    skip_on_cuda(NOT_ON_CUDA)     # the proxy it falls back to is the simulator's
    script = tmp_path / "fallback.py"
    script.write_text(FALLBACK)
    proc = pgasrun(2, "python", str(script), options=["--pes-per-node", "1", "--tag-output"])
    assert proc.returncode == 0, proc.stderr
    assert pe_lines(proc) == ["[0] ok", "[1] ok"]
    for pe in (0, 1):
        said = f"pgas (PE {pe}): the GPU-initiated NIC path (ibgda) cannot be set up here (RuntimeError: no LLVM here); using the CPU proxy"
        assert proc.stderr.count(said) == 1, proc.stderr


UCX_FALLBACK = r"""
import numpy as np
import pgas
from pgas.core._errors import PgasError
from pgas.wire import _ucp


def unavailable():
    raise PgasError("no libucp here")


_ucp.load = unavailable                   # as under an MPI built without UCX
pgas.init()
me, other = pgas.my_pe(), 1 - pgas.my_pe()
assert pgas.info()["transports"][other] == "proxy", pgas.info()["transports"]
a = pgas.zeros(4, np.int64)
pgas.put(a[me:me + 1], np.array([10 + me]), other)
assert pgas.atomic_fetch_add(a[2:3], 1, other) in (0, 1)
pgas.barrier_all()
assert a.copy_to_host().tolist()[other] == 10 + other
pgas.finalize()
print("ok")
"""


def test_where_ucx_cannot_be_loaded_pgas_says_so_once_and_uses_the_proxy(tmp_path, clean_shm):
    """The fallback wire: the ucx engine asked for, UCX missing; the proxy (and the emulated
    NIC's thread, which ucx never starts) carries everything."""
    skip_on_cuda(NOT_ON_CUDA)     # the proxy it falls back to is the simulator's
    script = tmp_path / "ucx_fallback.py"
    script.write_text(UCX_FALLBACK)
    proc = pgasrun(2, "python", str(script), options=["--pes-per-node", "1", "--tag-output"],
                   env={"PGAS_REMOTE_TRANSPORT": "ucx"})
    assert proc.returncode == 0, proc.stderr
    assert pe_lines(proc) == ["[0] ok", "[1] ok"]
    for pe in (0, 1):
        said = (f"pgas (PE {pe}): the ucx engine cannot be set up here (no libucp here); using the CPU proxy "
                "for PEs on other nodes")
        assert proc.stderr.count(said) == 1, proc.stderr


SILENT_PEER = r"""
import os, signal, sys, time
import numpy as np
import pgas, pgas.device as dev
from numba import cuda

@cuda.jit
def fetch_add_kernel(a, out, pe):
    out[0] = dev.atomic_fetch_add(a, np.int64(1), pe)    # (an atomic needs the target's CPU; a get may not)

pgas.init()
me = pgas.my_pe()
a = pgas.zeros(4, np.int64)
pgas.barrier_all()
if me == 2:
    if sys.argv[1] == "stops":
        os.kill(os.getpid(), signal.SIGSTOP)    # alive but silent: its NIC answers nothing
    os._exit(3)                                  # dies
if me == 0:
    time.sleep(0.5)
    fetch_add_kernel[1, 1](a, np.zeros(1, np.int64), 2)
time.sleep(2)          # PE 1 enters its barrier late: PE 0's wait on PE 2 ends first
pgas.barrier_all()
"""


@pytest.mark.parametrize("how", ["stops", "dies"])
def test_a_remote_peer_that_stops_or_dies_ends_the_run(tmp_path, clean_shm, how):
    """Waiting on a silent remote peer fails at PGAS_TIMEOUT naming the operation and the
    PE; a dying one ends the run at once, named."""
    script = tmp_path / "silent.py"
    script.write_text(SILENT_PEER)
    proc = pgasrun(3, "python", str(script), how, options=["--pes-per-node", "1"], env={"PGAS_TIMEOUT": "3"},
                   timeout=60)
    assert proc.returncode != 0
    if how == "stops":
        # (a GPU thread waits for all its queue's requests, and its record says so)
        assert re.search(r"waited PGAS_TIMEOUT=3 s for the NIC to complete the (atomic add|requests) to PE 2",
                         proc.stderr), \
            proc.stderr
        assert "pgasrun: PE 0 raised PgasTimeoutError" in proc.stderr, proc.stderr
    else:
        assert "pgasrun: PE 2 exited with status 3" in proc.stderr, proc.stderr


STOPPED_TARGET = r"""
import os, signal, sys
import numpy as np
import pgas, pgas.device as dev
from numba import cuda
from mpi4py import MPI

@cuda.jit
def put_get_kernel(a, src, out, pe):
    dev.put(a[8:16], src, pe)
    dev.quiet()
    for i in range(8):
        out[i] = dev.g(a[8 + i:9 + i], pe)

pgas.init()
me = pgas.my_pe()
pids = MPI.COMM_WORLD.allgather(os.getpid())
a = pgas.zeros(16, np.int64)
pgas.barrier_all()
if me == 1:
    os.kill(os.getpid(), signal.SIGSTOP)        # its CPU does nothing until PE 0 continues it
else:
    src = np.arange(8, dtype=np.int64) + 100
    pgas.put(a[:8], src, 1)
    pgas.quiet()
    back = np.zeros(8, np.int64)
    pgas.get(back, a[:8], 1)
    out = np.zeros(8, np.int64)
    put_get_kernel[1, 1](a, src + 100, out, 1)
    os.kill(pids[1], signal.SIGCONT)
    print("host", back.tolist(), "device", out.tolist(), flush=True)
pgas.barrier_all()
if me == 1:
    print("heap", a.copy_to_host().tolist(), flush=True)
pgas.finalize()
"""


@pytest.mark.parametrize("transport", ["ibgda", "proxy", "ucx"])
def test_one_sided_puts_and_gets_reach_a_stopped_peer(tmp_path, clean_shm, transport):
    """Between nodes over UCX, puts (of more than 8 bytes) and gets are one-sided: they
    complete while the target PE is stopped (SIGSTOP), its CPU doing nothing, from the
    host and from a device thread (the WQEs of the ibgda and proxy paths alike)."""
    skip_on_cuda("the simulator's heaps are the ones registered for one-sided access")
    script = tmp_path / "stopped.py"
    script.write_text(STOPPED_TARGET)
    proc = pgasrun(2, "python", str(script), options=["--pes-per-node", "1"],
                   env={"PGAS_TIMEOUT": "20", "PGAS_REMOTE_TRANSPORT": transport}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"host {list(range(100, 108))} device {list(range(200, 208))}" in proc.stdout, proc.stdout
    assert f"heap {list(range(100, 108)) + list(range(200, 208))}" in proc.stdout, proc.stdout


@pytest.mark.parametrize("transport", ["ibgda", "proxy", "ucx", "ibgda+mpi", "proxy+mpi"])
def test_load_many_threads_small_puts_and_atomics_across_nodes(clean_shm, transport):
    """The load test at a modest size (the full size: docs/benchmarks.md)."""
    proc = pgasrun(4, "python", "-m", "pgas.bench", "nic_load", "--blocks", "2", "--threads", "16", "--ops", "4",
                   options=["--pes-per-node", "2"], env=transport_env(transport), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("checksums ok, nothing lost or duplicated") == 4, proc.stdout


WINDOWED = r"""
import collections, sys
import numpy as np
import pgas, pgas.device as dev
from numba import cuda
from pgas.core._errors import PgasError
from pgas.nic import _mlx5 as mlx5
from pgas.runtime._arrays import as_ndarray
from pgas.runtime._state import runtime
NATIVE = {native}


class CopyingWindow:
    '''What the cuda backend's window on GPU memory does (copies out and in, atomics applied
    on the device with mlx5.atomic_result), over this PE's heap.'''

    def __init__(self, view):
        self.view, self.calls = view, collections.Counter()

    def read(self, offset, nbytes):
        self.calls["read"] += 1
        return self.view[offset:offset + nbytes].copy()

    def write(self, offset, data):
        self.calls["write"] += 1
        self.view[offset:offset + data.size] = data

    def atomic(self, offset, opcode, operands, size):
        self.calls["atomic"] += 1
        word = self.view[offset:offset + size].view(np.uint32 if size == 4 else np.uint64)
        old = int(word[0])
        with np.errstate(over="ignore"):
            new, changes = mlx5.atomic_result(opcode, size, *operands, old)
        if changes:
            word[0] = new
        return old


@cuda.jit
def device_ops(words, w32, flag, other, out):
    dev.p(flag, 7, other)
    out[0] = dev.g(flag, other)
    out[1] = dev.atomic_fetch_xor(words[2:], 0xF0F0, other)
    out[2] = dev.atomic_fetch_and(w32, 0x0FF0, other)
    out[3] = dev.atomic_compare_swap(words[3:], 0, 41, other)
    dev.quiet()


pgas.init()
me, other = pgas.my_pe(), 1 - pgas.my_pe()
region = runtime("test").transports.heap_region
if NATIVE:      # the native NIC: a native window over libcuda's stand-in (tests/window_standin.py)
    sys.path.insert(0, {tests!r})
    import window_standin
    window = window_standin.StandInWindow(4096)
    runtime("test").transports.native.reach_heap(window)
    count = lambda kind: window_standin.check_staged(window)[kind]
else:           # the NIC's thread: a window of Python calls
    window = CopyingWindow(region.view)
    region.window, region.view = window, None
    count = lambda kind: window.calls[kind]
# the host's own small put/get to PEs on other nodes through the NIC too, as on cuda (the
# simulator's go over the ucx engine where the NIC has nothing in flight, never through a window)
runtime("test").transports.copy_small = runtime("test").transports._copy_through_nic
pgas.barrier_all()          # (every PE's NIC reaches its heap only through copies from now on)
big, src = pgas.zeros(20000, np.int64), pgas.zeros(20000, np.int64)    # 160 KB: sent on its own
words, w32, flag = pgas.zeros(8, np.int64), pgas.full(2, 0x3333, np.int32), pgas.zeros(1, np.int64)
as_ndarray(src, "t", "src")[:] = np.arange(20000) + 1000 * me
as_ndarray(words, "t", "words")[2] = 0xFFFF
pgas.barrier_all()
pgas.put(big, src, other)                        # both ends windowed: read out here, written in there
small = pgas.zeros(3, np.int64)
pgas.get(small, src[5:8], other)
assert as_ndarray(small, "t", "small").tolist() == [i + 1000 * other for i in (5, 6, 7)]
fetched = pgas.zeros(20000, np.int64)            # 160 KB back: its answer by rendezvous
pgas.get(fetched, src, other)
assert (as_ndarray(fetched, "t", "fetched") == np.arange(20000) + 1000 * other).all()
assert pgas.atomic_fetch_add(words[:1], 5, other) == 0
assert pgas.atomic_fetch_add(words[:1], 5, other) == 5
assert pgas.atomic_compare_swap(words[1:2], 0, 9, other) == 0
out = pgas.zeros(4, np.int64)
device_ops[1, 1](words, w32, flag, other, out)
cuda.synchronize()
assert as_ndarray(out, "t", "out").tolist() == [7, 0xFFFF, 0x3333, 0], as_ndarray(out, "t", "out")
pgas.barrier_all()
assert (as_ndarray(big, "t", "big") == np.arange(20000) + 1000 * other).all()
assert as_ndarray(words, "t", "words")[:4].tolist() == [10, 9, 0xFFFF ^ 0xF0F0, 41]
assert as_ndarray(w32, "t", "w32").tolist() == [0x3333 & 0x0FF0, 0x3333]
assert count("read" if not NATIVE else "copy_out") and count("write" if not NATIVE else "copy_in"), window
assert count("atomic" if not NATIVE else "launch") >= 6
if NATIVE:      # each side's copies where they belong: the put's source and the get's destination here,
    address = lambda a: as_ndarray(a, "t", "a").ctypes.data        # the put's destination there
    calls = window_standin.calls()
    assert any(c[0] == "copy_out" and c[2] == address(src) for c in calls), calls
    assert any(c[0] == "copy_in" and c[1] == address(small) for c in calls), calls
    assert any(c[0] == "copy_in" and c[1] == address(big) for c in calls), calls
    assert any(c[0] == "copy_in" and c[1] == address(fetched) for c in calls), calls
# the cuda backend's host copies to other nodes (Transports.copy_span): from host memory by
# its registration, and from this PE's heap, which the NIC reads through the window
transports = runtime("t").transports
landed, mine = pgas.zeros(6000, np.int64), np.arange(6000, dtype=np.int64) * (me + 2)
at = runtime("t").heap.offset_of(as_ndarray(landed, "t", "d"), "t", "d")
lkey, temporary = transports.local_key(mine)
transports.copy_span("t", other, True, at, mine.ctypes.data, lkey, mine.nbytes)
transports.recent.release(temporary)
reads = count("read" if not NATIVE else "copy_out")
transports.copy_span("t", other, True, at, as_ndarray(src, "t", "s").__array_interface__["data"][0], region.lkey, 800)
assert count("read" if not NATIVE else "copy_out") > reads
pgas.barrier_all()
expected = np.arange(6000) * (other + 2)
expected[:100] = np.arange(100) + 1000 * other
assert (as_ndarray(landed, "t", "landed") == expected).all()
back = np.zeros(6000, np.int64)
lkey, temporary = transports.local_key(back)
transports.copy_span("t", other, False, at, back.ctypes.data, lkey, back.nbytes)
transports.recent.release(temporary)
expected[:100] = np.arange(100) + 1000 * me
expected[100:] = np.arange(100, 6000) * (me + 2)
assert (back == expected).all()
if NATIVE:      # a CUDA call that fails: the target refuses (remote operation error), nothing lands
    pgas.barrier_all()
    if me == 1:
        window_standin.fail(True)
    pgas.barrier_all()
    if me == 0:
        try:
            pgas.get(small, src[5:8], other)
        except PgasError as e:
            assert "remote operation error" in str(e), e
        else:
            raise AssertionError("a get from memory the target cannot reach did not fail")
    pgas.barrier_all()
    window_standin.fail(False)
pgas.barrier_all()
pgas.finalize()
print("ok")
"""


@pytest.mark.parametrize("wire", ["ucx", "mpi"])
@pytest.mark.parametrize("transport", ["ibgda", "proxy"])
def test_a_heap_the_nic_reaches_only_through_copies_takes_every_request(tmp_path, clean_shm, transport, wire):
    """GPU memory has no view in the NIC: its region's window copies bytes out and in and
    applies atomics on the device (the cuda backend's ``pgas/cuda/nic/_nic_host.py``). Here a
    window over host memory takes the same calls: large and small puts and gets, p and g,
    and the plain and masked atomics, 4 and 8 bytes, at both ends. The native NIC (wire
    ucx) goes through a native window over a stand-in for libcuda, every copy through its
    pinned staging buffer on its stream and synchronized, and a failing CUDA call refuses
    the request; the NIC's thread (wire mpi) through a window of Python calls."""
    skip_on_cuda("it swaps the heap's window for a stand-in over host memory; on cuda every request goes "
                 "through the GPU heap's window (tests/test_gpu.py, across nodes)")
    program = WINDOWED.replace("{native}", str(wire == "ucx")).replace("{tests!r}", repr(os.path.dirname(__file__)))
    _both_ok_as_two_nodes(tmp_path, program, transport, {"PGAS_NIC_WIRE": wire})


POLLED = r"""
import time
import numpy as np
import pgas
from pgas.nic import _mlx5 as mlx5
from pgas.runtime._arrays import as_ndarray
from pgas.runtime._state import runtime
from pgas.transport import _ibgda_code as code
from pgas.transport._ibgda import DeviceQueue

pgas.init()
me, other = pgas.my_pe(), 1 - pgas.my_pe()
transports = runtime("t").transports
native, engine = transports.native, transports.engines["ibgda"]
flag = pgas.zeros(1, np.int64)
queue = DeviceQueue(transports.nic, other, native=native, endpoint=native.endpoints(0)[other], polled=True)
raddr = transports.nic.remote[other].base + runtime("t").heap.offset_of(as_ndarray(flag, "t", "f"), "t", "f")
pgas.barrier_all()
time.sleep(0.05)            # the progress threads asleep
# posted as a GPU thread posts, without ringing: only the progress thread's look at the rung word sends it
rkey, zero = transports.nic.remote[other].rkey, np.uint64(0)
posted = engine._code.post(queue.address, code.KIND_INLINE, mlx5.OP_RDMA_WRITE, raddr, rkey, 0, 0, 8,
                           np.uint64(40 + me), zero, zero, zero, 0)
assert posted >= 0 and posted & 1, posted
deadline = time.monotonic() + 10
while as_ndarray(flag, "t", "f")[0] != 40 + other and time.monotonic() < deadline:
    time.sleep(0.001)       # (nothing here progresses the worker or looks at doorbells)
assert as_ndarray(flag, "t", "f")[0] == 40 + other, "a polled queue's WQE was not sent"
pgas.barrier_all()
transports.nic.deregister(queue.cells_region)
pgas.finalize()
print("ok")
"""


def test_the_native_nic_reads_the_rung_words_of_queues_whose_posters_cannot_ring(tmp_path, clean_shm):
    """A GPU thread cannot wake the native NIC's progress thread: a queue ``polled`` (the
    cuda backend's GPU queues) is looked at between the thread's naps, so a WQE posted
    and never rung is sent while every thread of the PE sleeps."""
    _both_ok_as_two_nodes(tmp_path, POLLED, "ibgda", {"PGAS_NIC_WIRE": "ucx"})


@functools.cache
def _compiled_atomic_result():
    from numba import njit
    return njit(mlx5.atomic_result)


@pytest.mark.parametrize("opcode,size,operands,old,expected", [
    (mlx5.OP_ATOMIC_FA, 8, (5, 0, 0, 0), 2 ** 64 - 2, (3, True)),
    (mlx5.OP_ATOMIC_CS, 8, (9, 4, 0, 0), 4, (9, True)),
    (mlx5.OP_ATOMIC_CS, 8, (9, 4, 0, 0), 5, (5, False)),
    (mlx5.OP_MASKED_FA, 4, (0x01010101, 0x80808080, 0, 0), 0xFFFF00FF, (0x00000100, True)),   # bytes: no carries
    (mlx5.OP_MASKED_FA, 8, (3, 0, 0, 0), 7, (10, True)),
    (mlx5.OP_MASKED_CS, 4, (0xAB00, 0x0012, 0xFF00, 0x00FF), 0x3412, (0xAB12, True)),
    (mlx5.OP_MASKED_CS, 4, (0xAB00, 0x0013, 0xFF00, 0x00FF), 0x3412, (0x3412, False)),
    (mlx5.OP_MASKED_CS, 8, (0, 0, 0xF0, 0), 0xFF, (0x0F, True)),                            # and
])
def test_the_value_an_mlx5_atomic_leaves(opcode, size, operands, old, expected):
    """``atomic_result``, which the cuda backend's NIC runs on GPU memory: plain Python here,
    and compiled by numba (as the GPU kernel does) with the same answers."""
    with np.errstate(over="ignore"):
        new, changes = mlx5.atomic_result(opcode, size, *operands, old)
    assert (int(new), changes) == expected
    compiled = _compiled_atomic_result()(opcode, size, *(np.uint64(o) for o in operands), np.uint64(old))
    assert (int(compiled[0]), compiled[1]) == expected


def test_a_doorbells_worth_of_wqes_decodes_as_each_one_alone():
    """``read_wqes`` (one compiled call, ``_wqe_code``) against ``read_wqe`` one by one:
    every kind of WQE, one- and two-block, wrapping round the queue."""
    sq = np.zeros((16, mlx5.BB), np.uint8)
    starts, index = [], 10
    for kwargs in ({"opcode": mlx5.OP_RDMA_WRITE, "inline": b"\x01\x02\x03"},
                   {"opcode": mlx5.OP_RDMA_WRITE, "lkey": 5, "laddr": 0x7000, "nbytes": 4096},
                   {"opcode": mlx5.OP_RDMA_READ, "lkey": 5, "laddr": 0x7100, "nbytes": 8},
                   {"opcode": mlx5.OP_ATOMIC_FA, "lkey": 6, "laddr": 0x8000, "operands": (42, 0)},
                   {"opcode": mlx5.OP_ATOMIC_CS, "lkey": 6, "laddr": 0x8000, "operands": (2 ** 64 - 1, 3)},
                   {"opcode": mlx5.OP_MASKED_FA, "opmod": mlx5.OPMOD_EXT_ATOMIC_4, "lkey": 6, "laddr": 0x8008,
                    "operands": (5, 0)},
                   {"opcode": mlx5.OP_MASKED_CS, "opmod": mlx5.OPMOD_EXT_ATOMIC_8, "lkey": 6, "laddr": 0x8010,
                    "operands": (1, 2, 3, 4)},          # two blocks: 15 and 0
                   {"opcode": mlx5.OP_MASKED_CS, "opmod": mlx5.OPMOD_EXT_ATOMIC_4, "lkey": 6, "laddr": 0x8018,
                    "operands": (7, 8, 9, 10)}):
        starts.append(index)
        index += mlx5.write_wqe(sq, index, 0x123, raddr=0x1000 + 8 * index, rkey=9, **kwargs)
    decoded = read_wqes(sq, 10, index - 10)
    assert len(decoded) == len(starts)
    for row, start in zip(decoded, starts):
        wqe = mlx5.read_wqe(sq, start)
        assert (row["opcode"], row["opmod"], row["index"], row["qpn"], row["ds"], row["rkey"], row["raddr"],
                bool(row["signaled"])) == (wqe.opcode, wqe.opmod, wqe.index, wqe.qpn, wqe.ds, wqe.rkey, wqe.raddr,
                                           wqe.signaled)
        assert (row["nbytes"], row["lkey"], row["laddr"], row["size"]) == (wqe.nbytes, wqe.lkey, wqe.laddr,
                                                                          wqe.atomic_size)
        assert row["length"] == (wqe.atomic_size or wqe.nbytes)
        assert tuple(row["operands"][:len(wqe.operands)]) == tuple(wqe.operands)
        assert bool(row["inline"]) == (wqe.inline is not None)
        if wqe.inline is not None:
            assert bytes(row["inline_data"][:wqe.nbytes]) == wqe.inline
