"""Adopting a table with days: a whole-table backfill makes the days and months of its export readable in every
kept zone at once, on moto, each period against brute force over the events.

The table holds 412 days of history of two calendar counters before count-from (2028-11-20T17:30Z), crowded
about the midnights of UTC and New York, over both of New York's daylight saving changes, 29 February and
month ends; orders/gust is silent from March to September. Some of it arrived after count-from (late, through
the stream), with live traffic of the days about count-from. The backfill is first interrupted mid-commit,
then run again; no close has run when the reads are made, then the first close runs.
"""

from __future__ import annotations

import random
from datetime import date, timedelta

import boto3
import pytest
from freezegun import freeze_time
from history_support import brute, calendar_read, daily_events, local_day
from moto import mock_aws

import tally.backfill as backfill_module
from factories import image, stream_record, window_event
from moto_tables import COUNTS, EVENTS
from tally.backfill import BackfillSummary, HistoryScope, WriteRateLimit, backfill_export
from tally.closing import Closer, progress_json
from tally.core.calendar import CalendarError
from tally.core.ladder import LATE_AFTER_MS, Progress, adopted_days
from tally.core.settings import Settings
from tally.core.units import DAY_MS, HOUR_MS, MINUTE_MS
from tally.core.windows import parse_instant
from tally.dynamo.closing import ProgressItems, record_adoption
from tally.dynamo.counts_table import CountsTable
from tally.dynamo.directory import CounterDirectory
from tally.dynamo.tables import create_tables
from tally.invocation import process

YORK = "America/New_York"
COUNT_FROM = parse_instant("2028-11-20T17:30:00Z")
NOW_TEXT = "2028-11-23T23:30:00Z"  # no close has run
NOW = parse_instant(NOW_TEXT)
COUNTERS = ("orders/bolt", "orders/gust")
SETTINGS = Settings(counts_table=COUNTS, events_table=EVENTS, calendar_prefixes=("orders/",), calendar_zones=(YORK,),
                    count_from_ms=COUNT_FROM)
EXPORT = "arn:aws:dynamodb:us-east-1:123456789012:table/events/export/01"
SILENT = (date(2028, 3, 1), date(2028, 10, 1))  # orders/gust counts nothing in between


def history() -> list[tuple[int, int, str]]:
    """(event time, arrival, counter): two events a day for 412 days before count-from, most within an hour of
    a midnight of UTC or New York, arriving on time or late (some after count-from), then live traffic from a
    day before count-from to NOW, and late records of the adopted days arriving after count-from."""
    rng = random.Random(58)
    found = daily_events(rng, 412, COUNT_FROM, COUNTERS,
                         lambda counter, day: counter == "orders/gust" and SILENT[0] <= local_day(day, "UTC") < SILENT[1])
    for _ in range(60):  # live: on time, some of them of hours before count-from
        ts = COUNT_FROM - 30 * HOUR_MS + rng.randrange(NOW - COUNT_FROM + 29 * HOUR_MS)
        found.append((ts, max(ts, COUNT_FROM) + rng.randrange(10 * MINUTE_MS), rng.choice(COUNTERS)))
    for _ in range(20):  # late records of days long past, arriving after count-from
        ts = COUNT_FROM - rng.randrange(2 * DAY_MS, 300 * DAY_MS)
        found.append((ts, COUNT_FROM + rng.randrange(NOW - COUNT_FROM - HOUR_MS), rng.choice(COUNTERS)))
    return sorted(found, key=lambda event: event[1])


