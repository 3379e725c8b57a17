"""Runs every ``check_*`` of one or more PE check modules on this PE, recording each outcome.

    pgasrun -np N python tests/pe/runner.py RESULTS_DIR MODULE_FILE [MODULE_FILE ...]

The modules run one after another in one job (one start-up of the PEs for all of them:
the start-up, 2.5-3.5 s on these 2 cores, was a fifth of the suite's time when each
module had a job of its own). Checks run in file order on every PE; those marked
``simulator_only`` (``_util.py``) are recorded as skipped on the cuda backend. After each
one the PEs agree (over MPI's world, not pgas) whether it passed everywhere: a check that
failed on one PE leaves the PEs' collective calls out of step, so the rest, of its module
and of the modules after it, are then marked as not run rather than run into confusing
failures. With TESTS_KEEP_GOING=1 (the GPU run, where each minute counts) a check that
failed on every PE does not stop the rest, as long as the PEs still meet in a barrier
after it. The outcomes on this PE, ``{module: {check: outcome}}``, go to
RESULTS_DIR/pe<N>.json.
"""
import importlib.util
import json
import os
import sys
import traceback

import pytest

import pgas
from mpi4py import MPI

KEEP_GOING = os.environ.get("TESTS_KEEP_GOING") == "1"


def load(module_file: str):
    """The check module at ``module_file``, imported under its own name."""
    name = os.path.splitext(os.path.basename(module_file))[0]
    spec = importlib.util.spec_from_file_location(name, module_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def checks_of(module) -> list[str]:
    """The names of ``module``'s checks, in file order."""
    return [name for name in vars(module) if name.startswith("check_")]


def run_checks(module, results: dict) -> str | None:
    """Run ``module``'s checks into ``results``; the first one that failed on some PE
    (with those PEs), or None."""
    for name in checks_of(module):
        check = getattr(module, name)
        reason = getattr(check, "simulator_only", None)
        if reason and pgas.backend() != "simulator":
            results[name] = f"skipped: simulator only ({reason})"
            continue
        try:
            check()
            results[name] = "ok"
        except pytest.skip.Exception as skipped:
            results[name] = f"skipped: {skipped.msg}"
        except (Exception, pytest.fail.Exception):    # (pytest.raises' "DID NOT RAISE" is no Exception)
            results[name] = traceback.format_exc()
        passed = results[name] == "ok" or results[name].startswith("skipped: ")
        failed_on = [pe for pe, ok in enumerate(MPI.COMM_WORLD.allgather(passed)) if not ok]
        stop = f"{module.__name__}.{name} failed on PEs {failed_on}"
        if failed_on and not (KEEP_GOING and len(failed_on) == MPI.COMM_WORLD.Get_size()):
            return stop
        try:
            pgas.barrier_all()
        except pgas.PgasError:
            if not failed_on:
                raise
            return f"{stop}, and they did not meet after it"
    return None


def main(results_dir: str, module_files: list[str]) -> None:
    sys.path.insert(0, os.path.dirname(os.path.abspath(module_files[0])))
    modules = [load(path) for path in module_files]
    pgas.init()
    results = {module.__name__: {} for module in modules}
    failed = None
    for module in modules:
        outcomes = results[module.__name__]
        if failed is None:
            failed = run_checks(module, outcomes)
        for name in checks_of(module):
            outcomes.setdefault(name, f"not run: {failed}")
    with open(os.path.join(results_dir, f"pe{pgas.my_pe()}.json"), "w") as out:
        json.dump(results, out)
    pgas.finalize()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
