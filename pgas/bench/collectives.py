"""All-reduce, broadcast and fcollect (or any of the host collectives) against MPI, size by
size, in the same run.

    pgasrun -np 2 python -m pgas.bench collectives [--plot collectives.png] [--max-bytes 64m]
    pgasrun -np 4 python -m pgas.bench collectives [--collectives alltoall,reducescatter,inscan]

From 8 B to 64 MiB per PE, on TEAM_WORLD with ``algorithm="auto"``: ``pgas.reduce``
(float32 sum) against ``Allreduce``, ``pgas.broadcast`` from rank 0 in place (dest is
src, as MPI's one buffer) against ``Bcast``, and ``pgas.fcollect`` (that many bytes from
each PE) against ``Allgather``; with ``--collectives``, also ``pgas.alltoall`` (that many
bytes to each PE) against ``Alltoall``, ``pgas.reducescatter`` (float32 sum, that many
bytes kept by each PE) against ``Reduce_scatter_block`` and ``pgas.sum_inscan`` (float32)
against ``Scan``. At each size and for each collective pgas and MPI take turns, batch
after batch; a figure is the slowest PE's mean time per call in the best batch.
``MPI/pgas`` above 1 means pgas is faster. Every result is checked once.
"""
from __future__ import annotations

import argparse

import numpy as np
from mpi4py import MPI

import pgas
from pgas.core._env import parse_size
from pgas.host.collectives._collectives import auto_algorithm
from pgas.runtime._state import runtime
from pgas.runtime._team_table import team_of

from ._plot import pyplot
from ._timing import human_bytes, slowest_pe_seconds

SIZES = [8 << (2 * k) for k in range(13)] + [64 << 20]     # 8 B, 32 B, ... 32 MiB, 64 MiB
COLLECTIVES = ("reduce", "broadcast", "fcollect", "alltoall", "reducescatter", "inscan")
DEFAULT = COLLECTIVES[:3]
BATCHES = 4


