"""What an idle PE costs: the CPU time of its runtime threads (every thread but the main
one: the NIC's progress threads, MPI's) while the main thread sleeps, and then that of a
host thread waiting in ``signal_wait_until`` for a flag nobody sets, each over
``--seconds``, as ``/proc/self/task/*/stat`` counts it.

    pgasrun -np 2 python -m pgas.bench idle
    pgasrun -np 2 --pes-per-node 1 python -m pgas.bench idle    # with PEs on another node

Each PE prints its percentages of one core. PGAS_TIMEOUT is raised for the wait: it
ends when the flag is set, ``--seconds`` after it began.
"""
from __future__ import annotations

import argparse
import os
import threading
import time

import numpy as np
from mpi4py import MPI

import pgas


def _cpu_seconds() -> dict[int, float]:
    """Each thread of this process: its user + system CPU seconds so far."""
    tick, seconds = os.sysconf("SC_CLK_TCK"), {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:         # (a thread that ended meanwhile)
            continue
        seconds[int(tid)] = (int(fields[11]) + int(fields[12])) / tick
    return seconds


def _shares(during, seconds: float) -> tuple[float, float]:
    """(runtime threads, main thread): percent of a core each used while ``during()`` ran."""
    main = threading.get_native_id()
    before, started = _cpu_seconds(), time.monotonic()
    during()
    after, elapsed = _cpu_seconds(), time.monotonic() - started
    used = {tid: after[tid] - before.get(tid, 0.0) for tid in after}
    runtime = sum(spent for tid, spent in used.items() if tid != main)
    return 100 * runtime / elapsed, 100 * used.get(main, 0.0) / elapsed


def idle_shares(seconds: float) -> tuple[tuple[float, float], tuple[float, float]]:
    """This PE's (runtime threads, main thread) percent of a core over ``seconds`` while
    the main thread sleeps, then while it waits in ``signal_wait_until`` for a flag set
    ``seconds`` after (collective; PGAS_TIMEOUT must exceed ``seconds``)."""
    me, comm = pgas.my_pe(), MPI.COMM_WORLD
    flag = pgas.zeros(1, np.uint64)
    pgas.barrier_all()
    asleep = _shares(lambda: time.sleep(seconds), seconds)
    comm.Barrier()
    setter = threading.Timer(seconds, lambda: pgas.signal_op(flag, 1, pgas.SIGNAL_SET, me))
    setter.start()
    waiting = _shares(lambda: pgas.signal_wait_until(flag, pgas.CMP_EQ, 1), seconds)
    setter.join()
    pgas.barrier_all()
    pgas.free(flag)
    return asleep, waiting


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m pgas.bench idle", description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="how long each phase lasts")
    args = parser.parse_args(argv)
    if args.seconds <= 0:
        parser.error(f"--seconds must be positive, got {args.seconds}")
    os.environ["PGAS_TIMEOUT"] = str(max(60.0, 4 * args.seconds))
    pgas.init()
    me, comm = pgas.my_pe(), MPI.COMM_WORLD
    asleep, waiting = idle_shares(args.seconds)
    rows = comm.gather((me, asleep, waiting), 0)
    if me == 0:
        print(f"percent of one core over {args.seconds:g} s, per PE (transports: {pgas.info()['transports']})")
        print(f"{'PE':>4} {'runtime threads':>16} {'main (asleep)':>14} {'runtime threads':>16} "
              f"{'main (waiting)':>15}")
        for pe, (runtime_asleep, main_asleep), (runtime_waiting, main_waiting) in rows:
            print(f"{pe:>4} {runtime_asleep:>16.2f} {main_asleep:>14.2f} {runtime_waiting:>16.2f} "
                  f"{main_waiting:>15.2f}")
    pgas.finalize()
