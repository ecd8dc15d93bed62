"""Scale model: many shards closing their tumbling windows at the same instant, on the same hot buckets.

Lambda aligns tumbling windows to the clock, so every shard of the events
stream commits its window at the same moment, and every shard carries the hot
counters. This model runs tally's own fold (``SegmentFolder``) and commit
policy (``commit_steps``: a segment's hour updates, then its minute updates,
the throttled ones sent again after a pause) for every shard, against a
simulated DynamoDB in simulated time:

- the function sends a segment's updates 32 at a time (``CountsTable``'s
  workers); an UpdateItem answers after a lognormal time (median 5 ms);
- an item, and a partition (here: a partition key's item collection), accept
  at most 1,000 write units a second, with a second's worth of burst; an
  update that would exceed either is refused with a throttling error, consumes
  nothing, and is answered as quickly;
- an update costs one write unit per started KB of the larger of the item
  before and after (``bench.cost``), and an item holds a watermark (its name
  and an order-preserving position) for every shard that wrote it, so items
  that many shards write grow; an update whose condition fails (a retry that
  finds its watermark) costs the item's own size;
- a Lambda invocation fails when the commit policy gives up (retries
  exhausted) or when it runs past the function's 60 s timeout; Lambda then
  retries it a second later, and the retry finds the watermarks of what was
  applied before.

With a distinct rule on the hot counter, each segment's commit is followed
by its sketch merges (``sketch_steps``): a strongly consistent read of the
bucket's sketch item in the shard's lane, then a write conditioned on what
was read. Lane k's sketch items live in a partition of their own
(``#sketches#k#<counter>``), so their writes draw on that partition's write
units, not on the counter's nor on the other lanes'. The model evaluates the condition when the write is sent: a writer
that lost to another since its read is answered with the item as it is now
and merges again; a write beyond an item's or a partition's write units is
throttled. A sketch write costs one unit per started KB (plain, not
transactional), a failed condition too.

With a counter directory, each segment's commit is followed by the
directory entries it calls for (``DirectoryWrites``, as
``CounterDirectory.record``): BatchWriteItem puts of 25, a put beyond its
partition's write units left unprocessed and sent again on
``directory_backoff`` (the previous release's design: on the plain
backoff, as it did), a function remembering what it put. ``day_boundary_results`` runs
windows on both sides of a UTC midnight, this release's directory beside the
previous release's.

With an above alert, each commit is followed by its evaluation
(``alert_steps``, as ``Watcher.after_commit``): the states of the alerted
counters the segment wrote (one request of 100 keys after the other), one
Query per counter of the minutes its judged windows hold (``COMMIT_WORKERS``
at once), then, for each
window in time order (``commit_windows``, ``commit_crossing``), one
conditional state change per crossing and its PutEvents. ``alert_latency_results`` times each alert from the arrival of
the event that crossed its threshold.

An event queue (heapq) orders every step; no wall-clock time passes, so a
thousand shards take seconds. Every run checks exactness: the bucket counts
the model stored equal the events it generated, and every bucket's sketch
(its lanes merged) holds exactly the distinct values generated in it.
"""

from __future__ import annotations

import functools
import gc
import heapq
import itertools
import math
import random
from collections import Counter
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from bench.cost import item_size, number_size, write_units
from tally.core.buckets import Bucket, bucket_sort_key, counted_buckets, lane_sort_key, stored_bucket
from tally.core.item_growth import SHARDS_PER_LANE, item_growth  # lanes bound the watermarks an item collects
from tally.core.commit import (
    Answer,
    put_steps,
    CommitResult,
    CommitStep,
    Outcome,
    Pause,
    Put,
    RetriesExhausted,
    Send,
    Update,
    Writer,
    commit_steps,
)
from tally.core.sketch_writes import (
    ReadSketches,
    SketchOutcome,
    SketchStep,
    SketchWrite,
    WriteSketches,
    sketch_steps,
)
from tally.core.alerts import (
    ABOVE,
    ALARM,
    Alert,
    AlertState,
    Crossing,
    commit_crossing,
    commit_windows,
    judged_last_minutes,
    minutes_written,
)
from tally.core.directory import DIRECTORY_PREFIX, Entry, entries_of, entry_item, legacy_partition
from tally.core.sketches import Sketch, hash_of
from tally.core.records import CounterEvent
from tally.core.retry import Backoff, commit_backoff, directory_backoff, sketch_backoff
from tally.core.segments import Segment, SegmentFolder
from tally.core.settings import MAX_BUCKET_LANES, Settings
from tally.core.units import DAY_MS, HOUR_MS, MINUTE_MS
from tally.core.tables import COUNTS_TABLE, TTL_ATTRIBUTE
from tally.dynamo.commit import COMMIT_WORKERS
from tally.dynamo.directory import DIRECTORY_MEMORY

TABLE = "tally-counts"
STREAM_ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/tally-events/stream/2026-11-23T00:00:00.000"
WINDOW_SECONDS = 60
FUNCTION_TIMEOUT_SECONDS = 60.0
LAMBDA_RETRY_DELAY_SECONDS = 1.0
# How long after its last window's end a run is followed: a configuration that has not committed every shard window
# by then does not keep up, and its run stops there, counting the shard windows it left uncommitted.
SECONDS_FOLLOWED_AFTER_LAST_WINDOW = 300.0
# 2026-11-23T10:00Z: windows end on whole minutes, as Lambda aligns them.
START_MS = 1_795_428_000_000

Key = tuple[str, str]


@dataclass(frozen=True)
class Latency:
    """How long DynamoDB takes to answer an UpdateItem, applied or refused."""

    update_median_seconds: float = 0.005
    sigma: float = 0.5

    def seconds(self, rng: random.Random) -> float:
        return self.update_median_seconds * math.exp(self.sigma * rng.gauss(0.0, 1.0))


@dataclass(frozen=True)
class Limits:
    item_write_units_per_second: float = 1000.0
    partition_write_units_per_second: float = 1000.0
    burst_seconds: float = 1.0  # unused capacity a partition may spend at once


class TokenBucket:
    """Capacity refilled at ``rate`` per second up to ``capacity``."""

    __slots__ = ("rate", "capacity", "level", "at")

    def __init__(self, rate: float, capacity: float) -> None:
        self.rate, self.capacity, self.level, self.at = rate, capacity, capacity, 0.0

    def available(self, now: float) -> float:
        return min(self.capacity, self.level + (now - self.at) * self.rate)

    def take(self, now: float, units: float) -> None:
        self.level, self.at = self.available(now) - units, now


@dataclass
class TableStats:
    updates: int = 0  # UpdateItem requests answered
    applied: int = 0
    throttled: int = 0  # refused for an item's or a partition's write limit
    already_applied: int = 0  # refused by the watermark: a retry found its own write
    write_units: int = 0
    counted_write_units: int = 0  # from ``counting_from`` on (the steady state)
    largest_item_bytes: int = 0
    sketch_reads: int = 0  # strongly consistent reads of sketch items (one per key)
    sketch_writes: int = 0  # conditional writes of merged sketches that succeeded
    sketch_conflicts: int = 0  # ... that found the item changed since it was read
    sketch_throttled: int = 0  # ... refused for an item's or a partition's write limit
    sketch_write_units: int = 0  # write units of sketch writes, failed conditions included
    puts: dict[str, int] = field(default_factory=dict)  # BatchWriteItem puts written, by kind (directory, ranks)
    put_throttled: dict[str, int] = field(default_factory=dict)  # ... left unprocessed for a partition's limit
    put_write_units: dict[str, int] = field(default_factory=dict)


@dataclass
class _Parsed:
    key: Key
    delta: int
    tag: str
    position: bytes  # the segment's first record
    watermark: bytes  # what the item holds once it took the segment
    request: dict[str, Any]

    def new_item_bytes(self) -> int:
        """The item as this update creates it."""
        values = self.request["ExpressionAttributeValues"]
        created = {**self.request["Key"], "count": values[":a0"], "ttl": values[":ttl"], self.tag: values[":to"]}
        return item_size(created)


