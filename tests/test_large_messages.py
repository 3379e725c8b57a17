"""Copies too large for one NIC request arrive whole (docs/transports.md, "Message sizes").

One RDMA write or read carries at most ``mlx5.MAX_MESSAGE`` (1 GiB) here: a data segment's
byte count has 31 bits, its top bit marking inline data. A 2 GiB put used to go out as one
request whose count read as an empty inline write: pgas returned success and wrote
``size mod 2 GiB`` bytes. Copies are now split, and an engine refuses a request it cannot
carry rather than truncate it.
"""
import pytest

import pgas
from conftest import pgasrun
from pgas.nic import _mlx5 as mlx5

# Every byte is checked against a pattern of period 251 (a prime), which no 1 GiB piece
# boundary lines up with: a piece written at the wrong offset shows.
LARGE = r"""
import sys
import numpy as np
import pgas, pgas.device as dev
from numba import cuda
from pgas.runtime._arrays import as_ndarray

NBYTES = int(sys.argv[1])
IN_KERNELS = sys.argv[2] == "1"     # also device put and get (the same Transports.copy, from a kernel)
NBI = sys.argv[3] == "1"            # the host calls as put_signal_nbi and get_nbi, completed by quiet
CHUNK = 64 << 20
TILE = np.resize(np.arange(251, dtype=np.uint8), CHUNK + 251)


def fill(a):
    for start in range(0, a.size, CHUNK):
        piece = a[start:start + CHUNK]
        piece[:] = TILE[start % 251:start % 251 + piece.size]


def first_wrong(a):
    for start in range(0, a.size, CHUNK):
        piece = a[start:start + CHUNK]
        expected = TILE[start % 251:start % 251 + piece.size]
        if not np.array_equal(piece, expected):
            return start + int(np.argmax(piece != expected))
    return None


@cuda.jit
def device_get(dest, src, pe):
    dev.get(dest, src, pe)


@cuda.jit
def device_put(dest, src, pe):
    dev.put(dest, src, pe)


def host_get(local, sym, pe):
    if NBI:
        pgas.get_nbi(local, sym, pe)
        pgas.quiet()
    else:
        pgas.get(local, sym, pe)


pgas.init()
me, peer = pgas.my_pe(), 1 - pgas.my_pe()
sym = pgas.empty(NBYTES, np.uint8)
signal = pgas.zeros(1, np.uint64)
mine = as_ndarray(sym, "test", "sym")
if me == 0:
    local = np.empty(NBYTES, np.uint8)
    fill(local)
    if NBI:                                # the signal is set once every byte has landed
        pgas.put_signal_nbi(sym, local, signal, 7, pgas.SIGNAL_SET, peer)
        pgas.quiet()
    else:
        pgas.put(sym, local, peer)         # host put: into PE 1, on the other node
elif NBI:
    pgas.signal_wait_until(signal, pgas.CMP_EQ, 7)
pgas.barrier_all()
if me == 1:
    print(f"put: first wrong byte {first_wrong(mine)}", flush=True)
    if IN_KERNELS:
        mine[:] = 0
pgas.barrier_all()
if me == 0 and IN_KERNELS:
    local[:] = 0
    host_get(local, sym, peer)             # host get: out of PE 1 (all zeros now)
    print(f"get: zeros {not local.any()}", flush=True)
    fill(mine)
    device_put[1, 1](sym, sym, peer)       # the same paths in a kernel
pgas.barrier_all()
if me == 0:
    if IN_KERNELS:
        mine[:] = 0
        device_get[1, 1](sym, sym, peer)
        print(f"device put and get: first wrong byte {first_wrong(mine)}", flush=True)
    local[:] = 0
    host_get(local, sym, peer)             # host get: out of PE 1
    print(f"get: first wrong byte {first_wrong(local)}", flush=True)
pgas.barrier_all()
pgas.finalize()
"""


