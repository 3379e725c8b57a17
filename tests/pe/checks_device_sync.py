"""Device ordering and synchronization: wait_until/test, fence, barriers (thread and block)."""
import re

import numpy as np
import pytest
from numba import cuda

import pgas
import pgas.device as dev
from _util import CMPS, ring_neighbours, simulator_only


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


# Waits and tests on sets of ivars (OpenSHMEM 1.5) -----------------------------------------
# Each PE runs one block of two threads: thread 0 waits on its own ivars, phase by phase;
# thread 1 writes the ivars of the next PE in the ring (itself on one PE), each phase once
# that PE's waiter has announced it (``go``), so that the writes land while it waits.

IVARS = 6
MASKS = np.array([[0, 1, 0, 1, 0, 1],      # 0: odd ivars left out
                  [0, 0, 0, 1, 0, 0],      # 1: ivar 3 left out
                  [1, 1, 0, 1, 0, 1],      # 2: ivars 2 and 4 only
                  [1, 0, 0, 0, 0, 0],      # 3: ivar 0 left out
                  [1, 1, 1, 1, 1, 1]],     # 4: all left out
                 np.int32)
VALUES = np.array([[1, 2, 1, 5, 1, 7], [1, 0, 3, 0, 1, 0], [0, 0, 8, 0, 9, 0],
                   [1, 2, 4, 5, 9, 7], [1, 2, 4, 5, 9, 6], [1, 1, 4, 4, 9, 9]], np.int64)
# the ivars after the six phases' writes: [1, 2, 4, 5, 9, 7]
EXPECTED_SETS = [
    1,              # wait_until_all (odd left out) == 1, then test_all of the same
    3,              # wait_until_any == 5
    1, 5,           # wait_until_some (ivar 3 left out) >= 5: count, index
    1,              # wait_until_all_vector == VALUES[0], then test_all_vector of the same
    2,              # wait_until_any_vector (odd left out) > VALUES[1]
    1, 4,           # wait_until_some_vector (2 and 4 only) == VALUES[2]: count, index
    1, 0, 1, 1,     # test_all >= 1; >= 2; >= 2 with ivar 0 left out; all left out
    3, -1, -1,      # test_any == 5; == 100; == 5 with ivar 3 left out
    3, 3, 4, 5, 0,  # test_some >= 5: count, indices; == 100: count
    1, 5, 4, 0, 2, 4, 5,    # test_all_vector, test_any_vector, test_some_vector: count, indices
    -1, 0, 1,       # all left out: wait_until_any, wait_until_some, wait_until_all returns
]


@cuda.jit(device=True)
def write_phase(ivars, phase, pe):
    if phase == 0:
        dev.p(ivars[0:], 1, pe)
        dev.atomic_set(ivars[2:], 1, pe)
        dev.p(ivars[4:], 1, pe)
    elif phase == 1:
        dev.p(ivars[3:], 5, pe)
    elif phase == 2:
        dev.atomic_add(ivars[5:], 7, pe)
    elif phase == 3:
        dev.p(ivars[1:], 2, pe)
    elif phase == 4:
        dev.p(ivars[2:], 4, pe)
    else:
        dev.atomic_fetch_add(ivars[4:], 8, pe)
    dev.quiet()


@cuda.jit
def wait_sets_kernel(ivars, go, masks, values, idx, out):
    me, n = dev.my_pe(), dev.n_pes()
    if cuda.threadIdx.x == 1:
        for phase in range(6):
            dev.wait_until(go, dev.CMP_GE, phase + 1)
            write_phase(ivars, phase, (me + 1) % n)
        return
    left = (me + n - 1) % n
    dev.p(go, 1, left)
    dev.wait_until_all(ivars, masks[0], dev.CMP_EQ, 1)
    out[0] = dev.test_all(ivars, masks[0], dev.CMP_EQ, 1)
    dev.p(go, 2, left)
    out[1] = dev.wait_until_any(ivars, None, dev.CMP_EQ, 5)
    dev.p(go, 3, left)
    out[2] = dev.wait_until_some(ivars, idx, masks[1], dev.CMP_GE, 5)
    out[3] = idx[0]
    dev.p(go, 4, left)
    dev.wait_until_all_vector(ivars, masks[0][:0], dev.CMP_EQ, values[0])
    out[4] = dev.test_all_vector(ivars, None, dev.CMP_EQ, values[0])
    dev.p(go, 5, left)
    out[5] = dev.wait_until_any_vector(ivars, masks[0], dev.CMP_GT, values[1])
    dev.p(go, 6, left)
    out[6] = dev.wait_until_some_vector(ivars, idx, masks[2], dev.CMP_EQ, values[2])
    out[7] = idx[0]
    out[8] = dev.test_all(ivars, None, dev.CMP_GE, 1)
    out[9] = dev.test_all(ivars, None, dev.CMP_GE, 2)
    out[10] = dev.test_all(ivars, masks[3], dev.CMP_GE, 2)
    out[11] = dev.test_all(ivars, masks[4], dev.CMP_EQ, 100)
    out[12] = dev.test_any(ivars, None, dev.CMP_EQ, 5)
    out[13] = dev.test_any(ivars, None, dev.CMP_EQ, 100)
    out[14] = dev.test_any(ivars, masks[1], dev.CMP_EQ, 5)
    out[15] = dev.test_some(ivars, idx, None, dev.CMP_GE, 5)
    for i in range(3):
        out[16 + i] = idx[i]
    out[19] = dev.test_some(ivars, idx, None, dev.CMP_EQ, 100)
    out[20] = dev.test_all_vector(ivars, None, dev.CMP_EQ, values[3])
    out[21] = dev.test_any_vector(ivars, None, dev.CMP_GT, values[4])
    out[22] = dev.test_some_vector(ivars, idx, None, dev.CMP_LE, values[5])
    for i in range(4):
        out[23 + i] = idx[i]
    out[27] = dev.wait_until_any(ivars, masks[4], dev.CMP_EQ, 100)
    out[28] = dev.wait_until_some(ivars, idx, masks[4], dev.CMP_EQ, 100)
    dev.wait_until_all(ivars, masks[4], dev.CMP_EQ, 100)
    out[29] = 1


