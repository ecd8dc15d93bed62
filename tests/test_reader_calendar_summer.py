"""Calendar reads of a New York summer on moto: closed days and months read across daylight saving time (EDT), and
a range across the edge between the last closed day and the days still read from hours, each period against brute
force over the events.

The events crowd the hours where a local day is easiest to get wrong: 23:00 to 01:00 EDT (03:00 to 05:00 UTC),
some of them late by a day or more, which reach their days directly (``core/ladder.py``: the local day of their
hour), others late by weeks, after their day closed. The days after the last closed one hold late records in
their own items too, which are not the day: a reader takes those days from their hours.

The close lists directory partition 0 alone (``parts=1``): both counters' entries fall there."""

from __future__ import annotations

import json
import random
from collections import Counter, defaultdict
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import boto3
import pytest
from freezegun import freeze_time
from moto import mock_aws

from factories import image, stream_record, window_event
from moto_tables import COUNTS, EVENTS
from tally import Reader
from tally.closing import Closer
from tally.core.buckets import Bucket
from tally.core.directory import partition_of
from tally.core.ladder import LATE_AFTER_MS
from tally.core.rules import parse_rules
from tally.core.settings import Settings
from tally.core.units import DAY_MS, HOUR_MS, MINUTE_MS
from tally.core.windows import parse_instant
from tally.dynamo.closing import ProgressItems
from tally.dynamo.counts_table import CountsTable
from tally.dynamo.directory import CounterDirectory
from tally.dynamo.tables import create_tables
from tally.invocation import process

NOW_TEXT = "2028-08-10T15:00:00Z"  # New York's days are closed through 7 August (closed 49 hours after they end)
NOW = parse_instant(NOW_TEXT)
EDGE = date(2028, 8, 7)  # the last closed day of New York at NOW; 8 August on are read from hours
YORK = "America/New_York"
COUNTERS = ("orders/bolt", "orders/gust")
SETTINGS = Settings(
    counts_table=COUNTS, events_table=EVENTS, calendar_prefixes=("orders/",), calendar_zones=(YORK,),
    rules=parse_rules(json.dumps([{"name": "orders", "counter": "orders/{shop}", "sum": "amount"}])),
)


def local_day(ms: int, zone: str) -> date:
    return datetime.fromtimestamp(ms / 1000, UTC).astimezone(ZoneInfo(zone)).date()


def summer() -> list[dict]:
    """Events of New York's days from 1 June to 10 August 2028, most of them between 23:00 and 01:00 EDT, with
    their arrival (before NOW): on time, hours late, a day or days late (to their days directly) and weeks late;
    and late records of 8 August, the day after the edge, besides its on-time ones."""
    rng = random.Random(58)
    first = parse_instant("2028-06-01T04:00:00Z")  # midnight EDT
    found = []
    for n in range(700):
        day = first + rng.randrange(71) * DAY_MS
        if n % 3:  # 23:00 to 01:00 EDT: the last hour of one local day and the first of the next
            ts = day + rng.choice([-HOUR_MS, 0]) + rng.randrange(HOUR_MS)
        else:
            ts = day + rng.randrange(DAY_MS)
        late = rng.choice([0, 0, 0, 30_000, 5 * HOUR_MS, LATE_AFTER_MS + HOUR_MS, 3 * DAY_MS, 12 * DAY_MS])
        found.append((ts, ts + late + rng.randrange(MINUTE_MS), COUNTERS[n % 2]))
    after_edge = parse_instant("2028-08-08T04:00:00Z")  # 8 August, 00:00 EDT
    for n, offset in enumerate([30 * MINUTE_MS, 10 * HOUR_MS, 23 * HOUR_MS + 30 * MINUTE_MS]):
        ts = after_edge + offset
        for counter in COUNTERS:
            found.append((ts, ts + n * MINUTE_MS + 1000, counter))  # on time
            found.append((ts + 60_000, ts + HOUR_MS + LATE_AFTER_MS + n * MINUTE_MS, counter))  # late: to its day's item
    events = []
    for n, (ts, arrival, counter) in enumerate(found):
        if ts >= NOW:
            continue
        events.append({"id": f"e{n}", "shop": counter.split("/")[1], "amount": Decimal(rng.randrange(1, 10_000)) / 100,
                       "ts": ts, "arrival": min(arrival, NOW - 1000)})
    return sorted(events, key=lambda event: event["arrival"])


def deliver(table: CountsTable, events: list[dict], sequence: list[int]) -> None:
    """The events in arrival order, in one window of the stream, committed as the handler commits."""
    records = []
    for event in events:
        sequence[0] += 1
        fields = {k: v for k, v in event.items() if k != "arrival"}
        records.append(stream_record(image(**fields), arrival_s=event["arrival"] / 1000, sequence=str(sequence[0])))
    if records:
        commit = CounterDirectory(table.client, COUNTS, SETTINGS).recording(table.commit)
        process(window_event(records, final=True), commit, SETTINGS)