class SimulatedTable:
    """UpdateItem on the counts table, as far as limits, watermarks and write units go.

    It keeps each item's count, size (by DynamoDB's rules, ``bench.cost``)
    and watermarks, and a token bucket per item and per partition.
    ``counting``: whether the write units of the updates sent now count as steady state.
    """

    def __init__(self, latency: Latency = Latency(), limits: Limits = Limits(), rng: random.Random | None = None) -> None:
        self.latency, self.limits = latency, limits
        self.rng = rng or random.Random(0)
        self.counts: dict[Key, int] = {}
        self.sizes: dict[Key, int] = {}
        self.watermarks: dict[Key, dict[str, bytes]] = {}
        self.item_capacity: dict[Key, TokenBucket] = {}
        self.partition_capacity: dict[str, TokenBucket] = {}
        self.stats = TableStats()
        self.counting = True  # whether write units count now (set by the simulation, window by window)
        self.sketches: dict[Key, bytes] = {}  # sketch items' stored bytes
        self.stored: dict[Key, dict[str, Any]] = {}  # items put: directory entries, rank records

    def update(self, now: float, update: Update) -> tuple[float, Answer]:
        """Send one UpdateItem at ``now``: when its answer arrives, and what it is (with the count it returns)."""
        stats = self.stats
        stats.updates += 1
        answer_at = now + self.latency.seconds(self.rng)
        parsed = self._parse(update)
        key = parsed.key
        before = self.sizes.get(key, 0)
        marks = self.watermarks.get(key)
        old = marks.get(parsed.tag) if marks else None
        if old is not None and old >= parsed.position:  # the model's shards never cut a stream twice: taken whole
            cost, outcome = write_units(before), Outcome.TAKEN
            after = before
        else:
            if not before:
                after = parsed.new_item_bytes()
            else:
                count = self.counts[key]
                after = before - number_size(count) + number_size(count + parsed.delta)
                after += len(parsed.watermark) - len(old) if old is not None else len(parsed.tag) + len(parsed.watermark)
            cost, outcome = write_units(max(before, after)), Outcome.APPLIED
        item_bucket, partition_bucket = self._item_bucket(key), self._partition_bucket(key[0])
        if item_bucket.available(now) < cost or partition_bucket.available(now) < cost:
            stats.throttled += 1
            return answer_at, Answer(Outcome.RETRY)
        item_bucket.take(now, cost)
        partition_bucket.take(now, cost)
        stats.write_units += cost
        if self.counting:
            stats.counted_write_units += cost
        if outcome is Outcome.TAKEN:
            stats.already_applied += 1
            return answer_at, Answer(outcome, self.counts[key], old)
        self.counts[key] = self.counts.get(key, 0) + parsed.delta
        self.sizes[key] = after
        self.watermarks.setdefault(key, {})[parsed.tag] = parsed.watermark
        stats.applied += 1
        stats.largest_item_bytes = max(stats.largest_item_bytes, after)
        return answer_at, Answer(outcome, self.counts[key], units=cost)  # as ReturnConsumedCapacity answers

    def read_sketches(self, now: float, keys: Sequence[Key]) -> tuple[float, dict[Key, bytes | None]]:
        """A strongly consistent BatchGetItem of sketch items: when it answers, and what they hold now."""
        self.stats.sketch_reads += len(keys)
        return now + self.latency.seconds(self.rng), {key: self.sketches.get(key) for key in keys}

    def write_sketches(
        self, now: float, writes: Sequence[SketchWrite]
    ) -> tuple[float, list[tuple[SketchOutcome, bytes | None]]]:
        """Conditional UpdateItems sent at once, each judged as it arrives: written, lost (with what the item
        holds), or throttled. They answer when the slowest does."""
        answers, answer_at = [], now
        for write in writes:
            key = write.key
            seen = write.request["ExpressionAttributeValues"].get(":seen")
            merged = write.request["ExpressionAttributeValues"][":sketch"]["B"]
            held = self.sketches.get(key)
            size_before = self.sizes.get(key, 0)
            size_after = size_before if held != (None if seen is None else seen["B"]) else _sketch_item_size(key, merged)
            cost = write_units(max(size_before, size_after))
            if self._item_bucket(key).available(now) < cost or self._partition_bucket(key[0]).available(now) < cost:
                self.stats.sketch_throttled += 1
                answers.append((SketchOutcome.RETRY, None))
                answer_at = max(answer_at, now + self.latency.seconds(self.rng))
                continue
            self._item_bucket(key).take(now, cost)
            self._partition_bucket(key[0]).take(now, cost)
            self.stats.sketch_write_units += cost
            self.stats.write_units += cost
            if self.counting:
                self.stats.counted_write_units += cost
            if held != (None if seen is None else seen["B"]):
                self.stats.sketch_conflicts += 1
                answers.append((SketchOutcome.CONFLICT, held))
                answer_at = max(answer_at, now + self.latency.seconds(self.rng))
                continue
            self.sketches[key], self.sizes[key] = merged, size_after
            self.stats.sketch_writes += 1
            answers.append((SketchOutcome.WRITTEN, None))
            answer_at = max(answer_at, now + self.latency.seconds(self.rng))
        return answer_at, answers

    def put(self, now: float, items: Sequence[dict[str, Any]]) -> tuple[float, list[dict[str, Any]]]:
        """BatchWriteItem requests of 25, one after the other: when the last answers, and the items left
        unprocessed (a put beyond its partition's write units is, and consumes nothing)."""
        answer_at, left = now, []
        for start in range(0, len(items), 25):
            for item in items[start : start + 25]:
                key = (item["pk"]["S"], item["sk"]["S"])
                kind = put_kind(key[0])
                cost = write_units(item_size(item))
                if self._partition_bucket(key[0]).available(answer_at) < cost:
                    self.stats.put_throttled[kind] = self.stats.put_throttled.get(kind, 0) + 1
                    left.append(item)
                    continue
                self._partition_bucket(key[0]).take(answer_at, cost)
                self.stats.puts[kind] = self.stats.puts.get(kind, 0) + 1
                self.stats.put_write_units[kind] = self.stats.put_write_units.get(kind, 0) + cost
                self.stats.write_units += cost
                if self.counting:
                    self.stats.counted_write_units += cost
                self.stored[key] = item
            answer_at += self.latency.seconds(self.rng)
        return answer_at, left

    def count(self, key: Key) -> int:
        return self.counts.get(key, 0)

    def seed(self, key: Key, count: int) -> None:
        """An item that exists before the run: its count, and its size without watermarks."""
        if key not in self.counts:
            self.counts[key] = count
            self.sizes[key] = item_size(
                {"pk": {"S": key[0]}, "sk": {"S": key[1]}, "count": {"N": str(count)}, TTL_ATTRIBUTE: {"N": "1795600000"}}
            )

    def _parse(self, update: Update) -> _Parsed:
        """What the model reads of an update, each time it is sent: kept between sends, the updates of an
        invocation that failed (sent again by its retry as new ones) would never be let go."""
        request = update.request
        names, values = request["ExpressionAttributeNames"], request["ExpressionAttributeValues"]
        if list(names) != ["#ttl", "#w", "#a0"] or names["#a0"] != "count" or ":w" not in values:
            raise ValueError(f"the model only runs tally's count updates, not {request['UpdateExpression']!r}")
        key = (request["Key"]["pk"]["S"], request["Key"]["sk"]["S"])
        return _Parsed(key, int(values[":a0"]["N"]), update.tag, update.position, values[":to"]["B"], request)

    def _item_bucket(self, key: Key) -> TokenBucket:
        bucket = self.item_capacity.get(key)
        if bucket is None:
            rate = self.limits.item_write_units_per_second
            bucket = self.item_capacity[key] = TokenBucket(rate, rate * self.limits.burst_seconds)
        return bucket

    def _partition_bucket(self, partition: str) -> TokenBucket:
        bucket = self.partition_capacity.get(partition)
        if bucket is None:
            rate = self.limits.partition_write_units_per_second
            bucket = self.partition_capacity[partition] = TokenBucket(rate, rate * self.limits.burst_seconds)
        return bucket


