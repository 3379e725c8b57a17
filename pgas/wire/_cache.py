"""numba's on-disk cache of the wire's native code, dropped when the sources it was built
from change.

numba checks only the file that defines a cached function; the wire's functions also bake
in constants of other modules (the ring's and batches' layouts, operations, syndromes), so
an edit there must drop the cache too. A stamp beside the cache files holds a digest of
every such source; a process that finds another removes the cache files first.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

__all__ = ["drop_if_stale"]

_PACKAGE = Path(__file__).resolve().parents[1]
SOURCES = ("wire/_target.py", "wire/_batch.py", "wire/_worker.py", "wire/_ucp.py", "wire/_native.py",
           "wire/_mpi.py", "wire/_mpi_api.py", "wire/_nic_code.py", "nic/_queue_pair.py",
           "wire/_rma.py", "wire/_wakes.py", "transport/_ucx.py", "transport/_ibgda.py", "nic/_mlx5.py",
           "core/native/_wake_words.py")
_STAMP = "pgas_wire_sources.sha256"


def _digest() -> str:
    digest = hashlib.sha256()
    for name in SOURCES:
        digest.update((_PACKAGE / name).read_bytes())
    return digest.hexdigest()


def drop_if_stale(dispatchers) -> None:
    """Remove the cache files of every module of ``SOURCES`` from the cache folders of
    ``dispatchers`` (numba functions compiled with ``cache=True``) unless the stamp there
    says the sources are the same; then write the stamp. (Every module's, not only the
    dispatchers': the first caller's stamp is every later caller's.)"""
    digest = _digest()
    prefixes = tuple(Path(name).stem + "." for name in SOURCES)
    folders = {dispatcher._cache._cache_path for dispatcher in dispatchers}    # numba's FunctionCache
    for folder in folders:
        stamp = os.path.join(folder, _STAMP)
        try:
            with open(stamp) as kept:
                if kept.read() == digest:
                    continue
        except OSError:
            pass
        try:
            for name in os.listdir(folder):
                if name.startswith(prefixes) and name.endswith((".nbi", ".nbc")):
                    os.unlink(os.path.join(folder, name))
            os.makedirs(folder, exist_ok=True)
            temporary = f"{stamp}.{os.getpid()}"
            with open(temporary, "w") as out:
                out.write(digest)
            os.replace(temporary, stamp)
        except OSError:
            pass      # another PE removed them first, or the folder is not writable: numba compiles anew
