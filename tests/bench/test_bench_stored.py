"""make bench's counted writes against what each server stored: moto, and DynamoDB Local with its capacity.

Every design's writes are metered by DynamoDB's rules (bench/cost.py) and
forwarded to the server: the items it stores must be the metered image, and
DynamoDB Local, which charges single-item writes by DynamoDB's rules, must
report the very write units the meter counts for tally and for the origin.
Its figure for a transaction of several items is short (the deduplicating
design's), and moto's follow other rules: tests/local/test_backends.py pins both.
"""

from __future__ import annotations

import boto3
import pytest
from backends import BACKENDS
from moto import mock_aws
from sweeps import sweep

from bench import workloads, writes
from tally.core.settings import Settings
from tally.local.delivery import DeliveryConfig

CONFIG = DeliveryConfig(batch_size=100, window_seconds=60)
# make bench's workloads, each small enough to write through a server in seconds.
WORKLOADS = {  # the first, plain counting, in make test; the others are a sweep (tests/sweeps.py)
    "steady": lambda: workloads.steady(counters=5, per_second=5, seconds=60),
    "origin_mock": lambda: workloads.origin_mock(hours=2),
    "hot": lambda: workloads.hot(per_second=10, seconds=30),
    "fan_out": lambda: workloads.fan_out(providers=4, per_second=2, seconds=90, histogram=True),
    "backfill": lambda: workloads.backfill(counters=3, days=2, total=200, per_second=50),
    "transitions": lambda: workloads.transitions(providers=4, per_second=2, seconds=60, ttl_minutes=15),
    "distinct": lambda: workloads.with_distinct(workloads.steady(counters=3, per_second=5, seconds=60)),
}


@pytest.fixture
def server_client(backend, request):
    """A DynamoDB client of the backend with no tables: moto in this process, or the session's DynamoDB Local."""
    if backend == "moto":
        with mock_aws():
            yield boto3.client("dynamodb", region_name="us-east-1")
        return
    server = request.getfixturevalue("dynamodb_local")
    server.reset()  # the designs write fixed table names
    yield server.client("dynamodb")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sweep(WORKLOADS))
def test_what_the_bench_counts_each_design_writing_is_what_the_server_stored(name, backend, server_client):
    checked = writes.verify_stored(WORKLOADS[name](), Settings(), CONFIG, server_client)
    for design in writes.DESIGNS:
        result = checked[design]
        assert result["stored_matches_meter"], (design, result)
        assert 0 < result["items_stored"] <= result["item_writes"] and result["failed_conditions"] == 0, (design, result)
        if backend == "dynamodb-local" and design != "dedup":
            assert result["consumed_write_units"] == result["write_units"], (design, result)