@cuda.jit
def test_any_kernel(ivars, value, out):
    out[0] = dev.test_any(ivars, None, dev.CMP_EQ, value)


def check_waits_and_tests_on_sets_of_ivars_set_by_another_pe():
    ivars = pgas.zeros(IVARS, np.int64)
    go = pgas.zeros(1, np.int64)
    idx = np.full(IVARS, -1, np.int64)
    out = np.full(len(EXPECTED_SETS), -9, np.int64)
    pgas.barrier_all()
    wait_sets_kernel[1, 2](ivars, go, MASKS, VALUES, idx, out)
    assert out.tolist() == EXPECTED_SETS
    assert ivars.copy_to_host().tolist() == [1, 2, 4, 5, 9, 7]
    pgas.barrier_all()
    # values are converted to the ivars' dtype, as on the GPU: -1 is a uint64's largest value
    words = pgas.full(3, 2**64 - 1, np.uint64)
    found = np.zeros(1, np.int64)
    test_any_kernel[1, 1](words[1:], -1, found)
    assert found[0] == 0
    for a in (words, go, ivars):
        pgas.free(a)


@cuda.jit
def misuse_kernel(case, ivars, status, indices, values, out):
    if case == 0:
        out[0] = dev.test_all(ivars, status, dev.CMP_EQ, 0)
    elif case == 1:
        out[0] = dev.test_some(ivars, indices, None, dev.CMP_EQ, 0)
    elif case == 2:
        out[0] = dev.test_any_vector(ivars, None, dev.CMP_EQ, values)
    elif case == 3:
        out[0] = dev.wait_until_any(ivars, None, 99, 0)
    else:
        dev.wait_until_all(ivars, None, dev.CMP_EQ, 3)


@simulator_only("a failed device check (or a wait past PGAS_TIMEOUT) traps on a GPU, ending the CUDA context")
def check_set_waits_refuse_bad_arguments_and_time_out_naming_the_ivar():
    from pgas.runtime._state import runtime
    ivars = pgas.zeros(IVARS, np.int64)
    bytes_ = pgas.zeros(IVARS, np.int8)
    ok_status, ok_indices, ok_values, out = (np.zeros(IVARS, np.int32), np.zeros(IVARS, np.int64),
                                             np.zeros(IVARS, np.int64), np.zeros(1, np.int64))
    cases = [
        ((0, ivars, ok_status[:3], ok_indices, ok_values),
         "pgas.device.test_all: status must be empty or have one entry per ivar; status has 3 elements, 6 needed"),
        ((0, ivars, np.zeros(IVARS, np.float32), ok_indices, ok_values),
         "pgas.device.test_all: status must have one of the dtypes bool, int8, uint8, int16, uint16, int32, "
         "uint32, int64, uint64, got float32"),
        ((1, ivars, ok_status, ok_indices[:2], ok_values),
         "pgas.device.test_some: indices must have room for every ivar; indices has 2 elements, 6 needed"),
        ((1, ivars, ok_status, np.zeros(IVARS), ok_values),
         "pgas.device.test_some: indices must have one of the dtypes int32, uint32, int64, uint64, got float64"),
        ((2, ivars, ok_status, ok_indices, ok_values[:5]),
         "pgas.device.test_any_vector: values must have one value per ivar; values has 5 elements, 6 needed"),
        ((2, bytes_, ok_status, ok_indices, ok_values),
         "pgas.device.test_any_vector: ivars must have one of the dtypes int32, uint32, int64, uint64, float32, "
         "float64, got int8"),
        ((2, np.zeros(IVARS, np.int64), ok_status, ok_indices, ok_values),
         "pgas.device.test_any_vector: ivars is not symmetric memory"),
        ((3, ivars, ok_status, ok_indices, ok_values), "pgas.device.wait_until_any: cmp must be one of"),
    ]
    for args, message in cases:
        with pytest.raises(pgas.PgasError, match=re.escape(message)):
            misuse_kernel[1, 1](*args, out)
    rt = runtime("test")
    saved, rt.timeout = rt.timeout, 0.3
    ivars[0:1].copy_to_device(np.array([3]))
    try:
        with pytest.raises(pgas.PgasTimeoutError, match=re.escape(
                "pgas.device.wait_until_all: waited PGAS_TIMEOUT=0.3 s for ivars[1] == 3 (last value seen: 0), "
                "the first included one not satisfied")):
            misuse_kernel[1, 1](4, ivars, ok_status, ok_indices, ok_values, out)
    finally:
        rt.timeout = saved
    pgas.free(bytes_)
    pgas.free(ivars)
