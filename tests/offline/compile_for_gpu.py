"""Compile every public pgas.device function, every example kernel, a user's kernel and the
kernels of the host runtime's stream-ordered operations to sm_90 PTX with the cuda backend forced and no GPU, and link each to a cubin (ptxas checks
the inline PTX); check that the waits poll with coherent acquire loads. Prints one JSON
report on stdout.

    PGAS_BACKEND=cuda python tests/offline/compile_for_gpu.py
"""
import importlib.util
import inspect
import json
import os
import sys
import time
from pathlib import Path

import pgas
import pgas.device as dev
from numba import cuda, types

CC = (9, 0)
ROOT = Path(__file__).resolve().parents[2]
ARRAY_PARAMS = {"dest", "src", "ivar", "signal", "arr", "ivars", "status", "indices", "values", "fetch", "lock",
                "name"}
FLOAT_OK = {"atomic_fetch", "atomic_set", "atomic_swap", "atomic_compare_swap", "atomic_add", "atomic_fetch_add",
            "p", "g", "put", "get",
            "sum_reduce", "max_reduce", "sum_reducescatter", "broadcast", "fcollect", "alltoall"}
FLOAT16_OK = {"sum_reduce", "prod_reduce", "min_reduce", "max_reduce_block"}   # float16 held as bits by numba-cuda
WAITS = ["wait_until", "signal_wait_until", "barrier_all", "sync_all", "barrier", "sync_block"]


def call_kernel(name: str, dtype):
    """A kernel that calls dev.<name> with arrays of ``dtype`` and int32 scalars (its
    required arguments; the forms with optional ones are kernels of their own)."""
    every = [p.name for p in inspect.signature(getattr(dev, name).py_func).parameters.values()
             if p.default is inspect.Parameter.empty]
    params = [p for p in every if p != "op"]     # a reduction's op is a constant string
    args = ", ".join(params)
    call = ", ".join('"sum"' if p == "op" else p for p in every)
    namespace = {"dev": dev}
    exec(f"def kernel({args}{', ' if args else ''}out):\n    out[0] = dev.{name}({call}) or 0\n"
         if name in RETURNS else
         f"def kernel({args}{', ' if args else ''}out):\n    out[0] = dev.{name}({call})[0]\n"
         if name in RETURNS_ARRAY else
         f"def kernel({args}{', ' if args else ''}out):\n    dev.{name}({call})\n", namespace)
    signature = []
    for p in params:
        if p in ARRAY_PARAMS:
            signature.append(types.uint64[::1] if p == "signal" else dtype[::1])
        elif p in ("value", "cond"):
            signature.append(dtype)
        else:
            signature.append(types.int32)
    return namespace["kernel"], tuple(signature) + (dtype[::1],)


RETURNS = {"my_pe", "n_pes", "team_my_pe", "team_n_pes", "team_translate_pe", "g", "test",
           "signal_fetch", "signal_wait_until", "atomic_fetch", "atomic_swap", "atomic_compare_swap",
           "atomic_fetch_inc", "atomic_fetch_add", "atomic_fetch_and", "atomic_fetch_or", "atomic_fetch_xor",
           "ptr", "team_ptr", "test_lock", "info_get_name",
           *(f"{kind}_{mode}{form}" for kind in ("wait_until", "test") for mode in ("all", "any", "some")
             for form in ("", "_vector") if (kind, mode) != ("wait_until", "all"))}
RETURNS_ARRAY = {"peer_array", "vendor_get_version_info", "info_get_version", "get_multicast_array"}   # indexed: out[0] = f(...)[0]


