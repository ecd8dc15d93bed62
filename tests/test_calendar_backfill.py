"""A calendar prefix declared on a live table, and its older history counted into days and months alone, on moto.

The deployment counts from 2028-08-12 with days kept for views/ only; its closes run (the test begins a week
before the last of them, from the progress they left); orders/ is declared on
2028-11-20T17:30Z with a countFrom of its own (calendarCountFrom), so from then on its late records climb to their
days. The events table holds 412 days of orders/ and views/ history, crowded about the midnights of UTC and New
York, over both of New York's daylight saving changes, 29 February and month ends; orders/gust is silent from
March to September; some of it arrives late, after the prefix's instant, and live traffic streams in about it.
After the first close that closes orders/ days, ``backfill.py --calendar orders/`` counts an export taken at
that instant: killed mid-commit, then run again to the end, once in this process and once by the in-account
stages on a copy of the table. Every day and month of orders/ then reads as brute force over the events, in UTC
and New York, and nothing but orders/' days and months (and the progress saying so) was written.
"""

from __future__ import annotations

import dataclasses
import json
import random
from datetime import date, timedelta

import boto3
import pytest
from export_support import BUCKET, PREFIX, TABLE_ARN, ExportsOf, put_export
from factories import image, stream_record, window_event
from freezegun import freeze_time
from history_support import brute, calendar_read, daily_events, local_day
from moto import mock_aws
from moto_tables import COUNTS, EVENTS
from sweeps import sweep

import tally.backfill as backfill_module
from tally import parallel_backfill
from tally.backfill import BackfillSummary, HistoryScope, ScopeRefused, WriteRateLimit, backfill_export
from tally.closing import Closer
from tally.core.buckets import Bucket
from tally.core.ladder import LATE_AFTER_MS, adopted_days, history_days
from tally.core.settings import Settings, SettingsError
from tally.core.tables import COUNTS_TABLE
from tally.core.units import DAY_MS, HOUR_MS, MINUTE_MS
from tally.core.windows import parse_instant
from tally.dynamo.backfill import BackfillClaimed
from tally.dynamo.closing import HistoryNotReady, ProgressItems, history_runs, record_adoption, record_history
from tally.dynamo.counts_table import CountsTable
from tally.dynamo.directory import CounterDirectory
from tally.dynamo.tables import create_tables
from tally.invocation import process
from tally.parallel_backfill import Backfill, BackfillConfig

YORK = "America/New_York"
ADDED = parse_instant("2028-11-20T17:30:00Z")  # orders/ counts from here
DECLARED = ADDED - DAY_MS  # deployed with orders/ and its countFrom a day before it
DEPLOYED = ADDED - 100 * DAY_MS  # the deployment's countFrom
FIRST_CLOSE = ADDED - 3 * DAY_MS  # closes of views/ days ran before orders/ was declared
NOW_TEXT = "2028-11-23T23:30:00Z"
NOW = parse_instant(NOW_TEXT)
COUNTERS = ("orders/bolt", "orders/gust")
OTHER = "views/home"
BEFORE = Settings(counts_table=COUNTS, events_table=EVENTS, calendar_prefixes=("views/",), calendar_zones=(YORK,),
                  count_from_ms=DEPLOYED)
AFTER = dataclasses.replace(BEFORE, calendar_prefixes=("views/", "orders/"), calendar_count_from=(("orders/", ADDED),))
EXPORT_ARN = f"{TABLE_ARN}/export/01795000000000-abcdef"
SCOPE = f"{backfill_module.CALENDAR_SCOPE}orders/"
SILENT = (date(2028, 3, 1), date(2028, 10, 1))  # orders/gust counts nothing in between
STAGES_TABLE = "counts-stages"


