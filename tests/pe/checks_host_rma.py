"""Host put/get: exact elements for every size and dtype, to and from every neighbour; the
nbi forms complete at quiet, flush, errors, nvshmem4py's keyword names; memory pgas did not
allocate, registered as the local side of RMA or made symmetric."""
import os
import signal
import time
from multiprocessing import shared_memory

import numpy as np
import pytest
from numba import cuda

import pgas
import pgas.device as dev
from _util import DTYPES, SIZES, heap_offset, node_pes, on_simulator, pattern, ring_neighbours, world


def check_put_every_size_and_dtype():
    me, n, right, left = ring_neighbours()
    for dtype in DTYPES:
        for size in SIZES:
            dest = pgas.zeros(size, dtype)
            pgas.put(dest, pattern(me, size, dtype), right)
            pgas.barrier_all()
            got = dest.copy_to_host()
            assert np.array_equal(got, pattern(left, size, dtype)), (dtype, size)
            pgas.free(dest)


def check_get_every_size_and_dtype():
    me, n, right, left = ring_neighbours()
    for dtype in DTYPES:
        for size in SIZES:
            src = pgas.empty(size, dtype)
            src.copy_to_device(pattern(me, size, dtype))
            pgas.barrier_all()
            out = np.zeros(size, dtype)
            pgas.get(out, src, right)
            assert np.array_equal(out, pattern(right, size, dtype)), (dtype, size)
            pgas.barrier_all()
            pgas.free(src)


def check_put_shorter_src_changes_only_its_elements():
    me, n, right, left = ring_neighbours()
    dest = pgas.full(10, -1, np.int64)
    pgas.put(dest, np.arange(3, dtype=np.int64) + me, right)
    pgas.barrier_all()
    assert dest.copy_to_host().tolist() == [left, left + 1, left + 2] + [-1] * 7
    pgas.free(dest)


def check_put_from_symmetric_src_and_to_a_slice():
    me, n, right, left = ring_neighbours()
    src = pgas.full(4, me, np.float32)
    dest = pgas.zeros(8, np.float32)
    pgas.put(dest[4:], src, right)
    pgas.barrier_all()
    assert dest.copy_to_host().tolist() == [0] * 4 + [left] * 4
    pgas.free(dest)
    pgas.free(src)


def check_every_pe_puts_to_every_pe():
    me, n = pgas.my_pe(), pgas.n_pes()
    slots = pgas.full(n, -1, np.int64)
    for pe in range(n):
        pgas.put(slots[me:me + 1], np.array([me * 10 + pe], np.int64), pe)
    pgas.barrier_all()
    assert slots.copy_to_host().tolist() == [q * 10 + me for q in range(n)]
    pgas.free(slots)


def _counting_waits():
    """Count the waits of this PE's remote engine (None when no PE is on another node)."""
    from pgas.runtime._state import runtime
    engine = runtime("test").transports.engine
    if engine is None or pgas.backend() != "simulator":
        return None, None
    calls = []
    real = engine.wait

    def counted(fn, ticket):
        calls.append(fn)
        return real(fn, ticket)
    engine.wait = counted
    return calls, lambda: engine.__dict__.pop("wait")


def check_put_nbi_and_get_nbi_complete_at_quiet():
    """Symmetric and numpy sources and destinations; through the NIC a symmetric source
    is not waited for (the engine's wait is never called before quiet)."""
    me, n, right, left = ring_neighbours()
    for size in (1, 1001, 300_000):
        src = pgas.empty(size, np.float64)
        src.copy_to_device(pattern(me, size, np.float64))
        dest = pgas.zeros(size, np.float64)
        got = pgas.zeros(size, np.float64)
        pgas.barrier_all()
        calls, restore = _counting_waits()
        pgas.put_nbi(dest, src, right)
        pgas.get_nbi(got, src, right)
        if calls is not None:
            restore()
            assert calls == [], calls          # nothing waited for before quiet
        pgas.quiet()
        assert np.array_equal(got.copy_to_host(), pattern(right, size, np.float64)), size
        pgas.barrier_all()
        assert np.array_equal(dest.copy_to_host(), pattern(left, size, np.float64)), size
        pgas.barrier_all()      # every PE has read its dest before it is written again
        # numpy on the local side, nvshmem4py's keyword names
        out = np.zeros(size)
        pgas.put_nbi(dst=dest, src=pattern(me + 1, size, np.float64), remote_pe=right)
        pgas.get_nbi(out, src, remote_pe=left)
        pgas.quiet()
        pgas.barrier_all()
        assert np.array_equal(dest.copy_to_host(), pattern(left + 1, size, np.float64)), size
        assert np.array_equal(out, pattern(left, size, np.float64)), size
        for a in (got, dest, src):
            pgas.free(a)


