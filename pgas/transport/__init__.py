"""Routing and the remote engines: ``Transports`` decides how this PE reaches each PE (its
heap mapped here, or the NIC), the GPU-initiated engine (``ibgda``: the caller posts mlx5
WQEs itself, with the protocol compiled from ``_ibgda_ir``) and the CPU proxy, and the fast
same-node copies of small host RMA (docs/transports.md)."""
