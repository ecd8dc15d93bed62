"""Closing days and months on moto, fed by the real handler path over a synthetic year: every counter-day and
counter-month in UTC and in New York equals brute force over the events, with events late by minutes, days and
weeks, DST days, month ends, 29 February and a counter silent for months; the close interrupted and run again,
run twice, and racing late records."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import random
import uuid
from collections import Counter, defaultdict
from datetime import UTC, date, datetime
from decimal import Decimal
from zoneinfo import ZoneInfo

import boto3
import pytest
from moto import mock_aws

from factories import image, stream_record, window_event
from moto_tables import COUNTS, EVENTS
from sweeps import sweep
from tally.closing import Closer, CloseRefused
from tally.core import segments
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
YEAR_DAYS = 400
# `make test` streams its first 90 days of events (31 January, 29 February, New York's March change, the silent
# counter's first weeks); the whole year runs as a sweep, on moto and on DynamoDB Local. Arrivals and closes go
# on for 60 days after the last event.
SHORT_DAYS = 90
ZONE = "America/New_York"
RULES = parse_rules(json.dumps([
    {"name": "orders", "counter": "orders/{shop}", "sum": "amount", "distinct": "buyer"},
    {"name": "signups", "counter": "signups"},
    {"name": "views", "counter": "views/{page}"},  # kept by no prefix: no days, no months
]))
SETTINGS = Settings(counts_table=COUNTS, events_table=EVENTS, rules=RULES,
                    calendar_prefixes=("orders/", "signups"), calendar_zones=(ZONE,))


def synthetic_year(days: int = YEAR_DAYS) -> list[dict]:
    """Events with their arrival: most within a minute, some late by hours, days (straight to their days) and
    weeks; dense on DST days, month ends and 29 February; ``orders/quiet`` silent from March to August."""
    rng = random.Random(52)
    found = []
    special = [parse_instant(t) for t in ("2028-03-12T06:30:00Z", "2028-11-05T05:30:00Z", "2028-02-29T23:59:00Z",
                                          "2028-03-01T04:59:59Z", "2028-01-31T23:30:00Z", "2028-12-31T23:59:59Z")]
    special = [instant for instant in special if instant < START + days * DAY_MS - 2 * HOUR_MS]
    for n in range(900 * days // YEAR_DAYS):
        ts = START + rng.randrange(days * DAY_MS) if n % 5 else rng.choice(special) + rng.randrange(-2 * HOUR_MS, 2 * HOUR_MS)
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
        commit = CounterDirectory(table.client, table.table_name, table.settings).recording(table.commit)
        process(window_event(records, final=True), commit, table.settings)


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


@pytest.fixture(scope="module", params=[
    ("moto", SHORT_DAYS),
    pytest.param(("moto", YEAR_DAYS), marks=[pytest.mark.sweep]),
    pytest.param(("dynamodb-local", YEAR_DAYS), marks=[pytest.mark.sweep]),
], ids=["moto-90-days", "moto-year", "dynamodb-local-year"])
def year(request):
    """The year streamed, with the close run every fifth simulated day at 03:00 UTC; one close interrupted. On
    moto in this process, and on DynamoDB Local."""
    backend, days = request.param
    if backend == "moto":
        with mock_aws():
            client = boto3.client("dynamodb", region_name="us-east-1")
            create_tables(client, EVENTS, COUNTS)
            yield from streamed_year(CountsTable(client, COUNTS, SETTINGS, previous_release_until_ms=0), days)
    else:
        server = request.getfixturevalue("dynamodb_local")
        client = server.client("dynamodb")
        name = f"year-{uuid.uuid4().hex[:8]}"
        create_tables(client, f"{name}-events", name)
        settings = dataclasses.replace(SETTINGS, counts_table=name)
        yield from streamed_year(CountsTable(client, name, settings, previous_release_until_ms=0), days)


def streamed_year(table: CountsTable, days: int):
    """Deliver ``days`` of the year in arrival order, closing every fifth day; the table, the events, the runs,
    the last clock."""
    events = synthetic_year(days)
    sequence = [10**20]
    runs, interrupted = [], False
    cursor = 0
    for day in range(0, days + 60, 5):
        now = START + day * DAY_MS + 3 * HOUR_MS
        upto = cursor
        while upto < len(events) and events[upto]["arrival"] < now:
            upto += 1
        deliver(table, events[cursor:upto], sequence)
        cursor = upto
        closer = Closer(table)
        if not interrupted and now > START + 60 * DAY_MS and closer.plan_due(now).months:
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


@contextlib.contextmanager
def fresh_tables(name: str):
    """An events and a counts table of their own in moto's in-process mock (another test's mocked account may be
    live in this worker): the client and the counts table's name, ``name-<random>``."""
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        counts = f"{name}-{uuid.uuid4().hex[:8]}"
        create_tables(client, f"{counts}-events", counts)
        yield client, counts