def check_flush_makes_put_nbi_sources_reusable():
    me, n, right, left = ring_neighbours()
    src = pgas.full(1000, me, np.int64)
    dest = pgas.zeros(1000, np.int64)
    pgas.barrier_all()
    pgas.put_nbi(dest, src, right)
    pgas.flush()
    src.copy_to_device(np.full(1000, -7, np.int64))   # the put read src before this
    pgas.quiet()
    pgas.barrier_all()
    assert dest.copy_to_host().tolist() == [left] * 1000
    pgas.free(dest)
    pgas.free(src)


def check_host_rma_errors_and_nvshmem4py_keywords():
    me, n, right, left = ring_neighbours()
    dest = pgas.zeros(4, np.int32)
    pgas.put(dst=dest, src=np.arange(4, dtype=np.int32) + me, remote_pe=right)
    pgas.barrier_all()
    out = np.zeros(4, np.int32)
    pgas.get(out, dest, remote_pe=me)
    assert out.tolist() == [left, left + 1, left + 2, left + 3]
    with pytest.raises(pgas.PgasError, match=rf"pgas.put_nbi: pe must be within \[0, {n}\), got {n}"):
        pgas.put_nbi(dest, np.zeros(4, np.int32), n)
    with pytest.raises(pgas.PgasError, match=r"pgas.get_nbi: dest and src must have the same dtype"):
        pgas.get_nbi(np.zeros(4, np.int64), dest, 0)
    with pytest.raises(pgas.PgasError, match=r"pgas.put: dest was given twice, as dest and as dst"):
        pgas.put(dest, np.zeros(4, np.int32), dst=dest, pe=0)
    pgas.barrier_all()
    pgas.free(dest)


