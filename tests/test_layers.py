"""The layers of pgas (docs/architecture.md), as the import-linter contracts in pyproject.toml
state them: each package imports only the packages below it, and no modules import each
other in a circle."""
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONTRACTS = 4   # pyproject.toml: the packages' layers, host's, cuda's, no circles
LINT = [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; "
                              "sys.exit(lint_imports_command())"]


def lint(where: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*LINT, "--no-cache"], cwd=where, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(where), "PATH": ""})


def test_the_package_keeps_its_layers():
    proc = lint(ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"{CONTRACTS} kept, 0 broken" in proc.stdout


@pytest.mark.parametrize("module, upward", [
    ("nic/_regions.py", "from ..runtime import _state"),       # the hardware calling up into the runtime
    ("core/_job.py", "from ..host.rma import _rma"),           # the shared core calling the user API
    ("sim/_heap.py", "from ..cuda.heap import _heap"),         # one backend reaching into the other
    ("host/memory/_memory.py", "from ..collectives import _collectives"),   # host memory calling up into collectives
    ("cuda/nic/_nic_host.py", "from ..heap import _heap"),     # the GPU's NIC path reaching back into the heap
])
def test_an_import_against_the_layers_breaks_the_contract(tmp_path, module, upward):
    shutil.copytree(ROOT / "pgas", tmp_path / "pgas", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    with open(tmp_path / "pgas" / module, "a") as f:
        f.write(f"\n{upward}  # noqa\n")
    proc = lint(tmp_path)
    assert proc.returncode == 1, proc.stdout[-3000:]
    # One upward import may break several contracts: a chain that leaves host/ or cuda/ and
    # comes back in breaks their own layers too.
    kept, broken = map(int, re.search(r"(\d+) kept, (\d+) broken", proc.stdout).groups())
    assert kept + broken == CONTRACTS and broken >= 1, proc.stdout[-3000:]
    importer = "pgas." + module[:-3].replace("/", ".")
    assert importer in proc.stdout, proc.stdout[-3000:]
