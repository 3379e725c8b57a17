"""The wire's atomics, which the target, the native NIC and the requesters all rely on:
``apply_atomic(op, size, address, value, compare)`` (``atomicrmw``/``cmpxchg`` on the word
itself, so atomic with the loads, stores and atomics of same-node PEs on it), a
sequentially consistent ``fence``, a spin lock on a word, and the operations' numbers.
LLVM IR compiled once (``atomics()``), called from numba code by symbol."""
from __future__ import annotations

from numba import njit, types

from ..core.native._llvm import built_once, compile_ir
from . import _native, _ucp as ucp

__all__ = ["PUT", "PUT_INLINE", "GET", "AMO_ADD", "AMO_CAS", "AMO_SWAP", "AMO_AND", "AMO_OR", "AMO_XOR",
           "AMO_FETCH", "AMO_MLX5", "atomics", "apply_atomic", "fence", "spin_lock", "spin_unlock"]

# Operations, as the engines number them (pgas.transport._ibgda_ir)
PUT, PUT_INLINE, GET, AMO_ADD, AMO_CAS, AMO_SWAP, AMO_AND, AMO_OR, AMO_XOR, AMO_FETCH = range(10)
# an mlx5 masked atomic no single operation above does (the native NIC's, pgas.wire._nic_code):
# its opcode in the size word's second byte, its four operands in value, compare and the masks
AMO_MLX5 = 10

_RMW = {AMO_ADD: "add", AMO_SWAP: "xchg", AMO_AND: "and", AMO_OR: "or", AMO_XOR: "xor"}


def _atomics_ir(t: str) -> str:
    """LLVM IR of ``apply_<t>(op, address, value, compare)``: the atomic ``op`` (the engines'
    numbering) on the word of type ``t`` (i32 or i64) at ``address``; its old value,
    zero-extended. Operands come in as i64."""
    narrow = (lambda name, v: f"%{name} = trunc i64 {v} to {t}") if t == "i32" else \
        (lambda name, v: f"%{name} = add i64 {v}, 0")
    cases = " ".join(f"i64 {op}, label %op{op}" for op in (*_RMW, AMO_CAS, AMO_FETCH))
    blocks = "".join(f"""
op{op}:
  %old{op} = atomicrmw {name} {t}* %p, {t} %v seq_cst
  br label %done""" for op, name in _RMW.items())
    phis = ", ".join(f"[%old{op}, %op{op}]" for op in (*_RMW, AMO_CAS, AMO_FETCH))
    return f"""
define i64 @apply_{t}(i64 %op, i64 %a, i64 %value, i64 %compare) {{
entry:
  %p = inttoptr i64 %a to {t}*
  {narrow("v", "%value")}
  {narrow("c", "%compare")}
  switch i64 %op, label %other [{cases}]
{blocks}
op{AMO_CAS}:
  %pair = cmpxchg {t}* %p, {t} %c, {t} %v seq_cst seq_cst
  %old{AMO_CAS} = extractvalue {{ {t}, i1 }} %pair, 0
  br label %done
op{AMO_FETCH}:
  %old{AMO_FETCH} = load atomic {t}, {t}* %p seq_cst, align {4 if t == "i32" else 8}
  br label %done
other:
  ret i64 0
done:
  %old = phi {t} {phis}
  {"%w = zext i32 %old to i64" if t == "i32" else "%w = add i64 %old, 0"}
  ret i64 %w
}}"""


_ATOMICS_IR = _atomics_ir("i32") + _atomics_ir("i64") + """
define i64 @apply_atomic(i64 %op, i64 %size, i64 %a, i64 %value, i64 %compare) {
  %four = icmp eq i64 %size, 4
  br i1 %four, label %narrow, label %wide
narrow:
  %n = call i64 @apply_i32(i64 %op, i64 %a, i64 %value, i64 %compare)
  ret i64 %n
wide:
  %w = call i64 @apply_i64(i64 %op, i64 %a, i64 %value, i64 %compare)
  ret i64 %w
}
define void @fence() {
  fence seq_cst
  ret void
}
"""


class _Atomics:
    """The compiled atomics, callable from numba code by symbol (``apply_atomic``, ``fence``)."""

    def __init__(self):
        self._engine = compile_ir(_ATOMICS_IR)     # keeps the code alive
        ucp.register_symbol("wire_apply_atomic", self._engine.get_function_address("apply_atomic"))
        ucp.register_symbol("wire_fence", self._engine.get_function_address("fence"))


# apply_atomic(op, size, address, value, compare) -> old value, and a seq_cst fence: in numba
# code, once ``atomics()`` has compiled them
apply_atomic = types.ExternalFunction("pgas_wire_apply_atomic", types.int64(*[types.int64] * 5))
fence = types.ExternalFunction("pgas_wire_fence", types.void())
atomics = built_once(_Atomics)


@njit(nogil=True, cache=True)
def spin_lock(address):
    """Take the lock word at ``address`` (held for a few stores, or one doorbell's sends)."""
    while apply_atomic(AMO_CAS, 8, address, 1, 0) != 0:
        _native.sched_yield()


@njit(nogil=True, cache=True)
def spin_unlock(address):
    apply_atomic(AMO_SWAP, 8, address, 0, 0)
