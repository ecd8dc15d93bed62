"""count_windows on moto, fed by the real handler path: both plans against brute force."""

import json
import random
from decimal import Decimal

import boto3
import pytest
from freezegun import freeze_time
from moto import mock_aws

from moto_tables import COUNTS, EVENTS, no_sleep_backoff
from factories import counter_record, image, stream_record, window_event
from tally.dynamo.counts_table import CountsTable
from tally.dynamo.tables import create_tables
from tally.invocation import process
from tally.core.plans import PlanKind, Series, WindowUnavailable
from tally.query import count_windows, validate_query_counter

from tally.core.settings import Settings
from tally.core.units import DAY_MS, HOUR_MS, MINUTE_MS
from tally.core.buckets import iso_minute
from tally.core.rules import parse_rules
from tally.core.windows import QueryError, Window, parse_instant

NOW = parse_instant("2026-11-22T14:37:12Z")


def ingest(counts_table, settings, events):
    """Events (counter, ms) through the handler path, arriving at their own time, one window per 100."""
    ordered = sorted(events, key=lambda e: e[1])
    for start in range(0, len(ordered), 100):
        chunk = [counter_record(counter, ms) for counter, ms in ordered[start : start + 100]]
        process(window_event(chunk, final=True), counts_table.commit, settings)


def brute_force(events, counter, window):
    return sum(1 for c, ms in events if c == counter and window.covers(ms))


@pytest.fixture(scope="module")
def ingested():
    """One table of buckets for the whole module: moto takes ~10 ms per bucket update."""
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_tables(client, EVENTS, COUNTS)
        settings = Settings(counts_table=COUNTS, events_table=EVENTS)
        table = CountsTable(client, COUNTS, settings, backoff=no_sleep_backoff)
        rng = random.Random(7)
        events = [(rng.choice("abc"), NOW - rng.randrange(26 * HOUR_MS)) for _ in range(900)]
        ingest(table, settings, events)
        yield table, events


@pytest.fixture
def counts_table(ingested):
    return ingested[0]


@pytest.fixture
def workload(ingested):
    return ingested[1]


@freeze_time("2026-11-22T14:37:12Z")
def test_last_24_hours_by_both_plans_equals_brute_force(counts_table, workload):
    window = Window.ending(NOW)
    for plan in PlanKind:
        results = count_windows(counts_table, ["a", "b", "c"], plan=plan)
        assert [r.total for r in results] == [brute_force(workload, c, window) for c in "abc"]
        assert all(r.window == window for r in results)
        assert all(sum(r.by_hour.values()) == r.total for r in results)


@freeze_time("2026-11-22T14:37:12Z")
def test_windows_ending_in_the_past_at_every_minute_offset(counts_table, workload):
    for offset in range(60):
        at = NOW - HOUR_MS - 37 * MINUTE_MS + offset * MINUTE_MS + 5_000
        window = Window.ending(at, 90 * MINUTE_MS if offset % 2 else DAY_MS - 2 * HOUR_MS)
        batch = count_windows(counts_table, ["a"], at_ms=at, length_ms=window.minutes * MINUTE_MS)[0]
        ranged = count_windows(counts_table, ["a"], at_ms=at, length_ms=window.minutes * MINUTE_MS, plan=PlanKind.RANGE)[0]
        assert batch.total == ranged.total == brute_force(workload, "a", window), offset


