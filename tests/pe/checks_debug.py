"""PGAS_DEBUG=1 device checks and PGAS_TIMEOUT on every blocking wait (run with PGAS_DEBUG=1)."""
import contextlib
import io
import os
import re

import numpy as np
import pytest
from numba import cuda

import pgas
import pgas.device as dev
from pgas.runtime._state import runtime
from _util import simulator_only

THREAD = r"tid=\[0, 0, 0\] ctaid=\[0, 0, 0\]: "


@cuda.jit
def put_kernel(dest, src, pe):
    dev.put(dest, src, pe)


@cuda.jit
def fetch_add_kernel(dest, pe):
    dev.atomic_fetch_add(dest, 1, pe)


@cuda.jit
def team_barrier_kernel(team):
    dev.barrier(team)


@cuda.jit
def signal_wait_kernel(signal):
    dev.signal_wait_until(signal, dev.CMP_GE, 5)


class short_timeout:
    """PGAS_TIMEOUT of 0.3 s for device waits (runtime) and host waits (environment)."""

    def __enter__(self):
        self.rt = runtime("test")
        self.saved = self.rt.timeout, os.environ.get("PGAS_TIMEOUT")
        self.rt.timeout = 0.3
        os.environ["PGAS_TIMEOUT"] = "0.3"

    def __exit__(self, *exc):
        self.rt.timeout = self.saved[0]
        os.environ["PGAS_TIMEOUT"] = self.saved[1]


def check_debug_is_on():
    assert runtime("test").debug


def check_free_of_a_peer_view_is_reported_and_does_nothing():
    me, n = pgas.my_pe(), pgas.n_pes()
    right = (me + 1) % n
    a = pgas.full(3, me, np.int64)
    if pgas.info()["transports"][right] == "p2p":
        said = io.StringIO()
        with contextlib.redirect_stderr(said):
            pgas.free(pgas.peer_array(a, right))
        assert said.getvalue() == (f"[PE {me}] pgas.free: a is a view of PE {right}'s memory (from "
                                   "peer_array); nothing freed\n"), said.getvalue()
    pgas.barrier_all()
    assert a.copy_to_host().tolist() == [me] * 3
    pgas.free(a)   # the real free still agrees on every PE (PGAS_DEBUG compares the calls)


@simulator_only("PGAS_DEBUG's kernel checks and device wait timeouts are the simulator's (a GPU wait traps)")
def check_use_after_free_in_a_kernel_names_function_argument_pe_and_thread():
    me = pgas.my_pe()
    a = pgas.zeros(1000, np.float64)
    src = np.zeros(1000)
    pgas.free(a)
    with pytest.raises(pgas.PgasError, match=THREAD + r"pgas.device.put: dest \(heap bytes \[\d+, \d+\)\) is not "
                                             rf"inside any live symmetric array \(freed, or never allocated\) \[on PE {me}\]"):
        put_kernel[1, 1](a, src, 0)
    b = pgas.zeros(10, np.float64)  # takes the freed space: a now runs past b's end
    with pytest.raises(pgas.PgasError, match=r"pgas.device.put: dest .* runs \d+ bytes past the end of its "
                                             r"symmetric array \(256 bytes reserved"):
        put_kernel[1, 1](a, src, 0)
    with pytest.raises(pgas.PgasError, match=r"pgas.device.atomic_fetch_add: dest .* is not inside any live"):
        fetch_add_kernel[1, 1](a[500:], 0)
    pgas.free(b)


def check_host_calls_on_a_freed_array_are_refused_and_write_nothing():
    """A host call into a freed array used to be accepted and overwrite the live array then
    at that offset, on every target."""
    me, n = pgas.my_pe(), pgas.n_pes()
    right = (me + 1) % n
    a = pgas.zeros(100, np.int64)
    src = np.ones(100, np.int64)
    pgas.free(a)
    gone = r"\(heap bytes \[\d+, \d+\)\) is not inside any live symmetric array \(freed, or never allocated\)"
    with pytest.raises(pgas.PgasValueError, match=r"pgas.put: dest " + gone):
        pgas.put(a, src, right)
    with pytest.raises(pgas.PgasValueError, match=r"pgas.put_nbi: dest " + gone):
        pgas.put_nbi(a, src, right)
    with pytest.raises(pgas.PgasValueError, match=r"pgas.get: src " + gone):
        pgas.get(src, a, right)
    with pytest.raises(pgas.PgasValueError, match=r"pgas.atomic_add: dest " + gone):
        pgas.atomic_add(a, 1, right)
    b = pgas.zeros(10, np.int64)   # takes the freed space: a now runs past b's end
    with pytest.raises(pgas.PgasValueError, match=r"pgas.put: dest .* runs \d+ bytes past the end of its symmetric "
                                                  r"array \(256 bytes reserved"):
        pgas.put(a, src, right)
    with pytest.raises(pgas.PgasValueError, match=r"pgas.reduce: dest .* runs \d+ bytes past the end"):
        pgas.reduce(pgas.TEAM_WORLD, a, a)
    pgas.barrier_all()
    assert not b.copy_to_host().any()       # nothing reached the live array, here or on any PE
    pgas.free(b)


