"""The version of pgas (``pgas.__version__``), here so that every layer can read it."""
from __future__ import annotations

__all__ = ["__version__", "VERSION", "SPEC_VERSION", "VENDOR_NAME"]

__version__ = "0.1.0"
VERSION = tuple(int(part) for part in __version__.split("."))   # (major, minor, patch)
SPEC_VERSION = (1, 6)   # the OpenSHMEM specification whose names and meanings pgas follows
VENDOR_NAME = f"pgas {__version__}"     # what info_get_name gives, host and device
