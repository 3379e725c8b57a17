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
    return re.findall(r"^pgas check: (?:data race|operation never completed|device collective calls differ).*\n"
                      r"(?:  .*\n?)+", output, re.M)


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
    device = marked(path, "DEVICE-MISMATCH")      # reported at finalize, each PE's call with its line
    assert race or incomplete or mismatch or device, "a catalogue program marks the lines it must be reported with"
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
    if device:
        expected = sorted(f"{name}:{line}" for line in (device * 2 if len(device) == 1 else device))
        assert [r for r in found if r.startswith("pgas check: device collective calls differ")
                and sorted(access_sites(r)) == expected], output
    if mismatch:
        assert "PEs disagree on a collective call" in output, output
        for line in mismatch:      # each PE's traceback points at the call it made
            assert f'{program}.py", line {line}' in output, output
    assert len(found) == (1 if race or incomplete or device else 0), output     # and nothing else
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
@pytest.mark.parametrize("module, n, options", [
    ("checks_device_rma", 3, ("--pes-per-node", "2")), ("checks_device_sync", 3, ("--pes-per-node", "2")),
    ("checks_signals", 3, ("--pes-per-node", "2")), ("checks_device_collectives", 2, ()),
    ("checks_collectives", 2, ())])
def test_suite_programs_run_clean_under_the_checker(module, n, options, clean_shm):
    """Every check passes and the checker reports nothing: 3 PEs, 2 on the first emulated
    node and 1 on the second; the (slower) collective suites on 2 PEs of one node."""
    suite = pe_suite(module, n, options=options, env=CHECKED)
    proc = suite["proc"]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    assert "pgas check: no problems found" in proc.stderr, proc.stderr[-6000:]
    failed = {pe: {k: v for k, v in r[module].items() if v != "ok" and not v.startswith("skipped")}
              for pe, r in suite["per_pe"].items()}
    assert len(failed) == n and not any(failed.values()), failed


def test_device_collectives_that_differ_are_reported_at_the_first_call_that_differs():
    from pgas.check._replay import replay
    team = ("team", 0)
    events = [(t, pe, ("host", 0), "collective", (team, call, f"x.py:{line}"))
              for t, (pe, call, line) in enumerate([(0, "fcollect(dest=int64[4])", 1), (1, "fcollect(dest=int64[4])", 1),
                                                    (0, "sum_reduce(dest=float64[8])", 2),
                                                    (1, "sum_reduce(dest=float64[4])", 2)])]
    (finding,) = replay(events)
    assert finding.kind == "collective" and finding.calls == (
        (0, "sum_reduce(dest=float64[8])", "x.py:2"), (1, "sum_reduce(dest=float64[4])", "x.py:2"), 2, 0)
    assert replay(events[:2]) == []
