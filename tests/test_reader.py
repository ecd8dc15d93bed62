"""tally.Reader on moto, fed by the real handler path: window edges, series, alignment, listing, errors."""

from __future__ import annotations

import json
import random
import time
import uuid
from datetime import UTC, datetime, timedelta, timezone

import boto3
import pytest
from documents import code_block
from tally.core.directory import DIRECTORY_PARTITIONS
from freezegun import freeze_time
from moto import mock_aws

from alert_support import ALERT_RULES, cross
from backends import BACKENDS, count_on_server
from factories import counter_record, window_event
from moto_tables import COUNTS, EVENTS, no_sleep_backoff
from tally import QueryError, Reader, Series, read_options
from tally.core.settings import Settings
from tally.core.units import DAY_MS, HOUR_MS, MINUTE_MS
from tally.core.buckets import iso_minute
from tally.core.records import Reason
from tally.core.rules import parse_rules
from tally.core.windows import now_ms, parse_instant, utc_of
from tally.dynamo.counts_table import CountsTable
from tally.dynamo.directory import CounterDirectory
from tally.dynamo.tables import create_tables
from tally.invocation import process

NOW_TEXT = "2026-11-22T14:37:12.250Z"
NOW = parse_instant(NOW_TEXT)
HOUR_EDGE = parse_instant("2026-11-22T09:00:00Z")
MINUTE_EDGE = parse_instant("2026-11-22T11:17:00Z")
EDGES = (MINUTE_EDGE, HOUR_EDGE)
SETTINGS = Settings(counts_table=COUNTS, events_table=EVENTS)


def utc(ms: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)


