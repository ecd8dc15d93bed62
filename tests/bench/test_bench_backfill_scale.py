"""The backfill_scale figures: the in-account stages leave today's table, and the model names its bound."""

from __future__ import annotations

import pytest

from bench import backfill_scale
from bench.backfill_scale import model_row, single_process_row


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
