"""Calendar reads on moto, fed by the real handler path: days, weeks and months in a zone with DST, and month to
date, against brute force over the events; their cost in requests; what they refuse."""

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

from backends import BACKENDS, count_on_server
from factories import image, stream_record, window_event
from moto_tables import COUNTS, EVENTS
from tally import QueryError, Reader
from tally.core.calendar import Period
from tally.core.rules import parse_rules
from tally.core.settings import Settings
from tally.core.units import DAY_MS, HOUR_MS
from tally.core.windows import now_ms, parse_instant
from tally.dynamo.counts_table import CountsTable
from tally.dynamo.tables import create_tables
from tally.invocation import process

NOW_TEXT = "2026-11-22T14:37:12Z"  # a Sunday; New York left DST on 1 November
NOW = parse_instant(NOW_TEXT)
NEW_YORK = ZoneInfo("America/New_York")
RULES = parse_rules(json.dumps([
    {"name": "orders", "counter": "orders/{shop}", "sum": "amount", "distinct": "buyer"},
    {"name": "signups", "counter": "signups"},  # every item
]))
SETTINGS = Settings(counts_table=COUNTS, events_table=EVENTS, rules=RULES)


def events() -> list[dict]:
    """75 days of orders and sign-ups, denser around New York's DST change and month ends, none for a fortnight."""
    rng = random.Random(52)
    found = []
    for n in range(1500):
        ts = NOW - rng.randrange(75 * DAY_MS)
        if NOW - 40 * DAY_MS < ts < NOW - 26 * DAY_MS:  # a counter silent for two weeks
            continue
        found.append({"id": f"o{n}", "shop": "acme", "amount": Decimal(rng.randrange(1, 10_000)) / 100,
                      "buyer": f"b{rng.randrange(40)}", "ts": ts})
    change = int(datetime(2026, 11, 1, 1, 30, tzinfo=NEW_YORK).timestamp() * 1000)  # the repeated hour
    found += [{"id": f"s{n}", "ts": change + n * 60_000 - 2 * HOUR_MS} for n in range(240)]
    return found