@pytest.mark.parametrize("zone", ["UTC", ZONE])
@pytest.mark.parametrize("kind", ["D", "MO"])
def test_every_closed_day_and_month_is_brute_force(year, zone, kind):
    table, events, _, _ = year
    progress = ProgressItems(table.client, table.table_name).read(zone)
    closed = progress.days if kind == "D" else progress.months
    assert closed is not None and progress.since is not None
    expected = {key: value for key, value in brute(events, zone, kind).items()
                if progress.since.isoformat()[: 10 if kind == "D" else 7] <= key[1].split("@")[1] <= closed.isoformat()[: 10 if kind == "D" else 7]}
    found = stored(table, ["orders/acme", "orders/bolt", "orders/quiet", "signups"], zone, kind)
    found = {key: value for key, value in found.items() if key[1].split("@")[1] <= closed.isoformat()[: 10 if kind == "D" else 7]}
    assert {k: v[:2] for k, v in found.items()} == {k: v[:2] for k, v in expected.items()}
    assert all(abs(found[k][2] - expected[k][2]) <= 1 for k in expected)  # distinct buyers: a sketch's estimate
    assert len(expected) > (50 if kind == "D" else 5)


@pytest.mark.parametrize("zone", ["UTC", ZONE])
def test_progress_begins_at_the_first_day_the_first_close_closed(year, zone):
    """``since`` is where readers may begin taking days from their items: the first day closed, not the last
    day of the first run; the first day whose hours were all kept, not the first whole month. Months begin with
    the first whole one."""
    table, _, runs, _ = year
    progress = ProgressItems(table.client, table.table_name).read(zone)
    first_run = START + 3 * HOUR_MS  # the fixture's first close: 89 days and a day of slack back is 22 Sep 03:00
    assert progress.since == first_closable_day(zone, first_run, SETTINGS) == date(2027, 9, 23 if zone == "UTC" else 22)
    assert f"D#{zone}@{progress.since.isoformat()}" in runs[0].periods
    assert not any(f"MO#{zone}@2027-09" in run.periods for run in runs)
    assert any(f"MO#{zone}@2027-10" in run.periods for run in runs)


def test_a_counter_outside_the_prefixes_keeps_no_days_and_late_records_left_marks(year):
    table, events, _, _ = year
    assert not table.query("views/home", "D#", "D#~").counts
    assert not table.query("views/home", "MO#", "MO#~").counts
    assert table.query(late_partition("signups"), "H#", "H#~").counts == {}  # marks are attributes, not items
    assert table.query("signups", "H#", "H#~").late_counts  # late records marked their hours


def test_the_close_runs_once_a_day_and_a_second_run_finds_nothing_to_do(year):
    table, _, runs, last = year
    assert sum(len(run.periods) for run in runs) > 300
    again = Closer(table).close_due(last)
    assert again.periods == [] and again.written == 0


def test_closes_wait_until_no_on_time_record_can_come():
    assert CLOSE_AFTER_MS == 2 * DAY_MS + HOUR_MS
    assert LATE_AFTER_MS == DAY_MS


