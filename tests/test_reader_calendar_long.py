"""Calendar reads past the hour retention, on moto: two years of events streamed through the real handler path
and closed month by month, then read as days, weeks and months in UTC and New York, each period against brute
force over the events; what the reads cost (requests, and read units by DynamoDB's size rules); what is refused,
by the reader, the query command and the HTTP API.

The close lists directory partition 0 alone (``parts=1``): the kept counters here are named so that their
entries all fall there, and listing the 16 partitions of every day of two years would take minutes on moto."""

from __future__ import annotations

import json
import random
import urllib.error
import urllib.request
from collections import Counter, defaultdict
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from urllib.parse import urlencode
from zoneinfo import ZoneInfo

import boto3
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from freezegun import freeze_time
from moto import mock_aws

from bench.cost import batch_get_read_units, item_size, query_read_units
from factories import image, stream_record, window_event
from moto_tables import COUNTS, EVENTS
from tally import QueryError, Reader
from tally.closing import Closer
from tally.core.directory import partition_of
from tally.core.ladder import LATE_AFTER_MS
from tally.core.rules import ENV_RULES, parse_rules
from tally.core.settings import ENV_CALENDAR_PREFIXES, ENV_CALENDAR_ZONES, Settings
from tally.core.units import DAY_MS, HOUR_MS, MINUTE_MS
from tally.core.windows import parse_instant
from tally.dynamo.closing import ProgressItems
from tally.dynamo.counts_table import CountsTable
from tally.dynamo.directory import CounterDirectory
from tally.dynamo.tables import create_tables
from tally.invocation import process
from tally.local.cli import load_script
from tally.local.http_adapter import LocalApi

NOW_TEXT = "2026-01-20T15:20:00Z"  # a Tuesday: days closed through 17 January, months through December 2025
NOW = parse_instant(NOW_TEXT)
START = parse_instant("2024-01-01T05:00:00Z")  # the first events; the first close begins its days on 6 December
FIRST_CLOSE = parse_instant("2024-03-03T12:00:00Z")
YORK = "America/New_York"
RULES_JSON = json.dumps([
    {"name": "orders", "counter": "orders/{shop}", "sum": "amount", "distinct": "buyer"},
    {"name": "signups", "counter": "signups/{channel}"},
    {"name": "views", "counter": "views/{page}"},  # kept by no prefix: hours only
])
SETTINGS = Settings(counts_table=COUNTS, events_table=EVENTS, rules=parse_rules(RULES_JSON),
                    calendar_prefixes=("orders/", "signups/"), calendar_zones=(YORK,))
ORDERS, SIGNUPS, VIEWS = "orders/bolt", "signups/mail", "views/home"
CREDENTIALS = Credentials("testing", "testing")


def two_years() -> list[dict]:
    """150 events from 1 January 2024 until now, with their arrival: most within a minute, some late by hours, a
    day (straight to their days and months) and weeks (after their day closed); dense on New York's DST days,
    month ends and 29 February 2024. Those arriving after now are left out."""
    rng = random.Random(2026)
    special = [parse_instant(t) for t in ("2024-03-10T06:30:00Z", "2024-11-03T05:30:00Z", "2024-02-29T23:59:00Z",
                                          "2025-03-09T06:30:00Z", "2025-11-02T05:30:00Z", "2025-12-31T23:59:59Z",
                                          "2025-01-01T04:59:59Z", "2026-01-19T12:00:00Z")]
    found = []
    for n in range(150):
        ts = START + rng.randrange(NOW - START) if n % 4 else rng.choice(special) + rng.randrange(-2 * HOUR_MS, 2 * HOUR_MS)
        late = rng.choice([0, 0, 0, 0, 0, 30_000, 40 * MINUTE_MS, 5 * HOUR_MS, LATE_AFTER_MS + HOUR_MS, 17 * DAY_MS])
        event = {"id": f"e{n}", "shop": "bolt", "channel": "mail", "amount": Decimal(rng.randrange(1, 10_000)) / 100,
                 "buyer": f"b{rng.randrange(30)}", "ts": ts, "arrival": ts + late + rng.randrange(1000)}
        if event["arrival"] < NOW:
            found.append(event)
    return sorted(found, key=lambda event: event["arrival"])


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