def check_small_put_get_fast_path_is_taken_and_keeps_the_checks():
    """put/get between plain arrays go through the cached fast path (simulator, PEs mapped
    here or reached through a remote engine: one blocking request); everything it does not
    take gets the general path's results and errors."""
    from pgas.runtime._state import runtime
    me, n, right, left = ring_neighbours()
    direct = runtime("test").direct
    taken = pgas.info()["transports"][right] in ("self", "p2p", "ucx", "ibgda", "proxy")
    dest = pgas.zeros(16, np.int64)
    grid = pgas.zeros((2, 3), np.int64)
    if direct is not None:      # the simulator: taken wherever the peer is reached
        assert direct.put(dest[4:8], np.arange(4, dtype=np.int64), right) is taken
        assert direct.get(np.zeros(4, np.int64), dest, right) is taken
        assert not direct.put(dest, np.zeros(4, np.int32), right)          # dtype differs
        assert not direct.put(dest, np.zeros(17, np.int64), right)         # does not fit
        assert not direct.put(dest, np.zeros(8, np.int64)[::2], right)     # strided source
        assert not direct.put(dest, np.zeros(4, np.int64), n)              # no such PE
        assert not direct.put(dest, np.zeros(4, np.int64), np.int64(right))  # not an int: checked in full
        assert not direct.put(np.zeros(16, np.int64), np.zeros(4, np.int64), right)   # dest not symmetric
    pgas.barrier_all()
    # the same calls through pgas: right results, the general path's errors
    for step in range(300):     # more arrays than the cache holds: entries are dropped and remade
        piece = dest[step % 13:step % 13 + 3]
        pgas.put(piece, np.full(3, me * 1000 + step, np.int64), right)
        out = np.zeros(3, np.int64)
        pgas.get(out, piece, right)
        assert out.tolist() == [me * 1000 + step] * 3, step
    pgas.put(grid, np.arange(6, dtype=np.int64).reshape(2, 3) + me, right)   # 2-D: the general path
    pgas.barrier_all()
    assert grid.copy_to_host().tolist() == (np.arange(6).reshape(2, 3) + left).tolist()
    with pytest.raises(pgas.PgasError, match=rf"pgas.put: pe must be within \[0, {n}\), got {n}"):
        pgas.put(dest, np.zeros(4, np.int64), n)
    with pytest.raises(pgas.PgasError, match=r"pgas.put: dest and src must have the same dtype"):
        pgas.put(dest, np.zeros(4, np.int32), right)
    with pytest.raises(pgas.PgasError, match=r"pgas.put: dest has 16 elements but 17 are needed"):
        pgas.put(dest, np.zeros(17, np.int64), right)
    with pytest.raises(pgas.PgasError, match=r"pgas.get: dest must be C-contiguous"):
        pgas.get(np.zeros(8, np.int64)[::2], dest, right)
    with pytest.raises(pgas.PgasError, match=r"pgas.put: dest is not symmetric memory"):
        pgas.put(np.zeros(16, np.int64), np.zeros(4, np.int64), right)
    readonly = np.zeros(4, np.int64)
    readonly.flags.writeable = False
    with pytest.raises(pgas.PgasError, match="pgas.get: dest must be writable, got a read-only numpy array"):
        pgas.get(readonly, dest, right)
    readonly = np.zeros(dest.shape, np.int64)          # of dest's shape: the kept view's path
    pgas.get(np.zeros(dest.shape, np.int64), dest, right)
    readonly.flags.writeable = False
    with pytest.raises(pgas.PgasError, match="pgas.get: dest must be writable, got a read-only numpy array"):
        pgas.get(readonly, dest, right)
    # calls on dest with a local array of its size, after the first: the kept views' path
    for _ in range(2):
        pgas.get(np.zeros(16, np.int64), dest, right)
        with pytest.raises(pgas.PgasError, match=r"pgas.put: dest and src must have the same dtype"):
            pgas.put(dest, np.zeros(16, np.int32), right)
        with pytest.raises(pgas.PgasError, match=r"pgas.put: dest and src must have the same dtype"):
            pgas.put(dest, np.zeros(16, np.dtype(np.int64).newbyteorder()), right)
        with pytest.raises(pgas.PgasError, match=r"pgas.get: dest and src must have the same dtype"):
            pgas.get(np.zeros(16, np.float64), dest, right)
        with pytest.raises(pgas.PgasError, match=r"pgas.get: dest must be C-contiguous"):
            pgas.get(np.zeros(32, np.int64)[::2], dest, right)
    pgas.barrier_all()
    # a strided source and a source of another shape with dest's element count: element by element
    pgas.put(dest, np.arange(32, dtype=np.int64)[::2] + 100 * me, right)
    pgas.put(dest, np.arange(32, dtype=np.int64)[::2] + 100 * me, right)
    pgas.barrier_all()
    assert dest.copy_to_host().tolist() == (np.arange(32)[::2] + 100 * left).tolist()
    pgas.barrier_all()
    for _ in range(2):
        pgas.put(dest, np.arange(16, dtype=np.int64).reshape(4, 4) + 200 * me, right)
    pgas.barrier_all()
    assert dest.copy_to_host().tolist() == (np.arange(16) + 200 * left).tolist()
    got = np.zeros((1, 16), np.int64)
    pgas.get(got, dest, me)
    assert got.ravel().tolist() == (np.arange(16) + 200 * left).tolist()
    with pytest.raises(TypeError, match=r"pgas.put\(\) missing required argument: 'pe'"):
        pgas.put(dest, np.zeros(16, np.int64))
    with pytest.raises(TypeError, match=r"pgas.get\(\) missing required argument: 'src'"):
        pgas.get(dst=np.zeros(16, np.int64), remote_pe=right)
    with pytest.raises(pgas.PgasError, match=r"pgas.get: pe was given twice, as pe and as remote_pe"):
        pgas.get(np.zeros(16, np.int64), dest, right, remote_pe=right)
    pgas.barrier_all()
    pgas.free(grid)
    pgas.free(dest)


def _expected_blocks(base: np.ndarray, size: int, stride: int, blocksize: int, nblocks: int, fill) -> list:
    """``size`` elements of ``fill`` with block b of ``base`` (blocksize long, taken at
    b*blocksize) at b*stride: what a blocked strided copy leaves."""
    out = np.full(size, fill, base.dtype)
    for b in range(nblocks):
        out[b * stride:b * stride + blocksize] = base[b * blocksize:b * blocksize + blocksize]
    return out.tolist()