def test_a_day_closed_from_an_hour_an_overlap_left_unresolved_is_marked_so():
    """A close never hides an unresolved hour: the day it writes carries the hour's mark, and reads of the day
    say it may be low, by at most what the mark bounds."""
    with fresh_tables("marked") as (client, counts):
        table = CountsTable(client, counts, dataclasses.replace(SETTINGS, counts_table=counts), previous_release_until_ms=0)
        hour = parse_instant("2028-05-10T12:00:00Z")
        deliver(table, [{"id": "a", "shop": "acme", "amount": Decimal(1), "buyer": "b", "ts": hour, "arrival": hour + 1000}], [10**20])
        client.update_item(TableName=counts, Key={"pk": {"S": "signups"}, "sk": {"S": "H#2028-05-10T12"}},
                           UpdateExpression="ADD #u :u", ExpressionAttributeNames={"#u": "unresolved"},
                           ExpressionAttributeValues={":u": {"SS": ["~abc 1..9 <=3"]}})
        day = Bucket.of_day(date(2028, 5, 10), "UTC")
        marked = []
        while (summary := Closer(table).close_due(hour + 3 * DAY_MS)).periods:  # a month of days a run
            marked += summary.unresolved
        assert marked == [f"signups {day.sort_key}", "signups D#America/New_York@2028-05-10"]  # 08:00 there
        stored_day = client.get_item(TableName=counts, Key={"pk": {"S": "signups"}, "sk": {"S": day.sort_key}})["Item"]
        assert stored_day["count"] == {"N": "1"}
        assert stored_day["unresolved"]["SS"] == ["close H#2028-05-10T12: ~abc 1..9 <=3"]
        untouched = client.get_item(TableName=counts, Key={"pk": {"S": "orders/acme"}, "sk": {"S": day.sort_key}})["Item"]
        assert "unresolved" not in untouched


def test_days_whose_hours_may_be_gone_are_refused_not_closed_short():
    """Closes stopped for longer than the hours are kept: the next plan refuses in one line, never closes a
    day from hours that may have expired (the alarm on a failed execution says so)."""
    with fresh_tables("stopped") as (client, counts):
        table = CountsTable(client, counts, dataclasses.replace(SETTINGS, counts_table=counts))
        ProgressItems(client, counts).advance("UTC", Bucket.of_day(date(2028, 1, 31), "UTC"), None,
                                              Bucket.of_day(date(2028, 1, 1), "UTC"))
        closer = Closer(table)
        assert closer.plan_due(parse_instant("2028-04-20T03:00:00Z")).days  # 80 days on: still closable
        with pytest.raises(CloseRefused, match="D#UTC@2028-02-01 can no longer be closed: its hours are past"):
            closer.plan_due(parse_instant("2028-05-01T03:00:00Z"))


class LateDuringClose(CountsTable):
    """The table, committing a late record of the day being closed right after the close reads its hours (or
    right before): the race a close must win whatever its order."""

    def __init__(self, table: CountsTable, late: dict, before: bool) -> None:
        super().__init__(table.client, table.table_name, table.settings, previous_release_until_ms=0)
        self.late, self.before, self.sent = late, before, False

    def query(self, counter, first_sk, last_sk, consistent=False, distinct=False):
        if self.before and not self.sent and first_sk.startswith("H#"):
            self.sent = True
            deliver(self, [self.late], [2 * 10**20])
        read = super().query(counter, first_sk, last_sk, consistent=consistent, distinct=distinct)
        if not self.before and not self.sent and first_sk.startswith("H#"):
            self.sent = True
            deliver(self, [self.late], [2 * 10**20])
        return read