def instants() -> list[int]:
    """When the close runs: the 3rd of every month at noon UTC, once the month before can close, and now."""
    found, day = [], date(2024, 3, 3)
    while (instant := int(datetime(day.year, day.month, 3, 12, tzinfo=UTC).timestamp() * 1000)) < NOW:
        found.append(instant)
        day = date(day.year + day.month // 12, day.month % 12 + 1, 3)
    return [*found, NOW]


@pytest.fixture(scope="module")
def world():
    """The events streamed and closed as time passes; the reads then happen now."""
    assert all(partition_of(0, name).endswith("#00") for name in (ORDERS, SIGNUPS))  # what parts=1 lists
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_tables(client, EVENTS, COUNTS)
        table = CountsTable(client, COUNTS, SETTINGS, previous_release_until_ms=0, workers=1)  # moto: no faster in threads
        events = two_years()
        sequence, cursor = [10**20], 0
        for instant in instants():
            upto = cursor
            while upto < len(events) and events[upto]["arrival"] < instant:
                upto += 1
            deliver(table, events[cursor:upto], sequence)
            cursor = upto
            while Closer(table, workers=1).close_due(instant, parts=1).periods:  # the first run catches up in two
                pass
        assert cursor == len(events)
        with freeze_time(NOW_TEXT):
            yield client, events


@pytest.fixture
def reader(world):
    client, _ = world
    return Reader(COUNTS, client=client, settings=SETTINGS)


def local_day(ms: int, zone: str) -> date:
    return datetime.fromtimestamp(ms / 1000, UTC).astimezone(ZoneInfo(zone)).date()


def brute(events: list[dict], counter: str, zone: str, key, start: date, end: date) -> dict[date, tuple[int, Decimal, int]]:
    """Each period's (count, sum, distinct buyers), by the period's first day in the range (``key`` of a day)."""
    counts, sums, buyers = Counter(), defaultdict(Decimal), defaultdict(set)
    for event in events:
        day = local_day(event["ts"], zone)
        if not start <= day < end:
            continue
        period = max(key(day), start)
        counts[period] += 1
        sums[period] += event["amount"]
        buyers[period].add(event["buyer"])
    return {period: (count, sums[period], len(buyers[period])) for period, count in counts.items()}


def shown(series) -> dict[date, tuple[int, Decimal | None, int | None]]:
    """Each period that counted anything: its count, sum and distinct values (None for a counter keeping none)."""
    return {point.start.date(): (point.count, point.sum, point.distinct) for point in series.points if point.count}


def expected(events, counter: str, zone: str, key, start: date, end: date) -> dict[date, tuple[int, Decimal | None, int | None]]:
    found = brute(events, counter, zone, key, start, end)
    if counter == ORDERS:
        return found
    return {period: (count, None, None) for period, (count, _, _) in found.items()}


DAYS = lambda day: day  # noqa: E731
MONTHS = lambda day: day.replace(day=1)  # noqa: E731
SUNDAY_WEEKS = lambda day: day - timedelta(days=(day.weekday() + 1) % 7)  # noqa: E731


@pytest.mark.parametrize("zone", ["UTC", YORK])
@pytest.mark.parametrize(
    ("period", "start", "end", "key", "week_start"),
    [
        ("day", date(2025, 1, 21), date(2026, 1, 21), DAYS, None),  # a year ending today: its days past 90 too
        ("week", date(2025, 1, 21), date(2026, 1, 25), SUNDAY_WEEKS, "sunday"),
        ("month", date(2024, 2, 1), date(2026, 2, 1), MONTHS, None),  # 24 months ending with this one
        ("month", date(2024, 1, 1), date(2026, 1, 1), MONTHS, None),  # 24 closed months
        ("month", date(2024, 12, 20), date(2025, 6, 10), MONTHS, None),  # months cut at both ends, their days kept
    ],
    ids=["365-days", "weeks", "24-months-to-now", "24-closed-months", "cut-months"],
)
def test_days_weeks_and_months_past_the_hour_retention_are_brute_force(world, reader, zone, period, start, end, key, week_start):
    _, events = world
    found = reader.calendar([ORDERS, SIGNUPS], period, tz=zone, start=start.isoformat(), end=end.isoformat(),
                            week_start=week_start)
    for series, counter in zip(found, (ORDERS, SIGNUPS)):
        assert shown(series) == expected(events, counter, zone, key, start, end), counter
        assert series.points[0].start.date() == start and series.points[-1].end.date() == end
    assert found[0].total > 30  # the range's events, most of them far past the hour retention


def test_a_zone_that_is_not_kept_reads_hours_within_their_retention(world, reader):
    _, events = world
    zone = "America/Chicago"
    [series] = reader.calendar([SIGNUPS], "day", tz=zone, start="2025-11-01", end="2026-01-21")
    assert shown(series) == expected(events, SIGNUPS, zone, DAYS, date(2025, 11, 1), date(2026, 1, 21))
    assert series.total > 0


class Meter:
    """A DynamoDB client that notes each request: its operation, partition, and read units by DynamoDB's rules
    (bench/cost.py): a Query by the summed size of what it returns, a GetItem by the item's size."""

    def __init__(self, client) -> None:
        self.client = client
        self.calls: list[tuple[str, str, float]] = []
        self.sizes: list[int] = []  # of every item a Query returned

    def __getattr__(self, name):
        return getattr(self.client, name)

    def query(self, **request):
        response = self.client.query(**request)
        sizes = [item_size(item) for item in response.get("Items", [])]
        units = query_read_units(sizes, consistent=bool(request.get("ConsistentRead")))
        self.calls.append(("Query", request["ExpressionAttributeValues"][":pk"]["S"], units))
        self.sizes += sizes
        return response

    def get_item(self, **request):
        response = self.client.get_item(**request)
        size = item_size(response["Item"]) if "Item" in response else 0
        units = batch_get_read_units([size], consistent=bool(request.get("ConsistentRead")))
        self.calls.append(("GetItem", request["Key"]["pk"]["S"], units))
        return response

    def batch_get_item(self, **request):
        raise AssertionError("calendar reads query ranges")


def metered(world) -> tuple[Reader, Meter]:
    client, _ = world
    meter = Meter(client)
    return Reader(COUNTS, client=meter, settings=SETTINGS), meter


def read_units(meter: Meter, partition: str) -> float:
    return sum(units for operation, pk, units in meter.calls if operation == "Query" and pk == partition)


def test_a_year_of_closed_days_is_one_query_of_at_most_ten_read_units(world):
    """365 closed days of a plain counter (17 January back to 18 January 2025): the zone's progress, then one
    Query of the days, eventually consistent; the progress is held a minute, so a second read is the Query alone.
    Here a day item in six holds something (1 read unit); a counter counted every day would return 365 items
    of the largest size read, within 10 units even strongly consistent."""
    read, meter = metered(world)
    for zone in ("UTC", YORK):
        meter.calls.clear()
        [series] = read.calendar([SIGNUPS], "day", tz=zone, start="2025-01-18", end="2026-01-18")
        assert [(operation, pk) for operation, pk, _ in meter.calls] == [("GetItem", "#calendar"), ("Query", SIGNUPS)]
        assert series.requests == 2 and series.items_read == len([p for p in series.points if p.count]) > 40
        assert read_units(meter, SIGNUPS) <= 1
        assert query_read_units([max(meter.sizes)] * 365, consistent=True) <= 10
        meter.calls.clear()
        [again] = read.calendar([SIGNUPS], "day", tz=zone, start="2025-01-18", end="2026-01-18")
        assert [operation for operation, _, _ in meter.calls] == ["Query"] and again.requests == 1
        assert again == replace(series, requests=1)


def test_a_year_of_closed_days_of_a_distinct_counter_adds_one_query_of_its_sketches(world):
    read, meter = metered(world)
    [series] = read.calendar([ORDERS], "day", tz=YORK, start="2025-01-18", end="2026-01-18")
    assert [(operation, pk) for operation, pk, _ in meter.calls] == [
        ("GetItem", "#calendar"), ("Query", ORDERS), ("Query", f"#sketches#0#{ORDERS}")
    ]
    assert read_units(meter, ORDERS) <= 10 and series.requests == 3


def test_twenty_four_closed_months_are_one_query_of_at_most_two_read_units(world):
    read, meter = metered(world)
    [series] = read.calendar([SIGNUPS], "month", tz=YORK, start="2024-01-01", end="2026-01-01", consistent=True)
    assert [(operation, pk) for operation, pk, _ in meter.calls] == [("GetItem", "#calendar"), ("Query", SIGNUPS)]
    assert read_units(meter, SIGNUPS) == 1 and len(series.points) == series.items_read == 24  # strongly consistent


@pytest.mark.parametrize(("period", "start", "reads"), [("day", "2025-01-21", 3), ("month", "2024-02-01", 4)])
def test_a_series_ending_now_adds_the_hours_since_the_last_close(world, period, start, reads):
    """A year of days ending today: the closed days' Query, then the hours since (a Query) and the current
    hour's minutes (one more); 24 months ending with this one: the closed months, this month's closed days,
    and the same two for the hours since."""
    read, meter = metered(world)
    [series] = read.calendar([SIGNUPS], period, tz=YORK, start=start, end="2026-02-01" if period == "month" else "2026-01-21")
    queries = [operation for operation, _, _ in meter.calls if operation == "Query"]
    assert len(queries) == reads and series.requests == reads + 1  # and the progress
    assert read_units(meter, SIGNUPS) <= (3 if period == "day" else 4)


def test_the_progress_read_counts_in_the_first_kept_counters_requests(world):
    read, meter = metered(world)
    views, signups, orders = read.calendar([VIEWS, SIGNUPS, ORDERS], "day", tz="UTC", start="2026-01-01", end="2026-01-10")
    assert sum(series.requests for series in (views, signups, orders)) == len(meter.calls)
    assert signups.requests == 2 and orders.requests == 2 and views.requests == 1  # views: its hours, one Query


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda r: r.calendar([SIGNUPS], "day", start="2023-12-01", end="2024-01-10"),
         "the range begins 2023-12-01, before what UTC keeps: days are kept from 2023-12-06 (since the first close) "
         "for 400 days (dayRetentionDays), hours for 90 days (hourRetentionDays); a range may begin on 2024-12-16 "
         "or later"),
        (lambda r: r.calendar([SIGNUPS], "week", tz=YORK, start="2024-06-01", end="2024-07-01"),
         "a range may begin on 2024-12-16 or later"),  # past since, but those days are no longer kept
        (lambda r: r.calendar([ORDERS], "month", tz=YORK, start="2023-11-01", end="2024-03-01"),
         "months are kept from 2024-01 (since the first close) for 84 months (monthRetentionMonths), days are kept "
         "from 2023-12-06"),
        (lambda r: r.calendar([ORDERS], "month", tz=YORK, start="2024-06-15", end="2024-09-01"),
         "a range may begin on the first of a month from 2024-01 on, or on any day from 2024-12-16"),  # June cut
        (lambda r: r.calendar([SIGNUPS], "day", tz="America/Chicago", start="2025-06-01", end="2025-07-01"),
         "past the hour retention (90 days, hourRetentionDays): calendar reads come from hours, and the oldest kept "
         "in America/Chicago begins 2025-10-22T11:00:00-05:00; days and months are kept in UTC, America/New_York only "
         "(calendarZones), not America/Chicago"),
        (lambda r: r.calendar([VIEWS], "day", start="2025-06-01", end="2025-07-01"),
         "'views/home' keeps no days and months: only the counters of calendarPrefixes ('orders/', 'signups/') do"),
        (lambda r: r.calendar([SIGNUPS], "day", tz="Asia/Kolkata", start="2025-06-01", end="2025-07-01"),
         "not on a whole hour"),
    ],
    ids=["before-the-first-close", "days-expired", "months-before-the-first-close", "cut-month-expired", "zone-not-kept",
         "counter-not-kept", "half-hour-zone"],
)
def test_what_is_not_kept_is_refused_in_one_line_naming_from(reader, call, message):
    with pytest.raises(QueryError) as refused:
        call(reader)
    assert message in str(refused.value) and "\n" not in str(refused.value)
    assert refused.value.parameter == ("tz" if "whole hour" in message else "from")


