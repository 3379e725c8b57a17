"""How long kernels that call pgas.device take to compile for the GPU, beside a plain kernel.

    python -m pgas.bench compile                # every kernel in a fresh process
    python -m pgas.bench compile --warm         # one process: later kernels reuse helpers

Each kernel is compiled to sm_90 PTX with the cuda backend (no GPU needed: the offline
target of ``pgas.cuda._offline``), by ``numba.cuda.compile_ptx``. By default each is
timed in a process of its own, after that process has compiled the plain kernel once (so
numba's own start-up is not counted): this is what a program pays for its first call of
the kernel. The plain kernel (``out[0] = 1``, no pgas) is the reference; the ratio
column is each kernel's time over it. Best of ``--repeats`` fresh processes.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _on_team(call: str, dtype: str = "float64"):
    """A kernel running the collective ``dev.<call>`` on ``team`` with arrays of ``dtype``."""
    return f"def kernel(team, dest, src):\n    dev.{call}\n", ["int64", f"{dtype}[::1]", f"{dtype}[::1]"]


# label -> (source of a kernel calling pgas.device as dev, argument types as numba type names)
KERNELS = {
    "plain kernel (no pgas)": ("def kernel(out):\n    out[0] = 1\n", ["float64[::1]"]),
    "p": ("def kernel(dest, pe):\n    dev.p(dest, 1.0, pe)\n", ["float64[::1]", "int32"]),
    "put_block": ("def kernel(dest, src, pe):\n    dev.put_block(dest, src, pe)\n",
                  ["float64[::1]", "float64[::1]", "int32"]),
    "atomic_fetch_add": ("def kernel(dest, out, pe):\n    out[0] = dev.atomic_fetch_add(dest, 1, pe)\n",
                         ["int64[::1]", "int64[::1]", "int32"]),
    "signal_wait_until": ("def kernel(signal, out):\n    out[0] = dev.signal_wait_until(signal, dev.CMP_GE, 1)\n",
                          ["uint64[::1]", "uint64[::1]"]),
    "barrier_all": ("def kernel():\n    dev.barrier_all()\n", []),
    "broadcast_block": _on_team("broadcast_block(team, dest, src, 0)"),
    "fcollect": _on_team("fcollect(team, dest, src)"),
    "alltoall_block": _on_team("alltoall_block(team, dest, src)"),
    "sum_reduce": _on_team("sum_reduce(team, dest, src)"),
    "sum_reduce_block": _on_team("sum_reduce_block(team, dest, src)"),
    "max_reducescatter_block": _on_team("max_reducescatter_block(team, dest, src)", "int32"),
}
# example kernels: label -> (file in examples/, kernel name, argument types)
EXAMPLE_KERNELS = {
    "examples/shift.py": ("shift", "shift", ["int32[::1]"]),
    "examples/ring.py": ("ring", "pass_along", ["int64[::1]", "int64[::1]", "int64[::1]"]),
    "examples/ring_allreduce.py": ("ring_allreduce", "ring_allreduce",
                                   ["float64[::1]", "float64[::1]", "uint64[::1]", "int64"]),
    "examples/atomic_counter.py": ("atomic_counter", "worker",
                                   ["int64[::1]", "int32[::1]", "int64[::1]", "int64[::1]", "int64"]),
}


def _kernel(label: str):
    """(python function, numba signature) of the kernel called ``label``."""
    from numba import types

    import pgas.device as dev
    if label in KERNELS:
        source, arg_types = KERNELS[label]
        namespace = {"dev": dev}
        exec(source, namespace)
        function = namespace["kernel"]
    else:
        import importlib.util
        module_name, kernel, arg_types = EXAMPLE_KERNELS[label]
        spec = importlib.util.spec_from_file_location(module_name, EXAMPLES / f"{module_name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        function = getattr(module, kernel).py_func
    return function, tuple(eval(name, {}, vars(types)) for name in arg_types)


def _time_compiles(labels: list[str]) -> dict:
    """Seconds to compile each kernel in this process, after one warm-up compile."""
    from numba import cuda

    from pgas.cuda._offline import OFFLINE_CC
    plain = next(iter(KERNELS))
    cuda.compile_ptx(*_kernel(plain), cc=OFFLINE_CC)   # numba's own first-compile costs
    seconds = {}
    for label in labels:
        function, signature = _kernel(label)
        start = time.perf_counter()
        cuda.compile_ptx(function, signature, cc=OFFLINE_CC)
        seconds[label] = time.perf_counter() - start
    return seconds


def _cuda_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["PGAS_BACKEND"] = "cuda"
    return env


def _in_fresh_process(label: str) -> float:
    proc = subprocess.run([sys.executable, "-m", "pgas.bench.compile", "--child", label], env=_cuda_env(),
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"compiling {label} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout)[label]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m pgas.bench compile", description=__doc__.splitlines()[0])
    parser.add_argument("--warm", action="store_true", help="compile all kernels in one process, in order")
    parser.add_argument("--repeats", type=int, default=2, help="fresh processes per kernel (best is shown)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        json.dump(_time_compiles([args.child]), sys.stdout)
        return
    labels = list(KERNELS) + [label for label in EXAMPLE_KERNELS if (EXAMPLES / Path(label).name).exists()]
    if args.warm:
        if os.environ.get("PGAS_BACKEND") != "cuda" or os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
            os.execve(sys.executable, [sys.executable, "-m", "pgas.bench.compile", *(argv or sys.argv[1:])],
                      _cuda_env())
        seconds = _time_compiles(labels)
        how = "one process, in this order (later kernels reuse compiled helpers)"
    else:
        seconds = {label: min(_in_fresh_process(label) for _ in range(max(1, args.repeats))) for label in labels}
        how = f"each in a fresh process (best of {max(1, args.repeats)})"
    reference = seconds[labels[0]]
    print(f"compile time for sm_90, {how}")
    print(f"{'kernel':34s} {'seconds':>8s} {'x plain':>8s}")
    for label in labels:
        print(f"{label:34s} {seconds[label]:8.2f} {seconds[label] / reference:8.1f}")


if __name__ == "__main__":
    main()
