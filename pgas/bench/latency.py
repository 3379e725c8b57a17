"""Small host put and get latency, beside MPI RMA on a window, in the same run.

    pgasrun -np 2 python -m pgas.bench latency
    pgasrun -np 2 --pes-per-node 1 python -m pgas.bench latency    # through the NIC (another node)

PE 0 to PE 1, from 8 B to 4 KiB: ``pgas.put`` + ``pgas.quiet`` and ``pgas.get`` from
numpy arrays into a symmetric array, against mpi4py's ``Put`` + ``Flush`` and ``Get`` +
``Flush`` on a window from ``MPI.Win.Allocate`` (passive target, ``Lock_all``), the
closest MPI has to a symmetric heap; pgas and MPI in turn at each size. Each figure is the
best mean of several repetitions; ``MPI/pgas`` above 1 means pgas is faster. While PE 0
measures, PE 1 waits in a barrier (pgas's, which sleeps, while pgas is timed; MPI's while
MPI is, as passive-target RMA may need the target inside MPI).

``--stretches N`` then times N stretches of 1000 8-byte put+quiet calls each way and
prints each stretch's median: a best mean hides stretches where the threads of both PEs
landed badly on the cores (docs/benchmarks.md, latency between two hosts, 2026-11-26).
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from mpi4py import MPI

import pgas

from ._timing import best_seconds, human_bytes, window_on_pe1

SIZES = [8, 32, 128, 512, 1024, 4096]


def put_get_seconds(dest, size: int, iterations: int) -> tuple[float, float]:
    """PE 0: seconds per 8-to-4096-byte ``put`` + ``quiet`` and per ``get`` to PE 1's ``dest``."""
    src, back, target = np.ones(size, np.uint8), np.zeros(size, np.uint8), dest[:size]

    def put():
        pgas.put(target, src, 1)
        pgas.quiet()
    return best_seconds(put, iterations), best_seconds(lambda: pgas.get(back, target, 1), iterations)


def mpi_put_get_seconds(win, size: int, iterations: int) -> tuple[float, float]:
    """PE 0: seconds per ``Put`` + ``Flush`` and per ``Get`` + ``Flush`` to PE 1's ``win``."""
    src, back = np.ones(size, np.uint8), np.zeros(size, np.uint8)

    def put():
        win.Put(src, 1)
        win.Flush(1)

    def get():
        win.Get(back, 1)
        win.Flush(1)
    return best_seconds(put, iterations), best_seconds(get, iterations)


def in_turn(dest, win, sizes, iterations: int) -> tuple[dict, dict]:
    """``{size: (put+quiet, get)}`` seconds per call on PE 0 (empty elsewhere), pgas's then
    MPI's, the two in turn at each size so that both see the same machine (collective)."""
    me, ours, theirs = pgas.my_pe(), {}, {}
    for size in sizes:
        if me == 0:
            ours[size] = put_get_seconds(dest, size, iterations)
        pgas.barrier_all()
        if me == 0:
            theirs[size] = mpi_put_get_seconds(win, size, iterations)
        MPI.COMM_WORLD.Barrier()
    return ours, theirs


def _stretch_medians(call, stretches: int, calls: int = 1000) -> np.ndarray:
    """The median time of ``call`` in each of ``stretches`` runs of ``calls`` calls."""
    times = np.empty((stretches, calls))
    clock = time.perf_counter
    for s in range(stretches):
        for i in range(calls):
            start = clock()
            call()
            times[s, i] = clock() - start
    return np.median(times, axis=1)


def _stretches(dest, win, stretches: int) -> None:
    """PE 0: the stretch medians of an 8-byte put+quiet, pgas's then MPI's (collective)."""
    me, comm = pgas.my_pe(), MPI.COMM_WORLD
    src, target = np.ones(8, np.uint8), dest[:8]
    if me == 0:
        ours = _stretch_medians(lambda: (pgas.put(target, src, 1), pgas.quiet()), stretches)
    pgas.barrier_all()
    if me == 0:
        theirs = _stretch_medians(lambda: (win.Put(src, 1), win.Flush(1)), stretches)
    comm.Barrier()
    if me == 0:
        for name, medians in (("pgas put+quiet", ours), ("MPI Put+Flush", theirs)):
            slow = int((medians > 1.5 * medians.min()).sum())
            print(f"{name}, 8 B, median us per stretch of 1000 calls: "
                  + " ".join(f"{m * 1e6:.1f}" for m in medians)
                  + f" ({slow} of {stretches} above 1.5x the fastest)", flush=True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m pgas.bench latency", description=__doc__.split("\n")[0])
    parser.add_argument("--iters", type=int, default=20000, help="calls per repetition")
    parser.add_argument("--stretches", type=int, default=0, help="then this many stretches of 1000 calls, "
                        "each's median")
    args = parser.parse_args(argv)
    if args.stretches < 0:
        parser.error(f"--stretches must be 0 or more, got {args.stretches}")
    pgas.init()
    me, n = pgas.my_pe(), pgas.n_pes()
    if n != 2:
        raise SystemExit("latency needs 2 PEs: pgasrun -np 2 python -m pgas.bench latency")
    dest = pgas.zeros(max(SIZES), np.uint8)
    with window_on_pe1(max(SIZES)) as win:
        ours, theirs = in_turn(dest, win, SIZES, args.iters)
        if me == 0:
            print(f"PE 0 -> PE 1 through {pgas.info()['transports'][1]}; microseconds per call; "
                  "MPI/pgas above 1: pgas is faster")
            print(f"{'size':>7} {'put+quiet':>10} {'MPI Put+Flush':>14} {'MPI/pgas':>9} "
                  f"{'get':>8} {'MPI Get+Flush':>14} {'MPI/pgas':>9}")
            for size in SIZES:
                (put, get), (mpi_put, mpi_get) = ours[size], theirs[size]
                print(f"{human_bytes(size):>7} {put * 1e6:10.2f} {mpi_put * 1e6:14.2f} {mpi_put / put:9.2f} "
                      f"{get * 1e6:8.2f} {mpi_get * 1e6:14.2f} {mpi_get / get:9.2f}", flush=True)
        if args.stretches:
            _stretches(dest, win, args.stretches)
    pgas.free(dest)
    pgas.finalize()


if __name__ == "__main__":
    main()
