"""pgas benchmarks: ``python -m pgas.bench NAME`` (run under pgasrun)."""
