"""Runs every ``check_*`` of a PE check module on this PE, recording each outcome.

    pgasrun -np N python tests/pe/runner.py MODULE_FILE RESULTS_DIR

Checks run in file order on every PE; those marked ``simulator_only`` (``_util.py``) are
recorded as skipped on the cuda backend. After each one the PEs agree (over MPI's world,
not pgas) whether it passed everywhere: a check that failed on one PE leaves the PEs'
collective calls out of step, so the rest are then marked as not run rather than run
into confusing failures. The outcome on this PE goes to RESULTS_DIR/pe<N>.json.
"""
import importlib.util
import json
import os
import sys
import traceback

import pytest

import pgas
from mpi4py import MPI


def main(module_file: str, results_dir: str) -> None:
    sys.path.insert(0, os.path.dirname(os.path.abspath(module_file)))
    spec = importlib.util.spec_from_file_location("pe_checks", module_file)
    checks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(checks)
    pgas.init()
    names = [n for n in vars(checks) if n.startswith("check_")]
    results = {}
    for index, name in enumerate(names):
        check = getattr(checks, name)
        reason = getattr(check, "simulator_only", None)
        if reason and pgas.backend() != "simulator":
            results[name] = f"skipped: simulator only ({reason})"
            continue
        try:
            check()
            results[name] = "ok"
        except pytest.skip.Exception as skipped:
            results[name] = f"skipped: {skipped.msg}"
        except Exception:
            results[name] = traceback.format_exc()
        passed = results[name] == "ok" or results[name].startswith("skipped: ")
        failed_on = [pe for pe, ok in enumerate(MPI.COMM_WORLD.allgather(passed)) if not ok]
        if failed_on:
            for later in names[index + 1:]:
                results[later] = f"not run: {name} failed on PEs {failed_on}"
            break
        pgas.barrier_all()
    with open(os.path.join(results_dir, f"pe{pgas.my_pe()}.json"), "w") as out:
        json.dump(results, out)
    pgas.finalize()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
