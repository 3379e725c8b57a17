"""LLVM IR with llvmlite. ``compile_ir`` and ``built_once`` compile it for this CPU: the pieces
of pgas that run as machine code (CPU atomics on shared mappings, posting and reading the
GPU-initiated path's queues, decoding a doorbell's worth of WQEs, the eager fold).
``bswap`` is a piece of IR that the CPU's code and the GPU's both use."""
from __future__ import annotations

import threading

from ._object_cache import ObjectCache

__all__ = ["compile_ir", "built_once", "bswap"]


def compile_ir(text: str):
    """An MCJIT engine holding LLVM IR ``text`` compiled for this CPU (-O2): its
    ``get_function_address`` gives the functions, which live as long as the engine. The
    machine code comes from the disk where an earlier process kept it (``_object_cache``)."""
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    module = llvm.parse_assembly(text)
    module.verify()
    target = llvm.Target.from_default_triple()
    engine = llvm.create_mcjit_compiler(module, target.create_target_machine(opt=2))
    ObjectCache(engine).expect(module, text, target.triple, "opt=2")
    engine.finalize_object()
    return engine


def built_once(build):
    """A function that returns ``build()``'s result, built on its first call (llvmlite's
    start-up is not free). One thread builds and the others wait: simulated threads race
    to it, and a second engine would be freed under the functions of the first."""
    lock = threading.Lock()
    built = []

    def get():
        if not built:
            with lock:
                if not built:
                    built.append(build())
        return built[0]
    return get


def bswap(builder, value):
    """``value`` (an integer of 16 to 64 bits) with its bytes reversed (``llvm.bswap``,
    declared once per module): big-endian fields to and from native words."""
    from llvmlite import ir

    typ = value.type
    name = f"llvm.bswap.i{typ.width}"
    swap = builder.module.globals.get(name) or ir.Function(builder.module, ir.FunctionType(typ, [typ]), name)
    return builder.call(swap, [value])