@simulator_only("PGAS_DEBUG's kernel checks and device wait timeouts are the simulator's (a GPU wait traps)")
def check_pe_range_and_dtype_errors_name_the_pe_and_thread():
    me, n = pgas.my_pe(), pgas.n_pes()
    a = pgas.zeros(4, np.int32)
    with pytest.raises(pgas.PgasError, match=THREAD + re.escape(f"pgas.device.put: pe must be within [0, {n}), "
                                                                f"got {n} [on PE {me}]")):
        put_kernel[1, 1](a, a, n)
    with pytest.raises(pgas.PgasError, match=THREAD + r"pgas.device.put: dest and src must have the same dtype, "
                                                      rf"got dest int32 and src float32 \[on PE {me}\]"):
        put_kernel[1, 1](a, np.zeros(4, np.float32), 0)
    pgas.free(a)


@simulator_only("PGAS_DEBUG's kernel checks and device wait timeouts are the simulator's (a GPU wait traps)")
def check_device_barrier_timeout_names_the_missing_pes():
    n = pgas.n_pes()
    team = pgas.team_split_strided(pgas.TEAM_WORLD, 0, 1, n)
    if pgas.my_pe() == 0 and n > 1:
        with short_timeout(), pytest.raises(pgas.PgasTimeoutError, match=re.escape(
                f"pgas.device.barrier: waited PGAS_TIMEOUT=0.3 s for PEs {list(range(1, n))} to arrive "
                f"(team {team}) [on PE 0]")):
            team_barrier_kernel[1, 1](team)
    pgas.team_destroy(team)


def check_host_barrier_timeout_names_the_missing_pes():
    n = pgas.n_pes()
    if pgas.my_pe() == 0 and n > 1:
        with short_timeout(), pytest.raises(pgas.PgasTimeoutError, match=re.escape(
                f"pgas.sync: waited PGAS_TIMEOUT=0.3 s for PEs {list(range(1, n))} to arrive")):
            pgas.sync(pgas.TEAM_WORLD)


@simulator_only("PGAS_DEBUG's kernel checks and device wait timeouts are the simulator's (a GPU wait traps)")
def check_signal_waits_time_out_naming_what_they_waited_for():
    signal = pgas.zeros(1, np.uint64)
    with short_timeout():
        with pytest.raises(pgas.PgasTimeoutError, match=r"pgas.device.signal_wait_until: waited PGAS_TIMEOUT=0.3 s "
                                                        r"for signal >= 5 \(last value seen: 0\)"):
            signal_wait_kernel[1, 1](signal)
        with pytest.raises(pgas.PgasTimeoutError, match=r"pgas.signal_wait_until: waited PGAS_TIMEOUT=0.3 s "
                                                        r"for signal == 1 \(last value seen: 0\)"):
            pgas.signal_wait_until(signal, pgas.CMP_EQ, 1)
    pgas.free(signal)


@simulator_only("the timed-out steps are the simulator's host algorithms")
def check_host_collective_timeouts_name_the_pe_and_step():
    n = pgas.n_pes()
    team = pgas.team_split_strided(pgas.TEAM_WORLD, 0, 1, n)   # destroyed below: fresh counters after
    data = pgas.zeros(4, np.float32)
    if pgas.my_pe() == 0 and n > 1:
        with short_timeout(), pytest.raises(pgas.PgasTimeoutError, match=re.escape(
                "pgas.reduce: waited PGAS_TIMEOUT=0.3 s for PE 1 to enter the collective")):
            pgas.reduce(team, data, data, algorithm="oneshot")
        left = n - 1   # the ring's first wait is on PE 0's left neighbour
        with short_timeout(), pytest.raises(pgas.PgasTimeoutError, match=re.escape(
                f"pgas.reduce: waited PGAS_TIMEOUT=0.3 s for PE {left} (ring reduce-scatter step 0)")):
            pgas.reduce(team, data, data, algorithm="ring")
    pgas.free(data)
    pgas.team_destroy(team)
