"""``make bench``: tally against the origin design, cost and speed, in one run.

Prints the figures and the targets they meet or miss, and writes every
figure it measured into bench/results.json, the tracked figures the README
and the docs quote, so no figure of an old run stands beside new code; a
figure more than 20 % worse than the one it replaces is named at the end
(bench/published.py). Settings come from cdk.json's context, so the figures
describe what ``cdk deploy`` would run.

The scale model (1 to 1,000 shards, minutes of simulated traffic) is not part
of a plain run: ``make bench-scale`` runs its parts, each in a process of its
own, and their figures join the same file(s); the targets it judges are
reported from the figures there, marked missing until it has run.
``python -m bench scale`` runs the whole scale model in one process; ``python
-m bench scale-shards`` only its shard counts, ``python -m bench scale-lanes``
only its lanes at 1,000 shards, ``python -m bench scale-fixed-rate`` only its
fixed rate over more shards, ``python -m bench day-boundary`` only its windows
across a UTC midnight, ``python -m bench alert-latency`` only its alert timing,
``python -m bench scale-distinct`` only its distinct rule on the hot counter;
``python -m bench read-api`` the read API's load test alone (about two
minutes), ``python -m bench histogram`` the histogram rule beside the same
rule without it (under two minutes), and ``python -m bench distinct`` a
distinct rule beside the same counts without it (about a minute), and
``python -m bench reads`` the read cost of every plan (about two minutes), and
``python -m bench alerts`` what alerts add to the write path (seconds), and
``python -m bench top`` what a top N costs to read over 10^4 to 10^6 modeled
counters, what its rank records add to the writes and the trade between the
two for a few level factors (about two minutes), ``python -m bench writes``
every workload's write cost, as deployed and with every counter ranked (a few
minutes), and ``python -m bench backfill-scale [--items N]`` the backfill in
the account, measured here at N items (default 10^6: about a quarter of an
hour of two cores) and modeled on AWS up to 10^9, ``python -m bench
backfill-scale-model`` that model alone (with one rule's history beside the
whole table's) from the measured figures published, in seconds, and ``python
-m bench backfill-rule`` the write units of one rule's history against its
floor (seconds; also part of a plain run), ``python -m bench backfill-calendar``
the write units of a calendar prefix's older days against theirs (one write a
counter-day and counter-month with events, per kept zone; seconds; also part of
a plain run), ``python -m bench
close-scale-model`` the daily close of days and months measured per counter
here and modeled at 10^4 to 10^6 counters a day (about a second; also part of
a plain run), and ``python -m bench calendar`` days and months: a season of
traffic with late records closed daily, the reads of closed days and months
and of this month so far, and the storage a counter keeps (a couple of
minutes; the write workloads' figures with days and months come with
``writes``); each replaces only its own figures in the file(s) it writes, and
the targets.
"""

from __future__ import annotations

import argparse
import functools
import json
import multiprocessing
import os
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from bench.published import REGRESSION, Regression, named_regressions
from bench import (
    aggregates,
    alerts,
    backfill,
    backfill_scale,
    calendar_buckets,
    close_scale,
    latency,
    read_api,
    reads,
    scale,
    speed,
    top,
    workloads,
    writes,
)
from tally.local.delivery import DeliveryConfig
from tally.core.settings import Settings
from tally.core.units import DAY_MS, HOUR_MS

ROOT = Path(__file__).resolve().parent.parent
PUBLISHED = Path(__file__).resolve().parent / "results.json"
FILES_PER_BENCH_EXPORT = backfill_scale.FILES
# The counting parts of a run (requests, units, items: no time) share the machine's cores; the timed parts run alone.
COUNTING_WORKERS = max(1, min(2, os.cpu_count() or 1))
console = Console(stderr=True)


