"""Machine code that llvmlite compiled, kept on disk for the processes after this one.

pgas compiles its LLVM IR in every process that uses it: the native pieces at start-up
(``_llvm.compile_ir``: 20-60 ms a process) and the all-reduce's folds on first use
(``host/collectives/_fold_code``: 40-60 ms for each dtype and operation, at -O3 with
the loops vectorized). An MCJIT engine asks its object cache for a module's machine code
before compiling it, and hands over what it compiled; here both go to a file named by a
digest of everything the code depends on: the IR, the LLVM version, the target (triple,
CPU and its features) and the optimization settings. A file is
written whole (renamed into place) and starts with a digest of its bytes: a torn or
altered file is never loaded (the module is compiled anew and the file rewritten). Files
of IR since changed stay (a few kilobytes each), as numba's do.

The folder: ``$NUMBA_CACHE_DIR/pgas_llvm`` where that is set (numba's own setting), else
``__pycache__`` beside this module (where numba keeps pgas's compiled functions). Where
it cannot be written, nothing is kept: each process compiles, as before.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path

__all__ = ["ObjectCache", "counts", "where_kept"]

# in this process: modules whose machine code came from a file, and files written (for tests)
counts = {"loaded": 0, "stored": 0}


def _folder() -> Path:
    chosen = os.environ.get("NUMBA_CACHE_DIR")
    return Path(chosen) / "pgas_llvm" if chosen else Path(__file__).resolve().parent / "__pycache__"


def where_kept() -> str:
    """Where the machine code is kept, and how many modules' (for pgas-info)."""
    folder = _folder()
    files = len(list(folder.glob("pgas_llvm.*.o"))) if folder.is_dir() else 0
    return f"{folder} ({files} module{'s' if files != 1 else ''})"


def _digest(text: str, settings) -> str:
    """The key of IR ``text`` compiled with ``settings`` (the target machine's triple, CPU,
    features, optimization level...) by this LLVM."""
    import llvmlite.binding as llvm

    hashed = hashlib.sha256(text.encode())
    for part in (llvm.llvm_version_info, *settings):
        hashed.update(b"\0" + str(part).encode())
    return hashed.hexdigest()[:32]


class ObjectCache:
    """The object cache of one MCJIT ``engine``: ``expect(module, text, *settings)`` before
    the engine compiles ``module`` (parsed from IR ``text``, to be compiled with
    ``settings``: the target machine's triple, CPU, ...) at ``finalize_object``; True when
    its machine code is on disk (the engine will load it, and the caller may skip its own
    optimization passes)."""

    def __init__(self, engine):
        self._expected: set[str] = set()        # the keys of the modules to keep
        self._found: dict[str, bytes] = {}      # key -> machine code read from disk
        engine.set_object_cache(self._compiled, self._kept)

    def expect(self, module, text: str, *settings) -> bool:
        key = _digest(text, settings)
        module.name = key           # (how the engine's callbacks tell its modules apart)
        self._expected.add(key)
        code = _read(_path(key))
        if code is not None:
            self._found[key] = code
        return code is not None

    def _kept(self, module):
        code = self._found.pop(module.name, None)
        if code is not None:
            counts["loaded"] += 1
        return code

    def _compiled(self, module, code: bytes) -> None:
        if module.name in self._expected and _write(_path(module.name), code):
            counts["stored"] += 1


def _path(key: str) -> Path:
    return _folder() / f"pgas_llvm.{key}.o"


def _read(path: Path) -> bytes | None:
    """The machine code in ``path``, or None: no such file, or not what was written."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    check, code = data[:32], data[32:]
    return code if code and hashlib.sha256(code).digest() == check else None


def _write(path: Path, code: bytes) -> bool:
    """Keep ``code`` in ``path``, renamed into place (a reader sees all of it or none);
    False where the folder cannot be written."""
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary.write_bytes(hashlib.sha256(code).digest() + code)
        os.replace(temporary, path)
    except OSError:
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)
        return False
    return True
