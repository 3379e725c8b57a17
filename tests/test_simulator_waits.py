"""Waiting in the simulator backs off instead of keeping a core busy: the launching
thread's poll of its simulated threads, and the device waits (docs/simulator.md). On these
2 cores a loop that only yielded took the core that the message it waited for needed."""
import threading
import time

from conftest import pe_lines, pgasrun
from pgas.sim import _threads


def test_the_poll_of_simulated_threads_sleeps_once_it_has_polled_for_a_while(monkeypatch):
    from numba.cuda.simulator import kernel

    _threads.yield_while_polling()
    finished = threading.Thread(target=lambda: None)
    finished.start()
    finished.join()
    pauses = []
    monkeypatch.setattr(_threads.time, "sleep", pauses.append)
    end = time.monotonic() + 0.02
    while time.monotonic() < end:
        assert not kernel.BlockThread.is_alive(finished)
    slept = [p for p in pauses if p > 0]
    # 20 ms of polling: a pause after every _POLL_BUSY_S of it (yields in between)
    assert len(slept) >= 0.02 / _threads._POLL_BUSY_S / 4, (len(slept), len(pauses))
    assert all(p == _threads._POLL_PAUSE_S for p in slept)


WAITING_KERNEL = r"""
import threading, time
import numpy as np
import pgas, pgas.device as dev
from pgas.core.native import _wake_words
from pgas.sim import _primitives
from numba import cuda

pauses, sleep, sleep_on_word = [], time.sleep, _wake_words.Sleeper.sleep


def recorded(seconds):
    pauses.append((threading.get_ident(), seconds))
    sleep(seconds)


def recorded_on_word(self, seen, seconds):      # (the wake word's sleeps: the flag is set uncounted)
    pauses.append((threading.get_ident(), seconds))
    sleep_on_word(self, seen, seconds)


@cuda.jit
def wait_for_flag(flag, waiter):
    waiter[0] = threading.get_ident()
    dev.signal_wait_until(flag, dev.CMP_EQ, 1)


pgas.init()
flag, waiter = pgas.zeros(1, np.uint64), np.zeros(1, np.int64)
setter = threading.Timer(0.5, lambda: flag.copy_to_device(np.ones(1, np.uint64)))
time.sleep, _wake_words.Sleeper.sleep = recorded, recorded_on_word
setter.start()
wait_for_flag[1, 1](flag, waiter)
cuda.synchronize()
time.sleep, _wake_words.Sleeper.sleep = sleep, sleep_on_word
mine = [seconds for thread, seconds in pauses if thread == waiter[0]]
longest = _primitives._WAIT_BACKOFF_S
assert mine and max(mine) == longest, (len(mine), max(mine, default=None))
# a yield first, then sleeps growing to the longest: in 0.5 s, not thousands of yields
assert sum(1 for s in mine if s == 0) <= 2 and len(mine) < 0.5 / longest + 10, (len(mine), mine[:5])
print("ok")
pgas.finalize()
"""


def test_a_device_wait_sleeps_growing_to_its_longest_pause(tmp_path, clean_shm):
    """A simulated thread waiting for a flag yields at most twice, then sleeps, growing to
    ``_WAIT_BACKOFF_S`` (it used to yield and look again at once, for as long as it waited);
    on the PE's wake word (the flag is set here without being counted, so no write ends them)."""
    script = tmp_path / "waiting.py"
    script.write_text(WAITING_KERNEL)
    proc = pgasrun(1, "python", str(script), options=["--tag-output"], env={"PGAS_BACKEND": "simulator"})
    assert proc.returncode == 0, proc.stderr
    assert pe_lines(proc) == ["[0] ok"]
