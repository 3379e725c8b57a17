"""The checker's ordering rules (pgas/check/_replay.py), one by one, on hand-made events:
each rule's correct pattern gives no report and the pattern without it gives one."""
import pytest

from pgas.check._model import Access
from pgas.check._replay import replay

HOST = ("host", 0)
WORLD = ("team", 0)


class Run:
    """Events of a made-up run, in the order they are added (one time step each)."""

    def __init__(self):
        self.events, self.t = [], 0

    def add(self, pe, thread, kind, data=None):
        self.t += 1
        self.events.append((self.t, pe, thread, kind, data))

    def put(self, pe, target, lo=0, hi=8, site="put", thread=HOST, carries=False, value=None):
        self.add(pe, thread, "access", Access(target, lo, hi, True, False, True, target, "pgas.device.put", site,
                                              value, (), carries))

    def signal(self, pe, target, lo, site, op=("add", 1), carries=False, thread=HOST):
        self.add(pe, thread, "access", Access(target, lo, lo + 8, True, True, True, target, "pgas.device.signal_op",
                                              site, None, op, carries))

    def p(self, pe, target, lo, value, site, thread=HOST):
        self.add(pe, thread, "access", Access(target, lo, lo + 8, True, False, True, target, "pgas.device.p", site,
                                              value))

    def load(self, pe, lo=0, hi=8, site="load", thread=HOST):
        self.add(pe, thread, "access", Access(pe, lo, hi, False, False, False, -1, "load", site))

    def barrier(self, *pes, quiet=True):
        for pe in pes:
            if quiet:
                self.add(pe, HOST, "quiet")
            self.add(pe, HOST, "release", WORLD)
        for pe in pes:
            self.add(pe, HOST, "acquire", WORLD)

    def races(self):
        return sorted(tuple(sorted((f.first.access.site, f.second.access.site)))
                      for f in replay(self.events) if f.kind == "race")


def test_a_put_is_ordered_before_reads_after_a_barrier_but_not_after_a_sync():
    for quiet, expected in ((True, []), (False, [("load", "put")])):
        run = Run()
        run.put(0, 1)
        run.barrier(0, 1, quiet=quiet)     # barrier_all completes the put; sync_all does not
        run.load(1)
        assert run.races() == expected


def test_a_fence_orders_the_data_before_the_flag_for_one_target():
    for fence, expected in ((True, []), (False, [("load", "put")])):
        run = Run()
        run.put(0, 1, site="put")
        if fence:
            run.add(0, HOST, "fence")
        run.p(0, 1, 64, 1, "flag")
        run.add(1, HOST, "wait", (1, 64, 1))
        run.load(1)
        assert run.races() == expected


def test_a_wait_is_ordered_after_the_write_whose_value_it_saw_only():
    run = Run()
    run.p(0, 1, 64, 1, "early flag")
    run.add(0, HOST, "quiet")
    run.put(0, 1, site="put")
    run.add(0, HOST, "fence")
    run.p(0, 1, 64, 2, "late flag")
    run.add(1, HOST, "wait", (1, 64, 1))       # saw 1: the data's put is not before it
    run.load(1)
    assert run.races() == [("load", "put")]
    run.events[-2] = run.events[-2][:4] + ((1, 64, 2),)     # saw 2: it is
    assert run.races() == []


def test_put_signal_carries_its_own_put_only():
    run = Run()
    run.put(0, 1, 0, 8, site="other put")      # no fence: not carried by the signal
    run.put(0, 1, 16, 24, site="signalled put")
    run.signal(0, 1, 64, "signal", carries=True)
    run.add(1, HOST, "wait", (1, 64, 1))
    run.load(1, 16, 24, site="load of the signalled data")
    run.load(1, 0, 8, site="load of the other data")
    assert run.races() == [("load of the other data", "other put")]


def test_signal_adds_pass_on_what_earlier_adds_released():
    run = Run()
    for pe in range(3):      # a zeroed signal word
        run.add(pe, HOST, "allocate", (64, 72, "alloc", "<u8", (1,), True))
    run.put(0, 1, 0, 8, site="put from 0")
    run.signal(0, 1, 64, "add from 0", carries=True)
    run.put(2, 1, 8, 16, site="put from 2")
    run.signal(2, 1, 64, "add from 2", carries=True)
    run.add(1, HOST, "wait", (1, 64, 2))       # the second add: the first one's put came before it
    run.load(1, 0, 16)
    assert run.races() == []