@pytest.mark.parametrize("before", [False, True], ids=["late-record-after-the-close-read", "late-record-before-it"])
def test_a_late_record_racing_the_close_of_its_day_is_counted_once(before):
    with fresh_tables("race") as (client, counts):
        table = CountsTable(client, counts, dataclasses.replace(SETTINGS, counts_table=counts), previous_release_until_ms=0)
        day = parse_instant("2028-05-10T00:00:00Z")
        on_time = [{"id": f"o{n}", "shop": "acme", "amount": Decimal(2), "buyer": f"b{n}", "ts": day + n * HOUR_MS,
                    "arrival": day + n * HOUR_MS + 1000} for n in range(5)]
        deliver(table, on_time, [10**20])
        ProgressItems(client, counts).advance("UTC", Bucket.of_day(date(2028, 5, 9), "UTC"), None,
                                              Bucket.of_day(date(2028, 5, 1), "UTC"))
        ProgressItems(client, counts).advance("America/New_York", Bucket.of_day(date(2028, 5, 9), "America/New_York"),
                                              None, Bucket.of_day(date(2028, 5, 1), "America/New_York"))
        now = day + CLOSE_AFTER_MS + 2 * DAY_MS
        late = {"id": "late", "shop": "acme", "amount": Decimal(5), "buyer": "z", "ts": day + 3 * HOUR_MS, "arrival": now - 1000}
        racing = LateDuringClose(table, late, before)
        Closer(racing, workers=1).close_due(now)
        assert racing.sent
        utc = client.get_item(TableName=counts, Key={"pk": {"S": "orders/acme"}, "sk": {"S": "D#UTC@2028-05-10"}})["Item"]
        assert (utc["count"]["N"], Decimal(utc["sum"]["N"])) == ("6", Decimal(15))
        hour = client.get_item(TableName=counts, Key={"pk": {"S": "orders/acme"}, "sk": {"S": "H#2028-05-10T03"}})["Item"]
        assert (hour["count"]["N"], hour["late"]["N"]) == ("2", "1")


@pytest.mark.parametrize("days", [SHORT_DAYS, YEAR_DAYS])
def test_the_streamed_days_hold_the_dates_where_calendars_break(days):
    """What the differential runs on: 29 February, New York's spring change (and, in the whole year, its fall
    change and 31 December), events days and weeks late, and a counter silent for months."""
    events = synthetic_year(days)
    times = {event["ts"] for event in events}
    assert any(parse_instant("2028-02-29T00:00:00Z") <= ts < parse_instant("2028-03-01T00:00:00Z") for ts in times)
    assert any(abs(ts - parse_instant("2028-03-12T07:00:00Z")) < 2 * HOUR_MS for ts in times)
    if days == YEAR_DAYS:
        assert any(abs(ts - parse_instant("2028-11-05T06:00:00Z")) < 2 * HOUR_MS for ts in times)
        assert any(parse_instant("2028-12-31T00:00:00Z") <= ts < parse_instant("2029-01-01T00:00:00Z") for ts in times)
    lateness = [event["arrival"] - event["ts"] for event in events]
    assert max(lateness) > 30 * DAY_MS and sum(late > DAY_MS + HOUR_MS for late in lateness) > 20
    quiet = [e["ts"] for e in events if e["shop"] == "quiet"]
    assert not any(parse_instant("2028-03-01T00:00:00Z") <= ts < parse_instant("2028-09-01T00:00:00Z") for ts in quiet)


SHORT_HOURS = dataclasses.replace(SETTINGS, hour_retention_ms=7 * DAY_MS)  # the least a calendar allows


