"""Signals: put_signal in every form, signal_op, signal_fetch, signal_wait_until, host signals."""
import numpy as np
import pytest
from numba import cuda

import pgas
import pgas.device as dev
from _util import CMPS, pattern, ring_neighbours


@cuda.jit
def put_signal_kernel(dest, src, signal, value, sig_op, pe, form, inbox_signal, expect, received):
    # form: 0 thread, 1 nbi, 2 warp, 3 block, 4 nbi warp, 5 nbi block
    if form == 0:
        if cuda.threadIdx.x == 0:
            dev.put_signal(dest, src, signal, value, sig_op, pe)
    elif form == 1:
        if cuda.threadIdx.x == 0:
            dev.put_signal_nbi(dest, src, signal, value, sig_op, pe)
            dev.quiet()
    elif form == 2:
        if cuda.threadIdx.x < 32:
            dev.put_signal_warp(dest, src, signal, value, sig_op, pe)
    elif form == 3:
        dev.put_signal_block(dest, src, signal, value, sig_op, pe)
    elif form == 4:
        if cuda.threadIdx.x < 32:
            dev.put_signal_nbi_warp(dest, src, signal, value, sig_op, pe)
    else:
        dev.put_signal_nbi_block(dest, src, signal, value, sig_op, pe)
    if cuda.threadIdx.x == 0:
        seen = dev.signal_wait_until(inbox_signal, dev.CMP_GE, expect)
        # the data of a put_signal is visible once its signal is seen
        for i in range(received.size):
            received[i] = dest[i]
        received[0] = received[0] if seen >= expect else -1


@cuda.jit
def signal_op_kernel(signal, value, sig_op, pe):
    dev.signal_op(signal, value, sig_op, pe)


@cuda.jit
def fetch_kernel(signal, out):
    out[0] = dev.signal_fetch(signal)


@cuda.jit
def wait_kernel(signal, cmp, value, out):
    out[0] = dev.signal_wait_until(signal, cmp, value)


@cuda.jit
def gather_with_add_kernel(slots, mine, signal, me, expect, out):
    # every PE puts its value into its own slot on PE 0 and adds 1 to PE 0's signal
    dev.put_signal(slots[me:], mine, signal, 1, dev.SIGNAL_ADD, 0)
    if me == 0:
        out[0] = dev.signal_wait_until(signal, dev.CMP_EQ, expect)
        for i in range(slots.size):
            out[1 + i] = slots[i]


@cuda.jit
def bad_sig_op_kernel(dest, src, signal):
    dev.put_signal(dest, src, signal, 1, 7, 0)


@cuda.jit
def bad_signal_kernel(signal):
    dev.signal_wait_until(signal, dev.CMP_EQ, 0)


def check_put_signal_every_form_delivers_data_before_signal():
    me, n, right, left = ring_neighbours()
    size = 1000
    for form in range(6):
        dest = pgas.zeros(size, np.float64)
        src = pgas.empty(size, np.float64)
        src.copy_to_device(pattern(me, size, np.float64) + form)
        signal = pgas.zeros(1, np.uint64)
        received = np.zeros(size)
        for round_ in (1, 2):   # SET to the round number, then again: the wait sees each
            put_signal_kernel[1, 64](dest, src, signal, round_, pgas.SIGNAL_SET, right, form,
                                     signal, round_, received)
            assert np.array_equal(received, pattern(left, size, np.float64) + form), (form, round_)
            pgas.barrier_all()
        for a in (signal, src, dest):
            pgas.free(a)


def check_signal_add_counts_every_sender():
    me, n = pgas.my_pe(), pgas.n_pes()
    slots = pgas.zeros(n, np.int64)
    mine = pgas.full(1, 100 + me, np.int64)
    signal = pgas.zeros(1, np.uint64)
    out = np.zeros(n + 1, np.int64)
    gather_with_add_kernel[1, 1](slots, mine, signal, me, n, out)
    if me == 0:
        assert out[0] == n and out[1:].tolist() == [100 + pe for pe in range(n)]
    pgas.barrier_all()
    for a in (signal, mine, slots):
        pgas.free(a)


def check_signal_op_and_fetch_set_and_add():
    me, n, right, left = ring_neighbours()
    for dtype in (np.uint64, np.int64):
        signal = pgas.zeros(1, dtype)
        out = np.zeros(1, dtype)
        signal_op_kernel[1, 1](signal, 40, pgas.SIGNAL_SET, right)
        pgas.barrier_all()
        signal_op_kernel[1, 1](signal, 2, pgas.SIGNAL_ADD, right)
        pgas.barrier_all()
        fetch_kernel[1, 1](signal, out)
        assert out[0] == 42, dtype
        pgas.free(signal)