def stated_count(events, counter: str, at_ms: int, length_ms: int) -> int:
    """docs/design.md (Window semantics) in its own words: the window's last minute holds at - 1 ms, and it has L / 1 min minutes."""
    last = (at_ms - 1) // MINUTE_MS
    first = last - length_ms // MINUTE_MS + 1
    return sum(1 for name, ms in events if name == counter and first <= ms // MINUTE_MS <= last)


def counted_between(events, counter: str, start: datetime, end: datetime) -> int:
    return sum(1 for name, ms in events if name == counter and start <= utc(ms) < end)


def workload() -> list[tuple[str, int]]:
    rng = random.Random(18)
    events = [(rng.choice(["page-views", "jobs/acme", "jobs/zeta"]), NOW - rng.randrange(27 * HOUR_MS)) for _ in range(450)]
    # Every second around a minute and an hour boundary, and one millisecond either side of each.
    for edge in EDGES:
        events += [("edge", edge + second * 1000) for second in range(-75, 76, 3)]
        events += [("edge", edge + delta) for delta in (-1, 0, 1)]
    events += [("jobs/old", NOW - 26 * HOUR_MS)]  # counted a day ago, nothing since
    return events


@pytest.fixture(scope="module")
def world():
    """One table for the module, filled through the handler's commit path with the counter directory beside it."""
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_tables(client, EVENTS, COUNTS)
        table = CountsTable(client, COUNTS, SETTINGS, backoff=no_sleep_backoff)
        directory = CounterDirectory(client, COUNTS, SETTINGS)
        events = workload()
        ordered = sorted(events, key=lambda event: event[1])
        for start in range(0, len(ordered), 100):
            records = [counter_record(name, ms, arrival_s=NOW / 1000) for name, ms in ordered[start : start + 100]]
            process(window_event(records, final=True), directory.recording(table.commit), SETTINGS)
        yield Reader(COUNTS, client=client, settings=SETTINGS), events, directory


@pytest.fixture
def reader(world) -> Reader:
    return world[0]


@pytest.fixture
def events(world):
    return world[1]


@freeze_time(NOW_TEXT)
@pytest.mark.parametrize("plan", ["batch", "range"])
@pytest.mark.parametrize(("edge", "length"), [(MINUTE_EDGE, "1m"), (HOUR_EDGE, "1h")], ids=["minute", "hour"])
def test_the_edge_rule_holds_at_every_second_around_a_boundary(reader, events, plan, edge, length):
    length_ms = MINUTE_MS if length == "1m" else HOUR_MS
    ends = [edge + second * 1000 for second in range(-61, 62)] + [edge - 1, edge + 1]
    for at in ends:
        result = reader.count("edge", window=length, at=utc(at), plan=plan)
        assert result.total == stated_count(events, "edge", at, length_ms), (utc(at), plan)
        assert result.end - result.start == timedelta(milliseconds=length_ms)
        assert result.start < utc(at) <= result.end  # the end is exclusive; an end inside a minute includes it


@freeze_time(NOW_TEXT)
def test_an_end_on_a_boundary_excludes_that_minute_and_a_millisecond_later_includes_it(reader, events):
    on = reader.count("edge", window="1h", at="2026-11-22T09:00Z")
    assert (on.start, on.end) == (utc(HOUR_EDGE - HOUR_MS), utc(HOUR_EDGE))
    assert on.as_json()["start"] == "2026-11-22T08:00Z" and on.as_json()["end"] == "2026-11-22T09:00Z"
    after = reader.count("edge", window="1h", at="2026-11-22T09:00:00.001Z")
    assert after.end == utc(HOUR_EDGE + MINUTE_MS)
    assert after.total - on.total == counted_between(events, "edge", utc(HOUR_EDGE), utc(HOUR_EDGE + MINUTE_MS)) - (
        counted_between(events, "edge", utc(HOUR_EDGE - HOUR_MS), utc(HOUR_EDGE - HOUR_MS + MINUTE_MS))
    )
    # A microsecond into the minute is inside it too.
    assert reader.count("edge", window="1h", at=utc(HOUR_EDGE) + timedelta(microseconds=1)).end == after.end


@freeze_time(NOW_TEXT)
def test_a_window_ending_now_includes_the_current_minute(reader):
    result = reader.count("page-views")
    assert result.end == utc(NOW - NOW % MINUTE_MS + MINUTE_MS)
    assert result.end - result.start == timedelta(hours=24) and not result.aligned


@freeze_time(NOW_TEXT)
def test_options_as_text_and_as_python_values_read_the_same_window(reader):
    as_text = reader.count_many(["page-views", "jobs/acme"], window="1d12h", at="2026-11-22T15:37:12.250+01:00")
    as_python = reader.count_many(
        ["page-views", "jobs/acme"],
        window=timedelta(hours=36),
        at=datetime(2026, 11, 22, 9, 37, 12, 250_000, tzinfo=timezone(timedelta(hours=-5))),
    )
    assert [r.as_json() for r in as_text] == [r.as_json() for r in as_python]
    assert as_text[0].start.tzinfo is not None and all(hour.tzinfo for hour in as_text[0].by_hour)


@freeze_time(NOW_TEXT)
@pytest.mark.parametrize("plan", ["batch", "range"])
def test_a_24h_minute_series_has_1440_points_that_sum_to_the_total(reader, events, plan):
    [views, acme] = reader.count_many(["page-views", "jobs/acme"], series="minute", plan=plan)
    for result in (views, acme):
        assert len(result.series) == 1440
        assert sum(point.count for point in result.series) == result.total
        assert result.total == counted_between(events, result.counter, result.start, result.end)
        assert [point.start for point in result.series] == [result.start + timedelta(minutes=m) for m in range(1440)]
    one = reader.count("page-views", series="minute", plan=plan)
    # Every minute that can hold data is read: batch in requests of 100 keys, range in one Query.
    assert one.requests == (15 if plan == "batch" else 1)
    assert one.total == views.total


@freeze_time(NOW_TEXT)
def test_an_hour_series_costs_nothing_more_and_starts_at_the_window_start(reader):
    plain = reader.count("jobs/zeta", plan="range")
    hourly = reader.count("jobs/zeta", plan="range", series=Series.HOUR)
    assert hourly.requests == plain.requests and hourly.total == plain.total
    assert len(hourly.series) == 25  # a partial hour at each end
    assert hourly.series[0].start == hourly.start and hourly.series[1].start.minute == 0
    assert sum(point.count for point in hourly.series) == hourly.total
    assert hourly.as_json()["series"][0] == {"start": hourly.as_json()["start"], "count": hourly.series[0].count}


@freeze_time(NOW_TEXT)
def test_a_week_ending_now_is_aligned_to_whole_hours_at_its_start_and_says_so(reader, events):
    asked_start = utc(NOW - NOW % MINUTE_MS + MINUTE_MS - 7 * DAY_MS)
    for plan in ("batch", "range"):
        week = reader.count("page-views", window="7d", plan=plan)
        assert week.aligned and week.start == asked_start.replace(minute=0) and week.end == utc(NOW - NOW % MINUTE_MS + MINUTE_MS)
        assert week.total == counted_between(events, "page-views", week.start, week.end)
        assert week.as_json()["aligned"] is True
    [note] = reader.notes([week])
    assert "minute retention (48 h)" in note and str(week.window) in note


@freeze_time(NOW_TEXT)
def test_an_explicit_end_that_needs_alignment_is_refused_unless_asked(reader, events):
    at = "2026-11-22T10:17Z"
    with pytest.raises(QueryError, match=r"end it on a whole hour \(e.g. at 2026-11-22T10:00Z\).*align"):
        reader.count("page-views", window="7d", at=at)
    aligned = reader.count("page-views", window="7d", at=at, align=True)
    assert aligned.aligned and aligned.start.minute == 0 and aligned.end == utc(parse_instant(at))
    with pytest.raises(QueryError, match="minute retention"):
        reader.count("page-views", window="7d", align="false")
    on_the_hour = reader.count("page-views", window="7d", at="2026-11-22T10:00Z")
    assert not on_the_hour.aligned and on_the_hour.total == counted_between(
        events, "page-views", on_the_hour.start, on_the_hour.end
    )


@freeze_time(NOW_TEXT)
def test_a_minute_series_past_the_minute_retention_is_refused_naming_the_hour_series(reader):
    with pytest.raises(QueryError, match="ask for an hour series"):
        reader.count("page-views", window="47h", at="2026-11-21T10:00Z", series="minute")


@freeze_time(NOW_TEXT)
@pytest.mark.parametrize(
    ("series", "window", "message"),
    [("minute", "2d1m", "at most 48h, or for an hour series"), ("hour", "91d", "at most 90d")],
)
def test_a_series_is_no_longer_than_its_buckets_are_kept_even_in_the_future(reader, series, window, message):
    """Every point is listed, so a window far in the future must not make millions of them."""
    with pytest.raises(QueryError, match=message):
        reader.count("page-views", window=window, at="9999-12-31T00:00Z", series=series)
    assert len(reader.count("page-views", window="48h", at="9999-12-31T00:00Z", series="minute").series) == 2880


@freeze_time(NOW_TEXT)
@pytest.mark.parametrize("plan", ["batch", "range"])
def test_listing_finds_the_counters_of_a_prefix_that_counted_in_the_window(reader, events, plan):
    listed = reader.list_counters("jobs/", plan=plan)
    assert [r.counter for r in listed] == ["jobs/acme", "jobs/zeta"]  # jobs/old counted 26 h ago only
    assert all(r.total == counted_between(events, r.counter, r.start, r.end) > 0 for r in listed)
    assert [r.counter for r in reader.list_counters("jobs/", window="2d", plan=plan)] == ["jobs/acme", "jobs/old", "jobs/zeta"]
    assert {r.counter for r in reader.list_counters(plan=plan)} == {"edge", "jobs/acme", "jobs/zeta", "page-views"}
    assert reader.list_counters("nothing-", plan=plan) == []


@freeze_time(NOW_TEXT)
def test_a_listing_pages_by_its_limit_and_hands_out_the_cursor_of_the_next_page(reader, world):
    # The limit bounds the candidates, counted or not: jobs/old has buckets yesterday, none in the last 24 h.
    whole = reader.list_counters("jobs/", limit=3)
    assert [r.counter for r in whole] == ["jobs/acme", "jobs/zeta"] and whole.cursor is None
    first = reader.list_counters("jobs/", limit=2)
    assert [r.counter for r in first] == ["jobs/acme"] and first.cursor is not None  # jobs/old: nothing in the window
    rest = reader.list_counters("jobs/", limit=2, cursor=first.cursor)
    assert [r.counter for r in rest] == ["jobs/zeta"] and rest.cursor is None
    with pytest.raises(QueryError, match="limit must be"):
        reader.list_counters("jobs/", limit=0)
    with pytest.raises(QueryError, match="cursor 'nonsense!' is not one a listing handed out"):
        reader.list_counters("jobs/", cursor="nonsense!")


@freeze_time(NOW_TEXT)
def test_listing_costs_the_directory_queries_of_each_day_on_top_of_the_counts(reader):
    [alone] = reader.count_many(["page-views"])
    [listed] = reader.list_counters("page")
    assert listed.requests == alone.requests + 2 * (DIRECTORY_PARTITIONS + 1)  # the window touches two UTC days


@freeze_time(NOW_TEXT)
def test_results_serialize_to_json_with_decimal_free_numbers_and_iso_minutes(reader):
    result = reader.count("page-views", window="90m", series="hour")
    as_json = json.loads(json.dumps(result.as_json()))
    assert set(as_json) == {
        "counter", "start", "end", "total", "aligned", "plan", "keys", "requests", "items_read", "by_hour", "series",
        "retired",
    }
    assert as_json["retired"] is None  # always there: null while a rule counts it
    assert as_json["end"] == "2026-11-22T14:38Z" and as_json["start"] == "2026-11-22T13:08Z"
    assert [point["start"] for point in as_json["series"]] == ["2026-11-22T13:08Z", "2026-11-22T14:00Z"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"at": datetime(2026, 11, 22, 10)}, "has no time zone: pass an aware datetime"),
        ({"window": timedelta(0)}, "must be positive"),
        ({"window": timedelta(minutes=-5)}, "must be positive"),
        ({"window": timedelta(seconds=90)}, "whole number of minutes"),
        ({"window": "24x"}, "units m, h, d"),
        ({"window": "0h"}, "must be at least a minute"),
        ({"window": 24}, "timedelta or text"),
        ({"at": "2026-11-22T10:00"}, "without a UTC offset"),
        ({"series": "second"}, "series must be one of minute, hour"),
        ({"plan": "fastest"}, "plan must be one of batch, range"),
        ({"align": "maybe"}, "align must be one of true, false, auto"),
        ({"consistent": "very"}, "consistent must be one of true, false"),
        ({"allow_transient": "sometimes"}, "allow_transient must be one of true, false"),
    ],
)
def test_bad_options_raise_one_query_error_that_says_the_fix(options, message):
    with pytest.raises(QueryError, match=message) as raised:
        read_options(**options)
    assert isinstance(raised.value, ValueError)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda r: r.count("#segment#1"), "reserved"),
        (lambda r: r.count(""), "empty"),
        (lambda r: r.count(["a", "b"]), "use count_many"),
        (lambda r: r.count_many("page-views"), "for one, use count"),
        (lambda r: r.count_many([]), "at least one"),
        (lambda r: r.count("#rejected#nope"), "the reasons are"),
        (lambda r: r.list_counters("#rejected#"), "never listed"),
        (lambda r: r.count("a", window="7d", bogus=1), "unexpected keyword"),
    ],
)
def test_bad_arguments_are_refused_before_any_read(call, message):
    class NoClient:
        def __getattr__(self, name):
            raise AssertionError(f"read {name} for a bad argument")

    with pytest.raises((QueryError, TypeError), match=message):
        call(Reader(COUNTS, client=NoClient(), settings=SETTINGS))


