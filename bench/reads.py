"""Read cost and correctness of a rolling 24 h count: the origin's query against tally's two plans.

Cost is computed per window from the keys each design reads, at every minute
offset of the hour, for windows ending now and windows ending in the past,
assuming every bucket a plan reads exists (the worst case for a Query, which
is charged by the size of what it returns). A tally bucket item holds the
watermark of every shard that wrote it (its tag and its position: 19 bytes for
a 21-digit sequence number), spread over the lanes. Correctness is checked on
the origin's mock workload against a brute-force count of the raw events.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Iterable
from typing import Any

from bench import origin
from bench.cost import batch_get_read_units, item_size, query_read_units
from bench.workloads import START_MS, STREAM_ARN, Event
from tally.core.buckets import Bucket, lane_sort_key
from tally.core.commit import Writer, order_preserving
from tally.dynamo.calls import BATCH_GET_LIMIT
from tally.core.plans import Plan, PlanKind, make_plan
from tally.core.settings import Settings
from tally.core.units import HOUR_MS, MINUTE_MS
from tally.core.sums import sum_plan
from tally.core.windows import Window

COUNTER = "c" * 32  # the longest counter the read-unit target speaks of
SEQUENCE_NUMBER = 10**20  # a 21-digit stream sequence number, as DynamoDB Streams hands them out
LARGE_COUNT = 999_999_999_999  # a generous count: item sizes, hence read units, are worst case
PAST_HOURS = 3  # how long before now a "past" window ends
NOW_HOUR_MS = START_MS + 36 * HOUR_MS  # the last hour of the origin's mock data
SECONDS_INTO_MINUTE_MS = 30_000


def tally_item_size(
    bucket: Bucket, settings: Settings, counter: str = COUNTER, lane: int = 0, watermarks: int = 1
) -> int:
    item = {
        "pk": {"S": counter},
        "sk": {"S": lane_sort_key(bucket.sort_key, lane)},
        "count": {"N": str(LARGE_COUNT)},
        "ttl": {"N": str(bucket.ttl_seconds(settings))},
    }
    for shard in range(watermarks):
        writer = Writer.of_shard(STREAM_ARN, f"shardId-{shard:08d}")
        item[writer.tag] = {"B": order_preserving(SEQUENCE_NUMBER)}
    return item_size(item)


def tally_item_sizes(bucket: Bucket, settings: Settings, shards: int = 1) -> list[int]:
    """Every item a read of this bucket returns: one per lane (all assumed written, the worst case),
    each with the watermarks of its share of the ``shards`` that write the bucket."""
    lanes = settings.bucket_lanes
    return [tally_item_size(bucket, settings, lane=lane, watermarks=-(-shards // lanes)) for lane in range(lanes)]


def origin_item_size(key: str) -> int:
    ttl = 1_795_000_000 + origin.RETENTION_SECONDS
    return item_size({"id": {"S": key}, "count": {"N": str(LARGE_COUNT)}, "ttl": {"N": str(ttl)}})


def batch_cost(sizes: list[int]) -> dict[str, float]:
    return {
        "keys": len(sizes),
        "requests": math.ceil(len(sizes) / BATCH_GET_LIMIT),
        "read_units_strong": batch_get_read_units(sizes, consistent=True),
        "read_units_eventual": batch_get_read_units(sizes, consistent=False),
    }


def range_cost(plan: Plan, settings: Settings, shards: int = 1) -> dict[str, float]:
    run_sizes = [
        [
            size
            for index in range(run.first.index, run.last.index + 1)
            for size in tally_item_sizes(Bucket(run.first.granularity, index), settings, shards)
        ]
        for run in plan.runs()
    ]
    return {
        "keys": len(plan.terms),
        "requests": len(run_sizes),
        "read_units_strong": sum(query_read_units(sizes, consistent=True) for sizes in run_sizes),
        "read_units_eventual": sum(query_read_units(sizes, consistent=False) for sizes in run_sizes),
    }


# tally's plans: the isolated default, and the fast path that may show a transient count (allow_transient).
TALLY_PLANS = {
    "tally_batch": (PlanKind.BATCH, False),
    "tally_range": (PlanKind.RANGE, False),
    "tally_batch_transient": (PlanKind.BATCH, True),
    "tally_range_transient": (PlanKind.RANGE, True),
}


def window_costs(now_ms: int, at_ms: int, settings: Settings, shards: int = 1) -> dict[str, dict[str, float]]:
    window = Window.ending(at_ms)
    costs = {"origin": batch_cost([origin_item_size(key) for key in origin.query_keys(COUNTER, at_ms)])}
    for design, (kind, allow_transient) in TALLY_PLANS.items():
        plan = make_plan(window, now_ms, settings, kind, allow_transient=allow_transient)
        if kind is PlanKind.BATCH:
            sizes = [size for bucket in plan.buckets for size in tally_item_sizes(bucket, settings, shards)]
            costs[design] = batch_cost(sizes)
        else:
            costs[design] = range_cost(plan, settings, shards)
    return costs


def offsets(ending: str) -> Iterable[tuple[int, int, int]]:
    """(minute offset, now, window end) for every minute offset of the hour."""
    for minute in range(60):
        now = NOW_HOUR_MS + minute * MINUTE_MS + SECONDS_INTO_MINUTE_MS
        yield minute, now, now if ending == "now" else now - PAST_HOURS * HOUR_MS


def summarize(values: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    return {
        field: {"mean": round(statistics.fmean(v[field] for v in values), 2), "worst": max(v[field] for v in values)}
        for field in values[0]
    }


def costs(settings: Settings, shards: int = 1) -> dict[str, Any]:
    """Mean and worst cost over the 60 minute offsets, per design, for windows ending now and in the past,
    with every bucket written by ``shards`` shards."""
    result: dict[str, Any] = {}
    for ending in ("now", "past"):
        per_offset = [window_costs(now, at, settings, shards) for _minute, now, at in offsets(ending)]
        result[f"ending_{ending}"] = {design: summarize([c[design] for c in per_offset]) for design in per_offset[0]}
    return result


def bucket_counts(events: Iterable[Event], now_ms: int) -> tuple[dict[str, Counter[str]], dict[str, Counter[str]]]:
    """Per counter, what each design stores from the events that exist at ``now_ms``: tally by sort key, origin by id."""
    tally: dict[str, Counter[str]] = {}
    origins: dict[str, Counter[str]] = {}
    for counter, event_ms in events:
        if event_ms > now_ms:
            continue
        for bucket in (Bucket.of_minute(event_ms // MINUTE_MS), Bucket.of_hour(event_ms // HOUR_MS)):
            tally.setdefault(counter, Counter())[bucket.sort_key] += 1
        seconds = event_ms // 1000
        for key in (origin.hour_key(counter, seconds), origin.minute_key(counter, seconds)):
            origins.setdefault(counter, Counter())[key] += 1
    return tally, origins


def accuracy(events: list[Event], settings: Settings) -> dict[str, Any]:
    """Each design's answer against the brute-force count, over every counter and minute offset."""
    counters = sorted({counter for counter, _ in events})
    data_end = START_MS + 37 * HOUR_MS
    result: dict[str, Any] = {}
    for ending in ("now", "past"):
        errors: dict[str, list[int]] = {"origin": [], **{design: [] for design in TALLY_PLANS}}
        truths: list[int] = []
        for _minute, now, at in offsets(ending):
            now = now if ending == "now" else data_end
            tally_counts, origin_counts = bucket_counts(events, now)
            window = Window.ending(at)
            plans = {
                design: make_plan(window, now, settings, kind, allow_transient=allow_transient)
                for design, (kind, allow_transient) in TALLY_PLANS.items()
            }
            for counter in counters:
                truth = origin.brute_force(events, counter, window.first_minute, window.last_minute, now)
                truths.append(truth)
                stored = tally_counts.get(counter, Counter())
                errors["origin"].append(origin.sum_keys(origin_counts.get(counter, Counter()), counter, at) - truth)
                for design, plan in plans.items():
                    errors[design].append(sum_plan(plan, stored).count - truth)
        mean_truth = statistics.fmean(truths)
        result[f"ending_{ending}"] = {
            "windows": len(truths),
            "mean_true_count": round(mean_truth, 1),
            **{
                design: {
                    "wrong_windows": sum(1 for e in errs if e),
                    "mean_absolute_error": round(statistics.fmean(abs(e) for e in errs), 2),
                    "worst_absolute_error": max(abs(e) for e in errs),
                    "mean_relative_error": round(statistics.fmean(abs(e) for e in errs) / mean_truth, 4),
                }
                for design, errs in errors.items()
            },
        }
    return result


def batch_keys_ending_now(settings: Settings, allow_transient: bool = False) -> int:
    """The batch plan's most keys for a 24 h window ending now, over every minute offset."""
    return max(
        len(make_plan(Window.ending(now), now, settings, allow_transient=allow_transient).terms)
        for _m, now, _at in offsets("now")
    )

