"""Device and host atomics: exact totals under contention across PEs (host and device at
once), a spin lock, scripted sequences, float add, errors."""
import numpy as np
import pytest
from numba import cuda

import pgas
import pgas.device as dev
from _util import reaches_other_nodes, ring_neighbours, simulator_only, world

INT_DTYPES = [np.int32, np.int64, np.uint32, np.uint64]
FLOAT_DTYPES = [np.float32, np.float64]


@cuda.jit
def fetch_add_kernel(counter, fetched, iterations, target):
    t = cuda.threadIdx.x
    for i in range(iterations):
        fetched[t * iterations + i] = dev.atomic_fetch_add(counter, 1, target)


@cuda.jit
def spin_lock_kernel(lock, shared, iterations):
    for _ in range(iterations):
        while dev.atomic_compare_swap(lock, 0, 1, 0) != 0:
            pass
        value = dev.g(shared, 0)          # a plain read-modify-write, safe only under the lock
        dev.p(shared, value + 1, 0)
        dev.quiet()
        dev.atomic_set(lock, 0, 0)


@cuda.jit
def integer_script_kernel(dest, pe, out):
    dev.atomic_set(dest, 10, pe)
    out[0] = dev.atomic_fetch(dest, pe)            # 10
    out[1] = dev.atomic_fetch_add(dest, 5, pe)     # 10 -> 15
    out[2] = dev.atomic_fetch_inc(dest, pe)        # 15 -> 16
    dev.atomic_inc(dest, pe)                       # 17
    dev.atomic_add(dest, 3, pe)                    # 20
    out[3] = dev.atomic_swap(dest, 100, pe)        # 20 -> 100
    out[4] = dev.atomic_compare_swap(dest, 100, 7, pe)   # hit: 100 -> 7
    out[5] = dev.atomic_compare_swap(dest, 100, 8, pe)   # miss: stays 7
    out[6] = dev.atomic_fetch_and(dest, 3, pe)     # 7 -> 3
    out[7] = dev.atomic_fetch_or(dest, 12, pe)     # 3 -> 15
    out[8] = dev.atomic_fetch_xor(dest, 5, pe)     # 15 -> 10
    dev.atomic_and(dest, 14, pe)                   # 10
    dev.atomic_or(dest, 1, pe)                     # 11
    dev.atomic_xor(dest, 2, pe)                    # 9
    out[9] = dev.atomic_fetch(dest, pe)            # 9


@cuda.jit
def float_script_kernel(dest, pe, out):
    dev.atomic_set(dest, 1.5, pe)
    out[0] = dev.atomic_fetch(dest, pe)                  # 1.5
    out[1] = dev.atomic_swap(dest, -2.25, pe)            # 1.5 -> -2.25
    out[2] = dev.atomic_compare_swap(dest, -2.25, 8.0, pe)   # hit
    out[3] = dev.atomic_compare_swap(dest, -2.25, 9.0, pe)   # miss
    out[4] = dev.atomic_fetch(dest, pe)                  # 8.0
    out[5] = dev.atomic_fetch_add(dest, 0.25, pe)        # 8.0 -> 8.25
    dev.atomic_add(dest, -2.5, pe)                       # 5.75
    out[6] = dev.atomic_fetch(dest, pe)                  # 5.75


@cuda.jit
def unsigned_wrap_kernel(dest, pe, out):
    dev.atomic_set(dest, 0, pe)
    dev.atomic_add(dest, -1, pe)
    out[0] = dev.atomic_fetch(dest, pe)


@cuda.jit
def float_and_kernel(dest):
    dev.atomic_and(dest, 1, 0)


@cuda.jit
def mixed_add_kernel(counter, fcounter, fetched, iterations, target):
    t = cuda.threadIdx.x
    for i in range(iterations):
        fetched[t * iterations + i] = dev.atomic_fetch_add(counter, 1, target)
        dev.atomic_add(fcounter, 0.5, target)


