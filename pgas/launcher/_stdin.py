"""Who reads pgasrun's stdin: PE 0, all of it, at its own pace; the other PEs read
/dev/null (as mpirun users expect).

On one host pgasrun hands its stdin to PE 0 through a FIFO in the run's directory
(``Pump``, a thread that copies; a write to the FIFO waits until PE 0 has read enough, so
nothing is refused or lost at any size) and mpiexec gets /dev/null. Across hosts PE 0 may
run elsewhere: there mpiexec (Hydra) forwards stdin to PE 0, as it always does.
"""
from __future__ import annotations

import os
import threading

__all__ = ["FIFO_VARIABLE", "Pump", "give_child_stdin"]

FIFO_VARIABLE = "PGAS_STDIN_FIFO"


class Pump:
    """Copies this process's stdin into a FIFO at ``<run_dir>/stdin`` (``path``), then
    closes it: PE 0 sees the end of its input."""

    def __init__(self, run_dir: str):
        self.path = os.path.join(run_dir, "stdin")
        os.mkfifo(self.path, 0o600)
        threading.Thread(target=self._copy, name="pgasrun-stdin", daemon=True).start()

    def _copy(self) -> None:
        try:
            fifo = os.open(self.path, os.O_WRONLY)     # until PE 0's guard opens it
        except OSError:
            return      # the run ended first
        try:
            while True:
                data = os.read(0, 1 << 16)
                if not data:
                    return
                while data:
                    data = data[os.write(fifo, data):]
        except OSError:
            return      # no stdin (closed), or PE 0 closed its own
        finally:
            os.close(fifo)


def give_child_stdin(pe: int) -> None:
    """In a PE's process before it execs: stdin from pgasrun's FIFO on PE 0 (or as mpiexec
    gives it, across hosts), /dev/null on every other PE."""
    fifo = os.environ.get(FIFO_VARIABLE)
    if pe == 0 and not fifo:
        return
    fd = os.open(fifo if pe == 0 else os.devnull, os.O_RDONLY)
    if fd != 0:
        os.dup2(fd, 0)
        os.close(fd)
