"""The checker's analysis: every PE's events replayed in time order with vector clocks.

Each thread (a PE's host thread, or one simulated CUDA thread of one launch) has a vector
clock. Its own component ``("p", thread)`` counts its events (program order). A call
that completes at ``quiet`` (a put's write at the target, an nbi get) is an event of
``("o", thread, target)`` instead: the thread's clock holds, for each target, how far its
``quiet`` has completed, so the operation is ordered before what follows that quiet
only. A ``fence`` lets later operations to the same target carry the earlier ones;
a ``put_signal``'s signal carries its own put, and a wait that sees a pending write is
ordered after that write alone (a ``("ps", thread, n, target)`` component each).

Synchronization moves clocks: a barrier, collective, lock or block synchronization
releases the thread's clock into a channel and acquires the channel's; a wait acquires
what the write it saw released (a plain write releases what its thread knew then; an
atomic update also passes on what earlier updates of the word released, as a release
sequence). A kernel's threads start with the launching host thread's clock, and the
host thread knows what they knew when the kernel ends; their operations not yet
complete become the host thread's to complete.

Two accesses race when they overlap, at least one writes, at least one went through
pgas (a put, get, atomic...), they are not both atomic, and neither is ordered before
the other (FastTrack's rule: the earlier one's own component against the later one's
clock). A race is reported once per pair of source lines.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from ._model import Access, updated

__all__ = ["replay", "Finding"]


@dataclass
class _Seen:
    """An access kept in the shadow memory: what it was and who made it, when."""
    comp: tuple
    val: int
    pe: int
    thread: tuple
    access: Access
    alt: tuple | None = None       # a put_signal's put: also ordered where ("ps", ...) is known


@dataclass
class Finding:
    """One problem: ``kind`` ("race", "incomplete", "collective"), its two accesses (the
    second None for an operation never completed; both None for device collectives that
    differ, whose ``calls`` say what each PE called) and the advice."""
    kind: str
    first: _Seen | None
    second: _Seen | None
    advice: str
    allocation: tuple | None = None    # (site, dtype, shape, first byte) of the array
    calls: tuple = ()                  # ((PE, call, site), (PE, call, site), call number, team)


@dataclass
class _Thread:
    key: tuple
    vc: dict
    n: int = 0
    fenced: dict = field(default_factory=dict)      # target -> counter at the last fence
    pending: list = field(default_factory=list)     # (target, counter, _Seen)
    targets: set = field(default_factory=set)
    last: _Seen | None = None                       # the last access (a put_signal's put)
    waited_for: dict = field(default_factory=dict)  # issuing thread -> the write a wait saw
    # A thread's own component appears in clocks only from its first access on: before
    # it, nothing of it can race (most kernel threads only synchronize; clocks stay small).
    active: bool = False


@dataclass
class _Retired:
    """A finished kernel thread's components, answered by its launching host thread."""
    host: tuple
    at: int          # the host thread's counter when the kernel ended
    done: int        # for an "o" component: how far the kernel thread had completed


def _join(into: dict, other: dict) -> None:
    for k, v in other.items():
        if into.get(k, 0) < v:
            into[k] = v


def _prune(clock: dict) -> None:
    """Drop the single operations' components (``("ps", thread, n, target)``) that the
    thread's completion component already covers (its quiet came after them)."""
    if len(clock) < 64:
        return
    for comp in [c for c in clock if c[0] == "ps" and clock.get(("o", c[1], c[3]), 0) >= c[2]]:
        del clock[comp]


