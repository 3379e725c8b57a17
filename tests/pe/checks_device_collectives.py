"""Device collectives (thread and block forms) against numpy, on TEAM_WORLD and split teams."""
import numpy as np
import pytest
from numba import cuda

import pgas
import pgas.device as dev
from _util import pattern
from checks_collectives import destroy, expected, inputs, members, teams

OPS = ["sum", "prod", "min", "max", "and", "or", "xor"]
INT_DTYPES, FLOAT_DTYPES = [np.int32, np.int64, np.uint32, np.uint64], [np.float32, np.float64]
BLOCK = 32


def kernels(name):
    """(one-thread kernel, whole-block kernel) calling dev.<name> and dev.<name>_block."""
    thread_form, block_form = getattr(dev, name), getattr(dev, name + "_block")

    @cuda.jit
    def one_thread(team, dest, src):
        if cuda.threadIdx.x == 0:
            thread_form(team, dest, src)

    @cuda.jit
    def whole_block(team, dest, src):
        block_form(team, dest, src)

    return one_thread, whole_block


REDUCE = {op: kernels(f"{op}_reduce") for op in OPS}
REDUCESCATTER = {op: kernels(f"{op}_reducescatter") for op in OPS}
FCOLLECT, ALLTOALL = kernels("fcollect"), kernels("alltoall")


@cuda.jit
def broadcast_thread(team, dest, src, root):
    if cuda.threadIdx.x == 0:
        dev.broadcast(team, dest, src, root)


@cuda.jit
def broadcast_block(team, dest, src, root):
    dev.broadcast_block(team, dest, src, root)


def launch(pair, block, *args):
    (pair[1] if block else pair[0])[1, BLOCK](*args)


def check_device_reduce_and_reducescatter_every_op_and_dtype():
    """Each op with integer and float dtypes (rotating through them); one element in the
    thread form, 1001 in the block form."""
    me, n = pgas.my_pe(), pgas.n_pes()
    world = pgas.TEAM_WORLD
    for i, op in enumerate(OPS):
        dtypes = [INT_DTYPES[i % 4]] + ([] if op in ("and", "or", "xor") else [FLOAT_DTYPES[i % 2]])
        for dtype in dtypes:
            for count, block in ((1, False), (1001, True)):
                src = pgas.empty(count * n, dtype)
                dest = pgas.empty(count * n, dtype)
                src.copy_to_device(inputs(me, count * n, dtype, op))
                full = expected(op, [inputs(pe, count * n, dtype, op) for pe in range(n)])
                launch(REDUCE[op], block, world, dest, src)
                assert np.array_equal(dest.copy_to_host(), full), (dtype, op, count, block)
                launch(REDUCESCATTER[op], block, world, dest[:count], src)
                assert np.array_equal(dest.copy_to_host()[:count], full[me * count:(me + 1) * count]), \
                    ("reducescatter", dtype, op, count, block)
                pgas.free(dest)
                pgas.free(src)


def check_device_reduce_in_place():
    me, n = pgas.my_pe(), pgas.n_pes()
    data = pgas.empty(5000, np.float64)
    for block in (False, True):
        data.copy_to_device(inputs(me, 5000, np.float64, "sum"))
        launch(REDUCE["sum"], block, pgas.TEAM_WORLD, data, data)
        assert np.array_equal(data.copy_to_host(),
                              expected("sum", [inputs(pe, 5000, np.float64, "sum") for pe in range(n)]))
    pgas.free(data)


def check_device_broadcast_fcollect_alltoall_on_every_team():
    made = teams()
    n = pgas.n_pes()
    for name, team in made:
        for dtype, count in ((np.int32, 1001), (np.float64, 1)):
            a = pgas.empty(count * n, dtype)
            b = pgas.zeros(count * n, dtype)
            if team is not None:
                pes, me = members(team), pgas.my_pe()
                size, rank = len(pes), pgas.team_my_pe(team)
                for block in (False, True):
                    a.copy_to_device(pattern(me, count * n, dtype))
                    for root in range(size):
                        (broadcast_block if block else broadcast_thread)[1, BLOCK](team, b[:count], a[:count], root)
                        assert np.array_equal(b.copy_to_host()[:count], pattern(pes[root], count, dtype)), \
                            (name, "broadcast", root, block)
                    launch(FCOLLECT, block, team, b[:count * size], a[:count])
                    want = np.concatenate([pattern(pe, count, dtype) for pe in pes])
                    assert np.array_equal(b.copy_to_host()[:count * size], want), (name, "fcollect", block)
                    launch(ALLTOALL, block, team, b[:count * size], a[:count * size])
                    want = np.concatenate([pattern(pe, count * n, dtype)[rank * count:(rank + 1) * count]
                                           for pe in pes])
                    assert np.array_equal(b.copy_to_host()[:count * size], want), (name, "alltoall", block)
                    launch(REDUCE["max"], block, team, b[:count], a[:count])
                    want = expected("max", [pattern(pe, count, dtype) for pe in pes])
                    assert np.array_equal(b.copy_to_host()[:count], want), (name, "max_reduce", block)
            pgas.free(b)
            pgas.free(a)
    destroy(made)


def check_device_collective_errors():
    n = pgas.n_pes()
    a = pgas.zeros(4, np.float32)
    b = pgas.zeros(4 * n + 1, np.float32)
    with pytest.raises(pgas.PgasError, match=r"pgas.device.sum_reduce: dest and src must have the same size; "
                                             r"dest has 5 elements, 4 needed"):
        launch(REDUCE["sum"], False, pgas.TEAM_WORLD, b[:5], a)
    with pytest.raises(pgas.PgasError, match=r"pgas.device.xor_reduce_block: op 'xor' needs an integer dtype"):
        launch(REDUCE["xor"], True, pgas.TEAM_WORLD, a, a)
    with pytest.raises(pgas.PgasError, match=r"pgas.device.fcollect: dest must hold team size x src.size elements"):
        launch(FCOLLECT, False, pgas.TEAM_WORLD, b, a)
    with pytest.raises(pgas.PgasError, match=rf"pgas.device.broadcast: root must be a team rank within "
                                             rf"\[0, {n}\), got {n}"):
        broadcast_thread[1, 1](pgas.TEAM_WORLD, a, a, n)
    pgas.free(b)
    pgas.free(a)