def test_a_month_series_reads_months_whose_days_are_no_longer_kept(world, reader):
    _, events = world
    [series] = reader.calendar([SIGNUPS], "month", tz=YORK, start="2024-06-01", end="2024-12-01")
    assert shown(series) == expected(events, SIGNUPS, YORK, MONTHS, date(2024, 6, 1), date(2024, 12, 1))


def test_month_to_date_still_reads_the_months_hours(world):
    _, events = world
    read, meter = metered(world)
    [month] = read.month_to_date([SIGNUPS], tz=YORK)
    assert [operation for operation, _, _ in meter.calls] == ["Query", "Query"] and month.requests == 2
    first = datetime(2026, 1, 1, tzinfo=ZoneInfo(YORK)).timestamp() * 1000
    assert month.total == sum(1 for event in events if first <= event["ts"] < NOW)


def test_the_progress_is_what_the_last_close_left(world):
    client, _ = world
    for zone in ("UTC", YORK):
        progress = ProgressItems(client, COUNTS).read(zone)
        assert (progress.since, progress.days, progress.months) == (date(2023, 12, 6), date(2026, 1, 17), date(2025, 12, 1))


# --- the query command and the HTTP API -------------------------------------------------------------------------


@pytest.fixture
def deployed(world, monkeypatch):
    """The environment the stack gives the functions and the query command: rules and calendar settings."""
    for name, value in {
        "COUNTS_TABLE": COUNTS,
        ENV_RULES: RULES_JSON,
        ENV_CALENDAR_PREFIXES: json.dumps(list(SETTINGS.calendar_prefixes)),
        ENV_CALENDAR_ZONES: json.dumps(list(SETTINGS.calendar_zones)),
    }.items():
        monkeypatch.setenv(name, value)
    from tally import http_api

    http_api.reader.cache_clear()
    http_api.api_settings.cache_clear()
    yield world
    http_api.reader.cache_clear()
    http_api.api_settings.cache_clear()


