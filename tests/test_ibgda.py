"""The GPU-initiated path's compiled posting: every WQE it writes decoded field by field and
compared byte for byte with the reference encoder (``_mlx5.write_wqe``); the producer
index, doorbell record and doorbell; a full queue refused, never overwritten; many OS
threads posting at once with the interpreter lock released."""
import struct
import threading

import numpy as np
import pytest

from pgas.transport import _ibgda_code as code
from pgas.nic import _mlx5 as mlx5
from pgas.transport import _proxy as proxy
from pgas.transport._ibgda import Ibgda
from pgas.nic._queue_pair import QueuePair
from pgas.nic._regions import MemoryRegion, RemoteRegion

RKEY, LKEY = 0xCAFEF00D, 0xABCD1234


class _Nic:
    """What Ibgda needs of a NIC, without the thread or the wire: queue pairs, a
    registration, PE 1's region and a doorbell that counts rings."""

    def __init__(self):
        self.peers, self.failure, self.rings = [1], None, []
        self.remote = [None, RemoteRegion(0x7000_0000_0000, 1 << 20, RKEY)]

    def create_qp(self, peer, collapsed=False, allocate=np.zeros, served=True):
        return QueuePair(qpn=0x1A2B3, peer=peer, collapsed=collapsed, allocate=allocate)

    def register(self, view, access):
        return MemoryRegion(view.__array_interface__["data"][0], view.size, 0x5EED, 0, access, view=view)

    def deregister(self, region):
        pass

    def ring(self, doorbell: bytes):
        self.rings.append(doorbell)

    def check_alive(self, fn: str):
        pass


@pytest.fixture
def ibgda():
    engine = Ibgda(_Nic(), timeout=5)
    yield engine
    engine.close()


def _be(fmt, data, offset):
    return struct.unpack_from(">" + fmt, data, offset)[0]


def _reference(queue, index, op, raddr, laddr=0, lkey=LKEY, nbytes=0, size=8, value=0, compare=0):
    """The same request encoded by the reference encoder (as the proxy posts it)."""
    sq = np.zeros_like(queue.qp.sq)
    if op in (proxy.PUT, proxy.GET):
        opcode = mlx5.OP_RDMA_WRITE if op == proxy.PUT else mlx5.OP_RDMA_READ
        mlx5.write_wqe(sq, index, queue.qp.qpn, opcode, raddr, RKEY, lkey=lkey, laddr=laddr, nbytes=nbytes)
    elif op == proxy.PUT_INLINE:
        mlx5.write_wqe(sq, index, queue.qp.qpn, mlx5.OP_RDMA_WRITE, raddr, RKEY,
                       inline=value.to_bytes(8, "little")[:size])
    else:
        opcode, opmod, operands = proxy.atomic_wqe(op, size, value, compare)
        cell = queue.cells.__array_interface__["data"][0] + (index % queue.qp.depth) * 8
        mlx5.write_wqe(sq, index, queue.qp.qpn, opcode, raddr, RKEY, opmod=opmod, lkey=queue.lkey, laddr=cell,
                       operands=operands)
    return sq


REQUESTS = [("put", proxy.PUT, dict(laddr=0x7F00_0000_1000, nbytes=4096)),
            ("get", proxy.GET, dict(laddr=0x7F00_0000_2000, nbytes=24)),
            *[(f"p{size}", proxy.PUT_INLINE, dict(size=size, value=0x0102030405060708 & ((1 << 8 * size) - 1)))
              for size in (1, 2, 4, 8)],
            *[(f"amo{op}-{size}", op, dict(size=size, value=0x1234_5678_9ABC_DEF0 & ((1 << 8 * size) - 1),
                                           compare=0x0FED_CBA9 & ((1 << 8 * size) - 1)))
              for op in (proxy.AMO_ADD, proxy.AMO_CAS, proxy.AMO_SWAP, proxy.AMO_AND, proxy.AMO_OR, proxy.AMO_XOR,
                         proxy.AMO_FETCH) for size in (4, 8)]]


