"""Benchmarks behind ``sstq-fl bench …`` (machine-readable JSON plus plots)."""
