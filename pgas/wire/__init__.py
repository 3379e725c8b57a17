"""The wire between nodes on an existing engine: UCX active messages (``_ucp`` binds the
library, ``_worker`` drives a worker, ``_target`` is the native code at both ends)."""
