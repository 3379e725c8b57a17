"""pgas against MPI across nodes, in one job: each of the five goals of the across-node
work (docs/benchmarks.md, "across_nodes"), its figures beside MPI's on the same wire, and
whether it holds.

    pgasrun -np 2 --pes-per-node 1 python -m pgas.bench across_nodes        # points 1-5
    pgasrun -np 4 --pes-per-node 2 python -m pgas.bench across_nodes        # points 3 and 5

Between two hosts (docs/transports.md, "Two hosts"), with ``UCX_TLS=tcp,self`` so that MPI
takes the same wire as pgas. The points, PE 0 to PE 1 on another node:

1. host ``put`` + ``quiet`` and ``get``, 8 B and 4 KiB: MPI/pgas >= 0.67 (against ``Put`` +
   ``Flush``, ``Get`` + ``Flush``);
2. from a kernel (``remote``'s kernels), through the GPU-initiated path: what ``p`` +
   ``quiet`` and ``atomic_fetch_add`` add to the same kernel on PE 0's own heap is at most
   5 MPI ``Put`` + ``Flush`` round trips; the message rate of ``p``, ``put_nbi``,
   ``atomic_add`` and ``atomic_fetch_add`` at 1-128 threads is at least 0.7 of the own
   heap's; at 64 threads at least 2x the CPU proxy's;
3. host all-reduce, broadcast and fcollect at 8 B, 4 KiB, 2 MiB and 64 MiB: MPI/pgas >= 1
   (every PE count);
4. a 64 MiB host put: at least 0.9 of MPI ``Put``'s bandwidth;
5. each PE's runtime threads use under 2% of a core while it sleeps, and a host thread
   waiting in ``signal_wait_until`` does not spin a core (under 20% of it; every PE count).

Points 1, 2 and 4 need 2 PEs on 2 nodes; point 2 is the simulator backend's (its
simulated threads against its CPU proxy). Figures are best of repetitions, as in the
benchmarks they come from; one run is one sample of a noisy machine: compare runs.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np
from mpi4py import MPI

import pgas
from pgas.core._env import parse_size
from pgas.runtime._state import runtime

from . import collectives, idle, latency, put_bw, remote
from ._timing import best_seconds, human_bytes, window_on_pe1

HOST_SIZES = (8, 4096)
COLLECTIVE_SIZES = (8, 4096, 2 << 20, 64 << 20)
BIG_PUT = 64 << 20          # point 4's put
IDLE_LIMIT, WAITING_LIMIT = 2.0, 20.0       # percent of one core


class Verdicts:
    """The rows of the report: (point, what, pgas, reference, ratio, goal, holds)."""

    def __init__(self):
        self.rows = []

    def add(self, point: int, what: str, ours: str, theirs: str, ratio: float | None, goal: str,
            holds: bool) -> None:
        self.rows.append((point, what, ours, theirs, "" if ratio is None else f"{ratio:.2f}", goal, holds))

    def print(self) -> None:
        print(f"{'pt':>2}  {'what':50} {'pgas':>10} {'reference':>10} {'ratio':>6}  {'goal':12} holds")
        for point, what, ours, theirs, ratio, goal, holds in self.rows:
            print(f"{point:>2}  {what:50} {ours:>10} {theirs:>10} {ratio:>6}  {goal:12} {'yes' if holds else 'NO'}")
        points = sorted({row[0] for row in self.rows})
        held = [p for p in points if all(row[6] for row in self.rows if row[0] == p)]
        print(f"points measured: {points}; holding in every row: {held}; "
              f"rows holding: {sum(row[6] for row in self.rows)} of {len(self.rows)}", flush=True)


def _host_latency(verdicts: Verdicts, iters: int) -> None:
    """Point 1 (collective; 2 PEs)."""
    dest = pgas.zeros(max(HOST_SIZES), np.uint8)
    with window_on_pe1(max(HOST_SIZES)) as win:
        ours, theirs = latency.in_turn(dest, win, HOST_SIZES, iters)
    pgas.free(dest)
    for size in ours:       # (PE 0's)
        for name, pgas_s, mpi_s in zip(("put+quiet", "get"), ours[size], theirs[size]):
            ratio = mpi_s / pgas_s
            verdicts.add(1, f"host {name} {human_bytes(size)} (us; MPI/pgas)", f"{pgas_s * 1e6:.2f}",
                         f"{mpi_s * 1e6:.2f}", ratio, ">= 0.67", ratio >= 0.67)


def _device(verdicts: Verdicts, iters: int, messages: int) -> None:
    """Point 2 (collective; 2 PEs): the GPU-initiated path against the own heap, MPI and
    the proxy; the remote transport is set back to what it was."""
    me, transports = pgas.my_pe(), runtime("pgas.bench").transports
    default = transports.remote_transport
    dest, src = pgas.zeros(max(remote.THREADS), np.int64), pgas.zeros(max(remote.THREADS), np.int64)
    ours = remote.device_figures(dest, src, ("self", "ibgda", "proxy"), iters, messages)
    theirs = remote.mpi_figures(iters, messages)
    transports.use_remote(default)
    pgas.barrier_all()
    pgas.free(src)
    pgas.free(dest)
    if me != 0:
        return
    gpu, own, proxy = ours["ibgda"], ours["self"], ours["proxy"]
    round_trip = theirs["put latency us"]
    for key, name in (("put latency us", "p+quiet"), ("fetch-add latency us", "atomic_fetch_add")):
        added = gpu[key] - own[key]
        verdicts.add(2, f"device {name}: us added to own heap's (MPI RTT)", f"{added:.1f}", f"{round_trip:.1f}",
                     added / round_trip, "<= 5", added <= 5 * round_trip)
    for kind in remote.KINDS:
        for threads in remote.THREADS:
            key = f"{kind} rate {threads}"
            ratio = gpu[key] / own[key]
            verdicts.add(2, f"device {kind} rate/s, {threads} thr (vs own heap)", f"{gpu[key]:,.0f}",
                         f"{own[key]:,.0f}", ratio, ">= 0.7", ratio >= 0.7)
    for kind in remote.KINDS:
        key = f"{kind} rate 64"
        ratio = gpu[key] / proxy[key]
        verdicts.add(2, f"device {kind} rate/s, 64 thr (vs proxy)", f"{gpu[key]:,.0f}", f"{proxy[key]:,.0f}",
                     ratio, ">= 2", ratio >= 2)


def _collectives(verdicts: Verdicts, sizes) -> None:
    """Point 3 (collective; any PE count)."""
    comm, n = MPI.COMM_WORLD, pgas.n_pes()
    arrays = collectives.allocate(n, max(sizes))
    for size in sizes:
        row = collectives.measure(comm, size, arrays)
        for name in collectives.DEFAULT:
            ours, theirs = row[name]
            verdicts.add(3, f"{name} {human_bytes(size)}, {n} PEs (us; MPI/pgas)", f"{ours * 1e6:.1f}",
                         f"{theirs * 1e6:.1f}", theirs / ours, ">= 1", theirs >= ours)
    collectives.release(arrays)


def _bandwidth(verdicts: Verdicts, size: int) -> None:
    """Point 4 (collective; 2 PEs)."""
    me = pgas.my_pe()
    dest, host = pgas.zeros(size, np.uint8), np.ones(size, np.uint8)
    with window_on_pe1(size) as win:
        ours = best_seconds(lambda: pgas.put(dest, host, 1), put_bw.iterations(size)) if me == 0 else None
        pgas.barrier_all()
        theirs = put_bw.mpi_put_seconds(win, host, size) if me == 0 else None
        MPI.COMM_WORLD.Barrier()
    pgas.free(dest)
    if me == 0:
        ratio = theirs / ours
        verdicts.add(4, f"host put {human_bytes(size)} (GB/s; put/MPI)", f"{size / ours / 1e9:.2f}",
                     f"{size / theirs / 1e9:.2f}", ratio, ">= 0.9", ratio >= 0.9)


def _idle(verdicts: Verdicts, seconds: float) -> None:
    """Point 5 (collective; any PE count)."""
    rows = MPI.COMM_WORLD.gather((pgas.my_pe(), *idle.idle_shares(seconds)), 0)
    if rows is None:
        return
    for pe, (threads_asleep, _), (_, main_waiting) in rows:
        verdicts.add(5, f"PE {pe} runtime threads, idle (% of a core)", f"{threads_asleep:.2f}", "", None,
                     f"< {IDLE_LIMIT:g}%", threads_asleep < IDLE_LIMIT)
        verdicts.add(5, f"PE {pe} main thread in signal_wait_until (%)", f"{main_waiting:.2f}", "", None,
                     f"< {WAITING_LIMIT:g}%", main_waiting < WAITING_LIMIT)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m pgas.bench across_nodes", description=__doc__.split("\n")[0])
    parser.add_argument("--iters", type=int, default=5000, help="host calls per latency repetition (point 1)")
    parser.add_argument("--device-iters", type=int, default=100, help="operations per device latency repetition")
    parser.add_argument("--messages", type=int, default=1024, help="operations per device rate repetition")
    parser.add_argument("--max-bytes", type=parse_size, default=BIG_PUT,
                        help="leave out the collectives' sizes above this, and put this many bytes for point 4 "
                             "(default 64m: the goals' sizes)")
    parser.add_argument("--idle-seconds", type=float, default=10.0, help="how long each idle phase lasts (point 5)")
    args = parser.parse_args(argv)
    for name in ("iters", "device_iters", "messages", "idle_seconds"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    if args.max_bytes < min(COLLECTIVE_SIZES):
        parser.error(f"--max-bytes must be at least {min(COLLECTIVE_SIZES)}, got {args.max_bytes}")
    os.environ["PGAS_TIMEOUT"] = str(max(60.0, 4 * args.idle_seconds))    # (the idle wait)
    pgas.init()
    me, n, info = pgas.my_pe(), pgas.n_pes(), pgas.info()
    nodes = len(set(info["node_of_pe"]))
    if nodes < 2:
        raise SystemExit("across_nodes needs PEs on 2 or more nodes: pgasrun -np 2 --pes-per-node 1 "
                         "python -m pgas.bench across_nodes")
    pair = n == 2
    if me == 0:
        print(f"{n} PEs on {nodes} nodes; PE 0 reaches PE {n - 1} through {info['transports'][n - 1]}; "
              f"ratio: the point's measure (above its goal: held)", flush=True)
    verdicts, started = Verdicts(), time.monotonic()
    if pair:
        _host_latency(verdicts, args.iters)
    _collectives(verdicts, [size for size in COLLECTIVE_SIZES if size <= args.max_bytes])
    if pair:
        _bandwidth(verdicts, args.max_bytes)
        if pgas.backend() == "simulator":       # (the CPU proxy, and simulated threads, are its own)
            _device(verdicts, args.device_iters, args.messages)
    _idle(verdicts, args.idle_seconds)
    if me == 0:
        if not pair:
            print("points 1, 2 and 4 are measured with 2 PEs on 2 nodes")
        elif pgas.backend() != "simulator":
            print("point 2 compares the simulator's device calls with its CPU proxy's: simulator backend only")
        verdicts.print()
        print(f"measured in {time.monotonic() - started:.0f} s")
    pgas.finalize()


if __name__ == "__main__":
    main()
