"""matplotlib for the benchmarks' ``--plot``, where it is installed."""
from __future__ import annotations

__all__ = ["pyplot"]


def pyplot(path: str):
    """matplotlib.pyplot drawing off screen, or None (said once) where matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"(no matplotlib: {path} not written; pip install matplotlib)")
        return None
    return plt