def put_kind(partition: str) -> str:
    """What a put is, by its partition: a directory entry or a rank record."""
    return "directory" if partition.startswith(DIRECTORY_PREFIX) else "ranks"


def _sketch_item_size(key: Key, sketch: bytes) -> int:
    return item_size({"pk": {"S": key[0]}, "sk": {"S": key[1]}, "hll": {"B": sketch}, "ttl": {"N": "1795600000"}})


# --- workload -----------------------------------------------------------------------------------


HOT_COUNTER = "jobs/all"


@dataclass(frozen=True)
class CounterMix:
    """One hot counter taking ``hot_share`` of the events; the rest Zipf-distributed over ``tail`` counters."""

    name: str
    hot_share: float
    tail: int
    zipf_exponent: float = 1.1

    def chooser(self) -> Callable[[random.Random, int], list[str]]:
        cumulative = list(itertools.accumulate(self.shares()))
        width = max(5, len(str(self.tail)))

        def choose(rng: random.Random, n: int) -> list[str]:
            ranks = rng.choices(range(self.tail + 1), cum_weights=cumulative, k=n)
            return [f"counter-{rank:0{width}d}" if rank else HOT_COUNTER for rank in ranks]

        return choose

    def shares(self) -> list[float]:
        """Each counter's share of the events: the hot counter's, then the tail's by rank."""
        tail_weights = [rank ** -self.zipf_exponent for rank in range(1, self.tail + 1)]
        scale = (1 - self.hot_share) / sum(tail_weights)
        return [self.hot_share] + [w * scale for w in tail_weights]


DEFAULT_MIX = CounterMix("one hot counter (30 %) + Zipf tail of 10,000", hot_share=0.3, tail=10_000)
TAIL_ONLY_MIX = CounterMix("Zipf tail of 10,000, no hot counter", hot_share=0.0, tail=10_000)
MILLION_MIX = CounterMix("one hot counter (30 %) + Zipf tail of 1,000,000", hot_share=0.3, tail=1_000_000)


@dataclass(frozen=True)
class Scenario:
    shards: int
    events_per_second: float  # the whole stream's rate
    windows: int = 3
    mix: CounterMix = DEFAULT_MIX
    lateness_mean_ms: float = 500.0  # events reach the stream this long after their time, on average
    seed: int = 14
    distinct: bool = False  # a distinct rule counts the visitors of the hot counter (one of VISITORS each event)
    start_ms: int = START_MS  # the first window's start
    # The run starts amid a day's traffic: the first hour's hour items exist (made earlier in the hour) and every
    # function remembers the first day's directory entries of the counters it writes.
    warm: bool = False
    # An above alert (``ALERT_WINDOW``) past this total on the hot counter and the tail's busiest counters
    # (``ALERTED_TAIL``): judged after every commit that writes one of them (0: no alert).
    alert_above: int = 0


VISITORS = 1_000_000


_PLACEMENT = Settings()  # default retentions: the model's events are at most seconds late


def shard_windows(scenario: Scenario) -> Iterator[tuple[int, int, list[CounterEvent]]]:
    """(shard, window, its events in stream order): events spread evenly over shards, as random event ids are."""
    rng = random.Random(scenario.seed)
    choose = scenario.mix.chooser()
    per_shard_window = scenario.events_per_second * WINDOW_SECONDS / scenario.shards
    window_ms = WINDOW_SECONDS * 1000
    for window in range(scenario.windows):
        start = scenario.start_ms + window * window_ms
        for shard in range(scenario.shards):
            n = _poisson(rng, per_shard_window)
            arrivals = sorted(start + int(rng.random() * window_ms) for _ in range(n))
            counters = choose(rng, n)
            lateness = scenario.lateness_mean_ms
            base = (window * scenario.shards + shard) * 10**9
            yield shard, window, [
                _event(
                    counter,
                    arrival - int(rng.expovariate(1 / lateness)),
                    f"{base + i:021d}",
                    arrival,
                    hash_of(f"v-{rng.randrange(VISITORS)}") if scenario.distinct and counter == HOT_COUNTER else None,
                )
                for i, (counter, arrival) in enumerate(zip(counters, arrivals))
            ]


def _event(counter: str, event_ms: int, sequence: str, arrival_ms: int, hashed: int | None = None) -> CounterEvent:
    """An event as parsing would make it, in the buckets its arrival allows."""
    hour_only = len(counted_buckets(event_ms, arrival_ms, _PLACEMENT)) == 1
    return CounterEvent(counter, event_ms, sequence, arrival_ms, hour_only=hour_only, hashed=hashed)


def _poisson(rng: random.Random, mean: float) -> int:
    """Normal approximation above 50, exact below: the model needs the spread, not the tail."""
    if mean > 50:
        return max(0, round(rng.gauss(mean, math.sqrt(mean))))
    limit, n, product = math.exp(-mean), 0, rng.random()
    while product > limit:
        n, product = n + 1, product * rng.random()
    return n


@dataclass
class Folded:
    """A scenario's windows folded once, for every commit configuration that runs it."""

    windows: list[tuple[int, int, list[Segment]]]  # (shard, window, its segments)
    events_per_window: Counter[int]
    expected: Counter[Key]  # events per (counter, minute sort key)
    expected_sketches: dict[Key, Sketch]  # the distinct values of each (counter, bucket sort key)
    arrivals: dict[str, list[int]] = field(default_factory=dict)  # the alerted counters' events' arrivals (ms)


@functools.lru_cache(maxsize=2)
def folded(scenario: Scenario) -> Folded:
    """Every shard's windows through tally's fold, and the count each minute bucket must end with."""
    result = Folded([], Counter(), Counter(), {})
    minute_keys: dict[int, str] = {}
    alerted = alerted_counters(scenario)
    for shard, window, events in shard_windows(scenario):
        result.events_per_window[window] += len(events)
        for event in events:
            if event.counter in alerted:
                result.arrivals.setdefault(event.counter, []).append(event.arrival_ms)
            minute = event.event_ms // MINUTE_MS
            key = minute_keys.get(minute)
            if key is None:
                key = minute_keys[minute] = Bucket("M", minute).sort_key
            result.expected[(event.counter, key)] += 1
            if event.hashed is not None:
                for bucket in counted_buckets(event.event_ms, event.arrival_ms, _PLACEMENT):
                    result.expected_sketches.setdefault((event.counter, bucket.sort_key), Sketch()).add(event.hashed)
        segments = fold(events)
        if segments:
            result.windows.append((shard, window, segments))
    return result


# --- alerts -------------------------------------------------------------------------------------

ALERT_WINDOW = "10m"
ALERTED_TAIL = 99  # the tail's busiest counters with the alert, beside the hot counter
ALERT_NAME = "burst"
# PutEvents answers after a lognormal time, median 20 ms (EventBridge's, slower than a DynamoDB write).
PUT_EVENTS_LATENCY = Latency(update_median_seconds=0.02)


def alerted_counters(scenario: Scenario) -> frozenset[str]:
    if not scenario.alert_above:
        return frozenset()
    width = max(5, len(str(scenario.mix.tail)))
    return frozenset([HOT_COUNTER, *(f"counter-{rank:0{width}d}" for rank in range(1, ALERTED_TAIL + 1))])


def scenario_alert(scenario: Scenario) -> Alert:
    return Alert(ALERT_NAME, "rule", ALERT_WINDOW, 10 * MINUTE_MS, ABOVE, scenario.alert_above, scenario.alert_above)


