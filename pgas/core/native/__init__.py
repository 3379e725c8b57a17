"""What the core runs as machine code for this CPU, compiled with llvmlite: the compile
itself (``_llvm``), CPU atomics on shared mappings (``_cpu_atomics``), and the wake words a
waiting thread sleeps on (``_wake_words``)."""
