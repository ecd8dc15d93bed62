"""What an aggregate costs beside the count: the same workload with and without it, side by side.

Histograms: the fan-out workload's per-provider rule with and without a
``histogram`` of job durations. Writes run tally's real path through the metering client
(bench/writes.py); reads are charged by DynamoDB's rules on the very items
those writes left, for a 24 h count of every revenue counter by both plans.
Item sizes show what the bins add to a bucket, and ``bucket_size_by_spread``
states how wide a spread of values a bucket holds in 1 KB.

Distinct counts: the steady and hot workloads counted as they are and with a
distinct rule over each event's visitor (``workloads.with_distinct``). The
sketch items' conditional writes and the strongly consistent reads each merge
starts from are charged by the metering client too.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from bench import workloads, writes
from bench.cost import MeteredClient, batch_get_read_units, item_size, query_read_units
from bench.workloads import START_MS
from tally.core.buckets import Bucket, bucket_item_keys, lane_sort_keys, sketch_counter
from tally.core.histograms import GAMMA, bin_of, is_bin
from tally.core.plans import Plan, PlanKind, make_plan
from tally.core.settings import Settings
from tally.core.units import HOUR_MS, MINUTE_MS
from tally.core.windows import Window
from tally.local.delivery import DeliveryConfig

UNIT_BYTES = 1024
PROVIDER_COUNTERS = "jobs/counter-"  # the fan-out's per-provider counters (its providers are the steady counters)


def histogram_costs(settings: Settings, config: DeliveryConfig, **fan_out: int) -> dict[str, Any]:
    """Write and read units of the fan-out workload (``fan_out``: its arguments) without and with a histogram
    on its per-provider rule."""
    plain, binned = workloads.fan_out(**fan_out), workloads.fan_out(histogram=True, **fan_out)
    last_hour = START_MS + fan_out.get("seconds", 600) // 3600 * HOUR_MS
    runs = {}
    for label, run in (("without", plain), ("with", binned)):
        client = writes.run_tally(run, settings, config)
        runs[label] = {
            "write_units": client.meter.units,
            "write_units_per_1000_events": writes.per_thousand(client.meter.units, run.total),
            "item_writes": client.meter.item_writes,
            "per_provider_buckets": _bucket_sizes(client, PROVIDER_COUNTERS),
            "reads_24h": _read_costs(client, PROVIDER_COUNTERS, settings, last_hour),
        }
    ratio = {
        "write_units": round(runs["with"]["write_units"] / runs["without"]["write_units"], 3),
        **{
            f"read_units_{plan}": round(
                runs["with"]["reads_24h"][plan]["mean"] / runs["without"]["reads_24h"][plan]["mean"], 3
            )
            for plan in ("batch", "range")
        },
    }
    return {"workload": binned.description, "events": plain.total, **runs, "with_over_without": ratio}


def distinct_costs(workload: workloads.Workload, settings: Settings, config: DeliveryConfig) -> dict[str, Any]:
    """Write and read units per 1,000 events of a workload counted without and with a distinct rule, what its
    sketch items weigh, and what a 24 h distinct count reads (a union plan, sketches beside counts)."""
    runs = {}
    for label, run in (("without", workload), ("with", workloads.with_distinct(workload))):
        client = writes.run_tally(run, settings, config)
        meter = client.meter
        sketches = [size for (pk, _), size in client.sizes.items() if sketch_counter(pk) is not None]
        runs[label] = {
            "write_units": meter.units,
            "write_units_per_1000_events": writes.per_thousand(meter.units, run.total),
            "read_units_per_1000_events": writes.per_thousand(meter.read_units, run.total),
            "sketch_writes": meter.sketch_writes,
            "sketch_write_units": meter.sketch_units,
            "sketch_reads": meter.read_requests,
            "sketch_items": len(sketches),
            "sketch_bytes_mean": round(statistics.fmean(sketches)) if sketches else 0,
            "sketch_bytes_max": max(sketches, default=0),
        }
    with_rule, without = runs["with"], runs["without"]
    return {
        "workload": workload.name,
        "description": workloads.with_distinct(workload).description,
        "events": workload.total,
        **runs,
        "with_over_without_write_units": round(with_rule["write_units"] / without["write_units"], 2),
        "reads_24h": _distinct_read_units(settings, with_rule["sketch_bytes_max"]),
    }


def _distinct_read_units(settings: Settings, sketch_bytes: int) -> dict[str, Any]:
    """Keys and strongly consistent read units of one 24 h count ending now, by the (isolated) plan, and by
    the same plan for a distinct counter, which also reads each bucket's sketch lanes of ``sketch_bytes`` and
    the keys where 0.2.0 kept them (absent once they expire, a read unit each all the same)."""
    now = START_MS + 30 * 60_000 + 30_000  # inside an hour: both edges of the window are partial hours
    plan = make_plan(Window.ending(now), now, settings)
    lanes = settings.bucket_lanes
    counted = [key for b in plan.buckets for key in bucket_item_keys("c", b.sort_key, lanes, distinct=False)]
    union = [key for b in plan.buckets for key in bucket_item_keys("c", b.sort_key, lanes, distinct=True)]
    counts = set(counted)

    def size(key: tuple[str, str]) -> int:  # a count lane, a sketch lane, or 0.2.0's sketch key, expired
        return 100 if key in counts else sketch_bytes if sketch_counter(key[0]) is not None else 0

    sizes = [size(key) for key in union]
    return {
        "count_plan_keys": len(counted),
        "count_plan_read_units": batch_get_read_units([100] * len(counted), consistent=True),
        "union_plan_keys": len(union),
        "union_plan_read_units": batch_get_read_units(sizes, consistent=True),
    }


def _bucket_sizes(client: MeteredClient, prefix: str) -> dict[str, Any]:
    """Sizes and bins of the counters' bucket items as last written, hours and minutes apart."""
    result = {}
    for kind, marker in (("hour", "H#"), ("minute", "M#")):
        items = [item for (pk, sk), item in client.items.items() if pk.startswith(prefix) and sk.startswith(marker)]
        sizes = [item_size(item) for item in items]
        bins = [sum(1 for name in item if is_bin(name)) for item in items]
        result[kind] = {
            "items": len(items),
            "bytes_mean": round(statistics.fmean(sizes)) if sizes else 0,
            "bytes_max": max(sizes, default=0),
            "bins_mean": round(statistics.fmean(bins), 1) if bins else 0,
            "bins_max": max(bins, default=0),
            "over_1_kb": sum(1 for size in sizes if size > UNIT_BYTES),
        }
    return result


