"""``python -m pgas.bench across_nodes``: each across-node goal measured beside MPI and judged
(a short run on emulated nodes; the figures between two hosts: docs/benchmarks.md)."""
import re

from conftest import backend_in_use, pgasrun

SHORT = ("--iters", "50", "--device-iters", "5", "--messages", "64", "--max-bytes", "4k", "--idle-seconds", "0.5")


def _rows(stdout: str) -> list[tuple[int, str, str]]:
    """(point, what, holds) of each row of the report."""
    return [(int(m[1]), m[2].strip(), m[3]) for m in re.finditer(r"^\s*([1-5])  (.+?)\s{2,}.*\s(yes|NO)$", stdout,
                                                                re.M)]


def test_two_pes_on_two_nodes_judge_every_point_beside_mpi(clean_shm):
    proc = pgasrun(2, "python", "-m", "pgas.bench", "across_nodes", *SHORT, options=["--pes-per-node", "1"],
                   timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = _rows(proc.stdout)
    by_point = {point: [what for p, what, _ in rows if p == point] for point in range(1, 6)}
    assert len(by_point[1]) == 4                       # put+quiet and get, 8 B and 4 KiB
    if backend_in_use() == "simulator":
        assert len(by_point[2]) == 2 + 4 * 5 + 4       # 2 latencies, 4 kinds x 5 thread counts, 4 vs the proxy
    else:                                              # (the simulator's threads against its proxy)
        assert not by_point[2] and "simulator backend only" in proc.stdout, proc.stdout
    assert len(by_point[3]) == 3 * 2                   # 3 collectives x 8 B and 4 KiB (--max-bytes 4k)
    assert by_point[4] == ["host put 4 KiB (GB/s; put/MPI)"]
    assert len(by_point[5]) == 2 * 2                   # each PE: its runtime threads idle, its main thread waiting
    held = sum(holds == "yes" for _, _, holds in rows)
    assert f"rows holding: {held} of {len(rows)}" in proc.stdout, proc.stdout


def test_one_node_is_refused_with_the_command_to_use(clean_shm):
    proc = pgasrun(2, "python", "-m", "pgas.bench", "across_nodes", *SHORT, timeout=120)
    assert proc.returncode != 0
    assert "across_nodes needs PEs on 2 or more nodes" in proc.stdout + proc.stderr
