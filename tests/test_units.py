"""Single-process units: the allocator, the environment parser, the compiled fold."""
import os
import random

import pytest

from pgas.core._env import invalid_settings, parse_size, setting
from pgas.core._errors import PgasConfigError, PgasError, PgasValueError
from pgas.runtime._allocator import ALIGNMENT, HeapAllocator


def test_allocator_is_aligned_deterministic_and_merges():
    def run():
        heap, rng, live, offsets = HeapAllocator(1 << 20), random.Random(7), [], []
        for _ in range(2000):
            if live and rng.random() < 0.45:
                heap.release(live.pop(rng.randrange(len(live))))
            else:
                live.append(heap.allocate(rng.randrange(0, 5000)))
                offsets.append(live[-1])
        for offset in live:
            heap.release(offset)
        return heap, offsets
    heap, offsets = run()
    assert offsets == run()[1]
    assert all(o % ALIGNMENT == 0 for o in offsets)
    assert heap.bytes_free == heap.size and heap.largest_free() == heap.size


def test_allocator_blocks_do_not_overlap():
    heap = HeapAllocator(1 << 16)
    blocks = [(heap.allocate(n), n) for n in (1, 300, 256, 1000, 0)]
    spans = sorted((o, o + max(n, 1)) for o, n in blocks)
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:]))


def test_allocator_exhaustion_message():
    heap = HeapAllocator(4096)
    heap.allocate(4000)
    with pytest.raises(PgasError, match=r"asked for 100 bytes, 0 bytes free .* raise PGAS_SYMMETRIC_SIZE"):
        heap.allocate(100)


@pytest.mark.parametrize("text,value", [("4096", 4096), ("512k", 512 << 10), ("64m", 64 << 20),
                                        ("2g", 2 << 30), ("1GiB", 1 << 30), ("3 MB", 3 << 20)])