def test_a_reader_takes_its_table_and_settings_from_the_environment(monkeypatch):
    monkeypatch.setenv("COUNTS_TABLE", "from-env")
    monkeypatch.setenv("TALLY_BUCKET_LANES", "4")
    reader = Reader(client=object())
    assert reader.table_name == "from-env" and reader.settings.bucket_lanes == 4
    assert Reader("given", client=object()).table_name == "given"


def test_a_reader_from_a_stacks_outputs(monkeypatch):
    outputs = {
        "EventsTableName": "Tally-EventsTable-ABC",
        "CountsTableName": "Tally-CountsTable-DEF",
        "EventsStreamArn": "arn:aws:dynamodb:us-east-1:123456789012:table/Tally-EventsTable-ABC/stream/2024-01-01T00:00:00.000",
        "FailureQueueUrl": "https://sqs.us-east-1.amazonaws.com/123456789012/Tally-FailureQueue",
    }
    assert Reader.from_outputs(outputs, client=object(), settings=SETTINGS).table_name == "Tally-CountsTable-DEF"
    with pytest.raises(QueryError, match="lack CountsTableName"):
        Reader.from_outputs({"EventsTableName": "x"}, client=object(), settings=SETTINGS)
    with mock_aws():
        cloudformation = boto3.client("cloudformation", region_name="us-east-1")
        template = {"Resources": {"Queue": {"Type": "AWS::SQS::Queue"}}, "Outputs": {k: {"Value": v} for k, v in outputs.items()}}
        cloudformation.create_stack(StackName="Tally", TemplateBody=json.dumps(template))
        reader = Reader.from_stack("Tally", client=object(), settings=SETTINGS)
    assert reader.table_name == "Tally-CountsTable-DEF"