@dataclass(frozen=True)
class ReadAlertStates:
    """A strongly consistent BatchGetItem of the alert's state items, 100 a request, one after the other;
    the model answers ({counter: AlertState}, the clock in ms)."""

    counters: list[str]


@dataclass(frozen=True)
class ReadMinuteCounts:
    """One strongly consistent Query per counter of the minutes ``first`` to ``last`` (every lane), as many at
    once as a commit's updates; the model answers {counter: {minute: count}} as the table holds them."""

    spans: dict[str, tuple[int, int]]


@dataclass(frozen=True)
class ChangeAlertState:
    """The conditional write of one crossing over the state read; the model answers None (made) or the
    state as it now is."""

    crossing: Crossing
    read: AlertState


@dataclass(frozen=True)
class PutAlertEvents:
    """PutEvents of the crossings made, then the write that clears each one's ``pending``."""

    crossings: list[Crossing]


AlertStep = ReadAlertStates | ReadMinuteCounts | ChangeAlertState | PutAlertEvents


def alert_steps(segment: Segment, alert: Alert, alerted: frozenset[str], lanes: int) -> Generator[AlertStep, Any, int]:
    """``Watcher.after_commit`` for one above alert, as steps: the states of the counters the segment wrote,
    the minutes of the windows it changed, and for each window in time order the crossing it makes (its
    conditional write, again over what another evaluator wrote, until nothing is left to cross), then the
    events. The number of crossings made."""
    written = minutes_written(segment.deltas, alerted)
    if not written:
        return 0
    states, now = yield ReadAlertStates(sorted(written))
    spans = {}
    for counter, minutes in written.items():
        judged = judged_last_minutes(minutes, alert.window_ms, now, states[counter].state == ALARM)
        spans[counter] = (judged.start - alert.window_ms // MINUTE_MS + 1, judged[-1])
    counts = yield ReadMinuteCounts(spans)
    made = []
    for counter in sorted(written):
        read = states[counter]
        windows, _skipped = commit_windows(
            alert.window_ms, written[counter], counts[counter], now, alarmed=read.state == ALARM
        )
        for window in windows:
            while (crossing := commit_crossing(alert, counter, read, window)) is not None:
                now_held = yield ChangeAlertState(crossing, read)
                if now_held is None:
                    made.append(crossing)
                    read = replace(crossing.recorded("model", now), pending=False)
                    break
                read = now_held
    if made:
        yield PutAlertEvents(made)
    return len(made)


def fold(events: list[CounterEvent]) -> list[Segment]:
    """tally's fold of one window: the segments it closed early, then the one the window's end closes."""
    folder = SegmentFolder()
    segments = list(folder.fold([event] for event in events))  # each event is its record's only outcome
    last = folder.close()
    return segments + ([last] if last is not None else [])


# --- commit configurations ---------------------------------------------------------------------


def lanes_for(shards: int) -> int:
    """The lanes the README recommends: about SHARDS_PER_LANE shards per lane, so an item has few watermarks."""
    return min(MAX_BUCKET_LANES, math.ceil(shards / SHARDS_PER_LANE))


Step = CommitStep | SketchStep | AlertStep

# The counter directory's designs: this release's (an entry when a commit creates an hour item, in
# DIRECTORY_PARTITIONS partitions a day) and the previous release's (an entry per counter every function
# writes that day, all in one partition a day).
SPREAD_DIRECTORY = "spread"
LEGACY_DIRECTORY = "one partition a day"


def directory_schedule(design: str) -> Callable[[], Backoff]:
    """How a design's functions put entries left unprocessed again: this release's longer pauses, or the
    previous release's plain backoff."""
    return directory_backoff if design == SPREAD_DIRECTORY else Backoff


@dataclass
class DirectoryWrites:
    """A warm function's directory writes after each commit (``dynamo.directory.CounterDirectory.record``): the entries
    it has not put yet, in BatchWriteItem requests of 25, each request's unprocessed items sent again after a
    pause (``dynamo.calls.batch_write``), remembered once all are in."""

    design: str
    settings: Settings
    backoff: Callable[[], Backoff] = Backoff
    written: set[Entry] = field(default_factory=set)

    def entries(self, segment: Segment, result: CommitResult) -> list[Entry]:
        if self.design == SPREAD_DIRECTORY:
            entries = entries_of(result.born)
        else:
            entries = entries_of(segment.deltas)
        return sorted(entries - self.written)

    def item(self, entry: Entry) -> dict[str, Any]:
        if self.design == SPREAD_DIRECTORY:
            return entry_item(entry, self.settings)
        day, counter = entry
        return {**entry_item(entry, self.settings), COUNTS_TABLE.partition_key: {"S": legacy_partition(day)}}

    def steps(self, segment: Segment, result: CommitResult) -> Generator[Step, Any, int]:
        new = self.entries(segment, result)
        if not new:
            return 0
        items = [self.item(entry) for entry in new]
        for start in range(0, len(items), 25):
            yield from put_steps(items[start : start + 25], self.backoff, "directory entries")
        if len(self.written) + len(new) > DIRECTORY_MEMORY:
            self.written.clear()
        self.written.update(new)
        return len(new)


def window_commit(
    segments: list[Segment],
    writer: Writer,
    settings: Settings,
    backoff: Callable[[], Backoff],
    merge_backoff: Callable[[], Backoff] = sketch_backoff,
    directory: DirectoryWrites | None = None,
    alert: tuple[Alert, frozenset[str]] | None = None,
) -> Generator[Step, Any, CommitResult]:
    """What the final invocation of a window does: commit its segments in order, each segment's counts, then
    its sketches in the writer's lane (CountsTable.commit, step by step), then its directory entries."""
    applied = already = retries = 0
    units = largest = 0.0
    lane = writer.lane(settings.bucket_lanes)
    for segment in segments:
        result = yield from commit_steps(segment, writer, TABLE, settings, backoff)
        applied += result.applied
        already += result.already_applied
        retries += result.retries
        units += result.write_units
        largest = max(largest, result.largest_write_units)
        yield from sketch_steps(segment, lane, TABLE, settings, merge_backoff)
        if directory is not None:
            yield from directory.steps(segment, result)
        if alert is not None:
            yield from alert_steps(segment, *alert, settings.bucket_lanes)
    return CommitResult(applied, already, retries, write_units=units, largest_write_units=largest)


# --- the simulation -----------------------------------------------------------------------------


@dataclass
class Invocation:
    shard: int
    window: int
    started: float
    steps: Generator[Step, Any, CommitResult]


@dataclass
class Batch:
    """The updates of one Send step in flight, WORKERS at a time."""

    invocation: Invocation
    updates: list[Update]
    answers: list[Answer | None]
    next: int = 0
    answered: int = 0


@dataclass
class ShardState:
    writer: Writer
    backoff: Callable[[], Backoff]
    merge_backoff: Callable[[], Backoff]
    directory: DirectoryWrites | None = None
    pending: list[tuple[int, list[Segment]]] = field(default_factory=list)
    busy: bool = False


@dataclass
class RunStats:
    events: int = 0
    counted_events: int = 0  # in the windows whose write units count (the steady state)
    retries: int = 0
    failed_retries_exhausted: int = 0
    failed_timeout: int = 0
    commit_seconds: list[float] = field(default_factory=list)  # per shard and window, from the window's end
    commit_seconds_by_window: dict[int, list[float]] = field(default_factory=dict)
    directory_puts_by_window: Counter[int] = field(default_factory=Counter)  # entries written, by the window putting them
    # Per alerted counter whose window crossed: from the arrival of the event that took it past the threshold to
    # the put of its ALARM event.
    alert_seconds: list[float] = field(default_factory=list)
    all_shards_seconds: list[float] = field(default_factory=list)  # per window: its last shard
    uncommitted_by_window: Counter[int] = field(default_factory=Counter)  # shard windows still uncommitted at the stop
    stopped_at_seconds: float | None = None  # when the run stopped with shard windows uncommitted
    # What the functions would publish and log of their items' growth (tally.core.item_growth): the largest
    # update a finished invocation measured (LargestBucketItemKB), and the lanes each "bucket items growing"
    # warning named, by how many named them.
    largest_item_kb: float = 0.0
    recommended_bucket_lanes: Counter[int] = field(default_factory=Counter)

    @property
    def uncommitted_shard_windows(self) -> int:
        return sum(self.uncommitted_by_window.values())


class Simulation:
    """Every shard's final invocation of every window, stepped through one event queue.

    Write units count from window ``counted_from_window`` on: the first
    window of a run fills the hour items with the watermarks of their shards,
    which they then keep for the rest of the hour.
    """

    def __init__(
        self,
        scenario: Scenario,
        table: SimulatedTable,
        lanes: int,
        schedule: Callable[[], Backoff] = commit_backoff,
        workers: int = COMMIT_WORKERS,
        invoke_delay_mean_seconds: float = 0.2,
        counted_from_window: int = 0,
        directory: str | None = None,
    ) -> None:
        self.scenario, self.table, self.workers = scenario, table, workers
        # Every counter ranked: the most a deployment's commits write (and wait for) at this scale.
        self.settings = Settings(counts_table=TABLE, bucket_lanes=lanes, ranked_prefixes=("",))
        self.alert = (scenario_alert(scenario), alerted_counters(scenario)) if scenario.alert_above else None
        self.alert_states: dict[str, AlertState] = {}
        self.alert_put_at: dict[str, float] = {}  # when each counter's ALARM event was put (simulated seconds)
        self.alert_writes = 0  # state changes written (and the writes clearing their ``pending``)
        self.alert_read_requests = 0
        self.rng = random.Random(scenario.seed + 1)
        self.invoke_delay_mean_seconds = invoke_delay_mean_seconds
        self.counted_from_window = counted_from_window
        self.queue: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self.order = itertools.count()
        self.stats = RunStats()
        self.expected: Counter[Key] = Counter()
        self.expected_sketches: dict[Key, Sketch] = {}
        self.done_at: dict[tuple[int, int], float] = {}
        self.shards = [
            ShardState(
                Writer.of_shard(STREAM_ARN, f"shardId-{shard:08d}"),
                _seeded(schedule, scenario.seed, shard),
                _seeded(sketch_backoff, scenario.seed + 1, shard),
                None if directory is None else DirectoryWrites(directory, self.settings, _seeded(directory_schedule(directory), scenario.seed + 3, shard)),
            )
            for shard in range(scenario.shards)
        ]

    def run(self) -> RunStats:
        """Fold every shard's windows, step every commit to its end, check exactness."""
        collecting = gc.isenabled()
        gc.disable()  # millions of live objects that never form cycles: collections only cost time
        try:
            return self._run()
        finally:
            if collecting:
                gc.enable()

    def _run(self) -> RunStats:
        prepared = folded(self.scenario)
        self.expected = prepared.expected
        self.expected_sketches = prepared.expected_sketches
        for window, events in prepared.events_per_window.items():
            self.stats.events += events
            if window >= self.counted_from_window:
                self.stats.counted_events += events
        if self.scenario.warm:
            self._warm(prepared.windows)
        for shard, window, segments in prepared.windows:
            window_end = (window + 1) * WINDOW_SECONDS
            self._at(window_end + self.rng.expovariate(1 / self.invoke_delay_mean_seconds), self._arrive, shard, window, segments)
        stop_at = self.scenario.windows * WINDOW_SECONDS + SECONDS_FOLLOWED_AFTER_LAST_WINDOW
        while self.queue:
            now, _, action, arguments = heapq.heappop(self.queue)
            if now > stop_at:
                self.stats.stopped_at_seconds = stop_at
                break
            action(now, *arguments)
        committed = Counter(window for _shard, window in self.done_at)
        self.stats.uncommitted_by_window = Counter(window for _shard, window, _ in prepared.windows) - committed
        self._check_exact(complete=not self.stats.uncommitted_shard_windows)
        if self.alert is not None and not self.stats.uncommitted_shard_windows:
            self.stats.alert_seconds = self._alert_seconds(prepared.arrivals)
        for window in range(self.scenario.windows):
            ends = [t for (_, w), t in self.done_at.items() if w == window]
            if ends:
                self.stats.all_shards_seconds.append(max(ends))
        return self.stats

    def _warm(self, windows: list[tuple[int, int, list[Segment]]]) -> None:
        """The state of a run that starts amid a day's traffic: the first hour's hour items that the run writes
        exist already (with a count, no watermark of the run's writers), and every function remembers the first
        day's directory entries of the counters it writes."""
        first_hour, first_day = self.scenario.start_ms // HOUR_MS, self.scenario.start_ms // DAY_MS
        lanes = self.settings.bucket_lanes
        for shard, _window, segments in windows:
            state = self.shards[shard]
            lane = state.writer.lane(lanes)
            for segment in segments:
                for counter, bucket in segment.deltas:
                    if bucket.start_ms // DAY_MS == first_day and state.directory is not None:
                        state.directory.written.add((first_day, counter))
                    if bucket.kind == "H" and bucket.start_ms // HOUR_MS == first_hour:
                        self.table.seed((counter, lane_sort_key(bucket.sort_key, lane)), count=1)

    def _at(self, when: float, action: Callable[..., None], *arguments: Any) -> None:
        heapq.heappush(self.queue, (when, next(self.order), action, arguments))

    def _arrive(self, now: float, shard: int, window: int, segments: list[Segment]) -> None:
        """The window closed on this shard; its final invocation runs once the shard's previous one is done."""
        state = self.shards[shard]
        state.pending.append((window, segments))
        if not state.busy:
            self._invoke(now, shard)

    def _invoke(self, now: float, shard: int) -> None:
        state = self.shards[shard]
        window, segments = state.pending[0]
        state.busy = True
        steps = window_commit(
            segments, state.writer, self.settings, state.backoff, state.merge_backoff, state.directory, self.alert
        )
        self._step(now, Invocation(shard, window, now, steps), None)

    def _step(self, now: float, invocation: Invocation, reply: Any) -> None:
        if now - invocation.started > FUNCTION_TIMEOUT_SECONDS:
            self.stats.failed_timeout += 1
            self._retry(invocation.started + FUNCTION_TIMEOUT_SECONDS, invocation)
            return
        try:
            step = invocation.steps.send(reply)
        except StopIteration as done:
            self._finished(now, invocation, done.value)
            return
        except RetriesExhausted:
            self.stats.failed_retries_exhausted += 1
            self._retry(now, invocation)
            return
        if isinstance(step, Send):
            batch = Batch(invocation, step.updates, [None] * len(step.updates))
            for _ in range(min(self.workers, len(step.updates))):
                self._send_next(now, batch)
        elif isinstance(step, ReadSketches):
            answer_at, stored = self.table.read_sketches(now, step.keys)
            self._at(answer_at, self._step, invocation, stored)
        elif isinstance(step, WriteSketches):
            self.table.counting = invocation.window >= self.counted_from_window
            answer_at, answers = self.table.write_sketches(now, step.writes)
            self._at(answer_at, self._step, invocation, answers)
        elif isinstance(step, Put):
            self.table.counting = invocation.window >= self.counted_from_window
            answer_at, left = self.table.put(now, step.items)
            written = len(step.items) - len(left)
            if written and put_kind(step.items[0][COUNTS_TABLE.partition_key]["S"]) == "directory":
                self.stats.directory_puts_by_window[invocation.window] += written
            self._at(answer_at, self._step, invocation, left)
        elif isinstance(step, Pause):
            self._at(now + step.seconds, self._step, invocation, None)
        elif isinstance(step, ReadAlertStates | ReadMinuteCounts | ChangeAlertState | PutAlertEvents):
            self._alert_step(now, invocation, step)
        else:
            raise AssertionError(f"the model's segments never predate this release: {step!r}")

    def _alert_step(self, now: float, invocation: Invocation, step: AlertStep) -> None:
        """The alert's reads and writes: state items in their own partition, reads that never throttle."""
        if isinstance(step, ReadAlertStates):
            requests = math.ceil(len(step.counters) / 100)
            states = {counter: self.alert_states.get(counter, AlertState()) for counter in step.counters}
            reply: Any = (states, self.scenario.start_ms + round(now * 1000))
            answer_at = now + sum(self.table.latency.seconds(self.table.rng) for _ in range(requests))
        elif isinstance(step, ReadMinuteCounts):
            requests = len(step.spans)
            reply = {counter: self._minute_counts(counter, *span) for counter, span in step.spans.items()}
            rounds = math.ceil(requests / self.workers)  # as many Queries at once as a commit's updates
            answer_at = now + sum(self.table.latency.seconds(self.table.rng) for _ in range(rounds))
        elif isinstance(step, ChangeAlertState):
            requests = 0
            held = self.alert_states.get(step.crossing.counter, AlertState())
            if held.transitions == step.read.transitions and not held.pending:
                self.alert_writes += 1
                self.alert_states[step.crossing.counter] = step.crossing.recorded("model", 0)
                reply = None
            else:
                reply = held
            answer_at = now + self.table.latency.seconds(self.table.rng)
        else:
            requests = 0
            put_at = now + PUT_EVENTS_LATENCY.seconds(self.table.rng)
            for crossing in step.crossings:
                self.alert_put_at.setdefault(crossing.counter, put_at)
                self.alert_states[crossing.counter] = replace(self.alert_states[crossing.counter], pending=False)
                self.alert_writes += 1
            reply = None
            answer_at = put_at + self.table.latency.seconds(self.table.rng)
        self.alert_read_requests += requests
        self._at(answer_at, self._step, invocation, reply)

    def _alert_seconds(self, arrivals: dict[str, list[int]]) -> list[float]:
        """For each alerted counter with more events than the threshold: the time from the arrival of the one
        that took it past (every event of the run is in every window the commits judge: the run is shorter than
        the alert's window) to its event's put. An alert missed, or put before its crossing arrived, is a fault."""
        assert self.alert is not None
        threshold = self.alert[0].threshold
        crossed = {counter: sorted(times)[threshold] for counter, times in arrivals.items() if len(times) > threshold}
        if crossed.keys() != self.alert_put_at.keys():
            raise AssertionError(f"alerts put for {sorted(self.alert_put_at)}, crossings of {sorted(crossed)}")
        seconds = [self.alert_put_at[c] - (at - self.scenario.start_ms) / 1000 for c, at in crossed.items()]
        if min(seconds, default=0.0) < 0:
            raise AssertionError("an alert was put before the event that crossed its threshold arrived")
        return seconds

    def _minute_counts(self, counter: str, first: int, last: int) -> dict[int, int]:
        """What a Query of a counter's minutes ``first`` to ``last`` reads: every lane, summed."""
        lanes = self.settings.bucket_lanes
        counts = {
            minute: sum(self.table.counts.get((counter, lane_sort_key(Bucket("M", minute).sort_key, lane)), 0)
                        for lane in range(lanes))
            for minute in range(first, last + 1)
        }
        return {minute: count for minute, count in counts.items() if count}

    def _send_next(self, now: float, batch: Batch) -> None:
        index = batch.next
        batch.next += 1
        self.table.counting = batch.invocation.window >= self.counted_from_window
        answer_at, answer = self.table.update(now, batch.updates[index])
        self._at(answer_at, self._answered, batch, index, answer)

    def _answered(self, now: float, batch: Batch, index: int, answer: Answer) -> None:
        batch.answers[index] = answer
        batch.answered += 1
        self.stats.retries += answer.outcome is Outcome.RETRY
        if batch.next < len(batch.updates):
            self._send_next(now, batch)
        elif batch.answered == len(batch.updates):
            self._step(now, batch.invocation, batch.answers)  # type: ignore[arg-type]

    def _retry(self, failed_at: float, invocation: Invocation) -> None:
        """Lambda retries the failed invocation with the same records; what was applied is found by its watermarks.

        The shard stays busy meanwhile: its next window waits for this one, as Lambda keeps a shard in order.
        """
        self._at(failed_at + LAMBDA_RETRY_DELAY_SECONDS, lambda now, shard: self._invoke(now, shard), invocation.shard)

    def _finished(self, now: float, invocation: Invocation, result: CommitResult) -> None:
        state = self.shards[invocation.shard]
        self.stats.largest_item_kb = max(self.stats.largest_item_kb, result.largest_write_units)
        _window, segments = state.pending[0]  # the window this invocation committed
        watermark_bytes = max((state.writer.watermark_bytes(segment) for segment in segments), default=0)
        growth = item_growth(result.largest_write_units, watermark_bytes, self.settings.bucket_lanes)
        if growth is not None:
            self.stats.recommended_bucket_lanes[growth.recommended_bucket_lanes] += 1
        window_end = (invocation.window + 1) * WINDOW_SECONDS
        self.stats.commit_seconds.append(now - window_end)
        self.stats.commit_seconds_by_window.setdefault(invocation.window, []).append(now - window_end)
        self.done_at[(invocation.shard, invocation.window)] = now - window_end
        state.pending.pop(0)
        state.busy = False
        if state.pending:
            self._invoke(now, invocation.shard)

    def _check_exact(self, complete: bool = True) -> None:
        """Every minute bucket the model stored holds exactly the events generated in it; in a run stopped with
        shard windows uncommitted, at most those (none counted twice)."""
        stored: Counter[Key] = Counter()
        for (pk, sk), count in self.table.counts.items():
            if sk.startswith("M#"):
                stored[(pk, bucket_sort_key(sk))] += count
        doubled = sum((stored - self.expected).values())
        if doubled or (complete and stored != self.expected):
            lost = sum((self.expected - stored).values())
            raise AssertionError(f"the model lost {lost} and doubled {doubled} of {self.stats.events} events")
        if not complete:
            return
        sketches: dict[Key, Sketch] = {}
        for (pk, sk), data in self.table.sketches.items():
            sketches.setdefault(stored_bucket(pk, sk), Sketch()).merge(Sketch.from_bytes(data))
        if sketches != self.expected_sketches:
            raise AssertionError(f"{sum(sketches.get(k) != s for k, s in self.expected_sketches.items())} sketches differ")


def _seconds(value: float) -> float | None:
    """A time as published: None for a shard window that never committed."""
    return None if math.isinf(value) else round(value, 2)


def _slowest(seconds: list[float | None]) -> float | None:
    """The longest of published times; None if any is (a shard window that never committed)."""
    return None if None in seconds else max(seconds)  # type: ignore[type-var]


def _seeded(schedule: Callable[[], Backoff], seed: int, shard: int) -> Callable[[], Backoff]:
    """The schedule with each shard's own seeded jitter, and no sleeping."""
    rng = random.Random(seed * 1_000_003 + shard)
    return lambda: replace(schedule(), rng=rng, sleep=_no_sleep)


def _no_sleep(_seconds: float) -> None:
    raise AssertionError("simulated time: a pause is a step of the event queue, never a sleep")


# --- figures ------------------------------------------------------------------------------------


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)] if ordered else 0.0


