"""Every check in tests/pe/checks_*.py, run through pgasrun on 1 to 5 PEs of one node, and
again across emulated nodes, where PEs on other nodes are reached through the NIC (the
GPU-initiated path and the CPU proxy, both through the emulated NIC, and the ucx engine)."""
import pytest

from conftest import assert_check_passed, check_names, in_jobs, transport_env

ALL_COUNTS = [1, 2, 4]     # an odd count runs across nodes (3 PEs, one per node) for each of them
MULTI_PE = [2, 3, 4]
# module -> (PE counts, extra environment)
MODULES = {
    "checks_memory": (ALL_COUNTS, {}),
    "checks_host_rma": (ALL_COUNTS, {}),
    "checks_device_rma": (ALL_COUNTS, {}),
    "checks_device_sync": (ALL_COUNTS, {}),
    "checks_device_peer": (ALL_COUNTS, {}),     # and across nodes, where peers are out of reach
    "checks_errors": (ALL_COUNTS, {}),
    "checks_atomics": (ALL_COUNTS, {}),
    "checks_signals": (ALL_COUNTS, {}),
    "checks_wakes": (ALL_COUNTS, {}),
    "checks_teams": (MULTI_PE, {}),
    "checks_debug": (MULTI_PE, {"PGAS_DEBUG": "1"}),
    "checks_collectives": ([1, 2, 3, 4, 5], {}),
    "checks_device_collectives": ([1, 2, 3, 5], {}),
    "checks_locks": ([1, 4], {}),
    "checks_scans": ([1, 4], {}),
}
# Emulated nodes: (PEs, PEs per node). 4 PEs as 2 nodes of 2 mix load/store and the NIC
# in one run; 3 PEs one per node send everything through the NIC. The GPU-initiated path
# (the default) runs every module on both, but the collectives, teams, scans and the debug
# checks on the mixed layout only (it holds both paths, and their split teams span nodes
# there too).
# The CPU proxy and the ucx engine run on the mixed layout the modules that drive a remote
# engine call by call (everything above them reaches any engine through the same
# Transports calls), to keep the suite short; so does the GPU-initiated path with the NIC's
# thread executing its WQEs over MPI (+mpi: the fallback where UCX cannot be loaded).
LAYOUTS = {"ibgda": [(4, 2), (3, 1)], "proxy": [(4, 2)], "ucx": [(4, 2)], "ibgda+mpi": [(4, 2)]}
MIXED_ONLY = {"checks_collectives", "checks_device_collectives", "checks_teams", "checks_scans", "checks_debug"}
ENGINE_MODULES = {"checks_host_rma", "checks_device_rma", "checks_device_sync", "checks_errors", "checks_atomics",
                 "checks_signals", "checks_locks", "checks_wakes"}
NOT_ON_PROXY = {"checks_device_sync"}    # the proxy takes the same Transports calls as from host code

CASES = [(module, n, name) for module, (counts, _) in MODULES.items() for n in counts
         for name in check_names(module)]
REMOTE_CASES = [(transport, module, n, per_node, name) for transport, layouts in LAYOUTS.items()
                for module in MODULES for n, per_node in layouts
                if (module not in MIXED_ONLY or per_node > 1) and (transport == "ibgda" or module in ENGINE_MODULES)
                and not (transport == "proxy" and module in NOT_ON_PROXY)
                for name in check_names(module)]


def job(module: str, n: int, transport=None, per_node=None) -> tuple:
    """The job a module's checks run in: (PEs, transport, PEs per node, extra environment)."""
    return n, transport, per_node, tuple(MODULES[module][1].items())


# The modules that run in one job (each job's start-up is seconds on these 2 cores), in
# MODULES' order: job -> modules.
JOBS: dict[tuple, list] = {}
for _key, _module in [(job(m, n), m) for m, n, _ in CASES] + [(job(m, n, t, k), m) for t, m, n, k, _ in REMOTE_CASES]:
    if _module not in JOBS.setdefault(_key, []):
        JOBS[_key].append(_module)


def together(module: str, n: int, transport=None, per_node=None) -> list:
    return JOBS[job(module, n, transport, per_node)]


@pytest.mark.parametrize("module,n,name", in_jobs(CASES, [f"{m}-{n}pe-{c}" for m, n, c in CASES],
                                                 lambda m, n, c: job(m, n)))
def test_on_pes(module, n, name):
    assert_check_passed(module, n, name, env=MODULES[module][1], together=together(module, n))


@pytest.mark.parametrize("transport,module,n,per_node,name",
                         in_jobs(REMOTE_CASES, [f"{t}-{m}-{n}pe-{k}per-node-{c}" for t, m, n, k, c in REMOTE_CASES],
                                 lambda t, m, n, k, c: job(m, n, t, k)))
def test_across_nodes(transport, module, n, per_node, name):
    assert_check_passed(module, n, name, options=("--pes-per-node", str(per_node)),
                        env={**MODULES[module][1], **transport_env(transport)},
                        together=together(module, n, transport, per_node))