def history() -> list[tuple[int, int, str]]:
    """(event time, arrival, counter): an event every other day or so of each counter for 412 days before the
    prefix's instant, most within an hour of a midnight of UTC or New York, arriving on time or late (some after the
    instant), live traffic about the instant, and late records of old days arriving in the day before it (the
    deployment already declares the prefix) and after it."""
    rng = random.Random(58)

    def skip(counter: str, day: int) -> bool:  # orders/gust is silent for months; every counter some days
        return counter == "orders/gust" and SILENT[0] <= local_day(day, "UTC") < SILENT[1] or rng.random() < 0.5

    found = daily_events(rng, 412, ADDED, (*COUNTERS, OTHER), skip)
    for _ in range(60):  # live, on time: about the instant
        ts = ADDED - 30 * HOUR_MS + rng.randrange(NOW - ADDED + 29 * HOUR_MS)
        found.append((ts, ts + rng.randrange(10 * MINUTE_MS), rng.choice((*COUNTERS, OTHER))))
    for _ in range(6):  # late records of days long past, arriving between the deployment and the instant
        found.append((ADDED - rng.randrange(2 * DAY_MS, 200 * DAY_MS), DECLARED + rng.randrange(DAY_MS), rng.choice(COUNTERS)))
    for _ in range(20):  # late records of days long past, arriving after the instant
        ts = ADDED - rng.randrange(2 * DAY_MS, 300 * DAY_MS)
        found.append((ts, ADDED + rng.randrange(NOW - ADDED - HOUR_MS), rng.choice((*COUNTERS, OTHER))))
    return sorted((event for event in found if event[1] < NOW), key=lambda event: event[1])


def deliver(table: CountsTable, settings: Settings, events: list[tuple[int, int, str]], first: int) -> None:
    records = [stream_record(image(id=f"s{first + n}", counter=counter, ts=ts), arrival_s=arrival / 1000,
                             sequence=str(10**20 + first + n)) for n, (ts, arrival, counter) in enumerate(events)]
    commit = CounterDirectory(table.client, COUNTS, settings).recording(table.commit)
    process(window_event(records, final=True), commit, settings)


def close_all(table: CountsTable, settings: Settings, now_ms: int) -> None:
    closer = Closer(table, settings, workers=1)
    while closer.close_due(now_ms).periods:
        pass


def backfill_here(client, table_name: str, exported: list[dict], fail_after: int | None = None) -> BackfillSummary:
    """``backfill.py --calendar orders/ --here`` on the export, in segments of 300 buckets; ``fail_after`` segments
    committed, the next commit raises (a process killed mid-commit). Progress is recorded once all are in."""
    settings = dataclasses.replace(AFTER, counts_table=table_name)
    table = CountsTable(client, table_name, settings, previous_release_until_ms=0, workers=1)
    scope = HistoryScope.of(settings, calendar=("orders/",))
    runs = history_runs(client, table_name, settings, scope.calendar, scope.count_from_ms)
    committed = []

    def counting(segment, writer):
        if fail_after is not None and len(committed) == fail_after:
            raise RuntimeError("killed")
        committed.append(segment)
        return table.commit(segment, writer)

    summary = BackfillSummary()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(backfill_module, "BACKFILL_SEGMENT_ITEMS", 300)
        backfill_export(EXPORT_ARN, [("data/1.json.gz", exported)], scope=scope, settings=scope.settings_for(settings),
                        commit=counting, limit=WriteRateLimit(1e9), summary=summary, runs=runs)
    record_history(client, table_name, runs)
    return summary


def contents(client, table_name: str) -> dict[tuple[str, str], dict]:
    """Every item but the backfill's claims, without watermarks: what a reader sees."""
    found = {}
    for page in client.get_paginator("scan").paginate(TableName=table_name, ConsistentRead=True):
        for item in page["Items"]:
            if not item["pk"]["S"].startswith("#backfill#"):
                found[(item["pk"]["S"], item["sk"]["S"])] = {k: v for k, v in item.items() if not k.startswith("~")}
    return found


