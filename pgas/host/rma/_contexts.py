"""Communication contexts (OpenSHMEM 1.4+): independent streams of RMA that complete apart.

``ctx = pgas.ctx_create()`` gives a context whose ``put_nbi``/``get_nbi`` are completed by
``ctx.quiet()`` alone: a thread that quiets its own context waits for its own requests,
not for those of the other threads of the PE (``pgas.quiet`` waits for everything,
contexts' requests included). How a context keeps its requests apart, per path:

- load/store (PEs of this node, simulator): every copy is complete on return, so there is
  nothing to keep;
- through the NIC (PEs on other nodes, every remote engine): the context owns a lane of
  the engine, queue pairs of its own to each PE (``ibgda``: device queues; ``proxy``: QPs
  that the proxy thread posts into; ``ucx``: endpoints, connections of their own to the
  peers' workers), made at its first request and handed to the next context when it is
  destroyed; it keeps the tickets of its requests and ``ctx.quiet`` waits for exactly
  those (``Transports.complete``); a refused request is raised by the ``quiet`` of the
  context that posted it, not by another thread's. A context keeps at most ``_MAX_KEPT``
  requests open: past that, posting completes its oldest half first (the rings of
  request slots are the engine's, shared, and a kept slot is not reusable until it is
  waited for);
- cuda backend: the context owns a CUDA stream; its copies are queued there and
  ``ctx.quiet`` waits for that stream only.

``pgas.CTX_DEFAULT`` is the default context: its methods are the plain calls
(``CTX_DEFAULT.quiet()`` is ``pgas.quiet()``). ``pgas.CTX_INVALID`` (OpenSHMEM's
``SHMEM_CTX_INVALID``) is no context: what ``team_create_ctx`` gives for TEAM_INVALID
(``None``, as OpenSHMEM 1.5 says), and a value a context variable may hold; every call
on it raises PgasValueError naming it, but ``destroy`` (a no-op, as in OpenSHMEM 1.5). A context made by ``team_create_ctx``
takes PE numbers relative to its team, as OpenSHMEM's do. Atomics on a context are the
host atomics (complete on return, so no context has any left to complete). ``fence`` on
a context is its ``quiet`` (stronger than ordering, as OpenSHMEM allows).
"""
from __future__ import annotations

import numbers
import threading

import numpy as np

from ...core._checks import check_pe
from ...core._constants import TEAM_WORLD
from ...core._errors import PgasValueError
from ...runtime._state import Runtime, runtime
from ...runtime._team_table import team_of
from . import _atomics, _rma

__all__ = ["Context", "ctx_create", "ctx_destroy", "team_create_ctx", "CTX_DEFAULT", "CTX_INVALID",
           "CTX_SERIALIZED", "CTX_PRIVATE", "CTX_NOSTORE"]

# OpenSHMEM's option bits: promises of the caller that an implementation may use. pgas
# keeps every context thread-safe, so it accepts them without changing anything.
CTX_SERIALIZED, CTX_PRIVATE, CTX_NOSTORE = 1, 2, 4
_OPTIONS = CTX_SERIALIZED | CTX_PRIVATE | CTX_NOSTORE
_MAX_KEPT = 32


