"""The CPU figures: the plain count and each aggregate on the same records, each one really kept."""

from __future__ import annotations

import dataclasses

from bench import speed, workloads
from tally.core.ladder import Ladder
from tally.core.records import CounterEvent, parse_record
from tally.core.rules import parse_rules
from tally.core.segments import added_by
from tally.core.settings import Settings


def test_each_aggregate_is_measured_beside_the_plain_count_with_its_ratio(monkeypatch):
    monkeypatch.setattr(speed, "CPU_RECORDS", 2_000)
    monkeypatch.setattr(speed, "CPU_RUNS", 1)
    figures = speed.parse_and_fold(workloads.steady(), Settings())
    assert [row["aggregate"] for row in figures["aggregates"]] == ["sum", "histogram", "distinct", "calendar"]
    for row in figures["aggregates"]:
        assert row["fold_over_plain"] == round(row["fold_records_per_second"] / figures["fold_records_per_second"], 2)
        assert row["parse_and_fold_records_per_second"] > 0


def test_the_records_of_the_aggregates_carry_what_each_rule_keeps():
    records = speed.first_records(workloads.steady(), 300, speed.aggregate_image)
    kept = {"sum": "units", "histogram": "bin", "distinct": "hashed"}  # the field of CounterEvent each rule fills
    for name, field in kept.items():
        settings = Settings(rules=parse_rules(speed.AGGREGATE_RULES[name]))
        events = [outcome for record in records for outcome in parse_record(record, settings)]
        assert len(events) == 300 and all(type(e) is CounterEvent and getattr(e, field) is not None for e in events)
    calendar = dataclasses.replace(Settings(), calendar_prefixes=("counter-",), calendar_zones=(speed.CALENDAR_ZONE,))
    ladder = Ladder.of(calendar)
    climbing = [record for record in records
                if any(item[1].is_long for c in added_by(parse_record(record, calendar), ladder) for item in c[:2] if item)]
    assert len(climbing) == 300 // speed.LATE_EVERY  # the late ones, straight to their days and months
