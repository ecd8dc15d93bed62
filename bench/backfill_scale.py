"""The backfill at scale: ``python -m bench backfill-scale`` (the ``backfill_scale`` figures).

Two parts. **Measured here**: an export of ``--items`` items (default 10^6)
in 16 gzip'd data files is counted twice, by today's single process
(``tally.backfill.backfill_export``) and by the in-account stages
(``tally.parallel_backfill``: files folded into per-range partials by 1 and by
8 worker processes, ranges merged and committed by as many), both into a
client that meters every write by DynamoDB's rules (``bench.cost``); the
tables they leave must be equal, item for item. No network: these are CPU
figures, on a machine whose cores are shared.

**Modeled**: wall time and cost of 10^7, 10^8 and 10^9 items at 10, 100
and 1,000 workers on AWS, beside today's single process, from the measured
fold rate and the assumptions and public prices below, for two shapes of
table: few counters (1,000, so the bucket items are bounded by the hours
and minutes the retentions keep) and many counters (half the items open a
bucket item of their own: per-listing counters of a marketplace). The commit
stage cannot beat the counts table's write throughput (an on-demand table's
warm throughput, which the user can raise ahead of time): each row says which
bound holds, workers or writes.

**One rule's history** (``rule_rows``, beside the whole table's ``rows`` at
10^9 items): the backfill of a rule added later, alone (``--rules NAME``).
The whole table is still exported (and billed), and every item of the export
is read and parsed, so its fold is the whole table's; its commit writes only
that rule's bucket items: assumed a quarter of the table's (``RULE_ASSUMED``:
four rules writing as many bucket items each). ``python -m bench
backfill-scale-model`` recomputes the model alone from the published measured
figures, in seconds.

**A calendar prefix's older days** (``calendar_rows``, beside them): the
in-account stages of ``backfill.py --stack … --calendar PREFIX``. The fold is
again the whole export's; the commit writes one item per counter-day and
counter-month with events of the prefix's counters, per kept zone
(``CALENDAR_ASSUMED``: a prefix holding a quarter of the events, UTC and one
zone, 400 days and 14 months kept; few counters: a quarter of 1,000 counters
with events every day; many counters: half the prefix's events open a day of
their own, and a month with it).
"""

from __future__ import annotations

import gzip
import io
import json
import math
import os
import random
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from boto3.dynamodb.types import TypeSerializer

from bench.cost import MeteredClient, metered_counts
from tally import exports
from tally.backfill import (
    BACKFILL_SEGMENT_ITEMS,
    BACKFILL_STATE_BUDGET_BYTES,
    BackfillSummary,
    HistoryScope,
    WriteRateLimit,
    backfill_export,
    chunks,
    export_outcomes,
    place,
)
from tally.core.commit import Writer
from tally.core.segments import Segment, SegmentFolder
from tally.core.settings import Settings
from tally.core.units import DAY_MS
from tally.dynamo.directory import CounterDirectory
from tally.parallel_backfill import COMMIT_CHUNK_ITEMS, commit_chunks, fold_images, merge

COUNT_FROM_MS = 1_795_428_000_000
EXPORT_ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/events/export/01795428000000-bench"
FILES = 16
MEASURED_WORKERS = (1, 8)

