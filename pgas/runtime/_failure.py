"""How a failing PE ends the whole job: the exception hooks, ``sys.exit`` in multi-PE jobs,
and the device error behind a trapped kernel (cuda)."""
from __future__ import annotations

import atexit
import os
import sys
import traceback

from ..core import _job
from ..core._errors import PgasConfigError, PgasError
from . import _state

__all__ = ["end_job", "end_job_for_nic", "device_error_behind", "install_hooks", "remove_hooks"]


def end_job(how: str, code: int) -> None:
    """Record (for pgasrun) how this PE failed, then end every PE of the job."""
    _job.record_failure(how, code)
    _job.record_segments()      # pgasrun removes what this PE's MPI cannot now
    sys.stderr.flush()
    if _job.under_pgasrun() or "mpi4py.MPI" not in sys.modules:
        os._exit(code)      # pgasrun stops the other PEs, and says why once
    from mpi4py import MPI
    MPI.COMM_WORLD.Abort(code)


def device_error_behind() -> PgasError | None:
    """On the cuda backend, the error a device check recorded before it stopped its kernel
    (the host sees only a CUDA launch failure), or None."""
    rt = _state.current()
    reader = getattr(rt.heap, "device_error", None) if rt is not None else None
    return reader() if reader is not None else None


def end_job_for_nic() -> None:
    """What a PE's NIC does when its thread fails (``Nic(on_failure=...)``): end the job,
    naming the device check behind it where a kernel of this PE trapped first (cuda: the
    NIC then failed on its memory)."""
    behind = device_error_behind()
    end_job("its NIC thread failed" if behind is None else f"raised {type(behind).__name__}: {behind}", 1)


def _explained(exc_type, exc, tb):
    """An uncaught exception, or the device check behind it when a kernel trapped."""
    found = None if isinstance(exc, PgasError) else device_error_behind()
    if found is None:
        return exc_type, exc, tb
    found.__cause__ = exc
    return type(found), found, None


def _explain_device_errors(exc_type, exc, tb) -> None:
    """sys.excepthook of a single cuda PE outside pgasrun: name the failed device check."""
    sys.__excepthook__(*_explained(exc_type, exc, tb))


def _report_and_abort(exc_type, exc, tb) -> None:
    """sys.excepthook under pgasrun and in multi-PE jobs: name the PE, then end the whole
    job (no hang). A configuration error is one line, said once by pgasrun's summary. A
    kernel stopped by a failed device check is reported as that check's error."""
    exc_type, exc, tb = _explained(exc_type, exc, tb)
    rt = _state.current()
    pe = rt.my_pe if rt is not None else os.environ.get("PMI_RANK", "?")
    if issubclass(exc_type, PgasConfigError):
        if not _job.under_pgasrun():
            sys.stderr.write(f"pgas: PE {pe}: {exc}\n")
    else:
        text = "".join(traceback.format_exception(exc_type, exc, tb))
        sys.stderr.write("".join(f"[PE {pe}] {line}\n" for line in text.rstrip().splitlines()))
    end_job(f"raised {exc_type.__name__}: {exc}", 1)


_plain_exit = sys.exit


def _exit_ending_job(code=None):
    """sys.exit for multi-PE jobs: a non-zero exit ends every PE, as mpi4py's runner does.

    Without it the exiting PE would wait in MPI's finalize while its peers wait for it.
    """
    rt = _state.current()
    if rt is not None and code not in (None, 0):
        print(f"[PE {rt.my_pe}] sys.exit({code!r})", file=sys.stderr, flush=True)
        end_job(f"exited with status {code}", code if isinstance(code, int) else 1)
    _plain_exit(code)


_departure_watched = False


def _watch_departure() -> None:
    """At interpreter exit, a PE still initialized tells pgasrun it left the job. Registered
    after MPI started, so it runs before MPI's finalize (which may block for ever while
    the other PEs wait for this one)."""
    global _departure_watched
    if not _departure_watched:
        atexit.register(_job.record_departure)
        _departure_watched = True


def install_hooks(n_pes: int, on_gpu: bool) -> None:
    """At ``init``: in multi-PE jobs a failure or a non-zero exit ends the whole job; a
    single cuda PE names the device check behind a trapped kernel."""
    if n_pes > 1:
        sys.excepthook, sys.exit = _report_and_abort, _exit_ending_job
    elif sys.excepthook is sys.__excepthook__ and on_gpu:
        sys.excepthook = _explain_device_errors
    _watch_departure()


def remove_hooks() -> None:
    """At ``finalize``: the hooks ``install_hooks`` set, except pgasrun's own."""
    if sys.exit is _exit_ending_job:
        sys.exit = _plain_exit
    if sys.excepthook is _explain_device_errors or (sys.excepthook is _report_and_abort and
                                                    not _job.under_pgasrun()):
        sys.excepthook = sys.__excepthook__


if _job.under_pgasrun():
    sys.excepthook = _report_and_abort   # failures before init are named too

