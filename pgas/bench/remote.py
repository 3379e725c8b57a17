"""Small operations to another node: latency and message rate of the GPU-initiated path
(ibgda), of the CPU proxy (both through the emulated NIC) and of the ucx engine, beside MPI
RMA, in the same run.

    PGAS_REMOTE_TRANSPORT=ucx pgasrun -np 2 --pes-per-node 1 python -m pgas.bench remote [--plot remote.png]

PE 0 targets PE 1 on another (emulated) node. pgas side, from kernels, once through each
remote transport (switched between phases): the latency of an 8-byte ``p`` followed by
``quiet`` and of an ``atomic_fetch_add`` (one thread, one after the other), and the
message rate of ``p``, ``put_nbi``, ``atomic_add`` and ``atomic_fetch_add`` issued by 1 to
128 threads at once (each thread then calls ``quiet``). MPI side, the same pattern with
mpi4py on a window of PE 1 (passive target, ``Lock_all``): ``Put`` + ``Flush`` and
``Fetch_and_op`` latency, and the rate of ``Put``/``Accumulate``/``Fetch_and_op`` with one
``Flush`` per batch of as many operations as there are threads. While PE 0 measures,
PE 1 waits in a sleeping barrier (pgas) or in an MPI barrier (MPI, whose passive-target
RMA progresses only while the target is inside MPI). Best of several repetitions. ``self``:
the same kernels on PE 0's own heap, no transport: what the device call itself costs
(on the simulator, most of it is numba's simulated thread and pgas's routing). The
ratio columns: ibgda / proxy; ``beyond self``, the same ratio of what each path adds to
the call (the time per operation above ``self``); ibgda against MPI (rates: ibgda / MPI;
latency: MPI / ibgda). Above 1 means ibgda is ahead. ``ucx vs self``: the ucx engine's
rate over the same kernel's on its own heap (latency: self / ucx); ``ucx adds/MPI``: for
latencies, the time ucx adds to the call in MPI round trips; for rates, ucx / MPI.
"""
from __future__ import annotations

import argparse
import socket
import time

import numpy as np
from mpi4py import MPI
from numba import cuda

import pgas
import pgas.device as dev
from pgas.runtime._state import runtime

from ._plot import pyplot
from ._timing import window_on_pe1

REPEATS = 3
THREADS = [1, 4, 16, 64, 128]
TRANSPORTS = ("ibgda", "proxy", "ucx")
KINDS = ("p", "put_nbi", "add", "fetch_add")


@cuda.jit
def _put_latency(dest, iters, pe):
    for i in range(iters):
        dev.p(dest, i, pe)
        dev.quiet()


@cuda.jit
def _fadd_latency(dest, iters, pe):
    for i in range(iters):
        dev.atomic_fetch_add(dest, 1, pe)


@cuda.jit
def _p_rate(dest, src, iters, pe):
    t = cuda.threadIdx.x
    for i in range(iters):
        dev.p(dest[t:], i, pe)
    dev.quiet()


@cuda.jit
def _put_nbi_rate(dest, src, iters, pe):
    t = cuda.threadIdx.x
    for i in range(iters):
        dev.put_nbi(dest[t:t + 1], src[t:t + 1], pe)
    dev.quiet()


@cuda.jit
def _add_rate(dest, src, iters, pe):
    for i in range(iters):
        dev.atomic_add(dest, 1, pe)
    dev.quiet()


@cuda.jit
def _fetch_add_rate(dest, src, iters, pe):
    for i in range(iters):
        dev.atomic_fetch_add(dest, 1, pe)


RATE_KERNELS = {"p": _p_rate, "put_nbi": _put_nbi_rate, "add": _add_rate, "fetch_add": _fetch_add_rate}


def _best(action) -> float:
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter()
        action()
        best = min(best, time.perf_counter() - start)
    return best


