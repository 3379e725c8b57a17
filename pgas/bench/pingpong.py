"""Ping-pong between two PEs: a kernel's ``p`` answered by the peer's kernel, and a
``signal_op`` and a ``put_nbi`` answered from host code, beside MPI's ``Send``/``Recv`` of 8
bytes, in the same run.

    pgasrun -np 2 python -m pgas.bench pingpong
    pgasrun -np 2 --pes-per-node 1 python -m pgas.bench pingpong    # through the NIC (another node)

Each round trip: PE 0 writes round ``i`` into PE 1's flag (``p``) and waits for its own
flag to reach ``i`` (``signal_wait_until``); PE 1 waits for its flag, then writes ``i``
back. The device form is one kernel of one thread on each PE (both waits are device
waits); the host forms call ``pgas.signal_op`` (``SIGNAL_SET``: complete on return, a
round trip of its own to a PE on another node) or ``pgas.put_nbi`` of the round's number
(complete later: the wait does not wait for it) and ``pgas.signal_wait_until``. Printed for each of ``--stretches`` stretches of ``--rounds``
round trips: the mean round trip in microseconds and, in brackets, the median (a mean
far above its median: a few round trips that stalled), and MPI's the same way. The
device form is timed on the device (the GPU's globaltimer; in the simulator, the host's
clock), the others on the host.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from mpi4py import MPI
from numba import cuda

import pgas
import pgas.device as dev


if pgas.backend() == "cuda":
    from pgas.cuda._ptx import globaltimer as _device_clock_ns     # the GPU's nanosecond clock
else:
    def _device_clock_ns() -> int:
        """The simulator's kernels are Python: the host's clock."""
        return time.perf_counter_ns()


@cuda.jit
def _device_pingpong(flag, rounds, me, stamps):
    """``stamps[i]``: the device clock (ns) after round trip i; ``stamps[0]``: at the start."""
    other = 1 - me
    stamps[0] = _device_clock_ns()
    for i in range(1, rounds + 1):
        if me == 0:
            dev.p(flag, np.uint64(i), other)
            dev.signal_wait_until(flag, dev.CMP_GE, np.uint64(i))
        else:
            dev.signal_wait_until(flag, dev.CMP_GE, np.uint64(i))
            dev.p(flag, np.uint64(i), other)
        stamps[i] = _device_clock_ns()


def _host_pingpong(flag, rounds: int, me: int, stamps, nbi: bool) -> None:
    other, number = 1 - me, np.zeros(1, np.uint64)

    def send(i):
        if nbi:
            number[0] = i
            pgas.put_nbi(flag, number, other)
        else:
            pgas.signal_op(flag, i, pgas.SIGNAL_SET, other)
    for i in range(1, rounds + 1):
        if me == 0:
            send(i)
            pgas.signal_wait_until(flag, pgas.CMP_GE, i)
        else:
            pgas.signal_wait_until(flag, pgas.CMP_GE, i)
            send(i)
        stamps[i] = time.perf_counter()
    pgas.quiet()


def _mpi_pingpong(comm, rounds: int, me: int, stamps) -> None:
    other, message = 1 - me, np.zeros(1, np.uint64)
    for i in range(1, rounds + 1):
        if me == 0:
            message[0] = i
            comm.Send(message, other)
            comm.Recv(message, other)
        else:
            comm.Recv(message, other)
            comm.Send(message, other)
        stamps[i] = time.perf_counter()


def _stretch_figures(run, flag, stretches: int, rounds: int) -> list[tuple[float, float]]:
    """(mean, median) round trip in seconds of each stretch of ``rounds``, as PE 0 saw them."""
    figures = []
    for _ in range(stretches):
        if flag is not None:
            flag.copy_to_device(np.zeros(1, np.uint64))
        pgas.barrier_all()
        stamps = np.zeros(rounds + 1)
        stamps[0] = time.perf_counter()
        run(stamps)
        trips = np.diff(stamps)
        figures.append((float(trips.mean()), float(np.median(trips))))
    return figures


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m pgas.bench pingpong", description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=500, help="round trips per stretch")
    parser.add_argument("--stretches", type=int, default=5, help="stretches of each form")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.stretches < 1:
        parser.error(f"--rounds and --stretches must be at least 1, got {args.rounds} and {args.stretches}")
    pgas.init()
    me, comm = pgas.my_pe(), MPI.COMM_WORLD
    if pgas.n_pes() != 2:
        raise SystemExit("pingpong needs 2 PEs: pgasrun -np 2 python -m pgas.bench pingpong")
    flag = pgas.zeros(1, np.uint64)

    device_stamps = cuda.device_array(max(args.rounds, 20) + 1, np.int64)   # (20: the warm-up)

    def device(stamps):
        rounds = stamps.size - 1
        _device_pingpong[1, 1](flag, rounds, me, device_stamps[:rounds + 1])
        cuda.synchronize()
        stamps[:] = device_stamps[:rounds + 1].copy_to_host() * 1e-9     # timed on the device

    _stretch_figures(device, flag, 1, 20)       # compiled and warm before it is timed
    figures = {"device p + signal_wait_until": _stretch_figures(device, flag, args.stretches, args.rounds),
               "host signal_op + signal_wait_until": _stretch_figures(
                   lambda stamps: _host_pingpong(flag, stamps.size - 1, me, stamps, False), flag, args.stretches,
                   args.rounds),
               "host put_nbi + signal_wait_until": _stretch_figures(
                   lambda stamps: _host_pingpong(flag, stamps.size - 1, me, stamps, True), flag, args.stretches,
                   args.rounds),
               "MPI Send + Recv, 8 B": _stretch_figures(
                   lambda stamps: _mpi_pingpong(comm, stamps.size - 1, me, stamps), None, args.stretches,
                   args.rounds)}
    if me == 0:
        print(f"PE 0 <-> PE 1 through {pgas.info()['transports'][1]}; mean (median) round trip in "
              f"microseconds per stretch of {args.rounds}")
        for name, stretches in figures.items():
            print(f"{name:>34}: " + " ".join(f"{mean * 1e6:8.1f} ({median * 1e6:.0f})" for mean, median in stretches),
                  flush=True)
    pgas.finalize()
