"""The daily close of days and months at scale: ``python -m bench close-scale-model`` (the ``close_scale`` figures).

Part of ``make bench`` (about a second). Two parts.

**Measured here**: ``Closer.close_part`` of every directory partition closes a
UTC day, a New York day (two UTC days of hours) and a month of days for
``MEASURED_COUNTERS`` plain counters and as many distinct ones (a distinct
rule: their sketches too), against an in-memory table that answers Query
(paged at 1 MB) and meters every request by DynamoDB's rules (``CloseMeter``
over ``bench.cost.MeteredClient``). That gives, for the code as it is, the
requests each counter costs (by kind: the counter directory's Queries, the
children's (their late marks with them), the sketch lanes', the updates, the sketch
reads and writes), their read and write units, and the client's CPU per
counter (one thread; the seconds this machine's core spends building requests
and parsing answers, the table's own work left out as far as it can be: the
meter's bookkeeping is timed apart and taken off).

**Modelled**: the daily close in the account at 10^4, 10^5 and 10^6 kept
counters a day, with UTC alone and with UTC and one zone (New York), on an
ordinary day and on a month's first days (its month closed too), and a first
run catching up a month of days. From the measured requests and CPU per
counter and these assumptions (``ASSUMED``): a request takes 8 ms (DynamoDB in
the region, p50), a part keeps 32 reads and 32 updates in flight (``CLOSE_WORKERS``,
``COMMIT_WORKERS``) but merges sketches one at a time (``sketch_steps``), a
part's 1,024 MB give it 0.58 of a vCPU as fast as this core, 16 parts run at
once, a function starts in a second; prices are ``bench.backfill_scale.PRICES``
(us-east-1) and DynamoDB's on-demand reads. Wall time is the plan, then each
wave of 16 parts (the slower of its requests over what is in flight and its
CPU), then the finish.
"""

from __future__ import annotations

import bisect
import functools
import math
import time
from collections import Counter
from datetime import date
from typing import Any

from bench.backfill_scale import PRICES
from bench.cost import MeteredClient, WriteMeter, item_size, query_read_units
from tally.closing import CLOSE_WORKERS, MAX_DAYS_PER_PART, MAX_DAYS_PER_RUN, MAX_PARTS_AT_ONCE, Closer
from tally.core.buckets import Bucket, day_index, sketch_partition
from tally.core.commit import Writer
from tally.core.directory import DIRECTORY_PARTITIONS, entry_item
from tally.core.lanes import LaneHistory
from tally.core.ladder import children
from tally.core.rules import parse_rules
from tally.core.settings import Settings
from tally.core.tables import SKETCH_ATTRIBUTE
from tally.core.sketches import Sketch, hash_of
from tally.core.units import DAY_MS, HOUR_MS
from tally.dynamo.commit import COMMIT_WORKERS
from tally.dynamo.counts_table import CountsTable

MEASURED_COUNTERS = 120  # of each kind, plain and distinct: the measurement takes about a second
WEEK_COUNTERS = 20  # a week of days closed in one run: what each further day of a run costs
ZONE = "America/New_York"
DAY = date(2026, 10, 14)  # an ordinary day; New York's holds two UTC days of hours
MONTH = date(2026, 10, 1)
QUERY_PAGE_BYTES = 1024 * 1024
MODEL_COUNTERS = (10**4, 10**5, 10**6)
MODEL_ZONES = (("UTC",), ("UTC", ZONE))
# DynamoDB on demand, us-east-1, beside bench.backfill_scale.PRICES (same listing): per million read request units.
READ_PRICE_PER_MILLION = 0.125
# Assumptions, stated so they can be argued with.
ASSUMED = {
    "request_seconds": 0.008,  # one Query or UpdateItem, in the region
    "reads_in_flight": CLOSE_WORKERS,  # a part reads this many counters at once
    "updates_in_flight": COMMIT_WORKERS,  # and commits this many updates at once
    "sketch_writes_in_flight": 1,  # a segment's sketch merges are written one after the other
    "part_vcpu": 1024 / 1769,  # Lambda gives a full vCPU at 1,769 MB; a part has 1,024 MB
    "part_memory_gb": 1.0,
    "step_memory_gb": 0.25,
    "step_seconds": 1.0,  # the plan, the finish
    "function_start_seconds": 1.0,  # a wave's cold starts and Step Functions' own hops
    "distinct_share": 0.1,  # of the kept counters, those a distinct rule writes
    "counters_every_day": "the same counters count every day, each in every hour",
    "directory_entry_bytes": None,  # measured: one entry's item size
    "lambda_timeout_seconds": 900,
}