def copy_table(client, source: str, target: str) -> None:
    client.create_table(**COUNTS_TABLE.create_table_request(target))
    for page in client.get_paginator("scan").paginate(TableName=source, ConsistentRead=True):
        for item in page["Items"]:
            client.put_item(TableName=target, Item=item)


def stages_of(described, s3, ranges: int) -> Backfill:
    return Backfill(described, s3, dataclasses.replace(AFTER, counts_table=STAGES_TABLE), BackfillConfig(BUCKET, PREFIX, ranges=ranges))


def run_stages(backfill: Backfill) -> dict:
    """The state machine's stages on the export, files and ranges in a shuffled order."""
    planned = backfill.plan(EXPORT_ARN, SCOPE)
    files = json.loads(backfill.s3.get_object(Bucket=planned["bucket"], Key=planned["filesKey"])["Body"].read())
    for file in random.Random(3).sample(files, len(files)):
        backfill.fold_file(planned["work"], file["key"], file["index"], planned["rules"], file.get("days"))
    for number in random.Random(4).sample(planned["ranges"], len(planned["ranges"])):
        backfill.commit_range(planned["work"], EXPORT_ARN, number, planned["rules"])
    return backfill.summarize(planned["work"], planned["rules"])


@pytest.fixture(scope="module")
def world():
    """The deployment before and after orders/ was declared, its closes, then the calendar backfill: killed after
    two segments (what is read then is kept), run again to the end, and in the account on a copy of the table."""
    events = history()
    exported = [image(id=f"x{n}", counter=counter, ts=ts) for n, (ts, arrival, counter) in enumerate(events) if arrival < ADDED]
    with mock_aws(), pytest.MonkeyPatch.context() as patch:
        client = boto3.client("dynamodb", region_name="us-east-1")
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket=BUCKET)
        create_tables(client, EVENTS, COUNTS)
        before = CountsTable(client, COUNTS, BEFORE, previous_release_until_ms=0, workers=1)
        after = CountsTable(client, COUNTS, AFTER, previous_release_until_ms=0, workers=1)
        assert FIRST_CLOSE < DECLARED
        deliver(before, BEFORE, [e for e in events if DEPLOYED <= e[1] < FIRST_CLOSE], 0)
        for zone in BEFORE.kept_zones:  # where the daily closes of views/ days had got to a week before
            ProgressItems(client, COUNTS).advance(zone, Bucket.of_day(local_day(FIRST_CLOSE, zone) - timedelta(days=9), zone),
                                                  Bucket.of_month(date(2028, 10, 1), zone), Bucket.of_day(date(2028, 9, 1), zone),
                                                  ("views/",))
        close_all(before, BEFORE, FIRST_CLOSE)
        deliver(before, BEFORE, [e for e in events if FIRST_CLOSE <= e[1] < DECLARED], 10**6)
        deliver(after, AFTER, [e for e in events if DECLARED <= e[1] < ADDED], 3 * 10**6)
        with pytest.raises(HistoryNotReady):  # no close has closed orders/ days yet
            history_runs(client, COUNTS, AFTER, ("orders/",), ADDED)
        deliver(after, AFTER, [e for e in events if e[1] >= ADDED], 2 * 10**6)
        close_all(after, AFTER, NOW)
        copy_table(client, COUNTS, STAGES_TABLE)
        untouched = contents(client, COUNTS)
        with pytest.raises(RuntimeError):
            backfill_here(client, COUNTS, exported, fail_after=1)
        interrupted = {zone: ProgressItems(client, COUNTS).read(zone) for zone in AFTER.kept_zones}
        rerun = backfill_here(client, COUNTS, exported)
        done = contents(client, COUNTS)
        patch.setattr(parallel_backfill, "now_ms", lambda: NOW)
        described = ExportsOf(client, put_export(s3, exported, files=3, at_ms=ADDED))
        stages = run_stages(stages_of(described, s3, ranges=4))
        with freeze_time(NOW_TEXT):
            yield {"client": client, "s3": s3, "described": described, "events": events, "untouched": untouched,
                   "interrupted": interrupted, "done": done, "rerun": rerun, "stages": stages}


