"""The cuda backend on a real GPU (marked gpu: skipped unless PGAS_BACKEND=cuda and a GPU
is usable). The GPU run, documented in docs/gpu.md, is

    PGAS_BACKEND=cuda python -m pytest -q

which also runs every PE check suite and example on the GPU; this file adds what only
the cuda backend has. Several PEs share one GPU when the machine has one.
"""
import pytest

from conftest import assert_check_passed, check_names, in_jobs, pgasrun

CUDA = {"PGAS_BACKEND": "cuda"}
GPU_CASES = [(n, name) for n in (2, 4) for name in check_names("checks_gpu")]
EXAMPLES = [("shift.py", "PE 3 received 2"), ("ring.py", "the message came back round 4 PEs"),
            ("ring_allreduce.py", "matches numpy on every PE"), ("atomic_counter.py", "items done exactly once")]


@pytest.mark.gpu
@pytest.mark.parametrize("n,name", in_jobs(GPU_CASES, [f"{n}pe-{c}" for n, c in GPU_CASES], lambda n, c: n))
def test_cuda_backend(n, name):
    assert_check_passed("checks_gpu", n, name, env=CUDA)


@pytest.mark.gpu
@pytest.mark.parametrize("example,expected", EXAMPLES, ids=[e for e, _ in EXAMPLES])
def test_example_on_four_pes_sharing_the_gpu(example, expected):
    proc = pgasrun(4, "python", f"examples/{example}", env=CUDA)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert expected in proc.stdout


