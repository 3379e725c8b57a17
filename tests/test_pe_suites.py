"""Every check in tests/pe/checks_*.py, run through pgasrun on 1, 2, 3 and 4 PEs."""
import pytest

from conftest import assert_check_passed, check_names

MODULES = ["checks_memory", "checks_host_rma", "checks_device_rma", "checks_device_sync", "checks_errors"]
PE_COUNTS = [1, 2, 3, 4]

CASES = [(module, n, name) for module in MODULES for n in PE_COUNTS for name in check_names(module)]


@pytest.mark.parametrize("module,n,name", CASES, ids=[f"{m}-{n}pe-{c}" for m, n, c in CASES])
def test_on_pes(module, n, name):
    assert_check_passed(module, n, name)