def backfill(table: CountsTable, exported: list[dict], fail_after: int | None = None) -> None:
    """The export counted as ``scripts/backfill.py --here`` counts it, in segments of 300 buckets; ``fail_after``
    segments committed, the next commit raises (a process killed mid-commit). Adoption is recorded once the
    last segment committed."""
    commit = CounterDirectory(table.client, COUNTS, SETTINGS).recording(table.commit)
    committed = []

    def counting(segment, writer):
        if fail_after is not None and len(committed) == fail_after:
            raise RuntimeError("killed")
        committed.append(segment)
        return commit(segment, writer)

    scope = HistoryScope(COUNT_FROM)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(backfill_module, "BACKFILL_SEGMENT_ITEMS", 300)
        backfill_export(EXPORT, [("data/1.json.gz", exported)], scope=scope, settings=scope.settings_for(SETTINGS),
                        commit=counting, limit=WriteRateLimit(1e9), summary=BackfillSummary())
    record_adoption(table.client, COUNTS, SETTINGS, COUNT_FROM)


def deliver(table: CountsTable, events: list[tuple[int, int, str]]) -> None:
    records = [stream_record(image(id=f"s{n}", counter=counter, ts=ts), arrival_s=arrival / 1000, sequence=str(10**20 + n))
               for n, (ts, arrival, counter) in enumerate(events)]
    commit = CounterDirectory(table.client, COUNTS, SETTINGS).recording(table.commit)
    process(window_event(records, final=True), commit, SETTINGS)


def read(client, counter: str, period: str, zone: str, start: date, end: date) -> dict[date, int]:
    return calendar_read(client, COUNTS, SETTINGS, counter, period, zone, start, end)


LAST_DAYS = (local_day(NOW, "UTC") - timedelta(days=364), local_day(NOW, "UTC") + timedelta(days=1))
MONTHS = (date(2027, 12, 1), date(2028, 12, 1))


@pytest.fixture(scope="module")
def world():
    """The table adopted: the backfill killed after two segments (what is read then is kept), run again to the
    end, the stream's records after count-from counted."""
    events = history()
    exported = [image(id=f"x{n}", counter=counter, ts=ts) for n, (ts, arrival, counter) in enumerate(events) if arrival < COUNT_FROM]
    live = [event for event in events if event[1] >= COUNT_FROM]
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_tables(client, EVENTS, COUNTS)
        table = CountsTable(client, COUNTS, SETTINGS, previous_release_until_ms=0, workers=1)
        with pytest.raises(RuntimeError):
            backfill(table, exported, fail_after=2)
        interrupted = {zone: ProgressItems(client, COUNTS).read(zone) for zone in SETTINGS.kept_zones}
        with freeze_time(NOW_TEXT):
            with pytest.raises(CalendarError) as refused:
                read(client, COUNTERS[0], "day", "UTC", *LAST_DAYS)
        backfill(table, exported)
        deliver(table, live)
        with freeze_time(NOW_TEXT):
            yield client, table, events, interrupted, refused.value


def test_the_history_holds_what_days_get_wrong():
    events = history()
    days = {local_day(ts, "UTC") for ts, _, _ in events}
    assert {date(2028, 2, 29), date(2028, 3, 12), date(2028, 11, 5), date(2027, 11, 7)} <= days
    assert not any(SILENT[0] < local_day(ts, "UTC") < SILENT[1] - timedelta(days=1) and c == "orders/gust"
                   and a < COUNT_FROM for ts, a, c in events)
    after = [e for e in events if e[1] >= COUNT_FROM]
    assert sum(ts < COUNT_FROM - 2 * DAY_MS for ts, _, _ in after) >= 15  # late, to adopted days
    assert sum(COUNT_FROM - LATE_AFTER_MS - 6 * HOUR_MS < ts < COUNT_FROM for ts, _, _ in after) >= 5  # on time, before T


def test_an_interrupted_backfill_leaves_nothing_read_from_days(world):
    _, _, _, interrupted, refused = world
    assert all(progress == Progress() for progress in interrupted.values())
    assert "no day of UTC is closed yet" in str(refused)


def test_adoption_is_recorded_in_every_kept_zone(world):
    client = world[0]
    for zone in SETTINGS.kept_zones:
        progress = ProgressItems(client, COUNTS).read(zone)
        assert progress.since is None and progress.days is None  # no close has run
        assert progress.adopted == (("orders/", *adopted_days(COUNT_FROM, zone, SETTINGS)),)


