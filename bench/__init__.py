"""Benchmarks: cdcflow end to end against the raw ceilings and the apache-kafka provider baseline."""
