"""What a top N costs: the real ``Reader.top`` over a modeled table of 10^4 to 10^6 counters, and the writes
it adds (``write_costs``: the fan-out with a per-page rule through the real write path).

A million counters' buckets cannot be written into moto in a bench's
minutes, so the table is a model: ``TrafficModel`` says how many events each
counter has in each minute (a Zipf or a flat popularity, a per-hour jitter,
counts rounded by a hash so that they are whole and reproducible), and
``ModelClient`` answers the reader's Query and BatchGetItem requests from it,
item by item as the write path would have stored them: bucket items with
their count, TTL and the one writer's watermark, rank records of exactly the
levels a commit per minute would have put (``level_of``/``crossed_level``,
``rank_item``), directory entries (``entry_item``). Items are made only when
a request reaches them, so a model of 10^6 counters costs what the reader
reads. Everything above the client is the product's own code: ``Reader.top``,
``top_steps``, ``RankIndex``, ``CounterDirectory``, the batch plan.

``ReadMeter`` charges every request by DynamoDB's rules (``bench/cost.py``):
a Query by the summed size of the whole items it read (a projection does not
lower it), rounded up to 4 KB; a BatchGetItem by each key's item rounded up to
4 KB, a missing item at the minimum; eventually consistent reads half.
``tests/bench/test_bench_top.py`` writes a small model through the real
commit path into moto and checks that moto stores the model's items and that
the same top reads the same answer at the same cost from both.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import date
from functools import cached_property
from typing import Any

from bench.cost import batch_get_read_units, item_size, query_read_units
from bench.workloads import Workload, fan_out_pages, floor_writes
from bench.writes import run_tally
from tally.core.buckets import Bucket
from tally.core.commit import THROUGH, Writer, order_preserving
from tally.core.directory import DIRECTORY_PREFIX, entry_item, partition_of
from tally.core.ranking import LADDER, RANK_PREFIX, Ladder, level_floor, rank_item
from tally.core.settings import Settings
from tally.core.units import DAY_MS, HOUR_MS, MINUTE_MS
from tally.core.tables import COUNT_ATTRIBUTE, COUNTS_TABLE, TTL_ATTRIBUTE
from tally.core.windows import now_ms
from tally.local.delivery import DeliveryConfig

COUNTERS = (10_000, 100_000, 1_000_000)
DISTRIBUTIONS = ("zipf", "flat")
EVENTS_PER_SECOND = 1_000  # the whole prefix's traffic, whatever the number of counters
TOP_N = 10
WINDOW = "24h"
PREFIX = "views/"
WRITER = Writer.of_shard("arn:aws:dynamodb:us-east-1:123456789012:table/pages/stream/2026-11-22T00:00:00.000", "shard-0")
SEQUENCE_BASE = 10**20  # a stream's sequence numbers have 21 digits or more
_MASK = (1 << 64) - 1
# A rank level a model makes whole at once when it has at most this many (rank, hour) pairs to look at.
WHOLE_LEVEL_ITEMS = 50_000


def _mixed(*values: int) -> int:
    """A 64-bit hash of some integers (splitmix64 steps): reproducible in every process, unlike ``hash``."""
    state = 0x9E3779B97F4A7C15
    for value in values:
        state = (state ^ (value & _MASK)) * 0xBF58476D1CE4E5B9 & _MASK
        state = (state ^ (state >> 27)) * 0x94D049BB133111EB & _MASK
        state ^= state >> 31
    return state


def _unit(*values: int) -> float:
    """A number in [0, 1) drawn from some integers."""
    return _mixed(*values) / 2**64


def segment_sequence(minute: int) -> str:
    """The first sequence number of the one segment that committed the minute ``minute`` (since the epoch)."""
    return str(SEQUENCE_BASE + minute)


@dataclass(frozen=True)
class TrafficModel:
    """Per-minute counts of ``counters`` counters named under ``prefix``, up to ``now_ms``.

    Counter ``rank`` (0 = the most popular) has ``rate(rank)`` events an hour
    on average: Zipf (s = 1) or flat. Each hour draws a jitter of up to
    ``jitter`` either way and a rounding, both from a hash; the hour's events
    fall on its minutes evenly, the first ``count % 60`` minutes one more. One
    writer committed one segment per minute, every minute before ``now_ms``'s.
    Names are a shuffle of the ranks (``p0000042`` is not the 43rd), so that
    neither the directory nor the ties see the popularity order.
    """

    counters: int
    distribution: str
    now_ms: int
    settings: Settings
    events_per_second: float = EVENTS_PER_SECOND
    prefix: str = PREFIX
    jitter: float = 0.2
    first_hour: int | None = None  # the first hour with events (default: the start of yesterday)
    ladder: Ladder = LADDER  # the levels its commits recorded

    def __post_init__(self) -> None:
        if self.distribution not in DISTRIBUTIONS:
            raise ValueError(f"distribution must be one of {DISTRIBUTIONS}, got {self.distribution!r}")

    @cached_property
    def start_hour(self) -> int:
        return self.now_ms // DAY_MS * 24 - 24 if self.first_hour is None else self.first_hour

    @property
    def last_minute(self) -> int:
        """The last minute committed: the one before now's."""
        return self.now_ms // MINUTE_MS - 1

    @cached_property
    def _harmonic(self) -> float:
        return math.fsum(1 / rank for rank in range(1, self.counters + 1))

    @cached_property
    def _width(self) -> int:
        return max(7, len(str(self.counters - 1)))

    @cached_property
    def _stride(self) -> int:
        """A multiplier coprime to the number of counters: rank -> name index is a bijection."""
        stride = 7_919
        while math.gcd(stride, self.counters) != 1:
            stride += 2
        return stride

    def rate(self, rank: int) -> float:
        """Mean events an hour of the counter of this rank."""
        per_hour = self.events_per_second * 3600
        if self.distribution == "flat":
            return per_hour / self.counters
        return per_hour / ((rank + 1) * self._harmonic)

    def most(self, rank: int) -> int:
        """The most any hour of this rank can hold."""
        return math.floor(self.rate(rank) * (1 + self.jitter)) + 1

    def name(self, rank: int) -> str:
        return self.name_at((rank * self._stride + 13) % self.counters)

    def name_at(self, index: int) -> str:
        """The index-th name in name order."""
        return f"{self.prefix}p{index:0{self._width}d}"

    def rank_of(self, counter: str) -> int | None:
        """The rank of a counter name of this model, None for any other name."""
        digits = counter[len(self.prefix) + 1 :]
        if not counter.startswith(self.prefix + "p") or len(digits) != self._width or not digits.isdigit():
            return None
        index = int(digits)
        if index >= self.counters:
            return None
        return (index - 13) * pow(self._stride, -1, self.counters) % self.counters

    def hour_total(self, rank: int, hour: int) -> int:
        """The events of a whole hour (before ``now``, the hour's minutes so far hold part of it)."""
        if hour < self.start_hour or hour * 60 > self.last_minute:
            return 0
        back = self.now_ms // HOUR_MS - hour  # drawn by hours before now: every run models the same day
        jitter = 1 + self.jitter * (2 * _unit(rank, back, 1) - 1)
        return math.floor(self.rate(rank) * jitter + _unit(rank, back, 2))

    def minute_count(self, rank: int, minute: int) -> int:
        if minute > self.last_minute:
            return 0
        total = self.hour_total(rank, minute // 60)
        return total // 60 + (1 if minute % 60 < total % 60 else 0)

    def last_written(self, rank: int, hour: int) -> int | None:
        """The last minute of ``hour`` with an event of this rank (its hour item's watermark), None if none."""
        total = self.hour_total(rank, hour)
        if total == 0:
            return None
        last = min(hour * 60 + 59, self.last_minute)
        return last if total >= 60 else min(last, hour * 60 + total - 1)

    def hour_count(self, rank: int, hour: int) -> int:
        """What the hour item holds: its minutes committed so far."""
        last = self.last_written(rank, hour)
        if last is None:
            return 0
        total, minutes = self.hour_total(rank, hour), last - hour * 60 + 1
        return total // 60 * minutes + min(minutes, total % 60)

    def levels(self, rank: int, hour: int) -> list[int]:
        """The levels of the rank records its hour item got, one commit per minute: the highest recorded level
        each minute's update carried it into (``Ladder.crossed``)."""
        last = self.last_written(rank, hour)
        if last is None:
            return []
        return recorded_levels(self.hour_total(rank, hour), last - hour * 60 + 1, self.ladder)

    def days(self, rank: int) -> list[int]:
        """The UTC days the counter has events on (its directory entries)."""
        hours = range(self.start_hour, self.last_minute // 60 + 1)
        return sorted({hour // 24 for hour in hours if self.hour_total(rank, hour) > 0})

    def bucket_item(self, counter: str, sort_key: str) -> dict[str, Any] | None:
        """The bucket item the write path stored under this key, None where there is none (lane 0 only)."""
        rank = self.rank_of(counter)
        if rank is None:
            return None
        try:
            bucket = Bucket.from_sort_key(sort_key)
        except ValueError:
            return None
        if bucket.kind == "M":
            count, last = self.minute_count(rank, bucket.index), bucket.index
        else:
            count, last = self.hour_count(rank, bucket.index), self.last_written(rank, bucket.index)
        if count == 0 or last is None:
            return None
        return {
            COUNTS_TABLE.partition_key: {"S": counter},
            COUNTS_TABLE.sort_key: {"S": sort_key},
            COUNT_ATTRIBUTE: {"N": str(count)},
            TTL_ATTRIBUTE: {"N": str(bucket.ttl_seconds(self.settings))},
            WRITER.tag: {"B": _position(last)},
        }

    def ranks_above(self, floor: int) -> range:
        """The ranks whose hours can reach ``floor`` events."""
        if self.distribution == "flat":
            return range(self.counters) if self.most(0) >= floor else range(0)
        # rate(rank) * (1 + jitter) + 1 >= floor  <=>  rank + 1 <= per_hour * (1 + jitter) / (harmonic * (floor - 1))
        per_hour = self.events_per_second * 3600
        last = math.floor(per_hour * (1 + self.jitter) / (self._harmonic * max(floor - 1, 1e-9)))
        return range(min(self.counters, last))


@functools.cache
def recorded_levels(total: int, minutes: int, ladder: Ladder) -> list[int]:
    """The records of an hour item whose ``total`` events fall evenly on its minutes (the first ``total % 60``
    one more), after ``minutes`` commits of one minute each."""
    levels, count = [], 0
    for minute in range(minutes):
        added = total // 60 + (1 if minute < total % 60 else 0)
        if added == 0:
            break
        count += added
        level = ladder.crossed(count, added)
        if level is not None:
            levels.append(level)
    return levels


def _position(minute: int) -> bytes:
    """The watermark the segment of ``minute`` (one record's position, first and last) leaves on the items it wrote."""
    return order_preserving(int(segment_sequence(minute))) + THROUGH


@dataclass
class ModelClient:
    """A DynamoDB client of the counts table answering from a TrafficModel: the reads ``Reader.top`` makes.

    Rank partitions are made level by level as a Query reaches them, and
    directory partitions name by name: a request costs what it reads.
    """

    model: TrafficModel
    table_name: str
    _levels: dict[tuple[str, int], list[str]] = field(default_factory=dict)  # whole levels made so far

    def _rank_key(self, counter: str, hour: int, lane: int, level: int) -> str:
        return rank_item(counter, Bucket.of_hour(hour), lane, level, self.model.settings)[COUNTS_TABLE.sort_key]["S"]

    def query(self, **request: Any) -> dict[str, Any]:
        if request["TableName"] != self.table_name:
            raise ValueError(f"the model holds {self.table_name}, not {request['TableName']}")
        values = request["ExpressionAttributeValues"]
        partition = values[":pk"]["S"]
        condition = request["KeyConditionExpression"]
        start = request.get("ExclusiveStartKey", {}).get(COUNTS_TABLE.sort_key, {}).get("S")
        limit = request.get("Limit")
        if partition.startswith(RANK_PREFIX) and condition == "#pk = :pk" and request.get("ScanIndexForward") is False:
            keys = self._rank_keys(partition, start)
            make = self._rank_item
        elif partition.startswith(DIRECTORY_PREFIX) and request.get("ScanIndexForward", True):
            prefix = values.get(":prefix", {}).get("S", "")
            keys = self._directory_keys(partition, prefix, start)
            make = self._entry_item
        else:
            raise ValueError(f"the model answers rank and directory Queries only, not {condition!r} on {partition!r}")
        items, more = [], False
        for key in keys:
            if limit is not None and len(items) == limit:
                more = True
                break
            items.append(make(partition, key))
        response: dict[str, Any] = {"Items": [_projected(item, request) for item in items], "Count": len(items)}
        if more:  # as moto answers: the last key of a page that stopped at its Limit with more after it
            key_names = (COUNTS_TABLE.partition_key, COUNTS_TABLE.sort_key)
            response["LastEvaluatedKey"] = {name: items[-1][name] for name in key_names}
        return response

    def batch_get_item(self, RequestItems: dict[str, Any]) -> dict[str, Any]:  # noqa: N803
        [(table, spec)] = RequestItems.items()
        if table != self.table_name:
            raise ValueError(f"the model holds {self.table_name}, not {table}")
        found = []
        for key in spec["Keys"]:
            item = self.model.bucket_item(key[COUNTS_TABLE.partition_key]["S"], key[COUNTS_TABLE.sort_key]["S"])
            if item is not None:
                found.append(_projected(item, spec))
        return {"Responses": {table: found}, "UnprocessedKeys": {}}

    # --- rank partitions: levels from the highest down, each made whole when a Query first reaches it ---

    def _rank_keys(self, partition: str, start: str | None) -> Iterator[str]:
        day = _day_of(partition, RANK_PREFIX)
        ladder = self.model.ladder
        highest = ladder.level_of(self.model.most(0))
        recorded = [ladder.lowest]
        while highest is not None and recorded[-1] < highest:
            recorded.append(ladder.above(recorded[-1]))
        for level in reversed([level for level in recorded if highest is not None and level <= highest]):
            if start is not None and level > int(start.split("#", 1)[0]):
                continue
            yield from self._level_keys(partition, day, level, start)
            start = None

    def _level_keys(self, partition: str, day: int, level: int, start: str | None) -> Iterator[str]:
        """The keys of one level of a day, descending, after ``start``: made whole when few ranks can reach the
        level (a skewed prefix), else hour by hour and name by name as the pages ask for them (a flat one)."""
        model = self.model
        hours = [hour for hour in range(day * 24, day * 24 + 24) if model.start_hour <= hour and hour * 60 <= model.last_minute]
        ranks = model.ranks_above(level_floor(level))
        lane = WRITER.lane(model.settings.bucket_lanes)
        if len(ranks) * len(hours) <= WHOLE_LEVEL_ITEMS:
            keys = self._levels.get((partition, level))
            if keys is None:
                keys = sorted(
                    (self._rank_key(model.name(rank), hour, lane, level) for rank in ranks for hour in hours
                     if level in model.levels(rank, hour)),
                    reverse=True,
                )
                self._levels[(partition, level)] = keys
            yield from keys[0 if start is None else _after_descending(keys, start) :]
            return
        resume_hour, resume_index = None, model.counters
        if start is not None:
            _level, hour_of_day, _lane, counter = start.split("#", 3)
            resume_hour, resume_index = day * 24 + int(hour_of_day), int(counter[len(model.prefix) + 1 :])
        for hour in reversed(hours):
            if resume_hour is not None and hour > resume_hour:
                continue
            last = resume_index if hour == resume_hour else model.counters
            for index in range(last - 1, -1, -1):
                rank = model.rank_of(model.name_at(index))
                assert rank is not None
                if level in model.levels(rank, hour):
                    yield self._rank_key(model.name_at(index), hour, lane, level)

    def _rank_item(self, partition: str, sort_key: str) -> dict[str, Any]:
        level, hour_of_day, lane, counter = sort_key.split("#", 3)
        day = _day_of(partition, RANK_PREFIX)
        return rank_item(counter, Bucket.of_hour(day * 24 + int(hour_of_day)), int(lane), int(level), self.model.settings)

    # --- directory partitions: names in order, those of the partition with events on its day ---

    def _directory_keys(self, partition: str, prefix: str, start: str | None) -> Iterator[str]:
        model = self.model
        if partition.count("#") == 2:  # the previous release's one partition a day: this model has none
            return
        day = _day_of(partition.rsplit("#", 1)[0], DIRECTORY_PREFIX)
        first = 0 if start is None or model.rank_of(start) is None else int(start[len(model.prefix) + 1 :]) + 1
        for index in range(first, model.counters):
            name = model.name_at(index)
            if (start is None or name > start) and name.startswith(prefix) and partition_of(day, name) == partition:
                rank = model.rank_of(name)
                assert rank is not None
                if day in model.days(rank):
                    yield name

    def _entry_item(self, partition: str, name: str) -> dict[str, Any]:
        day = _day_of(partition.rsplit("#", 1)[0], DIRECTORY_PREFIX)
        return entry_item((day, name), self.model.settings)


def _day_of(partition: str, prefix: str) -> int:
    """The day (since the epoch) of a ``<prefix>YYYY-MM-DD`` partition."""
    return (date.fromisoformat(partition[len(prefix) :]) - date(1970, 1, 1)).days


def _after_descending(keys: list[str], start: str) -> int:
    """Where a descending list goes on after ``start``: its first key below it."""
    low, high = 0, len(keys)
    while low < high:
        middle = (low + high) // 2
        if keys[middle] >= start:
            low = middle + 1
        else:
            high = middle
    return low


def _projected(item: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    """The attributes a ProjectionExpression of ``#name`` placeholders asks for (all without one)."""
    projection = request.get("ProjectionExpression")
    if projection is None:
        return item
    names = request.get("ExpressionAttributeNames", {})
    wanted = {names.get(term.strip(), term.strip()) for term in projection.split(",")}
    return {name: value for name, value in item.items() if name in wanted}


class ReadMeter:
    """A DynamoDB client (moto, or a ModelClient) whose reads are counted and charged by DynamoDB's rules.

    A Query is charged for the whole items it read, whatever it projects: the
    meter sizes them by asking the same page again without the projection.
    """

    def __init__(self, client: Any) -> None:
        self.client = client
        self.requests = 0
        self.read_units = 0.0
        self.items_read = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    def query(self, **request: Any) -> dict[str, Any]:
        response = self.client.query(**request)
        whole = {key: value for key, value in request.items() if key != "ProjectionExpression"}
        if "ProjectionExpression" in request:
            used = set(whole.get("KeyConditionExpression", "").replace("(", " ").replace(",", " ").split())
            whole["ExpressionAttributeNames"] = {k: v for k, v in request["ExpressionAttributeNames"].items() if k in used}
            items = self.client.query(**whole).get("Items", [])
        else:
            items = response.get("Items", [])
        self.requests += 1
        self.items_read += len(items)
        self.read_units += query_read_units((item_size(item) for item in items), consistent=bool(request.get("ConsistentRead")))
        return response

    def batch_get_item(self, **request: Any) -> dict[str, Any]:
        response = self.client.batch_get_item(**request)
        [(table, spec)] = request["RequestItems"].items()
        found = response.get("Responses", {}).get(table, [])
        unprocessed = len(response.get("UnprocessedKeys", {}).get(table, {}).get("Keys", []))
        missing = len(spec["Keys"]) - len(found) - unprocessed
        self.requests += 1
        self.items_read += len(found)
        sizes = [item_size(item) for item in found] + [0] * missing
        self.read_units += batch_get_read_units(sizes, consistent=bool(spec.get("ConsistentRead")))
        return response


def measure(
    counters: int,
    distribution: str,
    settings: Settings,
    *,
    n: int = TOP_N,
    window: str = WINDOW,
    ladder: Ladder = LADDER,
) -> dict[str, Any]:
    """One top N over a model of ``counters`` counters (their prefix ranked), read by the real Reader: its cost
    and its answer."""
    from tally.reader import Reader

    settings = replace(settings, ranked_prefixes=(PREFIX,))
    model = TrafficModel(counters, distribution, now_ms(), settings, ladder=ladder)
    meter = ReadMeter(ModelClient(model, settings.counts_table))
    reader = Reader(settings.counts_table, client=meter, settings=settings)
    reader.rank_ladder = ladder
    started = time.perf_counter()
    answer = reader.top(PREFIX, n, window=window)
    return {
        "counters": counters,
        "distribution": distribution,
        "n": n,
        "window": window,
        "answered_hours": round((answer.window.end_ms - answer.window.start_ms) / HOUR_MS, 2),
        "read_units": meter.read_units,
        "requests": meter.requests,
        "exact": answer.exact,
        "bound": answer.bound,
        "rank_records": answer.rank_records,
        "counted": answer.counted,
        "items_read": meter.items_read,
        "top_total": answer.entries[0].total if answer.entries else None,
        "nth_total": answer.entries[-1].total if len(answer.entries) == n else None,
        "seconds": round(time.perf_counter() - started, 1),
    }


def costs(settings: Settings) -> dict[str, Any]:
    """A 24 h top-10 over 10^4, 10^5 and 10^6 counters, Zipf and flat, at EVENTS_PER_SECOND in all."""
    return {
        "events_per_second": EVENTS_PER_SECOND,
        "model": "per-minute counts of a Zipf (s = 1) or flat popularity, each hour jittered by up to 20%, "
        "committed once a minute by one writer; the real Reader.top reads it, metered by DynamoDB's rules",
        "rows": [measure(counters, distribution, settings) for distribution in DISTRIBUTIONS for counters in COUNTERS],
    }


def write_costs(settings: Settings, config: DeliveryConfig, workload: Workload | None = None) -> dict[str, Any]:
    """What a top N adds to the writes, in one run of the fan-out with a per-page rule (or ``workload``) through
    tally's real write path with ``settings`` (their ranked prefixes): its rank records and the directory's entries
    beside its bucket updates and the floor."""
    workload = fan_out_pages() if workload is None else workload
    meter = run_tally(workload, settings, config).meter
    floor = floor_writes(workload.counted_arrivals(), config.window_seconds, settings)
    counting = meter.units - meter.batch_units
    directory = meter.batch_units - meter.rank_units
    return {
        "workload": workload.name,
        "description": workload.description,
        "events": workload.total,
        "floor_write_units": floor,
        "bucket_write_units": counting,
        "directory_writes": meter.batch_item_writes - meter.rank_item_writes,
        "directory_write_units": directory,
        "rank_writes": meter.rank_item_writes,
        "rank_requests": meter.rank_requests,
        "rank_write_units": meter.rank_units,
        "ratios": {
            "buckets_over_floor": round(counting / floor, 3),
            "directory_over_floor": round(directory / floor, 3),
            "ranks_over_floor": round(meter.rank_units / floor, 3),
            "ranks_and_directory_over_floor": round(meter.batch_units / floor, 3),
            "total_over_floor": round(meter.units / floor, 3),
        },
    }


# The ladders the trade compares: above 11,623 events an hour, every level (1.5-fold, the default), every 2nd
# (2.25-fold) or every 5th (7.6-fold, as below it).
TRADE_LADDERS = (Ladder(fine_every=1), Ladder(fine_every=2), Ladder(fine_every=5))


def hour_writes(model: TrafficModel, hour: int) -> tuple[int, int]:
    """The floor's writes in one whole hour of the model (a minute item and the hour item, each minute a counter
    has events) and the rank records its commits put in that hour."""
    floor = records = 0
    for rank in range(model.counters):
        total = model.hour_total(rank, hour)
        if total == 0:
            continue
        floor += 2 * min(60, total)
        records += len(recorded_levels(total, 60, model.ladder))
    return floor, records


def trade(settings: Settings, ladders: tuple[Ladder, ...] = TRADE_LADDERS, counters: int = COUNTERS[-1]) -> dict[str, Any]:
    """For each ladder: what a 24 h top-10 of ``counters`` Zipf counters reads, and what its rank records add to
    an hour's writes (read units are eventually consistent; a write unit costs five times a read unit)."""
    rows = []
    for ladder in ladders:
        read = measure(counters, "zipf", settings, ladder=ladder)
        model = TrafficModel(counters, "zipf", now_ms(), settings, ladder=ladder)
        floor, records = hour_writes(model, model.now_ms // HOUR_MS - 2)
        rows.append({
            "factor_above_11623": round(1.5**ladder.fine_every, 2),
            "lowest_floor": level_floor(ladder.lowest),
            "read_units_per_top": read["read_units"],
            "requests_per_top": read["requests"],
            "exact": read["exact"],
            "counted": read["counted"],
            "rank_records_read": read["rank_records"],
            "floor_write_units_per_hour": floor,
            "rank_write_units_per_hour": records,
            "rank_units_over_floor_units": round(records / floor, 4),
        })
    return {
        "counters": counters,
        "distribution": "zipf",
        "events_per_second": EVENTS_PER_SECOND,
        "window": WINDOW,
        "n": TOP_N,
        "rows": rows,
    }