@pytest.mark.parametrize("op,args", [r[1:] for r in REQUESTS], ids=[r[0] for r in REQUESTS])
def test_every_wqe_is_byte_exact(ibgda, op, args):
    queue = ibgda.queues[1]
    raddr = 0x7000_0000_0040
    for index in range(3):     # three in a row: the index advances by the blocks each took
        start = queue.counter("reserved")
        lkey = LKEY if op in (proxy.PUT, proxy.GET) else 0
        ticket = ibgda.submit("test", op, 1, raddr, lkey=lkey, waited=False, **args)
        assert ticket[1] == start
        reference = _reference(queue, start, op, raddr, **args)
        blocks = mlx5.read_wqe(reference, start).blocks
        for b in range(blocks):
            row = (start + b) % queue.qp.depth
            assert queue.qp.sq[row].tobytes() == reference[row].tobytes(), (index, b)
        wqe = mlx5.read_wqe(queue.qp.sq, start)
        raw = queue.qp.sq[start % queue.qp.depth].tobytes()
        assert _be("I", raw, 0) == (wqe.opmod << 24) | (start << 8) | wqe.opcode
        assert _be("I", raw, 4) == (0x1A2B3 << 8) | wqe.ds and raw[11] == mlx5.CQ_UPDATE
        assert (wqe.index, wqe.qpn, wqe.rkey, wqe.raddr) == (start, 0x1A2B3, RKEY, raddr)
        assert raw[16:24] == raddr.to_bytes(8, "big") and raw[24:28] == RKEY.to_bytes(4, "big")
        assert queue.counter("reserved") == queue.counter("ready") == start + blocks
        assert int(queue.qp.dbr[0]) == start + blocks                      # the doorbell record, BE32
        assert queue.qp.dbr.tobytes() == (start + blocks).to_bytes(4, "big")
        assert queue.descriptor[code.W["doorbell"]:][:1].tobytes() == raw[:8]   # the last ctrl's first 8 bytes


def test_field_values_against_the_mlx5_layout(ibgda):
    queue = ibgda.queues[1]
    ibgda.submit("test", proxy.PUT, 1, 0x1122334455667788, laddr=0x7F0000001000, lkey=LKEY, nbytes=4096)
    raw = queue.qp.sq[0].tobytes()
    assert _be("I", raw, 0) == 0x08 and _be("I", raw, 4) == (0x1A2B3 << 8) | 3
    assert (_be("I", raw, 32), _be("I", raw, 36), _be("Q", raw, 40)) == (4096, LKEY, 0x7F0000001000)
    ibgda.submit("test", proxy.PUT_INLINE, 1, 0x1000, size=4, value=0x0A0B0C0D)
    raw = queue.qp.sq[1].tobytes()
    assert _be("I", raw, 0) == (1 << 8) | 0x08 and _be("I", raw, 4) & 0xFF == 3
    assert _be("I", raw, 32) == 4 | 0x80000000 and raw[36:40] == bytes([0x0D, 0x0C, 0x0B, 0x0A])
    ibgda.submit("test", proxy.AMO_ADD, 1, 0x2000, size=8, value=42)
    raw = queue.qp.sq[2].tobytes()
    cell = queue.cells.__array_interface__["data"][0] + 2 * 8
    assert _be("I", raw, 0) == (2 << 8) | 0x12 and _be("I", raw, 4) & 0xFF == 4 and _be("Q", raw, 32) == 42
    assert (_be("I", raw, 48), _be("I", raw, 52), _be("Q", raw, 56)) == (8, queue.lkey, cell)
    ibgda.submit("test", proxy.AMO_XOR, 1, 0x2008, size=4, value=0xF0)
    raw = queue.qp.sq[3].tobytes()
    assert _be("I", raw, 0) == (0x08 << 24) | (3 << 8) | 0x15
    assert (_be("I", raw, 32), _be("I", raw, 36)) == (0xF0, 0xFFFFFFFF) and _be("I", raw, 48) == 4
    ibgda.submit("test", proxy.AMO_SWAP, 1, 0x2010, size=8, value=7)      # masked 8-byte CS: 2 blocks
    raw = queue.qp.sq[4].tobytes() + queue.qp.sq[5].tobytes()
    assert _be("I", raw, 0) == (0x09 << 24) | (4 << 8) | 0x14 and _be("I", raw, 4) & 0xFF == 5
    assert [_be("Q", raw, 32 + 8 * k) for k in range(4)] == [7, 0, 2 ** 64 - 1, 0]
    assert (_be("I", raw, 64), _be("Q", raw, 72)) == (8, queue.cells.__array_interface__["data"][0] + 4 * 8)
    assert queue.counter("ready") == 6 and queue.counter("posted") == 5


