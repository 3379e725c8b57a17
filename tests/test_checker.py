"""PGAS_CHECK=1 (docs/checker.md): each program of the catalogue (tests/check_catalogue) is
reported with the right source lines and fails the run; the examples and the suites'
programs (correct ones) run to the end with nothing reported."""
import re
import sys

import pytest

from conftest import ROOT, backend_in_use, pe_suite, pgasrun

CATALOGUE = ROOT / "tests" / "check_catalogue"
PES = {"two_pes_put_to_one_place": 3}     # programs that need more than 2 PEs
CHECKED = {"PGAS_CHECK": "1"}
# what the report must say would order the two accesses, for some programs
ADVICE = {"read_after_put_without_sync": "nothing orders them: PE 0 and PE 1 do not synchronize",
          "flag_before_data_without_fence": "and the p at tests/check_catalogue/flag_before_data_without_fence.py:13 "
                                            "that PE 1 waited for: the put may not be delivered yet",
          "put_nbi_source_reused": "no quiet between the put_nbi at",
          "two_puts_without_fence": "may be delivered before the put at",
          "nbi_never_completed": "no quiet (or barrier) completes it before finalize"}

simulator = pytest.mark.skipif(backend_in_use() != "simulator", reason="the checker runs on the simulator backend")


def marked(path, marker: str) -> list[int]:
    """The numbers of the lines of ``path`` that carry ``# marker``."""
    return [n for n, line in enumerate(path.read_text().splitlines(), 1) if f"# {marker}" in line]


def reports(output: str) -> list[str]:
    """The checker's reports in a run's output, each with its indented lines."""
    return re.findall(r"^pgas check: (?:data race|operation never completed).*\n(?:  .*\n?)+", output, re.M)


def access_sites(report: str) -> list[str]:
    """The ``file:line`` of each access a report names."""
    return re.findall(r"^  .* at (\S+:\d+)$", report, re.M)


@simulator
@pytest.mark.parametrize("program", sorted(p.stem for p in CATALOGUE.glob("*.py")))
def test_catalogue_program_is_reported_with_its_lines(program, clean_shm):
    path = CATALOGUE / f"{program}.py"
    proc = pgasrun(PES.get(program, 2), sys.executable, str(path), env=CHECKED, timeout=180)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    name = f"tests/check_catalogue/{program}.py"     # sites are relative to the working directory
    race, incomplete, mismatch = marked(path, "RACE-A") + marked(path, "RACE-B"), marked(path, "INCOMPLETE"), \
        marked(path, "MISMATCH")
    assert race or incomplete or mismatch, "a catalogue program marks the lines it must be reported with"
    found = reports(output)
    if race:
        expected = sorted(f"{name}:{line}" for line in race)
        assert [r for r in found if r.startswith("pgas check: data race")
                and sorted(access_sites(r)) == expected], output
        assert "data race(s)" in output and "the run fails" in output
        # every PE finished; pgasrun says why the run failed (it stopped nobody)
        assert "pgasrun: every PE finished pgas.finalize, where PGAS_CHECK=1 found problems" in output, output
    if incomplete:
        assert [r for r in found if r.startswith("pgas check: operation never completed")
                and access_sites(r) == [f"{name}:{incomplete[0]}"]], output
    if mismatch:
        assert "PEs disagree on a collective call" in output, output
        for line in mismatch:      # each PE's traceback points at the call it made
            assert f'{program}.py", line {line}' in output, output
    assert len(found) == (1 if race or incomplete else 0), output     # and nothing else
    if program in ADVICE:
        assert ADVICE[program] in found[0], found[0]


@simulator
@pytest.mark.parametrize("n, options", [(2, ()), (4, ("--pes-per-node", "2"))], ids=["2-pes", "4-pes-2-nodes"])
@pytest.mark.parametrize("example", ["shift", "ring", "atomic_counter", "ring_allreduce"])
def test_examples_run_clean_under_the_checker(example, n, options, clean_shm):
    """On one node (load/store), and 2 PEs per emulated node (the NIC between nodes)."""
    proc = pgasrun(n, "python", f"examples/{example}.py", options=list(options), env=CHECKED, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "pgas check: no problems found" in proc.stderr, proc.stderr


@simulator
@pytest.mark.parametrize("module", ["checks_device_rma", "checks_device_sync", "checks_signals",
                                    "checks_device_collectives", "checks_collectives"])
def test_suite_programs_run_clean_under_the_checker(module, clean_shm):
    """3 PEs, 2 on the first emulated node and 1 on the second: every check passes and
    the checker reports nothing."""
    suite = pe_suite(module, 3, options=("--pes-per-node", "2"), env=CHECKED)
    proc = suite["proc"]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    assert "pgas check: no problems found" in proc.stderr, proc.stderr[-6000:]
    failed = {pe: {k: v for k, v in r.items() if v != "ok" and not v.startswith("skipped")}
              for pe, r in suite["per_pe"].items()}
    assert len(failed) == 3 and not any(failed.values()), failed


def test_the_checker_is_refused_on_the_cuda_backend(monkeypatch):
    import pgas
    from pgas import check
    monkeypatch.setenv("PGAS_CHECK", "1")
    monkeypatch.setattr(check, "backend_name", lambda: "cuda")
    with pytest.raises(pgas.PgasConfigError, match=r"PGAS_CHECK=1: the checker runs on the simulator backend only"):
        check.refuse_on_gpu()
    monkeypatch.setenv("PGAS_CHECK", "0")
    check.refuse_on_gpu()
