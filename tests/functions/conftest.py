"""Fixtures of the functions' tests: the stream function on moto, and the alert events its rules put."""

from __future__ import annotations

import json

import boto3
import pytest
from moto_tables import COUNTS

from tally.functions import stream_handler
from tally.local.alert_sink import AlertSink

ALERT_RULES = json.dumps(
    [{"name": "logins", "counter": "logins/{ip}", "alerts": [{"name": "burst", "window": "10m", "above": 2}]}]
)


@pytest.fixture
def lambda_handler(dynamodb, monkeypatch):
    monkeypatch.setenv("COUNTS_TABLE", COUNTS)
    stream_handler.counts_table.cache_clear()
    # Scripts that ran the handler earlier in this process with metrics disabled leave their values behind.
    stream_handler.metrics.clear_metrics()
    yield stream_handler.handler
    stream_handler.counts_table.cache_clear()


@pytest.fixture
def alert_sink(dynamodb, monkeypatch):
    monkeypatch.setenv("TALLY_RULES", ALERT_RULES)
    stream_handler.counts_table.cache_clear()
    stream_handler.alert_watcher.cache_clear()
    yield AlertSink(boto3.client("events", region_name="us-east-1"), boto3.client("sqs", region_name="us-east-1"))
    stream_handler.alert_watcher.cache_clear()
