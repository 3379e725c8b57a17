"""The examples, on 1 to 4 PEs, under pgasrun, plain mpiexec, and alone."""
import os
import subprocess
import sys

import pytest

from conftest import ROOT, gpu_usable_here, pe_lines, pgasrun, pe_env


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_shift(n, clean_shm):
    proc = pgasrun(n, "python", "examples/shift.py", options=["--tag-output"])
    assert proc.returncode == 0, proc.stderr
    assert pe_lines(proc) == sorted(f"[{pe}] PE {pe} received {(pe - 1) % n}" for pe in range(n))


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_ring(n, clean_shm):
    proc = pgasrun(n, "python", "examples/ring.py")
    assert proc.returncode == 0, proc.stderr
    total = n * (n - 1) // 2
    assert f"PE 0: the message came back round {n} PEs carrying {total} (expected {total})" in proc.stdout


def test_shift_under_plain_mpiexec(clean_shm):
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    proc = subprocess.run([mpiexec, "-n", "3", "-prepend-rank", sys.executable, "examples/shift.py"], cwd=ROOT,
                          env=pe_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert pe_lines(proc) == ["[0] PE 0 received 2", "[1] PE 1 received 0", "[2] PE 2 received 1"]
    if os.environ.get("PGAS_BACKEND", "auto") == "auto" and not gpu_usable_here():
        assert proc.stderr.count("using the simulator backend") == 1  # said once, not per PE


def test_shift_alone_is_one_pe(clean_shm):
    proc = subprocess.run([sys.executable, "examples/shift.py"], cwd=ROOT, env=pe_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "PE 0 received 0"


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_ring_allreduce(n, clean_shm):
    proc = pgasrun(n, "python", "examples/ring_allreduce.py")
    assert proc.returncode == 0, proc.stderr
    assert f"PE 0: ring all-reduce of {1000 * n} float64 over {n} PEs matches numpy on every PE" in proc.stdout


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_atomic_counter(n, clean_shm):
    proc = pgasrun(n, "python", "examples/atomic_counter.py")
    assert proc.returncode == 0, proc.stderr
    line = next(line for line in proc.stdout.splitlines() if line.startswith("PE 0: all"))
    assert line.startswith(f"PE 0: all 2000 items done exactly once by {n} PEs (items per PE: ")
    assert sum(int(k) for k in line.split(": ")[-1].rstrip(")").split(", ")) == 2000


EXAMPLE_CHECKS = {
    "shift.py": lambda n, out: all(f"PE {pe} received {(pe - 1) % n}" in out for pe in range(n)),
    "ring.py": lambda n, out: f"carrying {n * (n - 1) // 2} (expected {n * (n - 1) // 2})" in out,
    "ring_allreduce.py": lambda n, out: f"over {n} PEs matches numpy on every PE" in out,
    "atomic_counter.py": lambda n, out: f"all 2000 items done exactly once by {n} PEs" in out,
}


@pytest.mark.parametrize("per_node", [1, 2])
@pytest.mark.parametrize("example", sorted(EXAMPLE_CHECKS))
def test_examples_across_emulated_nodes(example, per_node, clean_shm):
    """Every example on 4 PEs as nodes of 1 (all through the NIC) and of 2 (mixed)."""
    proc = pgasrun(4, "python", f"examples/{example}", options=["--pes-per-node", str(per_node)])
    assert proc.returncode == 0, proc.stderr
    assert EXAMPLE_CHECKS[example](4, proc.stdout), proc.stdout
