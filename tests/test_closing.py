"""Closing days and months on moto, fed by the real handler path over a synthetic year: every counter-day and
counter-month in UTC and in New York equals brute force over the events, with events late by minutes, days and
weeks, DST days, month ends, 29 February and a counter silent for months; the close interrupted and run again,
run twice, and racing late records."""

from __future__ import annotations

import json
import random
from collections import Counter, defaultdict
from datetime import UTC, date, datetime
from decimal import Decimal
from zoneinfo import ZoneInfo

import boto3
import pytest
from moto import mock_aws

from factories import image, stream_record, window_event
from moto_tables import COUNTS, EVENTS
from tally.closing import Closer
from tally.core.buckets import Bucket
from tally.core.ladder import CLOSE_AFTER_MS, LATE_AFTER_MS, first_closable_day, late_partition
from tally.core.rules import parse_rules
from tally.core.settings import Settings
from tally.core.units import DAY_MS, HOUR_MS, MINUTE_MS
from tally.core.windows import parse_instant
from tally.dynamo.closing import ProgressItems
from tally.dynamo.counts_table import CountsTable
from tally.dynamo.directory import CounterDirectory
from tally.dynamo.tables import create_tables
from tally.invocation import process

START = parse_instant("2027-12-20T00:00:00Z")  # the year holds 29 February 2028 and both of New York's DST changes
END = START + 400 * DAY_MS
ZONE = "America/New_York"
RULES = parse_rules(json.dumps([
    {"name": "orders", "counter": "orders/{shop}", "sum": "amount", "distinct": "buyer"},
    {"name": "signups", "counter": "signups"},
    {"name": "views", "counter": "views/{page}"},  # kept by no prefix: no days, no months
]))
SETTINGS = Settings(counts_table=COUNTS, events_table=EVENTS, rules=RULES,
                    calendar_prefixes=("orders/", "signups"), calendar_zones=(ZONE,))


def synthetic_year() -> list[dict]:
    """Events with their arrival: most within a minute, some late by hours, days (straight to their days) and
    weeks; dense on DST days, month ends and 29 February; ``orders/quiet`` silent from March to August."""
    rng = random.Random(52)
    found = []
    special = [parse_instant(t) for t in ("2028-03-12T06:30:00Z", "2028-11-05T05:30:00Z", "2028-02-29T23:59:00Z",
                                          "2028-03-01T04:59:59Z", "2028-01-31T23:30:00Z", "2028-12-31T23:59:59Z")]
    for n in range(900):
        ts = START + rng.randrange(360 * DAY_MS) if n % 5 else rng.choice(special) + rng.randrange(-2 * HOUR_MS, 2 * HOUR_MS)
        late = rng.choice([0, 0, 0, 0, 30_000, 40 * MINUTE_MS, 5 * HOUR_MS, LATE_AFTER_MS + HOUR_MS, 3 * DAY_MS,
                           17 * DAY_MS, 40 * DAY_MS])
        shop = rng.choice(["acme", "acme", "bolt", "quiet"])
        if shop == "quiet" and parse_instant("2028-03-01T00:00:00Z") <= ts < parse_instant("2028-09-01T00:00:00Z"):
            shop = "acme"
        found.append({"id": f"e{n}", "shop": shop, **({"page": "home"} if n % 10 == 0 else {}), "amount": Decimal(rng.randrange(1, 10_000)) / 100,
                      "buyer": f"b{rng.randrange(30)}", "ts": ts, "arrival": ts + late + rng.randrange(1000)})
    return sorted(found, key=lambda event: event["arrival"])


def counters_of(event: dict) -> list[str]:
    return [f"orders/{event['shop']}", "signups"] + (["views/home"] if "page" in event else [])


