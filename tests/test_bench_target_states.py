"""``python -m pgas.bench target_states``: every request to a sleeping and a busy target,
beside MPI's (a short run on emulated nodes; the figures between two hosts: docs/benchmarks.md)."""
import re

from conftest import pgasrun


def test_each_request_to_a_sleeping_and_a_busy_pe_is_measured_beside_mpi(clean_shm):
    proc = pgasrun(2, "python", "-m", "pgas.bench", "target_states", "--seconds", "0.2",
                   options=["--pes-per-node", "1"], timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = re.findall(r"^(sleeps|busy)\s+(put\+quiet 8 B|get 8 B|atomic_fetch_add)\s+([\d,]+)\s", proc.stdout, re.M)
    assert [(state, name) for state, name, _ in rows] == [
        (state, name) for state in ("sleeps", "busy") for name in ("put+quiet 8 B", "get 8 B", "atomic_fetch_add")]
    assert all(int(rate.replace(",", "")) > 0 for _, _, rate in rows), proc.stdout   # pgas's requests completed


def test_it_needs_two_pes_on_two_nodes(clean_shm):
    proc = pgasrun(2, "python", "-m", "pgas.bench", "target_states", "--seconds", "0.1", timeout=120)
    assert proc.returncode != 0 and "needs 2 PEs on 2 nodes" in proc.stdout + proc.stderr
