"""Tests of tally.dynamo, one module for each of its modules."""