# Public AWS prices, us-east-1, as listed on 2026-11-27 (aws.amazon.com/<service>/pricing).
PRICES = {
    "s3_get_per_1000": 0.0004,
    "s3_put_per_1000": 0.005,
    "s3_transfer_out_per_gb": 0.09,  # today's path downloads the export to a laptop
    "lambda_arm_per_gb_second": 0.0000133334,
    "lambda_per_million_requests": 0.20,
    "step_functions_per_1000_transitions": 0.025,
    "dynamodb_on_demand_per_million_write_units": 0.625,
    "dynamodb_export_per_gb": 0.10,  # paid by both paths: the export itself
}
# Assumptions, stated so they can be argued with.
ASSUMED = {
    "export_bytes_per_item": 150,  # gzip'd DynamoDB JSON: 10^9 items is about 150 GB (100-200 GB)
    "table_bytes_per_item": 300,  # what the export is billed on
    "items_per_data_file": 1_000_000,  # an export's data files hold about this many items each
    "s3_read_mb_per_second": 90,  # one GET stream into one Lambda
    "worker_memory_gb": 1.769,  # one vCPU, as the construct sizes fold and commit workers
    "committer_updates_per_second": 3_200,  # 32 UpdateItems in flight at about 10 ms each
    "range_bucket_items_in_memory": 2_000_000,  # a committer merges its range in memory (1,769 MB)
    "transitions_per_child": 3,  # a Distributed Map child: start, task, end
    "fixed_seconds": 60,  # plan, map start-up, summary
    "laptop_download_mb_per_second": 50,
    "laptop_max_wcu": 1000,  # backfill.py's default --max-wcu
    "few_counters": 1000,
    "bucket_items_per_counter": 90 * 24 + 48 * 60,  # every hour of 90 days, every minute of 48 hours
    "many_counters_bucket_items_per_item": 0.5,
}
# One rule's history: the table counts with four rules, each writing as many bucket items; one of them, added
# later with a countFrom of its own, is backfilled alone. (bench.backfill measures such a rule at 11-16 % of its
# table's bucket items: a rule on a quarter of the orders.)
RULE_ASSUMED = {"rules": 4, "rule_share_of_bucket_items": 0.25}
RULE_ITEMS = (10**9,)
# A calendar prefix's older days: its counters hold a quarter of the events; days kept in UTC and one zone.
CALENDAR_ASSUMED = {"prefix_share_of_events": 0.25, "zones": 2, "days": 400, "months": 14}
WARM_THROUGHPUT_WCU = (4_000, 40_000)  # a new on-demand table; warmed to the default per-table quota
MODEL_ITEMS = (10**7, 10**8, 10**9)
MODEL_WORKERS = (10, 100, 1000)
GOAL_SECONDS = 3600
LAMBDA_SECONDS = 900  # a function's longest run

_serializer = TypeSerializer()


# Measured here.


