"""The cuda backend, proven without a GPU: everything compiles and links for sm_90, and the
PTX of small kernels shows the memory model, the 16-byte copies and the device checks."""
import json
import re

import pytest

from conftest import offline_compile


@pytest.fixture(scope="module")
def report():
    proc = offline_compile()      # (started with the session, at the lowest CPU priority: conftest.py)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_every_device_function_compiles_and_links_for_sm90(report):
    names = report["public"]   # pgas.device's callables, as imported with the cuda backend
    assert len(names) >= 90   # every public device function of API.md, with their forms
    assert report["backend"] == "cuda"
    assert report["failed"] == {}
    compiled = {label.split("[")[0] for label in report["compiled"]}
    assert set(names) <= compiled, sorted(set(names) - compiled)
    assert all(size > 0 for size in report["cubin_bytes"].values())


def test_float_and_integer_atomics_compile(report):
    for dtype in ("int32", "uint32", "int64", "uint64"):
        assert f"atomic_fetch_add[{dtype}]" in report["compiled"]
    for dtype in ("float32", "float64"):
        for name in ("atomic_fetch", "atomic_set", "atomic_swap", "atomic_compare_swap"):
            assert f"{name}[{dtype}]" in report["compiled"]


def test_waits_poll_with_acquire_loads_never_non_coherent_ones(report):
    assert set(report["waits"]) == {"wait_until", "signal_wait_until", "barrier_all", "sync_all", "barrier",
                                    "sync_block"}
    for name, loads in report["waits"].items():
        assert loads == {"acquire": True, "non_coherent": False}, name


def test_example_kernels_and_a_users_kernel_compile(report):
    for label in ("shift.shift", "ring.pass_along", "ring_allreduce.ring_allreduce", "atomic_counter.worker",
                  "user_kernel"):
        assert label in report["compiled"] and report["cubin_bytes"][label] > 0


def test_nvshmem4py_form_of_vendor_get_version_info_compiles(report):
    """``vendor_get_version_info(major, minor, patch)`` (element 0 of three arrays) beside
    pgas's ``vendor_get_version_info()`` -> tuple (``vendor_get_version_info[int64]``)."""
    assert report["cubin_bytes"].get("nvshmem4py_version_info", 0) > 0, report["failed"].get(
        "nvshmem4py_version_info")
    assert "vendor_get_version_info[int64]" in report["compiled"]


def test_host_operation_kernels_compile(report):
    """Signals, waits, quiet, barriers and collectives that the host queues on a stream."""
    for name in ("signal_op", "signal_wait_until", "quiet", "barrier", "sync", "broadcast", "fcollect",
                 "alltoall", "alltoalls", "sum_reduce", "prod_reducescatter", "xor_reduce", "complex128_prod_reduce"):
        assert report["cubin_bytes"].get(f"host.{name}", 0) > 0, (name, report["failed"].get(f"host.{name}"))


def test_init_says_why_it_cannot_run(report):
    if report["gpu_usable"]:
        assert report["init"] == "initialized"
    else:
        assert report["init"].startswith("pgas.init: PGAS_BACKEND=cuda, but no GPU is usable here")


# The memory model and the device checks, read from the PTX of small kernels ------------

def entry(ptx: str) -> str:
    """The kernel's own body (without the error-record writer, a function of its own)."""
    start = ptx.index(".entry")
    depth, i = 0, ptx.index("{", start)
    for j in range(i, len(ptx)):
        depth += {"{": 1, "}": -1}.get(ptx[j], 0)
        if depth == 0:
            return ptx[start:j + 1]
    raise AssertionError("unterminated kernel body")


def as_ptx_bytes(text: str) -> str:
    """How a string constant appears in PTX: its bytes as a .b8 initializer list."""
    return ", ".join(str(b) for b in text.encode())


def test_atomics_are_sequentially_consistent(report):
    body = entry(report["ptx"]["atomics"])
    atoms = re.findall(r"atom\.[\w.]+", body)
    assert atoms and all(a.startswith("atom.acquire.sys.") for a in atoms), atoms
    assert re.search(r"fence\.sc\.sys;\s*atom\.acquire\.sys\.add\.u64", body)    # atomic_fetch_add
    assert re.search(r"fence\.sc\.sys;\s*atom\.acquire\.sys\.cas\.b64", body)    # atomic_compare_swap
    assert re.search(r"fence\.sc\.sys;\s*ld\.acquire\.sys\.b64", body)           # atomic_fetch