def read(client, counter: str, period: str, zone: str, start: date, end: date) -> dict[date, int]:
    return calendar_read(client, COUNTS, AFTER, counter, period, zone, start, end)


LAST_DAYS = (local_day(NOW, "UTC") - timedelta(days=364), local_day(NOW, "UTC") + timedelta(days=1))
MONTHS = (date(2027, 12, 1), date(2028, 12, 1))


def test_the_history_holds_what_days_get_wrong():
    events = history()
    days = {local_day(ts, "UTC") for ts, _, _ in events}
    assert {date(2028, 2, 29), date(2028, 3, 12), date(2028, 11, 5), date(2027, 11, 7)} <= days
    after = [e for e in events if e[1] >= ADDED]
    assert sum(ts < ADDED - 2 * DAY_MS for ts, _, _ in after) >= 15  # late, to the days the backfill writes
    assert sum(a < DEPLOYED for _, a, _ in events) > 300  # older than the deployment: in the export alone
    # late, arriving after the deployment declared orders/ but before its instant: in the export, not in days
    assert sum(DECLARED <= a < ADDED and a - ts > LATE_AFTER_MS + HOUR_MS and c in COUNTERS for ts, a, c in events) >= 2


def test_the_prefix_days_begin_where_its_first_close_began_and_the_backfill_writes_those_before(world):
    client = world["client"]
    for zone in AFTER.kept_zones:
        progress = ProgressItems(client, COUNTS).read(zone)
        since = progress.of_counter("orders/bolt").since
        assert progress.since < since <= local_day(ADDED, zone)  # the zone's closes began long before the prefix's
        first, last = history_days(ADDED, zone, AFTER, since)
        assert (first, last) == (adopted_days(ADDED, zone, AFTER)[0], since - timedelta(days=1))
        assert dict((prefix, (a, b)) for prefix, a, b in progress.adopted) == {"orders/": (first, last)}


def test_only_orders_days_and_months_are_written_and_only_before_its_closed_days(world):
    client, untouched, done = world["client"], world["untouched"], world["done"]
    changed = {key for key in done if done[key] != untouched.get(key)}
    assert {key for key in untouched if key not in done} == set()
    counters = {pk for pk, _ in changed}
    assert counters == {*COUNTERS, "#calendar"}  # no minute, hour, views/, rejection or directory item
    kinds = {sk.split("#")[0] for pk, sk in changed if pk != "#calendar"}
    assert kinds == {"D", "MO"}
    for zone in AFTER.kept_zones:
        since = ProgressItems(client, COUNTS).read(zone).of_counter("orders/bolt").since
        days = [date.fromisoformat(sk.split("@")[1]) for pk, sk in changed if sk.startswith(f"D#{zone}@")]
        assert days and max(days) < since
        for pk, sk in changed:  # each day written carries the mark of what it took, as a late record's does
            if sk.startswith(f"D#{zone}@"):
                assert int(done[(pk, sk)]["late"]["N"]) - int(untouched.get((pk, sk), {}).get("late", {"N": "0"})["N"]) \
                    == int(done[(pk, sk)]["count"]["N"]) - int(untouched.get((pk, sk), {}).get("count", {"N": "0"})["N"])


def test_an_interrupted_backfill_records_nothing_and_its_rerun_skips_what_was_in(world):
    assert all(progress.adopted == () for progress in world["interrupted"].values())
    assert world["rerun"].updates_already_applied > 0 and world["rerun"].bucket_updates > 0


