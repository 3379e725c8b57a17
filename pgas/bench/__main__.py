"""``python -m pgas.bench NAME``: run one benchmark (under pgasrun for several PEs)."""
from __future__ import annotations

import argparse
import importlib

BENCHMARKS = {"put_bw": "host put bandwidth to a peer vs a local copy (2 PEs)",
              "latency": "small host put/get latency vs MPI Put+Flush/Get+Flush on a window (2 PEs)",
              "collectives": "all-reduce, broadcast, fcollect (auto) vs MPI from 8 B to 64 MiB (2+ PEs)",
              "allreduce": "all-reduce bandwidth per algorithm vs mpi4py Allreduce (2+ PEs)",
              "nic_load": "load test of the remote path: many threads, small puts and atomics, checksums",
              "remote": "8-byte put and fetch-add latency and rate through the NIC vs MPI RMA (2 PEs)",
              "pingpong": "round trips: device p, host signal_op and put_nbi, each + signal_wait_until, vs MPI "
                          "Send/Recv (2 PEs)",
              "across_nodes": "the five across-node goals, each beside MPI on the same wire, held or not "
                              "(2 PEs on 2 nodes; 4 PEs for collectives)",
              "idle": "CPU an idle PE uses: its runtime threads, and a host thread waiting for a flag (2+ PEs)",
              "target_states": "rates of host put, get and fetch-add to a PE that sleeps or is busy, vs MPI's, and "
                               "CPU per request (2 PEs on 2 nodes)",
              "compile": "time to compile kernels calling pgas.device for sm_90, beside a plain kernel (no GPU)",
              "checker": "whole runs of the examples and a collective workload with and without PGAS_CHECK=1"}


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m pgas.bench",
        epilog="benchmarks: " + "; ".join(f"{k}: {v}" for k, v in BENCHMARKS.items()))
    parser.add_argument("name", choices=sorted(BENCHMARKS))
    parser.add_argument("options", nargs=argparse.REMAINDER, help="options of that benchmark")
    args = parser.parse_args()
    importlib.import_module(f"pgas.bench.{args.name}").main(args.options)


if __name__ == "__main__":
    main()
