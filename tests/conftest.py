"""Shared helpers: run programs on N PEs through pgasrun, check /dev/shm stays clean."""
from __future__ import annotations

import ast
import compileall
import glob
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PE_DIR = Path(__file__).resolve().parent / "pe"
PGASRUN = [sys.executable, "-m", "pgas.launcher"]
TEST_ENV = {"PGAS_TIMEOUT": "30", "PGAS_SYMMETRIC_SIZE": "256m"}


def pe_env(**extra) -> dict:
    """The environment for programs the tests start: short timeouts, a smaller heap."""
    env = {**os.environ, **TEST_ENV}
    env.pop("PYTHONUNBUFFERED", None)  # plain mpiexec passes writes on as they come: keep lines whole
    if extra.get("PGAS_BACKEND", env.get("PGAS_BACKEND")) == "cuda":
        env.pop("NUMBA_ENABLE_CUDASIM", None)  # set here if this process imported pgas first
    return {**env, **extra}


_gpu_probe: list = []


def gpu_usable_here() -> bool:
    """True when a GPU is usable. Asked once, in a child process, so that this one does
    not choose a backend."""
    if not _gpu_probe:
        probe = "import sys; from pgas.core._backend import gpu_usable; sys.exit(0 if gpu_usable() else 1)"
        env = {**pe_env(), "PGAS_BACKEND": "simulator"}
        _gpu_probe.append(subprocess.run([sys.executable, "-c", probe], env=env, cwd=ROOT).returncode == 0)
    return _gpu_probe[0]


def gpu_run() -> bool:
    """True for the GPU run (docs/gpu.md): the cuda backend (asked for, or picked by auto)
    and a usable GPU."""
    return os.environ.get("PGAS_BACKEND", "auto") in ("cuda", "auto") and gpu_usable_here()


_compiler_probe: list = []


def backend_in_use() -> str:
    """The backend (``"cuda"`` or ``"simulator"``) of the programs the tests start, as pgas
    picks it (pgas/core/_backend.py): PGAS_BACKEND where it names one; under auto (the default)
    cuda where a GPU is usable and NVVM is installed, else the simulator. Asked in child
    processes, once, so that this one does not choose a backend."""
    requested = os.environ.get("PGAS_BACKEND", "auto").strip().lower()
    if requested in ("cuda", "simulator"):
        return requested
    if not gpu_usable_here():
        return "simulator"
    if not _compiler_probe:
        probe = "import sys; from pgas.core._backend import gpu_compiler_found; sys.exit(0 if gpu_compiler_found() else 1)"
        env = {**pe_env(), "PGAS_BACKEND": "simulator"}
        _compiler_probe.append(subprocess.run([sys.executable, "-c", probe], env=env, cwd=ROOT).returncode == 0)
    return "cuda" if _compiler_probe[0] else "simulator"


CUDA_TRANSPORTS = ("ibgda",)     # the cuda backend's way to other nodes (docs/transports.md, "The cuda backend")
NOT_ON_CUDA = ("the cuda backend reaches other nodes only through ibgda (docs/transports.md, \"The cuda "
               "backend\"); this transport runs on the simulator backend")


def skip_on_cuda(reason: str) -> None:
    """Skip the calling test on the cuda backend, saying why."""
    if backend_in_use() == "cuda":
        pytest.skip(reason)


def pytest_runtest_logreport(report):
    """With TESTS_FAILURES_TO set, each failure's report is appended to that file as it
    happens (the GPU run keeps them even if its time runs out before pytest's summary); under
    pytest-xdist by the controller, which hears every worker's reports."""
    path = os.environ.get("TESTS_FAILURES_TO")
    if path and report.failed and not os.environ.get("PYTEST_XDIST_WORKER"):
        with open(path, "a") as failures:
            failures.write(f"=== {report.nodeid} ({report.when})\n{report.longreprtext}\n\n")


def pytest_collection_modifyitems(config, items):
    gpu_tests = [item for item in items if "gpu" in item.keywords]
    if gpu_tests and not gpu_run():
        skip = pytest.mark.skip(reason="needs a usable NVIDIA GPU and PGAS_BACKEND=cuda (see docs/gpu.md)")
        for item in gpu_tests:
            item.add_marker(skip)
    # a test of a transport the cuda backend lacks (its parameter "transport": "proxy", "ucx+mpi", ...)
    lacking = [item for item in items if hasattr(item, "callspec")
               and item.callspec.params.get("transport", "ibgda").partition("+")[0] not in CUDA_TRANSPORTS]
    if lacking and backend_in_use() == "cuda":
        for item in lacking:
            item.add_marker(pytest.mark.skip(reason=NOT_ON_CUDA))