def readme_example() -> str:
    return code_block("## Read counts from your code", "python")


@pytest.mark.server
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_readme_example_runs_against_either_server_and_prints_what_brute_force_counts(backend, local_server, monkeypatch, capsys):
    now = datetime.now(UTC)
    if now.minute == 59 and now.second > 50:  # the example reads "now" twice: keep both in one hour, the next
        with freeze_time(now + timedelta(seconds=15), tick=True):
            return readme_example_prints_what_brute_force_counts(local_server, monkeypatch, capsys)
    readme_example_prints_what_brute_force_counts(local_server, monkeypatch, capsys)


def readme_example_prints_what_brute_force_counts(local_server, monkeypatch, capsys) -> None:
    now_ms = int(datetime.now(UTC).timestamp() * 1000)
    rng = random.Random(6)
    ages = [rng.randrange(30 * HOUR_MS) for _ in range(60)]
    # None within minutes of 24 h old: the example reads "now" a little later than this test does.
    events = [("views/posts/hello-world", now_ms - age) for age in ages if abs(age - DAY_MS) > 5 * MINUTE_MS]
    events += [("views/all", now_ms - rng.randrange(3 * HOUR_MS)) for _ in range(90)]
    events += [("jobs/all", now_ms - rng.randrange(20 * HOUR_MS)) for _ in range(30)]
    count_on_server(local_server, monkeypatch, events, now_ms, "readme-counts")

    exec(compile(readme_example(), "README.md", "exec"), {"__name__": "readme"})

    lines = capsys.readouterr().out.splitlines()
    day_ago = utc(now_ms - now_ms % MINUTE_MS + MINUTE_MS - DAY_MS)
    assert lines[0].startswith(f"{counted_between(events, 'views/posts/hello-world', day_ago, utc(now_ms + MINUTE_MS))} views in [")
    week_start = utc(now_ms - now_ms % MINUTE_MS + MINUTE_MS - 7 * DAY_MS).replace(minute=0)
    assert lines[1] == f"views/all 90 {week_start}" and lines[2] == f"jobs/all 30 {week_start}"
    hour_end = utc(now_ms - now_ms % HOUR_MS)
    minutes = json.loads(lines[3])
    assert len(minutes) == 60 and sum(minutes) == counted_between(events, "views/all", hour_end - timedelta(hours=1), hour_end)
    listed = counted_between(events, "views/posts/hello-world", day_ago, utc(now_ms + MINUTE_MS))
    assert lines[4] == str([("views/all", 90), ("views/posts/hello-world", listed)])
    assert lines[5] == "window length must be at least a minute, got '0h'"
    assert len(readme_example().strip().splitlines()) <= 25


