"""Misuse gives PgasError naming the function and the argument, on host and in kernels."""
import re

import numpy as np
import pytest
from numba import cuda

import pgas
import pgas.device as dev
from mpi4py import MPI
from _util import on_simulator, simulator_only


@cuda.jit
def device_put(dest, src, pe):
    dev.put(dest, src, pe)


@cuda.jit
def device_wait(ivar):
    dev.wait_until(ivar, dev.CMP_EQ, 12345)


@cuda.jit
def device_wait_bad_cmp(ivar):
    dev.wait_until(ivar, 99, 0)


@cuda.jit
def device_p(dest, pe):
    dev.p(dest, 1, pe)


def raises(match):
    return pytest.raises(pgas.PgasError, match=match)


def check_pe_out_of_range_host_and_device():
    n = pgas.n_pes()
    a = pgas.zeros(4, np.int32)
    with raises(re.escape(f"pgas.put: pe must be within [0, {n}), got {n}")):
        pgas.put(a, np.zeros(4, np.int32), n)
    with raises(re.escape("pgas.get: pe must be within [0, ") + r".*got -1"):
        pgas.get(np.zeros(4, np.int32), a, -1)
    with raises(r"pgas.peer_array: pe must be an integer PE number, got 1.5"):
        pgas.peer_array(a, 1.5)
    if on_simulator():   # on a GPU a failed device check traps, ending the context: tests/test_device_errors.py
        with raises(r"tid=\[0, 0, 0\] ctaid=\[0, 0, 0\]: pgas.device.put: pe must be within"):
            device_put[1, 1](a, a, n + 3)
        with raises(r"pgas.device.p: pe must be within"):
            device_p[1, 1](a, -2)
    pgas.free(a)


def check_not_symmetric_memory():
    a = pgas.zeros(4, np.int32)
    plain = np.zeros(4, np.int32)
    with raises(r"pgas.put: dest is not symmetric memory.*allocate it with pgas.empty"):
        pgas.put(plain, plain, 0)
    with raises(r"pgas.get: src is not symmetric memory"):
        pgas.get(plain, plain, 0)
    if on_simulator():
        with raises(r"pgas.device.put: dest is not symmetric memory"):
            device_put[1, 1](plain, a, 0)
    with raises(r"pgas.free: a is not symmetric memory"):
        pgas.free(plain)
    with raises(r"pgas.free: a must be an array returned by pgas.empty"):
        pgas.free(a[1:])
    pgas.free(a)


def check_dtype_and_size_mismatch():
    a = pgas.zeros(4, np.int32)
    with raises(r"pgas.put: dest and src must have the same dtype, got dest int32 and src float64"):
        pgas.put(a, np.zeros(4), 0)
    with raises(r"pgas.put: dest has 4 elements but 5 are needed \(put copies src.size elements\)"):
        pgas.put(a, np.zeros(5, np.int32), 0)
    with raises(r"pgas.get: src has 4 elements but 6 are needed"):
        pgas.get(np.zeros(6, np.int32), a, 0)
    if on_simulator():
        with raises(r"pgas.device.put: dest has 4 elements but 9 elements at stride 1 need 9"):
            device_put[1, 1](a, np.zeros(9, np.int32), 0)
        with raises(r"pgas.device.put: dest and src must have the same dtype"):
            device_put[1, 1](a, np.zeros(4, np.int64), 0)
    pgas.free(a)