@pytest.fixture(scope="module")
def reader():
    with mock_aws(), freeze_time(NOW_TEXT):
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_tables(client, EVENTS, COUNTS)
        table = CountsTable(client, COUNTS, SETTINGS)
        items = sorted(events(), key=lambda item: item["ts"])
        for first in range(0, len(items), 250):
            records = [stream_record(image(**item), arrival_s=NOW // 1000 - 60, sequence=str(10**20 + first + n))
                       for n, item in enumerate(items[first : first + 250])]
            process(window_event(records, final=True), table.commit, SETTINGS)
        yield Reader(COUNTS, client=client, settings=SETTINGS), items


def local_day(ms: int) -> date:
    return datetime.fromtimestamp(ms / 1000, UTC).astimezone(NEW_YORK).date()


def brute(items, counter: str, key, start: date, end: date) -> tuple[Counter, dict, dict]:
    counts, sums, buyers = Counter(), defaultdict(Decimal), defaultdict(set)
    for item in items:
        names = {"signups"} | ({f"orders/{item['shop']}"} if "shop" in item else set())  # every item signs up
        if counter not in names or not start <= local_day(item["ts"]) < end:
            continue
        period = key(local_day(item["ts"]))
        counts[period] += 1
        if "amount" in item and counter != "signups":
            sums[period] += item["amount"]
            buyers[period].add(item["buyer"])
    return counts, sums, buyers


@pytest.mark.parametrize(
    ("period", "start", "end", "key"),
    [
        ("day", "2026-09-10", "2026-11-23", lambda day: day),
        ("week", "2026-09-10", "2026-11-30", lambda day: max(day - timedelta(days=day.weekday()), date(2026, 9, 10))),
        ("month", "2026-09-10", "2026-12-01", lambda day: max(day.replace(day=1), date(2026, 9, 10))),
    ],
)
def test_days_weeks_and_months_in_new_york_are_brute_force_in_one_query(reader, period, start, end, key):
    read, items = reader
    with freeze_time(NOW_TEXT):
        orders, signups = read.calendar(["orders/acme", "signups"], period, tz="America/New_York", start=start, end=end)
    first, last = date.fromisoformat(start), date.fromisoformat(end)
    counts, sums, buyers = brute(items, "orders/acme", key, first, last)
    assert {point.start.date(): point.count for point in orders.points if point.count} == dict(counts)
    assert {point.start.date(): point.sum for point in orders.points if point.count} == dict(sums)
    assert {point.start.date(): point.distinct for point in orders.points if point.count} == {k: len(v) for k, v in buyers.items()}
    assert {point.start.date(): point.count for point in signups.points if point.count} == dict(brute(items, "signups", key, first, last)[0])
    assert orders.points[0].start == datetime(2026, 9, 10, tzinfo=NEW_YORK)
    assert all(a.end == b.start for a, b in zip(orders.points, orders.points[1:]))
    assert orders.requests <= 4  # one Query a counter (a page each): the whole range's hours


def test_every_day_of_the_range_is_answered_zero_where_nothing_was_counted_the_future_too(reader):
    read, _ = reader
    with freeze_time(NOW_TEXT):
        [series] = read.calendar(["orders/acme"], "day", tz="America/New_York", start="2026-10-10", end="2026-11-30")
    days = [point.start.date() for point in series.points]
    assert days == [date(2026, 10, 10) + timedelta(days=n) for n in range(51)]
    assert series.points[-1].count == 0 and series.points[5].count == 0  # to come; and the silent fortnight
    [dst] = [point for point in series.points if point.start.date() == date(2026, 11, 1)]
    assert dst.end.astimezone(UTC) - dst.start.astimezone(UTC) == timedelta(hours=25)
    shown = series.as_json()
    assert shown["points"][0]["start"] == "2026-10-10T00:00:00-04:00" and shown["points"][-1]["end"] == "2026-11-30T00:00:00-05:00"
    assert shown["tz"] == "America/New_York" and shown["period"] == "day"


@pytest.mark.parametrize(("counter", "requests"), [("signups", 3), ("orders/acme", 4)])
def test_this_month_so_far_is_exact_up_to_now_in_at_most_three_requests(reader, counter, requests):
    """Its hours and the current hour's minutes, a Query each (a distinct counter's sketches in one more)."""
    read, items = reader
    with freeze_time(NOW_TEXT):
        [paris] = read.month_to_date([counter], tz="Europe/Paris")
        [york] = read.month_to_date([counter], tz="America/New_York")
    for result, zone in ((paris, ZoneInfo("Europe/Paris")), (york, NEW_YORK)):
        start = datetime(2026, 11, 1, tzinfo=zone)
        assert result.start == start
        writes = (item for item in items if counter == "signups" or "shop" in item)
        assert result.total == sum(1 for item in writes if start.timestamp() * 1000 <= item["ts"] < NOW)
        assert result.requests <= requests


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda r: r.calendar(["signups"], "day", tz="Mars/Base", start="2026-11-01", end="2026-11-02"), "unknown time zone"),
        (lambda r: r.calendar(["signups"], "day", tz="Asia/Kolkata", start="2026-11-01", end="2026-11-02"), "not on a whole hour"),
        (lambda r: r.calendar(["signups"], "day", start="2026-06-01", end="2026-07-01"), "past the hour retention (90 days"),
        (lambda r: r.calendar(["signups"], "week", start="2026-11-01", end="2026-11-20", week_start="funday"), "a week starts on"),
        (lambda r: r.calendar(["signups"], "day", start="2026-11-01", end="2026-11-20", week_start="sunday"), "a week start goes with"),
        (lambda r: r.calendar(["signups"], "year", start="2026-11-01", end="2026-11-20"), "period must be one of day, week, month"),
        (lambda r: r.calendar(["signups"], "day", start="2026-11-01"), "a calendar read needs its first day"),
        (lambda r: r.month_to_date(["signups"], window="7d"), "month to date sets its own window"),
    ],
)
def test_bad_calendar_reads_are_refused_in_one_line(reader, call, message):
    read, _ = reader
    with freeze_time(NOW_TEXT), pytest.raises(QueryError) as refused:
        call(read)
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_a_series_point_is_the_sum_of_its_hours_by_both_plans(reader):
    """The calendar read groups the hours of one window: the same hours a window read of that day answers."""
    read, _ = reader
    with freeze_time(NOW_TEXT):
        [series] = read.calendar(["orders/acme"], Period.DAY, tz="America/New_York", start="2026-11-01", end="2026-11-02")
        day = series.points[0]
        for plan in ("batch", "range"):
            [window] = read.count_many(["orders/acme"], window="25h", at=day.end.isoformat(), plan=plan)
            assert window.total == day.count and window.sum == day.sum


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_calendar_read_on_either_server_is_brute_force(local_server, backend, monkeypatch):
    """The same read on moto's server and on DynamoDB Local: one Query's hours grouped into New York's days."""
    now = now_ms()
    rng = random.Random(7)
    events = [("sign-ups", now - rng.randrange(3 * DAY_MS)) for _ in range(400)]
    counts = count_on_server(local_server, monkeypatch, events, now, "calendar")
    read = Reader(counts, settings=Settings(counts_table=counts))
    today = datetime.now(NEW_YORK).date()
    [series] = read.calendar(["sign-ups"], "day", tz="America/New_York", start=today - timedelta(days=4), end=today + timedelta(days=1), consistent=True)
    assert {point.start.date(): point.count for point in series.points if point.count} == Counter(local_day(ms) for _, ms in events)
    assert series.requests == 2  # the hours, and the current hour's minutes: the range reaches now


def test_month_to_date_at_the_months_first_instant_reads_its_first_minute(reader):
    read, _ = reader
    first = datetime(2026, 11, 1, tzinfo=NEW_YORK)
    with freeze_time(first.astimezone(UTC)):
        [result] = read.month_to_date(["signups"], tz="America/New_York")
        same = read.count("signups", window="1m", at=(first + timedelta(minutes=1)).isoformat(), plan="range")
    assert result.start == first and result.end == first + timedelta(minutes=1)  # not the month's last minute before
    assert result.total == same.total
