"""Wake words: a thread waiting for a word of its PE's heap sleeps until someone writes the heap.

Each PE's heap (simulator backend) holds a wake word at the same offset: a 32-bit count,
then a flag saying that a thread may be asleep on the count. A thread about to sleep
(``core._waiting.Wait``) reads the count, sets the flag (``arm``), checks its condition
once more, and only then sleeps on the word (``FUTEX_WAIT`` on the count it read) for no
longer than it would have slept anyway. Whoever writes another PE's heap (a store, copy or
atomic between mappings; the remote target that applies a peer's request) then looks at
that flag (``wake``): if it is set, it clears it, bumps the count and wakes the sleepers
(``FUTEX_WAKE``); if not, a load and a fence are all a write costs (before 2026-11-28 every
write bumped the count, an atomic on a shared line, and a put on one node paid for it).

No write is missed: the writer's data comes before its look at the flag (a full fence),
the sleeper's flag before its last check; so either the writer sees the flag, or the
sleeper's last check sees the data. A host ``put`` on one node looks at the flag from
Python without the fence (``WakeWords.armed``): in the rare case where its data is still
in the CPU's store buffer as the sleeper checks, the sleeper sees it when its sleep times
out, as a write nobody counts (a user's store through ``ptr``) is seen.

A writer on another node that reaches the heap one-sided (``pgas.wire._wakes``) cannot
wake anyone itself: after its writes land (when a thread of it next starts to wait) it
reads the flag, and sends a message whose handler wakes the sleepers only where a thread
sleeps long (``ARMED_LONG``: it set the flag so before a sleep of
``core._waiting.LONG_NAP_S`` or more). Waking through the peer's
progress thread took longer than a short sleep's own end on two cores (a ping-pong of
blocking puts between two nodes: 250-440 µs a round trip with every sleeper woken, 100-260
with none), so a short sleep ends on its own and a long one is cut short.

Each PE also has a word of its own memory for the answers to its requests through the
NIC: the answers' handlers count there, and a thread waiting for an answer sleeps on it.
Two words, so that answers (to puts nobody waits for, say) do not wake a thread waiting
for a flag, nor writes into the heap one waiting for an answer.

The functions are LLVM IR compiled by llvmlite: ``pgas_wake`` is also called by the
remote target's native code (registered as a symbol for numba), ``pgas_sleep`` releases the
interpreter lock (``CFUNCTYPE``) while it sleeps.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import platform

import numpy as np

from ._llvm import built_once, compile_ir

__all__ = ["WAKE_BYTES", "ARMED", "ARMED_LONG", "WakeWords", "Sleeper", "functions", "natives", "supported"]

WAKE_BYTES = 64             # the heap bytes kept for the wake word (a cache line of its own)
ARMED, ARMED_LONG = 1, 2    # the flag's values: a thread may sleep; one may sleep long
_SYS_FUTEX = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98, "ppc64le": 221}.get(platform.machine().lower())
# (elsewhere the code is built with an invalid number, which fails harmlessly, and unused:
# ``supported`` is False, so nobody sleeps on a wake word and no wake makes a system call)
_FUTEX_WAIT, _FUTEX_WAKE = 0, 1         # not FUTEX_PRIVATE: the heap is shared between processes

_IR = """
declare i64 @pgas_futex_syscall(i64, ...)

define void @pgas_wake(i32* %word) {
entry:
  fence seq_cst
  %at = getelementptr i32, i32* %word, i64 1
  %armed = load atomic i32, i32* %at monotonic, align 4
  %any = icmp ne i32 %armed, 0
  br i1 %any, label %wake, label %done
wake:
  store atomic i32 0, i32* %at monotonic, align 4
  %count = atomicrmw add i32* %word, i32 1 seq_cst
  %woken = call i64 (i64, ...) @pgas_futex_syscall(i64 FUTEX_SYS, i32* %word, i64 FUTEX_WAKE_OP, i64 2147483647)
  br label %done
done:
  ret void
}

define void @pgas_arm(i32* %word, i32 %how) {
entry:
  %at = getelementptr i32, i32* %word, i64 1
  %before = atomicrmw max i32* %at, i32 %how seq_cst
  ret void
}

