"""All-reduce, broadcast and fcollect against MPI, size by size, in the same run.

    pgasrun -np 2 python -m pgas.bench collectives [--plot collectives.png] [--max-bytes 64m]
    pgasrun -np 4 python -m pgas.bench collectives

From 8 B to 64 MiB per PE, on TEAM_WORLD with ``algorithm="auto"``: ``pgas.reduce``
(float32 sum) against ``Allreduce``, ``pgas.broadcast`` from rank 0 in place (dest is
src, as MPI's one buffer) against ``Bcast``, and ``pgas.fcollect`` (that many bytes from
each PE) against ``Allgather``. At each size and for each collective pgas and MPI take
turns, batch after batch; a figure is the slowest PE's mean time per call in the best
batch. ``MPI/pgas`` above 1 means pgas is faster. Every result is checked once.
"""
from __future__ import annotations

import argparse

import numpy as np
from mpi4py import MPI

import pgas
from pgas.core._env import parse_size
from pgas.host._collectives import auto_algorithm
from pgas.runtime._state import runtime
from pgas.runtime._team_table import team_of

from ._plot import pyplot
from ._timing import human_bytes, slowest_pe_seconds

SIZES = [8 << (2 * k) for k in range(13)] + [64 << 20]     # 8 B, 32 B, ... 32 MiB, 64 MiB
COLLECTIVES = ("reduce", "broadcast", "fcollect")
BATCHES = 4


def _iterations(nbytes: int, n: int) -> int:
    return max(2, min(1000, (32 << 20) // (nbytes * n)))


def _calls(comm, n: int, count: int, arrays: dict) -> dict:
    """(pgas call, MPI call) per collective on ``count`` float32 per PE."""
    world = pgas.TEAM_WORLD
    src, dest, gathered = arrays["src"][:count], arrays["dest"][:count], arrays["gathered"][:n * count]
    mpi_src, mpi_dest, mpi_gathered = (arrays["mpi_src"][:count], arrays["mpi_dest"][:count],
                                       arrays["mpi_gathered"][:n * count])
    return {"reduce": (lambda: pgas.reduce(world, dest, src), lambda: comm.Allreduce(mpi_src, mpi_dest, op=MPI.SUM)),
            "broadcast": (lambda: pgas.broadcast(world, dest, dest, 0), lambda: comm.Bcast(mpi_dest, 0)),
            "fcollect": (lambda: pgas.fcollect(world, gathered, src), lambda: comm.Allgather(mpi_src, mpi_gathered))}


def _check(me: int, n: int, count: int, arrays: dict) -> None:
    world = pgas.TEAM_WORLD
    pgas.reduce(world, arrays["dest"][:count], arrays["src"][:count])
    assert np.all(arrays["dest"][:count].copy_to_host() == n), "the all-reduce result is wrong"
    arrays["dest"][:count].copy_to_device(np.full(count, me, np.float32))
    pgas.broadcast(world, arrays["dest"][:count], arrays["dest"][:count], 0)
    assert np.all(arrays["dest"][:count].copy_to_host() == 0), "the broadcast result is wrong"
    pgas.fcollect(world, arrays["gathered"][:n * count], arrays["src"][:count])
    assert np.all(arrays["gathered"][:n * count].copy_to_host() == 1), "the fcollect result is wrong"


def _plot(path: str, rows: list, n: int, nodes: int) -> None:
    plt = pyplot(path)
    if plt is None:
        return
    fig, axes = plt.subplots(1, len(COLLECTIVES), figsize=(14, 4), sharey=True)
    sizes = [r["size"] for r in rows]
    for ax, name in zip(axes, COLLECTIVES):
        ax.plot(sizes, [r[name][1] / r[name][0] for r in rows], marker="o")
        ax.axhline(1.0, color="grey", ls="--")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(name)
        ax.set_xlabel("bytes per PE")
    axes[0].set_ylabel("MPI time / pgas time (above 1: pgas faster)")
    where = "one node" if nodes == 1 else f"{nodes} nodes"
    fig.suptitle(f"pgas (auto) against MPI, {n} PEs on {where}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


def allocate(n: int, max_bytes: int) -> dict:
    """The symmetric and MPI buffers for sizes up to ``max_bytes`` per PE (collective)."""
    most = max_bytes // 4
    return {"src": pgas.full(most, 1.0, np.float32), "dest": pgas.empty(most, np.float32),
            "gathered": pgas.empty(n * most, np.float32), "mpi_src": np.ones(most, np.float32),
            "mpi_dest": np.empty(most, np.float32), "mpi_gathered": np.empty(n * most, np.float32)}


def release(arrays: dict) -> None:
    """Free what ``allocate`` made (collective)."""
    for name in ("gathered", "dest", "src"):
        pgas.free(arrays[name])


def measure(comm, size: int, arrays: dict) -> dict:
    """``{collective: [pgas seconds, MPI seconds]}`` at ``size`` bytes per PE, each the
    slowest PE's mean per call in the best of BATCHES batches, pgas and MPI in turn
    (collective); the results are checked first."""
    me, n, count = pgas.my_pe(), pgas.n_pes(), size // 4
    _check(me, n, count, arrays)
    iterations, row = _iterations(size, n), {}
    for name, (ours, theirs) in _calls(comm, n, count, arrays).items():
        best = [float("inf"), float("inf")]
        for _ in range(BATCHES):      # in turn, so that both see the same machine
            best[0] = min(best[0], slowest_pe_seconds(comm, ours, iterations))
            best[1] = min(best[1], slowest_pe_seconds(comm, theirs, iterations))
        row[name] = best
    return row


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m pgas.bench collectives", description=__doc__.split("\n")[0])
    parser.add_argument("--plot", metavar="PNG", help="write a plot of MPI/pgas per collective (needs matplotlib)")
    parser.add_argument("--max-bytes", type=parse_size, default=64 << 20, help="largest size per PE (default 64m)")
    args = parser.parse_args(argv)
    pgas.init()
    comm, me, n = MPI.COMM_WORLD, pgas.my_pe(), pgas.n_pes()
    sizes = [size for size in SIZES if size <= args.max_bytes]
    arrays = allocate(n, max(sizes))
    world = team_of(runtime("bench"), pgas.TEAM_WORLD, "bench")
    if me == 0:
        print(f"{n} PEs; microseconds per call (slowest PE, best of {BATCHES} batches); "
              "MPI/pgas above 1: pgas is faster")
        print(f"{'size':>8} " + " ".join(f"{c + ' pgas':>15} {'MPI':>9} {'MPI/pgas':>8}" for c in COLLECTIVES)
              + f"  {'reduce runs':>11}")
    rows = []
    for size in sizes:
        row = {"size": size, **measure(comm, size, arrays)}
        rows.append(row)
        if me == 0:
            picked = auto_algorithm(runtime("bench"), world, size)
            print(f"{human_bytes(size):>8} " + " ".join(
                f"{row[c][0] * 1e6:15.1f} {row[c][1] * 1e6:9.1f} {row[c][1] / row[c][0]:8.2f}" for c in COLLECTIVES)
                + f"  {picked:>11}", flush=True)
    if me == 0 and args.plot:
        _plot(args.plot, rows, n, len(set(pgas.info()["node_of_pe"])))
    release(arrays)
    pgas.finalize()


if __name__ == "__main__":
    main()