class CloseMeter(MeteredClient):
    """The metered table, answering the close's Queries too: by partition and sort-key range (or prefix), paged
    at 1 MB of items read, each request charged by DynamoDB's rules and counted by the kind of partition."""

    def __init__(self) -> None:
        super().__init__(("pk", "sk"))
        self.partitions: dict[str, list[str]] = {}
        self.reads: Counter[str] = Counter()  # Query requests by the kind of partition
        self.read_units: Counter[str] = Counter()
        self.read_bytes: Counter[str] = Counter()

    def _write(self, key: Any, after: dict[str, dict[str, str]], *, transactional: bool) -> None:
        pk, sk = key["pk"]["S"], key["sk"]["S"]
        if (pk, sk) not in self.items:
            bisect.insort(self.partitions.setdefault(pk, []), sk)
        super()._write(key, after, transactional=transactional)

    def put(self, item: dict[str, dict[str, str]]) -> None:
        """Seed an item, unmetered."""
        self._write(item, item, transactional=False)

    def reset(self) -> None:
        self.meter, self.reads, self.read_units, self.read_bytes = WriteMeter(), Counter(), Counter(), Counter()

    def query(self, **request: Any) -> dict[str, Any]:
        values = request["ExpressionAttributeValues"]
        pk = values[":pk"]["S"]
        keys = self.partitions.get(pk, [])
        condition = request["KeyConditionExpression"]
        if "BETWEEN" in condition:
            low, high = values[":first"]["S"], values[":last"]["S"]
        elif "begins_with" in condition:
            low, high = values[":prefix"]["S"], values[":prefix"]["S"] + "\U0010ffff"
        else:
            low, high = "", "\U0010ffff"
        start = request.get("ExclusiveStartKey", {}).get("sk", {}).get("S")
        index = bisect.bisect_right(keys, start) if start is not None else bisect.bisect_left(keys, low)
        found, sizes = [], []
        while index < len(keys) and keys[index] <= high and sum(sizes) < QUERY_PAGE_BYTES:
            found.append(self.items[(pk, keys[index])])
            sizes.append(self.sizes[(pk, keys[index])])
            index += 1
        kind = next((name for prefix, name in KINDS if pk.startswith(prefix)), "children")
        self.reads[kind] += 1
        self.read_units[kind] += query_read_units(sizes, consistent=bool(request.get("ConsistentRead")))
        self.read_bytes[kind] += sum(sizes)
        answer: dict[str, Any] = {"Items": found, "Count": len(found)}
        if index < len(keys) and keys[index] <= high:
            answer["LastEvaluatedKey"] = {"pk": {"S": pk}, "sk": {"S": found[-1]["sk"]["S"]}}
        return answer


KINDS = (("#counters#", "directory"), ("#sketches#", "sketch lanes"))
STREAM_WRITER = Writer.of_shard("arn:aws:dynamodb:us-east-1:123456789012:table/events/stream/bench", "shardId-00000001")
CLOSE_WRITER = Writer.of_close()


PREFIXES = {"plain": "plain/", "distinct": "buyers/"}
RULES = parse_rules('[{"name": "plain", "counter": "plain/{n}"}, {"name": "buyers", "counter": "buyers/{n}", "distinct": "buyer"}]')


def settings_of(zones: tuple[str, ...], kind: str) -> Settings:
    """The kind's counters keep days in ``zones``."""
    return Settings(rules=RULES, calendar_prefixes=(PREFIXES[kind],), calendar_zones=tuple(z for z in zones if z != "UTC"))


