"""The backfill workload: a month of history reaching the stream at once, metered for both designs; and the
backfill of one rule's history from an export (bench.backfill), against the floor for that rule's bucket items."""

from __future__ import annotations

import json
from pathlib import Path

from bench import backfill, workloads, writes
from tally.core.settings import Settings
from tally.core.units import DAY_MS
from tally.local.delivery import DeliveryConfig

SETTINGS = Settings()
CONFIG = DeliveryConfig(batch_size=1000, window_seconds=60)
ROOT = Path(__file__).resolve().parents[2]


def test_backfill_records_arrive_at_once_after_the_history_they_carry():
    workload = workloads.backfill(counters=2, days=30, total=300, per_second=100)
    arrivals = list(workload.counted_arrivals())
    assert len(arrivals) == workload.total == 300
    first_arrival = arrivals[0][2]
    assert all(event_ms < first_arrival for _, event_ms, _ in arrivals)
    assert arrivals[-1][2] - first_arrival < 3_000  # 300 records at 100 a second
    assert first_arrival - min(ms for _, ms, _ in arrivals) > 29 * DAY_MS


def test_backfill_writes_each_old_event_into_its_hour_alone_and_matches_the_floor():
    workload = workloads.backfill(counters=2, days=30, total=400, per_second=100)
    result = writes.measure(workload, SETTINGS, CONFIG)
    # 28 of the 30 days are past the 48 h minute retention when they arrive.
    assert 0.85 * 400 < result["events_in_hour_only"] < 400
    assert result["tally"]["bucket_writes"] == result["floor"]["writes"]
    assert result["origin"]["item_writes"] == 2 * 400
    counting_units = result["tally"]["write_units"] - result["tally"]["directory_write_units"]
    assert result["origin"]["write_units"] > counting_units
    # The directory: one entry per counter and day of history (2 x 31 here: sparse history pays most for it).
    days = {(name, ms // DAY_MS) for name, ms, _ in workload.counted_arrivals()}
    assert result["tally"]["directory_writes"] == len(days)


# --- one rule's history: bench.backfill.measure_rule -------------------------------------------------------


def test_the_backfill_of_one_rule_writes_its_bucket_items_once_and_no_other_rules_item():
    figures = backfill.measure_rule(items=2_000, shops=20)

    by_rule = figures["bucket_items_by_rule_in_whole_table"]
    assert set(by_rule) == {rule["name"] for rule in backfill.RULES}  # the whole table: every rule's buckets
    assert figures["floor_write_units"] == by_rule[backfill.ADDED_RULE] > 0
    assert figures["bucket_write_units"] == figures["floor_write_units"] and figures["units_over_floor"] == 1.0
    assert figures["other_rules_items_written"] == 0 and figures["same_buckets_as_whole_table"]
    assert figures["write_units"] == figures["bucket_write_units"] + figures["directory_write_units"]
    assert figures["rule_share_of_bucket_items"] == round(figures["floor_write_units"] / sum(by_rule.values()), 3) < 1
    assert figures["whole_table_write_units"] > figures["write_units"]
    assert 0 < figures["rule_events"] < figures["items"] == 2_000  # a quarter of the orders are refunded


def test_what_the_rule_of_a_counts_tables_item_is():
    assert backfill.rule_of(("refunds/shop-1", "H#2026-12-13T10")) == "refunds"
    assert backfill.rule_of(("#counters#2026-12-13#15", "revenue/shop-0")) == "revenue"  # a directory entry
    assert backfill.rule_of(("#rejected#late_event", "M#2026-12-13T10:00")) == "other"


def test_the_published_one_rule_figures_are_what_the_bench_measures_and_meet_the_floor():
    published = json.loads((ROOT / "bench" / "results.json").read_text())["backfill_rule"]
    assert [row["workload"] for row in published] == list(backfill.RULE_WORKLOADS)
    timings = ("seconds", "whole_table_seconds")
    for row in published:
        fresh = backfill.measure_rule(**backfill.RULE_WORKLOADS[row["workload"]])
        assert {k: v for k, v in row.items() if k not in timings} == {
            "workload": row["workload"], **{k: v for k, v in fresh.items() if k not in timings}
        }
        assert row["units_over_floor"] <= 1.1 and row["other_rules_items_written"] == 0


# --- a calendar prefix's older days: bench.backfill.measure_calendar -----------------------------------------


def test_the_backfill_of_a_calendar_prefix_writes_its_days_and_months_once_and_nothing_else():
    figures = backfill.measure_calendar(items=2_000, shops=20)

    assert figures["same_items_as_floor"] and figures["floor_write_units"] == figures["bucket_write_units"] > 0
    assert figures["minute_or_hour_items_written"] == 0 and figures["other_counters_items_written"] == 0
    assert figures["progress_write_units"] == figures["zones"] == 2  # one progress update per kept zone
    assert figures["write_units"] == figures["bucket_write_units"] + figures["progress_write_units"]
    assert figures["units_over_floor"] <= 1.1
    assert figures["whole_table_write_units"] > figures["write_units"]
    assert 0 < figures["prefix_events"] < figures["items"] == 2_000


def test_the_floor_of_a_calendar_backfill_is_each_counter_day_and_month_with_events_in_each_zone():
    image = {"counter": {"S": "orders/shop-1"}, "ts": {"N": str(backfill.CALENDAR_COUNT_FROM_MS - 40 * 86_400_000)}}
    other = {"counter": {"S": "views/shop-1"}, "ts": image["ts"]}
    runs = backfill.calendar_runs(backfill.CALENDAR_SETTINGS)[backfill.CALENDAR_PREFIX]
    floor = backfill.calendar_floor([image, image, other], runs)
    assert len(floor) == 4 and {sk.split("@")[0] for _, sk in floor} == {"D#UTC", "MO#UTC", "D#America/New_York", "MO#America/New_York"}


def test_the_published_calendar_backfill_figures_meet_the_floor():
    published = json.loads((ROOT / "bench" / "results.json").read_text())["backfill_calendar"]
    assert [row["workload"] for row in published] == list(backfill.CALENDAR_WORKLOADS)
    for row in published:
        assert row["units_over_floor"] <= 1.1 and row["same_items_as_floor"]
        assert row["minute_or_hour_items_written"] == row["other_counters_items_written"] == 0
