"""Reader.top on moto, fed through the commit path: certified top N and rising against brute force.

Events carry a weight (how many events of that counter at that instant), folded into segments and committed
with ``CountsTable.commit`` and the counter directory as the handler does: counts that pass the rank levels
without a stream record per event. One test takes the handler's own path, redelivered.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from freezegun import freeze_time
from hypothesis import HealthCheck, given, settings as hypothesis_settings, strategies as st
from moto import mock_aws

from backends import BACKENDS, count_on_server
from documents import code_block
from factories import SHARD_ID, STREAM_ARN, counter_record, window_event
from faults.checks import rank_levels
from moto_tables import COUNTS, EVENTS, no_sleep_backoff
from tally import QueryError, Reader
from tally.core.buckets import counted_buckets
from tally.core.commit import Writer
from tally.core.ranking import RANK_PREFIX, TopBudget, UnrankedPrefix, level_floor, level_of, lowest_level
from tally.core.segments import MAX_SEGMENT_ITEMS, Segment
from tally.core.settings import Settings
from tally.core.units import HOUR_MS, MINUTE_MS
from tally.core.windows import Window, parse_instant
from tally.dynamo.counts_table import CountsTable
from tally.dynamo.directory import CounterDirectory
from tally.dynamo.tables import create_tables
from tally.invocation import process

NOW_TEXT = "2026-11-22T14:37:12.250Z"
NOW = parse_instant(NOW_TEXT)
SETTINGS = Settings(counts_table=COUNTS, events_table=EVENTS, ranked_prefixes=("views/",))
NO_DIRECTORY = TopBudget(directory_names=0)  # certified from the rank records alone


def utc(ms: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)


def stream_batches(events: list[tuple[str, int]], shards: int = 1) -> list[dict]:
    """The events as the stream hands them over: batches of up to 400 records, spread over ``shards``."""
    ordered = sorted(events, key=lambda event: event[1])
    batches = []
    for shard in range(shards):
        mine = ordered[shard::shards]
        for start in range(0, len(mine), 400):
            records = [counter_record(name, ms, arrival_s=NOW / 1000) for name, ms in mine[start : start + 400]]
            batches.append(window_event(records, final=True, shard_id=f"{SHARD_ID}-{shard}"))
    return batches


def deliver(client, settings: Settings, batches: list[dict]) -> None:
    """Each batch through the handler's fold and commit (and the counter directory)."""
    table = CountsTable(client, settings.counts_table, settings, backoff=no_sleep_backoff)
    directory = CounterDirectory(client, settings.counts_table, settings)
    for event in batches:
        process(event, directory.recording(table.commit), settings)


def commit_events(client, settings: Settings, events: list[tuple[str, int, int]], shards: int = 1) -> None:
    """Weighted events (counter, time, how many), each shard's share folded into segments of at most
    MAX_SEGMENT_ITEMS bucket items in time order and committed as the handler commits them."""
    table = CountsTable(client, settings.counts_table, settings, backoff=no_sleep_backoff)
    commit = CounterDirectory(client, settings.counts_table, settings).recording(table.commit)
    ordered = sorted(events, key=lambda event: event[1])
    for shard in range(shards):
        writer = Writer.of_shard(STREAM_ARN, f"{SHARD_ID}-{shard}")
        segment = None
        for sequence, (name, ms, weight) in enumerate(ordered[shard::shards]):
            items = [(name, bucket) for bucket in counted_buckets(ms, NOW, settings)]
            if segment is None or len(segment.deltas.keys() | set(items)) > MAX_SEGMENT_ITEMS:
                if segment is not None:
                    commit(segment, writer)
                first = str(10**20 + sequence)
                segment = Segment(first_sequence=first, first_arrival_ms=NOW, last_sequence=first)
            for item in items:
                segment.deltas[item] = segment.deltas.get(item, 0) + weight
            segment.records += 1
        if segment is not None:
            commit(segment, writer)


