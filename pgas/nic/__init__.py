"""The emulated NIC, the hardware at the bottom of pgas: mlx5 work-queue formats, memory
regions and keys, queue pairs and completion queues, the wire (MPI on a communicator of its
own) and the target that checks and applies requests. It knows nothing of the runtime: its
owner passes ``on_failure`` (docs/architecture.md, docs/transports.md)."""
