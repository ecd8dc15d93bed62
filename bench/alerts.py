"""What alerts add to the write path: reads and writes per 1,000 events, by the number of alerted counters.

After each commit, tally judges the ``above`` alerts of the counters the
segment wrote over every window the commit changed: one strongly consistent
BatchGetItem of their state items per 100 counters, then one strongly
consistent Query per counter of the minute items those windows hold (a
10-minute alert on a commit of one minute: the 9 minutes before it and the
minute itself, every lane), charged by the size of the items found, one read
unit for a few minutes' items. A crossing adds a conditional write, the
event's put and the write that clears ``pending``. The figures run the real
``Watcher`` on moto, metered by DynamoDB's rules (bench/cost.py; a key without
an item still costs the minimum read): a segment's worth of events (1,000, or
one per counter when there are more counters), each counter written in the
same minute, as one shard's tumbling window brings them, judged just after
that minute. The commit's own writes are left out: they are what tally writes
without alerts.
"""

from __future__ import annotations

import json
import math
import threading
from typing import Any

import boto3
from moto import mock_aws

from bench.cost import batch_get_read_units, item_size, query_read_units, write_units
from tally.core.lanes import LaneHistory
from tally.alerting import AlertStates, EventBus, Watcher
from tally.core.buckets import Bucket
from tally.core.commit import Writer
from tally.core.rules import parse_rules
from tally.core.segments import Segment
from tally.core.settings import Settings
from tally.core.units import HOUR_MS, MINUTE_MS
from tally.core.windows import now_ms
from tally.dynamo.counts_table import CountsTable
from tally.dynamo.tables import create_tables

ALERTED_COUNTERS = (1, 100, 10_000)
EVENTS = 1_000
WINDOW = "10m"
TABLE = "bench-alerts"


class ReadMeter:
    """A DynamoDB client that counts the requests and units of what passes through it. The watcher sends its
    Queries from several threads at once, so each count is added under a lock."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.counting = threading.Lock()
        self.read_requests = 0
        self.read_units = 0.0
        self.write_requests = 0
        self.write_units = 0
        self.query_requests = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    def batch_get_item(self, **request: Any) -> dict[str, Any]:
        """Items found are charged by their size; a key with no item still costs the minimum read."""
        response = self.client.batch_get_item(**request)
        [(table, spec)] = request["RequestItems"].items()
        found = response.get("Responses", {}).get(table, [])
        unprocessed = len(response.get("UnprocessedKeys", {}).get(table, {}).get("Keys", []))
        consistent = bool(spec.get("ConsistentRead"))
        missing = len(spec["Keys"]) - len(found) - unprocessed
        units = batch_get_read_units([item_size(item) for item in found], consistent=consistent)
        with self.counting:
            self.read_requests += 1
            self.read_units += units + missing * (1.0 if consistent else 0.5)
        return response

    def query(self, **request: Any) -> dict[str, Any]:
        """A Query is charged by the size of all it read, in 4 KB units (at least one)."""
        response = self.client.query(**request)
        sizes = [item_size(item) for item in response.get("Items", [])]
        units = max(query_read_units(sizes, consistent=bool(request.get("ConsistentRead"))), 1.0)
        with self.counting:
            self.query_requests += 1
            self.read_units += units
        return response

    def update_item(self, **request: Any) -> dict[str, Any]:
        try:
            return self.client.update_item(**request)
        finally:  # a refused condition is charged too
            stored = self.client.get_item(TableName=request["TableName"], Key=request["Key"]).get("Item", {})
            with self.counting:
                self.write_requests += 1
                self.write_units += write_units(item_size(stored or request["Key"]))


def measure(counters: int, *, crossing: bool) -> dict[str, Any]:
    """One segment of ``max(EVENTS, counters)`` events over ``counters`` alerted counters; ``crossing``: every
    counter crosses (threshold 0 and a count written first), else none does."""
    events = max(EVENTS, counters)
    rules = json.dumps(
        [{"name": "watched", "counter": "w/{k}", "alerts": [{"name": "burst", "window": WINDOW, "above": 0 if crossing else 10**9}]}]
    )
    with mock_aws():
        raw = boto3.client("dynamodb", region_name="us-east-1")
        create_tables(raw, "bench-alert-events", TABLE)
        settings = Settings(counts_table=TABLE, rules=parse_rules(rules))
        minute = now_ms() // MINUTE_MS
        names = [f"w/{index:05d}" for index in range(counters)]
        deltas = {}
        for index, name in enumerate(names):
            n = events // counters + (1 if index < events % counters else 0)
            deltas[(name, Bucket.of_minute(minute))] = n
            deltas[(name, Bucket.of_hour(minute * MINUTE_MS // HOUR_MS))] = n
        segment = Segment("1", minute * MINUTE_MS, "1", events, deltas)
        writer = Writer.of_shard("arn:aws:dynamodb:us-east-1:1:table/bench/stream/x", "shard-1")
        if crossing:  # the counts the commit wrote, so that the windows hold them (not metered)
            lanes = LaneHistory.always(settings.bucket_lanes)
            CountsTable(raw, TABLE, settings, workers=8, lanes=lanes).commit(segment, writer)
        meter = ReadMeter(raw)
        table = CountsTable(meter, TABLE, settings, lanes=LaneHistory.always(settings.bucket_lanes))
        bus = EventBus(boto3.client("events", region_name="us-east-1"))
        watcher = Watcher(table, bus, clock=lambda: (minute + 1) * MINUTE_MS, sleep=lambda _s: None)
        summary = watcher.after_commit(segment, writer)
        if crossing:
            assert summary.crossings == counters and len(AlertStates(raw, TABLE).listing("burst")) == counters
        else:
            assert summary.crossings == 0
    scale = 1000 / events
    puts = math.ceil(counters / 10) if crossing else 0
    return {
        "alerted_counters": counters,
        "events": events,
        "crossings": summary.crossings,
        "read_requests_per_1000_events": round((meter.read_requests + meter.query_requests) * scale, 2),
        "read_units_per_1000_events": round(meter.read_units * scale, 2),
        "write_requests_per_1000_events": round(meter.write_requests * scale, 2),
        "write_units_per_1000_events": round(meter.write_units * scale, 2),
        "put_events_requests_per_1000_events": round(puts * scale, 2),
    }


def costs() -> dict[str, Any]:
    """The steady state (no counter crosses) at 1, 100 and 10,000 alerted counters, and every counter
    crossing at 100."""
    return {
        "window": WINDOW,
        "steady": [measure(counters, crossing=False) for counters in ALERTED_COUNTERS],
        "all_crossing": measure(100, crossing=True),
    }
