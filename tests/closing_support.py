"""A month of events counted into a counts table whose close is due, for the tests of the close's steps and command.

The events fall on the month from the first day a table's closes begin with (``first_closable_day``) and the days
before it, some late by days (added to their days directly, and marked), on kept counters and one that keeps no
days.
"""

from __future__ import annotations

import random
from typing import Any

from factories import counter_record, window_event
from tally.core.buckets import local_midnight_ms
from tally.core.ladder import LATE_AFTER_MS
from tally.core.settings import Settings
from tally.core.units import DAY_MS, HOUR_MS, MINUTE_MS
from tally.dynamo.calls import batch_write
from tally.dynamo.counts_table import CountsTable
from tally.dynamo.directory import CounterDirectory
from tally.core.ladder import first_closable_day
from tally.invocation import process

ZONE = "America/New_York"
KEPT = ("orders/", "signups")
COUNTERS = ("orders/acme", "orders/bolt", "signups", "views/home")  # views/home keeps no days


def calendar_settings(counts_table: str, **overrides: Any) -> Settings:
    return Settings(counts_table=counts_table, calendar_prefixes=KEPT, calendar_zones=(ZONE,), **overrides)


def calendar_environment(counts_table: str) -> dict[str, str]:
    """What the stack gives the close's functions: the table, and the counting settings with the calendar's."""
    return {"COUNTS_TABLE": counts_table, **calendar_settings(counts_table).counting_environment()}


def count_a_month(client: Any, settings: Settings, now_ms: int, events: int = 240, seed: int = 5) -> int:
    """``events`` events over 28 days from the first closable day of ``now_ms`` and three days before, committed
    through the stream's path with the counter directory recording; a fifth of them late by one to five days.
    Their number."""
    rng = random.Random(seed)
    first = local_midnight_ms(first_closable_day("UTC", now_ms, settings), "UTC")
    start, span = first - 3 * DAY_MS, 31 * DAY_MS  # up to the 28th: every day the first run closes
    records = []
    for _ in range(events):
        ts = start + rng.randrange(span)
        late = rng.choice([0, 0, 0, 0, LATE_AFTER_MS + HOUR_MS + rng.randrange(4 * DAY_MS)]) or rng.randrange(MINUTE_MS)
        arrival = min(ts + late, now_ms - 3 * DAY_MS)  # every record in before the close (none on the days it closes)
        records.append((max(arrival, ts), counter_record(rng.choice(COUNTERS), ts, arrival_s=max(arrival, ts) / 1000)))
    records.sort(key=lambda pair: pair[0])
    for number, (_, record) in enumerate(records):  # the same sequence numbers in every table: the same watermarks
        record["dynamodb"]["SequenceNumber"] = str(10**20 + number)
    table = CountsTable(client, settings.counts_table, settings, previous_release_until_ms=0)
    commit = CounterDirectory(client, settings.counts_table, settings).recording(table.commit)
    process(window_event([record for _, record in records], final=True), commit, settings)
    return events


def copy_table(client: Any, source: str, twin: str) -> None:
    """Put every item of counts table ``source`` into ``twin`` as it is: the same state as counting the same month
    into it again (the same items, watermarks included), in a tenth of the time."""
    items = [item for page in client.get_paginator("scan").paginate(TableName=source, ConsistentRead=True)
             for item in page["Items"]]
    batch_write(client, twin, [{"PutRequest": {"Item": item}} for item in items])


def long_items(client: Any, counts_table: str) -> dict[tuple[str, str], dict[str, Any]]:
    """Every day, month and progress item of the table, whole (watermarks included): what closes write."""
    found = {}
    for page in client.get_paginator("scan").paginate(TableName=counts_table, ConsistentRead=True):
        for item in page["Items"]:
            key = (item["pk"]["S"], item["sk"]["S"])
            if key[1].startswith(("D#", "MO#")) and not key[0].startswith("#late#") or key[0] == "#calendar":
                found[key] = item
    return found