def seed_hours(meter: CloseMeter, names: list[str], first_hour: int, hours: int, settings: Settings) -> None:
    """Every counter counted in every hour (its hour items as the stream leaves them, one shard's watermark), its
    directory entries, and a distinct counter's hour sketches (a few buyers an hour)."""
    watermark = {"B": STREAM_WRITER.position(_segment())}
    for hour in range(first_hour, first_hour + hours):
        bucket = Bucket.of_hour(hour)
        for number, name in enumerate(names):
            meter.put({"pk": {"S": name}, "sk": {"S": bucket.sort_key}, "count": {"N": str(1 + (number + hour) % 40)},
                       "ttl": {"N": str(bucket.ttl_seconds(settings))}, STREAM_WRITER.tag: watermark})
            if name.startswith("buyers/"):
                meter.put({"pk": {"S": sketch_partition(name, 0)}, "sk": {"S": bucket.sort_key},
                           SKETCH_ATTRIBUTE: {"B": sketch_bytes(4, number + hour)},
                           "ttl": {"N": str(bucket.ttl_seconds(settings))}})
    for day in range(first_hour * HOUR_MS // DAY_MS, (first_hour + hours - 1) * HOUR_MS // DAY_MS + 1):
        for name in names:
            meter.put(entry_item((day, name), settings))


def seed_days(meter: CloseMeter, names: list[str], month: Bucket, settings: Settings) -> None:
    """A month of closed days for every counter (the close's items: count, TTL, its watermark), and their sketches."""
    first, last = children(month)
    watermark = {"B": CLOSE_WRITER.position(_segment())}
    for index in range(first.index, last.index + 1):
        day = Bucket("D", index, month.zone)
        for number, name in enumerate(names):
            meter.put({"pk": {"S": name}, "sk": {"S": day.sort_key}, "count": {"N": str(200 + number % 90)},
                       "ttl": {"N": str(day.ttl_seconds(settings))}, CLOSE_WRITER.tag: watermark})
            if name.startswith("buyers/"):
                meter.put({"pk": {"S": sketch_partition(name, 0)}, "sk": {"S": day.sort_key},
                           SKETCH_ATTRIBUTE: {"B": sketch_bytes(60, number + index)},
                           "ttl": {"N": str(day.ttl_seconds(settings))}})
    for day in range(month.start_ms // DAY_MS, (month.end_ms - 1) // DAY_MS + 1):
        for name in names:
            meter.put(entry_item((day, name), settings))


@functools.cache
def sketch_bytes(values: int, seed: int, kinds: int = 16) -> bytes:
    """A sketch of ``values`` buyers, one of ``kinds`` that overlap (an hour's: a few; a day's: some dozens)."""
    chosen = seed % kinds
    return Sketch(hash_of(f"b{(chosen * 7 + k) % 500}") for k in range(values)).to_bytes()


def _segment() -> Any:
    from tally.core.segments import Segment

    return Segment("1", 0, "1", held=None)


def close_every_part(meter: CloseMeter, periods: list[Bucket], settings: Settings) -> dict[str, Any]:
    """Close ``periods`` for every directory partition, one thread; what it took."""
    table = CountsTable(meter, settings.counts_table, settings, workers=1, previous_release_until_ms=0,
                        lanes=LaneHistory.always(settings.bucket_lanes))
    meter.reset()
    started = time.process_time()
    written = counted = 0
    for part in range(DIRECTORY_PARTITIONS):
        summary = Closer(table, workers=1).close_part(periods, part)
        written += summary.written
        counted += summary.counters
    cpu = time.process_time() - started
    return {"cpu_seconds": round(cpu, 4), "meter_cpu_seconds": round(meter_seconds(meter), 4), "counters": counted,
            "written": written, "reads": dict(meter.reads), "read_bytes": dict(meter.read_bytes),
            "read_units": {kind: round(units, 1) for kind, units in meter.read_units.items()},
            "updates": meter.meter.requests - meter.meter.sketch_writes, "sketch_writes": meter.meter.sketch_writes,
            "sketch_reads": meter.meter.read_requests, "sketch_read_units": meter.meter.read_units,
            "write_units": meter.meter.units}


def meter_seconds(meter: CloseMeter) -> float:
    """What the meter's own bookkeeping cost the close's Queries (a Query of a counter's day, timed alone)."""
    requests = sum(meter.reads.values())
    name = next(pk for pk in meter.partitions if not pk.startswith("#"))
    request = {"ExpressionAttributeValues": {":pk": {"S": name}, ":first": {"S": "H#"}, ":last": {"S": "H#~"}},
               "KeyConditionExpression": "#pk = :pk AND #sk BETWEEN :first AND :last"}
    kept = (Counter(meter.reads), Counter(meter.read_units), Counter(meter.read_bytes))
    started = time.process_time()
    for _ in range(200):
        meter.query(**request)
    spent = (time.process_time() - started) / 200 * requests
    meter.reads, meter.read_units, meter.read_bytes = kept
    return spent


def measured_close(kind: str, count: int, periods: list[Bucket], first_hour: int, hours: int) -> dict[str, Any]:
    """``count`` counters of ``kind`` (plain, distinct) counted in every hour from ``first_hour`` on, their
    ``periods`` closed; a month's are closed from a month of days."""
    settings = settings_of(("UTC", ZONE), kind)
    names = [f"{PREFIXES[kind]}{n:07d}" for n in range(count)]
    meter = CloseMeter()
    if periods[0].kind == "MO":
        seed_days(meter, names, periods[0], settings)
    else:
        seed_hours(meter, names, first_hour, hours, settings)
    return close_every_part(meter, periods, settings)


def measure(count: int = MEASURED_COUNTERS) -> dict[str, Any]:
    """Per kind of counter: a UTC day, a New York day, a week of UTC days (fewer counters), a UTC month."""
    found: dict[str, Any] = {"counters_of_each_kind": count, "counters_of_the_week": WEEK_COUNTERS}
    week = [Bucket.of_day(date.fromordinal(DAY.toordinal() + n), "UTC") for n in range(7)]
    for kind in ("plain", "distinct"):
        for label, zone in (("utc_day", "UTC"), ("zone_day", ZONE)):
            day = Bucket.of_day(DAY, zone)
            found[f"{label}_{kind}"] = measured_close(kind, count, [day], day.start_ms // HOUR_MS, (day.end_ms - day.start_ms) // HOUR_MS)
        found[f"utc_week_{kind}"] = measured_close(kind, WEEK_COUNTERS, week, week[0].start_ms // HOUR_MS, 7 * 24)
        found[f"month_{kind}"] = measured_close(kind, count, [Bucket.of_month(MONTH, "UTC")], 0, 0)
    found["directory_entry_bytes"] = item_size(entry_item((day_index(DAY), f"plain/{0:07d}"), settings_of(("UTC",), "plain")))
    return found


def per_counter(figures: dict[str, Any], days: int = 1) -> dict[str, float]:
    """The measured close of one counter (``days`` periods of it): requests by kind, bytes its Queries read, read
    and write units, the client's CPU (the meter's taken off)."""
    n = figures["counters"]
    reads, read_bytes = figures["reads"], figures["read_bytes"]
    return {
        "queries": sum(v for k, v in reads.items() if k != "directory") / n,
        "children_bytes": (read_bytes.get("children", 0) + read_bytes.get("sketch lanes", 0)) / n / days,
        "updates": figures["updates"] / n / days,
        "sketch_writes": figures["sketch_writes"] / n / days,
        "sketch_reads": figures["sketch_reads"] / n,
        "sketch_read_units": figures["sketch_read_units"] / n / days,
        "write_units": figures["write_units"] / n / days,
        "cpu_seconds": max(0.0, figures["cpu_seconds"] - figures["meter_cpu_seconds"]) / n,
    }


def mixed(measured: dict[str, Any], label: str, days: int = 1) -> dict[str, float]:
    """A kept counter's close (``days`` periods of it) at the assumed share of distinct counters."""
    share = ASSUMED["distinct_share"]
    plain, distinct = (per_counter(measured[f"{label}_{kind}"], days) for kind in ("plain", "distinct"))
    return {key: plain[key] * (1 - share) + distinct[key] * share for key in plain}


def cpu_per_counter(measured: dict[str, Any], label: str, days: int) -> float:
    """The client's CPU for one counter's run of ``days`` periods: what a day's close costs, and each further day
    what the week's measured close adds per day (its reads are one Query still, its updates one a day)."""
    one = mixed(measured, label)["cpu_seconds"]
    if days == 1:
        return one
    week = mixed(measured, "utc_week")["cpu_seconds"]
    return one + (days - 1) * max(0.0, (week - mixed(measured, "utc_day")["cpu_seconds"]) / 6)


def run_figures(counters_a_day: int, per: dict[str, float], cpu: float, utc_days: int, days: int, entry_bytes: int) -> dict[str, Any]:
    """One run (a zone's ``days`` consecutive periods, its hours on ``utc_days`` UTC days) of ``counters_a_day``
    counters: its requests, read and write units, and a part's wall time (the slower of its requests and CPU)."""
    in_part = counters_a_day / DIRECTORY_PARTITIONS
    names_bytes = in_part * entry_bytes
    pages = max(1, math.ceil(names_bytes / QUERY_PAGE_BYTES))
    # Every partition of every UTC day, and part 0 the previous release's partition (empty) too.
    directory_queries = utc_days * (DIRECTORY_PARTITIONS * pages + 1)
    directory_units = utc_days * (DIRECTORY_PARTITIONS * query_units(names_bytes, pages) + 0.5)
    queries_per_counter = per["queries"]  # the children's Query (their late marks in it), a distinct counter's lanes
    children_units = (query_units(per["children_bytes"] * days, 1) + 0.5 * (queries_per_counter - 1))
    updates, sketch_writes = per["updates"] * days, per["sketch_writes"] * days
    # The sketches a merge starts from: 100 keys a BatchGetItem (the measured few counters a part read them in one).
    sketch_reads = ASSUMED["distinct_share"] * days / 100
    seconds = ASSUMED["request_seconds"]
    io = (utc_days * pages * seconds  # a part's directory pages, one after the other
          + in_part * queries_per_counter * seconds / ASSUMED["reads_in_flight"]
          + in_part * updates * seconds / ASSUMED["updates_in_flight"]
          + in_part * (sketch_writes + sketch_reads) * seconds / ASSUMED["sketch_writes_in_flight"])
    part_cpu = in_part * cpu / ASSUMED["part_vcpu"]
    return {
        "requests": directory_queries + counters_a_day * (queries_per_counter + updates + sketch_writes + sketch_reads),
        "read_units": directory_units + counters_a_day * (children_units + per["sketch_read_units"] * days),
        "write_units": counters_a_day * per["write_units"] * days,
        "updates": counters_a_day * (updates + sketch_writes),
        "part_seconds": max(io, part_cpu),
        "part_io_seconds": io,
        "part_cpu_seconds": part_cpu,
        "parts": DIRECTORY_PARTITIONS,
    }


def query_units(read_bytes: float, requests: int) -> float:
    """Eventually consistent Queries reading ``read_bytes`` in ``requests`` pages: half a unit per started 4 KB,
    at least half a unit each."""
    return max(0.5 * requests, math.ceil(read_bytes / 4096) / 2)


def zone_runs(case: str, zone: str, counters_a_day: int, measured: dict[str, Any], longest: int) -> list[tuple[str, dict[str, Any]]]:
    """A zone's runs in one execution: ("days", figures) for each run of at most ``longest`` days, and ("months",
    figures) when a month closes too."""
    entry = measured["directory_entry_bytes"]
    label = "utc_day" if zone == "UTC" else "zone_day"
    days = MAX_DAYS_PER_RUN if case == "catch-up" else 1
    runs = []
    for first in range(0, days, longest):
        length = min(longest, days - first)
        utc_days = length + (0 if zone == "UTC" else 1)  # a zone's days end on another UTC day than they begin
        cpu = cpu_per_counter(measured, label, length)
        runs.append(("days", run_figures(counters_a_day, mixed(measured, label), cpu, utc_days, length, entry)))
    if case != "day":
        month = mixed(measured, "month")
        runs.append(("months", run_figures(counters_a_day, month, month["cpu_seconds"], 31 + (zone != "UTC"), 1, entry)))
    return runs


def model_row(case: str, counters_a_day: int, zones: tuple[str, ...], measured: dict[str, Any]) -> dict[str, Any]:
    """One execution closing ``counters_a_day`` kept counters in ``zones``: an ordinary day's ("day"), a month's
    first ("day and month": yesterday and last month), or a table's first, catching up a month of days and that
    month ("catch-up", in parts of at most MAX_DAYS_PER_PART days)."""
    runs = [run for zone in zones for run in zone_runs(case, zone, counters_a_day, measured, MAX_DAYS_PER_PART)]
    wall = 2 * ASSUMED["step_seconds"]
    for stage in ("days", "months"):
        parts = [figures for name, figures in runs if name == stage]
        if not parts:
            continue
        # The map starts a part whenever one of its 16 slots frees: the stage lasts its longest part, or its parts'
        # seconds shared by the slots, whichever is more.
        seconds = [figures["part_seconds"] + ASSUMED["function_start_seconds"] for figures in parts for _ in range(figures["parts"])]
        wall += max(max(seconds), sum(seconds) / MAX_PARTS_AT_ONCE)
    total = {key: sum(figures[key] for _, figures in runs) for key in ("requests", "read_units", "write_units", "updates")}
    part_seconds = sum(figures["part_seconds"] * figures["parts"] for _, figures in runs)
    gb_seconds = part_seconds * ASSUMED["part_memory_gb"] + 2 * ASSUMED["step_seconds"] * ASSUMED["step_memory_gb"]
    parts = sum(figures["parts"] for _, figures in runs)
    transitions = parts + 5  # each part's task; the plan, the two maps, the finish and the end
    cost = {
        "dynamodb_reads": total["read_units"] / 1e6 * READ_PRICE_PER_MILLION,
        "dynamodb_writes": total["write_units"] / 1e6 * PRICES["dynamodb_on_demand_per_million_write_units"],
        "lambda": gb_seconds * PRICES["lambda_arm_per_gb_second"] + (parts + 2) / 1e6 * PRICES["lambda_per_million_requests"],
        "step_functions": transitions / 1000 * PRICES["step_functions_per_1000_transitions"],
    }
    longest = max(figures["part_seconds"] for _, figures in runs)
    row = {
        "case": case,
        "counters_a_day": counters_a_day,
        "zones": list(zones),
        "requests": round(total["requests"]),
        "updates": round(total["updates"]),
        "read_units": round(total["read_units"]),
        "write_units": round(total["write_units"]),
        "parts": parts,
        "longest_part_seconds": round(longest, 1),
        "part_bound": "cpu" if max(f["part_cpu_seconds"] for _, f in runs) > max(f["part_io_seconds"] for _, f in runs) else "requests",
        "within_lambda_timeout": longest <= ASSUMED["lambda_timeout_seconds"],
        "wall_seconds": round(wall),
        "lambda_gb_seconds": round(gb_seconds),
        "step_functions_transitions": transitions,
        "cost_usd": round(sum(cost.values()), 4),
        "cost_usd_by_service": {name: round(value, 4) for name, value in cost.items()},
        "keeps_up": wall < DAY_MS / 1000 / 10,  # within a tenth of the day it has
    }
    if case == "catch-up":  # what a part would take holding the whole month of days, as close_due's runs do
        month_parts = [run for zone in zones for run in zone_runs(case, zone, counters_a_day, measured, MAX_DAYS_PER_RUN)]
        row["longest_part_seconds_a_month_a_part"] = round(max(figures["part_seconds"] for _, figures in month_parts), 1)
    return row


def model(measured: dict[str, Any]) -> dict[str, Any]:
    rows = [
        model_row(case, count, zones, measured)
        for case in ("day", "day and month", "catch-up")
        for zones in MODEL_ZONES
        for count in MODEL_COUNTERS
    ]
    per_kind = {
        label: per_counter(measured[label], 7 if label.startswith("utc_week") else 1)
        for label in measured if label.endswith(("_plain", "_distinct"))
    }
    month = next(row for row in rows if row["case"] == "day and month" and row["counters_a_day"] == 10**6 and len(row["zones"]) == 2)
    day = next(row for row in rows if row["case"] == "day" and row["counters_a_day"] == 10**6 and len(row["zones"]) == 2)
    monthly_usd = 29 * day["cost_usd"] + month["cost_usd"]
    return {
        "assumed": {**ASSUMED, "directory_entry_bytes": measured["directory_entry_bytes"]},
        "prices": {**PRICES, "dynamodb_on_demand_per_million_read_units": READ_PRICE_PER_MILLION},
        "per_counter": {label: {k: round(v, 6) for k, v in figures.items()} for label, figures in per_kind.items()},
        "rows": rows,
        "month_at_a_million_counters_two_zones_usd": round(monthly_usd, 2),
    }


def results() -> dict[str, Any]:
    measured = measure()
    return {"close_scale": {"measured": measured, **model(measured)}}