def test_a_two_block_wqe_wraps_round_the_queue(ibgda):
    queue = ibgda.queues[1]
    depth = queue.qp.depth
    for word in ("reserved", "ready", "floor"):        # as if depth - 1 blocks had come and gone
        queue.descriptor[code.W[word]] = depth - 1
    ibgda.submit("test", proxy.AMO_CAS, 1, 0x3000, size=8, value=1, compare=2)   # 8-byte CS: one block
    ibgda.submit("test", proxy.AMO_SWAP, 1, 0x3008, size=8, value=3)            # masked: two blocks
    wqe = mlx5.read_wqe(queue.qp.sq, depth)
    assert wqe.blocks == 2 and wqe.index == depth & 0xFFFF and wqe.operands == (3, 0, 2 ** 64 - 1, 0)
    assert int(queue.qp.dbr[0]) == (depth + 2) & 0xFFFF


def test_doorbells_of_many_posts_come_as_one(ibgda):
    nic, queue = ibgda.nic, ibgda.queues[1]
    for i in range(5):
        ibgda.submit("test", proxy.PUT_INLINE, 1, 0x1000 + 8 * i, size=8, value=i)
    assert len(nic.rings) == 1                 # the rung word was left set: the NIC has not looked
    assert int.from_bytes(nic.rings[0][4:8], "big") >> 8 == queue.qp.qpn
    queue.qp.rung[0] = 0                       # the NIC clears it before it reads the doorbell record
    ibgda.submit("test", proxy.PUT_INLINE, 1, 0x2000, size=8, value=9)
    assert len(nic.rings) == 2 and nic.rings[1][:4] == queue.qp.sq[5, :4].tobytes()


def test_a_full_queue_refuses_until_completions_free_it(ibgda):
    queue = ibgda.queues[1]
    post = code.compiled().post
    depth = queue.qp.depth
    for i in range(depth):
        assert post(queue.address, code.KIND_INLINE, mlx5.OP_RDMA_WRITE, 0x1000, RKEY, 0, 0, 8, i, 0, 0, 0, 0) >= 0
    before = queue.qp.sq.copy()
    assert post(queue.address, code.KIND_INLINE, mlx5.OP_RDMA_WRITE, 0x1000, RKEY, 0, 0, 8, 99, 0, 0, 0, 0) == -1
    assert (queue.qp.sq == before).all() and queue.counter("reserved") == depth     # nothing overwritten
    mlx5.write_collapsed_cqe(queue.qp.cq, queue.qp.qpn, 9)        # the NIC completed WQEs 0..9
    assert code.compiled().progress(queue.address) == 10
    for i in range(10):
        assert post(queue.address, code.KIND_INLINE, mlx5.OP_RDMA_WRITE, 0x1000, RKEY, 0, 0, 8, i, 0, 0, 0, 0) >= 0
    assert post(queue.address, code.KIND_INLINE, mlx5.OP_RDMA_WRITE, 0x1000, RKEY, 0, 0, 8, 9, 0, 0, 0, 0) == -1


def test_a_result_not_yet_read_holds_its_blocks(ibgda):
    queue = ibgda.queues[1]
    waited = ibgda.submit("test", proxy.AMO_FETCH, 1, 0x1000, size=8)      # its caller will read cell 0
    for i in range(queue.qp.depth - 1):
        ibgda.submit("test", proxy.PUT_INLINE, 1, 0x1000, size=8, value=i, waited=False)
    mlx5.write_collapsed_cqe(queue.qp.cq, queue.qp.qpn, queue.qp.depth - 1)      # all complete
    queue.cells[0] = np.frombuffer((1234).to_bytes(8, "big"), np.uint64)[0]     # the fetched value, BE
    post = code.compiled().post
    assert post(queue.address, code.KIND_INLINE, mlx5.OP_RDMA_WRITE, 0, RKEY, 0, 0, 8, 0, 0, 0, 0, 0) == -1
    assert ibgda.wait("test", waited) == 1234
    assert post(queue.address, code.KIND_INLINE, mlx5.OP_RDMA_WRITE, 0, RKEY, 0, 0, 8, 0, 0, 0, 0, 0) >= 0