@freeze_time(NOW_TEXT)
def test_notes_name_the_read_settings_that_differ_from_what_the_function_published(world):
    reader = world[0]
    client = reader.table.client
    create_tables(client, "published-events", "published-counts")
    function_settings = Settings(bucket_lanes=4, minute_retention_ms=72 * HOUR_MS, ranked_prefixes=("views/",))
    CountsTable(client, "published-counts", function_settings).publish_settings("Tally-Counter", NOW)
    mine = Reader("published-counts", client=client, settings=SETTINGS)
    note, empty = mine.notes(mine.count_many(["page-views"]))  # this table has no buckets at all
    assert "no bucket of 'page-views' exists at all" in empty
    assert note.startswith("Tally-Counter counts into published-counts with TALLY_BUCKET_LANES='4' (here '1'), ")
    assert "TALLY_MINUTE_RETENTION_HOURS='72' (here '48')" in note and "TALLY_RULES" not in note
    assert """TALLY_RANKED_PREFIXES='["views/"]' (here '')""" in note  # a top list of views/ would be refused here
    agreeing = Reader("published-counts", client=client, settings=function_settings)
    assert agreeing.settings_differences() == []


def test_a_reader_reads_the_published_settings_at_most_once_a_minute(world, monkeypatch):
    class Counting:
        def __init__(self, client):
            self.client, self.calls = client, {"get_item": 0}

        def get_item(self, **kwargs):
            self.calls["get_item"] += 1
            return self.client.get_item(**kwargs)

    client = Counting(world[0].table.client)
    reader = Reader(COUNTS, client=client, settings=SETTINGS)
    clock = [1000.0]
    monkeypatch.setattr("tally.reader.time.monotonic", lambda: clock[0])
    for _ in range(3):
        reader.settings_differences()
    clock[0] += 59
    reader.settings_differences()
    assert client.calls["get_item"] == 1
    clock[0] += 1
    reader.settings_differences()
    assert client.calls["get_item"] == 2


