"""pgasrun: usage errors, configuration errors, output, timeouts, and the failure paths."""
import glob
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pgas.launcher._pgasrun import _descendants
from conftest import PGASRUN, ROOT, backend_in_use, pe_env, pe_lines, pgasrun

FAILING = """
import os, sys, time
import pgas
pgas.init()
if pgas.my_pe() == 1:
    {action}
pgas.barrier_all()
pgas.finalize()
"""


@pytest.mark.parametrize("action,how,code", [
    ("raise ValueError('deliberate failure')", "PE 1 raised ValueError: deliberate failure", 1),
    ("os.kill(os.getpid(), 9)", "PE 1 was killed by signal 9 (SIGKILL)", 128 + 9),
    ("os.kill(os.getpid(), 7)", "PE 1 was killed by signal 7 (SIGBUS): a bus error, which on pgas's heap means "
                                "/dev/shm ran out of room (see df /dev/shm; docker: --shm-size) or "
                                "PGAS_SYMMETRIC_SIZE is larger than it can hold", 128 + 7),
    ("sys.exit(3)", "PE 1 exited with status 3", 3),
    ("os._exit(3)", "PE 1 exited with status 3", 3),
], ids=["raises", "killed", "bus-error", "exits-3", "os-exit-3"])
def test_a_failing_pe_ends_the_run_with_its_status_and_is_named(tmp_path, clean_shm, action, how, code):
    script = tmp_path / "fail.py"
    script.write_text(FAILING.format(action=action))
    start = time.monotonic()
    proc = pgasrun(4, "python", str(script), env={"PGAS_TIMEOUT": "120"})
    elapsed = time.monotonic() - start
    assert proc.returncode == code, proc.stderr
    assert f"pgasrun: {how}; the other PEs were stopped" in proc.stderr
    assert elapsed < 30, f"the run took {elapsed:.1f} s to end"


@pytest.mark.parametrize("action", ["sys.exit(0)", "os._exit(0)", "pass  # falls off the end"],
                         ids=["sys-exit-0", "os-exit-0", "returns"])
def test_a_pe_that_leaves_before_finalize_ends_the_run_and_is_named(tmp_path, clean_shm, action):
    script = tmp_path / "leave.py"
    script.write_text("import os, sys, pgas\npgas.init()\nif pgas.my_pe() == 1:\n"
                      f"    {action}\nelse:\n    pgas.barrier_all()\n    pgas.finalize()\n")
    start = time.monotonic()
    proc = pgasrun(3, "python", str(script), env={"PGAS_TIMEOUT": "120"})
    elapsed = time.monotonic() - start
    assert proc.returncode == 1, proc.stderr
    if action == "os._exit(0)":     # skips MPI's finalize too: MPI may end the others first
        assert "pgasrun: PE 1 exited (status 0) before pgas.finalize" in proc.stderr
    else:
        assert ("pgasrun: PE 1 exited (status 0) before pgas.finalize while PEs [0, 2] wait in pgas.barrier_all; "
                "every PE was stopped") in proc.stderr
    assert elapsed < 20, f"the run took {elapsed:.1f} s to end"


STOPPED = """
import os, signal, time
from pathlib import Path
import numpy as np
import pgas
pgas.init()
a = pgas.zeros(4, np.int64)
pgas.barrier_all()
# A handshake through files, not pgas: PE 3 stops only once every PE has left the barrier
# (its last barrier message could still be in its NIC), and PE 0 asks only once PE 3 is stopped.
here = Path({here!r})
def wait_for(ready):
    while not ready():
        time.sleep(0.01)
(here / f"left-{{pgas.my_pe()}}").touch()
if pgas.my_pe() == 3:
    wait_for(lambda: all((here / f"left-{{pe}}").exists() for pe in range(3)))
    (here / "pe3.tmp").write_text(str(os.getpid()))
    os.rename(here / "pe3.tmp", here / "pe3.pid")
    os.kill(os.getpid(), signal.SIGSTOP)    # stops the PE and its NIC
elif pgas.my_pe() == 0:
    wait_for(lambda: (here / "pe3.pid").exists())
    stat = Path("/proc", (here / "pe3.pid").read_text(), "stat")
    wait_for(lambda: stat.read_text().rsplit(")", 1)[1].split()[0] == "T")
    # PE 3 is on the other node: through the NIC; an atomic needs its CPU (a get, one-sided, would not)
    pgas.atomic_fetch_add(a, 1, 3)
pgas.barrier_all()
pgas.finalize()
"""