def deliver(table: CountsTable, events: list[dict], sequence: list[int]) -> None:
    """The events in arrival order, in one window of the stream (each item written once for all of them)."""
    records = []
    for event in events:
        sequence[0] += 1
        fields = {k: v for k, v in event.items() if k != "arrival"}
        records.append(stream_record(image(**fields), arrival_s=event["arrival"] // 1000, sequence=str(sequence[0])))
    if records:
        commit = CounterDirectory(table.client, COUNTS, SETTINGS).recording(table.commit)
        process(window_event(records, final=True), commit, SETTINGS)


def local(ms: int, zone: str) -> date:
    return datetime.fromtimestamp(ms / 1000, UTC).astimezone(ZoneInfo(zone)).date()


def brute(events: list[dict], zone: str, kind: str) -> dict[tuple[str, str], tuple[int, Decimal, int]]:
    """(counter, sort key) -> (count, sum, distinct buyers) of every kept counter's days or months in ``zone``."""
    counts, sums, buyers = Counter(), defaultdict(Decimal), defaultdict(set)
    for event in events:
        day = local(event["ts"], zone)
        bucket = Bucket.of_day(day, zone) if kind == "D" else Bucket.of_month(day, zone)
        for counter in counters_of(event)[:2]:
            key = (counter, bucket.sort_key)
            counts[key] += 1
            if counter.startswith("orders/"):
                sums[key] += event["amount"]
                buyers[key].add(event["buyer"])
    return {key: (count, sums[key], len(buyers[key])) for key, count in counts.items()}


def stored(table: CountsTable, counters: list[str], zone: str, kind: str) -> dict[tuple[str, str], tuple[int, Decimal, int]]:
    found = {}
    for counter in counters:
        read = table.query(counter, f"{kind}#{zone}@", f"{kind}#{zone}@~", distinct=counter.startswith("orders/"))
        for (_, sort_key), count in read.counts.items():
            sketch = read.sketches.get((counter, sort_key))
            units = read.sums.get((counter, sort_key), 0)
            found[(counter, sort_key)] = (count, Decimal(units) / 10**8 if counter.startswith("orders/") else Decimal(0),
                                          0 if sketch is None else sketch.count())
    return found


@pytest.fixture(scope="module")
def year():
    """The year streamed, with the close run every fifth simulated day at 03:00 UTC; one close interrupted."""
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_tables(client, EVENTS, COUNTS)
        table = CountsTable(client, COUNTS, SETTINGS, previous_release_until_ms=0)
        events = synthetic_year()
        sequence = [10**20]
        runs, interrupted = [], False
        cursor = 0
        for day in range(0, (END - START) // DAY_MS + 60, 5):
            now = START + day * DAY_MS + 3 * HOUR_MS
            upto = cursor
            while upto < len(events) and events[upto]["arrival"] < now:
                upto += 1
            deliver(table, events[cursor:upto], sequence)
            cursor = upto
            closer = Closer(table)
            if not interrupted and now > START + 100 * DAY_MS and closer.plan_due(now).months:
                interrupted = True
                with pytest.raises(RuntimeError):
                    Closer(Interrupting(table, after=2)).close_due(now)
            runs.append(closer.close_due(now))
        deliver(table, events[cursor:], sequence)
        yield table, events, runs, now


class Interrupting(CountsTable):
    """The table, failing after ``after`` commits: a close stopped half way."""

    def __init__(self, table: CountsTable, after: int) -> None:
        super().__init__(table.client, table.table_name, table.settings, previous_release_until_ms=0)
        self.left = after

    def commit(self, segment, writer):
        if self.left == 0:
            raise RuntimeError("stopped")
        self.left -= 1
        return super().commit(segment, writer)


@pytest.mark.parametrize("zone", ["UTC", ZONE])
@pytest.mark.parametrize("kind", ["D", "MO"])
def test_every_closed_day_and_month_is_brute_force(year, zone, kind):
    table, events, _, _ = year
    progress = ProgressItems(table.client, COUNTS).read(zone)
    closed = progress.days if kind == "D" else progress.months
    assert closed is not None and progress.since is not None
    expected = {key: value for key, value in brute(events, zone, kind).items()
                if progress.since.isoformat()[: 10 if kind == "D" else 7] <= key[1].split("@")[1] <= closed.isoformat()[: 10 if kind == "D" else 7]}
    found = stored(table, ["orders/acme", "orders/bolt", "orders/quiet", "signups"], zone, kind)
    found = {key: value for key, value in found.items() if key[1].split("@")[1] <= closed.isoformat()[: 10 if kind == "D" else 7]}
    assert {k: v[:2] for k, v in found.items()} == {k: v[:2] for k, v in expected.items()}
    assert all(abs(found[k][2] - expected[k][2]) <= 1 for k in expected)  # distinct buyers: a sketch's estimate
    assert len(expected) > (200 if kind == "D" else 20)


@pytest.mark.parametrize("zone", ["UTC", ZONE])
def test_progress_begins_at_the_first_day_the_first_close_closed(year, zone):
    """``since`` is where readers may begin taking days from their items: the first day closed, not the last
    day of the first run."""
    table, _, runs, _ = year
    progress = ProgressItems(table.client, COUNTS).read(zone)
    first_run = START + 3 * HOUR_MS  # the fixture's first close
    assert progress.since == first_closable_day(zone, first_run, SETTINGS) and progress.since.day == 1
    assert f"D#{zone}@{progress.since.isoformat()}" in runs[0].periods


def test_a_counter_outside_the_prefixes_keeps_no_days_and_late_records_left_marks(year):
    table, events, _, _ = year
    assert not table.query("views/home", "D#", "D#~").counts
    assert not table.query("views/home", "MO#", "MO#~").counts
    assert table.query(late_partition("signups"), "H#", "H#~").counts  # late records marked their hours


def test_the_close_runs_once_a_day_and_a_second_run_finds_nothing_to_do(year):
    table, _, runs, last = year
    assert sum(len(run.periods) for run in runs) > 700
    again = Closer(table).close_due(last)
    assert again.periods == [] and again.written == 0


def test_closes_wait_until_no_on_time_record_can_come():
    assert CLOSE_AFTER_MS == 2 * DAY_MS + HOUR_MS
    assert LATE_AFTER_MS == DAY_MS