def test_g_and_p_are_strong_and_a_spin_on_g_rereads_memory(report):
    body = entry(report["ptx"]["p_then_g"])
    assert "st.relaxed.sys.b64" in body and "ld.relaxed.sys.b64" in body
    spin = entry(report["ptx"]["spin_on_g"])
    # the load sits in the loop: a relaxed load whose value is compared, then a branch back
    # to a label before the load (g's other path, through the NIC, joins in between)
    assert any(_branches_back_after(spin, load) for load in re.finditer(r"ld\.relaxed\.sys\.b64 (%rd\d+), ", spin)), \
        spin[-3000:]
    assert "ld.global.nc" not in spin


def _branches_back_after(body: str, load) -> bool:
    """The value ``load`` read is compared with 0 and decides a branch to a label above it."""
    compare = re.compile(rf"setp\.\w+\.s64\s+(%p\d+), {re.escape(load.group(1))}, 0;\s*@\1 bra\s+(\$L__BB\d+_\d+);")
    found = compare.search(body, load.end())
    return found is not None and body.find(f"{found.group(2)}:") < load.start()


def test_a_uint64_signal_is_compared_as_an_integer(report):
    body = entry(report["ptx"]["wait_on_uint64_signal"])
    assert "ld.acquire.sys.b64" in body
    assert "f64" not in body      # no cvt.rn.f64 / setp.*.f64: numba would unify uint64 and int64 as float64


def test_no_wait_polls_with_non_coherent_loads(report):
    for label in ("spin_on_g", "wait_on_uint64_signal", "barrier"):
        assert "ld.global.nc" not in report["ptx"][label], label


def test_barrier_epoch_and_arrivals_are_atomic(report):
    body = entry(report["ptx"]["barrier"])
    assert len(re.findall(r"atom\.acquire\.sys\.add\.u64", body)) >= 2   # this PE's epoch, each arrival
    assert "st.release" not in body and "st.relaxed" not in body          # no flag is stored over


def test_narrow_and_bool_reductions_compile_and_float_bitwise_ones_are_refused(report):
    body = entry(report["ptx"]["narrow_reductions"])   # int8 sum_reduce, bool xor_reduce_warp
    assert re.search(r"st(\.global)?\.u8", body) and re.search(r"xor\.(pred|b16|b32)", body)
    assert "op 'xor' needs an integer or bool dtype, got float32" in report["float_xor_reduce"]


def test_float16_reductions_compile_and_a_float16_test_is_refused(report):
    for name in ("sum_reduce", "prod_reduce", "min_reduce", "max_reduce_block"):
        assert f"{name}[float16]" in report["compiled"], report["failed"].get(f"{name}[float16]")
    body = entry(report["ptx"]["half_reductions"])    # widened, combined in float32, the sum rounded once
    assert "cvt.f32.f16" in body and "add.f32" in body and "cvt.rn.f16.f32" in body
    assert re.search(r"setp\.[a-z]+\.f32", body)      # min compares in float32 and keeps an operand
    assert ("pgas.device: ivar must have one of the dtypes int32, uint32, int64, uint64, float32, float64, got "
            "float16") in report["float16_test"]


def test_bfloat16_reductions_compile_with_float32_arithmetic_rounded_once(report):
    body = entry(report["ptx"]["bfloat16_reductions"])
    assert "cvt.f32.bf16" in body and "add.f32" in body and "mul.f32" in body and "cvt.rn.bf16.f32" in body
    assert re.search(r"setp\.[a-z]+\.f32", body)      # max compares in float32 and keeps an operand
    assert report["cubin_bytes"].get("host.bfloat16_sum_reduce", 0) > 0, report["failed"].get(
        "host.bfloat16_sum_reduce")


def test_complex_reductions_compile_with_fused_products_and_min_is_refused(report):
    """OpenSHMEM 1.5's complex reductions on the device: sum as two adds, prod as numpy
    computes it with FMA (``fma.rn``), scans too; an op complex numbers do not take is
    refused when the kernel compiles."""
    for label, kind in (("complex_reductions", "f32"), ("complex128_reductions", "f64")):
        body = entry(report["ptx"][label])
        assert re.search(rf"add\.(rn\.)?{kind}", body) and re.search(rf"fma\.rn\.{kind}", body), label
    assert "op 'min' takes no complex dtype" in report["complex_min_reduce"]


