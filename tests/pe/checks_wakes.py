"""Wake words (simulator backend): every kind of write into a PE's heap, by load/store or
through any remote engine, wakes that PE's wake word while its flag says a thread may
sleep long on it (pgas/core/native/_wake_words.py): the count moves. A write path that did
not wake would leave a waiter asleep until its sleep times out (correct, but slow): these
checks find such a path. One-sided writes from another node (over UCX: the ucx engine,
and the native NIC that executes the ibgda and proxy paths' WQEs) reach the heap without
its CPU; their writer then reads the flag, when one of its threads starts to wait, and
sends the message that wakes the sleepers (pgas/wire/_rma.py)."""
import time

import numpy as np
from numba import cuda

import pgas
import pgas.device as dev
from _util import ring_neighbours, simulator_only, world

WHY = "wake words are the simulator's (on a GPU device waits spin)"


@cuda.jit
def device_writes(kind, dest, src, word, pe):
    if kind == 0:
        dev.p(word, np.int64(7), pe)
    elif kind == 1:
        dev.put(dest, src, pe)
    elif kind == 2:
        dev.atomic_add(word, np.int64(1), pe)
    elif kind == 3:
        dev.atomic_fetch_add(word, np.int64(1), pe)
    elif kind == 4:
        dev.signal_op(word, np.int64(3), dev.SIGNAL_SET, pe)
    else:
        dev.put_signal(dest, src, word, np.int64(5), dev.SIGNAL_ADD, pe)
    dev.quiet()


def _armed_count() -> int:
    """This PE's wake word's count, its flag set (as a thread about to sleep long sets it)."""
    from pgas.core import _waiting
    count = _waiting._sleeper.count()
    _waiting._sleeper.arm(long=True)
    return count


def _each_write_counts_at_the_right_neighbour(writes) -> None:
    """Each of ``writes`` (name, function(right neighbour)) writes into the right
    neighbour's heap, whose wake word's flag is set; that word then counts more than
    before (within a second). MPI's barrier between them (a pgas barrier writes into heaps
    itself)."""
    from pgas.core import _waiting
    me, n, right, left = ring_neighbours()
    for name, write in writes:
        before = _armed_count()
        world().Barrier()
        write(right)
        pgas.quiet()
        for hook in _waiting.before_waiting:    # as a thread of this PE starting to wait: the looks
            hook()                              # at the peers' wake words after one-sided writes
        world().Barrier()
        # (a one-sided write's wake message may still be on its way: a second at most)
        deadline = time.monotonic() + 1.0
        while (after := _waiting._sleeper.count()) == before and time.monotonic() < deadline:
            time.sleep(1e-3)
        assert after != before, f"{name} from PE {left} into PE {me}'s heap was not counted at its wake word"


@simulator_only(WHY)
def check_host_writes_into_a_heap_count_at_its_wake_word():
    small, large = pgas.zeros(4, np.int64), pgas.zeros(1 << 17, np.int64)
    word = pgas.zeros(1, np.int64)
    src_small, src_large = np.arange(4, dtype=np.int64), np.arange(1 << 17, dtype=np.int64)
    _each_write_counts_at_the_right_neighbour([
        ("put (small)", lambda pe: pgas.put(small, src_small, pe)),
        ("put (small, again: the kept view)", lambda pe: pgas.put(small, src_small, pe)),
        ("put (1 MiB)", lambda pe: pgas.put(large, src_large, pe)),
        ("put_nbi", lambda pe: pgas.put_nbi(small, src_small, pe)),
        ("iput", lambda pe: pgas.iput(large, src_large, 2, 2, 1000, pe)),
        ("atomic_add", lambda pe: pgas.atomic_add(word, 1, pe)),
        ("atomic_fetch_add", lambda pe: pgas.atomic_fetch_add(word, 1, pe)),
        ("atomic_compare_swap", lambda pe: pgas.atomic_compare_swap(word, 0, 0, pe)),
        ("signal_op", lambda pe: pgas.signal_op(word, 9, pgas.SIGNAL_SET, pe)),
        ("put_signal", lambda pe: pgas.put_signal(small, src_small, word, 1, pgas.SIGNAL_ADD, pe)),
    ])
    pgas.barrier_all()
    for arr in (small, large, word):
        pgas.free(arr)


@simulator_only(WHY)
def check_device_writes_into_a_heap_count_at_their_wake_word():
    dest, word = pgas.zeros(8, np.int64), pgas.zeros(1, np.int64)
    src = np.arange(8, dtype=np.int64)
    names = ["p", "put", "atomic_add", "atomic_fetch_add", "signal_op", "put_signal"]

    def launch(kind):
        return lambda pe: device_writes[1, 1](kind, dest, src, word, pe)
    _each_write_counts_at_the_right_neighbour([(f"device {name}", launch(kind)) for kind, name in enumerate(names)])
    pgas.barrier_all()
    pgas.free(dest)
    pgas.free(word)
