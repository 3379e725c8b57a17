"""``python -m pgas.bench collectives``: the collectives chosen with ``--collectives``, each
checked and timed beside MPI's (a short run; the figures: docs/benchmarks.md)."""
import re

from conftest import pgasrun


def test_alltoall_reducescatter_and_inscan_across_nodes_beside_mpi(clean_shm):
    proc = pgasrun(2, "python", "-m", "pgas.bench", "collectives", "--collectives", "alltoall,reducescatter,inscan",
                   "--max-bytes", "128", options=["--pes-per-node", "1"], timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"^\s+size\s+alltoall pgas\s+MPI\s+MPI/pgas reducescatter pgas\s+MPI\s+MPI/pgas\s+inscan pgas\s+"
                     r"MPI\s+MPI/pgas$", proc.stdout, re.M), proc.stdout
    rows = re.findall(r"^\s+(\d+ B)(?:\s+[\d.]+){9}$", proc.stdout, re.M)
    assert rows == ["8 B", "32 B", "128 B"], proc.stdout


def test_an_unknown_collective_is_refused_naming_the_choices(clean_shm):
    proc = pgasrun(1, "python", "-m", "pgas.bench", "collectives", "--collectives", "alltoall,gather", timeout=120)
    assert proc.returncode != 0
    assert ("argument --collectives: expected some of reduce, broadcast, fcollect, alltoall, reducescatter, "
            "inscan, got 'alltoall,gather'") in proc.stderr, proc.stderr