def test_parse_size(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("name,text,expected", [
    ("PGAS_TIMEOUT", "-4", "expected a finite number of seconds > 0"),
    ("PGAS_TIMEOUT", "nan", "expected a finite number of seconds > 0"),
    ("PGAS_TIMEOUT", "inf", "expected a finite number of seconds > 0"),
    ("PGAS_SYMMETRIC_SIZE", "0", "expected a byte count > 0"),
    ("PGAS_SYMMETRIC_SIZE", "lots", "expected a byte count such as 512m or 2g"),
    ("PGAS_PES_PER_NODE", "two", "expected an integer > 0"),
])
def test_bad_settings_are_refused_naming_the_variable(monkeypatch, name, text, expected):
    monkeypatch.setenv(name, text)
    with pytest.raises(PgasConfigError, match=rf"{name}='{text}' is not valid: {expected}"):
        setting(name)
    assert invalid_settings() == {name: f"{name}='{text}' is not valid: {expected}, got '{text}'"}


def test_setting_reports_the_variable_and_value(monkeypatch):
    monkeypatch.setenv("PGAS_DEBUG", "maybe")
    with pytest.raises(PgasValueError, match=r"PGAS_DEBUG='maybe' is not valid: expected 0 or 1"):
        setting("PGAS_DEBUG")


def test_state_address_setting(monkeypatch):
    assert setting("PGAS_STATE_ADDRESS") == 0x7E00_0000_0000
    monkeypatch.setenv("PGAS_STATE_ADDRESS", "0x7d0000000000")
    assert setting("PGAS_STATE_ADDRESS") == 0x7D00_0000_0000
    for bad in ("0x1234", "0", "0x800000000000", "here"):
        monkeypatch.setenv("PGAS_STATE_ADDRESS", bad)
        with pytest.raises(PgasValueError, match=rf"PGAS_STATE_ADDRESS='{bad}' is not valid"):
            setting("PGAS_STATE_ADDRESS")


def test_compiled_fold_gives_numpys_bits_for_every_dtype_and_op():
    """The eager all-reduce's compiled combine step (``host/collectives/_fold_code.py``) against
    ``reduce_into`` (numpy's ufuncs): integers wrap, bool ops are logical, NaN propagates."""
    import numpy as np

    from pgas.core._reductions import BFLOAT16, OPS, REDUCTION_DTYPES, ops_for, reduce_into
    from pgas.host.collectives._fold_code import compiled_fold

    rng = np.random.default_rng(5)
    left = (np.dtype(np.float16), BFLOAT16, np.dtype(np.complex64), np.dtype(np.complex128), np.dtype(np.longdouble))
    for left_to_numpy in left:
        if left_to_numpy != np.float64:     # (long double is double on some machines)
            assert compiled_fold(left_to_numpy, "sum") is None, left_to_numpy
    for dtype in (d for d in REDUCTION_DTYPES if d not in left or d == np.float64):
        for op in ops_for(dtype):
            for n, count in ((1, 3), (2, 1), (4, 37), (5, 64)):
                if dtype == np.bool_:
                    buffers = [rng.integers(0, 2, count).astype(bool) for _ in range(n)]
                elif dtype.kind == "f":
                    buffers = [rng.normal(0, 100, count).astype(dtype) for _ in range(n)]
                    for buffer in buffers:
                        buffer[rng.integers(0, count, 2)] = np.nan
                else:
                    info = np.iinfo(dtype)
                    buffers = [rng.integers(info.min, info.max, count, dtype=dtype, endpoint=True) for _ in range(n)]
                expected, out = np.empty(count, dtype), np.empty(count, dtype)
                with np.errstate(all="ignore"):
                    reduce_into(expected, buffers, OPS[op])
                addresses = np.array([b.ctypes.data for b in buffers], np.uint64)
                compiled_fold(dtype, op)(out.ctypes.data, addresses.ctypes.data, n, count)
                assert out.tobytes() == expected.tobytes(), (dtype, op, n, count)


KEPT = r"""
import ctypes, sys
import numpy as np
from pgas.core.native import _llvm, _object_cache
from pgas.host.collectives._fold_code import compiled_fold

text = "define i64 @scaled(i64 %x) {\n  %y = mul i64 %x, SCALE\n  ret i64 %y\n}\n"
engine = _llvm.compile_ir(text.replace("SCALE", sys.argv[1]))
scaled = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)(engine.get_function_address("scaled"))
a, b, out = np.arange(1, 40, dtype=np.int32), np.arange(40, 1, -1, dtype=np.int32)[:39], np.empty(39, np.int32)
compiled_fold(np.dtype(np.int32), "max")(out.ctypes.data, np.array([a.ctypes.data, b.ctypes.data], np.uint64).ctypes.data,
                                         2, 39)
assert np.array_equal(out, np.maximum(a, b))
print(scaled(7), _object_cache.counts["stored"], _object_cache.counts["loaded"])
"""


def test_compiled_ir_is_kept_on_disk_and_loaded_whole_by_the_next_process(tmp_path):
    """``core/native/_object_cache``: the first process compiles the IR (``compile_ir``, a
    fold) and keeps its machine code; the next loads it and compiles nothing; a file torn
    or altered is never loaded (compiled anew, rewritten); other IR is other files; where
    the folder cannot be written the code is compiled each time and still right."""
    import subprocess
    import sys

    folder = tmp_path / "cache"

    def run(scale: str, cache_dir) -> list[int]:
        proc = subprocess.run([sys.executable, "-c", KEPT, scale], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "NUMBA_CACHE_DIR": str(cache_dir)})
        assert proc.returncode == 0, proc.stderr
        return [int(word) for word in proc.stdout.split()]

    assert run("3", folder) == [21, 2, 0]           # (the scaled IR and the fold)
    kept = sorted((folder / "pgas_llvm").iterdir())
    assert len(kept) == 2
    assert run("3", folder) == [21, 0, 2]
    for path in kept:                               # one torn, one altered
        data = path.read_bytes()
        path.write_bytes(data[:len(data) // 2] if path == kept[0] else data[:-1] + bytes([data[-1] ^ 1]))
    assert run("3", folder) == [21, 2, 0]
    assert run("3", folder) == [21, 0, 2]
    assert run("5", folder) == [35, 1, 1]           # another IR: another file
    assert len(list((folder / "pgas_llvm").iterdir())) == 3
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    assert run("3", not_a_folder) == [21, 0, 0]


OFFSETS = r"""
import numpy as np
import pgas
from pgas.core._errors import PgasValueError
from pgas.runtime._arrays import as_ndarray
from pgas.runtime._state import runtime

pgas.init()
heap = runtime("test").heap
mine = as_ndarray(pgas.zeros(1024, np.int64), "test", "sym")
start = mine.ctypes.data - heap.base
for _ in range(2):
    for i in range(600):                # more arrays than the heap keeps: it starts afresh
        view = mine[i:i + 8]
        assert heap.offset_of(view, "t", "v") == start + 8 * i
        assert heap.offset_of(view, "t", "v") == start + 8 * i      # (kept)
view = mine[16:32]
assert heap.offset_of(view, "t", "v") == start + 128
view.shape = (4, 4)                     # reshaped in place: checked again, the same start
assert heap.offset_of(view, "t", "v") == start + 128
outside = np.zeros(8, np.int64)
for _ in range(2):                      # a refusal is never kept
    for look in (heap.offset_of, lambda a, f, w: heap.word_view(0, a, f, w)):
        try:
            look(outside, "t", "outside")
            raise AssertionError("an array outside the heap must be refused")
        except PgasValueError as e:
            assert "outside" in str(e), e
# word_view: the same elements, in PE 0's mapping (the only PE here), kept per array
words = [mine[i:i + 2] for i in range(300)]     # more than it keeps
for _ in range(2):
    for i, word in enumerate(words):
        theirs = heap.word_view(0, word, "t", "w")
        assert theirs.shape == (2,) and theirs.dtype == np.int64 and heap.word_view(0, word, "t", "w") is theirs
        theirs[1] = i
        assert word[1] == i and mine[i + 1] == i
word = words[10]
assert heap.word_view(0, word, "t", "w").shape == (2,)
word.shape = (1, 2)                     # reshaped in place: a view of the new shape
assert heap.word_view(0, word, "t", "w").shape == (1, 2)
pgas.finalize()
print("ok")
"""


def test_the_heap_keeps_the_offsets_of_arrays_it_has_placed_and_each_is_right():
    """``SymmetricHeap.offset_of`` keeps the offsets of arrays it has placed (a kernel's
    arguments, call after call): every offset right, kept or not, past the number it
    keeps, for an array reshaped in place, and an array outside the heap refused each time;
    likewise the views of its words (``word_view``), each on the same elements."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", OFFSETS], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stdout + proc.stderr


def test_the_wire_cache_is_dropped_when_its_sources_change(tmp_path, monkeypatch):
    """numba checks only a cached function's own file: pgas.wire._cache drops the cache
    files of the wire's modules when any source they bake constants from changes."""
    from types import SimpleNamespace

    from pgas.wire import _cache

    def dispatcher(module):
        return SimpleNamespace(_cache=SimpleNamespace(_cache_path=str(tmp_path)),
                               py_func=SimpleNamespace(__module__=f"pgas.wire.{module}"))
    files = ["_batch.stage-87.py311.nbi", "_batch.stage-87.py311.1.nbc", "_target._land-160.py311.nbi",
             "other.f-1.py311.nbi"]
    for name in files:
        (tmp_path / name).write_text("x")
    wire = [dispatcher("_batch"), dispatcher("_target")]
    _cache.drop_if_stale(wire)      # no stamp yet: the wire's files go, another module's stay
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.f-1.py311.nbi", "pgas_wire_sources.sha256"]
    (tmp_path / files[0]).write_text("x")
    _cache.drop_if_stale(wire)      # the same sources: kept
    assert (tmp_path / files[0]).exists()
    monkeypatch.setattr(_cache, "_digest", lambda: "an edited source")
    _cache.drop_if_stale(wire)
    assert not (tmp_path / files[0]).exists()
    assert (tmp_path / "pgas_wire_sources.sha256").read_text() == "an edited source"
    # the first module to look (here the MPI exchange's) drops every wire module's files:
    # it writes the stamp the others then find
    (tmp_path / files[2]).write_text("x")
    monkeypatch.setattr(_cache, "_digest", lambda: "edited again")
    _cache.drop_if_stale([dispatcher("_mpi")])
    assert not (tmp_path / files[2]).exists()


def test_registrations_of_local_buffers_are_kept_for_the_next_call_and_never_dropped_in_use():
    """A host put from a numpy array registers its bytes once (``RecentRegistrations``): the
    next call on the same bytes finds the key; beyond KEPT the least recently used idle
    one is deregistered, never one a request in flight still uses; close drops them all."""
    import numpy as np

    from pgas.transport import _registrations
    from pgas.nic._nic import Nic

    class FakeNic:
        def __init__(self):
            self.live, self.keys = {}, iter(range(1, 10_000))

        def register(self, view, access):
            region = type("Region", (), {"lkey": next(self.keys)})()
            self.live[region.lkey] = view.size
            return region

        def deregister(self, region):
            del self.live[region.lkey]

    assert hasattr(Nic, "register") and hasattr(Nic, "deregister")     # the interface faked here
    nic = FakeNic()
    recent = _registrations.RecentRegistrations(nic)
    buffers = [np.zeros(4 + i, np.uint8) for i in range(_registrations.KEPT + 10)]
    first_key, in_use = recent.acquire(buffers[0].ctypes.data, buffers[0].nbytes)      # held: a request in flight
    again_key, again = recent.acquire(buffers[0].ctypes.data, buffers[0].nbytes)
    assert again_key == first_key and len(nic.live) == 1                                 # found, not registered again
    recent.release(again)
    for b in buffers[1:]:
        recent.release(recent.acquire(b.ctypes.data, b.nbytes)[1])
    assert len(nic.live) == _registrations.KEPT and first_key in nic.live               # trimmed, but not the held one
    recent.release(in_use)
    recent.close()
    assert not nic.live


def test_the_native_nic_declares_the_gpu_initiated_posters_signature_as_it_is_compiled():
    """``_nic_code.post_and_ring`` calls the compiled ``ibgda_post`` by symbol: its declared
    signature (``post_wqe``) must take the arguments the IR defines, in the same widths, as
    the ctypes signature does; a mismatch would pass corrupt arguments without an error."""
    import ctypes

    from llvmlite import ir

    from pgas.transport import _ibgda_code, _ibgda_ir
    from pgas.wire import _nic_code

    widths = [64 if isinstance(kind, ir.PointerType) else kind.width for kind in _ibgda_ir._POST_TYPES]
    declared = _nic_code.post_wqe.sig
    assert [kind.bitwidth for kind in declared.args] == widths
    assert declared.return_type.bitwidth == 64
    assert [8 * ctypes.sizeof(kind) for kind in _ibgda_code._ARGS] == widths


def test_cpu_atomics_keep_the_interpreter_lock():
    """Each CPU atomic, load, store and fence is one instruction or a short loop: called
    without the interpreter lock (ctypes' CFUNCTYPE), a simulated device thread waited
    10-25 us to get the lock back after each, more than the operation."""
    import ctypes

    from pgas.core.native import _cpu_atomics

    compiled = _cpu_atomics._get()
    functions = [compiled.fence, *compiled.loads.values(), *compiled.stores.values(), *compiled.rmws.values(),
                 *compiled.cas.values()]
    assert all(type(f)._flags_ & ctypes._FUNCFLAG_PYTHONAPI for f in functions)