def alert_tables(client, counts: str) -> None:
    """Both tables, unless this module's world (a mock of its own, still active) made them already."""
    if counts not in client.list_tables()["TableNames"]:
        create_tables(client, f"{counts}-events", counts)


def test_alerts_answer_each_counters_state_and_the_window_that_set_it():
    counts = f"alert-counts-{uuid.uuid4().hex[:8]}"
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        alert_tables(client, counts)
        settings = Settings(counts_table=counts, events_table=EVENTS, rules=parse_rules(ALERT_RULES))
        at = now_ms() // MINUTE_MS * MINUTE_MS
        cross(client, settings, at, {"logins/a": 3, "logins/b": 1, "signups/pro": 6}, counts)
        reader = Reader(counts, client=client, settings=settings)
        found = reader.alerts()
        assert [(s.alert.name, s.counter, s.state, s.total) for s in found] == [
            ("burst", "logins/a", "ALARM", 3),
            ("signup-rush", "signups/pro", "ALARM", 6),
        ]
        assert found[0].as_json() == {
            "alert": "burst",
            "rule": "logins",
            "counter": "logins/a",
            "state": "ALARM",
            "since": utc_of(at).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "window": "10m",
            "start": iso_minute(at - 10 * MINUTE_MS),
            "end": iso_minute(at),
            "total": 3,
            "threshold": 2,
            "transitions": 1,
        }
        assert [s.counter for s in reader.alerts("signup-rush")] == ["signups/pro"]
        assert [s.counter for s in reader.alerts(prefix="logins/")] == ["logins/a"]
        assert reader.alerts(state="ok") == []
        with pytest.raises(QueryError, match="no alert 'nope' in the rules .* the alerts are burst, signup-rush"):
            reader.alerts("nope")
        with pytest.raises(QueryError, match="state must be one of ALARM, OK, got 'red'"):
            reader.alerts(state="red")


