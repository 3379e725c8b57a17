"""``pgas.info()`` and the ``pgas-info`` command."""
from __future__ import annotations

import argparse
import os

from ..core._version import __version__
from ..core._backend import backend_name
from ..core._env import VARIABLES, invalid_settings, setting, unknown_settings
from ..core.native._object_cache import where_kept
from ..runtime._state import runtime
from ..wire._worker import version as ucx_version
from ..wire._ucp import loads as ucx_loads

__all__ = ["info"]  # main is the pgas-info entry point, not API


def info() -> dict:
    """Version, backend, heap size and use, and the transport to each PE."""
    rt = runtime("pgas.info")
    facts = {
        "version": __version__,
        "backend": backend_name(),
        "my_pe": rt.my_pe,
        "n_pes": rt.n_pes,
        "node_of_pe": list(rt.boot.node_of),
        "heap_size": rt.allocator.size,
        "heap_used": rt.allocator.bytes_used,
        "heap_free": rt.allocator.bytes_free,
        "transports": dict(enumerate(rt.transports.kinds)),
        "memory_regions": rt.transports.regions(),
        "ucx_transports": _ucx_transports(rt),
        "ucx_memory": rt.transports.ucx_memory(),
    }
    if rt.on_gpu:
        facts["gpu"] = rt.heap.device   # the device index this PE uses (among the visible ones)
    return facts


def _ucx_transports(rt) -> dict[int, str]:
    """PE -> the UCX transports that reach it from this PE ("tcp/eth0 cma/memory"), for
    the PEs reached over UCX (the ucx engine, or the native NIC of the ibgda and proxy
    paths); empty when neither is in use."""
    transports = rt.transports
    engine = transports.engines.get("ucx") if transports.remote_transport == "ucx" else transports.native
    return {} if engine is None else engine.transports()


def _transport_table() -> str | None:
    """Under pgasrun (several PEs): the transport from every PE to every PE, on PE 0."""
    if int(os.environ.get("PMI_SIZE", "1")) < 2:
        return None
    from ._init import finalize, init
    init()
    rt = runtime("pgas-info")
    rows = rt.boot.comm.gather((rt.transports.kinds, _ucx_transports(rt)), root=0)
    memory = rt.transports.ucx_memory()
    finalize()
    if rows is None:
        return ""
    width = max(len(kind) for row, _ in rows for kind in row) + 1
    header = "from \\ to".rjust(10) + " " + "".join(f"{pe:>{width}}" for pe in range(len(rows)))
    lines = [f"{pe:>10} " + "".join(f"{kind:>{width}}" for kind in row) for pe, (row, _) in enumerate(rows)]
    wires = [f"  PE {pe} -> PE {peer}: {lanes}" for pe, (_, ucx) in enumerate(rows) for peer, lanes in ucx.items()]
    if wires:
        wires.insert(0, "UCX transports of the endpoints to PEs on other nodes (one-sided puts and gets take their "
                        "RMA lanes):")
    if memory:
        wires.append(f"UCX registers memory of types: {', '.join(memory['memory_types'])} (ucp_context_query); "
                     f"PE 0's heap: {memory['heap']}")
    return "\n".join(["transport from each PE to each PE:", header, *lines, *wires])


def main(argv=None) -> int:
    """Print version, backend, transports, heap size and every PGAS_* variable. Under
    pgasrun (``pgasrun -np 4 --pes-per-node 2 pgas-info``) also the transport from every PE
    to every PE, printed once. A variable with a bad value is marked, and the status is 1."""
    argparse.ArgumentParser(prog="pgas-info", description=main.__doc__).parse_args(argv)
    bad = invalid_settings()
    if bad:
        print(f"pgas {__version__}: {len(bad)} PGAS_* variable{'s' if len(bad) > 1 else ''} "
              "cannot be used (marked below); fix or unset them")
        _print_environment(bad)
        return 1
    table = _transport_table()
    if table == "":
        return 0        # a PE other than 0: PE 0 prints for everyone
    print(f"pgas {__version__}")
    print(f"backend: {backend_name()} (PGAS_BACKEND={setting('PGAS_BACKEND')})")
    remote = setting("PGAS_REMOTE_TRANSPORT")
    native = setting("PGAS_NIC_WIRE") == "ucx" and ucx_loads()
    executes = "native code executes them over UCX" if native else "the emulated NIC's thread executes them over MPI"
    how = {"ucx": "one-sided UCX puts and gets, UCX active messages for the rest",
           "proxy": f"a CPU proxy thread posts WQEs; {executes}",
           "ibgda": f"device threads post WQEs; {executes}"}[remote]
    print(f"transports: p2p (load/store between the PEs of a node); to PEs on other nodes: {remote} "
          f"(PGAS_REMOTE_TRANSPORT), {how}")
    print(f"UCX, for the ucx engine and the native NIC: {ucx_version()}")
    print(table or "(run it under pgasrun, e.g. pgasrun -np 4 --pes-per-node 2 pgas-info, to see the "
                   "transport from each PE to each PE)")
    print(f"symmetric heap per PE: {setting('PGAS_SYMMETRIC_SIZE')} bytes")
    print(f"machine code of pgas's LLVM IR kept in: {where_kept()} (NUMBA_CACHE_DIR moves it)")
    _print_environment(bad)
    return 0


def _print_environment(bad: dict[str, str]) -> None:
    print("environment:")
    for warning in unknown_settings().values():
        print(f"  warning: {warning}")
    for var in VARIABLES.values():
        value = os.environ.get(var.name)
        shown = value if value is not None else f"{var.default} (default)" if var.default else "(unset)"
        mark = "   <-- NOT VALID: " + bad[var.name].split(" is not valid: ", 1)[1] if var.name in bad else ""
        print(f"  {var.name}={shown}{mark}\n      {var.meaning}")