@pytest.fixture(scope="module")
def world():
    """The summer streamed in arrival order and closed every third day at 03:15 UTC, and at NOW; read at NOW."""
    assert all(partition_of(0, name).endswith("#00") for name in COUNTERS)  # what parts=1 lists
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_tables(client, EVENTS, COUNTS)
        table = CountsTable(client, COUNTS, SETTINGS, previous_release_until_ms=0, workers=1)
        events = summer()
        instants = [parse_instant("2028-06-01T03:15:00Z") + n * 3 * DAY_MS for n in range(24)] + [NOW]
        sequence, cursor = [10**20], 0
        for instant in sorted(set(i for i in instants if i <= NOW)):
            upto = cursor
            while upto < len(events) and events[upto]["arrival"] < instant:
                upto += 1
            deliver(table, events[cursor:upto], sequence)
            cursor = upto
            while Closer(table, workers=1).close_due(instant, parts=1).periods:
                pass
        deliver(table, events[cursor:], sequence)
        with freeze_time(NOW_TEXT):
            yield client, events


def brute(events: list[dict], counter: str, zone: str, key, start: date, end: date) -> dict[date, tuple[int, Decimal]]:
    """Each period's count and sum, by the period's first day in the range (``key`` of a local day)."""
    counts, sums = Counter(), defaultdict(Decimal)
    for event in events:
        day = local_day(event["ts"], zone)
        if f"orders/{event['shop']}" != counter or not start <= day < end:
            continue
        period = max(key(day), start)
        counts[period] += 1
        sums[period] += event["amount"]
    return {period: (count, sums[period]) for period, count in counts.items()}


def shown(series) -> dict[date, tuple[int, Decimal | None]]:
    return {point.start.date(): (point.count, point.sum) for point in series.points if point.count}


def test_the_summer_is_where_new_york_days_break():
    """What the reads below run on: events of the hours either side of New York's midnights in EDT, many of them
    late enough to reach their days directly, and late records of the day after the edge."""
    events = summer()
    edges = [e for e in events if datetime.fromtimestamp(e["ts"] / 1000, UTC).hour in (3, 4)]
    assert all(datetime.fromtimestamp(e["ts"] / 1000, ZoneInfo(YORK)).utcoffset() == timedelta(hours=-4) for e in events)
    assert len(edges) > 300
    assert sum(e["arrival"] - e["ts"] > LATE_AFTER_MS + HOUR_MS for e in edges) > 60
    assert sum(local_day(e["ts"], YORK) == EDGE + timedelta(days=1) and e["arrival"] - e["ts"] > LATE_AFTER_MS for e in events) >= 3


@pytest.mark.parametrize("zone", [YORK, "UTC"])
@pytest.mark.parametrize(
    ("period", "start", "end", "key"),
    [
        ("day", date(2028, 6, 1), date(2028, 8, 12), lambda day: day),
        ("month", date(2028, 6, 1), date(2028, 9, 1), lambda day: day.replace(day=1)),
    ],
    ids=["days", "months"],
)
def test_summer_days_and_months_are_brute_force(world, zone, period, start, end, key):
    """Closed days and months of June and July and the days of August, from their items and then from hours."""
    _, events = world
    read = Reader(COUNTS, client=world[0], settings=SETTINGS)
    found = read.calendar(list(COUNTERS), period, tz=zone, start=start.isoformat(), end=end.isoformat())
    for series, counter in zip(found, COUNTERS):
        assert shown(series) == brute(events, counter, zone, key, start, end), counter
        assert series.points[0].start.date() == start and series.points[-1].end.date() == end
    assert sum(series.total for series in found) == sum(1 for e in events if start <= local_day(e["ts"], zone) < end) > 600


def test_a_range_across_the_last_closed_day_reads_the_days_after_it_from_hours(world):
    """The day after the edge has an item holding its late records alone; the read takes the day from its hours,
    which hold all of them."""
    client, events = world
    progress = ProgressItems(client, COUNTS).read(YORK)
    assert progress.days == EDGE
    after = Bucket.of_day(EDGE + timedelta(days=1), YORK)
    late_only = client.get_item(TableName=COUNTS, Key={"pk": {"S": COUNTERS[0]}, "sk": {"S": after.sort_key}})["Item"]
    start, end = EDGE - timedelta(days=3), EDGE + timedelta(days=4)
    expected = brute(events, COUNTERS[0], YORK, lambda day: day, start, end)
    assert 0 < int(late_only["count"]["N"]) < expected[EDGE + timedelta(days=1)][0]

    [series] = Reader(COUNTS, client=client, settings=SETTINGS).calendar([COUNTERS[0]], "day", tz=YORK,
                                                                         start=start.isoformat(), end=end.isoformat())
    assert shown(series) == expected
    assert {EDGE, EDGE + timedelta(days=1)} <= set(expected)