class _Segments:
    """Shadow memory of one PE's heap: disjoint byte ranges, each with the writes and
    reads not yet known to be ordered before later accesses."""

    def __init__(self):
        self.starts: list[int] = []
        self.items: list[list] = []      # [lo, hi, writes {comp: _Seen}, reads {comp: _Seen}]

    def _split(self, at: int) -> None:
        i = bisect.bisect_right(self.starts, at) - 1
        if i >= 0:
            lo, hi, w, r = self.items[i]
            if lo < at < hi:
                self.items[i] = [lo, at, w, r]
                self.starts.insert(i + 1, at)
                self.items.insert(i + 1, [at, hi, dict(w), dict(r)])

    def cover(self, lo: int, hi: int) -> list[list]:
        """The segments that make up [lo, hi) exactly (gaps filled with empty ones)."""
        self._split(lo)
        self._split(hi)
        i = bisect.bisect_left(self.starts, lo)
        out, at = [], lo
        while at < hi:
            if i < len(self.starts) and self.starts[i] == at:
                out.append(self.items[i])
                at = self.items[i][1]
                i += 1
                continue
            end = min(hi, self.starts[i]) if i < len(self.starts) else hi
            seg = [at, end, {}, {}]
            self.starts.insert(i, at)
            self.items.insert(i, seg)
            out.append(seg)
            i += 1
            at = end
        return out

    def clear(self, lo: int, hi: int) -> None:
        for seg in self.cover(lo, hi):
            seg[2].clear()
            seg[3].clear()