def test_days_whose_hours_expired_are_skipped_as_missing_and_the_close_carries_on(monkeypatch):
    """Closes stopped past the hour retention: the close refuses in one line naming the mend; the mend records the
    days it can no longer close as missing and moves past them; the close then carries on with the days after;
    reads of the missing days (and of their month) are refused in one line, those around them are brute force;
    skipping again skips nothing."""
    from freezegun import freeze_time

    from tally import QueryError, Reader

    rng = random.Random(4)
    first = parse_instant("2028-05-01T00:00:00Z")
    events = []
    for n in range(300):
        ts = first + rng.randrange(19 * DAY_MS - 4 * HOUR_MS)
        late = rng.choice([0, 30_000, 5 * HOUR_MS, LATE_AFTER_MS + HOUR_MS, 3 * DAY_MS])
        events.append({"id": f"m{n}", "shop": rng.choice(["bolt", "acme"]), "amount": Decimal(rng.randrange(1, 500)),
                       "buyer": f"b{n % 7}", "ts": ts, "arrival": ts + late + rng.randrange(1000)})
    stopped, now = parse_instant("2028-05-05T03:00:00Z"), parse_instant("2028-05-20T03:00:00Z")
    events = sorted((event for event in events if event["arrival"] < now), key=lambda event: event["arrival"])
    with fresh_tables("skipped") as (client, counts):
        settings = dataclasses.replace(SHORT_HOURS, counts_table=counts)
        table = CountsTable(client, counts, settings, previous_release_until_ms=0)
        before = [event for event in events if event["arrival"] < stopped]
        deliver(table, before, [10**20])
        assert Closer(table).close_due(stopped).periods  # UTC's 30 April to 2 May, New York's 29 April to 1 May; then stopped
        deliver(table, events[len(before):], [2 * 10**20])

        closer = Closer(table)
        with pytest.raises(CloseRefused) as refused:
            closer.close_due(now)
        assert str(refused.value).startswith("D#UTC@2028-05-03 can no longer be closed: its hours are past the hour "
                                             "retention (7 days, hourRetentionDays)")
        assert "run scripts/close_periods.py --skip-missing" in str(refused.value) and "\n" not in str(refused.value)

        skipped = closer.skip_missing(now)
        assert skipped == [("UTC", date(2028, 5, 3), date(2028, 5, 14)), (ZONE, date(2028, 5, 2), date(2028, 5, 13))]
        closed = closer.close_due(now)
        assert "D#UTC@2028-05-15" in closed.periods and "D#America/New_York@2028-05-16" in closed.periods
        assert not [key for key in closed.periods if "D#UTC@2028-05-03" <= key <= "D#UTC@2028-05-14"]
        assert closer.skip_missing(now) == [] and closer.close_due(now).periods == []  # again: nothing more
        progress = ProgressItems(client, counts).read("UTC")
        assert (progress.since, progress.days, progress.missing) == (
            date(2028, 4, 30), date(2028, 5, 17), ((date(2028, 5, 3), date(2028, 5, 14)),))

        reader = Reader(counts, client=client, settings=settings)
        with freeze_time("2028-05-20T03:00:00Z"):
            for zone, start, end in (("UTC", "2028-05-15", "2028-05-21"), (ZONE, "2028-05-14", "2028-05-21"),
                                     ("UTC", "2028-05-01", "2028-05-03"), (ZONE, "2028-05-01", "2028-05-02")):
                [series] = reader.calendar(["orders/bolt"], "day", tz=zone, start=start, end=end)
                expected = Counter(local(event["ts"], zone) for event in events if event["shop"] == "bolt"
                                   and date.fromisoformat(start) <= local(event["ts"], zone) < date.fromisoformat(end))
                assert {point.start.date(): point.count for point in series.points if point.count} == dict(expected)
                assert series.total > 0
            for zone, start, end, parameter in (("UTC", "2028-05-10", "2028-05-20", "from"), ("UTC", "2028-05-01", "2028-05-04", "to"),
                                                (ZONE, "2028-05-13", "2028-05-20", "from")):
                with pytest.raises(QueryError) as missing:
                    reader.calendar(["orders/bolt"], "day", tz=zone, start=start, end=end)
                assert f"the days of {zone} from 2028-05-0" in str(missing.value) and " are missing: " in str(missing.value)
                assert "\n" not in str(missing.value) and missing.value.parameter == parameter
            with pytest.raises(QueryError, match="from 2028-05-03 to 2028-05-14 are missing: .* a range may end on "
                                                 "2028-05-03 or begin on 2028-05-15"):
                reader.calendar(["orders/bolt"], "month", start="2028-05-01", end="2028-06-01")

        # Over HTTP: the same refusal, a 400 naming its parameter.
        from factories import LambdaContext

        from tally import http_api
        from tally.functions import read_api
        from tally.local.http_adapter import http_api_event

        for name, value in {"COUNTS_TABLE": counts, **settings.counting_environment()}.items():
            monkeypatch.setenv(name, value)
        http_api.reader.cache_clear()
        http_api.api_settings.cache_clear()
        target = "/calendar?counter=orders/bolt&period=day&from=2028-05-10&to=2028-05-20"
        with freeze_time("2028-05-20T03:00:00Z"):
            response = read_api.handler(http_api_event("GET", target, [("host", "api.example")], route_key="GET /calendar"),
                                        LambdaContext())
        http_api.reader.cache_clear()
        http_api.api_settings.cache_clear()
        body = json.loads(response["body"])
        assert response["statusCode"] == 400 and body["parameter"] == "from"
        assert "the days of UTC from 2028-05-03 to 2028-05-14 are missing" in body["message"]

        # A month holding missing days is never closed, though its days after them are.
        for zone in ("UTC", ZONE):
            ProgressItems(client, counts).advance(zone, Bucket.of_day(date(2028, 6, 2), zone), None)
        assert Closer(table).plan_due(parse_instant("2028-06-05T03:00:00Z")).months == ()


