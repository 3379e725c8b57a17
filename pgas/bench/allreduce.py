"""All-reduce bandwidth of each algorithm, beside mpi4py's Allreduce (MPI) in the same run.

    pgasrun -np 2 python -m pgas.bench allreduce [--plot allreduce.png]

float32 sums from 8 B to 64 MiB over TEAM_WORLD. For each size and algorithm the time
is the slowest PE's mean over a batch (best batch of several); bandwidths follow
nccl-tests: algbw = bytes / time, busbw = algbw * 2(n-1)/n. ``eager`` runs only up to its
staging buffers' size on one node ("-" above). The last columns: the algorithm ``auto``
picked, and the one that was fastest. ``--plot`` writes a PNG of busbw per algorithm
where matplotlib is installed. On the cuda backend a host all-reduce is the device
all-reduce run as a kernel: the one column is ``auto`` (the named algorithms are the
simulator's host algorithms).
"""
from __future__ import annotations

import argparse

import numpy as np
from mpi4py import MPI

import pgas
from pgas.host.collectives._collectives import auto_algorithm
from pgas.host.collectives._eager import usable
from pgas.runtime._state import runtime
from pgas.runtime._team_table import team_of

from ._plot import pyplot
from ._timing import human_bytes, slowest_pe_seconds

SIZES = [8 << (2 * k) for k in range(12)] + [64 << 20]   # 8 B, 32 B, ... 32 MiB, 64 MiB
ALGORITHMS = ["eager", "oneshot", "ring", "tree", "auto"]
BATCHES = 3


def _seconds(comm, action, iterations: int) -> float:
    """The slowest PE's mean time per call, best of BATCHES batches."""
    return min(slowest_pe_seconds(comm, action, iterations) for _ in range(BATCHES))


def _plot(path: str, rows: list, n: int, algorithms: list) -> None:
    plt = pyplot(path)
    if plt is None:
        return
    sizes = [r["size"] for r in rows]
    for name in [*algorithms, "mpi"]:
        plt.plot(sizes, [r[name] for r in rows], marker="o", label=name)
    plt.xscale("log", base=2)
    plt.xlabel("bytes")
    plt.ylabel("bus bandwidth (GB/s)")
    plt.title(f"all-reduce, float32 sum, {n} PEs")
    plt.legend()
    plt.savefig(path, dpi=120)
    print(f"wrote {path}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m pgas.bench allreduce")
    parser.add_argument("--plot", metavar="PNG", help="write a bus-bandwidth plot here (needs matplotlib)")
    args = parser.parse_args(argv)
    pgas.init()
    comm, me, n = MPI.COMM_WORLD, pgas.my_pe(), pgas.n_pes()
    factor = 2 * (n - 1) / n if n > 1 else 1.0
    src = pgas.full(max(SIZES) // 4, 1.0, np.float32)
    dest = pgas.empty(max(SIZES) // 4, np.float32)
    mpi_src, mpi_dest = np.ones(max(SIZES) // 4, np.float32), np.empty(max(SIZES) // 4, np.float32)
    on_gpu = runtime("bench").on_gpu
    algorithms = ["auto"] if on_gpu else ALGORITHMS
    if me == 0:
        print(f"all-reduce, float32 sum, {n} PEs: bus bandwidth GB/s (busbw = algbw x {factor:g}) per "
              "algorithm; algbw of auto and MPI; auto/MPI is the speed ratio")
        print(f"{'size':>8} " + " ".join(f"{a:>8}" for a in algorithms) + f" {'MPI':>8} "
              f"{'algbw auto':>10} {'algbw MPI':>9} {'auto/MPI':>9} {'auto is':>8} {'fastest':>8}")
    rows = []
    world = team_of(runtime("bench"), pgas.TEAM_WORLD, "bench")
    for size in SIZES:
        count = size // 4
        iterations = max(3, min(1000, (64 << 20) // size))
        part, result = src[:count], dest[:count]       # made once: a repeated call reuses its plan
        row = {"size": size}
        for name in algorithms:
            if name == "eager" and not usable(runtime("bench"), world, size):
                row[name] = float("nan")
                continue
            row[name] = size * factor / 1e9 / _seconds(
                comm, lambda: pgas.reduce(pgas.TEAM_WORLD, result, part, algorithm=name), iterations)
        mpi_part, mpi_result = mpi_src[:count], mpi_dest[:count]
        row["mpi"] = size * factor / 1e9 / _seconds(
            comm, lambda: comm.Allreduce(mpi_part, mpi_result, op=MPI.SUM), iterations)
        rows.append(row)
        if me == 0:
            fastest = max((a for a in algorithms if (a != "auto" or on_gpu) and row[a] == row[a]),
                          key=lambda a: row[a])
            chosen = "kernel" if on_gpu else auto_algorithm(runtime('bench'), world, size)
            print(f"{human_bytes(size):>8} " + " ".join(f"{row[a]:8.2f}" if row[a] == row[a] else f"{'-':>8}"
                                                         for a in algorithms) +
                  f" {row['mpi']:8.2f} {row['auto'] / factor:10.2f} {row['mpi'] / factor:9.2f}"
                  f" {row['auto'] / row['mpi']:9.2f} {chosen:>8} {fastest:>8}", flush=True)
    assert np.all(dest.copy_to_host()[:count] == n), "the all-reduce result is wrong"
    if me == 0 and args.plot:
        _plot(args.plot, rows, n, algorithms)
    pgas.free(dest)
    pgas.free(src)
    pgas.finalize()


if __name__ == "__main__":
    main()