class Context:
    """A communication context (see the module): ``put``, ``get``, ``put_nbi``, ``get_nbi``,
    every host ``atomic_*``, ``fence``, ``quiet``, ``destroy``, with the arguments of the
    ``pgas.*`` calls of the same names (PEs relative to the context's team)."""

    def __init__(self, options: int, team, rt: Runtime | None, default: bool = False, invalid: bool = False):
        self.options = options
        self._team = team
        self._rt = rt                  # the runtime it was made in (None: CTX_DEFAULT, CTX_INVALID)
        self._default = default
        self._invalid = invalid        # CTX_INVALID: every call raises
        self._tickets: list = []       # (engine, ticket) of its requests through the NIC
        self._lanes: dict = {}         # remote engine -> its lane (queue pairs) for this context
        self._lock = threading.Lock()
        self._stream = None            # cuda: its own stream, made on first use
        self._live = True

    def __repr__(self) -> str:
        what = ("CTX_DEFAULT" if self._default else "CTX_INVALID" if self._invalid
                else f"options={self.options}, team={self._team}")
        return f"<pgas.Context {what}{'' if self._live else ' (destroyed)'}>"

    def get_team(self):
        """The team of this context (TEAM_WORLD unless made by ``team_create_ctx``)."""
        if self._invalid:
            raise _invalid_use("pgas.Context.get_team")
        return self._team

    # Helpers ----------------------------------------------------------------------

    def _runtime(self, fn: str) -> Runtime:
        if self._invalid:
            raise _invalid_use(fn)
        rt = runtime(fn)
        if not self._live:
            raise PgasValueError(f"{fn}: ctx was destroyed (pgas.ctx_destroy); create another with pgas.ctx_create")
        if self._rt is not None and self._rt is not rt:
            raise PgasValueError(f"{fn}: ctx was created before the last pgas.finalize; contexts end with it")
        return rt

    def _world_pe(self, rt: Runtime, pe, fn: str) -> int:
        """World PE of ``pe``, a rank in the context's team."""
        if self._team == TEAM_WORLD:
            return pe
        team = team_of(rt, self._team, fn, "ctx's team")
        return team.pes[check_pe(fn, pe, team.size)]

    def _stream_of(self, rt: Runtime):
        if not rt.on_gpu or self._default:
            return None
        if self._stream is None:
            from numba import cuda
            self._stream = cuda.stream()
        return self._stream

    def _lane(self, rt: Runtime) -> int:
        """This context's lane of the remote engine in use (0, the PE's own, without one)."""
        engine = rt.transports.engine
        if engine is None or rt.on_gpu:
            return 0
        with self._lock:
            if engine not in self._lanes:
                self._lanes[engine] = rt.transports.new_lane()
            return self._lanes[engine]

    def _keep_bounded(self, rt: Runtime, fn: str) -> None:
        """Complete the oldest half of the kept requests once there are ``_MAX_KEPT``."""
        with self._lock:
            if len(self._tickets) < _MAX_KEPT:
                return
            oldest = self._tickets[:_MAX_KEPT // 2]
            del self._tickets[:_MAX_KEPT // 2]
        rt.transports.complete(fn, oldest)

    def _copy(self, name: str, dest, src, pe, nbi: bool) -> None:
        fn = f"pgas.Context.{name}"
        rt = self._runtime(fn)
        pe = self._world_pe(rt, pe, fn)
        if self._default or not nbi:       # complete on return: nothing for this context to keep
            getattr(_rma, name)(dest, src, pe)
            return
        tickets: list = []
        (_rma._put if name == "put_nbi" else _rma._get)(fn, dest, src, pe, self._stream_of(rt), True, tickets,
                                                        self._lane(rt))
        if tickets:
            with self._lock:
                self._tickets += tickets
            self._keep_bounded(rt, fn)

    # RMA --------------------------------------------------------------------------

    def put(self, dest, src, pe: int) -> None:
        """``pgas.put`` on this context (complete on return)."""
        self._copy("put", dest, src, pe, False)

    def get(self, dest, src, pe: int) -> None:
        """``pgas.get`` on this context (complete on return)."""
        self._copy("get", dest, src, pe, False)

    def put_nbi(self, dest, src, pe: int) -> None:
        """``pgas.put_nbi`` on this context: complete at this context's ``quiet``."""
        self._copy("put_nbi", dest, src, pe, True)

    def get_nbi(self, dest, src, pe: int) -> None:
        """``pgas.get_nbi`` on this context: ``dest`` is filled at this context's ``quiet``."""
        self._copy("get_nbi", dest, src, pe, True)

    def quiet(self) -> None:
        """Complete every operation issued on this context (only those: see the module)."""
        self._quiet("pgas.Context.quiet")

    def fence(self) -> None:
        """Order this context's puts to each PE: here its ``quiet`` (which is stronger)."""
        self._quiet("pgas.Context.fence")

    def _quiet(self, fn: str) -> None:
        rt = self._runtime(fn)
        if self._default:
            _rma.quiet()
        elif rt.on_gpu:
            from .. import _gpu_ops
            _gpu_ops.quiet(self._stream_of(rt), fn)
        else:
            with self._lock:
                kept, self._tickets = self._tickets, []
            rt.transports.complete(fn, kept)

    def destroy(self) -> None:
        """``pgas.ctx_destroy(self)``."""
        ctx_destroy(self)


def _atomic_method(name: str):
    host_atomic = getattr(_atomics, name)

    def method(self, dest, *operands, pe=None):
        fn = f"pgas.Context.{name}"
        rt = self._runtime(fn)
        if pe is None and operands:
            *operands, pe = operands
        return host_atomic(dest, *operands, self._world_pe(rt, pe, fn))
    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"``pgas.{name}`` on this context (PE relative to its team; complete on return)."
    return method


for _name in _atomics.__all__:
    if not _name.endswith("_nbi"):
        setattr(Context, _name, _atomic_method(_name))
del _name

CTX_DEFAULT = Context(0, TEAM_WORLD, None, default=True)
CTX_INVALID = Context(0, None, None, invalid=True)


def _invalid_use(fn: str) -> PgasValueError:
    return PgasValueError(f"{fn}: ctx is pgas.CTX_INVALID, which is no context (what team_create_ctx gives for "
                          "team None, TEAM_INVALID); use a context from pgas.ctx_create, or from "
                          "pgas.team_create_ctx on a team of this PE, or pgas.CTX_DEFAULT")


def _check_options(fn: str, options) -> int:
    if isinstance(options, (bool, np.bool_)) or not isinstance(options, numbers.Integral) or options & ~_OPTIONS:
        raise PgasValueError(f"{fn}: options must be 0 or a combination of pgas.CTX_SERIALIZED, CTX_PRIVATE and "
                             f"CTX_NOSTORE, got {options!r}")
    return int(options)


def ctx_create(options: int = 0) -> Context:
    """A new communication context on TEAM_WORLD (OpenSHMEM ``shmem_ctx_create``).

    Parameters
    ----------
    options : int
        0 or a combination of ``CTX_SERIALIZED``, ``CTX_PRIVATE``, ``CTX_NOSTORE``:
        accepted and checked; pgas's contexts are thread-safe whatever they say.

    Returns
    -------
    Context
        Its ``put_nbi``/``get_nbi`` complete at its own ``quiet`` (see the module).
        Not collective; ends with ``ctx_destroy`` (or ``finalize``).
    """
    fn = "pgas.ctx_create"
    return Context(_check_options(fn, options), TEAM_WORLD, runtime(fn))


def team_create_ctx(team, options: int = 0) -> Context:
    """A new context on ``team`` (OpenSHMEM ``shmem_team_create_ctx``): its calls take PE
    numbers relative to ``team``. Options as for ``ctx_create``.

    For ``team`` None (TEAM_INVALID: what a split gives the PEs outside the new team) it
    returns ``CTX_INVALID``, as OpenSHMEM 1.5 has it (there ``ctx`` is set to
    ``SHMEM_CTX_INVALID`` and the call returns nonzero); calls on that raise. A handle that
    is not a team of this PE (never made here, or destroyed; undefined in OpenSHMEM)
    raises PgasValueError.
    """
    fn = "pgas.team_create_ctx"
    rt = runtime(fn)
    options = _check_options(fn, options)
    if team is None:
        return CTX_INVALID
    found = team_of(rt, team, fn)
    return Context(options, found.handle, rt)


def ctx_destroy(ctx: Context) -> None:
    """Complete ``ctx``'s operations (its ``quiet``) and end it; a later use raises
    PgasValueError. ``CTX_DEFAULT`` cannot be destroyed; destroying ``CTX_INVALID`` does
    nothing (OpenSHMEM 1.5), so a program may destroy whatever ``team_create_ctx`` gave it."""
    fn = "pgas.ctx_destroy"
    if not isinstance(ctx, Context):
        raise PgasValueError(f"{fn}: ctx must be a context from pgas.ctx_create, got {ctx!r}")
    if ctx._invalid:
        return
    if ctx._default:
        raise PgasValueError(f"{fn}: CTX_DEFAULT cannot be destroyed")
    if not ctx._live:
        raise PgasValueError(f"{fn}: ctx was already destroyed")
    ctx.quiet()
    for engine, lane in ctx._lanes.items():      # complete: the next context may take them
        engine.lanes.release(lane)
    ctx._lanes = {}
    if ctx._stream is not None:
        ctx._stream = None
    ctx._live = False