def check_fetch_add_under_contention_is_exact():
    """64 threads of every PE fetch_add one word: every old value seen exactly once (100
    each on one node; 30 across nodes, where each is a round trip through the NIC)."""
    n, threads = pgas.n_pes(), 64
    iterations = 30 if reaches_other_nodes() else 100
    counter = pgas.zeros(1, np.int64)
    fetched = np.zeros(threads * iterations, np.int64)
    pgas.barrier_all()
    fetch_add_kernel[1, threads](counter, fetched, iterations, 0)
    pgas.barrier_all()
    total = n * threads * iterations
    if pgas.my_pe() == 0:
        assert counter.copy_to_host()[0] == total
    # every fetch_add of every PE saw a different old value: 0 .. total-1 exactly once
    seen = np.sort(np.concatenate(world().allgather(fetched)))
    assert np.array_equal(seen, np.arange(total))
    pgas.free(counter)


def check_fetch_add_contention_every_integer_dtype():
    n, threads, iterations = pgas.n_pes(), 16, 20
    for dtype in INT_DTYPES:
        counter = pgas.zeros(1, dtype)
        fetched = np.zeros(threads * iterations, dtype)
        pgas.barrier_all()
        fetch_add_kernel[1, threads](counter, fetched, iterations, pgas.n_pes() - 1)
        pgas.barrier_all()
        total = n * threads * iterations
        seen = np.sort(np.concatenate(world().allgather(fetched)).astype(np.int64))
        assert np.array_equal(seen, np.arange(total)), dtype
        if pgas.my_pe() == n - 1:
            assert counter.copy_to_host()[0] == total, dtype
        pgas.free(counter)


def check_compare_swap_spin_lock_protects_a_read_modify_write():
    n, threads, iterations = pgas.n_pes(), 4, 10
    lock = pgas.zeros(1, np.int32)
    shared = pgas.zeros(1, np.int64)
    pgas.barrier_all()
    spin_lock_kernel[1, threads](lock, shared, iterations)
    pgas.barrier_all()
    if pgas.my_pe() == 0:
        assert shared.copy_to_host()[0] == n * threads * iterations
        assert lock.copy_to_host()[0] == 0
    pgas.free(shared)
    pgas.free(lock)


def check_scripted_integer_sequence_every_dtype_to_peer_and_self():
    me, n, right, _ = ring_neighbours()
    for dtype in INT_DTYPES:
        words = pgas.zeros(n, dtype)
        for target in sorted({right, me}):
            out = np.zeros(10, dtype)
            pgas.barrier_all()
            integer_script_kernel[1, 1](words[me:], target, out)
            assert out.tolist() == [10, 10, 15, 20, 100, 7, 7, 3, 15, 9], (dtype, target)
            pgas.barrier_all()
        left = (me - 1) % n
        assert words.copy_to_host()[left] == 9, dtype   # what my left neighbour left in its slot
        pgas.free(words)


def check_scripted_float_sequence_fetch_set_swap_compare_swap():
    me, n, right, _ = ring_neighbours()
    for dtype in FLOAT_DTYPES:
        words = pgas.zeros(n, dtype)
        out = np.zeros(7, dtype)
        float_script_kernel[1, 1](words[me:], right, out)
        assert out.tolist() == [1.5, 1.5, -2.25, 8.0, 8.0, 8.0, 5.75], dtype
        pgas.barrier_all()
        assert words.copy_to_host()[(me - 1) % n] == 5.75
        pgas.free(words)


def check_unsigned_atomics_wrap_like_the_gpu():
    me, n, right, _ = ring_neighbours()
    for dtype, expected in ((np.uint32, 2**32 - 1), (np.uint64, 2**64 - 1), (np.int32, -1)):
        words = pgas.zeros(n, dtype)
        out = np.zeros(1, dtype)
        unsigned_wrap_kernel[1, 1](words[me:], right, out)
        assert int(out[0]) == expected, dtype
        pgas.free(words)


@simulator_only("a dtype the device refuses is a compile error on cuda (tests/test_offline_gpu_compile.py)")
def check_atomic_errors_name_function_argument_and_dtypes():
    a = pgas.zeros(1, np.float32)
    with pytest.raises(pgas.PgasError, match=r"pgas.device.atomic_and: dest must have one of the dtypes "
                                             r"int32, uint32, int64, uint64, got float32 \[on PE \d\]"):
        float_and_kernel[1, 1](a)
    pgas.free(a)


