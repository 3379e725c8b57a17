"""Rates of small host requests to a PE that sleeps or is busy in Python, beside MPI's
to the same PE in the same state, and each PE's CPU time per request.

    pgasrun -np 2 --pes-per-node 1 python -m pgas.bench target_states
    pgasrun -np 2 --hosts h1,h2 python -m pgas.bench target_states   # two hosts (docs/transports.md)

PE 0 repeats each request for ``--seconds``: ``put`` + ``quiet`` and ``get`` of 8 bytes and
``atomic_fetch_add``, then MPI's ``Put``, ``Get`` and ``Fetch_and_op``, each + ``Flush``, on a
window from ``MPI.Win.Allocate`` on PE 1 (passive target, ``Lock_all``). Meanwhile PE 1 sleeps
(``time.sleep``: neither its main thread nor MPI progresses) or spins in Python. A
one-sided request needs nothing of PE 1's CPU; one that its target must apply waits for
whatever progresses there (pgas's progress thread; MPI's atomics wait for PE 1 to call MPI
again). CPU per request: each process's user + system time over the phase, divided by PE 0's
requests (for a busy PE 1 that is mostly its own loop).
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np
from mpi4py import MPI

import pgas

from ._timing import window_on_pe1

STATES = ("sleeps", "busy")


def _cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


def _requests(dest, word, win):
    """(name, pgas's request, MPI's request): PE 0's calls to PE 1."""
    src, back, t8 = np.ones(8, np.uint8), np.zeros(8, np.uint8), dest[:8]
    one, result = np.ones(1, np.int64), np.zeros(1, np.int64)

    def put():
        pgas.put(t8, src, 1)
        pgas.quiet()

    def mpi_put():
        win.Put(src, 1, target=0)
        win.Flush(1)

    def mpi_get():
        win.Get(back, 1, target=0)
        win.Flush(1)

    def mpi_fetch_add():
        win.Fetch_and_op(one, result, 1, 0, MPI.SUM)
        win.Flush(1)
    return [("put+quiet 8 B", put, mpi_put), ("get 8 B", lambda: pgas.get(back, t8, 1), mpi_get),
            ("atomic_fetch_add", lambda: pgas.atomic_fetch_add(word, 1, 1), mpi_fetch_add)]


def _phase(request, state: str, seconds: float, comm) -> tuple[float, float, float]:
    """PE 0 repeats ``request`` for ``seconds`` while PE 1 is in ``state``: (requests per
    second, PE 0's and PE 1's CPU microseconds per request)."""
    comm.Barrier()
    before = _cpu_seconds()
    count, rate = 0, 0.0
    if comm.Get_rank() == 0:
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            request()
            count += 1
        rate = count / (time.perf_counter() - started)
    elif state == "sleeps":
        time.sleep(seconds + 0.2)
    else:
        end = time.perf_counter() + seconds + 0.2
        while time.perf_counter() < end:
            pass
    used = comm.allgather(_cpu_seconds() - before)
    count = comm.bcast(count, root=0)
    return rate, used[0] / max(count, 1) * 1e6, used[1] / max(count, 1) * 1e6


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m pgas.bench target_states", description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="how long each request is repeated")
    args = parser.parse_args(argv)
    if args.seconds <= 0:
        parser.error(f"--seconds must be positive, got {args.seconds}")
    os.environ.setdefault("PGAS_TIMEOUT", str(max(30.0, 10 * args.seconds)))
    pgas.init()
    me, comm = pgas.my_pe(), MPI.COMM_WORLD
    if pgas.n_pes() != 2 or pgas.info()["transports"][1 - me] == "p2p":
        raise SystemExit("target_states needs 2 PEs on 2 nodes: pgasrun -np 2 --pes-per-node 1 "
                         "python -m pgas.bench target_states")
    dest, word = pgas.zeros(1024, np.uint8), pgas.zeros(1, np.int64)
    if me == 0:
        print(f"PE 0 -> PE 1 through {pgas.info()['transports'][1]}; requests per second over {args.seconds:g} s, "
              "CPU microseconds per request on each PE")
        print(f"{'PE 1':6} {'request':17} {'pgas/s':>10} {'PE 0':>7} {'PE 1':>7} {'MPI/s':>10} {'PE 0':>7} "
              f"{'PE 1':>7} {'pgas/MPI':>9}")
    with window_on_pe1(1024) as win:
        for state in STATES:
            for name, ours, theirs in _requests(dest, word, win):
                rate, cpu0, cpu1 = _phase(ours, state, args.seconds, comm)
                mpi_rate, mpi_cpu0, mpi_cpu1 = _phase(theirs, state, args.seconds, comm)
                if me == 0:
                    ratio = rate / mpi_rate if mpi_rate else float("inf")
                    print(f"{state:6} {name:17} {rate:>10,.0f} {cpu0:>7.1f} {cpu1:>7.1f} {mpi_rate:>10,.0f} "
                          f"{mpi_cpu0:>7.1f} {mpi_cpu1:>7.1f} {ratio:>9.2f}", flush=True)
    pgas.barrier_all()
    pgas.finalize()
