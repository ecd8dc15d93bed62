"""The workload generator: deterministic from its seed, the origin's shape by default, bad records on demand."""

from __future__ import annotations

from collections import Counter

import pytest
from factories import image, stream_record
from script_support import load_script

from tally.dynamo.counts_table import CountsTable
from tally.local.agreement import judge
from tally.local.aws import client, scan_items
from tally.core.records import CounterEvent, Reason, Rejection, parse_record
from tally.core.settings import Settings
from tally.core.units import HOUR_MS
from tally.core.histograms import bin_of
from tally.core.sketches import hash_of
from tally.core.amounts import decimal_of
from tally.core.rules import parse_rules
from tally.local.workload import (
    BAD_KINDS,
    DEFAULT_COUNTERS,
    HISTORY_SHAPES,
    SHAPES,
    Workload,
    bad_items,
    expected_rejections,
)

END_MS = 1_795_341_600_000  # 2026-11-22T10:00Z

generate_events = load_script("generate_events")


def test_the_same_seed_gives_the_same_events_ids_included():
    assert Workload(seed=42).events(END_MS) == Workload(seed=42).events(END_MS)
    assert Workload(seed=42).events(END_MS) != Workload(seed=43).events(END_MS)


def test_the_default_is_the_origins_workload():
    events = Workload(seed=1).events(END_MS)
    per_hour = Counter((e.counter, (END_MS - 1 - e.ts_ms) // HOUR_MS) for e in events)
    assert {counter for counter, _ in per_hour} == set(DEFAULT_COUNTERS)
    assert {hour for _, hour in per_hour} == set(range(37))
    assert all(20 <= n <= 100 for n in per_hour.values())
    assert all(END_MS - 37 * HOUR_MS <= e.ts_ms < END_MS for e in events)
    assert len({e.id for e in events}) == len(events)
    assert [e.ts_ms for e in events] == sorted(e.ts_ms for e in events)


def test_a_hot_counter_gets_exactly_its_rate_every_hour():
    events = Workload(counters=["cold"], hours=3, rate=(0, 0), hot={"hot": 500}, seed=9).events(END_MS)
    assert Counter(e.counter for e in events) == {"hot": 1500}
    assert Counter((END_MS - 1 - e.ts_ms) // HOUR_MS for e in events) == {0: 500, 1: 500, 2: 500}


def test_each_bad_record_is_rejected_for_the_reason_it_was_made_for():
    items = bad_items(len(BAD_KINDS), END_MS)
    assert {item["bad"] for item in items} == set(BAD_KINDS)
    for item in items:
        [outcome] = parse_record(stream_record(image(**item), arrival_s=END_MS / 1000), Settings())
        assert outcome.reason is BAD_KINDS[item["bad"]], item


def test_expected_rejections_follow_the_arrival_of_each_record():
    settings = Settings()
    edge = END_MS - settings.hour_retention_ms  # its hour ends after it: still readable at arrival
    young = {"id": "young", "counter": "a", "ts": edge}
    old = {"id": "old", "counter": "a", "ts": edge - edge % HOUR_MS - 1}  # the hour before, readable until END_MS
    ahead = {"id": "ahead", "counter": "a", "ts": END_MS + settings.max_clock_skew_ms + 1}
    arrivals = {"young": END_MS, "old": END_MS, "ahead": END_MS}
    rejected = expected_rejections([young, old, ahead, *bad_items(2, END_MS)], arrivals)
    assert rejected == {
        Reason.LATE_EVENT: 1,
        Reason.FUTURE_TIME: 1,
        Reason.MISSING_COUNTER: 1,
        Reason.INVALID_COUNTER: 1,
    }


@pytest.mark.server
def test_the_script_writes_exactly_the_seeded_events(tables, capsys):
    argv = ["--seed", "77", "--hours", "2", "--counters", "alpha", "beta", "--end", "2026-11-22T10:00:00Z"]
    assert generate_events.main([*argv, "--bad", "3"]) == 0
    written = scan_items(client("dynamodb"), tables.events)
    generated = Workload(counters=["alpha", "beta"], hours=2, seed=77).events(END_MS)
    assert {item["id"]: (item["counter"], int(item["ts"])) for item in written if "bad" not in item} == {
        e.id: (e.counter, e.ts_ms) for e in generated
    }
    assert sum(1 for item in written if "bad" in item) == 3
    out = capsys.readouterr().out
    assert f"{len(generated) + 3}" in out and "alpha" in out


@pytest.mark.parametrize(
    "argv",
    [["--counters", "#forged"], ["--hours", "0"], ["--rate", "9", "3"], ["--end", "noon"], ["--bad", "-1"]],
)
def test_bad_arguments_exit_with_status_2(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        generate_events.main(argv)
    assert exit_.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_the_default_writes_one_bad_record_of_each_kind_as_the_demo_does():
    parser = generate_events.parser()
    args = parser.parse_args([])
    generate_events.parse_workload(args, parser)
    assert args.bad == len(BAD_KINDS)
    shaped = parser.parse_args(["--shape", "blog"])
    generate_events.parse_workload(shaped, parser)
    assert shaped.bad == 0  # a shape is another table's items: tally's bad records do not belong in it


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_shaped_items_are_counted_by_their_rules_as_restated_by_hand(name):
    shape = SHAPES[name]
    settings = Settings(time_attribute=shape.time_attribute, rules=parse_rules(shape.rules_json))
    items = shape.items(Workload(counters=shape.keys, hours=2, seed=4), END_MS)
    assert items == shape.items(Workload(counters=shape.keys, hours=2, seed=4), END_MS)
    statuses = Counter(item["status"] for item in items)
    assert len(statuses) == 3  # every status occurs, so every condition is exercised both ways
    for item in items:
        outcomes = parse_record(stream_record(image(**item), arrival_s=END_MS / 1000), settings)
        counted = [(o.counter, None if o.units is None else decimal_of(o.units), o.bin, o.hashed) for o in outcomes]
        expected = [
            (c, amount, None if value is None else bin_of(value), None if distinct is None else hash_of(distinct))
            for c, amount, value, distinct in shape.truth(item)
        ]
        assert counted == expected, item
        assert len(counted) >= 1 + (item["status"] in ("done", 200))


def job_record(change, arrival_ms: int) -> dict:
    """The stream record DynamoDB makes of one change of a job (the table streams NEW_AND_OLD_IMAGES)."""
    new = image(**change.new) if change.new is not None else None
    old = image(**change.old) if change.old is not None else None
    record = stream_record(new, old_image=old, event_name=change.kind, by_ttl=change.by_ttl, arrival_s=arrival_ms / 1000)
    record["dynamodb"]["StreamViewType"] = "NEW_AND_OLD_IMAGES"
    return record


def test_job_histories_are_counted_by_their_rules_as_restated_by_hand():
    shape = HISTORY_SHAPES["jobs"]
    settings = Settings(time_attribute=shape.time_attribute, rules=parse_rules(shape.rules_json))
    workload = Workload(counters=shape.keys, hours=26, rate=(4, 8), seed=4)
    histories = shape.histories(workload, END_MS)
    assert histories == shape.histories(workload, END_MS)
    changes = [change for history in histories for change in history]
    kinds = Counter((change.kind, change.by_ttl) for change in changes)
    assert kinds["MODIFY", False] and kinds["REMOVE", False] and kinds["REMOVE", True]
    reopened = [h for h in histories if [c.new["status"] for c in h if c.new][:4] == ["placed", "done", "placed", "done"]]
    assert reopened, "some jobs must be done twice, so a second transition is exercised"
    for history in histories:
        assert [c.at_ms for c in history] == sorted(c.at_ms for c in history) and history[-1].at_ms <= END_MS
        assert all(later.old == earlier.new for earlier, later in zip(history, history[1:]))
        for change in history:
            arrival = change.at_ms + 1_000
            outcomes = parse_record(job_record(change, arrival), settings)
            events = [o for o in outcomes if isinstance(o, CounterEvent)]
            counted = [(o.counter, o.event_ms, None if o.units is None else decimal_of(o.units)) for o in events]
            assert sorted(counted) == sorted(shape.truth(change, arrival)), change
            assert not any(o.reason.is_rejection for o in outcomes if isinstance(o, Rejection)), outcomes


@pytest.mark.server
def test_the_jobs_shape_writes_each_jobs_changes_in_order_and_warns_of_a_stream_without_old_images(tables, capsys):
    argv = ["--seed", "8", "--hours", "2", "--shape", "jobs", "--end", "2026-11-22T10:00:00Z"]
    assert generate_events.main(argv) == 0
    shape = HISTORY_SHAPES["jobs"]
    histories = shape.histories(Workload(counters=shape.keys, hours=2, seed=8), END_MS)
    last = {history[0].key["id"]: history[-1].new for history in histories if history[-1].new is not None}
    written = {item["id"]: item for item in scan_items(client("dynamodb"), tables.events)}
    assert written == last
    captured = capsys.readouterr()
    assert "streams NEW_IMAGE: rule 'done' judges changes against the old image" in captured.err
    assert "TALLY_RULES=" in captured.out and "deletedBy" in captured.out


def publish(tables, env: dict[str, str]) -> None:
    """What a pipeline's handler does at its cold start, with these settings."""
    settings = Settings.from_env({**env, "COUNTS_TABLE": tables.counts})
    CountsTable(client("dynamodb"), tables.counts, settings).publish_settings("a test pipeline", END_MS)


def origin_environment() -> dict[str, str]:
    shape = SHAPES["origin"]
    return {"TALLY_TIME_ATTRIBUTE": shape.time_attribute, "TALLY_RULES": shape.rules_json}


@pytest.mark.server
def test_shaped_items_a_running_pipeline_cannot_count_are_refused_and_not_written(tables, capsys):
    publish(tables, {})  # the classic rule: the demo's pipeline
    assert generate_events.main(["--shape", "origin", "--hours", "2"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "settings published by a test pipeline at 2026-11-22T10:00:00Z" in error
    assert "(no attribute 'counter')" in error and "nothing written" in error
    assert "TALLY_TIME_ATTRIBUTE=insertUtcTime TALLY_RULES=" in error and "--unchecked" in error
    assert scan_items(client("dynamodb"), tables.events) == []


@pytest.mark.server
def test_classic_events_a_rules_pipeline_cannot_count_are_refused(tables, capsys):
    publish(tables, origin_environment())
    assert generate_events.main(["--hours", "1"]) == 2
    error = capsys.readouterr().err
    assert "missing_counter" in error and "TALLY_COUNTER_ATTRIBUTE" not in error
    assert "TALLY_TIME_ATTRIBUTE=ts TALLY_RULES=''" in error  # the classic items need the classic settings
    assert scan_items(client("dynamodb"), tables.events) == []


@pytest.mark.server
def test_items_the_pipeline_counts_are_written_without_a_word(tables, capsys):
    publish(tables, origin_environment())
    assert generate_events.main(["--shape", "origin", "--hours", "1", "--seed", "3"]) == 0
    assert "warning" not in capsys.readouterr().err
    assert len(scan_items(client("dynamodb"), tables.events)) == len(Workload(hours=1, seed=3).events(END_MS))


@pytest.mark.server
def test_unchecked_writes_anyway_and_says_so(tables, capsys):
    publish(tables, {})
    assert generate_events.main(["--shape", "origin", "--hours", "1", "--unchecked"]) == 0
    assert "--unchecked" in capsys.readouterr().err
    assert scan_items(client("dynamodb"), tables.events) != []


@pytest.mark.server
def test_without_a_published_pipeline_the_items_are_written_with_a_warning(tables, capsys):
    assert generate_events.main(["--hours", "1", "--bad", "0"]) == 0
    assert f"no pipeline has published its settings in counts table {tables.counts!r}" in capsys.readouterr().err


@pytest.mark.server
def test_items_late_for_the_pipelines_retention_are_written_with_a_warning(tables, capsys):
    publish(tables, {"TALLY_HOUR_RETENTION_DAYS": "3"})
    assert generate_events.main(["--hours", "96", "--rate", "1", "1", "--bad", "0"]) == 0
    warning = capsys.readouterr().err
    assert "will reject some items for their time: late_event" in warning and "past the hour retention (3 d)" in warning


@pytest.mark.parametrize(
    ("env", "shape", "counted", "refused"),
    [
        ({}, "origin", 0, {Reason.MISSING_COUNTER}),
        (origin_environment(), "origin", 10, set()),
        (origin_environment(), "blog", 0, {Reason.MISSING_COUNTER, Reason.MISSING_TIME}),
        ({"TALLY_TIME_ATTRIBUTE": "time", "TALLY_RULES": SHAPES["blog"].rules_json}, "blog", 10, set()),
    ],
)
def test_judging_items_uses_the_handlers_own_parsing(env, shape, counted, refused):
    items = SHAPES[shape].items(Workload(counters=["a"], hours=1, rate=(10, 10), seed=1), END_MS)
    judgement = judge(items, Settings.from_env(env), END_MS)
    assert (judgement.items, judgement.counted, set(judgement.refused)) == (10, counted, refused)
    assert judgement.spoiled == 10 - counted