def check_host_atomics_every_op_and_dtype_from_every_pe_at_once():
    """All 14 host atomics on every dtype they take: every PE works on PE 0's words at
    once (add/inc, or, xor, and), and a fetch/set/swap/compare_swap script on its right
    neighbour; nvshmem4py's keywords (dst=, remote_pe=) in some calls."""
    me, n, right, _ = ring_neighbours()
    for dtype in INT_DTYPES + FLOAT_DTYPES:
        kind = np.dtype(dtype).type
        integer = np.dtype(dtype).kind in "iu"
        words = pgas.zeros(4, dtype)   # on PE 0: [0] adds, [1] or, [2] xor, [3] and
        slots = pgas.zeros(n, dtype)
        if integer and me == 0:
            pgas.atomic_set(words[3:], -1, 0)          # all ones (wraps, as on the GPU)
        pgas.barrier_all()
        pgas.atomic_add(words, 1, 0)
        pgas.atomic_inc(dst=words, remote_pe=0)
        old = pgas.atomic_fetch_add(words, 2, pe=0)
        assert type(old) is kind and 0 <= old <= 5 * n - 2, (dtype, old)
        old = pgas.atomic_fetch_inc(words, remote_pe=0)
        assert type(old) is kind and 0 <= old <= 5 * n - 1, (dtype, old)
        if integer:
            pgas.atomic_or(words[1:], 1 << (2 * me), 0)
            assert pgas.atomic_fetch_or(words[1:], 1 << (2 * me + 1), 0) & (3 << (2 * me)) == 1 << (2 * me)
            pgas.atomic_xor(words[2:], 3 << (2 * me), 0)
            assert pgas.atomic_fetch_xor(words[2:], 1 << (2 * me), 0) & (3 << (2 * me)) == 3 << (2 * me)
            pgas.atomic_and(words[3:], ~(1 << (2 * me)), 0)
            assert pgas.atomic_fetch_and(words[3:], ~(2 << (2 * me)), 0) & (3 << (2 * me)) == 2 << (2 * me)
        # a script on my slot at my right neighbour (this PE when alone)
        unit = 1 if integer else 0.5
        mine = slots[me:]
        pgas.atomic_set(mine, 3 * unit, right)
        assert pgas.atomic_fetch(mine, right) == 3 * unit, dtype
        assert pgas.atomic_swap(mine, 5 * unit, remote_pe=right) == 3 * unit, dtype
        assert pgas.atomic_compare_swap(mine, 5 * unit, 7 * unit, right) == 5 * unit, dtype       # hit
        assert pgas.atomic_compare_swap(dst=mine, cond=5 * unit, value=9 * unit, remote_pe=right) == 7 * unit  # miss
        pgas.barrier_all()
        bits = (1 << (2 * n)) - 1
        expected = [5 * n] + ([bits, sum(2 << (2 * pe) for pe in range(n)), np.array(~bits).astype(dtype)[()]]
                              if integer else [0, 0, 0])
        assert [pgas.atomic_fetch(words[i:], 0) for i in range(4)] == expected, dtype   # read on every PE
        assert slots.copy_to_host()[(me - 1) % n] == 7 * unit, dtype
        pgas.barrier_all()
        pgas.free(slots)
        pgas.free(words)


def check_host_atomics_and_device_atomics_at_once_are_exact():
    """Odd PEs run host fetch_adds while even PEs run a kernel of device fetch_adds (and
    float adds) on the same words of the last PE: every old value is seen exactly once."""
    me, n = pgas.my_pe(), pgas.n_pes()
    threads, iterations, host_ops = 8, 10, 80
    target = n - 1
    counter = pgas.zeros(1, np.int64)
    fcounter = pgas.zeros(1, np.float32)
    fetched = []
    pgas.barrier_all()
    if me % 2 == 0:
        out = np.zeros(threads * iterations, np.int64)
        mixed_add_kernel[1, threads](counter, fcounter, out, iterations, target)
        fetched.append(out)
    if me % 2 == 1 or n == 1:
        out = np.array([pgas.atomic_fetch_add(counter, 1, target) for _ in range(host_ops)], np.int64)
        for _ in range(host_ops):
            pgas.atomic_add(fcounter, 0.5, target)
        fetched.append(out)
    pgas.barrier_all()
    seen = np.sort(np.concatenate(world().allgather(np.concatenate(fetched))))
    assert np.array_equal(seen, np.arange(seen.size)), seen
    assert pgas.atomic_fetch(counter, target) == seen.size
    assert pgas.atomic_fetch(fcounter, target) == seen.size * 0.5
    pgas.barrier_all()
    pgas.free(fcounter)
    pgas.free(counter)


