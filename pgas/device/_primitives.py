"""Picks the primitive layer of the backend in use (``prim``)."""
from __future__ import annotations

from ..core._backend import backend_name

__all__ = ["prim"]

if backend_name() == "simulator":
    from ..sim import _primitives as prim
else:
    from ..cuda import _offline
    _offline.install()
    from ..cuda import _primitives as prim
