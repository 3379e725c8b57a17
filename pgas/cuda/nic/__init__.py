"""The cuda backend's side of the NIC. Device side: the GPU-initiated path, whose threads
post their own WQEs (``_nic_device`` intrinsics over the ``_nic_library`` IR). Host side:
the queues GPU threads post into and the NIC's window on GPU memory (``_nic_host``), and
host put and get to PEs on other nodes (``_remote_rma``)."""