def example_kernels():
    """(name, python function, signature) of every kernel in examples/."""
    i64, f64, u64 = types.int64[::1], types.float64[::1], types.uint64[::1]
    signatures = {
        "shift.shift": (types.int32[::1],),
        "ring.pass_along": (i64, i64, i64),
        "ring_allreduce.ring_allreduce": (f64, f64, u64, types.int64),
        "atomic_counter.worker": (i64, types.int32[::1], i64, i64, types.int64),
    }
    for key, signature in signatures.items():
        module_name, kernel = key.split(".")
        spec = importlib.util.spec_from_file_location(module_name, ROOT / "examples" / f"{module_name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield key, getattr(module, kernel).py_func, signature


def nvshmem4py_version_info(major, minor, patch):
    """nvshmem4py's form of vendor_get_version_info: element 0 of three arrays."""
    dev.vendor_get_version_info(major, minor, patch)


def user_kernel(ivar, data, pe):
    """What a user writes: their own kernel calling pgas.device."""
    dev.put_nbi(data, data, pe)
    dev.quiet()
    dev.p(ivar, 1, pe)
    dev.wait_until(ivar, dev.CMP_EQ, 1)


def spin_on_g(flag, pe):
    """A user's spin on a peer's flag: ``g`` must re-read memory every time."""
    while dev.g(flag, pe) == 0:
        pass


def wait_on_uint64_signal(signal, out):
    out[0] = dev.signal_wait_until(signal, dev.CMP_GE, 3)


def p_then_g(flag, pe, out):
    dev.p(flag, 7, pe)
    out[0] = dev.g(flag, pe)


def atomics(dest, out, pe):
    out[0] = dev.atomic_fetch_add(dest, 1, pe)
    out[1] = dev.atomic_compare_swap(dest, 1, 2, pe)
    out[2] = dev.atomic_fetch(dest, pe)


def float_atomics(dest32, dest64, pe):
    dev.atomic_add(dest32, 1.5, pe)
    dest64[1] = dev.atomic_fetch_add(dest64, 2.5, pe)


def float_atomic_and(dest, pe):
    """Refused when it compiles: no bitwise atomic on floats."""
    dev.atomic_and(dest, 1, pe)


def put_block(dest, src, pe):
    dev.put_block(dest, src, pe)


def put_warp(dest, src, pe):
    dev.put_warp(dest, src, pe)


def barrier_of(team):
    dev.barrier(team)


def narrow_reductions(team, d8, s8, db, sb):
    """8-bit integers and booleans, combined in their own width (bool as bytes 0 and 1)."""
    dev.sum_reduce(team, d8, s8)
    dev.xor_reduce_warp(team, db, sb)


def half_reductions(team, dest, src):
    """float16, which numba-cuda holds as its 16 bits: combined in float32, rounded once."""
    dev.sum_reduce(team, dest, src)
    dev.min_reduce(team, dest, src)


def bfloat16_reductions(team, dest, src):
    """bfloat16, which numba-cuda holds as its 16 bits: combined in float32, rounded once."""
    dev.sum_reduce(team, dest, src)
    dev.max_reduce_block(team, dest, src)
    dev.prod_reducescatter(team, dest, src)


def complex_reductions(team, dest, src):
    """complex64 (OpenSHMEM's complexf): sum and prod, a product by fused multiply-adds,
    and an inclusive scan."""
    dev.sum_reduce(team, dest, src)
    dev.prod_reduce_block(team, dest, src)
    dev.prod_inscan(team, dest, src)


def complex_min_reduce(team, dest, src):
    """Refused when it compiles: complex numbers reduce with sum and prod only."""
    dev.min_reduce(team, dest, src)


def float_xor_reduce(team, dest, src):
    """Refused when it compiles: no bitwise reduction of floats."""
    dev.xor_reduce(team, dest, src)


def named_reductions(team, dest, src):
    """nvshmem4py's form: the op as a constant string."""
    dev.reduce(team, dest, src, "max")
    dev.reducescatter_block(team, dest, src, "sum")


def named_float_xor(team, dest, src):
    dev.reduce_warp(team, dest, src, "xor")


def named_unknown_op(team, dest, src):
    dev.reduce(team, dest, src, "avg")


def remote_ops(dest, src, fdest, pe, out):
    """What may go through the NIC to a PE on another node (the route is chosen at run time)."""
    dev.p(dest, 7, pe)
    out[0] = dev.g(src, pe)
    dev.put(dest, src, pe)
    dev.iget(dest, src, 2, 2, 3, pe)
    out[1] = dev.atomic_fetch_add(dest, 1, pe)
    dev.atomic_add(fdest, 1.5, pe)
    dev.quiet()


def lock_then_clear(lock):
    dev.set_lock(lock)
    dev.clear_lock(lock)


def multicast_store(team, arr):
    dev.get_multicast_array(team, arr)[0] = 1


def wait_any_of(ivars, status, out):
    out[0] = dev.wait_until_any(ivars, status, dev.CMP_EQ, 1)


def ptx_kernels():
    """(label, python function, signature) of the small kernels whose PTX the tests read."""
    i64, u64, f32 = types.int64[::1], types.uint64[::1], types.float32[::1]
    yield "spin_on_g", spin_on_g, (i64, types.int32)
    yield "wait_on_uint64_signal", wait_on_uint64_signal, (u64, u64)
    yield "p_then_g", p_then_g, (i64, types.int32, i64)
    yield "atomics", atomics, (i64, i64, types.int32)
    yield "float_atomics", float_atomics, (f32, types.float64[::1], types.int32)
    yield "put_block", put_block, (f32, f32, types.int32)
    yield "put_warp", put_warp, (f32, f32, types.int32)
    yield "barrier", barrier_of, (types.int64,)
    i8, b = types.int8[::1], types.boolean[::1]
    yield "narrow_reductions", narrow_reductions, (types.int64, i8, i8, b, b)
    yield "half_reductions", half_reductions, (types.int64, types.float16[::1], types.float16[::1])
    from numba.cuda.types import bfloat16
    yield "bfloat16_reductions", bfloat16_reductions, (types.int64, bfloat16[::1], bfloat16[::1])
    c64, c128 = types.complex64[::1], types.complex128[::1]
    yield "complex_reductions", complex_reductions, (types.int64, c64, c64)
    yield "complex128_reductions", complex_reductions, (types.int64, c128, c128)
    yield "named_reductions", named_reductions, (types.int64, types.float32[::1], types.float32[::1])
    yield "wait_until_any", wait_any_of, (i64, types.int32[::1], i64)
    yield "remote_ops", remote_ops, (i64, i64, f32, types.int32, i64)
    yield "locks", lock_then_clear, (i64,)
    yield "multicast", multicast_store, (types.int64, i64)
    from pgas.cuda.nic._nic_host import atomic_kernel_source
    yield ("nic_atomic", *atomic_kernel_source())        # the NIC's atomics on GPU memory


def host_operation_kernels():
    """(label, python function, signature) of the kernels the cuda host runtime launches."""
    from pgas.host import _gpu_ops as ops

    i64, u64, f64 = types.int64, types.uint64[::1], types.float64[::1]
    yield "host.signal_op", ops._signal_kernel.py_func, (u64, i64, i64, i64)
    yield "host.signal_wait_until", ops._wait_kernel.py_func, (u64, i64, i64, u64)
    yield "host.signal_fetch", ops._fetch_kernel.py_func, (u64, u64)
    # host atomics: a kernel per name (a sample of names, arities and dtypes)
    for name, operands, fetch, dtype in (("atomic_fetch_add", 1, True, types.float32),
                                         ("atomic_compare_swap", 2, True, types.float64),
                                         ("atomic_inc", 0, False, types.int64),
                                         ("atomic_fetch_xor", 1, True, types.uint32)):
        tail = (dtype[::1],) if fetch else ()
        yield (f"host.{name}", ops._atomic_kernel(name, operands, fetch).py_func,
               (dtype[::1], dtype, dtype, i64) + tail)
    yield "host.quiet", ops._quiet_kernel.py_func, ()
    yield "host.barrier", ops._barrier_kernel.py_func, (i64,)
    yield "host.sync", ops._sync_kernel.py_func, (i64,)
    yield "host.broadcast", ops._collective_kernel("broadcast").py_func, (i64, f64, f64, i64)
    for name in ("fcollect", "alltoall", "sum_reduce", "prod_reducescatter"):
        yield f"host.{name}", ops._collective_kernel(name).py_func, (i64, f64, f64)
    yield "host.xor_reduce", ops._collective_kernel("xor_reduce").py_func, (i64, u64, u64)
    yield "host.alltoalls", ops._collective_kernel("alltoalls").py_func, (i64, f64, f64, i64, i64, i64)
    c128 = types.complex128[::1]
    yield "host.complex128_prod_reduce", ops._collective_kernel("prod_reduce").py_func, (i64, c128, c128)
    from numba.cuda.types import bfloat16
    yield "host.bfloat16_sum_reduce", ops._collective_kernel("sum_reduce").py_func, (i64, bfloat16[::1], bfloat16[::1])


def link_cubin(ptx: str) -> int:
    try:
        from cuda.core import Linker, LinkerOptions, ObjectCode
    except ImportError:
        from cuda.core.experimental import Linker, LinkerOptions, ObjectCode
    code = Linker(ObjectCode.from_ptx(ptx.encode()), options=LinkerOptions(arch=f"sm_{CC[0]}{CC[1]}")).link("cubin")
    return len(code.code)


def device_jobs() -> list:
    """(function name, dtype) for every public device function, in a fixed order."""
    jobs = []
    for name in dev.__all__:
        if not callable(getattr(dev, name)):
            continue
        jobs.append((name, types.int64))
        if name in FLOAT_OK:
            jobs += [(name, types.float32), (name, types.float64)]
        if name.startswith("atomic_"):
            jobs += [(name, types.int32), (name, types.uint32), (name, types.uint64)]
        if name in FLOAT16_OK:
            jobs.append((name, types.float16))
    return jobs


def float16_test(ivar, out):
    """Refused when it compiles: a test polls int32, uint32, int64, uint64, float32 or float64."""
    out[0] = dev.test(ivar, dev.CMP_EQ, 1)


REFUSED = (("float16_test", float16_test, (types.float16[::1], types.boolean[::1])),
           ("float_xor_reduce", float_xor_reduce, (types.int64, types.float32[::1], types.float32[::1])),
           ("named_float_xor", named_float_xor, (types.int64, types.float32[::1], types.float32[::1])),
           ("named_unknown_op", named_unknown_op, (types.int64, types.float32[::1], types.float32[::1])),
           ("float_atomic_and", float_atomic_and, (types.float32[::1], types.int32)),
           ("complex_min_reduce", complex_min_reduce, (types.int64, types.complex128[::1], types.complex128[::1])))


def all_jobs() -> list:
    """(label, kind, make) for everything compiled, in a fixed order: ``make()`` gives the
    (python function, signature). kind: "link" (compile and link; the cubin's size is
    reported), "ptx" (keep the PTX for the tests to read), "refused" (must not compile;
    the message is reported)."""
    jobs = [(f"{name}[{dtype}]", "link", lambda name=name, dtype=dtype: call_kernel(name, dtype))
            for name, dtype in device_jobs()]
    user = ("user_kernel", user_kernel, (types.int64[::1], types.float64[::1], types.int32))
    version = ("nvshmem4py_version_info", nvshmem4py_version_info, (types.int32[::1],) * 3)
    jobs += [(label, "link", lambda f=f, sig=sig: (f, sig))
             for label, f, sig in (*example_kernels(), user, version, *host_operation_kernels())]
    jobs += [(label, "ptx", lambda f=f, sig=sig: (f, sig)) for label, f, sig in ptx_kernels()]
    jobs += [(label, "refused", lambda f=f, sig=sig: (f, sig)) for label, f, sig in REFUSED]
    return jobs


def links(label: str) -> bool:
    """Whether a compiled kernel is also linked (ptxas reads its inline PTX): every kernel
    but the other-dtype forms of device functions whose inline PTX does not depend on the
    dtype (their int64 form is linked; NVVM has checked the rest of their IR)."""
    name, _, dtype = label.partition("[")
    return not dtype or dtype == "int64]" or name.startswith("atomic_") or name in ("p", "g")


_JOBS: list = []   # all_jobs(), made once per process


def compile_jobs(indices: list) -> dict:
    """Run the jobs at ``indices`` of ``all_jobs()`` (the pool hands them out a few at a
    time, so that every core stays busy to the end)."""
    if not _JOBS:
        _JOBS.extend(all_jobs())
    report = {"compiled": [], "failed": {}, "waits": {}, "cubin_bytes": {}, "ptx": {}}
    for label, kind, make in (_JOBS[i] for i in indices):
        try:
            function, signature = make()
            ptx, _ = cuda.compile_ptx(function, signature, cc=CC)
        except Exception as exc:  # reported; the tests fail on it unless it is one of REFUSED
            if kind == "refused":
                report[label] = str(exc)
            else:
                report["failed"][label] = str(exc).strip().splitlines()[:6]
            continue
        if kind == "refused":
            report[label] = "compiled"
        elif kind == "ptx":
            report["ptx"][label] = ptx
        else:
            if links(label):
                try:
                    report["cubin_bytes"][label] = link_cubin(ptx)   # ptxas checks the inline PTX too
                except Exception as exc:
                    report["failed"][label] = str(exc).strip().splitlines()[:6]
                    continue
            report["compiled"].append(label)
            name = label.split("[")[0]
            if name in WAITS and label.endswith("[int64]"):
                report["waits"][name] = {"acquire": "ld.acquire.sys" in ptx, "non_coherent": "ld.global.nc" in ptx}
    return report


def main():
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from pgas.core._backend import gpu_usable
    report = {"backend": pgas.backend(), "gpu_usable": gpu_usable(), "compiled": [], "failed": {}, "waits": {},
              "cubin_bytes": {}, "ptx": {}}
    start = time.time()
    report["public"] = [name for name in dev.__all__ if callable(getattr(dev, name))]
    count = len(all_jobs())
    batches = [list(range(first, min(first + 4, count))) for first in range(0, count, 4)]
    with ProcessPoolExecutor(min(4, os.cpu_count() or 1), mp_context=multiprocessing.get_context("spawn")) as pool:
        for part in pool.map(compile_jobs, batches):
            report["compiled"] += part.pop("compiled")
            for key in ("failed", "waits", "cubin_bytes", "ptx"):
                report[key].update(part.pop(key))
            report.update(part)   # the refused kernels' messages
    report["seconds"] = round(time.time() - start, 1)
    try:
        pgas.init()
        report["init"] = "initialized"
    except pgas.PgasError as exc:
        report["init"] = str(exc)
    json.dump(report, sys.stdout)


if __name__ == "__main__":
    if os.environ.get("PGAS_BACKEND") != "cuda":
        raise SystemExit("run with PGAS_BACKEND=cuda")
    main()
