"""Errors of device checks: the same text on both backends.

The simulator raises in the kernel; on a GPU the check writes an error record into the
PE's mailbox and traps, and the host raises the record (``pgas/cuda/_error_record.py``). The
first tests build records as the GPU writes them and compare the host's reading with
what the simulator's own checks raise for the same arguments; the last run a failing
kernel under pgasrun on whichever backend is in use (one failure per run: a GPU's trap
ends its CUDA context).
"""
import re
import sys
from types import SimpleNamespace

import numpy as np
import pytest

import pgas
from conftest import PE_DIR, pgasrun
from pgas.core import _checks, _device_errors, _waiting
from pgas.cuda._error_record import FN_BYTES, RECORD_WORDS, TEXT_WORD, WHAT_BYTES, from_record
from pgas.core._device_errors import KIND
from pgas.sim import _primitives as _sim
from pgas.nic import _mlx5 as mlx5
from pgas.runtime._team_table import team_of
from pgas.transport._routing import Transports


def record(kind: int, fn: str, what: str = "", why: str = "", a=0, b=0, c=0, pe=1, tid=(3, 0, 0), ctaid=(2, 1, 0)):
    """The words a GPU writes for one failed check (layout: pgas/cuda/_error_record.py)."""
    words = np.zeros(RECORD_WORDS, np.int64)
    words[:9] = [2, kind, a, b, c, pe, sum(v << s for v, s in zip(tid, (0, 21, 42))),
                 sum(v << s for v, s in zip(ctaid, (0, 21, 42))),
                 len(fn) | len(what) << 16 | len(why) << 32]
    text = words[TEXT_WORD:].view(np.uint8)
    for offset, value in ((0, fn), (FN_BYTES, what), (FN_BYTES + WHAT_BYTES, why)):
        text[offset:offset + len(value)] = np.frombuffer(value.encode(), np.uint8)
    return words


def simulator_error(check, *args) -> pgas.PgasError:
    with pytest.raises(pgas.PgasError) as raised:
        check(*args)
    return raised.value


def on_gpu(text: str, pe=1) -> str:
    """How the host reports a device error: where it happened, then the check's text."""
    return f"tid=[3, 0, 0] ctaid=[2, 1, 0]: {text} [on PE {pe}]"


class FakeRuntime:
    my_pe, teams = 1, [object(), object()] + [None] * 30


CASES = {
    "PE_RANGE": (dict(what="pe", a=5, b=2), _checks.check_pe, ("pgas.device.put", 5, 2)),
    "ROOT": (dict(a=4, b=3), _checks.check_root, ("pgas.device.broadcast", 4, 3)),
    "SIG_OP": (dict(a=9), _checks.check_sig_op, ("pgas.device.signal_op", 9)),
    "CMP": (dict(a=17), _waiting.check_cmp, ("pgas.device.wait_until", 17)),
    "NOT_EMPTY": (dict(what="dest"), _sim.check_not_empty, ("pgas.device.p", "dest", np.zeros(0))),
    "SIZE": (dict(what="dest", why="dest and src must have the same size", a=4, b=6), _sim.check_size,
             ("pgas.device.broadcast", "dest", 4, 6, "dest and src must have the same size")),
    "COPY_FITS": (dict(what="dest", a=4, b=9, c=1), _sim.check_copy,
                  ("pgas.device.put", np.zeros(4), "dest", 1, np.zeros(9), "src", 1, 9)),
    "STRIDE_ZERO": (dict(what="src"), _sim.check_copy,
                    ("pgas.device.iput", np.zeros(4), "dest", 1, np.zeros(9), "src", 0, 2)),
    "NEGATIVE": (dict(what="nelems", a=-3), _sim.check_copy,
                 ("pgas.device.iget", np.zeros(4), "dest", 1, np.zeros(9), "src", 1, -3)),
    "NEGATIVE_STRIDE": (dict(what="dest", a=-2), _sim.check_copy,
                        ("pgas.device.iput", np.zeros(4), "dest", -2, np.zeros(9), "src", 1, 2)),
    "SIGNAL": (dict(what="signal", why="uint64"), _checks.check_signal,
               ("pgas.device.signal_op", np.zeros(0, np.uint64))),
    "UNREACHABLE": (dict(what="dest", why=_device_errors.UNREACHABLE_WHY, a=3), Transports.through_nic,
                    (SimpleNamespace(kinds={3: "unreachable"}), "pgas.device.put", 3)),
    "TEAM": (dict(what="team", a=7, b=1), team_of, (FakeRuntime(), 7, "pgas.device.barrier")),
    "LOCK_NOT_HELD": ({}, _sim.refuse, ("pgas.device.clear_lock", KIND["LOCK_NOT_HELD"])),
    "LOCK_HELD": ({}, _sim.refuse, ("pgas.device.set_lock", KIND["LOCK_HELD"])),
    "NO_MULTICAST": ({}, _sim.refuse, ("pgas.device.get_multicast_array", KIND["NO_MULTICAST"])),
}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_a_recorded_check_reads_as_the_simulators_error(kind):
    fields, check, args = CASES[kind]
    fn = next(a for a in args if isinstance(a, str) and a.startswith("pgas."))
    expected = simulator_error(check, *args)
    error = from_record(record(KIND[kind], fn, **fields), timeout=5.0)
    assert str(error) == on_gpu(str(expected))
    assert type(error) is type(expected)