def test_the_readme_alerts_example_prints_the_counters_in_alarm(monkeypatch, capsys):
    rules = code_block("## Watch counters with alerts", "json")
    example = code_block("## Watch counters with alerts", "python")
    monkeypatch.setenv("TALLY_RULES", rules)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        alert_tables(client, "tally-counts")  # the table the example names
        settings = Settings(counts_table="tally-counts", events_table=EVENTS, rules=parse_rules(rules))
        at = now_ms() // MINUTE_MS * MINUTE_MS
        cross(client, settings, at, {"logins/10.0.0.1": 101, "logins/10.0.0.2": 100}, "tally-counts")
        exec(compile(example, "README.md", "exec"), {"__name__": "readme"})
    assert capsys.readouterr().out.splitlines() == [f"login-burst logins/10.0.0.1 101 {utc_of(at).isoformat()}"]


@freeze_time("2026-11-22T14:05:30Z")
def test_the_default_read_of_a_window_ending_now_never_subtracts_minutes_still_being_applied():
    """Isolated by default: a segment in flight has added to its hour item and not yet to its minutes. The
    window's first hour is covered from 14:06 on, which the hour minus its first six minutes reads in fewer
    keys; read so, the event at 14:03, outside the window, would count until its minute lands."""
    settings = Settings(counts_table="in-flight-counts", events_table="in-flight-events")  # beside the module's world
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_tables(client, settings.events_table, settings.counts_table)
        client.put_item(  # the hour item of a segment in flight: its minute 14:03 is still to come
            TableName=settings.counts_table,
            Item={"pk": {"S": "in-flight"}, "sk": {"S": "H#2026-11-21T14"}, "count": {"N": "1"}},
        )
        reader = Reader(settings.counts_table, client=client, settings=settings)
        assert reader.count("in-flight").total == 0
        assert reader.count("in-flight", allow_transient=True).total == 1  # the fast path, asked for, does subtract


# --- counters whose rules are retired --------------------------------------------------------------------------
# Rules retired after the world's events were counted (the reader judges retirement by its own clock, not by the
# window): jobs/ stopped at 12:00, an hour before now; page-views retires at 15:00, after now; jobs/old is written
# by a live rule as well; edge by two retired rules, the last of them at 11:00.
RETIRING = json.dumps(
    [
        {"name": "jobs", "counter": "jobs/{provider}", "retiredAt": "2026-11-22T12:00:00Z"},
        {"name": "old-jobs", "counter": "jobs/old"},
        {"name": "views", "counter": "page-views", "retiredAt": "2026-11-22T15:00:00Z"},
        {"name": "edges", "counter": "edge", "retiredAt": "2026-11-22T10:00:00Z"},
        {"name": "edges-2", "counter": "ed{suffix}", "retiredAt": "2026-11-22T11:00:00Z"},
    ]
)


def retiring_reader(world, rules: str = RETIRING) -> Reader:
    """A reader of the world's table whose settings carry ``rules``."""
    settings = Settings(counts_table=COUNTS, events_table=EVENTS, rules=parse_rules(rules))
    return Reader(COUNTS, client=world[0].table.client, settings=settings)


