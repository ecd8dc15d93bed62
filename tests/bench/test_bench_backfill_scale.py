"""The backfill_scale figures: the in-account stages leave today's table, and the model names its bound."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import backfill_scale
from bench.backfill_scale import model_row, single_process_row

ROOT = Path(__file__).resolve().parents[2]


def test_the_stages_measured_here_leave_the_table_one_process_leaves(monkeypatch):
    monkeypatch.setattr(backfill_scale, "MEASURED_WORKERS", (1, 2))
    measured = backfill_scale.measure(items=400)

    assert [run["exact"] for run in measured["runs"]] == [True, True]
    assert {run["write_units"] for run in measured["runs"]} == {measured["single_process_write_units"]}
    assert measured["single_process_write_units"] >= measured["bucket_items"]  # directory entries beside the floor
    assert measured["runs"][0]["speed_up"] == 1.0


def test_a_table_of_many_bucket_items_is_bound_by_the_counts_tables_write_throughput():
    row = model_row(10**9, 100, "many counters", 40_000, fold_rate=70_000)

    assert row["bucket_items"] == 500_000_000 and row["bound"] == "writes"
    assert row["write_bound_seconds"] == 12_500 and row["wall_seconds"] <= 1.1 * row["write_bound_seconds"]
    assert row["meets_goal"] and row["within_a_day"] and row["raise"].startswith("warm throughput")
    assert row["committers"] == 13  # as many as 40,000 WCU/s feeds at 3,200 updates/s each, no more
    assert row["cost_usd_by_service"]["dynamodb_writes"] == pytest.approx(312.5)
    # The same table at a new on-demand table's throughput: past the day a backfill has.
    assert not model_row(10**9, 100, "many counters", 4_000, fold_rate=70_000)["within_a_day"]


def test_few_workers_on_a_large_export_of_few_counters_are_the_bound_and_more_workers_lift_it():
    slow = model_row(10**9, 10, "few counters", 40_000, fold_rate=70_000)
    fast = model_row(10**9, 1000, "few counters", 40_000, fold_rate=70_000)

    assert (slow["bound"], slow["raise"]) == ("workers", "backfillWorkers")
    assert fast["fold_seconds"] * 50 < slow["fold_seconds"] and fast["wall_seconds"] < 3600
    assert slow["files"] == fast["files"] == 1000


def test_today_downloads_and_parses_on_one_core_at_its_default_write_rate():
    row = single_process_row(10**9, "few counters", fold_rate=100_000)

    assert row["bound"] == "workers" and row["wall_seconds"] >= 10**9 / 100_000
    assert row["cost_usd_by_service"]["s3_transfer_out"] == pytest.approx(13.5)


# --- one rule's history beside the whole table's ------------------------------------------------------------


@pytest.mark.parametrize("shape", ["few counters", "many counters"])
@pytest.mark.parametrize("wcu", backfill_scale.WARM_THROUGHPUT_WCU)
@pytest.mark.parametrize("workers", backfill_scale.MODEL_WORKERS)
def test_one_rules_history_folds_the_whole_export_and_commits_its_share_of_the_bucket_items(shape, wcu, workers):
    table = model_row(10**9, workers, shape, wcu, fold_rate=70_000)
    rule = model_row(10**9, workers, shape, wcu, fold_rate=70_000, share=0.25)

    assert (rule["files"], rule["fold_seconds"]) == (table["files"], table["fold_seconds"])  # every item read, parsed
    assert rule["bucket_items"] == rule["write_units"] == round(table["bucket_items"] / 4)
    assert rule["commit_seconds"] <= table["commit_seconds"] and rule["wall_seconds"] <= table["wall_seconds"]
    assert rule["cost_usd_by_service"]["export"] == table["cost_usd_by_service"]["export"]  # the whole table's
    assert rule["cost_usd_by_service"]["dynamodb_writes"] == pytest.approx(table["cost_usd_by_service"]["dynamodb_writes"] / 4, abs=0.01)
    assert rule["cost_usd"] <= table["cost_usd"]


def test_a_rule_of_a_table_of_many_bucket_items_commits_in_a_quarter_of_its_write_bound():
    table = model_row(10**9, 100, "many counters", 40_000, fold_rate=70_000)
    rule = model_row(10**9, 100, "many counters", 40_000, fold_rate=70_000, share=0.25)

    assert (rule["bucket_items"], rule["write_bound_seconds"]) == (125_000_000, 3_125)
    assert rule["bound"] == table["bound"] == "writes" and rule["wall_seconds"] < 3600 < table["wall_seconds"]
    assert rule["cost_usd_by_service"]["dynamodb_writes"] == pytest.approx(78.12)


def test_the_published_model_is_the_model_at_its_published_fold_rate_with_one_rule_beside_the_table():
    published = json.loads((ROOT / "bench" / "results.json").read_text())["backfill_scale"]

    assert backfill_scale.remodel(published)["backfill_scale"] == published
    share = published["rule_assumed"]["rule_share_of_bucket_items"]
    assert {row["items"] for row in published["rule_rows"]} == {10**9}
    for rule in published["rule_rows"]:
        table = backfill_scale.table_row(published["rows"], rule)
        assert rule["fold_seconds"] == table["fold_seconds"] and rule["wall_seconds"] <= table["wall_seconds"]
        assert rule["bucket_items"] == round(table["bucket_items"] * share) and rule["table_bucket_items"] == table["bucket_items"]


@pytest.mark.parametrize("shape", ["few counters", "many counters"])
def test_a_calendar_prefixs_older_days_fold_the_whole_export_and_commit_its_days_and_months(shape):
    table = model_row(10**9, 100, shape, 40_000, fold_rate=70_000)
    days = backfill_scale.calendar_bucket_items(10**9, shape)
    calendar = model_row(10**9, 100, shape, 40_000, fold_rate=70_000, buckets=days)

    assert (calendar["files"], calendar["fold_seconds"]) == (table["files"], table["fold_seconds"])
    assert calendar["bucket_items"] == calendar["write_units"] == days
    assert calendar["cost_usd_by_service"]["export"] == table["cost_usd_by_service"]["export"]
    assumed = backfill_scale.CALENDAR_ASSUMED
    if shape == "few counters":  # a quarter of 1,000 counters, each with every day and month kept, in 2 zones
        assert days == 1000 * assumed["prefix_share_of_events"] * (assumed["days"] + assumed["months"]) * assumed["zones"]
    else:  # half a quarter of the events open a day and a month of their own, in 2 zones
        assert days == 10**9 * assumed["prefix_share_of_events"] * 0.5 * 2 * assumed["zones"]


def test_the_published_model_has_a_calendar_prefixs_older_days_beside_the_table():
    published = json.loads((ROOT / "bench" / "results.json").read_text())["backfill_scale"]
    assert {row["items"] for row in published["calendar_rows"]} == {10**9}
    for row in published["calendar_rows"]:
        table = backfill_scale.table_row(published["rows"], row)
        assert row["fold_seconds"] == table["fold_seconds"] and row["table_bucket_items"] == table["bucket_items"]
        assert row["bucket_items"] == backfill_scale.calendar_bucket_items(row["items"], row["shape"])
