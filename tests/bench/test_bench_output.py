"""Where `make bench` writes: every figure it measures, into the published figures (tracked), naming regressions."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

import bench.__main__ as bench_main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def outputs(tmp_path, monkeypatch):
    """The bench's published figures moved into tmp_path, and a run that yields a small result."""
    monkeypatch.setattr(bench_main, "ROOT", tmp_path)
    monkeypatch.setattr(bench_main, "PUBLISHED", tmp_path / "results.json")
    monkeypatch.setattr(bench_main, "run", lambda: {"figures": {"reads": 3}})
    monkeypatch.setattr(bench_main, "report", lambda results: None)
    (tmp_path / "results.json").write_text('{"published": true}\n')
    return tmp_path


def test_a_run_publishes_what_it_measured_and_keeps_the_figures_of_parts_run_apart(outputs):
    bench_main.main([])
    published = json.loads((outputs / "results.json").read_text())
    assert published == {"published": True, "figures": {"reads": 3}, "seconds": published["seconds"]}


def test_a_run_names_each_figure_that_regressed_by_more_than_a_fifth(outputs, monkeypatch, capsys):
    before = {
        "cpu": {"fold_records_per_second": 500_000, "parse_records_per_second": 200_000, "records": 100_000},
        "writes": [{"workload": "steady", "tally": {"write_units": 1000, "origin_seconds": 1.0}},
                   {"workload": "hot counter", "tally": {"write_units": 10}}],
        "invocation_against_moto": [{"workload": "steady", "tally_seconds": 1.0, "origin_over_tally": 5.0}],
        "read_api_loopback": {"cases": [{"counters": 1, "requests": 100, "requests_per_second": 10.0}]},
        "query_latency_moto_server": [{"counters": 1, "batch_over_range": 0.2}],
    }
    after = {
        "cpu": {"fold_records_per_second": 390_000, "parse_records_per_second": 170_000, "records": 1},
        # the list in another order: entries are matched by what they are
        "writes": [{"workload": "hot counter", "tally": {"write_units": 13}},
                   {"workload": "steady", "tally": {"write_units": 1100, "origin_seconds": 9.0}}],
        "invocation_against_moto": [{"workload": "steady", "tally_seconds": 1.3, "origin_over_tally": 3.9}],
        # more requests in the load test's set time, and a ratio of two plans: neither is judged
        "read_api_loopback": {"cases": [{"counters": 1, "requests": 200, "requests_per_second": 20.0}]},
        "query_latency_moto_server": [{"counters": 1, "batch_over_range": 0.1}],
    }
    (outputs / "results.json").write_text(json.dumps(before))
    monkeypatch.setattr(bench_main, "run", lambda: after)
    bench_main.main([])
    printed = " ".join(capsys.readouterr().out.split())
    assert "4 figure(s) regressed by more than 20%" in printed
    for figure in ("cpu.fold_records_per_second: 500,000 published, 390,000 now (-22 %)",
                   "writes[workload=hot counter].tally.write_units: 10 published, 13 now (+30 %)",
                   "invocation_against_moto[workload=steady].tally_seconds: 1.0 published, 1.3 now (+30 %)",
                   "invocation_against_moto[workload=steady].origin_over_tally: 5.0 published, 3.9 now (-22 %)"):
        assert figure in printed
    # within a fifth, a count of what was run, and another design's own time are not regressions
    assert "parse_records" not in printed and "records:" not in printed and "origin_seconds" not in printed
    assert "read_api" not in printed and "batch_over_range" not in printed
    assert json.loads((outputs / "results.json").read_text())["cpu"]["fold_records_per_second"] == 390_000


