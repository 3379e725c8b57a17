"""Wake words (pgas/core/native/_wake_words.py): a waiting thread sets its PE's word's flag and
sleeps on its count; a write bumps the count (and ends the sleep) only while the flag is
set; a wait (core._waiting.Wait) sets the flag, checks once more, then sleeps on the word
(before a long sleep it sets the flag to say so, and checks once more), and after a write
that did not end the wait it sleeps once plainly. The PE checks
(tests/pe/checks_wakes.py) show that every write path wakes."""
import threading
import time

import numpy as np
import pytest

from pgas.core import _waiting
from pgas.core.native import _wake_words

pytestmark = pytest.mark.skipif(not _wake_words.supported(), reason="no futex call number known for this CPU")

LONG_S = 20.0       # a sleep that only a write ends within the test's time


def _word():
    memory = np.zeros(_wake_words.WAKE_BYTES // 4, np.uint32)
    return memory, _wake_words.WakeWords([memory.ctypes.data], 0), _wake_words.Sleeper(memory.ctypes.data)


def test_a_write_bumps_the_count_only_when_the_flag_is_set_and_clears_it():
    memory, words, sleeper = _word()
    words.wake(0)
    assert sleeper.count() == 0 and memory[1] == 0          # nobody armed: nothing but a look
    sleeper.arm()
    assert memory[1] == 1 and words.armed[0][1] == 1
    words.wake(0)
    assert sleeper.count() == 1 and memory[1] == 0
    words.wake(0)
    assert sleeper.count() == 1


def test_a_sleep_on_a_wake_word_ends_at_a_write_counted_there():
    memory, words, sleeper = _word()
    seen = sleeper.count()
    sleeper.arm()
    writer = threading.Timer(0.2, words.wake, (0,))
    writer.start()
    started = time.monotonic()
    sleeper.sleep(seen, LONG_S)
    writer.join()
    assert time.monotonic() - started < LONG_S / 2
    assert sleeper.count() == seen + 1 and memory[1] == 0      # counted; the flag cleared


def test_a_sleep_ends_at_once_when_a_write_came_after_the_count_was_read():
    _, words, sleeper = _word()
    seen = sleeper.count()
    sleeper.arm()
    words.wake(0)
    started = time.monotonic()
    sleeper.sleep(seen, LONG_S)
    assert time.monotonic() - started < LONG_S / 2


def test_a_sleep_without_a_write_lasts_its_time():
    _, _, sleeper = _word()
    started = time.monotonic()
    sleeper.sleep(sleeper.count(), 0.05)
    assert time.monotonic() - started >= 0.04


def test_a_wait_sleeps_until_a_write_then_once_plainly_after_one_that_did_not_end_it(monkeypatch):
    memory, words, sleeper = _word()
    answers = _word()
    monkeypatch.setattr(_waiting, "_sleeper", sleeper)
    monkeypatch.setattr(_waiting, "_answers", answers[2])
    plain = []
    real_sleep = time.sleep
    monkeypatch.setattr(_waiting.time, "sleep", lambda seconds: (plain.append(seconds), real_sleep(seconds)))
    clock = _waiting.Wait("test", timeout=60.0, backoff_s=LONG_S)
    clock._nap = LONG_S / 2             # (as if it had backed off that far: the next sleep is LONG_S)
    started = time.monotonic()
    clock.pause("a flag")               # only sets the flag: the caller checks once more
    assert memory[1] == _wake_words.ARMED and time.monotonic() - started < 1 and clock._nap == LONG_S / 2
    clock.pause("a flag")               # a long sleep next: the flag says so first (then one more check)
    assert memory[1] == _wake_words.ARMED_LONG and time.monotonic() - started < 1 and clock._nap == LONG_S / 2
    writer = threading.Timer(0.2, words.wake, (0,))
    writer.start()
    clock.pause("a flag")               # ends at the write
    writer.join()
    assert time.monotonic() - started < LONG_S / 2 and plain == []
    clock._sleep = 0.01
    clock.pause("a flag")               # the write did not end the wait: a plain sleep now
    assert plain == [0.01]
    answers[2].arm()
    answers[1].wake(0)                  # answers do not end a wait for the heap's words
    clock._nap = 0.1                    # (the next sleep on the word: 0.2 s)
    clock.pause("a flag")               # (the flag set again, for the count it now sees)
    clock.pause("a flag")               # (and set to say the sleep is long)
    started = time.monotonic()
    clock.pause("a flag")
    assert time.monotonic() - started >= 0.15 and len(plain) == 1


def test_a_nap_for_an_answer_ends_when_answers_land_not_at_writes_into_the_heap(monkeypatch):
    heap, answers = _word(), _word()
    monkeypatch.setattr(_waiting, "_sleeper", heap[2])
    monkeypatch.setattr(_waiting, "_answers", answers[2])
    naps = _waiting.Naps(lambda pause: LONG_S)
    naps.pause = 0.2
    naps.look()
    naps.nap()                          # only sets the flag of the word for answers
    assert answers[0][1] == _wake_words.ARMED and heap[0][1] == 0 and naps.pause == 0.2
    naps.nap()                          # then says the sleep is long (writers on other nodes wake those)
    assert answers[0][1] == _wake_words.ARMED_LONG and heap[0][1] == 0 and naps.pause == 0.2
    naps.look()
    heap[2].arm()
    heap[1].wake(0)
    started = time.monotonic()
    naps.nap()
    assert time.monotonic() - started >= 0.15 and naps.pause == LONG_S
    naps.look()
    landing = threading.Timer(0.2, answers[1].wake, (0,))
    landing.start()
    started = time.monotonic()
    naps.nap()
    landing.join()
    assert time.monotonic() - started < LONG_S / 2
    plain = []
    monkeypatch.setattr(_waiting.time, "sleep", plain.append)
    naps.nap(0.01)      # answers (not its own) ended the last one: a plain sleep now
    assert plain == [0.01]


def test_the_sleeps_of_a_wait_on_the_wake_word_start_at_its_first_nap_and_double_to_its_back_off(monkeypatch):
    _, _, sleeper = _word()
    naps = []
    monkeypatch.setattr(sleeper, "sleep", lambda seen, seconds: naps.append(seconds))
    monkeypatch.setattr(_waiting, "_sleeper", sleeper)
    monkeypatch.setattr(_waiting, "_first_nap_s", _waiting.LONG_FIRST_NAP_S)
    clock = _waiting.Wait("test", timeout=60.0, backoff_s=100e-6)
    for _ in range(6):
        clock.pause("a flag")           # (the first only sets the flag)
    assert naps == [30e-6, 60e-6, 100e-6, 100e-6, 100e-6]
