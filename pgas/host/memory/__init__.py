"""Symmetric memory on the host (re-exported as ``pgas.*``): collective allocation and the
registration of memory pgas did not allocate (``_memory``), external memory made symmetric
(``_symmetric_registration``), and OpenSHMEM's accessibility queries, ``ptr`` and
``global_exit`` (``_accessible``)."""
from ._memory import *  # noqa: F401,F403
from ._memory import __all__ as _memory_all
from ._accessible import *  # noqa: F401,F403
from ._accessible import __all__ as _accessible_all
from ._symmetric_registration import *  # noqa: F401,F403
from ._symmetric_registration import __all__ as _symmetric_registration_all

__all__ = _memory_all + _accessible_all + _symmetric_registration_all