def test_a_prefix_declared_later_reads_its_days_before_its_first_close_from_hours():
    """Days of a zone are closed from March for "orders/"; "signups" is declared in May. Its counters' days
    before the first close that knew of it were never closed: a read takes them from hours (brute force), not
    from day items that were never written."""
    from freezegun import freeze_time

    from tally import Reader

    rng = random.Random(9)
    first = parse_instant("2028-05-01T00:00:00Z")
    declared, now = parse_instant("2028-05-10T04:00:00Z"), parse_instant("2028-05-20T03:00:00Z")
    events = []
    for n in range(240):
        ts = first + rng.randrange(19 * DAY_MS)
        late = rng.choice([0, 30_000, 5 * HOUR_MS, LATE_AFTER_MS + HOUR_MS, 3 * DAY_MS])
        events.append({"id": f"p{n}", "shop": "bolt", "amount": Decimal(1), "buyer": "b", "ts": ts,
                       "arrival": ts + late + rng.randrange(1000)})
    events = sorted((event for event in events if event["arrival"] < now), key=lambda event: event["arrival"])
    with fresh_tables("declared") as (client, counts):
        before = dataclasses.replace(SETTINGS, counts_table=counts, calendar_prefixes=("orders/",))
        after = dataclasses.replace(SETTINGS, counts_table=counts)  # orders/ and signups
        early = [event for event in events if event["arrival"] < declared]
        deliver(CountsTable(client, counts, before, previous_release_until_ms=0), early, [10**20])
        while Closer(CountsTable(client, counts, before, previous_release_until_ms=0)).close_due(declared - HOUR_MS).periods:
            pass
        table = CountsTable(client, counts, after, previous_release_until_ms=0)
        deliver(table, events[len(early):], [2 * 10**20])
        while Closer(table).close_due(now).periods:
            pass

        with freeze_time("2028-05-20T03:00:00Z"):
            for zone in ("UTC", ZONE):
                signups, orders = Reader(counts, client=client, settings=after).calendar(
                    ["signups", "orders/bolt"], "day", tz=zone, start="2028-05-01", end="2028-05-21")
                expected = dict(Counter(local(event["ts"], zone) for event in events
                                        if date(2028, 5, 1) <= local(event["ts"], zone) < date(2028, 5, 21)))
                for series in (signups, orders):
                    assert {point.start.date(): point.count for point in series.points if point.count} == expected, series.counter