@functools.lru_cache(maxsize=64)
def measure(
    scenario: Scenario,
    lanes: int,
    *,
    latency: Latency = Latency(),
    limits: Limits = Limits(),
    counted_from_window: int = 0,
    directory: str | None = None,
) -> dict[str, Any]:
    """The figures of one run (cached: the tables share runs); with a ``directory`` design, its writes too."""
    table = SimulatedTable(latency, limits, random.Random(scenario.seed + 2))
    stats = Simulation(scenario, table, lanes, counted_from_window=counted_from_window, directory=directory).run()
    t = table.stats
    commit_seconds = stats.commit_seconds + [math.inf] * stats.uncommitted_shard_windows
    return {
        "shards": scenario.shards,
        "bucket_lanes": lanes,
        "events_per_second": scenario.events_per_second,
        "windows": scenario.windows,
        "events": stats.events,
        "updates": t.updates,
        "applied": t.applied,
        "throttled": t.throttled,
        "already_applied": t.already_applied,
        "retries": stats.retries,
        "write_units": t.write_units,
        "write_units_per_1000_events": round(t.counted_write_units * 1000 / max(1, stats.counted_events), 1),
        "largest_item_bytes": t.largest_item_bytes,
        "largest_item_kb": stats.largest_item_kb,
        # The value most "bucket items growing" warnings named (None: no invocation warned). The model numbers
        # each shard's records from its own base, so its first shards' watermarks are a few bytes shorter than
        # the others' and their estimates a lane or two higher; a stream's shards write positions of one length.
        "warned_invocations": stats.recommended_bucket_lanes.total(),
        "recommended_bucket_lanes": max(
            stats.recommended_bucket_lanes, key=stats.recommended_bucket_lanes.__getitem__, default=None
        ),
        "p50_commit_seconds": _seconds(percentile(commit_seconds, 0.50)),
        "p99_commit_seconds": _seconds(percentile(commit_seconds, 0.99)),
        # None: some shard window was still uncommitted when the run stopped
        "all_shards_committed_seconds": (
            None if stats.uncommitted_shard_windows else round(max(stats.all_shards_seconds, default=0.0), 2)
        ),
        "failed_invocations": stats.failed_retries_exhausted + stats.failed_timeout,
        "failed_retries_exhausted": stats.failed_retries_exhausted,
        "failed_timeout": stats.failed_timeout,
        "uncommitted_shard_windows": stats.uncommitted_shard_windows,
        "stopped_at_seconds": stats.stopped_at_seconds,
        # run() raises on a count lost or doubled; a stopped run is only checked for counts doubled
        "exact": True if not stats.uncommitted_shard_windows else None,
        **(
            {
                "sketch_reads": t.sketch_reads,
                "sketch_writes": t.sketch_writes,
                "sketch_conflicts": t.sketch_conflicts,
                "sketch_throttled": t.sketch_throttled,
                "sketch_write_units": t.sketch_write_units,
            }
            if scenario.distinct
            else {}
        ),
        **(
            {
                "directory": directory,
                "directory_puts": t.puts.get("directory", 0),
                "directory_puts_throttled": t.put_throttled.get("directory", 0),
                "directory_write_units": t.put_write_units.get("directory", 0),
                "directory_puts_by_window": [stats.directory_puts_by_window[w] for w in range(scenario.windows)],
                "rank_puts": t.puts.get("ranks", 0),
                "rank_puts_throttled": t.put_throttled.get("ranks", 0),
                "p99_commit_seconds_by_window": [
                    _seconds(percentile(
                        stats.commit_seconds_by_window.get(w, []) + [math.inf] * stats.uncommitted_by_window[w], 0.99
                    ))
                    for w in range(scenario.windows)
                ],
            }
            if directory is not None
            else {}
        ),
        **(
            {
                "alerted_counters": len(alerted_counters(scenario)),
                "alert_window": ALERT_WINDOW,
                "alert_above": scenario.alert_above,
                "alerts_put": len(stats.alert_seconds),
                "p50_arrival_to_alert_seconds": round(percentile(stats.alert_seconds, 0.50), 2),
                "p99_arrival_to_alert_seconds": round(percentile(stats.alert_seconds, 0.99), 2),
                "max_arrival_to_alert_seconds": round(max(stats.alert_seconds, default=0.0), 2),
            }
            if scenario.alert_above
            else {}
        ),
    }