def check_iput_iget_ibput_ibget_move_exactly_their_elements():
    """Strided and blocked strided copies to and from the ring neighbours, symmetric and
    numpy local sides; every other element keeps its value."""
    me, n, right, left = ring_neighbours()
    src_values = pattern(me, 40, np.int64)
    src = pgas.empty(40, np.int64)
    src.copy_to_device(src_values)
    dest = pgas.full(40, -1, np.int64)
    pgas.barrier_all()
    # iput: 5 elements of src at stride 3 to stride 4 of the right neighbour's dest
    pgas.iput(dest, src_values, 4, 3, 5, right)
    pgas.barrier_all()
    want = np.full(40, -1, np.int64)
    want[0:20:4] = pattern(left, 40, np.int64)[0:15:3]
    assert dest.copy_to_host().tolist() == want.tolist()
    pgas.barrier_all()
    # iget from the left neighbour's symmetric src into a numpy dest
    out = np.full(12, -1, np.int64)
    pgas.iget(out, src, 2, 5, 6, left)
    want = np.full(12, -1, np.int64)
    want[0:12:2] = pattern(left, 40, np.int64)[0:30:5]
    assert out.tolist() == want.tolist()
    # ibput: 3 blocks of 4, packed src (stride 4) to stride 7 of dest, from a symmetric src
    dest.copy_to_device(np.full(40, -1, np.int64))
    pgas.barrier_all()
    pgas.ibput(dest, src, 7, 4, 4, 3, right)
    pgas.barrier_all()
    assert dest.copy_to_host().tolist() == _expected_blocks(pattern(left, 40, np.int64), 40, 7, 4, 3, -1)
    pgas.barrier_all()
    # ibget: blocks of 3 at stride 5 of the right neighbour's src, packed (stride 3) locally
    out = np.full(15, -1, np.int64)
    pgas.ibget(out, src, 3, 5, 3, 5, right)
    theirs = pattern(right, 40, np.int64)
    assert out.tolist() == np.concatenate([theirs[b * 5:b * 5 + 3] for b in range(5)]).tolist()
    # into a symmetric dest, nvshmem4py's keywords; nblocks 0 and blocksize 0 copy nothing
    got = pgas.full(20, -1, np.int64)
    pgas.ibget(dst=got, src=src, dst_stride=10, src_stride=2, blocksize=2, nblocks=2, remote_pe=left)
    assert got.copy_to_host().tolist() == _expected_blocks(
        np.concatenate([pattern(left, 40, np.int64)[0:2], pattern(left, 40, np.int64)[2:4]]), 20, 10, 2, 2, -1)
    pgas.ibput(dest, src, 4, 4, 4, 0, right)
    pgas.ibget(got, src, 4, 4, 0, 3, right)
    assert got.copy_to_host()[2:10].tolist() == [-1] * 8
    pgas.barrier_all()
    for a in (got, dest, src):
        pgas.free(a)


def check_strided_copies_refuse_bad_strides_and_blocks_past_the_end():
    n = pgas.n_pes()
    dest = pgas.zeros(10, np.int32)
    src = np.zeros(10, np.int32)
    cases = [
        (lambda: pgas.ibput(dest, src, 2, 3, 3, 2, 0),
         r"pgas.ibput: dst_stride must be >= blocksize \(blocks may not overlap\); each dest block has 2 "
         r"elements, 3 needed"),
        (lambda: pgas.ibput(dest, src, 3, 2, 3, 2, 0),
         r"pgas.ibput: src_stride must be >= blocksize \(blocks may not overlap\); each src block has 2"),
        (lambda: pgas.ibput(dest, src, 4, 3, 3, 3, 0),
         r"pgas.ibput: the last block \(at \(nblocks - 1\) \* dst_stride, blocksize long\) must end inside dest; "
         r"dest has 10 elements, 11 needed"),
        (lambda: pgas.ibget(src, dest, 3, 4, 3, 3, 0),
         r"pgas.ibget: the last block \(at \(nblocks - 1\) \* src_stride, blocksize long\) must end inside src; "
         r"src has 10 elements, 11 needed"),
        (lambda: pgas.ibput(dest, src, 0, 1, 1, 1, 0),
         r"pgas.ibput: dst_stride must be a positive integer \(elements between block starts\), got 0"),
        (lambda: pgas.ibget(src, dest, 1, -2, 1, 1, 0), r"pgas.ibget: src_stride must be a positive integer"),
        (lambda: pgas.ibput(dest, src, 1, 1, -1, 1, 0), r"pgas.ibput: blocksize must be a non-negative integer"),
        (lambda: pgas.ibput(dest, src, 1, 1, 1, -1, 0), r"pgas.ibput: nblocks must be a non-negative integer"),
        (lambda: pgas.iput(dest, src, 2, 1, 6, 0),
         r"pgas.iput: the last block \(at \(nblocks - 1\) \* dst_stride, blocksize long\) must end inside dest; "
         r"dest has 10 elements, 11 needed"),
        (lambda: pgas.iget(src, dest, 1, 0, 2, 0), r"pgas.iget: src_stride must be a positive integer"),
        (lambda: pgas.ibput(dest, src, 1, 1, 1, 1, n), rf"pgas.ibput: pe must be within \[0, {n}\), got {n}"),
        (lambda: pgas.ibput(dest, np.zeros(10, np.int64), 1, 1, 1, 1, 0),
         r"pgas.ibput: dest and src must have the same dtype"),
        (lambda: pgas.ibput(src, dest, 1, 1, 1, 1, 0), r"pgas.ibput: dest is not symmetric memory"),
    ]
    readonly = np.zeros(10, np.int32)
    readonly.flags.writeable = False
    cases.append((lambda: pgas.ibget(readonly, dest, 1, 1, 1, 1, 0), r"pgas.ibget: dest must be writable"))
    for call, message in cases:
        with pytest.raises(pgas.PgasValueError, match=message):
            call()
    assert dest.copy_to_host().tolist() == [0] * 10     # nothing was written by a refused call
    pgas.barrier_all()
    pgas.free(dest)