def test_a_stopped_pe_is_named_as_where_the_waits_lead(tmp_path, clean_shm):
    # It used to end blaming only the PE that timed out first ("waited for PE 0 to release
    # the barrier"), PE 3 named nowhere.
    script = tmp_path / "stopped.py"
    script.write_text(STOPPED.format(here=str(tmp_path)))
    proc = pgasrun(4, "python", str(script), options=["--pes-per-node", "2"], env={"PGAS_TIMEOUT": "4"})
    assert proc.returncode == 1, proc.stderr
    summary = [line for line in proc.stderr.splitlines() if line.startswith("pgasrun: PE")]
    assert len(summary) == 1, proc.stderr
    assert "the waits lead to PE 3, which is stopped (SIGSTOP or Ctrl-Z): " in summary[0], summary
    assert "PE 0 (in pgas.atomic_fetch_add) waits for PE 3" in summary[0], summary


def test_pes_that_all_skip_finalize_complete_with_a_note(tmp_path, clean_shm):
    script = tmp_path / "no_finalize.py"
    script.write_text("import pgas\npgas.init()\npgas.barrier_all()\nprint('done', pgas.my_pe())\n")
    proc = pgasrun(2, "python", str(script))
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.splitlines()) == ["done 0", "done 1"]
    assert "pgasrun: note: PEs [0, 1] exited before pgas.finalize" in proc.stderr


def test_timeout_stops_every_pe(tmp_path, clean_shm):
    script = tmp_path / "hang.py"
    script.write_text("import time, pgas\npgas.init()\ntime.sleep(60)\n")
    start = time.monotonic()
    proc = pgasrun(2, "python", str(script), options=["--timeout", "3"])
    assert proc.returncode == 124
    assert "the run took longer than --timeout 3 s" in proc.stderr
    assert time.monotonic() - start < 20