class _CountingClient:
    """The table's client, counting the progress updates sent through it."""

    def __init__(self, client):
        self.client, self.updates = client, 0

    def __getattr__(self, name):
        return getattr(self.client, name)

    def update_item(self, **request):
        self.updates += 1
        return self.client.update_item(**request)


def test_a_zone_and_its_prefixes_move_on_in_one_update_and_a_prefix_alone_where_another_close_moved_the_zone():
    with mock_aws():  # tables of their own: another test's mocked account may be live in this worker
        client = boto3.client("dynamodb", region_name="us-east-1")
        events, counts = f"events-{uuid.uuid4().hex[:8]}", f"counts-{uuid.uuid4().hex[:8]}"
        create_tables(client, events, counts)
        counting = _CountingClient(client)
        progress = ProgressItems(counting, counts)
        day = lambda d: Bucket.of_day(date(2028, 3, d), ZONE)  # noqa: E731
        progress.advance(ZONE, day(10), None, day(1), prefixes=("orders/", "signups"))
        assert counting.updates == 1
        read = ProgressItems(client, counts).read(ZONE)
        assert (read.since, read.days) == (date(2028, 3, 1), date(2028, 3, 10))
        assert read.prefixes == (("orders/", date(2028, 3, 1), date(2028, 3, 10)), ("signups", date(2028, 3, 1), date(2028, 3, 10)))
        # A close of an older release (no prefixes) moved the zone on; a prefix declared since still gets its days.
        progress.advance(ZONE, day(12), None)
        counting.updates = 0
        progress.advance(ZONE, day(12), None, day(11), prefixes=("orders/", "signups", "refunds/"))
        read = ProgressItems(client, counts).read(ZONE)
        assert counting.updates == 1 + 3  # the zone's update refused, then each prefix's own
        assert dict((p, (s, d)) for p, s, d in read.prefixes) == {
            "orders/": (date(2028, 3, 1), date(2028, 3, 12)),
            "signups": (date(2028, 3, 1), date(2028, 3, 12)),
            "refunds/": (date(2028, 3, 11), date(2028, 3, 12)),
        }
        assert (read.since, read.days) == (date(2028, 3, 1), date(2028, 3, 12))  # never moved back


class Stopping(CountsTable):
    """The table, failing a commit once it sent ``after`` bucket updates (one at a time): a try stopped part way,
    its hours written and none, some or all of its minutes, days and months."""

    def __init__(self, table: CountsTable, after: int) -> None:
        super().__init__(table.client, table.table_name, table.settings, workers=1, previous_release_until_ms=0)
        self.left = after

    def _update(self, update):
        if self.left == 0:
            raise TimeoutError("the invocation timed out part way through its commit")
        self.left -= 1
        return super()._update(update)


# The first try's calendar, then Lambda's retry with the days kept (SETTINGS): days turned on, a zone added, a
# zone removed, a prefix removed, or the same calendar throughout.
FIRST_TRIES = {
    "no-days": dict(calendar_prefixes=(), calendar_zones=()),
    "no-zone": dict(calendar_zones=()),
    "same": {},
}
RETRIES = {
    "days": {},
    "zone-removed": dict(calendar_zones=()),
    "prefix-removed": dict(calendar_prefixes=("signups",)),
}


@pytest.mark.parametrize("first, retry, after", sweep(  # days turned on first: the hours written, half the rest
    [("no-days", "days", 9)] + [(first, retry, after) for first in FIRST_TRIES for retry in RETRIES
                                for after in (4, 6, 9, 13) if (first, retry, after) != ("no-days", "days", 9)]))
def test_a_batch_retried_with_another_calendar_counts_its_late_records_once_in_their_days(first, retry, after):
    """A batch of late records whose first try wrote its hours (and none, some or all of the rest) with one
    calendar and whose retry commits with another: every closed day kept in both tries holds each record once,
    whether the first try marked the hours (and added to none, some or all of the days) or kept no days at all."""
    retried_with_another_calendar(first, retry, [after])