@pytest.mark.parametrize("zone", ["UTC", YORK])
def test_the_last_365_days_and_12_months_are_brute_force_before_any_close(world, zone):
    client, _, events, _, _ = world
    for counter in COUNTERS:
        assert read(client, counter, "day", zone, *LAST_DAYS) == brute(events, counter, zone, "day", *LAST_DAYS), counter
        assert read(client, counter, "month", zone, *MONTHS) == brute(events, counter, zone, "month", *MONTHS), counter


def test_adoption_again_or_older_changes_nothing(world):
    client = world[0]
    before = {zone: ProgressItems(client, COUNTS).read(zone) for zone in SETTINGS.kept_zones}
    record_adoption(client, COUNTS, SETTINGS, COUNT_FROM)
    record_adoption(client, COUNTS, SETTINGS, COUNT_FROM - 10 * DAY_MS)
    assert {zone: ProgressItems(client, COUNTS).read(zone) for zone in SETTINGS.kept_zones} == before


def test_after_the_first_close_the_reads_are_the_same(world):
    """Last: the first close closes every day still whole in the hours, adopted ones included, each once."""
    client, table, events, _, _ = world
    while Closer(table, workers=1).close_due(NOW).periods:
        pass
    reported = progress_json(ProgressItems(client, COUNTS).read(YORK))
    assert reported["days"] is not None and reported["adopted"] == {"orders/": "2027-10-17..2028-11-18"}
    for zone in ("UTC", YORK):
        for counter in COUNTERS:
            assert read(client, counter, "day", zone, *LAST_DAYS) == brute(events, counter, zone, "day", *LAST_DAYS)
            assert read(client, counter, "month", zone, *MONTHS) == brute(events, counter, zone, "month", *MONTHS)


@pytest.mark.parametrize(
    ("instant", "zone", "first", "last"),
    [
        ("2028-11-20T17:30:00Z", "UTC", "2027-10-17", "2028-11-18"),
        ("2028-11-20T17:30:00Z", YORK, "2027-10-17", "2028-11-18"),
        ("2028-11-20T04:59:00Z", YORK, "2027-10-17", "2028-11-17"),  # New York's 19th ends at 05:00 on the 20th
        ("2028-11-21T05:00:00Z", YORK, "2027-10-18", "2028-11-19"),  # its 19th ended a day before, to the ms
        ("2028-11-20T17:30:00Z", "Asia/Tokyo", "2027-10-18", "2028-11-19"),  # the 17th began 15:00Z on the 16th
    ],
)
def test_adopted_days_are_those_no_record_after_the_instant_reaches_on_time(instant, zone, first, last):
    settings = Settings(calendar_prefixes=("orders/",), calendar_zones=(zone,))
    assert adopted_days(parse_instant(instant), zone, settings) == (date.fromisoformat(first), date.fromisoformat(last))


@pytest.mark.parametrize("zone", ["UTC", YORK])
def test_a_range_before_the_adopted_days_is_refused_saying_where_one_may_begin(world, zone):
    client = world[0]
    with pytest.raises(CalendarError) as days:
        read(client, COUNTERS[0], "day", zone, date(2027, 10, 1), date(2027, 12, 1))
    with pytest.raises(CalendarError) as months:
        read(client, COUNTERS[0], "month", zone, date(2027, 10, 1), date(2028, 1, 1))
    assert "days are kept from 2027-10-17 (since the backfill)" in str(days.value)
    assert "a range may begin on 2027-10-20 or later" in str(days.value)  # the first day item still kept at NOW
    assert "months are kept from 2027-11 (since the backfill)" in str(months.value)
    assert str(months.value).endswith("a range may begin on 2027-10-20 or later")  # no month kept begins sooner