# --- the bench ----------------------------------------------------------------------------------

SHARD_COUNTS = (1, 10, 100, 1000)
EVENTS_PER_SHARD_SECOND = 5.0  # the stream's rate grows with its shards
FIXED_EVENTS_PER_SECOND = 5000.0  # the 1,000-shard rate, spread over fewer shards
LANE_CHOICES_AT_1000_SHARDS = (1, 8, 16, 32)
_FIGURES = (
    "bucket_lanes", "updates", "throttled", "retries", "write_units_per_1000_events", "largest_item_bytes",
    "p50_commit_seconds", "p99_commit_seconds", "all_shards_committed_seconds", "failed_invocations",
    "uncommitted_shard_windows",
)


def origin_write_units_per_event() -> int:
    """The origin's two plain UpdateItems per event, each on an item well under 1 KB."""
    item = {"id": {"S": "counter-00001_minute_29923800"}, "count": {"N": "1000000"}, "ttl": {"N": "1795600000"}}
    return 2 * write_units(item_size(item))


def dedup_write_units_per_event() -> int:
    """The deduplicating design's transaction per event: its deduplication item and the two increments."""
    dedup = {"id": {"S": "dedup_" + "0" * 32}, "ttl": {"N": "1795600000"}}
    item = {"id": {"S": "counter-00001_minute_29923800"}, "count": {"N": "1000000"}, "ttl": {"N": "1795600000"}}
    return write_units(item_size(dedup), transactional=True) + 2 * write_units(item_size(item), transactional=True)


