"""Load test of the remote path: many threads issue small puts and atomics to every PE.

    pgasrun -np 4 --pes-per-node 2 python -m pgas.bench nic_load --threads 64 --ops 64

Every thread of every PE, for each of ``--ops`` rounds and each other PE, writes a value
unique to (source PE, thread, round) into its own slot of that PE's ``slots`` (``p``),
adds it to one of 8 shared sums there (``atomic_add``) and takes a ticket from one shared
counter there (``atomic_fetch_add``). PEs of one node do the same on the same words
by load/store and CPU atomics while the NIC applies the others' requests. Afterwards each
PE checks its slots and sums, and the tickets handed out by every counter are gathered:
each number must have been handed out exactly once. Prints the checks and the rates;
exits non-zero if anything was lost or duplicated.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from mpi4py import MPI
from numba import cuda

import pgas
import pgas.device as dev

SUMS = 8


def _value(pe, thread, i):
    return (pe + 1) * 1_000_003 + thread * 1009 + i


@cuda.jit
def _load(slots, sums, counter, tickets, ops):
    t = cuda.threadIdx.x + cuda.blockIdx.x * cuda.blockDim.x
    threads = cuda.gridDim.x * cuda.blockDim.x
    me, n = dev.my_pe(), dev.n_pes()
    for i in range(ops):
        for k in range(1, n):
            pe = (me + k) % n
            v = (me + 1) * 1_000_003 + t * 1009 + i
            dev.p(slots[(me * threads + t) * ops + i:], v, pe)
            dev.atomic_add(sums[t % 8:], v, pe)
            tickets[((k - 1) * threads + t) * ops + i] = dev.atomic_fetch_add(counter, 1, pe)
    dev.quiet()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m pgas.bench nic_load", description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=64, help="threads per block")
    parser.add_argument("--blocks", type=int, default=1, help="blocks per PE")
    parser.add_argument("--ops", type=int, default=16, help="rounds per thread (each: a p, an atomic_add "
                                                            "and an atomic_fetch_add to every other PE)")
    args = parser.parse_args(argv)
    pgas.init()
    me, n = pgas.my_pe(), pgas.n_pes()
    threads, ops = args.blocks * args.threads, args.ops
    slots = pgas.zeros(n * threads * ops, np.int64)
    sums, counter = pgas.zeros(SUMS, np.int64), pgas.zeros(1, np.int64)
    tickets = np.full((n - 1) * threads * ops, -1, np.int64)
    pgas.barrier_all()
    start = time.perf_counter()
    _load[args.blocks, args.threads](slots, sums, counter, tickets, ops)
    pgas.barrier_all()
    seconds = time.perf_counter() - start
    problems = []
    got = slots.copy_to_host().reshape(n, threads, ops)
    for pe in range(n):
        want = np.zeros((threads, ops), np.int64) if pe == me else \
            np.fromfunction(lambda t, i: _value(pe, t, i), (threads, ops), dtype=np.int64)
        if not np.array_equal(got[pe], want):
            problems.append(f"{int((got[pe] != want).sum())} slots written by PE {pe} are wrong")
    want_sums = np.zeros(SUMS, np.int64)
    for pe in range(n):
        if pe != me:
            for t in range(threads):
                want_sums[t % SUMS] += sum(_value(pe, t, i) for i in range(ops))
    if not np.array_equal(sums.copy_to_host(), want_sums):
        problems.append(f"atomic sums {sums.copy_to_host().tolist()} != {want_sums.tolist()}")
    # tickets[k-1] were drawn from PE (me + k) % n's counter: gather per counter
    drawn = MPI.COMM_WORLD.allgather(tickets.reshape(n - 1, -1))
    mine = np.concatenate([drawn[pe][(me - pe) % n - 1] for pe in range(n) if pe != me]) if n > 1 else []
    total = (n - 1) * threads * ops
    if sorted(np.asarray(mine).tolist()) != list(range(total)) or counter.copy_to_host()[0] != total:
        problems.append(f"counter handed out {len(set(np.asarray(mine).tolist()))} distinct tickets of {total} "
                        f"(final value {counter.copy_to_host()[0]})")
    requests = 3 * (n - 1) * threads * ops
    transports = sorted(set(pgas.info()["transports"].values()) - {"self"})
    print(f"PE {me}: {args.blocks} x {args.threads} threads x {ops} rounds x {n - 1} peers ({', '.join(transports)}): "
          f"{requests} requests in {seconds:.2f} s ({requests / seconds:,.0f} per s); "
          + ("checksums ok, nothing lost or duplicated" if not problems else "FAILED: " + "; ".join(problems)),
          flush=True)
    failed = MPI.COMM_WORLD.allreduce(bool(problems))
    pgas.finalize()
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
