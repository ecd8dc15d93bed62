"""Tests of tally.functions, one module for each of its modules."""
