"""UCX's and libc's functions as numba code calls them: ``_native.ucp_worker_progress(worker)``,
declared by symbol (``_ucp.natives``), resolved once ``_ucp.load`` has registered them. A
module, since numba resolves a module's attributes where it cannot a namespace object's."""
from ._ucp import natives

globals().update(natives())
