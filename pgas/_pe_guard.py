"""Runs one PE's command under pgasrun and records how it ended.

pgasrun starts ``python -m pgas._pe_guard CMD...`` through mpiexec. The guard forks; the
child execs CMD (keeping the MPI process manager's environment and descriptors); the
guard waits. If CMD raises, exits non-zero or is killed, the guard writes
``failed-pe<N>`` into ``PGAS_RUN_DIR`` so that pgasrun stops the whole job and names this
PE. A guard that is itself being stopped forwards the signal and records nothing.
"""
from __future__ import annotations

import os
import signal
import sys

_stopping = False


def _describe(status: int) -> str | None:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        return f"was killed by signal {sig} ({signal.Signals(sig).name})"
    code = os.WEXITSTATUS(status)
    return f"exited with status {code}" if code else None


def _exit_code(status: int) -> int:
    return 128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m pgas._pe_guard CMD [ARGS...]", file=sys.stderr)
        return 2
    child = os.fork()
    if child == 0:
        try:
            os.execvp(argv[0], argv)
        except OSError as exc:
            print(f"pgasrun: cannot run {argv[0]!r}: {exc.strerror}", file=sys.stderr)
            os._exit(127)

    def forward(signum, _frame):
        global _stopping
        _stopping = True
        try:
            os.kill(child, signum)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except InterruptedError:
            continue
    how = _describe(status)
    run_dir, pe = os.environ.get("PGAS_RUN_DIR"), os.environ.get("PMI_RANK", "?")
    if how and run_dir and not _stopping:
        record = os.path.join(run_dir, f"failed-pe{pe}")
        if not os.path.exists(record):  # the PE's own excepthook may have said more
            with open(record, "w") as out:
                out.write(how)
    return _exit_code(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
