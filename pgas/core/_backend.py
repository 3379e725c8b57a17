"""Choose the backend once per process, before ``numba.cuda`` is imported.

numba reads ``NUMBA_ENABLE_CUDASIM`` when it is first imported, so the choice must be
made (and the flag set) before anything imports ``numba.cuda``. ``import pgas`` does it;
``pgasrun`` also puts the flag in the PEs' environment so import order never matters.
"""
from __future__ import annotations

import os
import sys

from ._env import setting
from ._errors import PgasError

__all__ = ["backend_name", "gpu_usable"]

_chosen: str | None = None


def gpu_usable() -> bool:
    """True when the CUDA driver loads and reports at least one device."""
    try:
        from cuda.bindings import driver
    except ImportError:
        return False
    try:
        (err,) = driver.cuInit(0)
        if err != driver.CUresult.CUDA_SUCCESS:
            return False
        err, count = driver.cuDeviceGetCount()
        return err == driver.CUresult.CUDA_SUCCESS and count > 0
    except Exception:  # no libcuda: cuda-python raises rather than returning an error
        return False


def gpu_compiler_found() -> bool:
    """True when numba can find NVVM to compile kernels for the GPU (the ``cuda`` extra's
    wheels, or a CUDA toolkit)."""
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib
        load_nvidia_dynamic_lib("nvvm")
        return True
    except Exception:  # not installed: pathfinder raises its own not-found error
        return False


def _select() -> str:
    requested = setting("PGAS_BACKEND")
    if requested in ("simulator", "cuda"):
        return requested
    if not gpu_usable():
        reason = "no usable GPU"
    elif not gpu_compiler_found():
        reason = "a GPU is usable, but NVVM is not installed: pip install 'pgas[cuda]'"
    else:
        return "cuda"
    # Said once per job: pgasrun says it itself; under mpiexec only rank 0 does.
    if os.environ.get("PGAS_BACKEND_NOTICE_GIVEN") != "1" and os.environ.get("PMI_RANK", "0") == "0":
        print(f"pgas: using the simulator backend ({reason})", file=sys.stderr)
    return "simulator"


def _enable_simulator() -> None:
    cuda_module = sys.modules.get("numba.cuda")
    if cuda_module is not None and "simulator" not in cuda_module.jit.__module__:
        raise PgasError(
            "numba.cuda was imported before pgas, in GPU mode, but pgas uses the simulator "
            "backend: import pgas first, or run under pgasrun, or set NUMBA_ENABLE_CUDASIM=1")
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    if "numba.core.config" in sys.modules:  # numba imported already: its config is stale
        sys.modules["numba.core.config"].ENABLE_CUDASIM = True


def _enable_gpu_mode() -> None:
    """The cuda backend compiles kernels for real GPUs: numba must not be in simulator mode."""
    cuda_module = sys.modules.get("numba.cuda")
    simulated = (cuda_module is not None and "simulator" in cuda_module.jit.__module__) or \
        os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")
    if simulated:
        raise PgasError("PGAS_BACKEND=cuda, but numba's CUDA simulator is enabled "
                        "(NUMBA_ENABLE_CUDASIM=1): unset it, or use PGAS_BACKEND=simulator")


def backend_name() -> str:
    """The backend of this process (``"simulator"`` or ``"cuda"``), chosen on first call."""
    global _chosen
    if _chosen is None:
        name = _select()
        if name == "simulator":
            _enable_simulator()
        else:
            _enable_gpu_mode()
        _chosen = name
    return _chosen
