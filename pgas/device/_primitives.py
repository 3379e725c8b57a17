"""Picks the primitive layer of the backend in use (``prim``)."""
from __future__ import annotations

from .._backend import backend_name

__all__ = ["prim"]

if backend_name() == "simulator":
    from . import _sim as prim
else:
    from . import _offline
    _offline.install()
    from . import _cuda as prim
