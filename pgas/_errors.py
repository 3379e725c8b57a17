"""The one exception family of pgas."""
from __future__ import annotations

__all__ = ["PgasError", "PgasValueError", "PgasTimeoutError"]


class PgasError(RuntimeError):
    """Misuse of pgas: bad arguments, use outside init/finalize, exhausted heap."""


class PgasValueError(PgasError, ValueError):
    """An argument has the wrong value, shape or dtype."""


class PgasTimeoutError(PgasError, TimeoutError):
    """A blocking wait took longer than ``PGAS_TIMEOUT`` seconds."""
