"""Adopting a table with days: a whole-table backfill makes the days and months of its export readable in every
kept zone at once, on moto and on DynamoDB Local, each period against brute force over the events.

The table holds 412 days of history of two calendar counters before count-from (2028-11-20T17:30Z), crowded
about the midnights of UTC and New York, over both of New York's daylight saving changes, 29 February and
month ends; orders/gust is silent from March to September. Some of it arrived after count-from (late, through
the stream), with live traffic of the days about count-from. The backfill is first interrupted mid-commit,
then run again; no close has run when the reads are made, then the first close runs, stopped half way and
run again. A second whole-table backfill at another instant is refused. Apart, the first close races a
backfill stopped half way and late records. DynamoDB Local cannot export a table: the export's items are fed
to the backfill as its files would hand them over, on either server.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import uuid
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
from tally.core.buckets import iso_second
from tally.core.calendar import CalendarError
from tally.core.ladder import LATE_AFTER_MS, Progress, adopted_days
from tally.core.settings import Settings
from tally.core.units import DAY_MS, HOUR_MS, MINUTE_MS
from tally.core.windows import parse_instant
from tally.dynamo.backfill import BACKFILL_PREFIX, BackfillClaimed
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
TABLE_ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/events"
EXPORT = f"{TABLE_ARN}/export/01"
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
    commit = CounterDirectory(table.client, table.table_name, table.settings).recording(table.commit)
    committed = []

    def counting(segment, writer):
        if fail_after is not None and len(committed) == fail_after:
            raise RuntimeError("killed")
        committed.append(segment)
        return commit(segment, writer)

    scope = HistoryScope(COUNT_FROM)
    table.claim_backfill(TABLE_ARN, iso_second(COUNT_FROM), EXPORT, (COUNT_FROM + SETTINGS.hour_retention_ms) // 1000)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(backfill_module, "BACKFILL_SEGMENT_ITEMS", 300)
        backfill_export(EXPORT, [("data/1.json.gz", exported)], scope=scope, settings=scope.settings_for(table.settings),
                        commit=counting, limit=WriteRateLimit(1e9), summary=BackfillSummary())
    record_adoption(table.client, table.table_name, table.settings, COUNT_FROM)


def deliver(table: CountsTable, events: list[tuple[int, int, str]]) -> None:
    records = [stream_record(image(id=f"s{n}", counter=counter, ts=ts), arrival_s=arrival / 1000, sequence=str(10**20 + n))
               for n, (ts, arrival, counter) in enumerate(events)]
    commit = CounterDirectory(table.client, table.table_name, table.settings).recording(table.commit)
    process(window_event(records, final=True), commit, table.settings)


def read(table: CountsTable, counter: str, period: str, zone: str, start: date, end: date) -> dict[date, int]:
    return calendar_read(table.client, table.table_name, table.settings, counter, period, zone, start, end)


def progress(table: CountsTable, zone: str) -> Progress:
    return ProgressItems(table.client, table.table_name).read(zone)


def assert_brute_force(table: CountsTable, events, zones=("UTC", YORK)) -> None:
    for zone in zones:
        for counter in COUNTERS:
            assert read(table, counter, "day", zone, *LAST_DAYS) == brute(events, counter, zone, "day", *LAST_DAYS), (zone, counter)
            assert read(table, counter, "month", zone, *MONTHS) == brute(events, counter, zone, "month", *MONTHS), (zone, counter)


LAST_DAYS = (local_day(NOW, "UTC") - timedelta(days=364), local_day(NOW, "UTC") + timedelta(days=1))
MONTHS = (date(2027, 12, 1), date(2028, 12, 1))


@dataclasses.dataclass
class World:
    table: CountsTable
    events: list[tuple[int, int, str]]
    interrupted: dict[str, Progress]  # each zone's progress while the backfill was stopped
    refused: CalendarError  # a read then


@contextlib.contextmanager
def counts_table(request, backend: str, settings: Settings = SETTINGS):
    """Fresh tables on moto (in this process) or on DynamoDB Local, and the counts table's CountsTable. Named
    afresh: DynamoDB Local outlives the test, and moto's mock of this module's world may be running too."""
    name = f"adopt-{uuid.uuid4().hex[:8]}"
    with contextlib.ExitStack() as stack:
        if backend == "moto":
            stack.enter_context(mock_aws())
            client = boto3.client("dynamodb", region_name="us-east-1")
        else:
            client = request.getfixturevalue("dynamodb_local").client("dynamodb")
        create_tables(client, f"{name}-events", name)
        yield CountsTable(client, name, dataclasses.replace(settings, counts_table=name), previous_release_until_ms=0, workers=1)


@pytest.fixture(
    scope="module", params=["moto", pytest.param("dynamodb-local", marks=[pytest.mark.dynamodb_local, pytest.mark.sweep])]
)
def world(request):
    """The table adopted on moto or on DynamoDB Local: the backfill killed after two segments (what is read then
    is kept), run again to the end, the stream's records after count-from counted."""
    with counts_table(request, request.param) as table:
        yield from adopted(table)