def test_the_per_hour_breakdown_matches_events_per_hour(counts_table, workload):
    [result] = count_windows(counts_table, ["b"], now=NOW, consistent=True)
    window = Window.ending(NOW)
    for hour, count in result.by_hour.items():
        assert hour.tzinfo is not None and hour.minute == 0
        hour_index = int(hour.timestamp()) * 1000 // HOUR_MS
        assert count == sum(1 for c, ms in workload if c == "b" and window.covers(ms) and ms // HOUR_MS == hour_index)
    assert len(result.by_hour) == 25  # the oldest partial hour, 23 full hours, the current partial hour


def test_a_24h_query_ending_now_reads_one_batch_request(counts_table, workload):
    [result] = count_windows(counts_table, ["a"], now=NOW)
    assert result.requests == 1
    assert result.keys <= 83
    [fast] = count_windows(counts_table, ["a"], now=NOW, allow_transient=True)
    assert fast.requests == 1 and fast.keys <= 59 and fast.total == result.total
    [ranged] = count_windows(counts_table, ["a"], now=NOW, plan=PlanKind.RANGE)
    assert ranged.requests <= 3


def test_many_counters_share_batch_requests(counts_table, workload):
    results = count_windows(counts_table, ["a", "b", "c", "missing"], now=NOW, at_ms=NOW - 3 * HOUR_MS)
    assert results[0].requests == -(-sum(r.keys for r in results) // 100)
    assert results[3].total == 0


def test_unknown_counters_count_zero_and_invalid_ones_are_refused(counts_table, workload):
    assert count_windows(counts_table, ["never-seen"], now=NOW)[0].total == 0
    with pytest.raises(QueryError):
        count_windows(counts_table, ["#segment#1"], now=NOW)


def test_rejection_counters_are_queryable_but_not_other_reserved_names():
    assert validate_query_counter("#rejected#late_event") == "#rejected#late_event"
    with pytest.raises(QueryError):
        validate_query_counter("#rejected#nope")
    with pytest.raises(QueryError):
        validate_query_counter("#rejected#not_insert")


def test_a_week_ending_mid_hour_is_refused_but_an_hour_aligned_week_is_answered(counts_table, workload):
    with pytest.raises(WindowUnavailable):
        count_windows(counts_table, ["a"], now=NOW, length_ms=7 * DAY_MS)
    aligned_end = NOW - NOW % HOUR_MS
    [result] = count_windows(counts_table, ["a"], now=NOW, at_ms=aligned_end, length_ms=7 * DAY_MS)
    assert result.total == brute_force(workload, "a", Window.ending(aligned_end, 7 * DAY_MS))


def test_json_form_names_the_window_and_cost(counts_table, workload):
    [result] = count_windows(counts_table, ["a"], now=NOW)
    as_json = result.as_json()
    assert as_json["counter"] == "a"
    assert (as_json["start"], as_json["end"]) == ("2026-11-21T14:38Z", "2026-11-22T14:38Z")
    assert as_json["total"] == result.total
    assert (as_json["plan"], as_json["keys"], as_json["requests"]) == ("batch", result.keys, 1)


@freeze_time("2026-11-22T14:37:12Z")
def test_with_bucket_lanes_shards_write_apart_and_both_plans_sum_the_lanes():
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_tables(client, "lanes-events", "lanes-counts")  # the module's own tables may share this mock
        settings = Settings(counts_table="lanes-counts", events_table="lanes-events", bucket_lanes=4)
        table = CountsTable(client, "lanes-counts", settings, backoff=no_sleep_backoff)
        rng = random.Random(14)
        events = sorted((("hot", NOW - rng.randrange(3 * HOUR_MS)) for _ in range(240)), key=lambda e: e[1])
        for shard in range(6):  # every shard carries the hot counter, as random event ids spread it
            records = [counter_record(counter, ms) for counter, ms in events[shard::6]]
            process(window_event(records, final=True, shard_id=f"shardId-{shard:04d}"), table.commit, settings)

        stored = [item["sk"]["S"] for item in client.scan(TableName="lanes-counts")["Items"] if item["pk"]["S"] == "hot"]
        lanes = {sk.count("#") == 2 and sk.rsplit("#", 1)[1] for sk in stored}
        assert len(lanes) > 1  # the shards' writes to one bucket went to several items
        for offset in range(0, 180, 7):
            at = NOW - offset * MINUTE_MS
            window = Window.ending(at, 90 * MINUTE_MS)
            for plan in PlanKind:
                [result] = count_windows(table, ["hot"], at_ms=at, length_ms=90 * MINUTE_MS, plan=plan)
                assert result.total == brute_force(events, "hot", window), (offset, plan)


def test_quantiles_in_json_keep_the_quantiles_as_written_and_answer_null_for_an_empty_window():
    rules = parse_rules(json.dumps([{"name": "load", "counter": "load/{page}", "histogram": "ms"}, {"counter": "all"}]))
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_tables(client, "q-events", "q-counts")
        settings = Settings(counts_table="q-counts", events_table="q-events", rules=rules)
        table = CountsTable(client, "q-counts", settings, backoff=no_sleep_backoff)
        values = [Decimal(v) for v in (20, 35, 35, 80, 400, 2900)]
        records = [
            stream_record(image(id=str(n), ts=NOW - n * MINUTE_MS, page="home", ms=v), arrival_s=NOW / 1000)
            for n, v in enumerate(values)
        ]
        process(window_event(records, final=True), table.commit, settings)

        asked = ["0.5", "0.50", "1", "0"]
        counters = ["load/home", "load/none", "all"]
        home, other, everything = count_windows(table, counters, now=NOW, quantiles=asked, series=Series.MINUTE)
        as_json = home.as_json()
        assert list(as_json["quantiles"]) == asked
        answers = {q: Decimal(text) for q, text in as_json["quantiles"].items()}
        for q, truth in {"0.5": 35, "0.50": 35, "1": 2900, "0": 20}.items():
            assert abs(answers[q] - truth) <= truth / 100, q
        low, high = Decimal(as_json["bounds"]["low"]), Decimal(as_json["bounds"]["high"])
        assert Decimal("19.6") < low <= 20 and 2900 <= high < Decimal("2958")
        assert list(as_json["quantiles_by_hour"]) == list(as_json["by_hour"])
        points = {point["start"]: point["quantiles"] for point in as_json["series"]}
        five_ago = points[iso_minute((NOW - 5 * MINUTE_MS) // MINUTE_MS * MINUTE_MS)]  # the minute of the 2900
        assert list(five_ago) == asked and all(abs(Decimal(v) - 2900) <= 29 for v in five_ago.values())
        assert all(q is None for q in points[iso_minute(NOW - 30 * MINUTE_MS)].values())  # a minute with no values

        empty = other.as_json()  # a rule could write it: its empty window answers null
        assert empty["quantiles"] == dict.fromkeys(asked) and empty["bounds"] == {"low": None, "high": None}
        assert "quantiles" not in everything.as_json()  # no histogram rule writes it
        [unasked] = count_windows(table, ["load/home"], now=NOW)
        assert "quantiles" not in unasked.as_json() and unasked.histogram.total == len(values)