def check_host_atomic_errors_name_the_argument():
    n = pgas.n_pes()
    f, i8, i32 = pgas.zeros(1, np.float32), pgas.zeros(1, np.int8), pgas.zeros(2, np.int32)
    with pytest.raises(pgas.PgasError, match=r"pgas.atomic_and: dest must have one of the dtypes "
                                             r"int32, uint32, int64, uint64, got float32"):
        pgas.atomic_and(f, 1, 0)
    with pytest.raises(pgas.PgasError, match=r"pgas.atomic_fetch_add: dest must have one of the dtypes "
                                             r"int32, uint32, int64, uint64, float32, float64, got int8"):
        pgas.atomic_fetch_add(i8, 1, 0)
    with pytest.raises(pgas.PgasError, match=rf"pgas.atomic_fetch: pe must be within \[0, {n}\), got {n}"):
        pgas.atomic_fetch(i32, n)
    with pytest.raises(pgas.PgasError, match=r"pgas.atomic_swap: pe must be within \[0, \d+\), got -1"):
        pgas.atomic_swap(i32, 1, remote_pe=-1)
    with pytest.raises(pgas.PgasError, match=r"pgas.atomic_add: value must be an integer \(dest is int32\), "
                                             r"got 1.5"):
        pgas.atomic_add(i32, 1.5, 0)
    with pytest.raises(pgas.PgasError, match=r"pgas.atomic_compare_swap: cond must be a real number "
                                             r"\(dest is float32\), got 'x'"):
        pgas.atomic_compare_swap(f, "x", 1.0, 0)
    with pytest.raises(pgas.PgasError, match=r"pgas.atomic_inc: pe was given twice, as pe and as remote_pe"):
        pgas.atomic_inc(i32, 0, remote_pe=0)
    with pytest.raises(pgas.PgasError, match=r"pgas.atomic_set: dest is empty"):
        pgas.atomic_set(i32[2:], 1, 0)
    with pytest.raises(pgas.PgasError, match=r"pgas.atomic_fetch: dest"):
        pgas.atomic_fetch(np.zeros(1, np.int32), 0)      # not symmetric
    for a in (i32, i8, f):
        pgas.free(a)


@cuda.jit
def nbi_script_kernel(dest, pe, fetched):
    # fetched[k] gets the old value of step k; all complete at quiet
    dev.atomic_set(dest, 10, pe)
    dev.atomic_fetch_nbi(fetched[0:], dest, pe)                  # 10
    dev.atomic_fetch_add_nbi(fetched[1:], dest, 5, pe)           # 10 -> 15
    dev.atomic_fetch_inc_nbi(fetched[2:], dest, pe)              # 15 -> 16
    dev.atomic_swap_nbi(fetched[3:], dest, 7, pe)                # 16 -> 7
    dev.atomic_compare_swap_nbi(fetched[4:], dest, 7, 12, pe)    # hit: 7 -> 12
    dev.atomic_compare_swap_nbi(fetched[5:], dest, 7, 99, pe)    # miss: stays 12
    dev.atomic_fetch_and_nbi(fetched[6:], dest, 6, pe)           # 12 -> 4
    dev.atomic_fetch_or_nbi(fetched[7:], dest, 3, pe)            # 4 -> 7
    dev.atomic_fetch_xor_nbi(fetched[8:], dest, 5, pe)           # 7 -> 2
    dev.quiet()
    fetched[9] = dev.atomic_fetch(dest, pe)                      # 2