def adopted(table: CountsTable):
    """The world built in ``table``, yielded with the clock at NOW."""
    events = history()
    exported = [image(id=f"x{n}", counter=counter, ts=ts) for n, (ts, arrival, counter) in enumerate(events) if arrival < COUNT_FROM]
    live = [event for event in events if event[1] >= COUNT_FROM]
    with pytest.raises(RuntimeError):
        backfill(table, exported, fail_after=2)
    interrupted = {zone: progress(table, zone) for zone in SETTINGS.kept_zones}
    with freeze_time(NOW_TEXT):
        with pytest.raises(CalendarError) as refused:
            read(table, COUNTERS[0], "day", "UTC", *LAST_DAYS)
    backfill(table, exported)
    deliver(table, live)
    with freeze_time(NOW_TEXT):
        yield World(table, events, interrupted, refused.value)


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
    assert all(found == Progress() for found in world.interrupted.values())
    assert "no day of UTC is closed yet" in str(world.refused)


def test_adoption_is_recorded_in_every_kept_zone(world):
    for zone in SETTINGS.kept_zones:
        found = progress(world.table, zone)
        assert found.since is None and found.days is None  # no close has run
        assert found.adopted == (("orders/", *adopted_days(COUNT_FROM, zone, SETTINGS)),)


@pytest.mark.parametrize("zone", ["UTC", YORK])
def test_the_last_365_days_and_12_months_are_brute_force_before_any_close(world, zone):
    assert_brute_force(world.table, world.events, zones=(zone,))


def test_adoption_again_or_older_changes_nothing(world):
    table = world.table
    before = {zone: progress(table, zone) for zone in SETTINGS.kept_zones}
    record_adoption(table.client, table.table_name, table.settings, COUNT_FROM)
    record_adoption(table.client, table.table_name, table.settings, COUNT_FROM - 10 * DAY_MS)
    assert {zone: progress(table, zone) for zone in SETTINGS.kept_zones} == before


