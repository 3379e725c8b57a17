"""Device ordering and synchronization: wait_until/test, fence, barriers (thread and block)."""
import numpy as np
from numba import cuda

import pgas
import pgas.device as dev
from _util import CMPS, ring_neighbours


@cuda.jit
def test_kernel(ivar, cmp, target, out):
    out[0] = dev.test(ivar, cmp, target)


@cuda.jit
def wait_kernel(ivar, cmp, target):
    dev.wait_until(ivar, cmp, target)


@cuda.jit
def handoff_kernel(outgoing, inbox, flag, received, pe):
    # Send my data to the right, then wait for the left's data within the same kernel:
    # proves peers' writes are seen while a kernel runs (no copy-in/copy-out).
    dev.put(inbox, outgoing, pe)
    dev.fence()
    dev.p(flag, 1, pe)
    dev.wait_until(flag, dev.CMP_EQ, 1)
    for i in range(inbox.size):
        received[i] = inbox[i]


@cuda.jit
def barrier_kernel(slots, seen):
    me = dev.my_pe()
    for pe in range(dev.n_pes()):
        dev.p(slots[me:], me + 1, pe)
    dev.barrier_all()
    for pe in range(dev.n_pes()):
        seen[pe] = slots[pe]
    dev.sync_all()


@cuda.jit
def barrier_block_kernel(slots, seen, rounds):
    me = dev.my_pe()
    t = cuda.threadIdx.x
    for r in range(rounds):
        if t < dev.n_pes():
            dev.p(slots[me:], r + 1, t)
        dev.barrier_all_block()
        if t < dev.n_pes():
            seen[r, t] = slots[t]
        dev.sync_all_block()


def check_test_and_wait_until_every_comparison():
    ivar = pgas.zeros(1, np.int64)
    out = np.zeros(1, np.bool_)
    for cmp, target, true_value, false_value in CMPS:
        ivar[0] = true_value
        test_kernel[1, 1](ivar, cmp, target, out)
        assert out[0], (cmp, true_value)
        wait_kernel[1, 1](ivar, cmp, target)
        ivar[0] = false_value
        test_kernel[1, 1](ivar, cmp, target, out)
        assert not out[0], (cmp, false_value)
    pgas.free(ivar)


def check_wait_until_sees_data_written_during_the_kernel():
    me, n, right, left = ring_neighbours()
    outgoing = pgas.empty(100, np.float64)
    outgoing.copy_to_device(np.arange(100) + me * 1000.0)
    inbox = pgas.zeros(100, np.float64)
    flag = pgas.zeros(1, np.int32)
    received = np.zeros(100)
    handoff_kernel[1, 1](outgoing, inbox, flag, received, right)
    assert np.array_equal(received, np.arange(100) + left * 1000.0)
    pgas.barrier_all()
    for a in (flag, inbox, outgoing):
        pgas.free(a)


def check_device_barrier_all_and_sync_all():
    n = pgas.n_pes()
    slots = pgas.zeros(n, np.int64)
    seen = np.zeros(n, np.int64)
    for _ in range(3):  # epochs carry over between kernels
        barrier_kernel[1, 1](slots, seen)
        assert seen.tolist() == [pe + 1 for pe in range(n)]
    pgas.barrier_all()
    pgas.free(slots)


def check_block_barrier_forms():
    n, rounds = pgas.n_pes(), 4
    slots = pgas.zeros(n, np.int64)
    seen = np.zeros((rounds, n), np.int64)
    barrier_block_kernel[1, 64](slots, seen, rounds)
    assert np.array_equal(seen, np.repeat(np.arange(1, rounds + 1)[:, None], n, axis=1))
    pgas.barrier_all()
    pgas.free(slots)


@cuda.jit
def every_thread_collects(dest, src, rounds):
    """NVIDIA's nvshmem4py fcollect test calls the thread-scope form from every thread."""
    for _ in range(rounds):
        dev.fcollect(dev.TEAM_WORLD, dest, src)
        dev.barrier_all()


@cuda.jit
def blocks_barrier(count):
    """Every block of the kernel calls the thread-scope barrier: callers at once on one PE."""
    if cuda.threadIdx.x == 0:
        dev.barrier_all()
        cuda.atomic.add(count, 0, 1)


def check_thread_scope_calls_from_many_threads_of_one_pe_complete():
    """The barrier epoch is taken atomically and arrivals are counted, so several callers on
    one PE at once each sync once: nothing is lost, nothing hangs."""
    me, n = pgas.my_pe(), pgas.n_pes()
    src = pgas.full(3, me + 1, np.int64)
    dest = pgas.zeros(3 * n, np.int64)
    pgas.barrier_all()
    every_thread_collects[1, 8](dest, src, 2)
    assert dest.copy_to_host().tolist() == [pe + 1 for pe in range(n) for _ in range(3)]
    count = np.zeros(1, np.int64)
    blocks_barrier[4, 2](count)
    assert count[0] == 4
    pgas.barrier_all()
    pgas.free(dest)
    pgas.free(src)