def write_export(folder: Path, items: int, seed: int = 11) -> list[Path]:
    """``items`` events of items/100 counters over 30 days before count-from, in FILES gzip'd data files."""
    rng = random.Random(seed)
    counters = max(1, items // 100)
    paths = [folder / f"{index:04d}.json.gz" for index in range(FILES)]
    outs = [gzip.open(path, "wt", encoding="utf-8", compresslevel=1) for path in paths]
    for n in range(items):
        image = {
            "id": _serializer.serialize(str(n)),
            "counter": _serializer.serialize(f"listing-{rng.randrange(counters)}"),
            "ts": _serializer.serialize(COUNT_FROM_MS - rng.randrange(30 * DAY_MS)),
        }
        outs[n % FILES].write(json.dumps({"Item": image}) + "\n")
    for out in outs:
        out.close()
    return paths


class _Disk:
    """S3's get_object over local files, so the workers parse exactly what tally.exports parses."""

    def get_object(self, Bucket: str, Key: str) -> dict[str, Any]:  # noqa: N803
        return {"Body": io.BytesIO(Path(Key).read_bytes())}


def _fold(path: str, index: int, ranges: int) -> tuple[dict[int, str], float]:
    """One fold worker's file: its partials as the JSON it would write to S3, and the seconds it took."""
    start = time.perf_counter()
    partials, _ = fold_images(exports.items(_Disk(), "", path), index, HistoryScope(COUNT_FROM_MS), Settings(count_from_ms=COUNT_FROM_MS), ranges)
    written = {number: json.dumps(segment.to_state()) for number, segment in partials.items()}
    return written, time.perf_counter() - start


def parse_and_fold_seconds(paths: list[Path]) -> float:
    """Today's parse and fold of the same files in this process, without its commits: the CPU it spends."""
    settings = Settings(count_from_ms=COUNT_FROM_MS)
    start = time.perf_counter()
    folder = SegmentFolder(max_items=BACKFILL_SEGMENT_ITEMS, state_budget=BACKFILL_STATE_BUDGET_BYTES)
    for index, path in enumerate(paths):
        for first, chunk in chunks(exports.items(_Disk(), "", str(path))):
            for _segment in folder.fold(export_outcomes(chunk, place(index, first), COUNT_FROM_MS, settings)):
                pass
    return time.perf_counter() - start


def _commit(partials: list[str]) -> tuple[dict, int]:
    settings = Settings(count_from_ms=COUNT_FROM_MS)
    client = MeteredClient(("pk", "sk"))
    merged = merge(Segment.from_state(json.loads(state)) for state in partials)
    if merged is not None:
        counts = metered_counts(client, settings)
        commit = CounterDirectory(client, settings.counts_table, settings).recording(counts.commit)
        for part in commit_chunks(merged, COMMIT_CHUNK_ITEMS):
            commit(part, _writer())
    return client.items, client.meter.units


def _writer() -> Writer:
    return Writer.of_export(EXPORT_ARN)


def counts_of(items: dict) -> dict:
    """Every item's attributes but watermarks: what readers see (positions differ between the two ways)."""
    return {key: {name: value for name, value in item.items() if not name.startswith("~")} for key, item in items.items()}


def single_process(paths: list[Path]) -> tuple[dict, float, int]:
    settings = Settings(count_from_ms=COUNT_FROM_MS)
    client = MeteredClient(("pk", "sk"))
    counts = metered_counts(client, settings)
    start = time.perf_counter()
    backfill_export(
        EXPORT_ARN,
        [(str(path), exports.items(_Disk(), "", str(path))) for path in paths],
        scope=HistoryScope(COUNT_FROM_MS),
        settings=settings,
        commit=CounterDirectory(client, settings.counts_table, settings).recording(counts.commit),
        limit=WriteRateLimit(1e12),
        summary=BackfillSummary(),
    )
    return client.items, time.perf_counter() - start, client.meter.units


def parallel(paths: list[Path], workers: int) -> tuple[dict, float, float, int, float]:
    """The fold map, then the commit map, each ``workers`` processes; (table, fold s, commit s, write units, the
    fold workers' own seconds summed)."""
    ranges = max(workers, 1) * 4
    with ProcessPoolExecutor(workers) as pool:
        start = time.perf_counter()
        folded = list(pool.map(_fold, map(str, paths), range(len(paths)), [ranges] * len(paths)))
        fold_seconds = time.perf_counter() - start
        by_range = [[partials[number] for partials, _ in folded if number in partials] for number in range(ranges)]
        start = time.perf_counter()
        committed = list(pool.map(_commit, by_range))
        commit_seconds = time.perf_counter() - start
    table: dict = {}
    for items, _ in committed:
        table.update(items)
    worker_seconds = sum(seconds for _, seconds in folded)
    return table, fold_seconds, commit_seconds, sum(units for _, units in committed), worker_seconds


def measure(items: int = 10**6) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="tally-backfill-bench-") as folder:
        paths = write_export(Path(folder), items)
        reference, single_seconds, single_units = single_process(paths)
        today_fold_seconds = parse_and_fold_seconds(paths)
        expected = counts_of(reference)
        runs = []
        for workers in MEASURED_WORKERS:
            table, fold_seconds, commit_seconds, units, worker_seconds = parallel(paths, workers)
            runs.append({
                "workers": workers,
                "fold_seconds": round(fold_seconds, 2),
                "commit_seconds": round(commit_seconds, 2),
                "wall_seconds": round(fold_seconds + commit_seconds, 2),
                "write_units": units,
                "exact": counts_of(table) == expected,
                "fold_worker_seconds": round(worker_seconds, 2),
            })
    one = runs[0]["wall_seconds"]
    for run in runs:
        run["speed_up"] = round(one / run["wall_seconds"], 2)
    return {
        "items": items,
        "files": FILES,
        "bucket_items": len(expected),
        "single_process_seconds": round(single_seconds, 2),
        "single_process_write_units": single_units,
        "single_process_parse_and_fold_seconds": round(today_fold_seconds, 2),
        # What the in-account fold (partitioned by counter range, written as partials) costs over today's.
        "fold_over_parse_and_fold": round(runs[0]["fold_worker_seconds"] / today_fold_seconds, 2),
        "runs": runs,
        "load_average": round(os.getloadavg()[0], 1),
        "cores": os.cpu_count(),
    }


# Modeled.


def bucket_items(items: int, shape: str) -> int:
    if shape == "few counters":
        return min(items, ASSUMED["few_counters"] * ASSUMED["bucket_items_per_counter"])
    return int(items * ASSUMED["many_counters_bucket_items_per_item"])


def calendar_bucket_items(items: int, shape: str) -> int:
    """The day and month items a calendar prefix's older history fills (``CALENDAR_ASSUMED``)."""
    share, zones = CALENDAR_ASSUMED["prefix_share_of_events"], CALENDAR_ASSUMED["zones"]
    if shape == "few counters":
        periods = CALENDAR_ASSUMED["days"] + CALENDAR_ASSUMED["months"]
        return round(min(items * share * 2, ASSUMED["few_counters"] * share * periods) * zones)
    return round(items * share * ASSUMED["many_counters_bucket_items_per_item"] * 2 * zones)