def _iterations(nbytes: int, n: int) -> int:
    return max(2, min(1000, (32 << 20) // (nbytes * n)))


def _calls(comm, n: int, count: int, arrays: dict) -> dict:
    """(pgas call, MPI call) per collective on ``count`` float32 per PE (alltoall and
    reducescatter: per block, where ``arrays`` has room for them)."""
    world = pgas.TEAM_WORLD
    src, dest, gathered = arrays["src"][:count], arrays["dest"][:count], arrays["gathered"][:n * count]
    mpi_src, mpi_dest, mpi_gathered = (arrays["mpi_src"][:count], arrays["mpi_dest"][:count],
                                       arrays["mpi_gathered"][:n * count])
    calls = {"reduce": (lambda: pgas.reduce(world, dest, src), lambda: comm.Allreduce(mpi_src, mpi_dest, op=MPI.SUM)),
             "broadcast": (lambda: pgas.broadcast(world, dest, dest, 0), lambda: comm.Bcast(mpi_dest, 0)),
             "fcollect": (lambda: pgas.fcollect(world, gathered, src), lambda: comm.Allgather(mpi_src, mpi_gathered)),
             "reducescatter": (lambda: pgas.reducescatter(world, dest, gathered),
                               lambda: comm.Reduce_scatter_block(mpi_gathered, mpi_dest, op=MPI.SUM)),
             "inscan": (lambda: pgas.sum_inscan(world, dest, src), lambda: comm.Scan(mpi_src, mpi_dest, op=MPI.SUM))}
    if "scattered" in arrays:
        scattered, mpi_scattered = arrays["scattered"][:n * count], arrays["mpi_scattered"][:n * count]
        calls["alltoall"] = (lambda: pgas.alltoall(world, scattered, gathered),
                             lambda: comm.Alltoall(mpi_gathered, mpi_scattered))
    return calls


def _check(me: int, n: int, count: int, arrays: dict, names) -> None:
    world = pgas.TEAM_WORLD
    src, dest, gathered = arrays["src"][:count], arrays["dest"][:count], arrays["gathered"][:n * count]
    pgas.reduce(world, dest, src)
    assert np.all(dest.copy_to_host() == n), "the all-reduce result is wrong"
    dest.copy_to_device(np.full(count, me, np.float32))
    pgas.broadcast(world, dest, dest, 0)
    assert np.all(dest.copy_to_host() == 0), "the broadcast result is wrong"
    pgas.fcollect(world, gathered, src)
    assert np.all(gathered.copy_to_host() == 1), "the fcollect result is wrong"
    if "reducescatter" in names:
        pgas.reducescatter(world, dest, gathered)
        assert np.all(dest.copy_to_host() == n), "the reducescatter result is wrong"
    if "inscan" in names:
        pgas.sum_inscan(world, dest, src)
        assert np.all(dest.copy_to_host() == me + 1), "the inscan result is wrong"
    if "alltoall" in names:
        gathered.copy_to_device(np.repeat(np.arange(n, dtype=np.float32) + n * me, count))
        pgas.alltoall(world, arrays["scattered"][:n * count], gathered)
        want = np.repeat(np.arange(n, dtype=np.float32) * n + me, count)
        assert np.array_equal(arrays["scattered"][:n * count].copy_to_host(), want), "the alltoall result is wrong"
        gathered.copy_to_device(np.ones(n * count, np.float32))


def _plot(path: str, rows: list, n: int, nodes: int, names) -> None:
    plt = pyplot(path)
    if plt is None:
        return
    fig, axes = plt.subplots(1, len(names), figsize=(4.7 * len(names), 4), sharey=True, squeeze=False)
    axes = axes[0]
    sizes = [r["size"] for r in rows]
    for ax, name in zip(axes, names):
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


def allocate(n: int, max_bytes: int, names=DEFAULT) -> dict:
    """The symmetric and MPI buffers for collectives ``names`` at sizes up to ``max_bytes``
    per PE (collective): (2 + n) x ``max_bytes`` of heap per PE, (2 + 2n) x with alltoall
    (PGAS_SYMMETRIC_SIZE may need raising: 1g holds 64 MiB on up to 6 PEs with alltoall)."""
    most = max_bytes // 4
    arrays = {"src": pgas.full(most, 1.0, np.float32), "dest": pgas.empty(most, np.float32),
              "gathered": pgas.empty(n * most, np.float32), "mpi_src": np.ones(most, np.float32),
              "mpi_dest": np.empty(most, np.float32), "mpi_gathered": np.ones(n * most, np.float32)}
    if "alltoall" in names:
        arrays["scattered"], arrays["mpi_scattered"] = pgas.empty(n * most, np.float32), np.empty(n * most, np.float32)
    return arrays


def release(arrays: dict) -> None:
    """Free what ``allocate`` made (collective)."""
    for name in ("scattered", "gathered", "dest", "src"):
        if name in arrays:
            pgas.free(arrays[name])


def measure(comm, size: int, arrays: dict, names=DEFAULT) -> dict:
    """``{collective: [pgas seconds, MPI seconds]}`` for collectives ``names`` at ``size``
    bytes per PE, each the slowest PE's mean per call in the best of BATCHES batches, pgas
    and MPI in turn (collective); the results are checked first."""
    me, n, count = pgas.my_pe(), pgas.n_pes(), size // 4
    _check(me, n, count, arrays, names)
    iterations, row, calls = _iterations(size, n), {}, _calls(comm, n, count, arrays)
    for name in names:
        ours, theirs = calls[name]
        best = [float("inf"), float("inf")]
        for _ in range(BATCHES):      # in turn, so that both see the same machine
            best[0] = min(best[0], slowest_pe_seconds(comm, ours, iterations))
            best[1] = min(best[1], slowest_pe_seconds(comm, theirs, iterations))
        row[name] = best
    return row


def _names(text: str) -> tuple:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in COLLECTIVES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"expected some of {', '.join(COLLECTIVES)}, got {text!r}")
    return names


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m pgas.bench collectives", description=__doc__.split("\n")[0])
    parser.add_argument("--plot", metavar="PNG", help="write a plot of MPI/pgas per collective (needs matplotlib)")
    parser.add_argument("--max-bytes", type=parse_size, default=64 << 20, help="largest size per PE (default 64m)")
    parser.add_argument("--collectives", type=_names, default=DEFAULT,
                        help=f"which, comma-separated, of {', '.join(COLLECTIVES)} (default: {','.join(DEFAULT)})")
    args = parser.parse_args(argv)
    names = args.collectives
    pgas.init()
    comm, me, n = MPI.COMM_WORLD, pgas.my_pe(), pgas.n_pes()
    sizes = [size for size in SIZES if size <= args.max_bytes]
    arrays = allocate(n, max(sizes), names)
    world = team_of(runtime("bench"), pgas.TEAM_WORLD, "bench")
    if me == 0:
        print(f"{n} PEs; microseconds per call (slowest PE, best of {BATCHES} batches); "
              "MPI/pgas above 1: pgas is faster")
        print(f"{'size':>8} " + " ".join(f"{c + ' pgas':>15} {'MPI':>9} {'MPI/pgas':>8}" for c in names)
              + ("  reduce runs" if "reduce" in names else ""))
    rows = []
    for size in sizes:
        row = {"size": size, **measure(comm, size, arrays, names)}
        rows.append(row)
        if me == 0:
            picked = f"  {auto_algorithm(runtime('bench'), world, size):>11}" if "reduce" in names else ""
            print(f"{human_bytes(size):>8} " + " ".join(
                f"{row[c][0] * 1e6:15.1f} {row[c][1] * 1e6:9.1f} {row[c][1] / row[c][0]:8.2f}" for c in names)
                + picked, flush=True)
    if me == 0 and args.plot:
        _plot(args.plot, rows, n, len(set(pgas.info()["node_of_pe"])), names)
    release(arrays)
    pgas.finalize()


if __name__ == "__main__":
    main()