def check_pe_quiet_completes_nbi_operations_to_those_pes():
    """put_nbi to the right neighbour, complete after pe_quiet([right]): the neighbour sees
    the data after an MPI barrier (which completes nothing of pgas's); pes checked."""
    me, n, right, left = ring_neighbours()
    src = pgas.empty(30000, np.float64)
    src.copy_to_device(pattern(me, 30000, np.float64))
    dest = pgas.zeros(30000, np.float64)
    pgas.barrier_all()
    for round_, pes in enumerate(([right], right, (right, left, right), np.array([right]))):
        src.copy_to_device(pattern(me + round_, 30000, np.float64))
        pgas.put_nbi(dest, src, right)
        pgas.pe_quiet(pes)
        world().Barrier()
        arrived = np.array_equal(dest.copy_to_host(), pattern(left + round_, 30000, np.float64))
        assert all(world().allgather(arrived)), (pes, arrived)     # every PE fails together
        pgas.barrier_all()
    pgas.pe_quiet([])
    for bad, message in ((n, rf"pgas.pe_quiet: pes must be within \[0, {n}\), got {n}"),
                         ([0, -1], rf"pgas.pe_quiet: pes\[1\] must be within \[0, {n}\), got -1"),
                         ([0, 1.5], r"pgas.pe_quiet: pes\[1\] must be an integer PE number, got 1.5"),
                         ("x", r"pgas.pe_quiet: pes\[0\] must be an integer PE number, got 'x'"),
                         (None, r"pgas.pe_quiet: pes must be a PE number or a sequence of them, got None"),
                         (True, r"pgas.pe_quiet: pes must be a PE number or a sequence of them, got True")):
        with pytest.raises(pgas.PgasValueError, match=message):
            pgas.pe_quiet(bad)
    pgas.barrier_all()
    for a in (dest, src):
        pgas.free(a)


def _stop(pid: int) -> None:
    """SIGSTOP process ``pid`` and return once it is stopped (state T in /proc)."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "T":
        assert time.monotonic() < deadline, f"process {pid} did not stop"
        time.sleep(0.001)


def check_pe_quiet_leaves_operations_to_other_pes_in_flight():
    """Across nodes: PE 0 stops (SIGSTOP) a PE it reaches through the NIC, put_nbi's to it
    and to a second such PE, and pe_quiet([second]) returns with the second's data there
    while the stopped PE cannot have taken its put (a pe_quiet that waited for every PE
    would wait for PGAS_TIMEOUT); after SIGCONT, quiet completes the first put too."""
    me, n = pgas.my_pe(), pgas.n_pes()
    dest = pgas.zeros(1000, np.int64)
    src = pgas.full(1000, 7, np.int64)
    far = world().allgather(pgas.ptr(dest, 0) == 0)      # PEs that reach PE 0 through the NIC
    pids = world().allgather(os.getpid())
    remote = [pe for pe in range(n) if far[pe]]
    pgas.barrier_all()
    if len(remote) >= 2:
        stopped, witness = remote[:2]
        if me == 0:
            _stop(pids[stopped])
            try:
                pgas.put_nbi(dest, src, stopped)
                pgas.put_nbi(dest, src, witness)
                pgas.pe_quiet([witness])
                world().send("complete", dest=witness)
            finally:
                os.kill(pids[stopped], signal.SIGCONT)
            pgas.quiet()
        elif me == witness:
            assert world().recv(source=0) == "complete"
            assert (dest.copy_to_host() == 7).all()
    pgas.barrier_all()
    if me in remote[:1] and len(remote) >= 2:
        assert (dest.copy_to_host() == 7).all()
    pgas.barrier_all()
    for a in (dest, src):
        pgas.free(a)


def _nic_key_of(local: np.ndarray):
    """(lkey, temporary registration or None) the transports would use for ``local`` as a
    NIC request's local side."""
    from pgas.runtime._state import runtime
    return runtime("test").transports.local_key(local.ravel(order="K"))


