"""The cuda backend on a real GPU (marked gpu: skipped unless PGAS_BACKEND=cuda and a GPU
is usable). The GPU run, documented in docs/gpu.md, is

    PGAS_BACKEND=cuda python -m pytest -q

which also runs every PE check suite and example on the GPU; this file adds what only
the cuda backend has. Several PEs share one GPU when the machine has one.
"""
import pytest

from conftest import assert_check_passed, check_names, pgasrun

CUDA = {"PGAS_BACKEND": "cuda"}
GPU_CASES = [(n, name) for n in (2, 4) for name in check_names("checks_gpu")]
EXAMPLES = [("shift.py", "PE 3 received 2"), ("ring.py", "the message came back round 4 PEs"),
            ("ring_allreduce.py", "matches numpy on every PE"), ("atomic_counter.py", "items done exactly once")]


@pytest.mark.gpu
@pytest.mark.parametrize("n,name", GPU_CASES, ids=[f"{n}pe-{c}" for n, c in GPU_CASES])
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
