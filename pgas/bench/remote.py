"""Small operations through the NIC: latency and message rate, beside MPI RMA in the same run.

    pgasrun -np 2 --pes-per-node 1 python -m pgas.bench remote [--plot remote.png]

PE 0 targets PE 1 on another (emulated) node. pgas side, from kernels: the latency of an
8-byte ``p`` followed by ``quiet`` and of an ``atomic_fetch_add`` (one thread, one after the
other), and the message rate of ``p`` (non-blocking) and ``atomic_add`` issued by 1 to 64
threads at once, each thread then calling ``quiet``. MPI side, the same pattern with
mpi4py on a window of PE 1 (passive target, ``Lock_all``): ``Put`` + ``Flush`` and
``Fetch_and_op`` latency, and the rate of ``Put``/``Accumulate`` followed by one ``Flush``.
While PE 0 measures, PE 1 waits in a sleeping barrier (pgas) or in an MPI barrier (MPI,
whose passive-target RMA progresses only while the target is inside MPI). Best of
several repetitions; the ratio columns are pgas / MPI (rates) and MPI / pgas (latency),
so above 1 means pgas is ahead.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from mpi4py import MPI
from numba import cuda

import pgas
import pgas.device as dev

from ._plot import pyplot

REPEATS = 3
THREADS = [1, 4, 16, 64]


@cuda.jit
def _put_latency(dest, iters):
    for i in range(iters):
        dev.p(dest, i, 1)
        dev.quiet()


@cuda.jit
def _fadd_latency(dest, iters):
    for i in range(iters):
        dev.atomic_fetch_add(dest, 1, 1)


@cuda.jit
def _put_rate(dest, iters):
    t = cuda.threadIdx.x
    for i in range(iters):
        dev.p(dest[t:], i, 1)
    dev.quiet()


@cuda.jit
def _add_rate(dest, iters):
    for i in range(iters):
        dev.atomic_add(dest, 1, 1)
    dev.quiet()


def _best(action) -> float:
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter()
        action()
        best = min(best, time.perf_counter() - start)
    return best


def _pgas_figures(dest, iters: int) -> dict:
    figures = {"put latency us": _best(lambda: _put_latency[1, 1](dest, iters)) / iters * 1e6,
               "fetch-add latency us": _best(lambda: _fadd_latency[1, 1](dest, iters)) / iters * 1e6}
    for t in THREADS:
        figures[f"put rate {t}"] = t * iters / _best(lambda: _put_rate[1, t](dest, iters))
        figures[f"add rate {t}"] = t * iters / _best(lambda: _add_rate[1, t](dest, iters))
    return figures


def _mpi_figures(win, iters: int) -> dict:
    one, out = np.ones(1, np.int64), np.zeros(1, np.int64)

    def put_flush():
        for _ in range(iters):
            win.Put(one, 1)
            win.Flush(1)

    def fetch_add():
        for _ in range(iters):
            win.Fetch_and_op(one, out, 1, op=MPI.SUM)
            win.Flush(1)

    figures = {"put latency us": _best(put_flush) / iters * 1e6,
               "fetch-add latency us": _best(fetch_add) / iters * 1e6}
    for t in THREADS:   # t messages in flight per flush, as t threads would have
        def puts():
            for _ in range(iters):
                for _ in range(t):
                    win.Put(one, 1)
            win.Flush(1)

        def adds():
            for _ in range(iters):
                for _ in range(t):
                    win.Accumulate(one, 1, op=MPI.SUM)
            win.Flush(1)
        figures[f"put rate {t}"] = t * iters / _best(puts)
        figures[f"add rate {t}"] = t * iters / _best(adds)
    return figures


def _plot(path: str, ours: dict, theirs: dict) -> None:
    plt = pyplot(path)
    if plt is None:
        return
    plt.figure(figsize=(6, 4))
    for kind in ("put", "add"):
        plt.plot(THREADS, [ours[f"{kind} rate {t}"] for t in THREADS], marker="o", label=f"pgas {kind}")
        plt.plot(THREADS, [theirs[f"{kind} rate {t}"] for t in THREADS], marker="x", ls="--", label=f"MPI {kind}")
    plt.xscale("log", base=2)
    plt.yscale("log")
    plt.xlabel("threads (MPI: messages per flush)")
    plt.ylabel("messages per second")
    plt.title("8-byte remote operations, 2 PEs on 2 emulated nodes")
    plt.legend()
    plt.tight_layout()
    plt.savefig(path)
    print(f"plot written to {path}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m pgas.bench remote", description=__doc__.split("\n")[0])
    parser.add_argument("--iters", type=int, default=200, help="operations per thread per repetition")
    parser.add_argument("--plot", metavar="PNG", help="write a message-rate plot here (needs matplotlib)")
    args = parser.parse_args(argv)
    pgas.init()
    me, n = pgas.my_pe(), pgas.n_pes()
    if n != 2 or pgas.info()["transports"][1 - me] == "p2p":
        raise SystemExit("remote needs 2 PEs on 2 nodes: pgasrun -np 2 --pes-per-node 1 python -m pgas.bench remote")
    dest = pgas.zeros(max(THREADS), np.int64)
    ours = _pgas_figures(dest, args.iters) if me == 0 else None
    pgas.barrier_all()
    comm = MPI.COMM_WORLD
    win = MPI.Win.Allocate(8 * max(THREADS), comm=comm)
    win.Lock_all()
    theirs = _mpi_figures(win, args.iters) if me == 0 else None
    comm.Barrier()
    win.Unlock_all()
    win.Free()
    if me == 0:
        print(f"{'':26} {'pgas':>12} {'MPI':>12} {'pgas ahead x':>13}")
        for key in ours:
            latency = key.endswith("us")
            ratio = theirs[key] / ours[key] if latency else ours[key] / theirs[key]
            label = key if latency else key.replace("rate", "rate/s,") + " threads"
            print(f"{label:26} {ours[key]:12,.1f} {theirs[key]:12,.1f} {ratio:13.3g}")
        if args.plot:
            _plot(args.plot, ours, theirs)
    pgas.free(dest)
    pgas.finalize()


if __name__ == "__main__":
    main()