@pytest.mark.parametrize("first, then", sweep([(20, 40), (12, 25), (8, 50), (25, 60), (27, 70)]))
def test_segments_of_a_batch_retried_twice_count_their_late_records_once_in_their_days(first, then, monkeypatch):
    """The batch cut into several segments (each of a few items), its first try without days stopped in one of
    them, its retry with days stopped in another, the next retry whole: a segment the first try wrote whole holds
    hours a later segment moved the watermark of, and the days the retry wrote for it, less the unmarked records,
    tell the next retry they are taken."""
    monkeypatch.setattr(segments, "MAX_SEGMENT_ITEMS", 14)
    retried_with_another_calendar("no-days", "days", [first, then])


def retried_with_another_calendar(first: str, retry: str, stops: list[int]) -> None:
    """The batch's first try with FIRST_TRIES[first], stopped after ``stops[0]`` updates, then tries with
    RETRIES[retry] stopped after each of the other stops, then one whole; the days closed as the retry's
    calendar keeps them, against brute force."""
    with fresh_tables("retried") as (client, counts):
        settings = dataclasses.replace(SETTINGS, counts_table=counts)
        table = CountsTable(client, counts, settings, previous_release_until_ms=0)
        day = parse_instant("2028-05-10T00:00:00Z")
        rng = random.Random(stops[0])
        on_time = [{"id": f"o{n}", "shop": rng.choice(["acme", "bolt"]), "amount": Decimal(n + 1), "buyer": f"b{n}",
                    "ts": day + (6 + n) * HOUR_MS, "arrival": day + (6 + n) * HOUR_MS + 1000} for n in range(6)]
        sequence = [10**20]
        deliver(table, on_time, sequence)
        arrival = day + 2 * DAY_MS + 30 * MINUTE_MS  # a day and more after every hour of the 10th ended
        late = [{"id": f"l{n}", "shop": rng.choice(["acme", "bolt"]), "amount": Decimal(10 + n), "buyer": f"z{n % 3}",
                 "ts": day + (6 + 2 * n) * HOUR_MS + n * MINUTE_MS, "arrival": arrival + n * 1000} for n in range(5)]
        late.append({"id": "o-12th", "shop": "acme", "amount": Decimal(7), "buyer": "y", "ts": arrival - 1000,
                     "arrival": arrival + 9000})  # on time, in the same batch
        first_try = CountsTable(client, counts, dataclasses.replace(settings, **FIRST_TRIES[first]),
                                previous_release_until_ms=0)
        retried = CountsTable(client, counts, dataclasses.replace(settings, **RETRIES[retry]), previous_release_until_ms=0)
        for tried, after in zip([first_try] + [retried] * (len(stops) - 1), stops):
            with pytest.raises(TimeoutError):
                deliver(Stopping(tried, after), late, [sequence[0]])
        deliver(retried, late, sequence)  # Lambda's retry: the same records, the same sequence numbers
        events = on_time + late
        for zone in ("UTC", ZONE):
            ProgressItems(client, counts).advance(zone, Bucket.of_day(date(2028, 5, 9), zone), None,
                                                  Bucket.of_day(date(2028, 5, 1), zone), prefixes=("orders/", "signups"))
        Closer(retried, workers=1).close_due(day + 3 * DAY_MS + CLOSE_AFTER_MS + DAY_MS)  # as the retry's calendar
        kept = [counter for counter in ("orders/acme", "orders/bolt", "signups") if counter.startswith(retried.settings.calendar_prefixes)]
        closed = {date(2028, 5, 10), date(2028, 5, 11), date(2028, 5, 12)}
        for zone in retried.settings.kept_zones:
            truth = {key: value for key, value in brute(events, zone, "D").items()
                     if key[0] in kept and date.fromisoformat(key[1].split("@")[1]) in closed}
            found = {key: value for key, value in stored(table, kept, zone, "D").items()
                     if date.fromisoformat(key[1].split("@")[1]) in closed}
            assert found == truth, zone