def check_signal_wait_until_every_comparison_returns_the_value_seen():
    signal = pgas.zeros(1, np.uint64)
    out = np.zeros(1, np.uint64)
    for cmp, target, true_value, _ in CMPS:
        signal[0] = true_value
        wait_kernel[1, 1](signal, cmp, target, out)
        assert out[0] == true_value, cmp
    pgas.free(signal)


def check_host_put_signal_and_signal_wait_until_with_device_peers():
    me, n, right, left = ring_neighbours()
    dest = pgas.zeros(7, np.int32)
    signal = pgas.zeros(1, np.uint64)
    pgas.put_signal(dest, pattern(me, 7, np.int32), signal, 3, pgas.SIGNAL_ADD, right)
    assert pgas.signal_wait_until(signal, pgas.CMP_EQ, 3) == 3
    assert np.array_equal(dest.copy_to_host(), pattern(left, 7, np.int32))
    pgas.barrier_all()
    # device signal, host wait
    signal_op_kernel[1, 1](signal, 9, pgas.SIGNAL_SET, right)
    assert pgas.signal_wait_until(signal, pgas.CMP_GT, 8) == 9
    pgas.barrier_all()
    pgas.free(signal)
    pgas.free(dest)


def check_signal_errors_name_the_argument():
    a = pgas.zeros(2, np.int32)
    signal = pgas.zeros(1, np.uint64)
    with pytest.raises(pgas.PgasError, match=r"pgas.device.put_signal: sig_op must be pgas.SIGNAL_SET "
                                             r"or pgas.SIGNAL_ADD, got 7"):
        bad_sig_op_kernel[1, 1](a, a, signal)
    with pytest.raises(pgas.PgasError, match=r"pgas.device.signal_wait_until: signal must be a non-empty "
                                             r"uint64 \(or int64\) symmetric array, got int32"):
        bad_signal_kernel[1, 1](a)
    with pytest.raises(pgas.PgasError, match=r"pgas.put_signal: signal must be a non-empty uint64"):
        pgas.put_signal(a, a, a, 1, pgas.SIGNAL_SET, 0)
    with pytest.raises(pgas.PgasError, match=r"pgas.signal_wait_until: cmp must be one of"):
        pgas.signal_wait_until(signal, 42, 0)
    pgas.free(signal)
    pgas.free(a)


def check_host_signal_op_signal_fetch_and_put_signal_nbi():
    """Host signal_op (SET, then ADD with nvshmem4py's keywords), host and device
    signal_fetch, device signal_op seen by the host, put_signal_nbi complete at quiet."""
    me, n, right, left = ring_neighbours()
    for dtype in (np.uint64, np.int64):
        signal = pgas.zeros(1, dtype)
        pgas.signal_op(signal, 40, pgas.SIGNAL_SET, right)
        pgas.barrier_all()
        pgas.signal_op(signal_var=signal, signal_val=2, signal_op=pgas.SIGNAL_ADD, remote_pe=right)
        pgas.barrier_all()
        seen = pgas.signal_fetch(signal)
        assert seen == 42 and type(seen) is np.dtype(dtype).type, (dtype, seen)
        pgas.barrier_all()
        pgas.free(signal)
    # a device signal_op, fetched by the host
    signal = pgas.zeros(1, np.uint64)
    signal_op_kernel[1, 1](signal, 7, pgas.SIGNAL_SET, right)
    assert pgas.signal_wait_until(signal, pgas.CMP_EQ, 7) == 7
    assert pgas.signal_fetch(signal_var=signal) == 7
    pgas.barrier_all()
    # put_signal_nbi from a symmetric source: data and signal at quiet, data first
    src = pgas.empty(5000, np.float32)
    src.copy_to_device(pattern(me, 5000, np.float32))
    dest = pgas.zeros(5000, np.float32)
    pgas.barrier_all()
    pgas.put_signal_nbi(dest, src, signal, 3, pgas.SIGNAL_ADD, right)
    pgas.quiet()
    assert pgas.signal_wait_until(signal, pgas.CMP_EQ, 10) == 10
    assert np.array_equal(dest.copy_to_host(), pattern(left, 5000, np.float32))
    pgas.barrier_all()
    pgas.put_signal_nbi(dst=dest, src=pattern(me + 2, 5000, np.float32), signal_var=signal, signal_val=1,
                        signal_op=pgas.SIGNAL_SET, remote_pe=right)
    pgas.quiet()
    assert pgas.signal_wait_until(signal, pgas.CMP_EQ, 1) == 1
    assert np.array_equal(dest.copy_to_host(), pattern(left + 2, 5000, np.float32))
    pgas.barrier_all()
    for a in (dest, src, signal):
        pgas.free(a)