define i64 @pgas_sleep(i32* %word, i32 %seen, i64 %ns) {
entry:
  %timeout = alloca [2 x i64], align 8
  %seconds = udiv i64 %ns, 1000000000
  %rest = urem i64 %ns, 1000000000
  %s = getelementptr [2 x i64], [2 x i64]* %timeout, i64 0, i64 0
  store i64 %seconds, i64* %s
  %n = getelementptr [2 x i64], [2 x i64]* %timeout, i64 0, i64 1
  store i64 %rest, i64* %n
  %expected = zext i32 %seen to i64
  %r = call i64 (i64, ...) @pgas_futex_syscall(i64 FUTEX_SYS, i32* %word, i64 FUTEX_WAIT_OP, i64 %expected,
                                               [2 x i64]* %timeout)
  ret i64 %r
}

define i32 @pgas_wake_count(i32* %word) {
entry:
  %v = load atomic i32, i32* %word acquire, align 4
  ret i32 %v
}
"""


def supported() -> bool:
    """True where pgas knows the futex system call's number (else waits only sleep)."""
    return _SYS_FUTEX is not None


class _Compiled:
    def __init__(self):
        import llvmlite.binding as llvm
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        llvm.add_symbol("pgas_futex_syscall", ctypes.cast(libc.syscall, ctypes.c_void_p).value)
        text = (_IR.replace("FUTEX_SYS", str(_SYS_FUTEX or -1)).replace("FUTEX_WAKE_OP", str(_FUTEX_WAKE))
                .replace("FUTEX_WAIT_OP", str(_FUTEX_WAIT)))
        self._engine = compile_ir(text)     # keeps the code alive
        address = self._engine.get_function_address
        self.wake_address = address("pgas_wake")
        # a write's count and wake: the interpreter lock kept (a few instructions, and a
        # system call only when someone sleeps; see _cpu_atomics on why)
        self.wake = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)(self.wake_address)
        self.count = ctypes.PYFUNCTYPE(ctypes.c_uint32, ctypes.c_void_p)(address("pgas_wake_count"))
        self.arm = ctypes.PYFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int32)(address("pgas_arm"))
        # a sleep lets the interpreter lock go (the simulated threads run meanwhile)
        self.sleep = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int64)(
            address("pgas_sleep"))
        llvm.add_symbol("pgas_wake", self.wake_address)     # for native code (``_native.wake``)


functions = built_once(_Compiled)


def natives() -> dict:
    """``wake`` as numba code calls it (``pgas.wire._native.wake(address)``), once ``functions()``
    has registered it."""
    from numba import types
    return {"wake": types.ExternalFunction("pgas_wake", types.void(types.int64))}


class WakeWords:
    """The wake words of the PEs whose heaps are mapped here: ``wake(pe)`` after writing PE
    ``pe``'s heap (``addresses[pe]``: its word here). ``bases``: each PE's heap address here
    (None where not mapped), ``offset``: the wake word's heap offset. ``armed[pe]``: PE
    ``pe``'s word as 32-bit integers (None where not mapped): ``armed[pe][1]`` is its flag,
    for a caller that looks before it calls ``wake`` (see the module's text). ``answers``:
    the address of this PE's word for answers (in memory this object keeps)."""

    def __init__(self, bases: list, offset: int):
        self.addresses = [None if base is None else base + offset for base in bases]
        self.armed = [None if address is None else
                      memoryview((ctypes.c_uint32 * 2).from_address(address)).cast("B").cast("I")
                      for address in self.addresses]
        self._wake = functions().wake
        self._answers = np.zeros(WAKE_BYTES // 4, np.uint32)
        self.answers = self._answers.ctypes.data

    def wake(self, pe: int) -> None:
        """A write into PE ``pe``'s heap is done: wake whoever sleeps on its word."""
        address = self.addresses[pe]
        if address is not None:
            self._wake(address)

    def close(self) -> None:
        """Forget the heaps (about to be unmapped)."""
        self.addresses = [None] * len(self.addresses)
        self.armed = [None] * len(self.armed)


class Sleeper:
    """A waiting thread's side of one PE's wake word at ``address``: ``count()``, then
    ``arm()``, then a last check of its condition, then ``sleep``."""

    def __init__(self, address: int):
        compiled = functions()
        self.address = address
        self._count, self._arm, self._sleep = compiled.count, compiled.arm, compiled.sleep

    def count(self) -> int:
        """The count now (read before the flag is set and the condition checked)."""
        return self._count(self.address)

    def arm(self, long: bool = False) -> None:
        """Set the flag: from now on a write bumps the count and wakes the sleepers
        (``long``: one of them sleeps long, so that a writer on another node wakes it too)."""
        self._arm(self.address, ARMED_LONG if long else ARMED)

    def sleep(self, seen: int, seconds: float) -> None:
        """Sleep up to ``seconds``, or until the count moves from ``seen`` (at once if it has)."""
        self._sleep(self.address, seen, int(seconds * 1e9))