def _drop(temporary) -> None:
    from pgas.runtime._state import runtime
    runtime("test").transports.recent.release(temporary)


def check_registered_buffers_are_the_local_side_of_rma():
    me, n, right, left = ring_neighbours()
    dest = pgas.zeros(16, np.int64)
    signal = pgas.zeros(1, np.uint64)
    local = pattern(me, 16, np.int64)
    assert pgas.register_buffer(local) is local
    out = np.zeros(16, np.int64)
    pgas.register_buffer(out)
    grid = np.asfortranarray(pattern(me, 12, np.int64).reshape(3, 4))
    pgas.register_buffer(grid)
    if on_simulator():      # a registered NIC region: requests name it by its key, no registration per call
        for buffer in (local, out, grid):
            lkey, temporary = _nic_key_of(buffer)
            assert temporary is None and lkey != 0
        _, temporary = _nic_key_of(np.zeros(4))
        assert temporary is not None        # an unregistered array: a registration for the call
        _drop(temporary)
    pgas.barrier_all()
    pgas.put_nbi(dest, local, right)
    pgas.quiet()
    pgas.barrier_all()
    assert np.array_equal(dest.copy_to_host(), pattern(left, 16, np.int64))
    pgas.get_nbi(out, dest, right)          # right's dest holds my values
    pgas.quiet()
    assert np.array_equal(out, local)
    out[:] = 0
    pgas.get(out, dest, left)
    assert np.array_equal(out, pattern((left - 1) % n, 16, np.int64))
    pgas.barrier_all()
    pgas.put_signal(dest, local.copy(), signal, 1, pgas.SIGNAL_ADD, right)    # unregistered src: as before
    pgas.put_signal_nbi(dest, local, signal, 1, pgas.SIGNAL_ADD, right)
    pgas.signal_wait_until(signal, pgas.CMP_EQ, 2)
    assert np.array_equal(dest.copy_to_host(), pattern(left, 16, np.int64))
    fdest = pgas.zeros((3, 4), np.int64, order="F")
    pgas.barrier_all()
    pgas.put_nbi(fdest, grid, right)
    pgas.quiet()
    pgas.barrier_all()
    assert np.array_equal(fdest.copy_to_host(), pattern(left, 12, np.int64).reshape(3, 4))
    # errors
    with pytest.raises(pgas.PgasValueError, match=r"pgas.register_buffer: a is symmetric memory \(in this PE's"):
        pgas.register_buffer(dest)
    with pytest.raises(pgas.PgasValueError, match=r"pgas.register_buffer: a .* is already registered"):
        pgas.register_buffer(local)
    with pytest.raises(pgas.PgasValueError, match=r"pgas.register_buffer: a .* overlaps the registered buffer"):
        pgas.register_buffer(local[4:8])
    with pytest.raises(pgas.PgasValueError, match=r"pgas.register_buffer: a must be C-contiguous or Fortran"):
        pgas.register_buffer(np.zeros(8)[::2])
    with pytest.raises(pgas.PgasValueError, match=r"pgas.register_buffer: a must have at least one byte"):
        pgas.register_buffer(np.zeros(0))
    with pytest.raises(pgas.PgasValueError, match=r"pgas.unregister_buffer: a was not registered"):
        pgas.unregister_buffer(np.zeros(4))
    with pytest.raises(pgas.PgasValueError, match=r"pgas.unregister_buffer: a was not registered"):
        pgas.unregister_buffer(local[:8])
    pgas.unregister_buffer(local)
    pgas.unregister_buffer(out)
    with pytest.raises(pgas.PgasValueError, match=r"pgas.unregister_buffer: a was not registered"):
        pgas.unregister_buffer(local)
    if on_simulator():
        temporary = _nic_key_of(local)[1]
        assert temporary is not None        # back to a registration per call
        _drop(temporary)
    pgas.register_buffer(local)     # registered again: allowed once unregistered
    pgas.unregister_buffer(local)
    # ``grid`` stays registered: finalize drops it
    pgas.barrier_all()
    for a in (fdest, signal, dest):
        pgas.free(a)


@cuda.jit
def put_row_kernel(dest, src, row, pe):
    dev.put(dest[row], src, pe)


