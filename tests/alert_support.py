"""State items made by the real evaluation: commits that cross an alert, judged by a Watcher."""

from __future__ import annotations

import boto3

from moto_tables import COUNTS, no_sleep_backoff
from tally.alerting import EventBus, Watcher
from tally.core.buckets import Bucket
from tally.core.commit import Writer
from tally.core.segments import Segment
from tally.core.settings import Settings
from tally.core.units import HOUR_MS, MINUTE_MS
from tally.dynamo.counts_table import CountsTable

ALERT_RULES = (
    '[{"name": "logins", "counter": "logins/{ip}", "alerts": [{"name": "burst", "window": "10m", "above": 2}]},'
    ' {"name": "signups", "counter": "signups/{plan}", "alerts": [{"name": "signup-rush", "window": "1h", "above": 5}]}]'
)


def cross(client, settings: Settings, at_ms: int, counts: dict[str, int], table_name: str = COUNTS) -> None:
    """Commit ``counts`` (counter -> events) in the minute before ``at_ms`` and judge the alerts after it."""
    table = CountsTable(client, table_name, settings, backoff=no_sleep_backoff)
    bus = EventBus(boto3.client("events", region_name="us-east-1"), backoff=no_sleep_backoff)
    watcher = Watcher(table, bus, clock=lambda: at_ms, sleep=lambda _s: None)
    minute = (at_ms - 1) // MINUTE_MS
    deltas = {}
    for counter, n in counts.items():
        deltas[(counter, Bucket.of_minute(minute))] = n
        deltas[(counter, Bucket.of_hour(minute * MINUTE_MS // HOUR_MS))] = n
    segment = Segment(str(at_ms), at_ms, str(at_ms), sum(counts.values()), deltas)
    watcher.watching(table.commit)(segment, Writer.of_shard("stream", "shard-1"))