def test_the_query_command_answers_a_year_of_days_past_the_hour_retention(deployed, capsys):
    _, events = deployed
    query_window = load_script("query_window")
    argv = [SIGNUPS, "--series", "day", "--from", "2025-01-01", "--to", "2026-01-01", "--json"]
    assert query_window.main(argv) == 0
    [series] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    counts = {point["start"][:10]: point["count"] for point in series["points"] if point["count"]}
    assert counts == {day.isoformat(): count for day, (count, _, _) in
                      brute(events, SIGNUPS, "UTC", DAYS, date(2025, 1, 1), date(2026, 1, 1)).items()}
    assert len(series["points"]) == 365 and series["requests"] == 2
    assert query_window.main([SIGNUPS, "--series", "day", "--from", "2023-12-01", "--to", "2024-01-10"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and "days are kept from 2023-12-06" in captured.err


def signed_get(api: LocalApi, target: str) -> tuple[int, dict]:
    url = f"{api.url}{target}"
    request = AWSRequest(method="GET", url=url)
    SigV4Auth(CREDENTIALS, "execute-api", "us-east-1").add_auth(request)
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=dict(request.headers)), timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_the_http_api_answers_months_past_the_hour_retention_over_a_real_socket(deployed):
    from tally.functions import read_api

    client, events = deployed
    query = urlencode([("counter", ORDERS), ("period", "month"), ("tz", YORK), ("from", "2024-01-01"), ("to", "2026-01-01")])
    with LocalApi(read_api.handler, credentials=CREDENTIALS) as api:
        status, body = signed_get(api, f"/calendar?{query}")
        refused_status, refused = signed_get(api, f"/calendar?{query.replace('2024-01-01', '2023-11-01')}")
    expected_series = Reader(COUNTS, client=client, settings=SETTINGS).calendar(
        [ORDERS], "month", tz=YORK, start="2024-01-01", end="2026-01-01"
    )
    assert status == 200
    assert body["series"][0]["points"] == expected_series[0].as_json()["points"]
    months = brute(events, ORDERS, YORK, MONTHS, date(2024, 1, 1), date(2026, 1, 1))
    assert {p["start"][:10]: (p["count"], Decimal(p["sum"])) for p in body["series"][0]["points"] if p["count"]} == {
        day.isoformat(): (count, total) for day, (count, total, _) in months.items()
    }
    assert refused_status == 400 and refused["parameter"] == "from" and "months are kept from 2024-01" in refused["message"]
