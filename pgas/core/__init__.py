"""What every layer of pgas shares, and nothing above it: the errors and public constants,
the ``PGAS_*`` settings and the backend choice, the vocabulary of the device API (operation
and scope codes, dtype sets, reductions), the texts of device errors and argument checks,
CPU atomics and the llvmlite compile they use (``native/``), waiting with back-off, and the
job files a PE writes for pgasrun. It imports nothing else of pgas (docs/architecture.md)."""
