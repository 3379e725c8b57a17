"""``pgas.info()`` and the ``pgas-info`` command."""
from __future__ import annotations

import argparse
import os

from .. import __version__
from .._backend import backend_name
from .._env import VARIABLES, setting
from ._runtime import runtime

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
    }
    if rt.on_gpu:
        facts["gpu"] = rt.heap.device   # the device index this PE uses (among the visible ones)
    return facts


def main(argv=None) -> int:
    """Print version, backend, transports, heap size and every PGAS_* variable."""
    argparse.ArgumentParser(prog="pgas-info", description=main.__doc__).parse_args(argv)
    print(f"pgas {__version__}")
    print(f"backend: {backend_name()} (PGAS_BACKEND={setting('PGAS_BACKEND')})")
    print("transports: p2p (load/store between the PEs of a node); to PEs on other nodes: "
          f"{setting('PGAS_REMOTE_TRANSPORT')} (PGAS_REMOTE_TRANSPORT), through the emulated NIC")
    print(f"symmetric heap per PE: {setting('PGAS_SYMMETRIC_SIZE')} bytes")
    print("environment:")
    for var in VARIABLES.values():
        value = os.environ.get(var.name)
        shown = value if value is not None else f"{var.default} (default)" if var.default else "(unset)"
        print(f"  {var.name}={shown}\n      {var.meaning}")
    return 0
