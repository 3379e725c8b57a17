"""The GPU memory the cuda backend's host side sets up for its PE: the symmetric heap on CUDA
VMM, shared with the node's PEs by file descriptor (``_heap``, ``_vmm``, ``_fd_exchange``),
the device state block at its fixed address (``_state_block``), and the error mailbox a
failed device check writes into (``_mailbox``)."""
