"""PEs on two real hosts: two network namespaces with their own host names, joined by a
veth pair, and ``pgasrun --hosts h1,h2`` starting PEs in both; MPI crosses the veth over TCP
and pgas reaches the other host through the NIC (ibgda, the default path). Needs root (``ip netns``); skips
with the reason elsewhere. The same commands by hand: docs/transports.md, "Two hosts".
"""
import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, PE_DIR, check_names, pe_env, runner_command, runner_results, runner_timeout

HOSTEXEC = """#!/bin/sh
# mpiexec's launcher in ssh's place: "hostexec [options] HOST CMD..." runs CMD inside HOST's
# network namespace, with HOST as its host name.
while [ "${1#-}" != "$1" ]; do shift; done
host=$1; shift
exec ip netns exec {prefix}$host unshare --uts sh -c 'hostname "$0"; exec sh -c "$*"' "$host" "$@"
"""


def _sh(*command: str) -> None:
    subprocess.run(command, check=True, capture_output=True, text=True)


@pytest.fixture(scope="module")
def two_hosts(tmp_path_factory):
    """Namespaces ``<prefix>h1`` and ``<prefix>h2`` (10.77.x.1 and .2); (launcher script, prefix)."""
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("unshare") is None:
        pytest.skip("two emulated hosts need root, ip (iproute2) and unshare")
    prefix = f"pgas{os.getpid() % 10000}-"
    subnet = f"10.77.{os.getpid() % 250}"
    try:
        for h in (1, 2):
            _sh("ip", "netns", "add", f"{prefix}h{h}")
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"cannot create network namespaces here: {exc.stderr.strip()}")
    hosts_files = []
    try:
        for h in (1, 2):
            _sh("ip", "-n", f"{prefix}h{h}", "link", "set", "lo", "up")
            etc = f"/etc/netns/{prefix}h{h}"
            os.makedirs(etc, exist_ok=True)
            hosts_files.append(etc)
            with open(f"{etc}/hosts", "w") as hosts:
                hosts.write(f"127.0.0.1 localhost\n{subnet}.1 h1\n{subnet}.2 h2\n")
        _sh("ip", "link", "add", f"{prefix}v1", "type", "veth", "peer", "name", f"{prefix}v2")
        for h in (1, 2):
            _sh("ip", "link", "set", f"{prefix}v{h}", "netns", f"{prefix}h{h}")
            _sh("ip", "-n", f"{prefix}h{h}", "addr", "add", f"{subnet}.{h}/24", "dev", f"{prefix}v{h}")
            _sh("ip", "-n", f"{prefix}h{h}", "link", "set", f"{prefix}v{h}", "up")
        hostexec = tmp_path_factory.mktemp("hosts") / "hostexec"
        hostexec.write_text(HOSTEXEC.replace("{prefix}", prefix))
        hostexec.chmod(0o755)
        yield str(hostexec), prefix
    finally:
        for h in (1, 2):
            subprocess.run(["ip", "netns", "del", f"{prefix}h{h}"], capture_output=True)
        for etc in hosts_files:
            shutil.rmtree(etc, ignore_errors=True)


def _on_two_hosts(hosts: tuple, n: int, *command: str, timeout: float = 300, env=None) -> subprocess.CompletedProcess:
    """pgasrun, started on h1, with PEs on h1 and h2 (mpiexec reaches h2 through ``hostexec``)."""
    hostexec, prefix = hosts
    env = pe_env(HYDRA_LAUNCHER="ssh", HYDRA_LAUNCHER_EXEC=hostexec, **(env or {}))
    on_h1 = ["ip", "netns", "exec", f"{prefix}h1", "unshare", "--uts", "sh", "-c", 'hostname h1; exec "$@"', "h1"]
    pgasrun = [sys.executable, "-m", "pgas.launcher", "-np", str(n), "--hosts", "h1,h2", "--tag-output"]
    return subprocess.run([*on_h1, *pgasrun, *command], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)



def test_shift_and_ring_between_two_hosts(two_hosts):
    proc = _on_two_hosts(two_hosts, 4, sys.executable, "-c",
                         "import socket, pgas; pgas.init(); "
                         "print(socket.gethostname(), sorted(set(pgas.info()['transports'].values())))")
    assert proc.returncode == 0, proc.stderr
    lines = sorted(proc.stdout.splitlines())
    assert len(lines) == 4 and {line.split()[1] for line in lines} == {"h1", "h2"}, lines
    assert all("'ibgda'" in line and "'self'" in line for line in lines), lines
    shift = _on_two_hosts(two_hosts, 4, sys.executable, "examples/shift.py")
    assert shift.returncode == 0, shift.stderr
    assert all(f"PE {pe} received {(pe - 1) % 4}" in shift.stdout for pe in range(4)), shift.stdout
    ring = _on_two_hosts(two_hosts, 3, sys.executable, "examples/ring.py")
    assert ring.returncode == 0, ring.stderr
    assert "the message came back round 3 PEs carrying 3 (expected 3)" in ring.stdout, ring.stdout


SUITES_BETWEEN_HOSTS = {"ibgda": ("checks_device_rma", "checks_atomics", "checks_signals"),
                        "ucx": ("checks_host_rma", "checks_device_rma", "checks_atomics", "checks_signals")}


@pytest.mark.parametrize("transport", SUITES_BETWEEN_HOSTS)
def test_pe_suites_between_two_hosts(two_hosts, tmp_path, transport):
    """The modules of a transport in one job (tests/pe/runner.py), 4 PEs as 2 per host."""
    modules = SUITES_BETWEEN_HOSTS[transport]
    proc = _on_two_hosts(two_hosts, 4, *runner_command(tmp_path, modules), env={"PGAS_REMOTE_TRANSPORT": transport},
                         timeout=runner_timeout(modules, 300))
    results = runner_results(tmp_path)
    assert len(results) == 4, proc.stdout[-3000:] + proc.stderr[-3000:]
    failed = {(pe, module, name): r for pe, per_pe in results.items() for module, outcomes in per_pe.items()
              for name, r in outcomes.items() if r != "ok" and not r.startswith("skipped")}
    assert not failed, failed
    assert all({module: set(outcomes) for module, outcomes in per_pe.items()}
               == {module: set(check_names(module)) for module in modules} for per_pe in results.values())


ONE_CHECK = """
import sys
sys.path.insert(0, sys.argv[1])
import pgas
import checks_collectives
pgas.init()
checks_collectives.check_small_calls_across_nodes_as_one_exchange_of_messages()
print(f"PE {pgas.my_pe()} ok", flush=True)
pgas.finalize()
"""


def test_small_collectives_between_two_hosts(two_hosts, tmp_path):
    # one exchange of MPI messages between the hosts (host/collectives/_mpi_exchange.py), and the
    # broadcast's two-level tree with a member on each host forwarding
    script = tmp_path / "one_check.py"
    script.write_text(ONE_CHECK)
    proc = _on_two_hosts(two_hosts, 4, sys.executable, str(script), str(PE_DIR))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert all(f"PE {pe} ok" in proc.stdout for pe in range(4)), proc.stdout[-3000:]
