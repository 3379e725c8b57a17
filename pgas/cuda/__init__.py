"""The cuda backend. Host side: the driver calls, the symmetric heap in GPU memory over CUDA
IPC, the device state block and the error mailbox, the GPU's NIC queues and the window
through which the NIC reaches GPU memory. Device side: the primitive layer the device API
compiles to (numba intrinsics, LLVM IR and PTX), the GPU-initiated NIC path, and the offline
sm_90 target (docs/gpu.md)."""
