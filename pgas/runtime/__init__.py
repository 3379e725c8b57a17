"""The runtime of an initialized PE: its state (``runtime``), the bootstrap over MPI, the
heap allocator, the team table, the barrier that never hangs, what it knows of arrays, and
how a failing PE ends the job. ``pgas.init`` (``pgas/host/_init.py``) builds it from a
backend's heap and the transports (docs/architecture.md)."""