def test_atomics_do_not_race_with_each_other_but_with_plain_stores():
    run = Run()
    run.signal(0, 1, 64, "add from 0")
    run.signal(2, 1, 64, "add from 2")
    assert run.races() == []
    run.add(1, HOST, "access", Access(1, 64, 72, True, False, False, -1, "store", "plain store"))
    assert run.races() == [("add from 0", "plain store"), ("add from 2", "plain store")]


def test_a_kernels_incomplete_operations_become_the_host_threads_to_complete():
    kernel = ("kernel", 1, (0, 0, 0), (0, 0, 0), 0)
    for host_quiets, expected in ((True, []), (False, [("load", "put")])):
        run = Run()
        run.add(0, HOST, "launch", 1)
        run.put(0, 1, thread=kernel)
        run.add(0, HOST, "kernel_end", 1)
        run.barrier(0, 1, quiet=host_quiets)
        run.load(1)
        assert run.races() == expected


def test_a_kernels_operation_nothing_completes_is_reported_at_the_end():
    kernel = ("kernel", 1, (0, 0, 0), (0, 0, 0), 0)
    run = Run()
    run.add(0, HOST, "launch", 1)
    run.put(0, 1, thread=kernel, site="put in a kernel")
    run.add(0, HOST, "kernel_end", 1)
    run.add(0, HOST, "end")
    assert [(f.kind, f.first.access.site) for f in replay(run.events)] == [("incomplete", "put in a kernel")]


def test_an_operation_nothing_completes_is_reported_at_the_end():
    run = Run()
    run.put(0, 1, site="put")
    run.add(0, HOST, "end")
    (finding,) = replay(run.events)
    assert finding.kind == "incomplete" and finding.first.access.site == "put"
    run.events.insert(1, (1.5, 0, HOST, "quiet", None))
    assert replay(run.events) == []


@pytest.mark.parametrize("second_is_pending", [False, True])
def test_one_threads_own_operations_to_one_place_need_a_fence_or_quiet(second_is_pending):
    run = Run()
    run.put(0, 1, site="first")
    if second_is_pending:
        run.put(0, 1, site="second")
    else:
        run.add(0, HOST, "access", Access(1, 0, 8, False, False, True, -1, "pgas.device.get", "second"))
    assert run.races() == [("first", "second")]
    run.events.insert(1, (1.5, 0, HOST, "quiet", None))
    assert run.races() == []


def test_a_wide_write_restarts_a_words_history():
    """A signal word reset with ``a[:] = 0`` between rounds: the next round's add counts from 0."""
    run = Run()
    for pe in (0, 1):
        run.add(pe, HOST, "allocate", (64, 80, "alloc", "<u8", (2,), True))
    for round_ in range(2):
        run.put(0, 1, 0, 8, site="put")
        run.signal(0, 1, 64, "add", carries=True)
        run.add(1, HOST, "wait", (1, 64, 1))
        run.load(1, 0, 8)
        run.barrier(0, 1)
        run.add(1, HOST, "access", Access(1, 64, 80, True, False, False, -1, "store", "reset", 0))
        run.barrier(0, 1)
    assert run.races() == []


def test_a_later_kernels_quiet_completes_what_an_earlier_kernel_left():
    first, second = ("kernel", 1, (0, 0, 0), (0, 0, 0), 0), ("kernel", 2, (0, 0, 0), (0, 0, 0), 0)
    for quiet, expected in ((True, []), (False, [("load", "put")])):
        run = Run()
        run.add(0, HOST, "launch", 1)
        run.put(0, 1, thread=first)
        run.add(0, HOST, "kernel_end", 1)
        run.add(0, HOST, "launch", 2)
        if quiet:
            run.add(0, second, "quiet")
        run.add(0, second, "release", WORLD)
        run.add(1, HOST, "acquire", WORLD)
        run.load(1)
        assert run.races() == expected


def test_a_wait_on_a_flag_that_a_wide_put_set_is_ordered_after_that_put():
    run = Run()
    run.put(0, 1, 64, 80, site="put of two flags")
    run.add(1, HOST, "wait", (1, 64, 1))
    run.load(1, 64, 80, site="load of the flags")
    assert run.races() == []