@cuda.jit
def fetch_add_nbi_kernel(counter, fetched, target):
    t = cuda.threadIdx.x
    dev.atomic_fetch_add_nbi(fetched[t:], counter, 1, target)
    dev.quiet()


@cuda.jit
def nbi_bad_fetch_kernel(fetch, dest):
    dev.atomic_fetch_add_nbi(fetch, dest, 1, 0)


NBI_SCRIPT = [10, 10, 15, 16, 7, 12, 12, 4, 7, 2]


def check_nbi_fetching_atomics_scripted_every_dtype_to_the_neighbour():
    """The device and host nbi forms on the right neighbour's word (each PE its own
    neighbour's), every integer dtype: the old values land in fetch at quiet."""
    me, n, right, left = ring_neighbours()
    for dtype in INT_DTYPES:
        dest = pgas.zeros(1, dtype)
        pgas.barrier_all()
        fetched = pgas.full(10, 77, dtype)
        nbi_script_kernel[1, 1](dest, right, fetched)
        assert fetched.copy_to_host().tolist() == NBI_SCRIPT, dtype
        pgas.barrier_all()
        # the same script from the host, into a numpy fetch and a symmetric one
        out = np.full(10, 77, dtype)
        sym = pgas.full(1, 77, dtype)
        pgas.atomic_set(dest, 10, right)
        pgas.atomic_fetch_nbi(out[0:], dest, right)
        pgas.atomic_fetch_add_nbi(out[1:], dest, 5, right)
        pgas.atomic_fetch_inc_nbi(out[2:], dest, remote_pe=right)
        pgas.atomic_swap_nbi(out[3:], dst=dest, value=7, pe=right)
        pgas.atomic_compare_swap_nbi(out[4:], dest, 7, 12, right)
        pgas.atomic_compare_swap_nbi(out[5:], dest, 7, 99, right)
        pgas.atomic_fetch_and_nbi(out[6:], dest, 6, right)
        pgas.atomic_fetch_or_nbi(out[7:], dest, 3, right)
        pgas.atomic_fetch_xor_nbi(sym, dest, 5, right)
        pgas.quiet()
        out[8] = sym.copy_to_host()[0]
        out[9] = pgas.atomic_fetch(dest, right)
        assert out.tolist() == NBI_SCRIPT, dtype
        pgas.barrier_all()
        assert pgas.atomic_fetch(dest, me) == 2
        pgas.barrier_all()
        for a in (sym, fetched, dest):
            pgas.free(a)
    # floats: fetch, swap, compare_swap, fetch_add
    for dtype in FLOAT_DTYPES:
        dest = pgas.full(1, 1.5, dtype)
        pgas.barrier_all()
        out = np.zeros(4, dtype)
        pgas.atomic_fetch_add_nbi(out[0:], dest, 0.25, right)    # 1.5 -> 1.75
        pgas.atomic_swap_nbi(out[1:], dest, -3.0, right)         # 1.75 -> -3
        pgas.atomic_compare_swap_nbi(out[2:], dest, -3.0, 4.5, right)
        pgas.atomic_fetch_nbi(out[3:], dest, right)
        pgas.quiet()
        assert out.tolist() == [1.5, 1.75, -3.0, 4.5], dtype
        pgas.barrier_all()
        pgas.free(dest)


def check_fetch_add_nbi_from_every_pe_fetches_a_permutation():
    """Every PE's threads (device) and its host each fetch_add_nbi one into PE 0's counter:
    the fetched values of all PEs together are exactly 0 .. total - 1."""
    n = pgas.n_pes()
    threads, host_calls = 4, 3
    counter = pgas.zeros(1, np.int64)
    fetched = pgas.full(threads, -1, np.int64)
    pgas.barrier_all()
    fetch_add_nbi_kernel[1, threads](counter, fetched, 0)
    host = np.full(host_calls, -1, np.int64)
    for i in range(host_calls):
        pgas.atomic_fetch_add_nbi(host[i:], counter, 1, 0)
    pgas.quiet()
    mine = fetched.copy_to_host().tolist() + host.tolist()
    everything = sorted(v for values in world().allgather(mine) for v in values)
    total = n * (threads + host_calls)
    assert everything == list(range(total))
    pgas.barrier_all()
    assert pgas.atomic_fetch(counter, 0) == total
    pgas.barrier_all()
    pgas.free(fetched)
    pgas.free(counter)