def deployment() -> tuple[Settings, DeliveryConfig, dict[str, Any]]:
    """The stack's settings, read from cdk.json's context (defaults where it is silent)."""
    context = json.loads((ROOT / "cdk.json").read_text()).get("context", {})
    defaults = Settings()
    settings = Settings(
        minute_retention_ms=int(context.get("minuteRetentionHours", defaults.minute_retention_ms // HOUR_MS)) * HOUR_MS,
        hour_retention_ms=int(context.get("hourRetentionDays", defaults.hour_retention_ms // DAY_MS)) * DAY_MS,
        max_clock_skew_ms=int(context.get("maxClockSkewSeconds", defaults.max_clock_skew_ms // 1000)) * 1000,
        ranked_prefixes=tuple(context.get("rankedPrefixes", defaults.ranked_prefixes)),
    )
    config = DeliveryConfig(
        batch_size=int(context.get("batchSize", DeliveryConfig.batch_size)),
        window_seconds=int(context.get("tumblingWindowSeconds", DeliveryConfig.window_seconds)),
    )
    described = {
        "batch_size": config.batch_size,
        "tumbling_window_seconds": config.window_seconds,
        "max_clock_skew_seconds": settings.max_clock_skew_ms // 1000,
        "minute_retention_hours": settings.minute_retention_ms // HOUR_MS,
        "ranked_prefixes": list(settings.ranked_prefixes),
        "source": "cdk.json context" if context else "tally defaults",
    }
    return settings, config, described


def machine() -> dict[str, Any]:
    models = [line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")]
    return {
        "cpu": models[0] if models else platform.processor(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "note": "cores shared with other work: CPU figures are the best of several runs",
    }


def timed(label: str, work):  # noqa: ANN001, ANN202 - any zero-argument callable
    start = time.perf_counter()
    console.log(f"{label} ...")
    result = work()
    console.log(f"{label}: {time.perf_counter() - start:.0f} s")
    return result


def judgeable(results: dict[str, Any]) -> bool:
    """Whether a file holds the figures of a full run, which the targets are judged by (a part alone may not)."""
    return all(key in results for key in ("writes", "reads", "cpu"))


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    by_name = {w["workload"]: w for w in results["writes"]}
    steady, hot, mock = by_name["steady"], by_name["hot counter"], by_name["origin mock"]
    transitions = by_name["transitions"]
    read_now = results["reads"]["cost"]["ending_now"]
    read_past = results["reads"]["cost"]["ending_past"]
    range_requests = max(read_now["tally_range"]["requests"]["worst"], read_past["tally_range"]["requests"]["worst"])
    range_units, fast_range_units = (
        max(read_now[design]["read_units_strong"]["worst"], read_past[design]["read_units_strong"]["worst"])
        for design in ("tally_range", "tally_range_transient")
    )
    keys = results["reads"]["batch_keys_ending_now"]
    cpu = results["cpu"]["parse_and_fold_records_per_second"]
    fixed_1000 = [entry for entry in results.get("scale_fixed_rate", []) if entry["shards"] == 1000]
    # Every write unit a user pays: bucket updates, directory entries and rank records, with the default
    # settings (nothing ranked) and with every counter ranked.
    # With days and months (every counter, UTC and one zone): the stream's writes and the close's, against the
    # floor with one write per counter-day and counter-month in each zone.
    over_floor = [
        (f"{w['workload']}: {label} WCU / floor WCU", w["ratios"][ratio])
        for w in results["writes"]
        for label, ratio in (
            ("tally", "tally_units_over_floor_units"),
            ("tally ranked", "tally_ranked_units_over_floor_units"),
            ("tally with days and months (all writes, close included)", "tally_calendar_units_over_floor_units"),
        )
        if ratio in w["ratios"]
    ]
    calendar = results.get("calendar")
    top_rows = {(row["counters"], row["distribution"]): row for row in results.get("top", {}).get("rows", [])}
    top_zipf = top_rows.get((1_000_000, "zipf"))
    top_writes = results.get("top_writes")
    # One rule's history (bench.backfill): every write unit it spends (buckets and the directory) against the floor
    # for its bucket items, and no other rule's item.
    rule_rows = [
        row
        for entry in results.get("backfill_rule", [])
        for row in (
            (f"one-rule backfill, {entry['workload'].split(' (')[0]}: all WCU (buckets, directory) / floor WCU", "<= 1.1",
             entry["units_with_directory_over_floor"], lambda v: v <= 1.1),
            (f"one-rule backfill, {entry['workload'].split(' (')[0]}: other rules' items written", "0",
             entry["other_rules_items_written"], lambda v: v == 0),
        )
    ]
    # A calendar prefix's older days (bench.backfill): every write unit (days, months, progress) against one write a
    # counter-day and counter-month with events per kept zone, and no minute, hour or other counter's item.
    calendar_backfill_rows = [
        row
        for entry in results.get("backfill_calendar", [])
        for row in (
            (f"calendar backfill, {entry['workload'].split(' (')[0]}: all WCU (days, months, progress) / floor WCU",
             "<= 1.1", entry["units_over_floor"], lambda v: v <= 1.1),
            (f"calendar backfill, {entry['workload'].split(' (')[0]}: minute, hour or other counters' items written",
             "0", entry["minute_or_hour_items_written"] + entry["other_counters_items_written"], lambda v: v == 0),
        )
    ]
    rows = [
        ("steady: origin WCU / tally WCU", ">= 25", steady["ratios"]["origin_units_over_tally_units"], lambda v: v >= 25),
        ("hot: origin WCU / tally WCU", ">= 1000", hot["ratios"]["origin_units_over_tally_units"], lambda v: v >= 1000),
        ("steady: bucket writes / floor", "<= 1.1", steady["ratios"]["tally_bucket_writes_over_floor"], lambda v: v <= 1.1),
        ("hot: bucket writes / floor", "<= 1.1", hot["ratios"]["tally_bucket_writes_over_floor"], lambda v: v <= 1.1),
        (
            "transitions: bucket writes / floor",
            "<= 1.1",
            transitions["ratios"]["tally_bucket_writes_over_floor"],
            lambda v: v <= 1.1,
        ),
        ("hot: busiest item writes per window", "<= 1", hot["tally"]["busiest_item_writes_per_window"], lambda v: v <= 1),
        *((name, "<= 1.1", ratio, lambda v: v <= 1.1) for name, ratio in over_floor),
        *(
            (
                ("24 h top-10 of 10^6 Zipf counters: read units (eventual)", "<= 200", top_zipf["read_units"], lambda v: v <= 200),
                ("24 h top-10 of 10^6 Zipf counters: requests", "<= 10", top_zipf["requests"], lambda v: v <= 10),
                ("24 h top-10 of 10^6 Zipf counters: exact (1 = yes)", "1", int(top_zipf["exact"]), lambda v: v == 1),
            )
            if top_zipf
            else ()
        ),
        *(
            (
                (
                    "fan-out + per-page rule: rank records and directory WCU / floor WCU",
                    "<= 0.25",
                    top_writes["ratios"]["ranks_and_directory_over_floor"],
                    lambda v: v <= 0.25,
                ),
            )
            if top_writes
            else ()
        ),
        *rule_rows,
        *calendar_backfill_rows,
        *(
            (
                ("calendar workload, closed daily: all WCU / floor WCU (counter-days and -months included)", "<= 1.1",
                 calendar["workload"]["units_over_floor_units"], lambda v: v <= 1.1),
                ("365 closed days of 1 counter: read units (strong, worst zone)", "<= 10",
                 calendar["reads"]["worst"]["days_read_units_strong"], lambda v: v <= 10),
                ("24 closed months of 1 counter: read units (strong, worst zone)", "<= 2",
                 calendar["reads"]["worst"]["months_read_units_strong"], lambda v: v <= 2),
                ("this month so far (month_to_date): requests, worst instant", "<= 3",
                 calendar["reads"]["worst"]["month_to_date_requests"], lambda v: v <= 3),
            )
            if calendar
            else ()
        ),
        ("origin's mock: origin WCU / tally WCU", ">= 1.15", mock["ratios"]["origin_units_over_tally_units"], lambda v: v >= 1.15),
        *(
            (f"1,000 shards, fixed rate, {entry['mix']}: origin / tally", ">= 1.5", entry["origin_over_tally"], lambda v: v >= 1.5)
            for entry in fixed_1000
        ),
        ("batch keys, 24 h ending now, isolated (skew 5 min)", "<= 83", keys["default_skew"], lambda v: v <= 83),
        ("batch keys, 24 h ending now, fast path (skew 0)", "<= 54", keys["transient_no_skew"], lambda v: v <= 54),
        ("range plan requests, any 24 h window", "<= 3", range_requests, lambda v: v <= 3),
        # Isolated, a run of up to 59 minute items can pass 4 KB: one unit more than the fast path's.
        ("range plan RCU (strong), any 24 h window, isolated", "<= 4", range_units, lambda v: v <= 4),
        ("range plan RCU (strong), any 24 h window, fast path", "<= 3", fast_range_units, lambda v: v <= 3),
        ("parse + fold records/s per core", ">= 200000", cpu, lambda v: v >= 200_000),
        ("fold records/s per core", ">= 400000", results["cpu"]["fold_records_per_second"], lambda v: v >= 400_000),
        *(
            (f"1,000 shards, fixed rate, {entry['mix']}: failed invocations", "0", entry["failed_invocations"], lambda v: v == 0)
            for entry in fixed_1000
        ),
        *(
            (f"1,000 shards, fixed rate, {entry['mix']}: p99 window end to committed (s)", "<= 10",
             entry["p99_commit_seconds"], lambda v: v is not None and v <= 10)  # None: some never committed
            for entry in fixed_1000
        ),
    ]
    midnight_1000 = [
        entry for entry in results.get("scale_day_boundary", [])
        if entry["shards"] == 1000 and entry["directory"] == scale.SPREAD_DIRECTORY
    ]
    rows += [
        row
        for entry in midnight_1000
        for row in (
            (f"1,000 shards across midnight, {entry['counters']:,} counters: failed invocations", "0",
             entry["failed_invocations"], lambda v: v == 0),
            (f"1,000 shards across midnight, {entry['counters']:,} counters: p99 window end to committed (s)",
             "<= 10", entry["p99_commit_seconds"], lambda v: v is not None and v <= 10),
        )
    ]
    judged = [{"target": name, "wanted": wanted, "figure": figure, "met": bool(check(figure))} for name, wanted, figure, check in rows]
    if not fixed_1000:
        judged.append({"target": "1,000 shards, fixed rate (make bench-scale)", "wanted": "run", "figure": None, "met": False})
    if not top_zipf or not top_writes:
        judged.append({"target": "top N (python -m bench top)", "wanted": "run", "figure": None, "met": False})
    if not calendar:
        judged.append({"target": "days and months (python -m bench calendar)", "wanted": "run", "figure": None, "met": False})
    if not midnight_1000:
        judged.append({"target": "1,000 shards across midnight (make bench-scale)", "wanted": "run", "figure": None,
                       "met": False})
    return judged


def write_jobs(settings: Settings, config: DeliveryConfig, measured: tuple) -> list[tuple[str, Any]]:
    """Every workload's writes (tally as deployed and with every counter ranked, the origin, the deduplicating
    design and the floor), and three of them written into moto as well: one job each, a label and a callable
    giving its figures (the workloads' entries under ``writes``, in the order of ``measured``)."""
    return [
        *((f"writes: {w.name}", lambda w=w: {"writes": [writes.measure(w, settings, config)]}) for w in measured),
        ("writes into moto", lambda: {"writes_checked_against_moto": writes.verify_against_moto(
            workloads.origin_mock(hours=2), settings, config)}),
        ("fan-out writes into moto", lambda: {"fan_out_writes_checked_against_moto": writes.verify_against_moto(
            workloads.fan_out(providers=5, per_second=2, seconds=300), settings, config)}),
        ("transitions writes into moto", lambda: {"transitions_writes_checked_against_moto": writes.verify_against_moto(
            workloads.transitions(providers=5, per_second=2, seconds=300, ttl_minutes=20), settings, config)}),
    ]


def write_results(
    settings: Settings | None = None, config: DeliveryConfig | None = None, measured: tuple | None = None
) -> dict[str, Any]:
    """``write_jobs``' figures, one job after the other (``python -m bench writes``)."""
    if settings is None or config is None:
        settings, config, _ = deployment()
    if measured is None:
        measured = (workloads.origin_mock(), workloads.steady(), workloads.hot(), workloads.fan_out(),
                    workloads.backfill(), workloads.transitions())
    return merged([timed(label, job) for label, job in write_jobs(settings, config, measured)])


def merged(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Jobs' figures in one: lists under the same key joined in the jobs' order, anything else as given."""
    results: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            if isinstance(value, list) and isinstance(results.get(key), list):
                results[key] = results[key] + value
            else:
                results[key] = value
    return results


# The counting jobs of a run, by label, for the worker processes (forked: they find them here by label).
_JOBS: dict[str, Any] = {}
# Jobs that take longest, started first so that both cores finish together.
_LONGEST_FIRST = ("writes: transitions", "writes: hot counter", "fan-out writes into moto", "days and months",
                  "writes: fan-out", "writes: backfill", "top N", "histogram rule", "distinct rule")


def _run_job(label: str) -> dict[str, Any]:
    return timed(label, _JOBS[label])


def counted_in_parallel(jobs: list[tuple[str, Any]], workers: int) -> dict[str, Any]:
    """The jobs' figures, run ``workers`` at a time in forked processes (they count requests and units, which
    sharing the cores does not change), merged in the jobs' order."""
    _JOBS.clear()
    _JOBS.update(jobs)
    order = sorted(_JOBS, key=lambda label: _LONGEST_FIRST.index(label) if label in _LONGEST_FIRST else len(_LONGEST_FIRST))
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        by_label = dict(zip(order, pool.map(_run_job, order, chunksize=1), strict=True))
    return merged([by_label[label] for label, _ in jobs])


def run() -> dict[str, Any]:
    settings, config, described = deployment()
    mock, steady, hot = workloads.origin_mock(), workloads.steady(), workloads.hot()
    fan_out, backfill, transitions = workloads.fan_out(), workloads.backfill(), workloads.transitions()
    results: dict[str, Any] = {"machine": machine(), "settings": described}
    counting = [
        *write_jobs(settings, config, (mock, steady, hot, fan_out, backfill, transitions)),
        ("histogram rule", lambda: histogram_results(settings, config)),
        ("distinct rule", distinct_results),
        ("reads", read_results),
        ("alerts", alert_results),
        ("top N", top_results),
        ("one rule's backfill", backfill_rule_results),
        ("a calendar prefix's backfill", backfill_calendar_results),
        ("the close of days and months (model)", close_scale_results),
        ("days and months", calendar_results),
    ]
    results.update(counted_in_parallel(counting, COUNTING_WORKERS))
    # What is timed runs alone, one part after the other, once the counting is done.
    results["cpu"] = timed("parse and fold", lambda: speed.parse_and_fold(steady, settings))
    results["invocation_against_moto"] = timed("invocations", lambda: speed.invocations([steady, hot], settings, config))
    results["query_latency_moto_server"] = timed("query latency", lambda: latency.measure(settings))
    results.update(timed("read API on loopback", read_api_results))
    return results


def read_results() -> dict[str, Any]:
    """Keys, requests and read units of a 24 h count by every plan (isolated and fast path) and the origin's,
    at every minute offset of the hour; and each design's answers against brute force on the origin's mock."""
    settings, _config, _described = deployment()
    return {
        "reads": {
            "counter_length": len(reads.COUNTER),
            "cost": reads.costs(settings),
            "cost_at_1000_shards": {
                "bucket_lanes": scale.lanes_for(1000),
                **reads.costs(replace(settings, bucket_lanes=scale.lanes_for(1000)), shards=1000),
            },
            "batch_keys_ending_now": {
                "default_skew": reads.batch_keys_ending_now(settings),
                "no_skew": reads.batch_keys_ending_now(replace(settings, max_clock_skew_ms=0)),
                "transient_default_skew": reads.batch_keys_ending_now(settings, allow_transient=True),
                "transient_no_skew": reads.batch_keys_ending_now(
                    replace(settings, max_clock_skew_ms=0), allow_transient=True
                ),
            },
            "accuracy_on_origin_mock": reads.accuracy(list(workloads.origin_mock().events()), settings),
        }
    }


def histogram_results(settings: Settings | None = None, config: DeliveryConfig | None = None) -> dict[str, Any]:
    """The fan-out with and without a histogram rule, and a day of it at a lower rate (full hours: what a 24 h
    read meets), and what a histogram bucket weighs by the spread of its values."""
    if settings is None or config is None:
        settings, config, _ = deployment()
    return {
        "histogram": {
            "fan_out": aggregates.histogram_costs(settings, config),
            "fan_out_day": aggregates.histogram_costs(settings, config, providers=10, per_second=2, seconds=25 * 3600),
            "bucket_size_by_spread": aggregates.bucket_size_by_spread(),
        }
    }


def distinct_results() -> dict[str, Any]:
    """The steady and hot workloads without and with a distinct rule over their visitors."""
    settings, config, _ = deployment()
    return {
        "distinct": [aggregates.distinct_costs(w, settings, config) for w in (workloads.steady(), workloads.hot())],
        "distinct_writes_checked_against_moto": writes.verify_against_moto(
            workloads.with_distinct(workloads.steady(counters=5, per_second=5, seconds=300)), settings, config
        ),
    }


def alert_results() -> dict[str, Any]:
    return {"alerts": alerts.costs()}


def top_results() -> dict[str, Any]:
    """A 24 h top-10's reads over 10^4 to 10^6 modeled counters, the writes its rank records add (the pages'
    prefix ranked), and the trade between the two for a few level factors."""
    settings, config, _ = deployment()
    ranked = replace(settings, ranked_prefixes=(top.PREFIX,))
    return {"top": top.costs(settings), "top_writes": top.write_costs(ranked, config), "top_trade": top.trade(settings)}


def scale_results() -> dict[str, Any]:
    return {
        "scale_model": scale.model_description(),
        **scale.results(),
        **scale.distinct_results(),
        **scale.day_boundary_results(),
        **scale.alert_latency_results(),
    }


def scale_shards_results() -> dict[str, Any]:
    """The scale model's shard counts (5 events/s per shard, recommended lanes and one lane)."""
    return {"scale_model": scale.model_description(), **scale.shard_results()}


def scale_lanes_results() -> dict[str, Any]:
    """The scale model's lane choices at 1,000 shards."""
    return {"scale_model": scale.model_description(), **scale.lane_results()}


def scale_fixed_rate_results() -> dict[str, Any]:
    """The scale model's fixed 5,000 events/s over more shards, beside the origin's write units."""
    return {"scale_model": scale.model_description(), **scale.fixed_rate_results()}


def scale_distinct_results() -> dict[str, Any]:
    return scale.distinct_results()


def day_boundary_results() -> dict[str, Any]:
    return scale.day_boundary_results()


def alert_latency_results() -> dict[str, Any]:
    return scale.alert_latency_results()


def read_api_results() -> dict[str, Any]:
    return {"read_api_loopback": read_api.measure()}


# Parts that run alone: their figures replace only their own keys in the file(s) written.
def backfill_scale_results(items: int = 10**6) -> dict[str, Any]:
    """The backfill measured here at ``items`` items (1 and 8 workers), and modeled on AWS from the published
    parse and fold rate of one core."""
    published = json.loads(PUBLISHED.read_text()).get("cpu", {}) if PUBLISHED.exists() else {}
    return backfill_scale.results(items, published.get("parse_and_fold_records_per_second"))


def backfill_scale_model_results() -> dict[str, Any]:
    """The backfill's model alone, from the measured figures published by backfill-scale (seconds)."""
    published = json.loads(PUBLISHED.read_text()) if PUBLISHED.exists() else {}
    if "backfill_scale" not in published:
        raise SystemExit("no backfill_scale figures in bench/results.json to model from: run python -m bench backfill-scale")
    return backfill_scale.remodel(published["backfill_scale"])


def backfill_rule_results() -> dict[str, Any]:
    """The backfill of one rule added later, alone, against the floor for its bucket items (bench.backfill)."""
    return {"backfill_rule": backfill.rule_results()}


def backfill_calendar_results() -> dict[str, Any]:
    """The backfill of a calendar prefix's older days alone, against one write a counter-day and -month (bench.backfill)."""
    return {"backfill_calendar": backfill.calendar_results()}


def close_scale_results() -> dict[str, Any]:
    """The daily close of days and months: its requests and CPU per counter measured here, modeled at scale."""
    return close_scale.results()


def report_close_scale(out: Console, results: dict[str, Any]) -> None:
    figures = results.get("close_scale")
    if not figures:
        return
    assumed = figures["assumed"]
    per = figures["per_counter"]
    table = Table(title=f"The close of one counter, measured here ({figures['measured']['counters_of_each_kind']} of each kind, "
                        "every directory partition, one thread)")
    for column in ("close", "Queries", "updates", "sketch writes", "WCU", "children bytes", "client CPU ms"):
        table.add_column(column, justify="right")
    for label, row in per.items():
        table.add_row(label.replace("_", " "), f"{row['queries']:g}", f"{row['updates']:g}", f"{row['sketch_writes']:g}",
                      f"{row['write_units']:g}", f"{row['children_bytes']:,.0f}", f"{row['cpu_seconds'] * 1000:.3f}")
    out.print(table)
    model = Table(title=f"The daily close on AWS, modeled ({assumed['request_seconds'] * 1000:g} ms a request, "
                        f"{assumed['reads_in_flight']} reads and {assumed['updates_in_flight']} updates in flight a part, "
                        f"sketch merges one at a time, {assumed['distinct_share']:.0%} distinct counters)")
    for column in ("run", "counters/day", "zones", "parts", "requests", "RRU", "WCU", "longest part", "wall", "GB-s",
                   "cost $", "keeps up"):
        model.add_column(column, justify="right")
    for row in figures["rows"]:
        longest = _duration(row["longest_part_seconds"])
        if "longest_part_seconds_a_month_a_part" in row:
            longest += f" ({_duration(row['longest_part_seconds_a_month_a_part'])})"
        model.add_row(row["case"], f"{row['counters_a_day']:.0e}", "+".join(row["zones"]).replace("America/", ""),
                      str(row["parts"]), f"{row['requests']:,}", f"{row['read_units']:,}", f"{row['write_units']:,}",
                      longest, _duration(row["wall_seconds"]), f"{row['lambda_gb_seconds']:,}", f"{row['cost_usd']:,.2f}",
                      "yes" if row["keeps_up"] and row["within_lambda_timeout"] else "NO")
    out.print(model)
    out.print(f"a month of the daily close at 10^6 counters a day in two zones: ${figures['month_at_a_million_counters_two_zones_usd']:,.2f}"
              " (catch-up: the longest part in parts of a week of days, and of a whole month in brackets)")


def calendar_results() -> dict[str, Any]:
    """Days and months (bench.calendar_buckets): the calendar workload closed daily, the reads of closed days and
    months and of this month so far, the storage a counter keeps, and the close checked on moto."""
    settings, config, _ = deployment()
    return calendar_buckets.results(settings, config)


def report_backfill_scale(out: Console, results: dict[str, Any]) -> None:
    figures = results["backfill_scale"]
    measured = figures["measured"]
    table = Table(title=f"backfill measured here: {measured['items']:,} items, {measured['bucket_items']:,} bucket items, "
                        f"{measured['cores']} cores at load {measured['load_average']}")
    for column in ("way", "workers", "fold s", "commit s", "wall s", "WCU", "exact", "speed-up"):
        table.add_column(column, justify="right")
    table.add_row("single process", "1", f"{measured['single_process_parse_and_fold_seconds']}", "",
                  f"{measured['single_process_seconds']}", f"{measured['single_process_write_units']:,}", "reference", "")
    for run in measured["runs"]:
        table.add_row("in-account stages", str(run["workers"]), str(run["fold_seconds"]), str(run["commit_seconds"]),
                      str(run["wall_seconds"]), f"{run['write_units']:,}", "yes" if run["exact"] else "NO", f"{run['speed_up']}x")
    out.print(table)
    model = Table(title=f"backfill on AWS, modeled (fold {figures['fold_items_per_second_per_worker']:,} items/s per worker; "
                        f"prices of {figures['prices_date']})")
    for column in ("shape", "warm WCU", "items", "workers", "committers", "fold s", "commit s", "wall", "write bound",
                   "bound", "goal", "in a day", "cost $"):
        model.add_column(column, justify="right")
    for row in figures["rows"]:
        model.add_row(row["shape"], f"{row['warm_throughput_wcu']:,}", f"{row['items']:.0e}", str(row["workers"]),
                      str(row["committers"]), f"{row['fold_seconds']:,}", f"{row['commit_seconds']:,}",
                      _duration(row["wall_seconds"]), _duration(row["write_bound_seconds"]), row["bound"],
                      "met" if row["meets_goal"] else "missed", "yes" if row["within_a_day"] else "NO",
                      f"{row['cost_usd']:,.2f}")
    for row in figures["single_process"]:
        model.add_row(row["shape"], f"{row['warm_throughput_wcu']:,}", f"{row['items']:.0e}", "laptop", "", "", "",
                      _duration(row["wall_seconds"]), _duration(row["write_bound_seconds"]), row["bound"], "",
                      "yes" if row["within_a_day"] else "NO", f"{row['cost_usd']:,.2f}")
    out.print(model)
    report_backfill_part_models(out, figures)


def report_backfill_part_models(out: Console, figures: dict[str, Any]) -> None:
    """One rule's history, and a calendar prefix's older days, beside the whole table's backfill row by row: the
    same fold, a part of the writes."""
    if figures.get("rule_rows"):
        rule = figures["rule_assumed"]
        _report_beside_table(out, figures, figures["rule_rows"], "one rule", (
            f"one rule's history on AWS at {{sizes}} items, modeled beside the whole table's (one rule of "
            f"{rule['rules']}: {rule['rule_share_of_bucket_items']:.0%} of its bucket items; the whole export read)"))
    if figures.get("calendar_rows"):
        calendar = figures["calendar_assumed"]
        _report_beside_table(out, figures, figures["calendar_rows"], "calendar", (
            f"a calendar prefix's older days on AWS at {{sizes}} items (backfill.py --calendar, in the account), "
            f"modeled beside the whole table's ({calendar['prefix_share_of_events']:.0%} of the events, "
            f"{calendar['zones']} zones, {calendar['days']} days and {calendar['months']} months kept: one write a "
            "counter-day and -month with events; the whole export read)"))


def _report_beside_table(out: Console, figures: dict[str, Any], rows: list[dict[str, Any]], label: str, title: str) -> None:
    """Rows of a backfill of part of a table, each under the whole table's row of the same shape and size."""
    sizes = sorted({row["items"] for row in rows})
    model = Table(title=title.format(sizes=", ".join(f"{n:.0e}" for n in sizes)))
    for column in ("shape", "warm WCU", "workers", "counted", "bucket items", "fold s", "commit s", "wall",
                   "bound", "export $", "Lambda $", "writes $", "SFN $", "S3 $", "cost $"):
        model.add_column(column, justify="right")
    for part_row in rows:
        table = backfill_scale.table_row(figures["rows"], part_row)
        for counted, row in (("table", table), (label, part_row)):
            cost = row["cost_usd_by_service"]
            model.add_row(
                row["shape"] if counted == "table" else "", f"{row['warm_throughput_wcu']:,}",
                str(row["workers"]), counted, f"{row['bucket_items']:,}", f"{row['fold_seconds']:,}",
                f"{row['commit_seconds']:,}", _duration(row["wall_seconds"]), row["bound"], f"{cost['export']:,.2f}",
                f"{cost['lambda']:,.2f}", f"{cost['dynamodb_writes']:,.2f}", f"{cost['step_functions']:,.2f}",
                f"{cost['s3']:,.2f}", f"{row['cost_usd']:,.2f}",
            )
    out.print(model)


def _duration(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f} s"



PARTS = {"scale": (scale_results, lambda out, results: report_scale(out, results)),
         "scale-shards": (scale_shards_results, lambda out, results: report_scale_shards(out, results)),
         "scale-lanes": (scale_lanes_results, lambda out, results: report_scale_lanes(out, results)),
         "scale-fixed-rate": (scale_fixed_rate_results, lambda out, results: report_scale_fixed_rate(out, results)),
         "scale-distinct": (scale_distinct_results, lambda out, results: report_scale_distinct(out, results)),
         "day-boundary": (day_boundary_results, lambda out, results: report_day_boundary(out, results)),
         "alert-latency": (alert_latency_results, lambda out, results: report_alert_latency(out, results)),
         "reads": (read_results, lambda out, results: report_reads(out, results)),
         "read-api": (read_api_results, lambda out, results: report_read_api(out, results)),
         "histogram": (histogram_results, lambda out, results: report_histogram(out, results["histogram"])),
         "distinct": (distinct_results, lambda out, results: report_distinct(out, results)),
         "alerts": (alert_results, lambda out, results: report_alerts(out, results)),
         "top": (top_results, lambda out, results: report_top(out, results)),
         "backfill-scale": (backfill_scale_results, lambda out, results: report_backfill_scale(out, results)),
         "backfill-scale-model": (backfill_scale_model_results, lambda out, results: report_backfill_scale(out, results)),
         "backfill-rule": (backfill_rule_results, lambda out, results: backfill.report_rule(out, results["backfill_rule"])),
         "backfill-calendar": (backfill_calendar_results,
                               lambda out, results: backfill.report_calendar(out, results["backfill_calendar"])),
         "close-scale-model": (close_scale_results, lambda out, results: report_close_scale(out, results)),
         "calendar": (calendar_results, lambda out, results: (calendar_buckets.report(out, results),
                                                              report_targets(out, results))),
         "writes": (write_results, lambda out, results: (report_writes(out, results), calendar_buckets.report(out, results),
                                                         report_targets(out, results)))}


def report_writes(out: Console, results: dict[str, Any]) -> None:
    table = Table(title="Write cost per 1,000 events (WCU)")
    for column in ("workload", "events", "origin", "dedup", "tally", "floor", "tally/floor", "ranked/floor",
                   "with days and months / floor", "origin/tally", "dedup/tally", "directory WCU (share of tally)",
                   "rank records WCU, all ranked (share of floor)", "busiest item writes/s: origin -> tally"):
        table.add_column(column, justify="right")
    for w in results["writes"]:
        table.add_row(
            w["workload"], f"{w['events']:,}", f"{w['origin']['write_units_per_1000_events']:,}",
            f"{w['dedup']['write_units_per_1000_events']:,}",
            f"{w['tally']['write_units_per_1000_events']:,}", f"{w['floor']['write_units_per_1000_events']:,}",
            f"{w['ratios']['tally_units_over_floor_units']}x", f"{w['ratios']['tally_ranked_units_over_floor_units']}x",
            _calendar_ratio(w["ratios"].get("tally_calendar_units_over_floor_units")),
            f"{w['ratios']['origin_units_over_tally_units']:,}x",
            f"{w['ratios']['dedup_units_over_tally_units']:,}x",
            f"{w['tally']['directory_write_units']:,} (+{w['ratios']['directory_units_over_counting_units']:.1%})",
            f"{w['tally_ranked']['rank_write_units']:,} (+{w['ratios']['rank_units_over_floor_units']:.1%})",
            f"{w['origin']['busiest_item_writes_per_second']:,} -> {w['tally']['busiest_item_writes_per_second']}",
        )
    out.print(table)
    by_name = {w["workload"]: w for w in results["writes"]}
    checked = results["fan_out_writes_checked_against_moto"]
    fan_out = by_name["fan-out"]
    out.print(
        f"fan-out: {fan_out['counter_events']:,} counter events from {fan_out['events']:,} jobs; moto stores what the "
        f"meter saw: tally {checked['tally_matches_moto']}, origin {checked['origin_matches_moto']}, "
        f"dedup {checked['dedup_matches_moto']}"
    )
    checked = results["transitions_writes_checked_against_moto"]
    moved = by_name["transitions"]
    out.print(
        f"transitions: {moved['description']}; {moved['counter_events']:,} counter events; moto stores what the "
        f"meter saw: tally {checked['tally_matches_moto']}, origin {checked['origin_matches_moto']}"
    )


def _calendar_ratio(ratio: float | None) -> str:
    """A workload's all write units with days and months over its floor with them; marked where it misses 1.1."""
    if ratio is None:
        return "not run"
    return f"{ratio}x" if ratio <= 1.1 else f"[red]{ratio}x (misses 1.1)[/red]"


def report_targets(out: Console, results: dict[str, Any]) -> None:
    if "targets" not in results:
        out.print("Targets: judged from a full run's figures (make bench), not these alone")
        return
    table = Table(title="Targets")
    for column in ("target", "wanted", "figure", "met"):
        table.add_column(column, justify="right")
    for t in results["targets"]:
        table.add_row(t["target"], t["wanted"], "not run" if t["figure"] is None else f"{t['figure']:,}", "[green]yes[/green]" if t["met"] else "[red]no[/red]")
    out.print(table)


def report(results: dict[str, Any]) -> None:
    out = Console(width=150)  # the tables are wide; keep them whole when the output is not a terminal
    s = results["settings"]
    m = results["machine"]
    out.print(
        f"[bold]tally vs origin[/bold] - batch {s['batch_size']}, window {s['tumbling_window_seconds']} s, "
        f"skew {s['max_clock_skew_seconds']} s ({s['source']}); {m['cpu']}, {m['cores']} cores, Python {m['python']}"
    )

    report_writes(out, results)
    calendar_buckets.report(out, results)

    report_histogram(out, results["histogram"])
    report_distinct(out, results)

    report_reads(out, results)
    report_alerts(out, results)
    report_top(out, results)
    if results.get("backfill_rule"):
        backfill.report_rule(out, results["backfill_rule"])
    if results.get("backfill_calendar"):
        backfill.report_calendar(out, results["backfill_calendar"])
    report_close_scale(out, results)

    table = Table(title="Speed")
    for column in ("measure", "tally", "origin", "origin/tally"):
        table.add_column(column, justify="right")
    cpu = results["cpu"]
    table.add_row("parse records/s (1 core)", f"{cpu['parse_records_per_second']:,}", "", "")
    table.add_row("fold records/s (1 core)", f"{cpu['fold_records_per_second']:,}", "", "")
    table.add_row("parse + fold records/s (1 core)", f"{cpu['parse_and_fold_records_per_second']:,}", "", "")
    for row in cpu.get("aggregates", []):
        table.add_row(f"{row['aggregate']}: fold / parse + fold records/s (x plain)",
                      f"{row['fold_records_per_second']:,} ({row['fold_over_plain']}x) / "
                      f"{row['parse_and_fold_records_per_second']:,} ({row['parse_and_fold_over_plain']}x)", "", "")
    for run in results["invocation_against_moto"]:
        table.add_row(f"1,000-record invocation, {run['workload']} (s)", str(run["tally_seconds"]), str(run["origin_seconds"]),
                      f"{run['origin_over_tally']}x")
    for run in results["query_latency_moto_server"]:
        table.add_row(f"24 h query, {run['counters']} counter(s), batch plan (ms)", str(run["tally_batch_ms"]),
                      str(run["origin_ms"]), f"{run['origin_over_batch']}x")
        table.add_row(f"24 h query, {run['counters']} counter(s), range plan (ms)", str(run["tally_range_ms"]),
                      str(run["origin_ms"]), f"{run['origin_over_range']}x")
    out.print(table)

    if "scale" in results:
        report_scale(out, results)
    else:
        out.print("The scale model has not run here: make bench-scale")
    report_read_api(out, results)

    report_targets(out, results)


def report_reads(out: Console, results: dict[str, Any]) -> None:
    table = Table(title=f"Read cost of one 24 h count (counter of {results['reads']['counter_length']} characters)")
    for column in ("window ends", "design", "keys mean/worst", "requests worst", "RCU strong mean/worst",
                   "RCU eventual mean/worst", "wrong windows", "mean abs error"):
        table.add_column(column, justify="right")
    for ending, designs in results["reads"]["cost"].items():
        accuracy = results["reads"]["accuracy_on_origin_mock"][ending]
        for design, cost in designs.items():
            table.add_row(
                ending.removeprefix("ending_"), design, f"{cost['keys']['mean']} / {cost['keys']['worst']}",
                str(cost["requests"]["worst"]),
                f"{cost['read_units_strong']['mean']} / {cost['read_units_strong']['worst']}",
                f"{cost['read_units_eventual']['mean']} / {cost['read_units_eventual']['worst']}",
                f"{accuracy[design]['wrong_windows']}/{accuracy['windows']}", str(accuracy[design]["mean_absolute_error"]),
            )
    out.print(table)


def report_histogram(out: Console, histogram: dict[str, Any]) -> None:
    table = Table(title="A histogram rule beside the same rule without it (per-provider rule of the fan-out, job durations)")
    for column in ("workload", "histogram", "WCU / 1k events", "hour bucket bytes mean/max", "bins mean/max",
                   "minute bucket bytes mean/max", "24 h read RCU batch mean/worst", "range mean/worst"):
        table.add_column(column, justify="right")
    for run in (histogram["fan_out"], histogram["fan_out_day"]):
        for label in ("without", "with"):
            figures = run[label]
            hour, minute = figures["per_provider_buckets"]["hour"], figures["per_provider_buckets"]["minute"]
            batch, ranged = figures["reads_24h"]["batch"], figures["reads_24h"]["range"]
            table.add_row(
                run["workload"] if label == "without" else "", label, f"{figures['write_units_per_1000_events']:,}",
                f"{hour['bytes_mean']:,} / {hour['bytes_max']:,}", f"{hour['bins_mean']} / {hour['bins_max']}",
                f"{minute['bytes_mean']:,} / {minute['bytes_max']:,}", f"{batch['mean']} / {batch['worst']}",
                f"{ranged['mean']} / {ranged['worst']}",
            )
        ratio = run["with_over_without"]
        table.add_row("", "with / without", f"{ratio['write_units']}x", "", "", "",
                      f"{ratio['read_units_batch']}x", f"{ratio['read_units_range']}x")
    out.print(table)
    table = Table(title="An hour bucket whose values fill every bin of a spread (bytes; writes cost 1 WCU per KB)")
    for column in ("spread", "bins", "99 values per bin", "9,999 values per bin", "spread factor"):
        table.add_column(column, justify="right")
    for row in histogram["bucket_size_by_spread"]:
        table.add_row(row["spread"], str(row["bins"]), f"{row.get('bytes_with_99_per_bin', '')}",
                      f"{row.get('bytes_with_9999_per_bin', '')}", f"{row.get('spread_factor', '')}")
    out.print(table)


def report_distinct(out: Console, results: dict[str, Any]) -> None:
    table = Table(title="A distinct rule over each event's visitor beside the same counts without it (per 1,000 events)")
    for column in ("workload", "distinct", "WCU / 1k events", "RCU / 1k events (merges)", "sketch writes",
                   "sketch WCU", "sketch item bytes mean/max", "24 h read keys / RCU strong"):
        table.add_column(column, justify="right")
    for run in results["distinct"]:
        reads = run["reads_24h"]
        for label in ("without", "with"):
            figures = run[label]
            keys, units = (("count_plan_keys", "count_plan_read_units") if label == "without"
                           else ("union_plan_keys", "union_plan_read_units"))
            table.add_row(
                run["workload"] if label == "without" else "", label, f"{figures['write_units_per_1000_events']:,}",
                f"{figures['read_units_per_1000_events']:,}", f"{figures['sketch_writes']:,}",
                f"{figures['sketch_write_units']:,}", f"{figures['sketch_bytes_mean']:,} / {figures['sketch_bytes_max']:,}",
                f"{reads[keys]} / {reads[units]:g}",
            )
        table.add_row("", "with / without", f"{run['with_over_without_write_units']}x", "", "", "", "", "")
    out.print(table)
    checked = results["distinct_writes_checked_against_moto"]
    out.print(f"{checked['workload']}: moto stores what the meter saw: {checked['tally_matches_moto']}")


def report_scale(out: Console, results: dict[str, Any]) -> None:
    report_scale_shards(out, results)
    report_scale_lanes(out, results)
    report_scale_distinct(out, results)
    report_scale_fixed_rate(out, results)
    report_day_boundary(out, results)
    report_alert_latency(out, results)


def report_scale_shards(out: Console, results: dict[str, Any]) -> None:
    model = results["scale_model"]
    table = Table(title=f"Scale: shards committing {model['window_seconds']} s windows at once ({model['mix']}, "
                        f"{model['events_per_shard_second']:g} events/s per shard)")
    for column in ("shards", "events/s", "lanes", "WCU/1k events", "largest item (B)", "updates", "throttled",
                   "p50 s", "p99 s", "all shards s", "failed invocations", "uncommitted"):
        table.add_column(column, justify="right")
    for entry in results["scale"]:
        for figures in (entry["one_lane"], entry):
            table.add_row(
                f"{entry['shards']:,}", f"{entry['events_per_second']:,g}", str(figures["bucket_lanes"]),
                f"{figures['write_units_per_1000_events']:,}", f"{figures['largest_item_bytes']:,}",
                f"{figures['updates']:,}", f"{figures['throttled']:,}", _commit_seconds(figures["p50_commit_seconds"]),
                _commit_seconds(figures["p99_commit_seconds"]), _commit_seconds(figures["all_shards_committed_seconds"]),
                f"{figures['failed_invocations']:,}", f"{figures.get('uncommitted_shard_windows', 0):,}",
            )
    out.print(table)


def _commit_seconds(seconds: float | None) -> str:
    """A commit time of the scale model; None: not every shard window it covers had committed when the run stopped."""
    return "never" if seconds is None else str(seconds)


def report_scale_lanes(out: Console, results: dict[str, Any]) -> None:
    table = Table(title="Scale: lanes at 1,000 shards, 5,000 events/s")
    for column in ("lanes", "WCU/1k events", "largest item (B)", "throttled", "p99 s", "failed invocations",
                   "uncommitted"):
        table.add_column(column, justify="right")
    for figures in results["scale_lanes_at_1000_shards"]:
        table.add_row(str(figures["bucket_lanes"]), f"{figures['write_units_per_1000_events']:,}",
                      f"{figures['largest_item_bytes']:,}", f"{figures['throttled']:,}",
                      _commit_seconds(figures["p99_commit_seconds"]), f"{figures['failed_invocations']:,}",
                      f"{figures.get('uncommitted_shard_windows', 0):,}")
    out.print(table)


def report_scale_fixed_rate(out: Console, results: dict[str, Any]) -> None:
    table = Table(title="Scale: write cost at a fixed 5,000 events/s over more shards (WCU per 1,000 events)")
    for column in ("mix", "shards", "lanes", "tally", "origin", "dedup", "origin/tally", "dedup/tally",
                   "largest item (B)", "p99 s", "failed invocations"):
        table.add_column(column, justify="right")
    for entry in results["scale_fixed_rate"]:
        table.add_row(entry["mix"], f"{entry['shards']:,}", str(entry["bucket_lanes"]),
                      f"{entry['write_units_per_1000_events']:,}", f"{entry['origin_write_units_per_1000_events']:,}",
                      f"{entry['dedup_write_units_per_1000_events']:,}", f"{entry['origin_over_tally']}x",
                      f"{entry['dedup_over_tally']}x", f"{entry['largest_item_bytes']:,}",
                      _commit_seconds(entry["p99_commit_seconds"]), f"{entry['failed_invocations']:,}")
    out.print(table)


def report_scale_distinct(out: Console, results: dict[str, Any]) -> None:
    """The scale model's distinct rule: each lane's sketch merges in a partition of their own."""
    table = Table(title="Scale: a distinct rule on the hot counter (its visitors), the sketch merges after the counts")
    for column in ("shards", "lanes", "updates", "throttled", "sketch writes", "sketch conflicts",
                   "sketch throttled", "sketch WCU", "p50 s", "p99 s", "all shards s", "failed invocations"):
        table.add_column(column, justify="right")
    for figures in results.get("scale_distinct", []):
        table.add_row(
            f"{figures['shards']:,}", str(figures["bucket_lanes"]), f"{figures['updates']:,}",
            f"{figures['throttled']:,}", f"{figures['sketch_writes']:,}", f"{figures['sketch_conflicts']:,}",
            f"{figures['sketch_throttled']:,}", f"{figures['sketch_write_units']:,}", _commit_seconds(figures["p50_commit_seconds"]),
            _commit_seconds(figures["p99_commit_seconds"]), _commit_seconds(figures["all_shards_committed_seconds"]),
            f"{figures['failed_invocations']:,}",
        )
    out.print(table)


def report_day_boundary(out: Console, results: dict[str, Any]) -> None:
    rows = results.get("scale_day_boundary")
    if not rows:
        return
    table = Table(title="Scale: two windows before a UTC midnight and two after, the counter directory written "
                        "(5 events/s per shard; puts per window)")
    for column in ("counters", "shards", "directory", "lanes", "counters after midnight",
                   "previous release's puts then", "directory puts", "throttled puts", "directory WCU/day",
                   "rank records (throttled)", "p99 s before", "p99 s after", "failed invocations"):
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(
            f"{row['counters']:,}", f"{row['shards']:,}", row["directory"], str(row["bucket_lanes"]),
            f"{row['counters_in_first_window_after_midnight']:,}",
            f"{row['previous_release_puts_first_window_after_midnight']:,}",
            " / ".join(f"{n:,}" for n in row["directory_puts_by_window"]), f"{row['directory_puts_throttled']:,}",
            f"{row['directory_write_units_per_day']:,}",
            f"{row.get('rank_puts', 0):,} ({row.get('rank_puts_throttled', 0):,})", _commit_seconds(row["p99_commit_seconds_before_midnight"]),
            _commit_seconds(row["p99_commit_seconds_after_midnight"]), f"{row['failed_invocations']:,}",
        )
    out.print(table)


def report_alert_latency(out: Console, results: dict[str, Any]) -> None:
    figures = results.get("scale_alert_latency")
    if not figures:
        return
    out.print(
        f"Scale: an above alert ({figures['alert_window']} window, above {figures['alert_above']:,}) on "
        f"{figures['alerted_counters']} counters at {figures['shards']:,} shards: {figures['alerts_put']} alerts, "
        f"event arrival to alert put p50 {figures['p50_arrival_to_alert_seconds']} s, "
        f"p99 {figures['p99_arrival_to_alert_seconds']} s (window end to committed p99 {_commit_seconds(figures['p99_commit_seconds'])} s, "
        f"{figures['failed_invocations']} failed invocations)"
    )


def report_alerts(out: Console, results: dict[str, Any]) -> None:
    figures = results.get("alerts")
    if not figures:
        return
    table = Table(title=f"What above alerts add after each commit, per 1,000 events ({figures['window']} window, "
                        "strongly consistent reads)")
    for column in ("alerted counters", "events in the segment", "crossings", "read requests", "RCU",
                   "write requests", "WCU", "PutEvents"):
        table.add_column(column, justify="right")
    for row in (*figures["steady"], figures["all_crossing"]):
        table.add_row(
            f"{row['alerted_counters']:,}", f"{row['events']:,}", f"{row['crossings']:,}",
            f"{row['read_requests_per_1000_events']:,}", f"{row['read_units_per_1000_events']:,}",
            f"{row['write_requests_per_1000_events']:,}", f"{row['write_units_per_1000_events']:,}",
            f"{row['put_events_requests_per_1000_events']:,}",
        )
    out.print(table)


def report_top(out: Console, results: dict[str, Any]) -> None:
    figures = results.get("top")
    if not figures:
        return
    table = Table(title=f"A 24 h top-10 over modeled counters ({figures['events_per_second']:,} events/s in all), "
                        "the real Reader.top, eventually consistent")
    for column in ("counters", "distribution", "hours answered", "read units", "requests", "exact", "bound",
                   "rank records read", "counted", "10th total"):
        table.add_column(column, justify="right")
    for row in figures["rows"]:
        table.add_row(
            f"{row['counters']:,}", row["distribution"], f"{row['answered_hours']:g}", f"{row['read_units']:g}",
            str(row["requests"]), "yes" if row["exact"] else "no", "" if row["bound"] is None else f"{row['bound']:,}",
            f"{row['rank_records']:,}", str(row["counted"]), "" if row["nth_total"] is None else f"{row['nth_total']:,}",
        )
    out.print(table)
    writes = results.get("top_writes")
    if writes:
        ratios = writes["ratios"]
        out.print(
            f"{writes['workload']} ({writes['description']}): floor {writes['floor_write_units']:,} WCU; buckets "
            f"{ratios['buckets_over_floor']}x, directory +{ratios['directory_over_floor']}, rank records "
            f"+{ratios['ranks_over_floor']} ({writes['rank_writes']:,} puts in {writes['rank_requests']:,} requests); "
            f"in all {ratios['total_over_floor']}x the floor"
        )
    trade = results.get("top_trade")
    if trade:
        table = Table(title=f"The trade: a 24 h top-10 of {trade['counters']:,} Zipf counters against its rank records' "
                            "writes in an hour, by the factor between recorded levels above 11,623 events an hour")
        for column in ("factor", "read units / top", "requests / top", "exact", "counted", "rank WCU / hour",
                       "floor WCU / hour", "rank / floor"):
            table.add_column(column, justify="right")
        for row in trade["rows"]:
            table.add_row(
                f"{row['factor_above_11623']:g}", f"{row['read_units_per_top']:g}", str(row["requests_per_top"]),
                "yes" if row["exact"] else "no", str(row["counted"]), f"{row['rank_write_units_per_hour']:,}",
                f"{row['floor_write_units_per_hour']:,}", f"{row['rank_units_over_floor_units']:.2%}",
            )
        out.print(table)


def report_read_api(out: Console, results: dict[str, Any]) -> None:
    figures = results.get("read_api_loopback")
    if not figures:
        return
    table = Table(title=f"Read API on loopback (local adapter, handler, moto): {figures['window']}, "
                        f"{figures['seconds_per_case']:g} s per case")
    for column in ("counters", "clients", "requests", "requests/s", "p50 ms", "p99 ms", "errors",
                   "library p50 ms", "library p99 ms", "API/library p50"):
        table.add_column(column, justify="right")
    for case in figures["cases"]:
        table.add_row(
            str(case["counters"]), str(case["clients"]), f"{case['requests']:,}", f"{case['requests_per_second']:,}",
            str(case["p50_ms"]), str(case["p99_ms"]), str(case["errors"]), str(case["library_p50_ms"]),
            str(case["library_p99_ms"]), f"{case['api_over_library_p50']}x",
        )
    out.print(table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "part", nargs="?", choices=sorted(PARTS),
        help="run only the scale model, the read API's load, the histogram rule or the distinct rule",
    )
    parser.add_argument("--items", type=int, help="backfill-scale: items of the export measured here (default 10^6)")
    args = parser.parse_args(argv)
    if args.items is not None and (args.part != "backfill-scale" or args.items < FILES_PER_BENCH_EXPORT):
        parser.error(f"--items goes with backfill-scale, and is at least {FILES_PER_BENCH_EXPORT}")
    start = time.perf_counter()
    if args.part:
        measure, show = PARTS[args.part]
        if args.items is not None:
            measure = functools.partial(measure, args.items)
        figures = timed(args.part, measure)
    else:
        figures = run()
        figures["seconds"] = round(time.perf_counter() - start)
    published = json.loads(PUBLISHED.read_text()) if PUBLISHED.exists() else {}
    results = {**published, **figures}  # the figures of parts not run here stay
    if judgeable(results):  # a full run's figures are there to judge the targets by
        results["targets"] = targets(results)
    worse = named_regressions(published, figures)
    PUBLISHED.write_text(json.dumps(results, indent=2) + "\n")
    console.log(f"wrote {'the ' + args.part + ' figures' if args.part else 'the figures'} to "
                f"{PUBLISHED.relative_to(ROOT)} in {time.perf_counter() - start:.0f} s")
    out = Console(width=150)
    if args.part:
        show(out, results)
    else:
        report(results)
    report_regressions(out, worse)
    return 0


def report_regressions(out: Console, worse: list[Regression]) -> None:
    """Name every figure more than REGRESSION worse than the one published before this run."""
    if not worse:
        out.print(f"No figure regressed by more than {REGRESSION:.0%} against the published ones.")
        return
    out.print(f"[bold red]{len(worse)} figure(s) regressed by more than {REGRESSION:.0%} against the published ones:[/bold red]")
    for regression in worse:
        out.print(f"  {escape(str(regression))}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
