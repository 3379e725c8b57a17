"""The simulator backend: the symmetric heap in shared memory (one file per PE, mapped by
every PE of the node) and the primitive layer the device API runs on in numba's CUDA
simulator (docs/simulator.md)."""