def _read_costs(client: MeteredClient, prefix: str, settings: Settings, last_hour: int) -> dict[str, Any]:
    """Strongly consistent read units of a 24 h count of each counter, for windows ending at every minute of the
    workload's last hour (now = the window's end), by both plans, from the stored items' sizes."""
    counters = sorted({pk for pk, _ in client.items if pk.startswith(prefix)})
    sizes = {key: item_size(item) for key, item in client.items.items()}
    per_plan: dict[str, list[float]] = {"batch": [], "range": []}
    for minute in range(1, 61):
        now = last_hour + minute * MINUTE_MS + 30_000
        window = Window.ending(now)
        for kind in PlanKind:
            plan = make_plan(window, now, settings, kind)
            for counter in counters:
                per_plan[kind.value].append(_plan_units(plan, counter, sizes, settings))
    return {
        plan: {"mean": round(statistics.fmean(units), 2), "worst": max(units)} for plan, units in per_plan.items()
    }


def _plan_units(plan: Plan, counter: str, sizes: dict[tuple[str, str], int], settings: Settings) -> float:
    def lanes(bucket: Bucket) -> Iterable[int]:
        return (sizes.get((counter, sk), 0) for sk in lane_sort_keys(bucket.sort_key, settings.bucket_lanes))

    if plan.kind is PlanKind.BATCH:
        return batch_get_read_units([size for bucket in plan.buckets for size in lanes(bucket)], consistent=True)
    return sum(
        query_read_units(
            [size for index in range(run.first.index, run.last.index + 1) for size in lanes(Bucket(run.first.kind, index))],
            consistent=True,
        )
        for run in plan.runs()
    )


SPREADS = (("1 ms to 1 s", 1, 1_000), ("10 ms to 10 s", 10, 10_000), ("1 ms to 60 s", 1, 60_000))


def bucket_size_by_spread(counter: str = "load/posts/counting-on-dynamodb") -> list[dict[str, Any]]:
    """Bytes of an hour bucket whose values fill every bin of a spread, with 1-99 and 100-9,999 values per bin,
    and the widest spread (factor) that stays within 1 KB: what a typical histogram bucket costs to write."""
    rows = []
    for label, low, high in SPREADS:
        bins = {bin_of(Decimal(low) * Decimal(GAMMA**k)) for k in range(math.ceil(math.log(high / low, GAMMA)) + 1)}
        row = {"spread": label, "bins": len(bins)}
        for per_bin in (99, 9_999):
            row[f"bytes_with_{per_bin}_per_bin"] = item_size(_bucket_item(counter, {name: per_bin for name in bins}))
        rows.append(row)
    for per_bin in (99, 9_999):
        bins: dict[str, int] = {}
        k = 0
        while item_size(_bucket_item(counter, {**bins, bin_of(Decimal(GAMMA**k)): per_bin})) <= UNIT_BYTES:
            bins[bin_of(Decimal(GAMMA**k))] = per_bin
            k += 1
        rows.append({"spread": f"widest within 1 KB at {per_bin:,} per bin", "bins": len(bins),
                     "spread_factor": round(GAMMA ** len(bins))})
    return rows


def _bucket_item(counter: str, bins: dict[str, int]) -> dict[str, dict[str, str]]:
    total = sum(bins.values())
    return {
        "pk": {"S": counter},
        "sk": {"S": "H#2026-11-23T14"},
        "count": {"N": str(total)},
        "sum": {"N": str(total * 1234)},
        "ttl": {"N": "1803600000"},
        **{name: {"N": str(count)} for name, count in bins.items()},
    }