def results() -> dict[str, Any]:
    """Every figure of the scale model's shard counts, lanes and fixed rate, for bench/results.json (each part
    alone: ``shard_results``, ``lane_results``, ``fixed_rate_results``; in one process they share their runs).

    Write units per 1,000 events count the second window: by then the hour
    items carry the watermarks of every shard that writes them, as they do
    for the rest of their hour.
    """
    return {**shard_results(), **lane_results(), **fixed_rate_results()}


def shard_results() -> dict[str, Any]:
    """5 events/s per shard from 1 to 1,000 shards, on the lanes the README recommends and on one."""
    growing = []
    for shards in SHARD_COUNTS:
        scenario = Scenario(shards=shards, events_per_second=EVENTS_PER_SHARD_SECOND * shards, windows=2)
        recommended = measure(scenario, lanes_for(shards), counted_from_window=1)
        one_lane = measure(scenario, 1, counted_from_window=1)
        growing.append({**recommended, "one_lane": {name: one_lane[name] for name in _FIGURES}})
    return {"scale": growing}


def lane_results() -> dict[str, Any]:
    """1,000 shards at 5,000 events/s on each of LANE_CHOICES_AT_1000_SHARDS."""
    at_1000 = Scenario(shards=1000, events_per_second=FIXED_EVENTS_PER_SECOND, windows=2)
    return {"scale_lanes_at_1000_shards": [measure(at_1000, n, counted_from_window=1) for n in LANE_CHOICES_AT_1000_SHARDS]}


def fixed_rate_results() -> dict[str, Any]:
    """5,000 events/s over 1 to 1,000 shards, both mixes, beside the origin's and the deduplicating design's
    write units."""
    origin, dedup = origin_write_units_per_event() * 1000, dedup_write_units_per_event() * 1000
    fixed_rate = []
    for mix in (DEFAULT_MIX, TAIL_ONLY_MIX):
        for shards in SHARD_COUNTS:
            scenario = Scenario(shards=shards, events_per_second=FIXED_EVENTS_PER_SECOND, windows=2, mix=mix)
            run = measure(scenario, lanes_for(shards), counted_from_window=1)
            fixed_rate.append(
                {
                    "mix": mix.name,
                    "shards": shards,
                    "bucket_lanes": run["bucket_lanes"],
                    "events_per_second": FIXED_EVENTS_PER_SECOND,
                    "write_units_per_1000_events": run["write_units_per_1000_events"],
                    "origin_write_units_per_1000_events": origin,
                    "dedup_write_units_per_1000_events": dedup,
                    "origin_over_tally": round(origin / run["write_units_per_1000_events"], 2),
                    "dedup_over_tally": round(dedup / run["write_units_per_1000_events"], 2),
                    "largest_item_bytes": run["largest_item_bytes"],
                    "updates": run["updates"],
                    "throttled": run["throttled"],
                    "p99_commit_seconds": run["p99_commit_seconds"],
                    "failed_invocations": run["failed_invocations"],
                }
            )
    return {"scale_fixed_rate": fixed_rate}