def truth(events, prefix: str, window: Window) -> dict[str, int]:
    totals: dict[str, int] = {}
    for name, ms, weight in events:
        if name.startswith(prefix) and window.first_minute <= ms // MINUTE_MS <= window.last_minute:
            totals[name] = totals.get(name, 0) + weight
    return totals


def ranked(totals: dict[str, int]) -> list[tuple[str, int]]:
    return sorted(((c, v) for c, v in totals.items() if v > 0), key=lambda e: (-e[1], e[0]))


def at_some_minute(rng: random.Random, hours: int) -> int:
    """A time in the last ``hours``, in one of two minutes of its hour (fewer bucket items: a quicker setup)."""
    hour = (NOW // HOUR_MS - rng.randrange(hours)) * HOUR_MS
    return min(NOW - 1, hour + rng.choice([7, 31]) * MINUTE_MS + rng.randrange(MINUTE_MS))


def workload() -> list[tuple[str, int, int]]:
    """Pages read Zipf-like over 9 hours, 1,000 at a time (the top ten pass 11,623 events an hour, where every
    level is recorded; two with the very same count), a few jobs (a prefix that is not ranked), one counter a
    day old."""
    rng = random.Random(27)
    events = []
    for rank in range(1, 121):
        events += [(f"views/p{rank:03d}", at_some_minute(rng, 9), 1000) for _ in range(int(4000 / rank**1.1))]
    events += [(f"views/tie-{name}", at_some_minute(random.Random(5), 9), 1000) for name in "ab" for _ in range(150)]
    events += [(f"jobs/{name}", at_some_minute(rng, 20), 1) for name in ("acme", "zeta") for _ in range(40)]
    events += [("views/old", NOW - 30 * HOUR_MS - k, 1000) for k in range(500)]
    return events


@pytest.fixture(scope="module")
def world():
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_tables(client, EVENTS, COUNTS)
        events = workload()
        commit_events(client, SETTINGS, events)
        yield Reader(COUNTS, client=client, settings=SETTINGS), events


@freeze_time(NOW_TEXT)
@pytest.mark.parametrize("plan", ["batch", "range"])
@pytest.mark.parametrize("budget", [TopBudget(), NO_DIRECTORY], ids=["default", "rank-records-only"])
def test_the_top_of_a_prefix_is_exact_and_every_total_is_what_count_answers(world, plan, budget):
    reader, events = world
    reader.top_budget = budget
    answer = reader.top("views/", 10, plan=plan)
    expected = ranked(truth(events, "views/", answer.window))[:10]
    assert answer.exact and answer.bound is None
    assert [(entry.counter, entry.total) for entry in answer.entries] == expected
    assert [entry.total for entry in answer.entries] == [reader.count(e.counter, plan=plan).total for e in answer.entries]
    assert answer.counted < 40 and answer.rank_records > 0  # a few candidates, not the prefix's 123 counters


@freeze_time(NOW_TEXT)
def test_ties_rank_by_name_and_a_window_ending_on_an_hour_is_answered_too(world):
    reader, events = world
    reader.top_budget = NO_DIRECTORY
    answer = reader.top("views/", 20, window="6h", at="2026-11-22T13:00Z")
    expected = ranked(truth(events, "views/", answer.window))
    assert answer.exact and [(e.counter, e.total) for e in answer.entries] == expected[:20]
    ties = [e.counter for e in answer.entries if e.counter.startswith("views/tie-")]
    assert ties == ["views/tie-a", "views/tie-b"]  # the same total: by name


@freeze_time(NOW_TEXT)
def test_counters_below_the_rank_floor_bound_an_answer_that_cannot_list_them(world):
    reader, events = world
    reader.top_budget = NO_DIRECTORY
    answer = reader.top("views/", 100, window="6h", at="2026-11-22T13:00Z")
    expected = ranked(truth(events, "views/", answer.window))
    assert not answer.exact and 0 < answer.bound
    assert [e for e in expected if e[1] > answer.bound] == [(e.counter, e.total) for e in answer.entries if e.total > answer.bound]
    assert all(total <= answer.bound for name, total in expected if name not in {e.counter for e in answer.entries})
    reader.top_budget = TopBudget()  # the prefix's 123 names on the window's days: counted whole, exact
    whole = reader.top("views/", 100, window="6h", at="2026-11-22T13:00Z")
    assert whole.exact and [(e.counter, e.total) for e in whole.entries] == expected[:100]


@freeze_time(NOW_TEXT)
def test_n_larger_than_the_prefix_lists_every_counter_that_counted_exactly(world):
    reader, events = world
    reader.top_budget = TopBudget()
    answer = reader.top("jobs/", 50)
    assert answer.exact and [(e.counter, e.total) for e in answer.entries] == ranked(truth(events, "jobs/", answer.window))
    assert answer.rank_records == 0  # jobs/ is not ranked: its two counters are counted whole
    assert reader.top("nothing/", 5).as_json()["top"] == [] and reader.top("nothing/", 5).exact


@freeze_time(NOW_TEXT)
def test_a_prefix_that_is_not_ranked_with_more_counters_than_a_top_counts_whole_is_refused_in_one_line(world):
    reader, _ = world
    reader.top_budget = TopBudget(directory_names=100)
    with pytest.raises(UnrankedPrefix, match=r"^prefix '' is not ranked and names more than 100 counters") as refused:
        reader.top("", 10)  # views/ is ranked, but not every counter is
    assert refused.value.parameter == "prefix" and "\n" not in str(refused.value)
    assert "rankedPrefixes" in str(refused.value) and "TALLY_RANKED_PREFIXES" in str(refused.value)
    reader.top_budget = TopBudget()
    assert reader.top("views/p00", 3).exact  # a longer prefix of a ranked one is ranked


@freeze_time(NOW_TEXT)
def test_a_table_that_ranks_nothing_writes_no_rank_record_and_answers_a_small_prefix_exactly():
    events = [(f"v/{k}", NOW - k * MINUTE_MS, 500 * (k + 1)) for k in range(6)]
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_tables(client, "unranked-events", "unranked-counts")
        settings = Settings(counts_table="unranked-counts", events_table="unranked-events")
        commit_events(client, settings, events)
        stored = client.scan(TableName="unranked-counts")["Items"]
        answer = Reader("unranked-counts", client=client, settings=settings).top("v/", 3)
        client.delete_table(TableName="unranked-counts")
        client.delete_table(TableName="unranked-events")
    assert not any(item["pk"]["S"].startswith(RANK_PREFIX) for item in stored)
    assert any(item["sk"]["S"].startswith("H#") for item in stored)  # 500 to 3,000 events an hour item: no record
    assert answer.exact and [(e.counter, e.total) for e in answer.entries] == [("v/5", 3000), ("v/4", 2500), ("v/3", 2000)]


@freeze_time(NOW_TEXT)
def test_a_window_in_the_future_has_an_empty_exact_top_read_without_a_request(world):
    reader, _ = world
    answer = reader.top("views/", 3, window="1h", at="2026-11-23T10:00Z")
    assert answer.exact and answer.entries == () and answer.bound is None
    assert answer.requests == 0  # no hour of it can hold data yet


@freeze_time(NOW_TEXT)
def test_rising_ranks_by_the_increase_over_the_previous_window_with_both_totals(world):
    reader, events = world
    reader.top_budget = TopBudget()
    answer = reader.top("views/", 5, window="3h", at="2026-11-22T14:00Z", rising=True)
    now, before = truth(events, "views/", answer.window), truth(events, "views/", answer.previous)
    increases = {c: now.get(c, 0) - before.get(c, 0) for c in now.keys() | before.keys()}
    assert answer.previous == Window(answer.window.first_minute - 180, answer.window.first_minute - 1)
    assert [(e.counter, e.value) for e in answer.entries] == ranked(increases)[:5]
    assert all(e.total == now.get(e.counter, 0) and e.previous == before.get(e.counter, 0) for e in answer.entries)
    shown = answer.as_json()
    assert shown["rising"] is True and shown["previous_start"] == "2026-11-22T08:00Z"
    assert set(shown["top"][0]) == {"rank", "counter", "total", "previous", "increase"}


@freeze_time(NOW_TEXT)
def test_the_answer_is_one_json_object_as_the_issue_states_it(world):
    reader, _ = world
    shown = reader.top("views/", 3, window="24h", at="2026-11-22T14:00Z").as_json()
    assert list(shown) == ["prefix", "start", "end", "exact", "bound", "top"]
    assert shown["prefix"] == "views/" and shown["start"] == "2026-11-21T14:00Z" and shown["end"] == "2026-11-22T14:00Z"
    assert [entry["rank"] for entry in shown["top"]] == [1, 2, 3]
    assert set(shown["top"][0]) == {"rank", "counter", "total"}


@freeze_time(NOW_TEXT)
@pytest.mark.parametrize(
    ("arguments", "parameter", "message"),
    [
        ({"n": 0}, "n", "from 1 to 1000"),
        ({"n": 1001}, "n", "from 1 to 1000"),
        ({"n": "ten"}, "n", "from 1 to 1000"),
        ({"n": True}, "n", "from 1 to 1000"),
        ({"prefix": "#rejected#"}, "prefix", "not starting with '#'"),
        ({"rising": "maybe"}, "rising", "rising must be one of"),
        ({"window": "7d", "at": "2026-11-22T10:17Z"}, None, "end it on a whole hour"),
        ({"series": "hour"}, None, "no series"),
    ],
)
def test_a_bad_top_is_refused_with_the_fix(world, arguments, parameter, message):
    reader, _ = world
    with pytest.raises(QueryError, match=message) as refused:
        reader.top(**{"prefix": "views/", "n": 5, **arguments})
    assert getattr(refused.value, "parameter", None) == parameter


# Tables of their own: the module's world keeps moto's backend (and its tables) alive alongside.
PROPERTY_COUNTS, PROPERTY_EVENTS = "top-property-counts", "top-property-events"


@pytest.fixture
def table():
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_tables(client, PROPERTY_EVENTS, PROPERTY_COUNTS)
        yield client
        client.delete_table(TableName=PROPERTY_COUNTS)
        client.delete_table(TableName=PROPERTY_EVENTS)


def clear(client) -> None:
    """Empty tables for the next example: made again, two requests where deleting hundreds of items one by one
    took a third of each example."""
    client.delete_table(TableName=PROPERTY_COUNTS)
    client.delete_table(TableName=PROPERTY_EVENTS)
    create_tables(client, PROPERTY_EVENTS, PROPERTY_COUNTS)


@hypothesis_settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 10**9),
    counters=st.integers(0, 14),
    n=st.integers(1, 8),
    lanes=st.sampled_from([1, 3]),
    plan=st.sampled_from(["batch", "range"]),
    window_minutes=st.sampled_from([1, 59, 60, 61, 150, 24 * 60]),
    end_offset=st.integers(-200, 40),
    rising=st.booleans(),
    records_only=st.booleans(),
)
def test_certification_holds_against_brute_force(table, seed, counters, n, lanes, plan, window_minutes, end_offset, rising, records_only):
    """Random counts (ties on purpose), windows on and off whole hours, N larger than the prefix, empty windows,
    both plans, lanes: an exact answer is brute force; an inexact one lists every counter above its bound."""
    clear(table)
    rng = random.Random(seed)
    settings = Settings(
        counts_table=PROPERTY_COUNTS, events_table=PROPERTY_EVENTS, bucket_lanes=lanes, ranked_prefixes=("v/",)
    )
    events = []
    for index in range(counters):
        size, weight = rng.choice([0, 3, 9, 9, 40, 120]), rng.choice([1, 7, 30, 30, 90])
        events += [(f"v/{index:02d}", NOW - rng.randrange(5 * HOUR_MS), weight) for _ in range(size)]
    with freeze_time(NOW_TEXT):
        commit_events(table, settings, events, shards=rng.choice([1, 3]))
        reader = Reader(PROPERTY_COUNTS, client=table, settings=settings)
        reader.top_budget = NO_DIRECTORY if records_only else TopBudget()
        at = utc(NOW - NOW % MINUTE_MS + end_offset * MINUTE_MS)
        # aligned: a rising day's previous window reaches past the minute retention
        answer = reader.top("v/", n, window=f"{window_minutes}m", at=at, plan=plan, rising=rising, align="true")
    now = truth(events, "v/", answer.window)
    before = truth(events, "v/", answer.previous) if rising else {}
    values = {c: now.get(c, 0) - before.get(c, 0) for c in now.keys() | before.keys()}
    expected = ranked(values)
    listed = [(e.counter, e.value) for e in answer.entries]
    assert all(e.total == now.get(e.counter, 0) for e in answer.entries)
    if answer.exact:
        assert listed == expected[:n]
    else:
        assert answer.bound is not None
        assert [e for e in expected if e[1] > answer.bound] == [e for e in listed if e[1] > answer.bound]
        assert all(v <= answer.bound for c, v in expected if c not in dict(listed))