# The proxy runs the host calls only, as put_signal_nbi and get_nbi (every form's requests
# come from the same Transports.copy), to keep the suite short.
# Exactly 2 GiB used to write nothing, 2 GiB + 8 B eight bytes.
# The ucx engine's data travels eager up to a threshold of UCX's (5 KiB between emulated
# nodes), by rendezvous above it: sizes on both sides, and two 1 GiB rendezvous pieces.
@pytest.mark.parametrize("transport,in_kernels,nbi,nbytes", [("ibgda", True, False, (2 << 30) + 8),
                                                             ("proxy", False, True, (2 << 30) + 8),
                                                             ("proxy", False, False, 2 << 30),
                                                             ("ucx", False, False, (2 << 30) + 8),
                                                             ("ucx", True, True, 4096),
                                                             ("ucx", True, False, 6000),
                                                             ("ucx", True, True, 64 << 20)],
                         ids=["ibgda-2GiB+8", "proxy-nbi-2GiB+8", "proxy-2GiB", "ucx-2GiB+8", "ucx-nbi-4KiB",
                              "ucx-6000B", "ucx-nbi-64MiB"])
def test_a_put_and_a_get_above_2_gib_arrive_whole_across_nodes(tmp_path, clean_shm, transport, in_kernels, nbi,
                                                               nbytes):
    script = tmp_path / "large.py"
    script.write_text(LARGE)
    proc = pgasrun(2, "python", str(script), str(nbytes), "1" if in_kernels else "0", "1" if nbi else "0",
                   options=("--pes-per-node", "1"),
                   timeout=600, env={"PGAS_REMOTE_TRANSPORT": transport, "PGAS_TIMEOUT": "300",
                                     "PGAS_SYMMETRIC_SIZE": str(nbytes + (64 << 20))})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "put: first wrong byte None" in proc.stdout, proc.stdout
    assert "get: first wrong byte None" in proc.stdout, proc.stdout
    assert ("get: zeros True" in proc.stdout) == in_kernels, proc.stdout
    assert ("device put and get: first wrong byte None" in proc.stdout) == in_kernels, proc.stdout


def test_an_engine_refuses_a_request_larger_than_one_message():
    mlx5.check_message("pgas.put", mlx5.MAX_MESSAGE)
    with pytest.raises(pgas.PgasError, match=r"pgas.put: one NIC request carries at most 1073741824 bytes, got "
                                        r"2147483648 \(pgas splits larger copies"):
        mlx5.check_message("pgas.put", 2 << 30)


STRIDED = r"""
import numpy as np
import pgas, pgas.device as dev
from numba import cuda

STRIDE = (2 << 30) // 8 + 1          # elements: 2 GiB + 8 bytes apart, the third past 4 GiB


@cuda.jit
def scatter(dest, src, pe):
    dev.iput(dest, src, STRIDE, 1, 3, pe)


@cuda.jit
def gather(dest, src, pe):
    dev.iget(dest, src, 1, STRIDE, 3, pe)


pgas.init()
me, peer = pgas.my_pe(), 1 - pgas.my_pe()
far = pgas.empty(2 * STRIDE + 1, np.int64)        # 4 GiB + 24 bytes; the pages never touched stay sparse
near = pgas.zeros(3, np.int64)
if me == 0:
    near.copy_to_device(np.array([11, 22, 33], np.int64))
    scatter[1, 1](far, near, peer)
    cuda.synchronize()
pgas.barrier_all()
if me == 1:
    print("iput:", [int(far[i]) for i in (0, STRIDE, 2 * STRIDE)], flush=True)
pgas.barrier_all()
if me == 0:
    near.copy_to_device(np.zeros(3, np.int64))
    gather[1, 1](near, far, peer)
    print("iget:", near.copy_to_host().tolist(), flush=True)
pgas.barrier_all()
pgas.finalize()
"""


@pytest.mark.parametrize("transport", ["ibgda", "proxy"])
def test_strided_copies_whose_elements_lie_beyond_4_gib_arrive_where_they_belong(tmp_path, clean_shm, transport):
    script = tmp_path / "strided.py"
    script.write_text(STRIDED)
    proc = pgasrun(2, "python", str(script), options=("--pes-per-node", "1"), timeout=300,
                   env={"PGAS_REMOTE_TRANSPORT": transport, "PGAS_SYMMETRIC_SIZE": str((4 << 30) + (64 << 20))})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "iput: [11, 22, 33]" in proc.stdout, proc.stdout
    assert "iget: [11, 22, 33]" in proc.stdout, proc.stdout