def model_row(
    items: int, workers: int, shape: str, warm_wcu: int, fold_rate: float, share: float = 1.0, buckets: int | None = None
) -> dict[str, Any]:
    """One size, worker count, shape and write throughput, in the account; ``share``: the part of the table's
    bucket items the backfill writes (one rule's history: every item read and folded, its buckets alone written),
    or ``buckets``: the items it writes (a calendar prefix's days and months)."""
    files = math.ceil(items / ASSUMED["items_per_data_file"])
    per_file = items / files
    file_seconds = per_file / fold_rate + per_file * ASSUMED["export_bytes_per_item"] / (ASSUMED["s3_read_mb_per_second"] * 1e6)
    fold_seconds = math.ceil(files / min(workers, files)) * file_seconds
    buckets = round(bucket_items(items, shape) * share) if buckets is None else buckets
    # Committers beyond what the write throughput feeds would only wait (and be billed for it); ranges are
    # enough that each commits within Lambda's 15 minutes at its share of the rate, and fits its memory.
    per_committer = ASSUMED["committer_updates_per_second"]
    committers = max(1, min(workers, math.ceil(warm_wcu / per_committer)))
    share = min(per_committer, warm_wcu / committers)
    ranges = max(
        workers,
        math.ceil(buckets / (share * LAMBDA_SECONDS * 0.8)),
        math.ceil(buckets / ASSUMED["range_bucket_items_in_memory"]),
    )
    write_bound = buckets / warm_wcu
    committer_bound = buckets / (committers * per_committer)
    commit_seconds = max(write_bound, committer_bound)
    wall = ASSUMED["fixed_seconds"] + fold_seconds + commit_seconds
    gb = ASSUMED["worker_memory_gb"]
    lambda_gb_seconds = files * file_seconds * gb + committers * commit_seconds * gb
    gets = files + files * ranges + ranges  # data files; each range reads one partial per file; progress
    puts = files * ranges + files + ranges * math.ceil(buckets / ranges / 10_000)
    write_units = buckets  # one plain update per bucket item, the floor (directory and rank puts aside)
    cost = {
        "s3": gets / 1000 * PRICES["s3_get_per_1000"] + puts / 1000 * PRICES["s3_put_per_1000"],
        "lambda": lambda_gb_seconds * PRICES["lambda_arm_per_gb_second"]
        + (files + ranges + 2) / 1e6 * PRICES["lambda_per_million_requests"],
        "step_functions": (ASSUMED["transitions_per_child"] * (files + ranges) + 10) / 1000
        * PRICES["step_functions_per_1000_transitions"],
        "dynamodb_writes": write_units / 1e6 * PRICES["dynamodb_on_demand_per_million_write_units"],
        "export": items * ASSUMED["table_bytes_per_item"] / 1e9 * PRICES["dynamodb_export_per_gb"],
    }
    bound = "writes" if write_bound >= max(committer_bound, fold_seconds) else "workers"
    if bound == "writes":
        raise_ = "warm throughput, and backfillMaxWcu with it"
    elif fold_seconds >= committer_bound:
        raise_ = "backfillWorkers"
    else:
        raise_ = "backfillCommitters"
    return {
        "items": items,
        "workers": workers,
        "shape": shape,
        "warm_throughput_wcu": warm_wcu,
        "files": files,
        "bucket_items": buckets,
        "fold_seconds": round(fold_seconds),
        "commit_seconds": round(commit_seconds),
        "wall_seconds": round(wall),
        "write_bound_seconds": round(write_bound),
        "bound": bound,
        "raise": raise_,
        "meets_goal": wall <= GOAL_SECONDS or (bound == "writes" and wall <= 1.1 * write_bound),
        "within_a_day": wall <= DAY_MS / 1000,
        "committers": committers,
        "ranges": ranges,
        "lambda_gb_seconds": round(lambda_gb_seconds),
        "s3_requests": gets + puts,
        "step_functions_transitions": ASSUMED["transitions_per_child"] * (files + ranges) + 10,
        "write_units": write_units,
        "cost_usd": round(sum(cost.values()), 2),
        "cost_usd_by_service": {name: round(value, 2) for name, value in cost.items()},
    }