class _Replay:
    def __init__(self):
        self.threads: dict[tuple, _Thread] = {}
        self.launch_clocks: dict[tuple, dict] = {}
        self.retired: dict[tuple, _Retired] = {}
        self.channels: dict[tuple, dict] = {}
        self.words: dict[tuple, list] = {}          # (owner, offset) -> [(value, knowledge, _Seen)]
        self.shadow: dict[int, _Segments] = {}
        self.allocations: dict[int, list] = {}      # owner -> [(lo, hi, site, dtype, shape, zeroed)]
        self.findings: dict[tuple, Finding] = {}
        self.collectives: dict[tuple, dict] = {}   # team -> PE -> [(call, site)] of device collectives
        self.fills: dict[int, list] = {}            # owner -> [(lo, hi, value or None, knowledge)]: wider writes
        self.launchers: dict[tuple, tuple] = {}     # (PE, launch) -> the host thread that launched it

    # Clocks ---------------------------------------------------------------------------

    def thread(self, pe: int, thread: tuple) -> _Thread:
        key = (pe, thread)
        state = self.threads.get(key)
        if state is None:
            vc = dict(self.launch_clocks.get((pe, thread[1]), {})) if thread[0] == "kernel" else {}
            state = self.threads[key] = _Thread(key, vc)
        return state

    def ordered(self, seen: _Seen, clock: dict) -> bool:
        """Is access ``seen`` ordered before an event that knows ``clock``?"""
        if clock.get(seen.comp, 0) >= seen.val:
            return True
        if seen.alt is not None and clock.get(seen.alt, 0) >= 1:
            return True
        retired = self.retired.get(seen.comp)
        if retired is None:
            return False
        if seen.comp[0] == "p" or seen.val <= retired.done:
            return clock.get(("p", retired.host), 0) >= retired.at
        return clock.get(("o", retired.host, seen.comp[2]), 0) >= retired.at

    # Events ---------------------------------------------------------------------------

    def run(self, events: list) -> None:
        for _, pe, thread, kind, data in events:
            state = self.thread(pe, thread)
            state.n += 1
            if state.active:
                state.vc[("p", state.key)] = state.n
            getattr(self, "on_" + kind)(state, pe, data)

    def on_access(self, t: _Thread, pe: int, a: Access) -> None:
        if not t.active:
            t.active = True
            t.vc[("p", t.key)] = t.n
        if a.pending >= 0:
            comp = ("o", t.key, a.pending)
            knows = dict(t.vc)
            knows[comp] = max(knows.get(comp, 0), t.fenced.get(a.pending, 0))
            t.targets.add(a.pending)
        else:
            comp, knows = ("p", t.key), t.vc
        seen = _Seen(comp, t.n, pe, t.key[1], a)
        if a.carries and t.last is not None:          # put_signal: the signal carries its put
            t.last.alt = ("ps", t.key, t.last.val, a.pending)
            knows = dict(knows) if knows is t.vc else knows
            knows[t.last.alt] = 1
        self.check(seen, knows)
        if a.write and a.hi - a.lo <= 8:
            self.written(seen, knows)
        elif a.write:
            self.filled(seen, knows)
        if a.pending >= 0:
            t.pending.append((a.pending, t.n, seen))
        t.last = seen

    def check(self, new: _Seen, knows: dict) -> None:
        a = new.access
        segments = self.shadow.setdefault(a.owner, _Segments())
        for seg in segments.cover(a.lo, a.hi):
            writes, reads = seg[2], seg[3]
            against = list(writes.values()) + (list(reads.values()) if a.write else [])
            for old in against:
                o = old.access
                if (o.atomic and a.atomic) or not (o.rma or a.rma) or self.ordered(old, knows):
                    continue
                self.report(old, new, knows)
            if a.write:
                seg[2] = {c: s for c, s in writes.items() if not self.ordered(s, knows)}
                seg[3] = {c: s for c, s in reads.items() if not self.ordered(s, knows)}
                seg[2][new.comp] = new
            else:
                reads[new.comp] = new

    def written(self, seen: _Seen, knows: dict) -> None:
        """A write of one word: what a wait that sees its value acquires."""
        a = seen.access
        history = self.words.setdefault((a.owner, a.lo), [])
        previous = history[-1] if history else None
        value = a.value
        if a.update:
            before = previous[0] if previous else self.initial(a.owner, a.lo)
            value = updated(a.update[0], before, a.update[1])
        released = _released(seen, knows)
        if a.atomic and previous is not None:         # a release sequence
            _join(released, previous[1])
        history.append((value, released, seen))
        if len(history) > 64:
            del history[:-64]

    def filled(self, seen: _Seen, knows: dict) -> None:
        """A write of several words (a put, ``a[:] = 0``): the words' histories start again
        from it (its value where one value was written to all)."""
        a = seen.access
        released = _released(seen, knows)
        fills = self.fills.setdefault(a.owner, [])
        fills.append((a.lo, a.hi, a.value, released))
        if len(fills) > 256:
            del fills[:-256]
        for key in [k for k in self.words if k[0] == a.owner and a.lo <= k[1] < a.hi]:
            self.words[key] = [(a.value, released, seen)]

    def fill_of(self, owner: int, offset: int):
        """The latest wide write over ``offset`` (value, knowledge), or None."""
        for lo, hi, value, released in reversed(self.fills.get(owner, [])):
            if lo <= offset < hi:
                return value, released
        return None

    def initial(self, owner: int, offset: int):
        """The word's value before any write the history holds: a wide write's, or 0 in a
        zeroed allocation; None where not known."""
        fill = self.fill_of(owner, offset)
        if fill is not None:
            return fill[0]
        allocation = self.allocation_at(owner, offset)
        return 0 if allocation is not None and allocation[5] else None

    def on_wait(self, t: _Thread, pe: int, data) -> None:
        owner, offset, value = data
        history = self.words.get((owner, offset), [])
        match = [h for h in history if h[0] is not None and _same(h[0], value)]
        if match:
            _join(t.vc, match[-1][1])
            _prune(t.vc)
            t.waited_for[match[-1][2].comp[1]] = match[-1][2]
            return
        for entry in history:          # the value's write is not known: every write of the word
            _join(t.vc, entry[1])
            t.waited_for[entry[2].comp[1]] = entry[2]
        fill = self.fill_of(owner, offset)
        if not history and fill is not None and (fill[0] is None or _same(fill[0], value)):
            _join(t.vc, fill[1])       # a word a wide write (a put of several flags) set

    def on_collective(self, t: _Thread, pe: int, data) -> None:
        team, call, site = data
        self.collectives.setdefault(team, {}).setdefault(pe, []).append((call, site))

    def compare_collectives(self) -> None:
        """Every member of a team must make the same device collective calls, in the same
        order: the first call where a PE differs from the lowest-numbered member is reported."""
        for team, by_pe in self.collectives.items():
            pes = sorted(by_pe)
            reference = by_pe[pes[0]]
            for pe in pes[1:]:
                calls = by_pe[pe]
                for index in range(max(len(reference), len(calls))):
                    mine = reference[index] if index < len(reference) else ("(no call)", "-")
                    theirs = calls[index] if index < len(calls) else ("(no call)", "-")
                    if mine[0] != theirs[0]:
                        key = ("collective", team, mine[1], theirs[1])
                        if key not in self.findings:
                            self.findings[key] = Finding("collective", None, None, (
                                "every member of a team must make the same device collective calls, with the same "
                                "sizes, dtypes, root and op, in the same order"),
                                calls=((pes[0], *mine), (pe, *theirs), index + 1, team[1]))
                        break

    def on_quiet(self, t: _Thread, pe: int, pes) -> None:
        done = t.targets if pes is None else set(pes) & t.targets
        for target in done:
            t.vc[("o", t.key, target)] = t.n
            t.fenced[target] = t.n
        t.pending = [p for p in t.pending if p[0] not in done]
        launcher = self.threads.get(self.launchers.get((pe, t.key[1][1]))) if t.key[1][0] == "kernel" else None
        if launcher is not None:       # a quiet is the PE's: it completes what earlier kernels left
            known = t.vc.get(("p", launcher.key), 0)
            for target in launcher.targets if pes is None else set(pes) & launcher.targets:
                comp = ("o", launcher.key, target)
                t.vc[comp] = max(t.vc.get(comp, 0), known)
            launcher.pending = [p for p in launcher.pending if p[1] > known or (pes is not None and p[0] not in pes)]

    def on_fence(self, t: _Thread, pe: int, _) -> None:
        for target in t.targets:
            t.fenced[target] = t.n

    def on_release(self, t: _Thread, pe: int, channel) -> None:
        _join(self.channels.setdefault(channel, {}), t.vc)

    def on_acquire(self, t: _Thread, pe: int, channel) -> None:
        _join(t.vc, self.channels.get(channel, {}))
        _prune(t.vc)

    def on_launch(self, t: _Thread, pe: int, launch: int) -> None:
        t.active = True                # its clock component orders what the kernel's threads knew
        t.vc[("p", t.key)] = t.n
        self.launch_clocks[(pe, launch)] = dict(t.vc)
        self.launchers[(pe, launch)] = t.key

    def on_kernel_end(self, t: _Thread, pe: int, launch: int) -> None:
        kernel = [k for k in self.threads if k[0] == pe and k[1][0] == "kernel" and k[1][1] == launch]
        for key in kernel:
            k = self.threads.pop(key)
            _join(t.vc, k.vc)
            if not k.active:
                continue
            t.active = True          # it answers for the kernel thread's accesses from now on
            t.vc[("p", t.key)] = t.n
            self.retired[("p", key)] = _Retired(t.key, t.n, 0)
            for target in k.targets:
                self.retired[("o", key, target)] = _Retired(t.key, t.n, k.vc.get(("o", key, target), 0))
                t.targets.add(target)
            t.pending.extend((target, t.n, seen) for target, _, seen in k.pending)
        for comp in [c for c in t.vc if c[0] in ("p", "o") and c[1][0] == pe and c[1][1][0] == "kernel"
                     and c[1][1][1] == launch]:
            del t.vc[comp]
        self.launch_clocks.pop((pe, launch), None)
        self.launchers.pop((pe, launch), None)

    def on_allocate(self, t: _Thread, pe: int, data) -> None:
        lo, hi, site, dtype, shape, zeroed = data
        self.allocations.setdefault(pe, []).append(data)
        self.shadow.setdefault(pe, _Segments()).clear(lo, hi)
        for key in [k for k in self.words if k[0] == pe and lo <= k[1] < hi]:
            del self.words[key]

    def on_end(self, t: _Thread, pe: int, _) -> None:
        for state in [s for s in self.threads.values() if s.key[0] == pe]:
            for target, _, seen in sorted(state.pending, key=lambda p: not p[2].access.write):
                key = ("incomplete", seen.access.site)
                if key not in self.findings:
                    self.findings[key] = Finding("incomplete", seen, None, (
                        f"no quiet (or barrier) completes it before finalize: PE {target} may never see it "
                        f"(add pgas.quiet() or dev.quiet() after it)"), self.allocation_of(seen.access))
            state.pending = []

    # Reports --------------------------------------------------------------------------

    def allocation_at(self, owner: int, offset: int) -> tuple | None:
        """The latest allocation (lo, hi, site, dtype, shape, zeroed) of PE ``owner`` holding ``offset``."""
        for allocation in reversed(self.allocations.get(owner, [])):
            if allocation[0] <= offset < allocation[1]:
                return allocation
        return None

    def allocation_of(self, a: Access):
        """(site, dtype, shape, first byte) of the array ``a`` touched, for reports."""
        found = self.allocation_at(a.owner, a.lo)
        return None if found is None else (found[2], found[3], found[4], found[0])

    def report(self, old: _Seen, new: _Seen, knows: dict) -> None:
        key = ("race",) + tuple(sorted((old.access.site, new.access.site)))
        if key in self.findings:
            return
        self.findings[key] = Finding("race", old, new, self.advice(old, new, knows), self.allocation_of(new.access))

    def advice(self, old: _Seen, new: _Seen, knows: dict) -> str:
        issuer = old.comp[1]
        o, a = old.access, new.access
        later = self.threads.get((new.pe, new.thread))
        if issuer == (new.pe, new.thread):         # one thread, its own operations
            if new.comp[0] == "o":
                return (f"the {_call_name(a.op)} at {a.site} may be delivered before the {_call_name(o.op)} at {o.site} "
                        f"to the same memory: fence() or quiet() between them")
            return (f"no quiet between the {_call_name(o.op)} at {o.site} and the {_access_name(a)} at {a.site} (until quiet, "
                    f"the operation may still read or write these bytes)")
        if old.comp[0] == "o" and knows.get(("p", issuer), 0) >= old.val:
            saw = later.waited_for.get(issuer) if later is not None else None
            if saw is not None and saw.access.site != o.site:
                via = f"the {_call_name(saw.access.op)} at {saw.access.site} that PE {new.pe} waited for"
            else:
                via = f"what PE {new.pe} synchronized on"
            return (f"no quiet between the {_call_name(o.op)} at {o.site} and {via}: the {_call_name(o.op)} may not be "
                    f"delivered yet (quiet() first; or fence() before a flag; or put_signal)")
        first, second = sorted((old.pe, new.pe))
        return (f"nothing orders them: PE {first} and PE {second} do not synchronize between the two "
                f"(a barrier, a collective, or a signal/flag wait after quiet)")


def _released(seen: _Seen, knows: dict) -> dict:
    """What a write releases to a wait that sees its value: what its thread knew, and for
    an operation completed at quiet the write itself (its own ``("ps", ...)`` component,
    which a put_signal's put shares with its signal)."""
    released = dict(knows)
    if seen.comp[0] == "o":
        if seen.alt is None:
            seen.alt = ("ps", seen.comp[1], seen.val, seen.comp[2])
        released[seen.alt] = 1
    return released


def _call_name(op: str) -> str:
    """``pgas.device.put`` -> ``put``."""
    return op.rsplit(".", 1)[-1]


def _access_name(a: Access) -> str:
    if a.rma:
        return _call_name(a.op)
    return "store" if a.write else "load"


def _same(a, b) -> bool:
    try:
        return a == b
    except Exception:
        return False


def replay(events: list) -> list[Finding]:
    """The findings of a whole run's events (every PE's, any order: sorted here)."""
    events = sorted(events, key=lambda e: e[0])
    r = _Replay()
    r.run(events)
    r.compare_collectives()
    return list(r.findings.values())
