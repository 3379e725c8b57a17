"""Host put bandwidth to a peer, beside a local copy of the same sizes in the same run.

    pgasrun -np 2 python -m pgas.bench put_bw
    pgasrun -np 2 --pes-per-node 1 python -m pgas.bench put_bw     # through the NIC (proxy)
    PGAS_BACKEND=cuda pgasrun -np 2 python -m pgas.bench put_bw     # on a GPU machine

PE 0 puts into PE 1's copy of a symmetric array. The references: a copy of the same
number of bytes between two local buffers (numpy on the simulator backend; on the cuda
backend a device-to-device copy on PE 0's GPU, from the same device source the put
reads), and MPI's ``Put`` + ``Flush`` of host memory into PE 1's window from
``MPI.Win.Allocate``. Every put and every copy is complete before the next starts (no
stream: the call waits), so the small sizes show the latency of one call. All are timed
in one run and reported as the best of several repetitions (these machines are noisy).
"""
from __future__ import annotations

import numpy as np
from mpi4py import MPI

import pgas

from ._timing import best_seconds, human_bytes, window_on_pe1

SIZES = [8 << (2 * k) for k in range(12)] + [64 << 20]   # 8 B, 32 B, ... 32 MiB, 64 MiB


def _local_buffers(nbytes: int):
    """Source, local destination, and the reference copy between them, for this backend."""
    if pgas.backend() == "cuda":
        from numba import cuda

        def device_copy(dst, src):
            dst.copy_to_device(src)      # cuMemcpyDtoD, asynchronous to the host: wait for it
            cuda.synchronize()
        return cuda.to_device(np.ones(nbytes, np.uint8)), cuda.device_array(nbytes, np.uint8), device_copy
    return np.ones(nbytes, np.uint8), np.zeros(nbytes, np.uint8), np.copyto


def mpi_put_seconds(win, host, size: int) -> float:
    """MPI Put + Flush of ``size`` bytes of ``host`` into PE 1's window (on PE 0)."""
    part = host[:size]

    def put():
        win.Put(part, 1)
        win.Flush(1)
    return best_seconds(put, iterations(size))


def iterations(size: int) -> int:
    """Puts per repetition at ``size`` bytes: at least 3, at most 2000, about 256 MiB in all."""
    return max(3, min(2000, (256 << 20) // size))


def main(argv=None) -> None:
    pgas.init()
    me, n = pgas.my_pe(), pgas.n_pes()
    if n < 2:
        raise SystemExit("put_bw needs 2 PEs: pgasrun -np 2 python -m pgas.bench put_bw")
    comm = MPI.COMM_WORLD
    dest = pgas.zeros(max(SIZES), np.uint8)
    src, local_dest, local_copy = _local_buffers(max(SIZES))
    host = src if isinstance(src, np.ndarray) else np.ones(max(SIZES), np.uint8)
    ours, mpi = {}, {}
    with window_on_pe1(max(SIZES)) as win:
        for size in SIZES:      # pgas and MPI in turn at each size: both see the same machine
            if me == 0:     # the slices are made once, as for MPI: the loop times the calls alone
                target, source, copy_target = dest[:size], src[:size], local_dest[:size]
                ours[size] = (best_seconds(lambda: pgas.put(target, source, 1), iterations(size)),
                              best_seconds(lambda: local_copy(copy_target, source), iterations(size)))
            pgas.barrier_all()
            if me == 0:
                mpi[size] = mpi_put_seconds(win, host, size)
            comm.Barrier()      # PE 1 inside MPI meanwhile: its passive-target RMA may need it
    if me == 0:
        print(f"PE 0 -> PE 1 through {pgas.info()['transports'][1]}; put/copy and put/MPI: "
              "bandwidth ratios (above 1: the put is faster)")
        print(f"{'size':>10} {'put GB/s':>10} {'copy GB/s':>10} {'MPI GB/s':>10} {'put/copy':>9} "
              f"{'put/MPI':>8} {'put us':>9} {'MPI us':>9}")
        for size in SIZES:
            (put, copy), theirs = ours[size], mpi[size]
            print(f"{human_bytes(size):>10} {size / put / 1e9:10.2f} {size / copy / 1e9:10.2f} "
                  f"{size / theirs / 1e9:10.2f} {copy / put:9.2f} {theirs / put:8.2f} {put * 1e6:9.2f} "
                  f"{theirs * 1e6:9.2f}", flush=True)
    pgas.free(dest)
    pgas.finalize()


if __name__ == "__main__":
    main()