def test_the_stages_write_each_counter_day_and_month_with_events_once_per_zone(world):
    """The floor: the stages fold the whole export before committing, so each item takes one update."""
    written = {key for key, item in world["done"].items() if item != world["untouched"].get(key) and key[0] != "#calendar"}
    assert world["stages"]["bucket_updates"] == len(written) and world["stages"]["write_units"] == len(written)


@pytest.mark.parametrize("zone", ["UTC", YORK])
def test_every_day_and_month_of_the_prefix_is_brute_force(world, zone):
    client, events = world["client"], world["events"]
    for counter in COUNTERS:
        assert read(client, counter, "day", zone, *LAST_DAYS) == brute(events, counter, zone, "day", *LAST_DAYS), counter
        assert read(client, counter, "month", zone, *MONTHS) == brute(events, counter, zone, "month", *MONTHS), counter


def test_the_in_account_stages_write_the_same(world):
    client = world["client"]
    assert contents(client, STAGES_TABLE) == contents(client, COUNTS)
    assert world["stages"]["counted"] == dict(world["rerun"].counted) and set(world["stages"]["counted"]) == set(COUNTERS)


@pytest.mark.parametrize("ranges", sweep([4, 3]))
def test_the_in_account_stages_run_again_write_nothing_more(world, ranges):
    """Redriven (the same ranges: what each committed is in its progress), or run again in other ranges (a work
    folder of their own: the one watermark stops every update)."""
    client = world["client"]
    before = contents(client, STAGES_TABLE)
    again = run_stages(stages_of(world["described"], world["s3"], ranges=ranges))
    assert contents(client, STAGES_TABLE) == before
    if ranges == 4:
        assert again == world["stages"]
    else:
        assert again["bucket_updates"] == 0 and again["updates_already_applied"] == world["stages"]["bucket_updates"]


# Refusals: each one line, before anything is claimed or written.

@pytest.mark.parametrize(
    ("settings", "calendar", "count_from", "message"),
    [
        (AFTER, ("refunds/",), None, "--calendar: 'refunds/' is not a calendar prefix (calendarPrefixes: 'views/', 'orders/')"),
        (AFTER, ("views/",), None, "calendar prefix 'views/' has no countFrom of its own (calendarCountFrom)"),
        (BEFORE.__class__(calendar_prefixes=()), ("orders/",), None, "none are declared"),
        (AFTER, ("orders/",), ADDED + 1000, "--count-from 2028-11-20T17:30:01Z is not the countFrom of the calendar prefixes named"),
        (dataclasses.replace(AFTER, calendar_prefixes=("views/", "orders/", "orders/eu/")), ("orders/",), None,
         "calendar prefixes 'orders/' and 'orders/eu/' overlap"),
        (dataclasses.replace(AFTER, calendar_prefixes=("views/", "orders/", "refunds/"),
                             calendar_count_from=(("orders/", ADDED), ("refunds/", ADDED + 1000))), ("orders/", "refunds/"), None,
         "count from different instants"),
    ],
)
def test_what_a_calendar_backfill_cannot_count_exactly_once_is_refused(settings, calendar, count_from, message):
    with pytest.raises(ScopeRefused) as refused:
        HistoryScope.of(settings, (), count_from, calendar)
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_a_calendar_backfill_is_refused_before_its_instant_and_from_an_export_taken_at_another():
    scope = HistoryScope.of(AFTER, calendar=("orders/",))
    assert "cannot be counted before 2028-11-20T17:30:00Z" in scope.refusal_at(ADDED - 1000)
    assert scope.refusal_at(ADDED + 30 * DAY_MS) is None  # no minute or hour: no day's deadline
    assert "shows the table at 2028-11-20T17:30:01Z" in scope.export_refusal(EXPORT_ARN, ADDED + 1000)
    assert HistoryScope.parse(AFTER, scope.text) == scope and scope.text == "calendar:orders/"
    with pytest.raises(ScopeRefused, match="--calendar and --rules"):
        HistoryScope.of(AFTER, ("orders",), None, ("orders/",))