def test_an_error_cqe_names_the_operation_pe_and_address(ibgda):
    queue = ibgda.queues[1]
    put = ibgda.submit("test", proxy.PUT_INLINE, 1, 0x7000_0000_0100, size=8, value=1, waited=False)
    fadd = ibgda.submit("test", proxy.AMO_ADD, 1, 0x7000_0010_0000, size=8, value=1)
    mlx5.write_cqe(queue.qp.err_cq, 0, queue.qp.qpn, fadd[1], mlx5.SYNDROME_REMOTE_ACCESS)
    queue.qp.cqes_written = 1
    mlx5.write_collapsed_cqe(queue.qp.cq, queue.qp.qpn, fadd[1])
    with pytest.raises(Exception) as refused:
        ibgda.wait("pgas.device.atomic_fetch_add", fadd)
    assert str(refused.value) == ("pgas.device.atomic_fetch_add: the NIC refused the fetch-add to PE 1 at address "
                                  "0x700000100000 (8 bytes): " + mlx5.SYNDROMES[mlx5.SYNDROME_REMOTE_ACCESS])
    ibgda.quiet("test")             # the put completed; nothing else failed
    assert put[1] == 0


def test_many_threads_post_at_once_nothing_lost(ibgda):
    """OS threads running the compiled post without the interpreter lock, so reservations,
    WQE writes and the ordered publication really interleave on the cores."""
    queue = ibgda.queues[1]
    post = code.concurrent_post()
    threads, each = 8, queue.qp.depth // 8
    results = [[] for _ in range(threads)]

    def poster(t):
        for i in range(each):
            results[t].append(post(queue.address, code.KIND_INLINE, mlx5.OP_RDMA_WRITE, 0x1000 + 8 * t, RKEY,
                                   0, 0, 8, (t << 32) | i, 0, 0, 0, 0))

    workers = [threading.Thread(target=poster, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    starts = sorted(r >> 1 for rs in results for r in rs)
    assert starts == list(range(threads * each))                       # every block taken exactly once
    payloads = set()
    for index in range(threads * each):
        wqe = mlx5.read_wqe(queue.qp.sq, index)
        assert wqe.index == index and wqe.raddr == 0x1000 + 8 * (int.from_bytes(wqe.inline, "little") >> 32)
        payloads.add(int.from_bytes(wqe.inline, "little"))
    assert payloads == {(t << 32) | i for t in range(threads) for i in range(each)}
    assert queue.counter("ready") == threads * each and int(queue.qp.dbr[0]) == (threads * each) & 0xFFFF
    assert sum(r & 1 for rs in results for r in rs) == 1                # one doorbell for them all


def test_an_inline_put_posts_what_submit_posts_and_waits_for_room_as_submit(ibgda):
    """``put_inline`` (a device ``p`` to another node) skips ``submit``'s sorting of the
    request: the WQE it posts is the one ``submit`` posts, and where the queue has no room
    it posts through ``submit``, once."""
    queue, post = ibgda.queues[1], code.compiled().post
    calls = []

    def post_and_ring(row, address, *arguments):    # the native NIC's poster, as _nic_code.post_and_ring
        calls.append(arguments)
        return -1 if len(calls) == 3 else post(address, *arguments)     # the third finds the queue full

    ibgda._post_and_ring = post_and_ring
    ibgda.submit("test", proxy.PUT_INLINE, 1, 0x1000, size=4, value=0x0A0B0C0D, waited=False)
    ibgda.put_inline("test", 1, 0x1000, 4, 0x0A0B0C0D)
    assert calls[0] == calls[1] and queue.qp.sq[0].tobytes()[8:] == queue.qp.sq[1].tobytes()[8:]   # (index aside)
    ibgda.put_inline("test", 1, 0x2008, 8, 2 ** 64 - 1)
    assert len(calls) == 4 and calls[2] == calls[3] and queue.counter("posted") == 3
    wqe = mlx5.read_wqe(queue.qp.sq, 2)
    assert (wqe.raddr, wqe.rkey, _be("I", queue.qp.sq[2].tobytes(), 32)) == (0x2008, RKEY, 8 | 0x80000000)
    assert queue.qp.sq[2].tobytes()[36:44] == bytes([0xFF] * 8)