@pytest.mark.server
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_documented_top_example_runs_against_either_server_and_prints_the_brute_force_top(
    backend, local_server, monkeypatch, capsys
):
    example = code_block("## Top counters", "python")
    now_ms = int(datetime.now(UTC).timestamp() * 1000)
    rng = random.Random(9)
    events = [(f"views/p{k}", now_ms - rng.randrange(20 * HOUR_MS)) for k in range(8) for _ in range(3 * k * k)]
    events += [("jobs/big", now_ms - HOUR_MS)] * 500  # another prefix: never listed
    count_on_server(local_server, monkeypatch, events, now_ms, "readme-top")
    exec(compile(example, "README.md", "exec"), {"__name__": "readme"})
    brute = ranked(truth([(name, ms, 1) for name, ms in events], "views/", Window.ending(now_ms)))[:3]
    assert capsys.readouterr().out.strip() == f"True {brute}"


@freeze_time(NOW_TEXT)
def test_redelivered_and_retried_commits_over_several_shards_keep_the_ranking_invariant_without_double_levels():
    """Every hour item counting at least the lowest recorded floor has a record of exactly its level, none below
    it; a redelivered batch (found applied) puts the same records again and changes nothing."""
    rng = random.Random(3)
    events = [(f"r/{k}", NOW - rng.randrange(30 * MINUTE_MS)) for k in range(6) for _ in range(2 + 120 * k)]
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_tables(client, PROPERTY_EVENTS, PROPERTY_COUNTS)
        settings = Settings(
            counts_table=PROPERTY_COUNTS, events_table=PROPERTY_EVENTS, bucket_lanes=2, ranked_prefixes=("r/",)
        )
        batches = stream_batches(events, shards=3)
        deliver(client, settings, batches)
        first = rank_levels(client, PROPERTY_COUNTS)
        deliver(client, settings, batches[::-1])  # every batch delivered again, shards in another order
        again = rank_levels(client, PROPERTY_COUNTS)
    counts, recorded = first
    assert again == first  # no count doubled, no level added
    assert sum(counts.values()) == len(events)
    floor = level_floor(lowest_level())
    assert {key: level_of(count) for key, count in counts.items() if count >= floor} == recorded
    assert recorded and any(count < floor for count in counts.values())
