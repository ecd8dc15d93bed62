"""Backfill pieces: exported items through the handler's parsing, deterministic segments, the write-rate limit."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from factories import image
from tally.backfill import (
    BackfillSummary,
    HistoryScope,
    ScopeRefused,
    WriteRateLimit,
    backfill_export,
    chunks,
    export_outcomes,
    place,
    unseen_history,
    write_units,
)
from tally.core.records import CounterEvent, Reason
from tally.core.rules import parse_rules
from tally.core.settings import Settings
from tally.core.units import HOUR_MS
from tally.core.buckets import Bucket
from tally.core.commit import CommitResult, Writer

COUNT_FROM = 1_795_000_000_000


def count_files(files, settings=Settings(count_from_ms=COUNT_FROM), summary=None, scope=HistoryScope(COUNT_FROM)):
    """Backfill (key, images) files with a commit that records the segments it is given."""
    committed = []

    def commit(segment, writer):
        committed.append((segment, writer))
        return CommitResult(applied=len(segment.deltas), already_applied=0, retries=0)

    backfill_export(
        "arn:export", files, scope=scope, settings=settings,
        commit=commit, limit=WriteRateLimit(1e9), summary=summary or BackfillSummary(),
    )
    return committed


def count_file(images, settings=Settings(count_from_ms=COUNT_FROM), summary=None):
    return count_files([("data/1.json.gz", images)], settings, summary)


def test_exported_items_are_judged_as_stream_records_arriving_at_count_from():
    settings = Settings(counter_attribute="kind", time_attribute="at", count_from_ms=COUNT_FROM)
    images = [
        image(id="a", kind="orders", at="2026-11-18T10:00:00+00:00"),  # ISO time, 66 minutes before
        image(id="b", kind="orders", at=COUNT_FROM - 91 * 24 * HOUR_MS),  # its hour past the hour retention
        image(id="c", kind="orders", at=COUNT_FROM + 10 * 60_000),  # ten minutes after count-from
        image(id="d", at=COUNT_FROM),  # no counter
    ]
    outcomes = export_outcomes(images, 500, COUNT_FROM, settings)

    assert outcomes[0] == [CounterEvent("orders", 1_794_996_000_000, "500", COUNT_FROM)]
    assert [o.reason for (o,) in outcomes[1:]] == [Reason.LATE_EVENT, Reason.FUTURE_TIME, Reason.MISSING_COUNTER]
    ((segment, _),) = count_file([image(id="x", counter="a", ts=COUNT_FROM)] + images, settings)
    assert sum(delta for (counter, _), delta in segment.deltas.items() if counter == "orders") == 2


def test_an_export_holds_images_at_count_from_not_histories():
    # A becomes rule counts an exported item whose image satisfies it, as an INSERT would; a REMOVE rule
    # counts nothing (a deleted item is not in the export); an arrival-time rule counts at count-from.
    rules = parse_rules(
        '[{"name": "done", "counter": "done", "becomes": {"status": {"equals": "done"}}, "time": "doneAt"},'
        ' {"name": "done-now", "counter": "done-now", "becomes": {"status": {"equals": "done"}}, "time": "@arrival"},'
        ' {"name": "gone", "counter": "gone", "on": "REMOVE", "time": "@arrival"},'
        ' {"name": "edits", "counter": "edits", "on": "MODIFY"}]'
    )
    settings = Settings(count_from_ms=COUNT_FROM, rules=rules)
    done_ms = COUNT_FROM - 3 * HOUR_MS
    images = [
        image(id="a", status="done", doneAt=done_ms, ts=COUNT_FROM - 5 * HOUR_MS),
        image(id="b", status="placed", ts=COUNT_FROM - HOUR_MS),
    ]
    outcomes = export_outcomes(images, 7, COUNT_FROM, settings)

    assert outcomes[0] == [CounterEvent("done", done_ms, "7", COUNT_FROM), CounterEvent("done-now", COUNT_FROM, "7", COUNT_FROM)]
    assert [o.reason for o in outcomes[1]] == [Reason.NO_RULE_MATCHED]


def test_a_file_folds_into_the_same_segments_every_time_across_chunks(monkeypatch):
    monkeypatch.setattr("tally.backfill.CHUNK_ITEMS", 7)
    monkeypatch.setattr("tally.backfill.BACKFILL_SEGMENT_ITEMS", 150)
    images = [image(id=str(n), counter=f"c{n % 70}", ts=COUNT_FROM - n * 61_000) for n in range(300)]

    first, again = count_file(images), count_file(images)

    assert [s.to_state() for s, _ in first] == [s.to_state() for s, _ in again]
    assert len(first) > 1 and all(len(s.deltas) <= 150 for s, _ in first)
    assert first[1][0].first_sequence not in {str(n) for n in range(0, 300, 7)}  # a segment starts mid-chunk
    assert sum(s.records for s, _ in first) == 300
    assert {writer for _, writer in first} == {Writer.of_export("arn:export")}


def test_an_export_folds_across_its_files_in_the_order_of_their_keys():
    files = [(f"data/{n}.json.gz", [image(id=f"{n}-{i}", counter="hot", ts=COUNT_FROM - i * 60_000) for i in range(50)]) for n in range(3)]
    [(segment, writer)] = count_files(files)  # one segment: each bucket written once for the whole export
    assert segment.records == 150
    assert segment.deltas[("hot", Bucket.of_minute(COUNT_FROM // 60_000 - 1))] == 3  # one item of each file
    assert writer == Writer.of_export("arn:export")
    assert segment.first_sequence == str(place(0, 0)) and segment.last_sequence == str(place(2, 49))
    assert place(0, 2**40 - 1) < place(1, 0)
    with pytest.raises(ValueError, match="order of their keys"):
        count_files(list(reversed(files)))


def test_chunks_number_items_by_their_position():
    assert [(first, len(items)) for first, items in chunks(iter(range(7)), 3)] == [(0, 3), (3, 3), (6, 1)]


def test_the_rate_limit_spreads_writes_over_time():
    clock = [0.0]
    slept = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock[0] += seconds

    limit = WriteRateLimit(100, clock=lambda: clock[0], sleep=sleep)
    for _ in range(5):
        limit.spend(100)  # a second of burst, then one second per 100 units
    assert clock[0] == pytest.approx(4.0)
    assert limit.spent == 500

    with pytest.raises(ValueError):
        WriteRateLimit(0)


def test_a_file_is_committed_and_summarized():
    images = [image(id=str(n), counter="orders", ts=COUNT_FROM - n * 60_000) for n in range(5)]
    images.append(image(id="bad", counter="#x", ts=COUNT_FROM))
    summary = BackfillSummary()

    committed = count_file(images, summary=summary)

    assert summary.items == 6 and summary.counted == {"orders": 5}
    assert summary.rejected == {Reason.INVALID_COUNTER: 1}
    assert [segment.first_sequence for segment, _ in committed] == ["0"]
    # 5 minutes and 1 hour of orders, a minute and an hour of the rejection: 8 plain updates, 1 WCU each.
    assert summary.write_units == write_units(committed[0][0]) == 8
    assert summary.bucket_updates == 8


# --- what a backfill counts: the table, or rules added later ------------------------------------------------

LATER = COUNT_FROM + 3_600_000


def scoped_settings(**extra_rule):
    rules = [
        {"name": "orders", "counter": "orders/{shop}"},
        {"name": "refunds", "counter": "refunds/{shop}", "countFrom": LATER // 1000, **extra_rule},
        {"name": "returns", "counter": "returns/{shop}", "countFrom": LATER // 1000},
    ]
    return Settings(count_from_ms=COUNT_FROM, rules=parse_rules(json.dumps(rules)))


def test_a_rule_scope_counts_at_the_rules_own_instant_with_those_rules_alone_as_a_writer_of_its_own():
    settings = scoped_settings()
    scope = HistoryScope.of(settings, ["returns", "refunds"])
    assert scope == HistoryScope(LATER, ("refunds", "returns"))
    scoped = scope.settings_for(settings)
    assert [rule.name for rule in scoped.counter_rules.rules] == ["refunds", "returns"] and scoped.count_from_ms == LATER
    table = HistoryScope.of(settings)
    assert table == HistoryScope(COUNT_FROM) and table.key == "table"
    writers = {table.writer("arn:export"), scope.writer("arn:export"), HistoryScope(LATER, ("refunds",)).writer("arn:export")}
    assert len({writer.tag for writer in writers}) == 3  # one export counted for the table and for rules: three watermarks
    assert scope.key == HistoryScope(LATER, ("returns", "refunds")).key != HistoryScope(LATER, ("refunds",)).key


def test_a_rule_backfill_folds_its_events_and_leaves_rejections_to_the_summary():
    settings = scoped_settings(sum="amount")
    scope = HistoryScope.of(settings, ["refunds"])
    summary = BackfillSummary()
    committed = count_files(
        [("data/1.json.gz", [image(id="1", shop="s", ts=LATER - 5000, amount=3), image(id="2", shop="s", ts=LATER - 5000)])],
        scope.settings_for(settings), summary, scope,
    )
    assert summary.rejected == Counter({Reason.MISSING_SUM: 1})
    [(segment, writer)] = committed
    assert {counter for counter, _ in segment.deltas} == {"refunds/s"} and writer == scope.writer("arn:export")


@pytest.mark.parametrize(
    ("rules", "count_from", "settings", "message"),
    [
        (["orders"], None, scoped_settings(), "rule 'orders' has no countFrom of its own"),
        (["refunds", "lost"], None, scoped_settings(), "--rules: no rule named 'lost'; the rules are 'orders', 'refunds', 'returns'"),
        (["refunds", "returns"], None, scoped_settings(countFrom=LATER // 1000 + 60), "rules 'returns' and 'refunds' count from different instants"),
        (["refunds"], COUNT_FROM, scoped_settings(), "--count-from 2026-11-18T11:06:40Z is not the countFrom of the rules named"),
        (["refunds"], None, Settings(count_from_ms=COUNT_FROM), "--rules names rules of TALLY_RULES, and none are set"),
        ([], None, Settings(), "give --count-from (or set TALLY_COUNT_FROM)"),
    ],
)
def test_a_scope_that_would_count_history_twice_or_never_is_refused_in_one_line(rules, count_from, settings, message):
    with pytest.raises(ScopeRefused) as refused:
        HistoryScope.of(settings, rules, count_from)
    assert str(refused.value).startswith(message) and "\n" not in str(refused.value)


def test_what_an_export_cannot_show_is_said_rule_by_rule():
    rules = [
        {"name": "placed", "counter": "placed/{p}"},
        {"name": "done", "counter": "done/{p}", "becomes": {"status": {"equals": "done"}}},
        {"name": "deleted", "counter": "deleted", "on": "REMOVE", "time": "@arrival"},
        {"name": "changed", "counter": "changed", "on": "MODIFY"},
    ]
    lines = unseen_history(Settings(rules=parse_rules(json.dumps(rules))))
    assert [line.split(" counts ")[0] for line in lines] == ["rule 'done'", "rule 'deleted'", "rule 'deleted'", "rule 'changed'"]
    assert "no deletion" in lines[1] and "at the instant itself" in lines[2]
    assert unseen_history(Settings(rules=parse_rules(json.dumps(rules[:1])))) == []