def start_pgasrun(script: Path, program: str) -> subprocess.Popen:
    """pgasrun -np 2 on ``program`` (written to ``script``), once a PE has printed 'started'."""
    script.write_text(program)
    # Ctrl-C as at a terminal, even where the test runs in the background (which starts
    # every command with SIGINT ignored, and pgasrun would keep it so)
    proc = subprocess.Popen([*PGASRUN, "-np", "2", "python", str(script)], cwd=ROOT, env=pe_env(),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdout.readline().strip() == "started"
    return proc


HANGS = "import time, pgas\npgas.init()\nprint('started', flush=True)\ntime.sleep(60)\n"


def test_sigterm_to_pgasrun_stops_every_pe(tmp_path, clean_shm):
    script = tmp_path / "hang.py"
    proc = start_pgasrun(script, HANGS)
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM
    assert "pgasrun: stopped by SIGTERM; every PE was stopped" in stderr
    assert time.monotonic() - start < 10
    assert not [p for p in running_command_lines() if str(script) in p]


def test_a_second_ctrl_c_while_pgasrun_stops_the_run_changes_nothing(tmp_path, clean_shm):
    """The PEs ignore SIGTERM, so stopping them takes pgasrun's grace period (and SIGKILL);
    a second SIGINT then used to print a KeyboardInterrupt traceback instead of the summary."""
    script = tmp_path / "stubborn.py"
    hydra_files = set(glob.glob("/tmp/hydra_hwloc_xmlfile_*"))
    proc = start_pgasrun(script, "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n" + HANGS)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    assert stderr.count("pgasrun: interrupted; every PE was stopped") == 1, stderr
    assert not [p for p in running_command_lines() if str(script) in p]
    # Hydra's proxy, killed, used to leave its topology file behind
    assert not set(glob.glob("/tmp/hydra_hwloc_xmlfile_*")) - hydra_files


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


LINES = """
import sys, pgas
pgas.init()
me = pgas.my_pe()
for i in range(100):
    print("PE", me, "line", i)
    print("PE", me, "err", i, file=sys.stderr)
pgas.finalize()
"""


@pytest.mark.parametrize("tagged", [False, True], ids=["plain", "tagged"])
def test_output_lines_of_pes_never_glue_even_unbuffered(tmp_path, clean_shm, tagged):
    """print() writes the text and the newline apart when unbuffered: lines stay whole."""
    script = tmp_path / "lines.py"
    script.write_text(LINES)
    proc = pgasrun(4, "python", str(script), options=["--tag-output"] if tagged else [],
                   env={"PYTHONUNBUFFERED": "1"})
    assert proc.returncode == 0, proc.stderr
    tag = r"\[(\d)\] " if tagged else ""
    for stream, word in ((proc.stdout, "line"), (proc.stderr, "err")):
        lines = [line for line in stream.splitlines() if not line.startswith("pgas: using")]
        assert len(lines) == 400, stream[:2000]
        bad = [line for line in lines if not re.fullmatch(tag + rf"PE (\d) {word} \d+", line)]
        assert not bad, bad[:5]
        if tagged:
            assert all(re.fullmatch(r"\[(\d)\] PE \1 .*", line) for line in lines)


LONG_LINES = """
import sys, pgas
pgas.init()
me = pgas.my_pe()
for length in (4095, 4096, 4097, 10000, 100000, 1 << 20):
    for stream in (sys.stdout, sys.stderr):
        stream.write(str(me) * length + "\\n")
    print("short", me)
pgas.finalize()
"""


@pytest.mark.parametrize("tagged", [False, True], ids=["plain", "tagged"])
def test_long_lines_of_pes_never_glue(tmp_path, clean_shm, tagged):
    # Lines longer than 4096 bytes used to run together (1 MiB: 2-4 of 12 whole).
    script = tmp_path / "long_lines.py"
    script.write_text(LONG_LINES)
    proc = pgasrun(4, "python", str(script), options=["--tag-output"] if tagged else [],
                   env={"PYTHONUNBUFFERED": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    tag = r"\[(\d)\] " if tagged else ""
    for stream in (proc.stdout, proc.stderr):
        lines = [line for line in stream.splitlines() if not line.startswith("pgas: using")]
        long = [line for line in lines if "short" not in line]
        assert sorted(len(line) for line in long) == sorted(
            (len("[0] ") if tagged else 0) + n for n in (4095, 4096, 4097, 10000, 100000, 1 << 20) for _ in range(4))
        for line in long:
            body = re.sub(tag, "", line, count=1) if tagged else line
            assert len(set(body)) == 1, f"a line of {len(line)} bytes holds more than one PE's output"
            if tagged:
                assert line.startswith(f"[{body[0]}] ")
    shorts = [line for line in proc.stdout.splitlines() if "short" in line]
    assert len(shorts) == 24 and all(re.fullmatch(tag + r"short \d", line) for line in shorts), shorts[:5]


STDIN = """
import hashlib, sys, pgas
pgas.init()
data = sys.stdin.buffer.read()      # PE 0: pgasrun's stdin; the others: at once, nothing
print(pgas.my_pe(), len(data), hashlib.sha256(data).hexdigest())
pgas.finalize()
"""


@pytest.mark.parametrize("how", ["file", "pipe"])
def test_pe_0_reads_all_of_pgasruns_stdin_and_the_others_read_nothing(tmp_path, clean_shm, how):
    # The other PEs used to get a pipe that never closed (a read blocked for ever), and 100 KB
    # on stdin failed with Hydra's "process reading stdin too slowly".
    import hashlib
    script = tmp_path / "stdin.py"
    script.write_text(STDIN)
    data = bytes(range(256)) * (12 << 10)          # 3 MiB
    path = tmp_path / "input.bin"
    path.write_bytes(data)
    with open(path, "rb") as source:
        if how == "file":
            proc = pgasrun(3, "python", str(script), stdin=source, timeout=120)
        else:
            proc = subprocess.run([*PGASRUN, "-np", "3", "python", str(script)], cwd=ROOT, env=pe_env(),
                                  input=data, capture_output=True, timeout=120)
            proc.stdout, proc.stderr = proc.stdout.decode(), proc.stderr.decode()
    assert proc.returncode == 0, proc.stderr
    assert "not a pgas variable" not in proc.stderr, proc.stderr     # what pgasrun sets is known
    empty = hashlib.sha256(b"").hexdigest()
    assert sorted(proc.stdout.splitlines()) == [f"0 {len(data)} {hashlib.sha256(data).hexdigest()}",
                                               f"1 0 {empty}", f"2 0 {empty}"]


def test_pgasrun_help_and_bad_settings_are_one_line_each():
    env = {**pe_env(), "PGAS_BACKEND": "gpu", "PGAS_TIMEOUT": "-4", "PGAS_SYMMETRIC_SIZE": "0"}
    helped = subprocess.run([*PGASRUN, "--help"], env=env, capture_output=True, text=True)
    assert helped.returncode == 0 and "usage: pgasrun" in helped.stdout, helped.stderr
    proc = subprocess.run([*PGASRUN, "-np", "2", "python", "examples/shift.py"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "pgasrun: PGAS_BACKEND='gpu' is not valid: expected one of auto, cuda, simulator, got 'gpu'",
        "pgasrun: PGAS_SYMMETRIC_SIZE='0' is not valid: expected a byte count > 0, got '0'",
        "pgasrun: PGAS_TIMEOUT='-4' is not valid: expected a finite number of seconds > 0, got '-4'",
    ]
    assert proc.stdout == ""


def test_pgas_info_lists_every_variable_and_marks_the_bad_ones():
    env = {**pe_env(), "PGAS_BACKEND": "gpu", "PGAS_TIMEOUT": "nan"}
    proc = subprocess.run([sys.executable, "-c", "from pgas.host._info import main; raise SystemExit(main())"],
                          env=env, capture_output=True, text=True)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr + proc.stdout
    from pgas.core._env import VARIABLES
    for name in VARIABLES:
        assert f"  {name}=" in proc.stdout
    assert "PGAS_BACKEND=gpu   <-- NOT VALID: expected one of auto, cuda, simulator" in proc.stdout
    assert "PGAS_TIMEOUT=nan   <-- NOT VALID: expected a finite number of seconds > 0" in proc.stdout
    assert "2 PGAS_* variables cannot be used" in proc.stdout


def test_a_misspelt_variable_is_named_once_with_the_closest_known_one(tmp_path, clean_shm):
    """pgasrun warns once for all PEs; pgas-info lists it; a program started without pgasrun
    warns from PE 0 at init."""
    misspelt = {"PGAS_TIMOUT": "5", "PGAS_SYMETRIC_SIZE": "1g"}
    program = tmp_path / "prog.py"
    program.write_text("import pgas\npgas.init()\npgas.finalize()\n")
    proc = pgasrun(2, "python", str(program), env=misspelt)
    assert proc.returncode == 0, proc.stderr
    for wrong, right in (("PGAS_TIMOUT", "PGAS_TIMEOUT"), ("PGAS_SYMETRIC_SIZE", "PGAS_SYMMETRIC_SIZE")):
        warning = f"{wrong} is not a pgas variable and is ignored: did you mean {right}?"
        assert proc.stderr.count(warning) == 1, proc.stderr
        assert f"pgasrun: warning: {warning}" in proc.stderr
    info = subprocess.run([sys.executable, "-c", "from pgas.host._info import main; raise SystemExit(main())"],
                          env={**pe_env(), **misspelt}, capture_output=True, text=True)
    assert "  warning: PGAS_TIMOUT is not a pgas variable and is ignored: did you mean PGAS_TIMEOUT?" in info.stdout
    alone = subprocess.run([sys.executable, str(program)], env={**pe_env(), "PGAS_DEBG": "1"}, capture_output=True,
                           text=True, timeout=120)
    assert alone.returncode == 0, alone.stderr
    assert alone.stderr.count("pgas: warning: PGAS_DEBG is not a pgas variable and is ignored: did you mean "
                              "PGAS_DEBUG?") == 1, alone.stderr


# (message on the simulator, message on cuda): the heaps are sparse files on the one, GPU
# memory on the other; only the simulator keeps staging buffers and wake words in the heap
@pytest.mark.parametrize("setting,program,messages", [
    # that the heaps fit is checked, rather than found by a SIGBUS (or cuMemCreate's failure) later
    ("PGAS_SYMMETRIC_SIZE=100t", "", ("PGAS_SYMMETRIC_SIZE=100t: the symmetric heaps of the 3 PEs on this machine "
                                      "need 329853488332800 bytes of /dev/shm, which has",
                                      "PGAS_SYMMETRIC_SIZE=100t: the symmetric heaps of the 3 PEs on GPU 0 need "
                                      "329853488332800 bytes of its memory, which has")),
    ("PGAS_SYMMETRIC_SIZE=512", "", ("PGAS_SYMMETRIC_SIZE=512 is too small: pgas keeps 6163712 bytes of every "
                                     "PE's heap for its own synchronization words and the staging buffers of "
                                     "small collectives",
                                     "PGAS_SYMMETRIC_SIZE=512 is too small: pgas keeps 3072 bytes of every PE's heap "
                                     "for its own synchronization words (32 team slots on 3 PEs)")),
    ("", "os.environ['PGAS_TIMEOUT'] = '-4'", ("PGAS_TIMEOUT='-4' is not valid",) * 2),
], ids=["huge-heap", "tiny-heap", "set-by-the-program"])
def test_a_bad_setting_inside_the_pes_is_one_message(tmp_path, clean_shm, setting, program, messages):
    message = messages[backend_in_use() == "cuda"]
    script = tmp_path / "config.py"
    script.write_text(f"import os, pgas\n{program}\npgas.init()\npgas.finalize()\n")
    env = dict([setting.split("=", 1)]) if setting else {}
    proc = pgasrun(3, "python", str(script), env=env)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count(message) == 1, proc.stderr
    summary = [line for line in proc.stderr.splitlines() if message in line][0]
    assert summary.startswith("pgasrun: PE ") and " raised PgasConfigError: " in summary


def test_cleanup_spares_other_jobs_shared_memory(tmp_path, clean_shm):
    """A segment another job creates during this run is not this run's to remove."""
    go = tmp_path / "go"
    other = Path(f"/dev/shm/mpich_shm_otherjob{os.getpid()}")
    proc = start_pgasrun(tmp_path / "pause.py", "import os, time, pgas\npgas.init()\nprint('started', flush=True)\n"
                         f"while not os.path.exists({str(go)!r}): time.sleep(0.05)\n"
                         "pgas.barrier_all()\nraise SystemExit(5)\n")   # a failed run: the thorough sweep
    try:
        other.write_bytes(b"another job's segment, not mapped yet")
        go.touch()
        proc.communicate(timeout=60)
        assert proc.returncode == 5
        assert other.exists(), "pgasrun removed another job's shared-memory file"
    finally:
        other.unlink(missing_ok=True)


def test_kill_9_of_pgasrun_ends_every_pe(tmp_path, clean_shm):
    script = tmp_path / "orphan.py"
    hydra_files = set(glob.glob("/tmp/hydra_hwloc_xmlfile_*"))
    proc = start_pgasrun(script, HANGS)
    # The PEs removed Hydra's topology file at the end of init: the proxy SIGKILLs the
    # guards when mpiexec dies of pgasrun's end (a write to its closed pipe), sometimes
    # before they could clean up (1 run in 20 left it before)
    assert not set(glob.glob("/tmp/hydra_hwloc_xmlfile_*")) - hydra_files, "the topology file outlived init"
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 10
    while [p for p in running_command_lines() if str(script) in p] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in running_command_lines() if str(script) in p], "PEs outlived pgasrun"
    assert not _wait_for_no_new_topology_file(hydra_files), "Hydra's topology file left behind"


def _wait_for_no_new_topology_file(before: set, seconds: float = 10) -> set:
    """Hydra's topology files that appeared since ``before`` and are still there after up to ``seconds``."""
    deadline = time.monotonic() + seconds
    while set(glob.glob("/tmp/hydra_hwloc_xmlfile_*")) - before and time.monotonic() < deadline:
        time.sleep(0.1)
    return set(glob.glob("/tmp/hydra_hwloc_xmlfile_*")) - before


def test_kill_9_of_hydras_proxy_and_pgasrun_leaves_no_topology_file(tmp_path, clean_shm):
    """The order a loaded machine sometimes gives a kill -9 of pgasrun: the proxy dies first,
    so its guards are stopped before they see pgasrun's end (and the proxy, which opens its
    topology file only once the PEs' MPI asks for it, cannot be asked any more)."""
    script = tmp_path / "orphan.py"
    hydra_files = set(glob.glob("/tmp/hydra_hwloc_xmlfile_*"))
    proc = start_pgasrun(script, HANGS)
    proxies = [pid for pid in _descendants(proc.pid) if b"hydra_pmi_proxy" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    assert proxies, "no Hydra proxy of this run found"
    for pid in proxies:
        os.kill(pid, signal.SIGKILL)
    proc.kill()
    proc.wait()
    assert not _wait_for_no_new_topology_file(hydra_files), "Hydra's topology file left behind"


@pytest.mark.parametrize("command", [["--", "python"], ["python3"]], ids=["double-dash", "bare-python3"])
def test_command_after_double_dash_and_bare_python_uses_pgasruns_interpreter(clean_shm, command):
    """With PATH lacking this environment's bin/, a bare python would be one without pgas."""
    env = {**pe_env(), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([*PGASRUN, "-np", "2", *command, "examples/shift.py"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.splitlines()) == ["PE 0 received 1", "PE 1 received 0"]