@pytest.mark.parametrize("days", [2, -2])
def test_the_table_adopted_is_not_backfilled_again_at_another_instant(world, days):
    """A redeploy with a new countFrom, or the table adopted again into the same counts table: an export at another
    instant holds the items counted already, by the backfill and by the stream since. Refused in one line, before
    an export is started, for as long as the table's days and months hold what the first one counted."""
    table, other = world.table, iso_second(COUNT_FROM + days * DAY_MS)
    again = f"{TABLE_ARN}/export/02"
    with pytest.raises(BackfillClaimed) as refused:
        table.claim_backfill(TABLE_ARN, other, again, (COUNT_FROM + days * DAY_MS + SETTINGS.hour_retention_ms) // 1000)
    assert str(refused.value).startswith(
        f"the history of {TABLE_ARN} is counted already, at {iso_second(COUNT_FROM)} from export {EXPORT}, and the "
        f"stream has counted since: a whole-table backfill at {other} would count those items twice;")
    assert "\n" not in str(refused.value)
    assert "no new export is started" in table.new_export_refusal(TABLE_ARN, other)
    table.claim_backfill(TABLE_ARN, iso_second(COUNT_FROM), EXPORT, 0)  # the first one, resumed, may go on
    assert table.new_export_refusal(TABLE_ARN, other, rules=("refunds",)) is None  # a rule's history is its own
    claims = table.client.query(TableName=table.table_name, KeyConditionExpression="pk = :pk",
                                ExpressionAttributeValues={":pk": {"S": BACKFILL_PREFIX + TABLE_ARN}}, ConsistentRead=True)
    assert [claim["sk"]["S"] for claim in claims["Items"]] == [iso_second(COUNT_FROM)]
    assert "ttl" not in claims["Items"][0]  # kept for good: the days and months it counted outlive any hour


class Stopping(Closer):
    """A close killed once it has written the days of a run, before their progress moved: its rerun finds them
    written, and a read meanwhile takes them from hours."""

    def __init__(self, table: CountsTable) -> None:
        super().__init__(table, workers=1)
        self.wrote: list[str] = []

    def _commit(self, segment, summary) -> None:
        super()._commit(segment, summary)
        self.wrote += [item.sort_key for _, item in segment.deltas]

    def finish(self, periods) -> None:
        if self.wrote:
            raise RuntimeError("killed")
        super().finish(periods)


def test_after_the_first_close_the_reads_are_the_same(world):
    """Last: the first close, killed after writing days, run again: it closes every day still whole in the hours,
    adopted ones included, each once; the reads of a close half done are exact too."""
    table = world.table
    stopping = Stopping(table)
    with pytest.raises(RuntimeError):
        while stopping.close_due(NOW).periods:  # the days only the export and late records reach write nothing
            pass
    assert stopping.wrote
    for written in stopping.wrote:  # D#<zone>@<day>: not yet closed for readers
        zone, day = written[2:].split("@")
        assert progress(table, zone).days < date.fromisoformat(day)
    assert_brute_force(table, world.events)
    while Closer(table, workers=1).close_due(NOW).periods:
        pass
    reported = progress_json(progress(table, YORK))
    assert reported["days"] is not None and reported["adopted"] == {"orders/": "2027-10-17..2028-11-18"}
    assert_brute_force(table, world.events)


@pytest.mark.parametrize(
    "backend", ["moto", pytest.param("dynamodb-local", marks=[pytest.mark.dynamodb_local, pytest.mark.sweep])])
def test_a_first_close_racing_the_backfill_and_late_records_adds_nothing_twice(request, backend):
    """The backfill killed after a segment; the stream's records after count-from (late ones of adopted days
    among them) counted; the first close killed after writing days, then run to the end, all before the backfill
    runs again and records the adoption. Every day and month equal to brute force then, and after a close again.
    Hours are kept two weeks here, so that the first close has a dozen days to close, not three months; the last
    120 days of the history: the older ones reach their days and months alone."""
    events = [event for event in history() if event[0] >= COUNT_FROM - 120 * DAY_MS]
    exported = [image(id=f"x{n}", counter=counter, ts=ts) for n, (ts, arrival, counter) in enumerate(events) if arrival < COUNT_FROM]
    with counts_table(request, backend, dataclasses.replace(SETTINGS, hour_retention_ms=14 * DAY_MS)) as table:
        with pytest.raises(RuntimeError):
            backfill(table, exported, fail_after=1)
        deliver(table, [event for event in events if event[1] >= COUNT_FROM])
        stopping = Stopping(table)
        with pytest.raises(RuntimeError):
            while stopping.close_due(NOW).periods:
                pass
        while Closer(table, workers=1).close_due(NOW).periods:
            pass
        raced = progress(table, YORK)
        assert raced.since is not None and raced.days is not None and not raced.adopted
        backfill(table, exported)
        with freeze_time(NOW_TEXT):
            assert_brute_force(table, events)
            while Closer(table, workers=1).close_due(NOW).periods:
                pass
            assert_brute_force(table, events)


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
    with pytest.raises(CalendarError) as days:
        read(world.table, COUNTERS[0], "day", zone, date(2027, 10, 1), date(2027, 12, 1))
    with pytest.raises(CalendarError) as months:
        read(world.table, COUNTERS[0], "month", zone, date(2027, 10, 1), date(2028, 1, 1))
    assert "days are kept from 2027-10-17 (since the backfill)" in str(days.value)
    assert "a range may begin on 2027-10-20 or later" in str(days.value)  # the first day item still kept at NOW
    assert "months are kept from 2027-11 (since the backfill)" in str(months.value)
    assert str(months.value).endswith("a range may begin on 2027-10-20 or later")  # no month kept begins sooner
