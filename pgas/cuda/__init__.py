"""The cuda backend. Host side: the driver calls (``_driver``), the symmetric heap in GPU
memory over CUDA VMM, the device state block and the error mailbox (``heap/``), the GPU's
NIC queues and the window through which the NIC reaches GPU memory (``nic/``). Device side:
the primitive layer the device API compiles to (``_primitives``: numba intrinsics, LLVM IR
and PTX), the GPU-initiated NIC path (``nic/``), and the offline sm_90 target
(docs/gpu.md)."""