@freeze_time(NOW_TEXT)
def test_a_counter_whose_rules_are_all_retired_says_when_and_still_reads_its_counts(world, reader):
    names = ["jobs/acme", "jobs/old", "page-views", "edge"]
    retiring = retiring_reader(world).count_many(names, window="27h")
    plain = reader.count_many(names, window="27h")

    assert {r.counter: r.retired for r in retiring} == {
        "jobs/acme": parse_instant("2026-11-22T12:00:00Z"),
        "jobs/old": None,  # a live rule writes it too
        "page-views": None,  # retiring at 15:00, after now: it still counts
        "edge": parse_instant("2026-11-22T11:00:00Z"),  # the last of its rules to retire
    }
    assert [r.total for r in retiring] == [r.total for r in plain] and retiring[0].total > 0  # readable as before
    assert [r.requests for r in retiring] == [r.requests for r in plain]  # no request of its own
    assert [r.as_json()["retired"] for r in retiring] == ["2026-11-22T12:00:00Z", None, None, "2026-11-22T11:00:00Z"]
    assert all(r.retired is None for r in plain)  # the world's classic rule is never retired


def test_a_counter_is_retired_from_the_instant_its_rule_retires_on_the_readers_clock(world):
    reader = retiring_reader(world)
    with freeze_time("2026-11-22T14:59:59Z"):
        assert reader.count("page-views").retired is None
    with freeze_time("2026-11-22T15:00:00Z"):
        assert reader.count("page-views").retired == parse_instant("2026-11-22T15:00:00Z")
        # The window does not matter: a window ended long before the retirement still says no more will come.
        assert reader.count("page-views", window="1h", at="2026-11-22T09:00Z").retired == parse_instant(
            "2026-11-22T15:00:00Z"
        )


@freeze_time(NOW_TEXT)
def test_notes_say_which_counters_stopped_counting_under_which_retired_rules(world):
    reader = retiring_reader(world)
    notes = reader.notes(reader.count_many(["jobs/acme", "jobs/old", "page-views", "edge", "jobs/zeta"], window="27h"))

    assert [note for note in notes if "stopped counting" in note] == [
        "counters 'jobs/acme', 'jobs/zeta' stopped counting at 2026-11-22T12:00:00Z: their rule 'jobs' is retired; "
        "no more events will come",
        "counter 'edge' stopped counting at 2026-11-22T11:00:00Z: its rules 'edges' and 'edges-2' are retired; "
        "no more events will come",
    ]
    many = [f"jobs/{letter}" for letter in "abcdef"]
    [note] = [note for note in reader.notes(reader.count_many(many)) if "stopped counting" in note]
    assert note.startswith("counters 'jobs/a', 'jobs/b', 'jobs/c' and 3 more stopped counting at ")


@freeze_time(NOW_TEXT)
def test_a_listing_marks_each_retired_counter(world):
    listed = retiring_reader(world).list_counters("", window="27h")

    assert {r.counter: r.as_json()["retired"] for r in listed} == {
        "edge": "2026-11-22T11:00:00Z",
        "jobs/acme": "2026-11-22T12:00:00Z",
        "jobs/old": None,
        "jobs/zeta": "2026-11-22T12:00:00Z",
        "page-views": None,
    }


@freeze_time(NOW_TEXT)
def test_a_top_list_marks_its_retired_counters_and_only_those(world):
    answer = retiring_reader(world).top("jobs/", 3, window="27h").as_json()

    assert {entry["counter"]: entry.get("retired") for entry in answer["top"]} == {
        "jobs/acme": "2026-11-22T12:00:00Z",
        "jobs/zeta": "2026-11-22T12:00:00Z",
        "jobs/old": None,
    }
    live = next(entry for entry in answer["top"] if entry["counter"] == "jobs/old")
    assert set(live) == {"rank", "counter", "total"}  # a live counter's entry keeps its shape


@freeze_time(NOW_TEXT)
def test_tallys_own_rejection_counters_never_retire_even_under_a_rule_that_could_write_any_name(world):
    everything = [{"name": "all", "counter": "{name}", "retiredAt": "2026-11-22T12:00:00Z"}]
    reader = retiring_reader(world, json.dumps(everything))
    reason = next(reason.value for reason in Reason if reason.is_rejection)

    assert reader.count("page-views").retired == parse_instant("2026-11-22T12:00:00Z")
    assert reader.count(f"#rejected#{reason}").retired is None