# Every PE is a new process that imports pgas (and the PE checks): its modules compiled
# once here, their bytecode is read from __pycache__ by every PE after. Where
# PYTHONDONTWRITEBYTECODE is set (as in some containers) Python writes none itself, and
# each PE compiled about 120 modules from source: 0.3-0.5 s of a job of 2 PEs.
def pytest_sessionstart(session):
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        for folder in ("pgas", "tests/pe", "examples"):
            compileall.compile_dir(ROOT / folder, quiet=1)


# The offline compile for sm_90 (tests/offline/compile_for_gpu.py: 1.5-2.5 minutes of both
# cores) starts with the session at the lowest CPU priority (SCHED_IDLE, which its pool's
# processes inherit), so that it runs while the other tests leave the cores idle (they
# wait on PEs, sleeps and timeouts: a fifth of the suite's core time); its tests wait for
# what is left of it. Not under pytest-xdist (each worker would start one) nor in the GPU
# run (its init would take the GPU beside the tests): there it runs when its tests come.
OFFLINE_COMPILE = ROOT / "tests" / "offline" / "compile_for_gpu.py"
_offline_compile: dict = {}


def _offline_compile_command() -> tuple[list, dict]:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    return [sys.executable, str(OFFLINE_COMPILE)], {**env, "PGAS_BACKEND": "cuda"}


def pytest_collection_finish(session):
    if os.environ.get("PYTEST_XDIST_WORKER") or session.config.option.collectonly:
        return
    if not any(item.nodeid.startswith("tests/test_offline_gpu_compile.py") for item in session.items) or gpu_run():
        return
    command, env = _offline_compile_command()
    output = tempfile.TemporaryFile(mode="w+")
    errors = tempfile.TemporaryFile(mode="w+")
    _offline_compile.update(output=output, errors=errors, started=time.monotonic(), proc=subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=output, stderr=errors, start_new_session=True,
        preexec_fn=lambda: os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))))


def pytest_sessionfinish(session):
    proc = _offline_compile.get("proc")
    if proc is not None and proc.poll() is None:      # (the session ended before its tests)
        os.killpg(proc.pid, 9)
        proc.wait()


def offline_compile(timeout: float = 1200) -> subprocess.CompletedProcess:
    """The finished run of tests/offline/compile_for_gpu.py: the one started with the
    session (waited for), else one run now."""
    proc = _offline_compile.pop("proc", None)
    if proc is None:
        command, env = _offline_compile_command()
        return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    try:
        proc.wait(timeout=max(1.0, timeout - (time.monotonic() - _offline_compile["started"])))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.wait()
    output, errors = _offline_compile.pop("output"), _offline_compile.pop("errors")
    output.seek(0)
    errors.seek(0)
    return subprocess.CompletedProcess(proc.args, proc.returncode, output.read(), errors.read())


def pgasrun(n: int, *command: str, options=(), env=None, timeout: float = 240, stdin=subprocess.DEVNULL,
            input=None) -> subprocess.CompletedProcess:
    """Run ``command`` on ``n`` PEs with pgasrun; returns the finished process (text output).
    pgasrun's stdin: ``stdin`` (a file, default /dev/null), or a pipe carrying ``input``."""
    return subprocess.run([*PGASRUN, "-np", str(n), *options, *command], cwd=ROOT, env=pe_env(**(env or {})),
                          capture_output=True, text=True, timeout=timeout,
                          **({"input": input} if input is not None else {"stdin": stdin}))


def transport_env(path: str) -> dict:
    """The environment that selects a remote path: ``ibgda``, ``proxy`` or ``ucx``, and for the
    NIC's paths ``+mpi`` for the emulated NIC's thread over MPI instead of the native NIC."""
    transport, _, wire = path.partition("+")
    return {"PGAS_REMOTE_TRANSPORT": transport, **({"PGAS_NIC_WIRE": wire} if wire else {})}


def check_names(module: str) -> list[str]:
    """The ``check_*`` functions of tests/pe/<module>.py, in file order (read without importing)."""
    tree = ast.parse((PE_DIR / f"{module}.py").read_text())
    return [node.name for node in tree.body
            if isinstance(node, ast.FunctionDef) and node.name.startswith("check_")]


def in_jobs(cases, ids, job_of) -> list:
    """``cases`` as pytest parameters with their ``ids``, each marked with its job
    (``job_of(*case)``): under pytest-xdist's ``--dist loadgroup`` (the GPU run) a job's checks
    stay on one worker, where they share one run (``pe_suite``)."""
    return [pytest.param(*case, id=case_id, marks=pytest.mark.xdist_group(repr(job_of(*case))))
            for case, case_id in zip(cases, ids)]