def test_the_scale_models_distinct_rule_runs_alone_and_replaces_only_its_figures(outputs, monkeypatch, capsys):
    row = {"shards": 1000, "bucket_lanes": 16, "updates": 5, "throttled": 0, "sketch_writes": 4, "sketch_conflicts": 1,
           "sketch_throttled": 0, "sketch_write_units": 5, "p50_commit_seconds": 0.5, "p99_commit_seconds": 2.5,
           "all_shards_committed_seconds": 3.0, "failed_invocations": 0}
    monkeypatch.setattr(bench_main.scale, "distinct_results", lambda: {"scale_distinct": [row]})
    monkeypatch.setattr(bench_main.scale, "results", lambda: pytest.fail("the whole scale model ran"))
    bench_main.main(["scale-distinct"])
    assert json.loads((outputs / "results.json").read_text()) == {"published": True, "scale_distinct": [row]}
    assert "a distinct rule on the hot counter" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("part", "key", "title"),
    [
        ("scale-shards", "scale", "Scale: shards committing"),
        ("scale-lanes", "scale_lanes_at_1000_shards", "Scale: lanes at 1,000 shards"),
        ("scale-fixed-rate", "scale_fixed_rate", "Scale: write cost at a fixed"),
    ],
)
def test_each_part_of_the_scale_models_shard_runs_publishes_alone_and_keeps_the_others(
    outputs, monkeypatch, capsys, part, key, title
):
    run = {"shards": 1000, "bucket_lanes": 16, "events_per_second": 5000.0, "updates": 5, "throttled": 0,
           "retries": 0, "write_units_per_1000_events": 800.0, "largest_item_bytes": 1300, "p50_commit_seconds": 0.5,
           "p99_commit_seconds": 2.5, "all_shards_committed_seconds": 3.0, "failed_invocations": 0}
    rows = {
        "scale": [{**run, "one_lane": run}],
        "scale_lanes_at_1000_shards": [run],
        "scale_fixed_rate": [{**run, "mix": "mix", "origin_write_units_per_1000_events": 2000,
                              "dedup_write_units_per_1000_events": 6000, "origin_over_tally": 2.5,
                              "dedup_over_tally": 7.5}],
    }
    functions = {"scale": "shard_results", "scale_lanes_at_1000_shards": "lane_results",
                 "scale_fixed_rate": "fixed_rate_results"}
    for name, function in functions.items():
        figures = {name: rows[name]}
        monkeypatch.setattr(bench_main.scale, function,
                            (lambda figures=figures: figures) if name == key else lambda: pytest.fail(f"{function} ran"))
    monkeypatch.setattr(bench_main.scale, "results", lambda: pytest.fail("the whole scale model ran"))
    others = {name: "published before" for name in rows if name != key}
    (outputs / "results.json").write_text(json.dumps({"published": True, **others}))
    bench_main.main([part])
    published = json.loads((outputs / "results.json").read_text())
    assert published == {"published": True, **others, key: rows[key], "scale_model": bench_main.scale.model_description()}
    assert title in capsys.readouterr().out


def test_the_targets_of_the_scale_model_are_judged_from_its_own_run_or_marked_missing(capsys):
    published = json.loads((ROOT / "bench" / "results.json").read_text())
    without_scale = {key: value for key, value in published.items() if not key.startswith("scale")}
    missing = [t for t in bench_main.targets(without_scale) if "1,000 shards" in t["target"]]
    assert missing == [
        {"target": "1,000 shards, fixed rate (make bench-scale)", "wanted": "run", "figure": None, "met": False},
        {"target": "1,000 shards across midnight (make bench-scale)", "wanted": "run", "figure": None, "met": False},
    ]
    bench_main.report({**without_scale, "targets": bench_main.targets(without_scale)})
    printed = capsys.readouterr().out
    assert "The scale model has not run here: make bench-scale" in printed and "not run" in printed
    judged = [t for t in bench_main.targets(published) if "1,000 shards" in t["target"]]
    midnight = [e for e in published["scale_day_boundary"] if e["shards"] == 1000 and e["directory"] == "spread"]
    assert len(midnight) == 2  # 10,000 and 1,000,000 counters
    assert len(judged) == 3 * len([e for e in published["scale_fixed_rate"] if e["shards"] == 1000]) + 2 * len(midnight)
    assert all(t["figure"] is not None for t in judged)


def test_the_published_figures_are_tracked():
    tracked = subprocess.run(["git", "ls-files", "--error-unmatch", "bench/results.json"], cwd=ROOT, capture_output=True)
    assert tracked.returncode == 0