DISTINCT_SHARD_COUNTS = (100, 1000)
ONE_LANE_HOLDS_SHARDS = 100  # the most shards the scale table shows committing on one lane without failures


def distinct_results() -> dict[str, Any]:
    """A distinct rule on the hot counter: one lane (where the counts alone hold on one), the lanes the README
    recommends, and twice those. At 1,000 shards one lane already fails for the counts alone (``results``),
    and its distinct run takes over an hour and 18 GB: it is left out."""
    runs = []
    for shards in DISTINCT_SHARD_COUNTS:
        scenario = Scenario(shards=shards, events_per_second=EVENTS_PER_SHARD_SECOND * shards, windows=2, distinct=True)
        one_lane = (1,) if shards <= ONE_LANE_HOLDS_SHARDS else ()
        for lanes in sorted({*one_lane, lanes_for(shards), min(MAX_BUCKET_LANES, 2 * lanes_for(shards))}):
            runs.append(measure(scenario, lanes, counted_from_window=1))
    return {"scale_distinct": runs}


def model_description() -> dict[str, Any]:
    latency, limits = Latency(), Limits()
    return {
        "window_seconds": WINDOW_SECONDS,
        "events_per_shard_second": EVENTS_PER_SHARD_SECOND,
        "mix": DEFAULT_MIX.name,
        "update_median_ms": latency.update_median_seconds * 1000,
        "update_sigma": latency.sigma,
        "updates_in_flight_per_shard": COMMIT_WORKERS,
        "shards_per_lane": SHARDS_PER_LANE,
        "item_and_partition_write_units_per_second": [limits.item_write_units_per_second, limits.partition_write_units_per_second],
        "function_timeout_seconds": FUNCTION_TIMEOUT_SECONDS,
    }


# --- the day boundary ---------------------------------------------------------------------------

DAY_BOUNDARY_SHARDS = (1, 100, 1000)
DAY_BOUNDARY_MIXES = (DEFAULT_MIX, MILLION_MIX)
WINDOWS_BEFORE_MIDNIGHT = WINDOWS_AFTER_MIDNIGHT = 2


def day_boundary_scenario(shards: int, mix: CounterMix) -> Scenario:
    """Windows on both sides of the UTC midnight after START_MS, amid a day's traffic (``warm``)."""
    midnight = (START_MS // DAY_MS + 1) * DAY_MS
    return Scenario(
        shards=shards,
        events_per_second=EVENTS_PER_SHARD_SECOND * shards,
        windows=WINDOWS_BEFORE_MIDNIGHT + WINDOWS_AFTER_MIDNIGHT,
        mix=mix,
        start_ms=midnight - WINDOWS_BEFORE_MIDNIGHT * WINDOW_SECONDS * 1000,
        warm=True,
    )


def directory_puts_per_day(mix: CounterMix, shards: int, events_per_second: float, lanes: int, design: str) -> float:
    """Directory puts a day of this traffic makes, in expectation, from each counter's rate.

    The previous release: every function puts each counter it sees that day
    once. This release: an hour item is created in an hour when any shard of
    its lane has an event of its counter, by one of them (whichever commits
    first), which puts the entry unless it put it earlier that day. Both count
    warm functions that never forget (no cold starts, no DIRECTORY_MEMORY
    overflow): a floor.
    """
    per_lane = shards / lanes
    total = 0.0
    for share in mix.shares():
        rate = events_per_second * share
        if design == LEGACY_DIRECTORY:
            total += shards * -math.expm1(-rate * 86_400 / shards)
        else:
            created = -math.expm1(-rate * 3_600 / lanes)  # one lane's hour item, in one hour
            total += shards * -math.expm1(24 * math.log1p(-created / per_lane)) if created < per_lane else shards
    return total


def day_boundary_row(shards: int, mix: CounterMix, design: str) -> dict[str, Any]:
    scenario = day_boundary_scenario(shards, mix)
    lanes = lanes_for(shards)
    run = measure(scenario, lanes, directory=design)
    split = WINDOWS_BEFORE_MIDNIGHT
    entry_units = write_units(item_size(entry_item((0, f"counter-{mix.tail:07d}"), Settings())))
    per_function = [
        {counter for segment in segments for counter, _bucket in segment.deltas}
        for _shard, window, segments in folded(scenario).windows
        if window == split
    ]
    first_after = set().union(*per_function)
    return {
        "shards": shards,
        "counters": mix.tail,
        "mix": mix.name,
        "directory": design,
        "bucket_lanes": lanes,
        "events_per_second": scenario.events_per_second,
        "events": run["events"],
        "failed_invocations": run["failed_invocations"],
        "p99_commit_seconds": run["p99_commit_seconds"],
        "p99_commit_seconds_before_midnight": _slowest(run["p99_commit_seconds_by_window"][:split]),
        "p99_commit_seconds_after_midnight": _slowest(run["p99_commit_seconds_by_window"][split:]),
        "all_shards_committed_seconds": run["all_shards_committed_seconds"],
        "counters_in_first_window_after_midnight": len(first_after),
        # What the previous release would put into its one partition then: every function, every counter it saw.
        "previous_release_puts_first_window_after_midnight": sum(map(len, per_function)),
        "directory_puts_by_window": run["directory_puts_by_window"],
        "directory_puts_throttled": run["directory_puts_throttled"],
        # The ranking index's records beside them, all in the day's one partition (ranking.lowest_level).
        "rank_puts": run["rank_puts"],
        "rank_puts_throttled": run["rank_puts_throttled"],
        "directory_write_units_per_day": round(
            directory_puts_per_day(mix, shards, scenario.events_per_second, lanes, design) * entry_units
        ),
        "throttled": run["throttled"],
        "exact": run["exact"],
    }


def day_boundary_results(legacy_shards: Sequence[int] = (100,)) -> dict[str, Any]:
    """This release's directory at every shard count and both counts of counters; the previous release's
    beside it at ``legacy_shards`` (at 1,000 shards its invocations fail and retry for minutes, each retry
    sending its whole window again: too long to simulate; its rows say what it would put)."""
    rows = []
    for mix in DAY_BOUNDARY_MIXES:
        for shards in DAY_BOUNDARY_SHARDS:
            for design in (SPREAD_DIRECTORY, *((LEGACY_DIRECTORY,) if shards in legacy_shards else ())):
                rows.append(day_boundary_row(shards, mix, design))
            folded.cache_clear()  # a million counters' windows at 1,000 shards weigh gigabytes: one at a time
    return {"scale_day_boundary": rows}


# --- alerts at 1,000 shards ---------------------------------------------------------------------

ALERT_SHARDS = 1000
ALERT_ABOVE = 1000
ALERT_RUN_WINDOWS = 3


def alert_latency_results() -> dict[str, Any]:
    """The time from an event's arrival to the alert it raises, at 1,000 shards committing at once."""
    scenario = Scenario(
        shards=ALERT_SHARDS, events_per_second=EVENTS_PER_SHARD_SECOND * ALERT_SHARDS, windows=ALERT_RUN_WINDOWS,
        alert_above=ALERT_ABOVE,
    )
    run = measure(scenario, lanes_for(ALERT_SHARDS), counted_from_window=1)
    names = ("shards", "bucket_lanes", "events_per_second", "windows", "alerted_counters", "alert_window",
             "alert_above", "alerts_put", "p50_arrival_to_alert_seconds", "p99_arrival_to_alert_seconds",
             "max_arrival_to_alert_seconds", "p99_commit_seconds", "failed_invocations")
    return {"scale_alert_latency": {name: run[name] for name in names}}
