"""The one exception family of pgas."""
from __future__ import annotations

__all__ = ["PgasError", "PgasValueError", "PgasConfigError", "PgasTimeoutError"]


class PgasError(RuntimeError):
    """Misuse of pgas: bad arguments, use outside init/finalize, exhausted heap."""


class PgasValueError(PgasError, ValueError):
    """An argument has the wrong value, shape or dtype."""


class PgasConfigError(PgasValueError):
    """A ``PGAS_*`` environment variable has a value pgas cannot use (the message names it)."""


class PgasTimeoutError(PgasError, TimeoutError):
    """A blocking wait took longer than ``PGAS_TIMEOUT`` seconds."""