def check_nbi_atomic_errors_name_fetch():
    dest = pgas.zeros(1, np.int64)
    readonly = np.zeros(1, np.int64)
    readonly.flags.writeable = False
    for fetch, message in ((np.zeros(1, np.int32), r"pgas.atomic_fetch_add_nbi: fetch must have dest's dtype int64, "
                                                   r"got int32"),
                           (np.zeros(0, np.int64), r"pgas.atomic_fetch_add_nbi: fetch is empty; it needs at least "
                                                   r"one element"),
                           (readonly, r"pgas.atomic_fetch_add_nbi: fetch must be writable, got a read-only numpy "
                                      r"array"),
                           (np.zeros(4, np.int64)[::2], r"pgas.atomic_fetch_add_nbi: fetch must be C-contiguous")):
        with pytest.raises(pgas.PgasValueError, match=message):
            pgas.atomic_fetch_add_nbi(fetch, dest, 1, 0)
    with pytest.raises(pgas.PgasError, match=r"pgas.atomic_fetch_and_nbi: dest must have one of the dtypes"):
        pgas.atomic_fetch_and_nbi(np.zeros(1, np.float32), pgas.zeros(1, np.float32), 1, 0)
    with pytest.raises(pgas.PgasValueError, match=rf"pgas.atomic_fetch_nbi: pe must be within \[0, {pgas.n_pes()}\)"):
        pgas.atomic_fetch_nbi(np.zeros(1, np.int64), dest, pgas.n_pes())
    pgas.barrier_all()
    assert pgas.atomic_fetch(dest, pgas.my_pe()) == 0     # no refused call changed dest
    pgas.barrier_all()
    pgas.free(dest)


@simulator_only("device argument checks stop a kernel with a trap on a GPU")
def check_device_nbi_atomic_errors_name_fetch():
    dest = pgas.zeros(1, np.int64)
    with pytest.raises(pgas.PgasValueError, match=r"pgas.device.atomic_fetch_add_nbi: fetch and dest must have the "
                                                  r"same dtype, got fetch int32 and dest int64"):
        nbi_bad_fetch_kernel[1, 1](pgas.zeros(1, np.int32), dest)
    with pytest.raises(pgas.PgasValueError, match=r"pgas.device.atomic_fetch_add_nbi: fetch has 0 elements but 1 "
                                                  r"elements at stride 1 need 1"):
        nbi_bad_fetch_kernel[1, 1](np.zeros(0, np.int64), dest)
    assert dest.copy_to_host().tolist() == [0]
    pgas.barrier_all()
    pgas.free(dest)


@simulator_only("reads the simulator's routing layer")
def check_a_fetching_nbi_atomic_to_another_node_is_posted_and_lands_at_quiet():
    """Through the NIC the host's fetching _nbi atomics return once posted: their answers
    wait in the routing layer until quiet (or a barrier) writes them into fetch."""
    from pgas.runtime._state import runtime

    me, n, right, left = ring_neighbours()
    dest = pgas.full(1, 40, np.int64)
    pgas.barrier_all()
    out = np.full(3, -1, np.int64)
    pgas.atomic_fetch_add_nbi(out[0:], dest, 2, right)
    pgas.atomic_compare_swap_nbi(out[1:], dest, 42, 50, right)
    pgas.atomic_fetch_nbi(out[2:], dest, right)
    remote = pgas.info()["transports"][right] not in ("self", "p2p")
    pending = len(runtime("check").transports._fetches)
    assert pending == (3 if remote else 0), (pending, pgas.info()["transports"])
    if remote:
        assert out.tolist() == [-1, -1, -1]     # nothing landed before quiet
    pgas.quiet()
    assert out.tolist() == [40, 42, 50], out
    assert not runtime("check").transports._fetches
    pgas.barrier_all()
    pgas.free(dest)