_suite_results: dict[tuple, dict] = {}


def runner_command(results_dir, modules) -> tuple[str, ...]:
    """The command that runs tests/pe/<module>.py for each of ``modules`` in one job,
    writing each PE's outcomes into ``results_dir`` (``runner_results``)."""
    return (sys.executable, str(PE_DIR / "runner.py"), str(results_dir),
            *(str(PE_DIR / f"{module}.py") for module in modules))


def runner_timeout(modules, first: float) -> float:
    """Seconds for a job of ``modules``: ``first`` for the first, 120 for each after it."""
    return first + 120 * (len(modules) - 1)


def runner_results(results_dir) -> dict[int, dict]:
    """``{pe: {module: {check: outcome}}}`` of the PEs that finished (tests/pe/runner.py)."""
    per_pe = {}
    for path in glob.glob(os.path.join(results_dir, "pe*.json")):
        with open(path) as f:
            per_pe[int(Path(path).stem[2:])] = json.load(f)
    return per_pe


def pe_suite(modules, n: int, options=(), env=None) -> dict:
    """Run every check of tests/pe/<module>.py for each of ``modules`` (a name, or names
    to run in one job, in that order) on n PEs, once per session: ``{"proc": the finished
    job, "per_pe": {pe: {module: {check: outcome}}}}``."""
    modules = (modules,) if isinstance(modules, str) else tuple(modules)
    key = (modules, n, tuple(options), tuple(sorted((env or {}).items())))
    if key not in _suite_results:
        with tempfile.TemporaryDirectory() as results_dir:
            command = runner_command(results_dir, modules)
            try:
                proc = pgasrun(n, *command, options=options, env=env, timeout=runner_timeout(modules, 240))
            except subprocess.TimeoutExpired as e:     # kept: the job's other checks fail at once, not again
                proc = subprocess.CompletedProcess(command, "timed out", e.stdout or "", e.stderr or "")
            _suite_results[key] = {"proc": proc, "per_pe": runner_results(results_dir)}
    return _suite_results[key]


def assert_check_passed(module: str, n: int, name: str, options=(), env=None, together=None) -> None:
    """Check ``name`` of tests/pe/<module>.py passed on every one of n PEs; run in one job
    with the modules ``together`` (a sequence holding ``module``; default: alone)."""
    suite = pe_suite(together or (module,), n, options, env)
    proc, per_pe = suite["proc"], suite["per_pe"]
    if len(per_pe) != n:
        pytest.fail(f"the {', '.join(together or (module,))} suites did not finish on {n} PEs (exit "
                    f"{proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    outcomes = {pe: r[module].get(name) for pe, r in per_pe.items()}
    skipped = {o for o in outcomes.values() if str(o).startswith("skipped:")}
    if skipped:
        pytest.skip(skipped.pop()[len("skipped: "):])
    failures = {pe: o for pe, o in sorted(outcomes.items()) if o != "ok"}
    if failures:
        pytest.fail("\n".join(f"PE {pe}:\n{text}" for pe, text in failures.items()))


def pe_lines(proc) -> list[str]:
    """Tagged stdout lines ``"[pe] text"``, sorted. Under plain mpiexec Hydra tags every
    write, so unbuffered Python (text and newline written apart) also yields bare
    ``"[pe] "`` lines: dropped. (pgasrun's guards tag whole lines.)"""
    return sorted(line for line in proc.stdout.splitlines()
                  if line.startswith("[") and line.split("]", 1)[1].strip())


def shm_files() -> set[str]:
    return set(glob.glob("/dev/shm/pgas-*")) | set(glob.glob("/dev/shm/mpich_shm_*"))


def in_use(path: str) -> bool:
    """True if some process maps ``path`` or holds it open."""
    for proc in glob.glob("/proc/[0-9]*"):
        try:
            with open(f"{proc}/maps") as maps:
                if path in maps.read():
                    return True
            if any(os.readlink(fd) == path for fd in glob.glob(f"{proc}/fd/*")):
                return True
        except OSError:
            continue     # gone, or not ours to read
    return False


@pytest.fixture
def clean_shm():
    """Fails the test if it leaves pgas or MPICH files in /dev/shm. Under pytest-xdist (the
    GPU run, docs/gpu.md) other workers' jobs make and remove such files all the while: there
    a file counts as left only if it is still there a second later and no process uses it."""
    before = shm_files()
    yield
    left = shm_files() - before
    if left and os.environ.get("PYTEST_XDIST_WORKER"):
        time.sleep(1)
        left = {path for path in left & shm_files() if not in_use(path)}
    assert not left, f"left in /dev/shm: {sorted(left)}"
