"""What PGAS_CHECK=1 costs: each program run with and without the checker, side by side.

    python -m pgas.bench checker              # 4 PEs, best of 2 runs each
    python -m pgas.bench checker --pes 2 --repeats 3

Programs: the four examples, and a collective workload (``--rounds`` rounds of a 1 KiB
all-reduce, a broadcast and an fcollect from the host, then the same three from a kernel
on one block of 32 threads). Each is started with ``pgasrun`` (the simulator backend) twice per
repeat, PGAS_CHECK=0 and 1 alternately; the figures are whole runs (start-up, the
program, and under the checker the analysis at finalize) and the ratio is checked over
unchecked. Run it alone: the two cores are shared with every PE.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

WORKLOAD = '''
import sys
import numpy as np
import pgas
import pgas.device as dev
from numba import cuda


@cuda.jit
def collectives(dest, src, gathered):
    dev.sum_reduce_block(dev.TEAM_WORLD, dest, src)
    dev.broadcast_block(dev.TEAM_WORLD, dest, src, 0)
    dev.fcollect_block(dev.TEAM_WORLD, gathered, src)


pgas.init()
rounds = int(sys.argv[1])
src = pgas.full(128, pgas.my_pe(), np.float64)
dest = pgas.zeros(128, np.float64)
gathered = pgas.zeros(128 * pgas.n_pes(), np.float64)
for _ in range(rounds):
    pgas.reduce(pgas.TEAM_WORLD, dest, src, "sum")
    pgas.broadcast(pgas.TEAM_WORLD, dest, src, 0)
    pgas.fcollect(pgas.TEAM_WORLD, gathered, src)
for _ in range(max(rounds // 10, 1)):
    collectives[1, 32](dest, src, gathered)
pgas.barrier_all()
for a in (gathered, dest, src):
    pgas.free(a)
pgas.finalize()
'''


def _run(command: list[str], pes: int, checked: bool) -> float:
    env = {**os.environ, "PGAS_CHECK": "1" if checked else "0"}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pgas.launcher", "-np", str(pes), *command], env=env,
                          capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} (PGAS_CHECK={int(checked)}) failed:\n{proc.stderr[-3000:]}")
    if checked and "pgas check: no problems found" not in proc.stderr:
        raise SystemExit(f"{' '.join(command)}: the checker reported something:\n{proc.stderr[-3000:]}")
    return elapsed


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m pgas.bench checker", description=__doc__.splitlines()[0])
    parser.add_argument("--pes", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=200, help="host collective rounds of the workload")
    args = parser.parse_args(argv)
    workload = Path(os.environ.get("TMPDIR", "/tmp")) / f"pgas_checker_workload_{os.getpid()}.py"
    workload.write_text(WORKLOAD)
    programs = {f"examples/{p.name}": [sys.executable, str(p)] for p in sorted(EXAMPLES.glob("*.py"))}
    programs[f"collectives x{args.rounds}"] = [sys.executable, str(workload), str(args.rounds)]
    print(f"{args.pes} PEs; seconds per whole run (best of {args.repeats}); checked/unchecked")
    print(f"{'program':32} {'unchecked':>10} {'checked':>10} {'ratio':>7}")
    try:
        for label, command in programs.items():
            plain = min(_run(command, args.pes, False) for _ in range(args.repeats))
            checked = min(_run(command, args.pes, True) for _ in range(args.repeats))
            print(f"{label:32} {plain:10.2f} {checked:10.2f} {checked / plain:7.2f}", flush=True)
    finally:
        workload.unlink(missing_ok=True)
