"""pgasrun: usage errors, tagged output, timeouts, and the failure path."""
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import PGASRUN, ROOT, pe_env, pe_lines, pgasrun

FAILING = """
import os, sys, time
import pgas
pgas.init()
if pgas.my_pe() == 1:
    {action}
pgas.barrier_all()
pgas.finalize()
"""


@pytest.mark.parametrize("action,how", [
    ("raise ValueError('deliberate failure')", "PE 1 raised ValueError: deliberate failure"),
    ("os.kill(os.getpid(), 9)", "PE 1 was killed by signal 9 (SIGKILL)"),
    ("sys.exit(3)", "PE 1 exited with status 3"),
], ids=["raises", "killed", "exits-3"])
def test_a_failing_pe_ends_the_run_and_is_named(tmp_path, clean_shm, action, how):
    script = tmp_path / "fail.py"
    script.write_text(FAILING.format(action=action))
    start = time.monotonic()
    proc = pgasrun(3, "python", str(script), env={"PGAS_TIMEOUT": "120"})
    elapsed = time.monotonic() - start
    assert proc.returncode != 0
    assert f"pgasrun: {how}; the other PEs were stopped" in proc.stderr
    assert elapsed < 30, f"the run took {elapsed:.1f} s to end"


def test_timeout_stops_every_pe(tmp_path, clean_shm):
    script = tmp_path / "hang.py"
    script.write_text("import time, pgas\npgas.init()\ntime.sleep(60)\n")
    start = time.monotonic()
    proc = pgasrun(2, "python", str(script), options=["--timeout", "3"])
    assert proc.returncode == 124
    assert "the run took longer than --timeout 3 s" in proc.stderr
    assert time.monotonic() - start < 20


def test_sigterm_to_pgasrun_stops_every_pe(tmp_path, clean_shm):
    script = tmp_path / "hang.py"
    script.write_text("import time, pgas\npgas.init()\nprint('started', flush=True)\ntime.sleep(60)\n")
    proc = subprocess.Popen([*PGASRUN, "-np", "2", "python", str(script)], cwd=ROOT, env=pe_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "started"
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM
    assert "pgasrun: stopped by SIGTERM; every PE was stopped" in stderr
    assert time.monotonic() - start < 10
    assert not [p for p in running_command_lines() if str(script) in p]


def running_command_lines() -> list[str]:
    """Command lines of the running processes (from /proc)."""
    lines = []
    for path in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            lines.append(path.read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            pass
    return lines


def test_tag_output_prefixes_lines_with_the_pe(clean_shm):
    proc = pgasrun(2, "python", "examples/shift.py", options=["--tag-output"])
    assert proc.returncode == 0, proc.stderr
    assert pe_lines(proc) == ["[0] PE 0 received 1", "[1] PE 1 received 0"]


@pytest.mark.parametrize("args,message", [
    (["-np", "2"], "missing the command to run"),
    (["-np", "0", "python"], "-np must be at least 1, got 0"),
    (["-np", "100000", "python"], "-np 100000 is more than"),
    (["-np", "2", "--pes-per-node", "0", "python"], "--pes-per-node must be at least 1"),
    (["-np", "2", "--timeout", "-1", "python"], "--timeout must be a number of seconds > 0"),
    (["-np", "2", "no-such-command-here"], "command not found: 'no-such-command-here'"),
    (["-np", "2", "--hostfile", "/no/such/file", "python"], "--hostfile '/no/such/file' does not exist"),
    (["python"], "the following arguments are required: -np"),
])
def test_usage_errors(args, message):
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, "-m", "pgas.launcher", *args], capture_output=True, text=True)
    assert proc.returncode == 2
    assert message in proc.stderr