def test_every_kind_the_device_records_is_covered():
    assert set(CASES) == set(KIND)


def test_a_wait_past_the_timeout_names_its_word_and_the_last_value():
    with pytest.raises(pgas.PgasTimeoutError) as raised:
        _waiting.wait_for_value("pgas.device.wait_until", lambda: np.int64(0), "ivar", pgas.CMP_EQ, 12345, 0.05)
    expected = str(raised.value).replace("0.05", "5")
    error = from_record(record(_device_errors.TIMEOUT, "pgas.device.wait_until", "ivar", "int64",
                               a=pgas.CMP_EQ, b=12345, c=0), timeout=5.0)
    assert isinstance(error, pgas.PgasTimeoutError) and str(error) == on_gpu(expected)
    as_float = np.array([1.5], np.float32).view(np.int32).astype(np.int64)[0]   # a float32 word's bits
    error = from_record(record(_device_errors.TIMEOUT, "pgas.device.wait_until", "ivar", "float32",
                               a=pgas.CMP_GE, b=as_float, c=0), timeout=5.0)
    assert "for ivar >= 1.5 (last value seen: 0.0)" in str(error)


def test_a_barrier_past_the_timeout_names_the_missing_pes():
    error = from_record(record(_device_errors.BARRIER_TIMEOUT, "pgas.device.barrier_all", a=0, b=0b1010, c=2),
                        timeout=5.0)
    assert str(error) == on_gpu("pgas.device.barrier_all: waited PGAS_TIMEOUT=5 s for PEs [1, 3] to arrive (team 0)")


def test_a_wait_on_a_set_past_the_timeout_names_the_ivar_and_its_value():
    """The simulator's text (pe check checks_device_sync) from a record: a = cmp + 8 * index."""
    error = from_record(record(_device_errors.SET_TIMEOUT, "pgas.device.wait_until_any_vector", "ivars", "uint32",
                               a=pgas.CMP_GE + 8 * 3, b=7, c=2), timeout=5.0)
    assert isinstance(error, pgas.PgasTimeoutError)
    assert str(error) == on_gpu("pgas.device.wait_until_any_vector: waited PGAS_TIMEOUT=5 s for ivars[3] >= 7 "
                                "(last value seen: 2), the first included one not satisfied")


def test_an_empty_or_half_written_mailbox_is_no_error():
    words = record(KIND["PE_RANGE"], "pgas.device.put", "pe", a=5, b=2)
    for state in (0, 1):
        words[0] = state
        assert from_record(words, 5.0) is None