def test_the_targets_of_the_top_n_are_judged_from_its_own_run_or_marked_missing(capsys):
    published = json.loads((ROOT / "bench" / "results.json").read_text())
    without_top = {key: value for key, value in published.items() if not key.startswith("top")}
    missing = [t for t in bench_main.targets(without_top) if "top" in t["target"]]
    assert missing == [{"target": "top N (python -m bench top)", "wanted": "run", "figure": None, "met": False}]
    judged = {t["target"]: t for t in bench_main.targets(published) if "top-10" in t["target"] or "per-page" in t["target"]}
    [zipf] = [row for row in published["top"]["rows"] if (row["counters"], row["distribution"]) == (1_000_000, "zipf")]
    assert judged["24 h top-10 of 10^6 Zipf counters: read units (eventual)"]["figure"] == zipf["read_units"]
    assert judged["24 h top-10 of 10^6 Zipf counters: requests"]["figure"] == zipf["requests"]
    ratio = published["top_writes"]["ratios"]["ranks_and_directory_over_floor"]
    assert judged["fan-out + per-page rule: rank records and directory WCU / floor WCU"]["figure"] == ratio
    bench_main.report_top(bench_main.Console(width=150), published)
    assert "A 24 h top-10 over modeled counters" in capsys.readouterr().out


def test_the_backfills_model_and_one_rules_history_run_alone_and_replace_only_their_own_figures(outputs, monkeypatch, capsys):
    published = json.loads((ROOT / "bench" / "results.json").read_text())
    (outputs / "results.json").write_text(json.dumps({"published": True, "backfill_scale": published["backfill_scale"]}))
    monkeypatch.setattr(bench_main.backfill_scale, "measure", lambda items=0: pytest.fail("the backfill was measured"))
    bench_main.main(["backfill-scale-model"])  # the model alone, from the measured figures published
    assert json.loads((outputs / "results.json").read_text()) == {"published": True, "backfill_scale": published["backfill_scale"]}
    assert "one rule's history on AWS" in capsys.readouterr().out
    row = published["backfill_rule"][0]
    monkeypatch.setattr(bench_main.backfill, "rule_results", lambda: [row])
    bench_main.main(["backfill-rule"])
    assert json.loads((outputs / "results.json").read_text()) == {
        "published": True, "backfill_scale": published["backfill_scale"], "backfill_rule": [row]
    }
    assert "one rule's history: the backfill of 'refunds' alone" in capsys.readouterr().out


def test_the_targets_of_one_rules_history_are_judged_from_its_figures():
    published = json.loads((ROOT / "bench" / "results.json").read_text())
    judged = [t for t in bench_main.targets(published) if t["target"].startswith("one-rule backfill")]
    assert len(judged) == 2 * len(published["backfill_rule"])
    for row in published["backfill_rule"]:
        name = row["workload"].split(" (")[0]
        [writes] = [t for t in judged if t["target"].startswith(f"one-rule backfill, {name}: all WCU")]
        assert writes["figure"] == row["units_with_directory_over_floor"] == round(row["write_units"] / row["floor_write_units"], 3)
        assert writes["met"] == (writes["figure"] <= 1.1)  # judged on every write unit: sparse counters miss it
        [others] = [t for t in judged if t["target"].startswith(f"one-rule backfill, {name}: other rules")]
        assert others["figure"] == row["other_rules_items_written"] == 0 and others["met"]
    without = {key: value for key, value in published.items() if key != "backfill_rule"}
    assert not [t for t in bench_main.targets(without) if t["target"].startswith("one-rule backfill")]


def _measured(figures):
    time.sleep(0.2)  # long enough for the other worker to take a job meanwhile
    return figures


def test_the_counting_jobs_run_on_both_cores_and_merge_in_their_own_order():
    jobs = [(f"writes: {name}", lambda name=name: _measured({"writes": [{"workload": name, "pid": os.getpid()}]}))
            for name in ("origin mock", "steady", "hot counter", "fan-out", "backfill", "transitions")]
    jobs.append(("alerts", lambda: _measured({"alerts": {"pid": os.getpid()}})))
    results = bench_main.counted_in_parallel(jobs, workers=2)
    assert [entry["workload"] for entry in results["writes"]] == ["origin mock", "steady", "hot counter", "fan-out",
                                                                   "backfill", "transitions"]
    pids = {entry["pid"] for entry in results["writes"]} | {results["alerts"]["pid"]}
    assert os.getpid() not in pids and len(pids) == 2  # two worker processes, never this one
