"""Benchmarks of tally against the origin design: ``python -m bench`` (``make bench``)."""