def test_long_names_are_cut_to_their_slots():
    error = from_record(record(KIND["NOT_EMPTY"], "pgas.device." + "x" * 100, "dest"), 5.0)
    assert str(error).startswith("tid=[3, 0, 0] ctaid=[2, 1, 0]: pgas.device.xxx")
    assert len(str(error).split(":")[1].strip()) == FN_BYTES


RUNS = {
    "put_pe": ({}, r"PgasValueError: .*pgas\.device\.put: pe must be within \[0, 2\), got 5"),
    "put_size": ({}, r"PgasValueError: .*pgas\.device\.put: dest has 4 elements but 9 elements at stride 1 need 9"),
    "barrier_team": ({}, r"PgasValueError: .*pgas\.device\.barrier: team 7 is not a team of PE 0"),
    "wait_timeout": ({"PGAS_TIMEOUT": "2"}, r"PgasTimeoutError: .*pgas\.device\.wait_until: waited "
                                            r"PGAS_TIMEOUT=2 s for ivar == 12345 \(last value seen: 0\)"),
}


@pytest.mark.parametrize("case", sorted(RUNS))
def test_a_failing_kernel_ends_the_run_with_the_checks_error(case, clean_shm):
    env, pattern = RUNS[case]
    proc = pgasrun(2, sys.executable, str(PE_DIR / "device_error.py"), case, env=env, timeout=120)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output[-3000:]
    assert re.search(pattern, output), output[-3000:]
    assert "did not fail" not in output


def test_what_only_the_cuda_nic_path_records():
    """The NIC path's records (``_nic_device``): a refused WQE reads as the simulator's
    refusal (``_ibgda``: the operation's name, the PE, the address, the byte count, the
    reason), then the cuda-only kinds."""
    write = mlx5.OP_RDMA_WRITE | 64 << 16 | mlx5.SYNDROME_REMOTE_ACCESS << 56
    error = from_record(record(_device_errors.NIC_REFUSED, "pgas.device.put", a=1, b=0x7F00_0000_1000, c=write), 5.0)
    expected = mlx5.refusal("pgas.device.put", mlx5.OPCODE_NAMES[mlx5.OP_RDMA_WRITE], 1, 0x7F00_0000_1000, 64,
                            mlx5.SYNDROME_REMOTE_ACCESS)
    assert type(error) is pgas.PgasError and str(error) == on_gpu(expected)
    add4 = mlx5.OP_MASKED_FA | mlx5.OPMOD_EXT_ATOMIC_4 << 8 | mlx5.SYNDROME_REMOTE_INVALID << 56
    error = from_record(record(_device_errors.NIC_REFUSED, "pgas.device.atomic_add", a=2, b=0x1004, c=add4), 5.0)
    assert str(error) == on_gpu(mlx5.refusal("pgas.device.atomic_add", mlx5.OPCODE_NAMES[mlx5.OP_MASKED_FA], 2,
                                             0x1004, 4, mlx5.SYNDROME_REMOTE_INVALID))
    error = from_record(record(_device_errors.NIC_TIMEOUT, "pgas.device.quiet", a=3, b=1), 5.0)
    assert isinstance(error, pgas.PgasTimeoutError)
    assert "waited PGAS_TIMEOUT=5 s for the NIC to complete the requests to PE 3" in str(error)
    error = from_record(record(_device_errors.NOT_REGISTERED, "pgas.device.put", "src", a=1, b=0x5000, c=64), 5.0)
    assert isinstance(error, pgas.PgasValueError) and "src (address 0x5000, 64 bytes) is not in the symmetric heap" \
        in str(error) and "PE 1 on another node" in str(error)
    error = from_record(record(_device_errors.NIC_WIDE, "pgas.device.p", "dest", a=16, b=1), 5.0)
    assert "dest has 16-byte elements" in str(error) and "PE 1" in str(error)