def single_process_row(items: int, shape: str, fold_rate: float) -> dict[str, Any]:
    """Today's path: download to a laptop, parse on one core, write at --max-wcu (1,000 by default)."""
    buckets = bucket_items(items, shape)
    download = items * ASSUMED["export_bytes_per_item"] / (ASSUMED["laptop_download_mb_per_second"] * 1e6)
    write_bound = buckets / ASSUMED["laptop_max_wcu"]
    wall = download + max(items / fold_rate, write_bound)  # parsing and writing overlap, segment by segment
    cost = {
        "s3_transfer_out": items * ASSUMED["export_bytes_per_item"] / 1e9 * PRICES["s3_transfer_out_per_gb"],
        "dynamodb_writes": buckets / 1e6 * PRICES["dynamodb_on_demand_per_million_write_units"],
        "export": items * ASSUMED["table_bytes_per_item"] / 1e9 * PRICES["dynamodb_export_per_gb"],
    }
    return {
        "items": items,
        "workers": 1,
        "shape": shape,
        "warm_throughput_wcu": ASSUMED["laptop_max_wcu"],
        "bucket_items": buckets,
        "wall_seconds": round(wall),
        "write_bound_seconds": round(write_bound),
        "bound": "writes" if write_bound >= items / fold_rate else "workers",
        "within_a_day": wall <= DAY_MS / 1000,
        "cost_usd": round(sum(cost.values()), 2),
        "cost_usd_by_service": {name: round(value, 2) for name, value in cost.items()},
    }


def model(fold_rate: float) -> dict[str, Any]:
    shapes = ("few counters", "many counters")
    rows = [
        model_row(items, workers, shape, wcu, fold_rate)
        for shape in shapes
        for wcu in WARM_THROUGHPUT_WCU
        for items in MODEL_ITEMS
        for workers in MODEL_WORKERS
    ]
    today = [single_process_row(items, shape, fold_rate) for shape in shapes for items in MODEL_ITEMS]
    share = RULE_ASSUMED["rule_share_of_bucket_items"]
    rule_rows = [
        {**model_row(items, workers, shape, wcu, fold_rate, share), "rule_share_of_bucket_items": share,
         "table_bucket_items": bucket_items(items, shape)}
        for shape in shapes
        for wcu in WARM_THROUGHPUT_WCU
        for items in RULE_ITEMS
        for workers in MODEL_WORKERS
    ]
    calendar_rows = [
        {**model_row(items, workers, shape, wcu, fold_rate, buckets=calendar_bucket_items(items, shape)),
         "table_bucket_items": bucket_items(items, shape)}
        for shape in shapes
        for wcu in WARM_THROUGHPUT_WCU
        for items in RULE_ITEMS
        for workers in MODEL_WORKERS
    ]
    return {"prices": PRICES, "prices_date": "2026-11-27", "assumed": ASSUMED, "rows": rows, "single_process": today,
            "rule_assumed": RULE_ASSUMED, "rule_rows": rule_rows, "calendar_assumed": CALENDAR_ASSUMED,
            "calendar_rows": calendar_rows}


def table_row(rows: list[dict[str, Any]], rule_row: dict[str, Any]) -> dict[str, Any]:
    """The whole table's row a rule's row stands beside: same shape, throughput, size and workers."""
    keys = ("shape", "warm_throughput_wcu", "items", "workers")
    [row] = [row for row in rows if all(row[key] == rule_row[key] for key in keys)]
    return row


def results(items: int = 10**6, published_parse_and_fold_per_second: float | None = None) -> dict[str, Any]:
    """Measured here, then modeled: a Lambda worker (one vCPU) folds at one core's published parse and fold
    rate (``cpu`` in results.json, from a quiet run) over the in-account fold's measured overhead."""
    measured = measure(items)
    base = published_parse_and_fold_per_second or items / measured["single_process_parse_and_fold_seconds"]
    fold_rate = round(base / measured["fold_over_parse_and_fold"])  # the rate published is the rate modeled
    return {"backfill_scale": {"measured": measured, "fold_items_per_second_per_worker": fold_rate, **model(fold_rate)}}


def remodel(published: dict[str, Any]) -> dict[str, Any]:
    """The model alone, from the figures ``results`` published: at the fold rate they state (which the model ran
    at), so the same rows, with whatever the model has gained since."""
    fold_rate = published["fold_items_per_second_per_worker"]
    return {"backfill_scale": {"measured": published["measured"], "fold_items_per_second_per_worker": fold_rate, **model(fold_rate)}}