def test_reductions_named_by_a_constant_string_compile_and_are_checked(report):
    """nvshmem4py's ``reduce(team, dest, src, "max")``: the string picks the op when the
    kernel compiles; an op the dtype does not take, or an unknown one, is refused then."""
    body = entry(report["ptx"]["named_reductions"])     # max on float32, then a sum
    assert "setp.gt.f32" in body and "add.f32" in body
    assert "op 'xor' needs an integer or bool dtype, got float32" in report["named_float_xor"]
    assert ("pgas.device.reduce: op must be one of sum, prod, min, max, and, or, xor (a constant string), "
            "got 'avg'") in report["named_unknown_op"]


def test_block_and_warp_copies_move_16_bytes_at_a_time(report):
    for label in ("put_block", "put_warp"):
        body = entry(report["ptx"][label])
        assert re.search(r"ld(\.global)?\.v2\.u64", body) and re.search(r"st(\.global)?\.v2\.u64", body), label


def test_warp_sync_uses_the_mask_of_the_threads_that_exist(report):
    body = entry(report["ptx"]["put_warp"])
    masks = re.findall(r"bar\.warp\.sync\s+([^;]+);", body)
    assert masks and all(m.strip().startswith("%r") for m in masks), masks   # computed, not the constant -1


def test_device_checks_record_an_error_and_trap(report):
    ptx = report["ptx"]["put_block"]
    assert "call.uni" in entry(ptx) and "pgas_record_error" in entry(ptx)
    assert "trap;" in ptx and "trap;" not in entry(ptx)     # one writer, called from every failure site
    assert as_ptx_bytes("pgas.device.put_block") in ptx     # the function's name, copied into the record
    for label in ("spin_on_g", "barrier"):                   # range/reachability and team checks, timeouts
        assert "pgas_record_error" in entry(report["ptx"][label]), label


def test_lock_misuse_is_recorded_with_its_error_kinds(report):
    """set_lock by a holder and clear_lock by a non-holder record LOCK_HELD / LOCK_NOT_HELD
    (the kind is the third argument of the record call, param2: a constant)."""
    from pgas.core._device_errors import KIND
    body = entry(report["ptx"]["locks"])
    assert as_ptx_bytes("pgas.device.set_lock") in report["ptx"]["locks"]
    assert as_ptx_bytes("pgas.device.clear_lock") in report["ptx"]["locks"]
    kinds = {int(k) for k in re.findall(r"st\.param\.b64\s+\[param2\+0\],\s*(\d+);", body)}
    assert {KIND["LOCK_HELD"], KIND["LOCK_NOT_HELD"]} <= kinds, sorted(kinds)


def test_multicast_is_refused_with_its_error_kind(report):
    """get_multicast_array records NO_MULTICAST on a GPU (pgas sets up no multicast objects)."""
    from pgas.core._device_errors import KIND
    body = entry(report["ptx"]["multicast"])
    assert as_ptx_bytes("pgas.device.get_multicast_array") in report["ptx"]["multicast"]
    kinds = {int(k) for k in re.findall(r"st\.param\.b64\s+\[param2\+0\],\s*(\d+);", body)}
    assert kinds == {KIND["NO_MULTICAST"]}, sorted(kinds)


def test_float_atomic_add_is_atom_add_f32_f64_sequentially_consistent(report):
    for dtype in ("float32", "float64"):
        for name in ("atomic_add", "atomic_fetch_add"):
            assert f"{name}[{dtype}]" in report["compiled"]
    body = entry(report["ptx"]["float_atomics"])
    assert re.search(r"fence\.sc\.sys;\s*atom\.acquire\.sys\.add\.f32", body)
    assert re.search(r"fence\.sc\.sys;\s*atom\.acquire\.sys\.add\.f64", body)


def test_host_atomic_and_signal_fetch_kernels_compile(report):
    for name in ("signal_fetch", "atomic_fetch_add", "atomic_compare_swap", "atomic_inc", "atomic_fetch_xor"):
        assert report["cubin_bytes"].get(f"host.{name}", 0) > 0, (name, report["failed"].get(f"host.{name}"))