def test_a_second_export_of_the_prefix_history_is_refused_and_no_new_one_started(world):
    client = world["client"]
    claims = CountsTable(client, STAGES_TABLE, AFTER, previous_release_until_ms=0)  # claimed by the stages' plan
    with pytest.raises(BackfillClaimed, match=r"^the history of calendar prefix 'orders/' is counted from export .*abcdef"):
        claims.claim_backfill(TABLE_ARN, "2028-11-20T17:30:00Z", f"{TABLE_ARN}/export/other", 2_000_000_000,
                              calendar=("orders/",))
    refusal = claims.new_export_refusal(TABLE_ARN, "2028-11-20T17:30:00Z", calendar=("orders/",))
    assert "no new export is started" in refusal and f"--calendar orders/ --export-arn {EXPORT_ARN}" in refusal
    with pytest.raises(BackfillClaimed, match="was begun in the account"):
        claims.claim_backfill(TABLE_ARN, "2028-11-20T17:30:00Z", EXPORT_ARN, 2_000_000_000, calendar=("orders/",))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"orders/": "2028-11-20T17:30:00Z"}', None),
        ('{"refunds/": "2028-11-20T17:30:00Z"}', "'refunds/' is not one of calendarPrefixes"),
        ('{"orders/": "yesterday"}', "calendar prefix 'orders/': count-from"),
        ('["orders/"]', "must be a JSON object"),
        ('{"orders/": 1}', "counts from before the deployment's countFrom"),
    ],
)
def test_a_prefix_countfrom_is_read_from_the_environment_and_checked(text, message):
    env = {"TALLY_CALENDAR_PREFIXES": '["orders/"]', "TALLY_COUNT_FROM": "2028-08-12T17:30:00Z",
           "TALLY_CALENDAR_COUNT_FROM": text}
    if message is None:
        settings = Settings.from_env(env)
        assert settings.calendar_from("orders/") == ADDED
        assert Settings.from_env({**env, **settings.counting_environment()}) == settings
        return
    with pytest.raises(SettingsError) as refused:
        Settings.from_env(env)
    assert message in str(refused.value)


def test_a_record_climbs_to_its_days_only_from_its_prefix_instant():
    assert not AFTER.climbs("orders/bolt", ADDED - 1000) and AFTER.climbs("orders/bolt", ADDED)
    assert AFTER.climbs("views/home", DEPLOYED) and not AFTER.climbs("carts/x", ADDED)


def test_the_month_the_prefix_days_began_in_is_whole_in_its_item_once_closed(world):
    """Last (it closes more): that month holds days the backfill wrote, marked, and days closed from hours; its
    close subtracts the marks, so its item holds every event once, though reads take it from its days."""
    client, events = world["client"], world["events"]
    close_all(CountsTable(client, COUNTS, AFTER, previous_release_until_ms=0, workers=1), AFTER, NOW + 20 * DAY_MS)
    november = (date(2028, 11, 1), date(2028, 12, 1))
    for zone in AFTER.kept_zones:
        for counter in COUNTERS:
            item = client.get_item(TableName=COUNTS, Key={"pk": {"S": counter}, "sk": {"S": f"MO#{zone}@2028-11"}})["Item"]
            assert {november[0]: int(item["count"]["N"])} == brute(events, counter, zone, "month", *november)


def test_the_whole_tables_backfill_records_no_adoption_of_a_prefix_with_an_instant_of_its_own():
    """Its records climbed to no day of that prefix (their arrival, the table's countFrom, is before its instant)."""
    with mock_aws():  # tables of its own: the world's may be mocked still
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_tables(client, "events-adopted", "counts-adopted")
        record_adoption(client, "counts-adopted", AFTER, DEPLOYED)
        for zone in AFTER.kept_zones:
            assert [prefix for prefix, _, _ in ProgressItems(client, "counts-adopted").read(zone).adopted] == ["views/"]
