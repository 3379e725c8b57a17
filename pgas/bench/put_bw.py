"""Host put bandwidth to a peer, beside a local copy of the same sizes in the same run.

    pgasrun -np 2 python -m pgas.bench put_bw
    pgasrun -np 2 --pes-per-node 1 python -m pgas.bench put_bw     # through the NIC (proxy)
    PGAS_BACKEND=cuda pgasrun -np 2 python -m pgas.bench put_bw     # on a GPU machine

PE 0 puts into PE 1's copy of a symmetric array. The reference copies the same number of
bytes between two local buffers: numpy on the simulator backend; on the cuda backend a
device-to-device copy on PE 0's GPU, from the same device source the put reads. Every
put and every copy is complete before the next starts (no stream: the call waits), so
the small sizes show the latency of one call. Both are timed in one run and reported as
the best of several repetitions (these machines are noisy).
"""
from __future__ import annotations

import time

import numpy as np

import pgas

SIZES = [8 << (2 * k) for k in range(12)] + [64 << 20]   # 8 B, 32 B, ... 32 MiB, 64 MiB
REPEATS = 5


def _best_seconds(action, iterations: int) -> float:
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter()
        for _ in range(iterations):
            action()
        best = min(best, (time.perf_counter() - start) / iterations)
    return best


def _human(nbytes: int) -> str:
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= size:
            return f"{nbytes // size} {unit}"
    return f"{nbytes} B"


def _local_buffers(nbytes: int):
    """Source, local destination, and the reference copy between them, for this backend."""
    if pgas.backend() == "cuda":
        from numba import cuda

        def device_copy(dst, src):
            dst.copy_to_device(src)      # cuMemcpyDtoD, asynchronous to the host: wait for it
            cuda.synchronize()
        return cuda.to_device(np.ones(nbytes, np.uint8)), cuda.device_array(nbytes, np.uint8), device_copy
    return np.ones(nbytes, np.uint8), np.zeros(nbytes, np.uint8), np.copyto


def main(argv=None) -> None:
    pgas.init()
    me, n = pgas.my_pe(), pgas.n_pes()
    if n < 2:
        raise SystemExit("put_bw needs 2 PEs: pgasrun -np 2 python -m pgas.bench put_bw")
    dest = pgas.zeros(max(SIZES), np.uint8)
    src, local_dest, local_copy = _local_buffers(max(SIZES))
    if me == 0:
        print(f"PE 0 -> PE 1 through {pgas.info()['transports'][1]}")
        print(f"{'size':>10} {'put GB/s':>10} {'copy GB/s':>10} {'put/copy':>9} {'put us':>9}")
    for size in SIZES:
        iterations = max(3, min(2000, (256 << 20) // size))
        if me == 0:
            put = _best_seconds(lambda: pgas.put(dest[:size], src[:size], 1), iterations)
            copy = _best_seconds(lambda: local_copy(local_dest[:size], src[:size]), iterations)
            print(f"{_human(size):>10} {size / put / 1e9:10.2f} {size / copy / 1e9:10.2f} "
                  f"{copy / put:9.2f} {put * 1e6:9.2f}", flush=True)
        pgas.barrier_all()
    pgas.free(dest)
    pgas.finalize()


if __name__ == "__main__":
    main()