def _iterations(threads: int, messages: int) -> int:
    """Operations per thread so that a repetition sends about ``messages`` in all."""
    return max(2, messages // threads)


def _pgas_figures(dest, src, iters: int, messages: int, pe: int) -> dict:
    figures = {"put latency us": _best(lambda: _put_latency[1, 1](dest, iters, pe)) / iters * 1e6,
               "fetch-add latency us": _best(lambda: _fadd_latency[1, 1](dest, iters, pe)) / iters * 1e6}
    for t in THREADS:
        each = _iterations(t, messages)
        for kind, kernel in RATE_KERNELS.items():
            figures[f"{kind} rate {t}"] = t * each / _best(lambda: kernel[1, t](dest, src, each, pe))
    return figures


def _mpi_window_figures(win, iters: int, messages: int) -> dict:
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
    operations = {"p": lambda: win.Put(one, 1), "put_nbi": lambda: win.Put(one, 1),
                  "add": lambda: win.Accumulate(one, 1, op=MPI.SUM),
                  "fetch_add": lambda: win.Fetch_and_op(one, out, 1, op=MPI.SUM)}
    for t in THREADS:   # t operations in flight per flush, as t threads would have
        each = _iterations(t, messages)
        for kind, operation in operations.items():
            def batches():
                for _ in range(each):
                    for _ in range(t):
                        operation()
                    win.Flush(1)
            figures[f"{kind} rate {t}"] = t * each / _best(batches)
    return figures


def mpi_figures(iters: int, messages: int) -> dict | None:
    """The MPI side on PE 0 (None elsewhere): ``Put`` + ``Flush`` and ``Fetch_and_op``
    latency and the batched rates, on a window of PE 1 (collective over COMM_WORLD)."""
    with window_on_pe1(8 * max(THREADS)) as win:
        theirs = _mpi_window_figures(win, iters, messages) if MPI.COMM_WORLD.Get_rank() == 0 else None
        MPI.COMM_WORLD.Barrier()
    return theirs


def device_figures(dest, src, paths, iters: int, messages: int) -> dict:
    """PE 0's kernels to PE 1 through each remote transport of ``paths`` in turn
    (``"self"``: the same kernels on PE 0's own heap), as ``{path: figures}`` on PE 0 and
    ``{}`` elsewhere (collective). The transport is switched between phases."""
    me, transports = pgas.my_pe(), runtime("pgas.bench").transports
    ours = {}
    for transport in paths:
        pgas.barrier_all()
        if transport != "self":
            transports.use_remote(transport)
            if transports.remote_transport != transport:
                raise SystemExit(f"the {transport} path could not be set up here")
        if me == 0:
            ours[transport] = _pgas_figures(dest, src, iters, messages, 0 if transport == "self" else 1)
    pgas.barrier_all()
    return ours


def _plot(path: str, ours: dict, theirs: dict, where: str) -> None:
    plt = pyplot(path)
    if plt is None:
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, kinds in zip(axes, (("p", "put_nbi"), ("add", "fetch_add"))):
        for kind in kinds:
            for transport, marker in zip((*TRANSPORTS, "self"), ("o", "s", "^", "+")):
                ax.plot(THREADS, [ours[transport][f"{kind} rate {t}"] for t in THREADS], marker=marker,
                        label=f"{transport} {kind}", ls=":" if transport == "self" else "-")
            ax.plot(THREADS, [theirs[f"{kind} rate {t}"] for t in THREADS], marker="x", ls="--",
                    label=f"MPI {kind}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("threads (MPI: operations per flush)")
        ax.legend(fontsize=7)
    axes[0].set_ylabel("messages per second")
    fig.suptitle(f"8-byte remote operations, 2 PEs on {where} (self: the same kernel on its own heap)")
    fig.tight_layout()
    fig.savefig(path)
    print(f"plot written to {path}")


def _label(key: str) -> str:
    if key.endswith("us"):
        return key
    kind, _, threads = key.split()
    return f"{kind} rate/s, {threads} thr"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m pgas.bench remote", description=__doc__.split("\n")[0])
    parser.add_argument("--iters", type=int, default=100, help="operations per latency repetition")
    parser.add_argument("--messages", type=int, default=1024,
                        help="operations per rate repetition (split among the threads)")
    parser.add_argument("--plot", metavar="PNG", help="write a message-rate plot here (needs matplotlib)")
    args = parser.parse_args(argv)
    pgas.init()
    me, n = pgas.my_pe(), pgas.n_pes()
    if n != 2 or pgas.info()["transports"][1 - me] == "p2p":
        raise SystemExit("remote needs 2 PEs on 2 nodes: pgasrun -np 2 --pes-per-node 1 python -m pgas.bench remote")
    dest = pgas.zeros(max(THREADS), np.int64)
    src = pgas.zeros(max(THREADS), np.int64)
    # ucx and the call itself first: the emulated NIC's thread (started by the first phase
    # that needs it, unless PGAS_REMOTE_TRANSPORT chose its paths at init) then runs on
    # beside them, sharing the interpreter lock
    ours = device_figures(dest, src, ("ucx", "self", "ibgda", "proxy"), args.iters, args.messages)
    hosts = MPI.COMM_WORLD.allgather(socket.gethostname())
    theirs = mpi_figures(args.iters, args.messages)
    if me == 0:
        print(f"{'':26} {'ibgda':>11} {'proxy':>11} {'ucx':>11} {'MPI':>11} {'self':>11} {'ibgda/proxy':>12} "
              f"{'beyond self':>12} {'ibgda vs MPI':>13} {'ucx vs self':>12} {'ucx adds/MPI':>13}")
        for key in ours["ibgda"]:
            latency = key.endswith("us")
            gpu, cpu, native = ours["ibgda"][key], ours["proxy"][key], ours["ucx"][key]
            mpi, call = theirs[key], ours["self"][key]
            over_proxy = cpu / gpu if latency else gpu / cpu
            over_mpi = mpi / gpu if latency else gpu / mpi
            # seconds per operation each path adds to the call itself (its cost on this PE's own heap)
            added = [(v - call) if latency else (1 / v - 1 / call) for v in (gpu, cpu, native)]
            beyond = added[1] / added[0] if added[0] > 0 else float("nan")
            ucx_vs_self = call / native if latency else native / call
            # latency: what ucx adds to the call, in MPI round trips; rates: ucx / MPI
            ucx_mpi = added[2] / mpi if latency else native / mpi
            print(f"{_label(key):26} {gpu:11,.1f} {cpu:11,.1f} {native:11,.1f} {mpi:11,.1f} {call:11,.1f} "
                  f"{over_proxy:12.3g} {beyond:12.3g} {over_mpi:13.3g} {ucx_vs_self:12.3g} {ucx_mpi:13.3g}")
        if args.plot:
            _plot(args.plot, ours, theirs, "2 hosts" if len(set(hosts)) > 1 else "2 emulated nodes")
    pgas.free(src)
    pgas.free(dest)
    pgas.finalize()


if __name__ == "__main__":
    main()