def _shared_array(shape, dtype, order="C"):
    """A numpy array on a new shared-memory file (the kind of memory register_symmetric takes)."""
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    shm = shared_memory.SharedMemory(create=True, size=nbytes)
    return shm, np.ndarray(shape, dtype, buffer=shm.buf, order=order)


def _vmm_array(shape, dtype):
    """GPU memory of a VMM allocation whose handle exports as a file descriptor (what
    register_symmetric takes on cuda), as a device array; and a function that frees it."""
    from cuda.bindings import driver
    from pgas.core._gpu_arrays import device_array_at

    prop = driver.CUmemAllocationProp()
    prop.type = driver.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    prop.location.type = driver.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    prop.location.id = cuda.get_current_device().id
    prop.requestedHandleTypes = driver.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
    _, grain = driver.cuMemGetAllocationGranularity(
        prop, driver.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM)
    size = -(-int(np.prod(shape)) * np.dtype(dtype).itemsize // grain) * grain
    _, address = driver.cuMemAddressReserve(size, grain, 0, 0)
    _, handle = driver.cuMemCreate(size, prop, 0)
    driver.cuMemMap(address, size, 0, handle, 0)
    access = driver.CUmemAccessDesc()
    access.location.type = driver.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    access.location.id = prop.location.id
    access.flags = driver.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
    driver.cuMemSetAccess(address, size, [access], 1)

    def free():
        driver.cuMemUnmap(address, size)
        driver.cuMemRelease(handle)
        driver.cuMemAddressFree(address, size)
    return device_array_at(int(address), shape, np.dtype(dtype), None, owner=None), free


def _vmm_memory_made_symmetric():
    """register_symmetric on the cuda backend: VMM allocations mapped into every span."""
    me, n, right, left = ring_neighbours()
    src, free_src = _vmm_array((n, 700), np.int64)
    dst, free_dst = _vmm_array((n, 700), np.int64)
    src.copy_to_device(np.full((n, 700), me + 1, np.int64))
    dst.copy_to_device(np.full((n, 700), -1, np.int64))
    sym_src = pgas.register_symmetric(src)
    sym_dst = pgas.register_external_buffer(dst)
    assert world().allgather(heap_offset(sym_dst)) == [heap_offset(sym_dst)] * n     # symmetric
    assert heap_offset(sym_src) >= pgas.info()["heap_size"]     # in the room after the heap
    pgas.reduce(pgas.TEAM_WORLD, sym_dst, sym_src, "sum")
    assert np.all(dst.copy_to_host() == n * (n + 1) // 2)      # the user's memory is the symmetric one
    pgas.barrier_all()
    pgas.put(sym_dst[me], pattern(me, 700, np.int64), right)
    put_row_kernel[1, 1](sym_src, cuda.to_device(np.full(700, 50 + me, np.int64)), left, left)
    cuda.synchronize()
    pgas.quiet()
    pgas.barrier_all()
    assert np.array_equal(dst.copy_to_host()[left], pattern(left, 700, np.int64))
    assert np.all(src.copy_to_host()[me] == 50 + right)
    for pe in node_pes():
        view = pgas.peer_array(sym_dst, pe)
        assert np.array_equal(view.copy_to_host()[(pe - 1) % n], pattern((pe - 1) % n, 700, np.int64))
    with pytest.raises(pgas.PgasValueError, match="pgas.register_symmetric: a must be GPU memory from cuMemCreate.*"
                                                  "not VMM memory"):
        pgas.register_symmetric(cuda.device_array(1024, np.uint8))
    with pytest.raises(pgas.PgasValueError, match="starting at its allocation's first byte"):
        pgas.register_symmetric(src[0, 8:])
    pgas.barrier_all()
    pgas.unregister_symmetric(sym_src)
    pgas.unregister_external_buffer(sym_dst)
    free_src()
    free_dst()


def check_external_shared_memory_made_symmetric():
    if not on_simulator():
        _vmm_memory_made_symmetric()
        return
    me, n, right, left = ring_neighbours()
    shm_src, src = _shared_array((n, 700), np.int64)          # 700 * 8 bytes: not whole pages
    shm_dst, dst = _shared_array((n, 700), np.int64)
    src[:] = me + 1
    dst[:] = -1
    sym_src = pgas.register_symmetric(src)
    sym_dst = pgas.register_external_buffer(dst)               # nvshmem4py's name
    for shm in (shm_src, shm_dst):
        shm.unlink()            # only needed while registering: the mappings hold the memory
    assert sym_src.shape == src.shape and sym_dst.dtype == dst.dtype
    assert np.array_equal(sym_src.copy_to_host(), src)
    assert heap_offset(sym_src) % os.sysconf("SC_PAGE_SIZE") == 0
    assert world().allgather(heap_offset(sym_dst)) == [heap_offset(sym_dst)] * n     # symmetric
    src[me, 0] = 1000 + me              # the user's array and the symmetric one are the same memory
    assert sym_src.copy_to_host()[me, 0] == 1000 + me
    src[me, 0] = me + 1
    # collectives between registered arrays (nvshmem4py's memory_test::test_external_buffer)
    pgas.reduce(pgas.TEAM_WORLD, sym_dst, sym_src, "sum")
    assert np.all(dst == n * (n + 1) // 2), dst
    pgas.fcollect(pgas.TEAM_WORLD, sym_dst, sym_src[me])
    assert np.array_equal(dst[:, 0], np.arange(1, n + 1))
    # host RMA, atomics, kernels and peer views reach every PE's registered memory
    pgas.barrier_all()
    pgas.put(sym_dst[me], pattern(me, 700, np.int64), right)
    put_row_kernel[1, 1](sym_src, np.full(700, 50 + me, np.int64), left, left)
    pgas.quiet()
    pgas.barrier_all()
    assert np.array_equal(dst[left], pattern(left, 700, np.int64))
    assert np.all(src[me] == 50 + right)
    pgas.barrier_all()
    pgas.atomic_add(sym_src[0, :1], 1, 0)
    pgas.quiet()
    pgas.barrier_all()
    if me == 0:
        assert src[0, 0] == 50 + right + n
    fetched = np.zeros(700, np.int64)
    pgas.get(fetched, sym_dst[me], right)
    assert np.array_equal(fetched, pattern(me, 700, np.int64))
    for pe in node_pes():
        view = pgas.peer_array(sym_dst, pe)
        assert np.array_equal(view.copy_to_host()[(pe - 1) % n], pattern((pe - 1) % n, 700, np.int64))
    shm, grid = _shared_array((5, 3), np.int32, order="F")
    sym_grid = pgas.register_symmetric(grid)                  # Fortran order kept
    assert sym_grid.strides == grid.strides == (4, 20)
    pgas.barrier_all()
    pgas.put(sym_grid, np.asfortranarray(pattern(me, 15, np.int32).reshape(5, 3)), right)
    pgas.barrier_all()
    assert np.array_equal(grid, pattern(left, 15, np.int32).reshape(5, 3))
    pgas.unregister_symmetric(sym_grid)
    shm.unlink()
    shm.close()
    # errors, on every PE
    with pytest.raises(pgas.PgasValueError, match="pgas.free: a is memory made symmetric by pgas.register_symmetric"):
        pgas.free(sym_src)
    with pytest.raises(pgas.PgasValueError, match="pgas.unregister_symmetric: s must be an array returned by"):
        pgas.unregister_symmetric(sym_src[0, :5])
    with pytest.raises(pgas.PgasValueError, match="pgas.register_symmetric: a must be memory shared through a file"
                                                  ".*got private memory"):
        pgas.register_symmetric(np.zeros(1024))
    with pytest.raises(pgas.PgasValueError, match="pgas.register_symmetric: a is already symmetric memory"):
        pgas.register_symmetric(sym_src)
    shm, whole = _shared_array(8192, np.uint8)
    with pytest.raises(pgas.PgasValueError, match="pgas.register_symmetric: a must start at a page boundary"):
        pgas.register_symmetric(whole[8:])
    if n > 1:       # sizes that differ: an error on every PE naming what each called
        with pytest.raises(pgas.PgasError, match="pgas.register_symmetric: .*4096 bytes.*8192 bytes"
                                                 "|pgas.register_symmetric: .*8192 bytes.*4096 bytes"):
            pgas.register_symmetric(whole[:4096] if me == 0 else whole)
    shm.unlink()
    shm.close()
    used = pgas.info()["heap_used"]
    pgas.unregister_external_buffer(sym_dst)
    offset = heap_offset(sym_src)
    pgas.unregister_symmetric(sym_src)
    assert pgas.info()["heap_used"] < used
    assert src[me, 1] == 50 + right      # the user's memory keeps its data, and is its own again
    again = pgas.align(os.sysconf("SC_PAGE_SIZE"), (n, 700), np.int64)   # the heap's own pages are back there
    assert heap_offset(again) == offset
    again[me, 1] = -5
    src[me, 2] = -7
    assert src[me, 1] == 50 + right and again[me, 2] != -7
    pgas.free(again)
    for shm in (shm_src, shm_dst):
        shm.close()