def check_host_signal_errors_name_the_argument():
    n = pgas.n_pes()
    a = pgas.zeros(2, np.int32)
    signal = pgas.zeros(1, np.uint64)
    with pytest.raises(pgas.PgasError, match=r"pgas.signal_op: sig_op must be pgas.SIGNAL_SET or "
                                             r"pgas.SIGNAL_ADD, got 9"):
        pgas.signal_op(signal, 1, 9, 0)
    with pytest.raises(pgas.PgasError, match=rf"pgas.signal_op: pe must be within \[0, {n}\), got {n}"):
        pgas.signal_op(signal, 1, pgas.SIGNAL_SET, remote_pe=n)
    with pytest.raises(pgas.PgasError, match=r"pgas.signal_op: value must be an integer \(signal is uint64\), "
                                             r"got 1.5"):
        pgas.signal_op(signal, 1.5, pgas.SIGNAL_SET, 0)
    with pytest.raises(pgas.PgasError, match=r"pgas.signal_fetch: signal must be a non-empty uint64 \(or int64\) "
                                             r"symmetric array, got int32"):
        pgas.signal_fetch(a)
    with pytest.raises(pgas.PgasError, match=r"pgas.put_signal_nbi: sig_op was given twice, as sig_op and as "
                                             r"signal_op"):
        pgas.put_signal_nbi(a, a, signal, 1, pgas.SIGNAL_SET, 0, signal_op=pgas.SIGNAL_SET)
    pgas.free(signal)
    pgas.free(a)


@cuda.jit
def signal_add_set_kernel(signal, value, pe, add):
    if add:
        dev.signal_add(signal, value, pe)
    else:
        dev.signal_set(signal, value, pe)


def check_signal_add_and_signal_set_host_and_device():
    """OpenSHMEM 1.6 signal_add/signal_set: every PE adds into every PE's signal (device
    and host alike), the exact total arrives; then set by the left neighbour."""
    me, n, right, left = ring_neighbours()
    for dtype in (np.uint64, np.int64):
        signal = pgas.zeros(1, dtype)
        pgas.barrier_all()
        for pe in range(n):
            signal_add_set_kernel[1, 1](signal, 1 + me, pe, True)
            pgas.signal_add(signal, 100 * (1 + me), pe)
        total = 101 * n * (n + 1) // 2
        assert pgas.signal_wait_until(signal, pgas.CMP_EQ, total) == total, dtype
        pgas.barrier_all()
        signal_add_set_kernel[1, 1](signal, 1000 + me, right, False)
        assert pgas.signal_wait_until(signal, pgas.CMP_EQ, 1000 + left) == 1000 + left
        pgas.barrier_all()
        pgas.signal_set(signal_var=signal, signal_val=5 + me, remote_pe=right)
        assert pgas.signal_wait_until(signal, pgas.CMP_EQ, 5 + left) == 5 + left
        pgas.barrier_all()
        pgas.signal_add(signal, -1, right)       # wraps as an add of the dtype
        assert pgas.signal_wait_until(signal, pgas.CMP_EQ, 4 + left) == 4 + left
        pgas.barrier_all()
        pgas.free(signal)
    a = pgas.zeros(1, np.int32)
    signal = pgas.zeros(1, np.uint64)
    with pytest.raises(pgas.PgasError, match=r"pgas.signal_add: signal must be a non-empty uint64"):
        pgas.signal_add(a, 1, 0)
    with pytest.raises(pgas.PgasError, match=rf"pgas.signal_set: pe must be within \[0, {n}\), got {n}"):
        pgas.signal_set(signal, 1, n)
    with pytest.raises(pgas.PgasError, match=r"pgas.signal_set: value must be an integer \(signal is uint64\)"):
        pgas.signal_set(signal, 2.5, 0)
    if pgas.backend() == "simulator":       # device checks trap on a GPU
        with pytest.raises(pgas.PgasError, match=r"pgas.device.signal_add: signal must be a non-empty uint64"):
            signal_add_set_kernel[1, 1](a, 1, 0, True)
        with pytest.raises(pgas.PgasError, match=rf"pgas.device.signal_set: pe must be within \[0, {n}\), got {n}"):
            signal_add_set_kernel[1, 1](signal, 1, n, False)
    assert signal.copy_to_host().tolist() == [0]
    pgas.barrier_all()
    pgas.free(signal)
    pgas.free(a)