def test_a_wait_on_a_set_rereads_every_ivar_each_pass_and_backs_off(report):
    body = entry(report["ptx"]["wait_until_any"])
    assert "ld.global.nc" not in body
    # a loop whose body acquire-loads the ivars, then sleeps, then branches back to its head
    assert re.search(r"\$(L__BB\d+_\d+):.*?ld\.acquire\.sys\.b64.*?nanosleep\.u32.*?bra(\.uni)?\s+\$\1;", body, re.S)
    assert "%globaltimer" in body and "pgas_record_error" in body      # PGAS_TIMEOUT, recorded as an error


def test_a_bitwise_atomic_on_a_float_is_refused_with_pgas_text(report):
    assert ("pgas.device.atomic_and / atomic_fetch_and: dest must have one of the dtypes int32, uint32, int64, "
            "uint64, got float32") in report["float_atomic_and"]


def _function(ptx: str, name: str) -> str:
    """The body of device function ``name`` (its definition, not a declaration)."""
    found = re.search(rf"\.func\s+(?:\([^)]*\)\s*)?{name}\((?:[^)]*)\)\s*\{{(.*?)\n\}}", ptx, re.S)
    assert found, f"no definition of {name}"
    return found.group(1)


def test_the_nic_path_posts_and_polls_with_system_scope_ptx(report):
    """The GPU-initiated path (``_nic_device``): the device thread reserves send-queue blocks
    with a system-scope CAS, publishes the doorbell record, doorbell and counters with
    release stores, sets the rung word with a sequentially consistent exchange, and polls
    the CQE with acquire loads, backing off with nanosleep; the NIC is a CPU thread, so no
    GPU-scope atomic may appear."""
    ptx = report["ptx"]["remote_ops"]
    body = entry(ptx)
    for called in ("pgas_nic_submit", "pgas_nic_complete", "pgas_nic_copy", "pgas_nic_result", "pgas_nic_quiet"):
        assert re.search(rf"call\.uni[^;]*{called}", body), called
    submit = _function(ptx, "pgas_nic_submit")
    assert "atom.acq_rel.sys.cas.b64" in submit                                  # reserve
    assert "ld.acquire.sys.b8" in submit                                         # the waited flags
    assert "st.release.sys.b32" in submit                                        # doorbell record
    assert len(re.findall(r"st\.release\.sys\.b64", submit)) >= 3               # last, doorbell, ready
    assert re.search(r"fence\.sc\.sys;\s*atom\.acquire\.sys\.exch\.b64", submit)   # the rung word
    assert "nanosleep.u32" in submit and "prmt.b32" in submit                    # back-off; big-endian fields
    complete = _function(ptx, "pgas_nic_complete")
    assert "atom.acq_rel.sys.max.u64" in complete and "ld.acquire.sys.b64" in complete   # floor; the CQE
    assert "%globaltimer" in complete and "nanosleep.u32" in complete            # PGAS_TIMEOUT, backing off
    for name in ("pgas_nic_submit", "pgas_nic_complete", "pgas_nic_check_refused", "pgas_nic_copy",
                 "pgas_nic_result", "pgas_nic_quiet"):
        atoms = re.findall(r"atom\.[\w.]+", _function(ptx, name))
        assert all(".sys." in a for a in atoms), (name, atoms)
    assert report["cubin_bytes"]["p[int64]"] > 0 and report["cubin_bytes"]["atomic_fetch_add[int64]"] > 0  # ptxas too


def test_the_nic_applies_atomics_on_gpu_memory_with_system_scope_compare_swap(report):
    """The emulated NIC's atomics on a GPU heap (``pgas/cuda/nic/_nic_host.py``): a one-thread kernel, a
    sequentially consistent system-scope compare-and-swap loop on 4- and 8-byte words."""
    ptx = report["ptx"]["nic_atomic"]
    body = entry(ptx)
    for width in (32, 64):
        assert re.search(rf"fence\.sc\.sys;\s*atom\.acquire\.sys\.cas\.b{width}", body), width
        assert f"ld.relaxed.sys.b{width}" in body
    assert all(".sys." in a for a in re.findall(r"atom\.[\w.]+", body))
    assert "st.relaxed.sys.b64" in body                       # the old value, to its pinned cell
    # native code launches it (pgas/wire/_window.py): eight 8-byte scalars, found by its entry's name
    params = re.search(r"\.entry\s+[\w$]+\(([^)]*)\)", ptx).group(1)
    assert re.findall(r"\.param\s+\.(\w+)", params) == ["u64"] * 8, params
