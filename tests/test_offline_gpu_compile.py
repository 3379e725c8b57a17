"""The cuda backend, proven without a GPU: everything compiles and links for sm_90."""
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT

SCRIPT = ROOT / "tests" / "offline" / "compile_for_gpu.py"


@pytest.fixture(scope="module")
def report():
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["PGAS_BACKEND"] = "cuda"
    proc = subprocess.run([sys.executable, str(SCRIPT)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_every_device_function_compiles_and_links_for_sm90(report):
    import_env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    names = subprocess.run(
        [sys.executable, "-c", "import pgas.device as d; print(' '.join(n for n in d.__all__ if callable(getattr(d, n))))"],
        env={**import_env, "PGAS_BACKEND": "cuda"}, capture_output=True, text=True, check=True).stdout.split()
    assert len(names) >= 90   # every public device function of API.md, with their forms
    assert report["backend"] == "cuda"
    assert report["failed"] == {}
    compiled = {label.split("[")[0] for label in report["compiled"]}
    assert set(names) <= compiled, sorted(set(names) - compiled)
    assert all(size > 0 for size in report["cubin_bytes"].values())


def test_float_and_integer_atomics_compile(report):
    for dtype in ("int32", "uint32", "int64", "uint64"):
        assert f"atomic_fetch_add[{dtype}]" in report["compiled"]
    for dtype in ("float32", "float64"):
        for name in ("atomic_fetch", "atomic_set", "atomic_swap", "atomic_compare_swap"):
            assert f"{name}[{dtype}]" in report["compiled"]


def test_waits_poll_with_acquire_loads_never_non_coherent_ones(report):
    assert set(report["waits"]) == {"wait_until", "signal_wait_until", "barrier_all", "sync_all", "barrier",
                                    "sync_block"}
    for name, loads in report["waits"].items():
        assert loads == {"acquire": True, "non_coherent": False}, name


def test_example_kernels_and_a_users_kernel_compile(report):
    for label in ("shift.shift", "ring.pass_along", "ring_allreduce.ring_allreduce", "atomic_counter.worker",
                  "user_kernel"):
        assert label in report["compiled"] and report["cubin_bytes"][label] > 0


def test_host_operation_kernels_compile(report):
    """Signals, waits, quiet, barriers and collectives that the host queues on a stream."""
    for name in ("signal_op", "signal_wait_until", "quiet", "barrier", "sync", "broadcast", "fcollect",
                 "alltoall", "sum_reduce", "prod_reducescatter", "xor_reduce"):
        assert report["cubin_bytes"].get(f"host.{name}", 0) > 0, (name, report["failed"].get(f"host.{name}"))


def test_init_says_why_it_cannot_run(report):
    if report["gpu_usable"]:
        assert report["init"] == "initialized"
    else:
        assert report["init"].startswith("pgas.init: PGAS_BACKEND=cuda, but no GPU is usable here")
