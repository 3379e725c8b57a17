"""Every check in tests/pe/checks_*.py, run through pgasrun on 1, 2, 3 and 4 PEs."""
import pytest

from conftest import assert_check_passed, check_names

ALL_COUNTS = [1, 2, 3, 4]
MULTI_PE = [2, 3, 4]
# module -> (PE counts, extra environment)
MODULES = {
    "checks_memory": (ALL_COUNTS, {}),
    "checks_host_rma": (ALL_COUNTS, {}),
    "checks_device_rma": (ALL_COUNTS, {}),
    "checks_device_sync": (ALL_COUNTS, {}),
    "checks_errors": (ALL_COUNTS, {}),
    "checks_atomics": (ALL_COUNTS, {}),
    "checks_signals": (ALL_COUNTS, {}),
    "checks_teams": (MULTI_PE, {}),
    "checks_debug": (MULTI_PE, {"PGAS_DEBUG": "1"}),
    "checks_collectives": ([1, 2, 3, 4, 5, 6], {}),
    "checks_device_collectives": ([1, 2, 3, 5], {}),
}

CASES = [(module, n, name) for module, (counts, _) in MODULES.items() for n in counts
         for name in check_names(module)]


@pytest.mark.parametrize("module,n,name", CASES, ids=[f"{m}-{n}pe-{c}" for m, n, c in CASES])
def test_on_pes(module, n, name):
    assert_check_passed(module, n, name, env=MODULES[module][1])