def check_bad_shape_and_dtype_arguments():
    with raises(r"pgas.empty: shape must not have negative sizes"):
        pgas.empty(-1, np.int32)
    with raises(r"pgas.zeros: shape must be an int or a tuple of ints"):
        pgas.zeros("big", np.int32)
    with raises(r"pgas.empty: dtype must be a numpy dtype"):
        pgas.empty(3, "no-such-dtype")
    used = pgas.info()["heap_used"]
    for shape in (1.5, (2, 1.5), True, (2, np.float64(3.0)), "3", None):
        with raises(r"pgas.zeros: shape must be an int or a tuple of ints, got"):
            pgas.zeros(shape, np.int32)
    for dtype in (object, np.dtype([("a", np.int32), ("b", object)])):
        with raises(r"pgas.empty: dtype must hold plain values, got .*Python objects"):
            pgas.empty(2, dtype)
    with raises(r"pgas.zeros: dtype must have a size, got \|S0"):
        pgas.zeros(2, "S")
    with raises(r"pgas.full: value must be a int32 scalar or an array broadcastable to shape \(3,\), got 'x'"):
        pgas.full(3, "x", np.int32)
    with raises(r"pgas.full: value must be a float64 scalar or an array broadcastable to shape \(3,\), got \[1, 2\]"):
        pgas.full(3, [1, 2], np.float64)
    assert pgas.info()["heap_used"] == used   # refused before anything was allocated
    ok = [pgas.zeros(np.int64(2), np.int8), pgas.zeros((np.uint8(2), 3), "S4"), pgas.zeros(3, "V8"),
          pgas.full(2, [1, 2], np.dtype([("x", np.int32), ("y", np.float32)])), pgas.full(2, -0.0)]
    assert ok[0].shape == (2,) and ok[1].shape == (2, 3) and ok[3].copy_to_host()["y"].tolist() == [1.0, 2.0]
    assert ok[1].copy_to_host().tobytes() == bytes(24) and ok[2].copy_to_host().tobytes() == bytes(24)
    assert np.signbit(ok[4].copy_to_host()).all()
    for a in reversed(ok):
        pgas.free(a)


def check_heap_exhaustion_message():
    free = pgas.info()["heap_free"]
    with raises(rf"symmetric heap exhausted: asked for {free + 1} bytes, {free} bytes free .* "
                r"raise PGAS_SYMMETRIC_SIZE"):
        pgas.empty(free + 1, np.uint8)


@simulator_only("a device wait past PGAS_TIMEOUT traps on a GPU, ending the CUDA context")
def check_wait_timeout_names_what_it_waited_for():
    from pgas.runtime._state import runtime
    ivar = pgas.zeros(1, np.int64)
    rt = runtime("test")
    saved, rt.timeout = rt.timeout, 0.3
    try:
        with pytest.raises(pgas.PgasTimeoutError,
                           match=r"pgas.device.wait_until: waited PGAS_TIMEOUT=0.3 s for ivar == 12345 "
                                 r"\(last value seen: 0\)"):
            device_wait[1, 1](ivar)
    finally:
        rt.timeout = saved
    with raises(r"pgas.device.wait_until: cmp must be one of"):
        device_wait_bad_cmp[1, 1](ivar)
    pgas.free(ivar)


@simulator_only("on a GPU, numba itself refuses host calls of device functions")
def check_device_functions_refuse_host_calls():
    a = pgas.zeros(2, np.int32)
    with raises(r"pgas.device.put is a device function: call it from a @cuda.jit kernel"):
        dev.put(a, a, 0)
    with raises(r"pgas.device.barrier_all is a device function"):
        dev.barrier_all()
    pgas.free(a)


def check_init_twice_and_use_after_finalize_then_reinit():
    pgas.init()                      # counted (OpenSHMEM 1.6): the next finalize only counts down
    pgas.finalize()
    assert pgas.is_initialized()
    pgas.finalize()
    with raises(r"pgas.my_pe was called after pgas.finalize\(\); call pgas.init\(\) first"):
        pgas.my_pe()
    with raises(r"pgas.empty was called after pgas.finalize"):
        pgas.empty(3)
    with raises(r"pgas.init: initializer_method must be 'mpi', 'emulated_mpi' or 'uid', got 'bogus'"):
        pgas.init(initializer_method="bogus")
    with raises(r"pgas.init: initializer_method='uid' needs uid"):
        pgas.init(initializer_method="uid")
    with raises(r"pgas.init: give comm or mpi_comm"):
        pgas.init(MPI.COMM_WORLD, mpi_comm=MPI.COMM_WORLD)
    with raises(r"pgas.init: device must be a device number in \[0, \d+\) or a cuda.core Device, got 99"):
        pgas.init(device=99)
    assert not pgas.is_initialized()
    pgas.init(mpi_comm=MPI.COMM_WORLD, initializer_method="mpi", device=0)   # nvshmem4py's keywords
    a = pgas.zeros(1, np.int32)
    device_p[1, 1](a, pgas.my_pe())  # device state is found again after the cycle
    assert a.copy_to_host()[0] == 1
    pgas.free(a)