@pytest.mark.gpu
def test_put_bandwidth_benchmark_runs():
    proc = pgasrun(2, "python", "-m", "pgas.bench", "put_bw", env=CUDA, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "64 MiB" in proc.stdout
    print(proc.stdout)     # the figures, for the GPU run's log (pytest -rP)


ACROSS_NODES = r"""
import numpy as np
import pgas, pgas.device as dev
from numba import cuda


@cuda.jit
def remote_ops(big, src, words, w32, f64, flag, other, out):
    dev.p(flag, 7, other)
    dev.quiet()
    out[0] = dev.g(flag, other)
    dev.put(big, src, other)                       # one RDMA write
    dev.iput(big[1000:], src, 2, 1, 10, other)     # one per element
    out[1] = dev.atomic_fetch_add(words, 5, other)
    out[2] = dev.atomic_fetch_xor(words[1:], 0xF0, other)
    out[3] = dev.atomic_fetch_and(w32, 0x0F, other)
    out[4] = dev.atomic_compare_swap(words[2:], 0, 41, other)
    dev.atomic_add(f64, 1.5, other)
    dev.signal_op(words[3:], 9, dev.SIGNAL_SET, other)
    dev.barrier_all()


pgas.init()
me, other = pgas.my_pe(), 1 - pgas.my_pe()
assert pgas.info()["transports"][other] == "ibgda", pgas.info()["transports"]
big, src = pgas.zeros(4096, np.int64), pgas.zeros(4096, np.int64)
src.copy_to_device(np.arange(4096, dtype=np.int64) + 10000 * me)
words, w32, f64, flag = (pgas.zeros(4, np.int64), pgas.full(1, 0x33, np.int32), pgas.zeros(1, np.float64),
                         pgas.zeros(1, np.int64))
out = cuda.to_device(np.zeros(5, np.int64))
pgas.barrier_all()
remote_ops[1, 1](big, src, words, w32, f64, flag, other, out)
cuda.synchronize()
assert out.copy_to_host().tolist() == [7, 0, 0, 0x33, 0], out.copy_to_host()
expected = np.arange(4096) + 10000 * other
expected[1000:1020:2] = np.arange(10) + 10000 * other
assert (big.copy_to_host() == expected).all()
assert words.copy_to_host().tolist() == [5, 0xF0, 41, 9] and w32.copy_to_host()[0] == 0x33 & 0x0F
assert f64.copy_to_host()[0] == 1.5
pgas.barrier_all()                                              # both read words before the next add
assert pgas.atomic_fetch_add(words[:1], 1, other) == 5          # host atomics: a kernel on the NIC path
pgas.barrier_all()
dest = pgas.zeros(2, np.int64)
pgas.fcollect(pgas.TEAM_WORLD, dest, words[:1])                # device collective over the NIC
assert dest.copy_to_host().tolist() == [6, 6], dest.copy_to_host()
pgas.sum_reduce(pgas.TEAM_WORLD, dest[:1], words[:1])           # across nodes: through host memory
assert dest.copy_to_host()[0] == 12, dest.copy_to_host()
mine_of = pgas.zeros(1, np.int64)
pgas.sum_reducescatter(pgas.TEAM_WORLD, mine_of, dest)          # [12, 6] from each: my block of [24, 12]
assert mine_of.copy_to_host()[0] == (24, 12)[me], mine_of.copy_to_host()
pgas.sum_exscan(pgas.TEAM_WORLD, mine_of, mine_of)              # in place: 0 on PE 0, PE 0's 24 on PE 1
assert mine_of.copy_to_host()[0] == (0, 24)[me], mine_of.copy_to_host()
# host put/get to the other node: the host's queue pairs; local side in the heap (the NIC's
# window), host memory (registered), device memory outside the heap (pinned staging, in
# pieces: 5 MiB is two)
n = (5 << 20) // 8
wide, mine = pgas.zeros(n, np.int64), np.arange(n, dtype=np.int64) + 7 * me
pgas.barrier_all()
pgas.put(wide, mine, other)                                    # numpy
stream, fresh = cuda.stream(), pgas.zeros(100, np.int64)
fresh.copy_to_device(-np.arange(100, dtype=np.int64) - 100 * me, stream=stream)
pgas.put(big[:100], fresh, other, stream=stream)                 # symmetric, after the stream's copy
scratch = cuda.to_device(np.full(n, -1, np.int64))
pgas.barrier_all()
got = np.zeros(n, np.int64)
pgas.get(got, wide, other)
assert (got == np.arange(n) + 7 * me).all()
pgas.get(scratch, wide, other)                                   # device, not symmetric
assert (scratch.copy_to_host() == np.arange(n) + 7 * me).all()
pgas.put_nbi(wide, cuda.to_device(3 * mine), other)              # device, not symmetric
pgas.quiet()
pgas.barrier_all()
assert (wide.copy_to_host() == 3 * (np.arange(n) + 7 * other)).all()
assert (big.copy_to_host()[:100] == -np.arange(100) - 100 * other).all()
pgas.put_signal(big[200:210], fresh[:10], words[3:], 12, pgas.SIGNAL_SET, other)
pgas.signal_wait_until(words[3:], pgas.CMP_EQ, 12)
assert (big.copy_to_host()[200:210] == -np.arange(10) - 100 * other).all()   # the data before its signal
pgas.finalize()
print("ok")
"""


@pytest.mark.gpu
@pytest.mark.parametrize("wire", ["ucx", "mpi"])
def test_device_operations_across_nodes_go_through_the_gpu_initiated_nic_path(tmp_path, wire):
    """Two PEs as two nodes (sharing the GPU): device threads post their own WQEs to the
    emulated NIC (``_nic_device``), which reaches the GPU heaps through copies and
    its atomic kernel (``pgas/cuda/nic/_nic_host.py``); host put/get to the other node post on
    the host's queue pairs (``pgas/cuda/nic/_remote_rma.py``). The native NIC (wire ucx: it
    polls the GPU queues' rung words and calls libcuda from native code) and the NIC's
    thread over MPI."""
    script = tmp_path / "across_nodes.py"
    script.write_text(ACROSS_NODES)
    proc = pgasrun(2, "python", str(script), options=["--pes-per-node", "1", "--tag-output"],
                   env={**CUDA, "PGAS_NIC_WIRE": wire}, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert sorted(line for line in proc.stdout.splitlines() if line.endswith("ok")) == ["[0] ok", "[1] ok"]


PUT_SIGNAL_THEN_COPY = r"""
import sys
import numpy as np
import pgas, pgas.device as dev
from numba import cuda

THREADS, SYNC_FIRST = int(sys.argv[1]), sys.argv[2] == "1"


@cuda.jit
def send_and_wait(inbox, data, signal, other):
    dev.put_signal_block(inbox, data, signal, 1, dev.SIGNAL_ADD, other)
    if cuda.threadIdx.x == 0:
        dev.signal_wait_until(signal, dev.CMP_GE, 1)
    cuda.syncthreads()


pgas.init()
me, other = pgas.my_pe(), 1 - pgas.my_pe()
data, inbox, signal = pgas.full(1000, me + 1, np.float64), pgas.zeros(1000, np.float64), pgas.zeros(1, np.uint64)
send_and_wait[1, THREADS](inbox, data, signal, other)
if SYNC_FIRST:
    cuda.synchronize()
assert (inbox.copy_to_host() == other + 1).all()     # a pageable copy queued behind the kernel at once
pgas.barrier_all()
pgas.finalize()
print("ok")
"""


@pytest.mark.gpu
@pytest.mark.parametrize("threads", [1, 32])
@pytest.mark.parametrize("sync_first", [True, False], ids=["synchronized", "copy-at-once"])
def test_a_block_put_signal_to_another_node_completes_while_the_host_copies_from_the_gpu(tmp_path, threads,
                                                                                       sync_first):
    """What examples/ring_allreduce.py does across nodes, which hung on the first GPU run
    (docs/gpu.md, "GPU runs so far"): a put_signal_block of 8000 bytes to the other node and
    a wait for the other's, with the host copying the result back right after the launch
    (a pageable copy on the legacy stream, queued behind the kernel, while the NIC's own
    copies of GPU memory must run) or after cuda.synchronize(); one thread or a warp."""
    script = tmp_path / "put_signal_then_copy.py"
    script.write_text(PUT_SIGNAL_THEN_COPY)
    proc = pgasrun(2, "python", str(script), str(threads), "1" if sync_first else "0",
                   options=["--pes-per-node", "1", "--tag-output"], env={**CUDA, "PGAS_TIMEOUT": "10"}, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert sorted(line for line in proc.stdout.splitlines() if line.endswith("ok")) == ["[0] ok", "[1] ok"]
