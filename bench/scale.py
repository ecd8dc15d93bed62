"""Scale model: many shards closing their tumbling windows at the same instant, on the same hot buckets.

Lambda aligns tumbling windows to the clock, so every shard of the events
stream commits its window at the same moment, and every shard carries the hot
counters. This model runs tally's own fold (``SegmentFolder``) and commit
policy (``commit_steps``: the transactions, the backoff, what a cancellation
means) for every shard, against a simulated DynamoDB in simulated time:

- a transaction locks its items from the moment DynamoDB accepts it until it
  answers (a lognormal duration that grows with its items); a transaction
  that touches a locked item is cancelled with ``TransactionConflict``;
- an item, and a partition (here: a partition key's item collection), accept
  at most 1,000 write units a second, with a second's worth of burst; a
  transaction that would exceed either is cancelled with ``ThrottlingError``
  and consumes nothing;
- a committed transaction costs two write units per started KB of each item,
  the larger of the item before and after (``bench.cost``); cancelled
  attempts are counted, not charged;
- a Lambda invocation fails when the commit policy gives up (retries
  exhausted) or when it runs past the function's 60 s timeout; Lambda then
  retries it a second later, and the retry finds the markers of what was
  committed before.

With a distinct rule on the hot counter, each segment's commit is followed
by its sketch merges (``sketch_steps``): a strongly consistent read of the
bucket's sketch item in the shard's lane, then a write conditioned on what
was read. The model evaluates the condition when the write is sent: a writer
that lost to another since its read is answered with the item as it is now
and merges again; a write beyond an item's or a partition's write units is
throttled. A sketch write costs one unit per started KB (plain, not
transactional), a failed condition too.

An event queue (heapq) orders every step; no wall-clock time passes, so a
thousand shards take seconds. Every run checks exactness: the bucket counts
the model stored equal the events it generated, and every bucket's sketch
(its lanes merged) holds exactly the distinct values generated in it.
"""

from __future__ import annotations

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
from tally.core.commit import (
    Attempt,
    CommitResult,
    CommitStep,
    Outcome,
    RetriesExhausted,
    classify_cancellation,
    commit_steps,
    lane_of,
    source_id,
)
from tally.core.buckets import Bucket, bucket_sort_key, counted_buckets
from tally.core.sketch_writes import ReadSketches, SketchOutcome, SketchStep, SketchWrite, WriteSketches, sketch_steps
from tally.core.sketches import Sketch, hash_of
from tally.core.records import CounterEvent
from tally.core.retry import Backoff, commit_backoff, sketch_backoff
from tally.core.segments import Segment, SegmentFolder
from tally.core.settings import MAX_BUCKET_LANES, MINUTE_MS, Settings

TABLE = "tally-counts"
STREAM_ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/tally-events/stream/2026-11-23T00:00:00.000"
WINDOW_SECONDS = 60
FUNCTION_TIMEOUT_SECONDS = 60.0
LAMBDA_RETRY_DELAY_SECONDS = 1.0
# 2026-11-23T10:00Z: windows end on whole minutes, as Lambda aligns them.
START_MS = 1_795_428_000_000

Key = tuple[str, str]


@dataclass(frozen=True)
class Latency:
    """How long DynamoDB holds a transaction's items, and how quickly it refuses one."""

    lock_median_seconds: float = 0.012
    lock_seconds_per_item: float = 0.0002  # a full 100-item transaction: about 32 ms
    lock_sigma: float = 0.5
    cancel_median_seconds: float = 0.005
    cancel_sigma: float = 0.3

    def lock_seconds(self, rng: random.Random, items: int) -> float:
        median = self.lock_median_seconds + self.lock_seconds_per_item * items
        return median * math.exp(self.lock_sigma * rng.gauss(0.0, 1.0))

    def cancel_seconds(self, rng: random.Random) -> float:
        return self.cancel_median_seconds * math.exp(self.cancel_sigma * rng.gauss(0.0, 1.0))


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
    attempts: int = 0
    transactions: int = 0
    conflicts: int = 0  # attempts cancelled because an item was locked
    throttled: int = 0  # attempts cancelled for an item's or a partition's write limit
    duplicates: int = 0  # attempts cancelled because their marker exists
    write_units: int = 0
    item_writes: int = 0
    sketch_reads: int = 0  # strongly consistent reads of sketch items (one per key)
    sketch_writes: int = 0  # conditional writes of merged sketches that succeeded
    sketch_conflicts: int = 0  # ... that found the item changed since it was read
    sketch_throttled: int = 0  # ... refused for an item's or a partition's write limit
    sketch_write_units: int = 0  # write units of sketch writes, failed conditions included


@dataclass(frozen=True)
class Write:
    """One action of a transaction: the item, and what it does to it."""

    key: Key
    delta: int | None  # ADD to the count; None for the marker's Put
    image: dict[str, dict[str, str]]  # the item as written when it does not exist yet


class SimulatedTable:
    """TransactWriteItems on the counts table, as far as conflicts, limits and write units go.

    It keeps each item's count and size (by DynamoDB's rules, ``bench.cost``),
    when each item's lock ends, and a token bucket per item and per partition.
    """

    def __init__(self, latency: Latency = Latency(), limits: Limits = Limits(), rng: random.Random | None = None) -> None:
        self.latency, self.limits = latency, limits
        self.rng = rng or random.Random(0)
        self.counts: dict[Key, int] = {}
        self.sizes: dict[Key, int] = {}
        self.locked_until: dict[Key, float] = {}
        self.item_capacity: dict[Key, TokenBucket] = {}
        self.partition_capacity: dict[str, TokenBucket] = {}
        self.stats = TableStats()
        self._parsed: dict[int, tuple[Sequence[dict[str, Any]], list[Write]]] = {}
        self.sketches: dict[Key, bytes] = {}  # sketch items' stored bytes

    def transact(self, now: float, transact_items: Sequence[dict[str, Any]]) -> tuple[float, list[str] | None]:
        """Start a transaction at ``now``: when its answer arrives, and its CancellationReasons codes (None: committed)."""
        self.stats.attempts += 1
        writes = self._writes(transact_items)
        locked_until, sizes = self.locked_until, self.sizes
        codes = ["TransactionConflict" if locked_until.get(write.key, -1.0) > now else "None" for write in writes]
        if "TransactionConflict" in codes:
            self.stats.conflicts += 1
            return now + self.latency.cancel_seconds(self.rng), codes
        if any(write.delta is None and write.key in sizes for write in writes):
            self.stats.duplicates += 1
            self._parsed.pop(id(transact_items), None)
            codes = ["ConditionalCheckFailed" if w.delta is None and w.key in sizes else "None" for w in writes]
            return now + self.latency.cancel_seconds(self.rng), codes
        after = [self._size_after(write) for write in writes]
        units = [write_units(max(sizes.get(write.key, 0), size), transactional=True) for write, size in zip(writes, after)]
        by_partition: Counter[str] = Counter()
        for write, cost in zip(writes, units):
            by_partition[write.key[0]] += cost
        for index, (write, cost) in enumerate(zip(writes, units)):
            if (
                self._item_bucket(write.key).available(now) < cost
                or self._partition_bucket(write.key[0]).available(now) < by_partition[write.key[0]]
            ):
                codes[index] = "ThrottlingError"
        if "ThrottlingError" in codes:
            self.stats.throttled += 1
            return now + self.latency.cancel_seconds(self.rng), codes
        for partition, cost in by_partition.items():
            self._partition_bucket(partition).take(now, cost)
        done = now + self.latency.lock_seconds(self.rng, len(writes))
        for write, size, cost in zip(writes, after, units):
            self._item_bucket(write.key).take(now, cost)
            if write.delta is not None:
                self.counts[write.key] = self.counts.get(write.key, 0) + write.delta
            sizes[write.key] = size
            locked_until[write.key] = done
        self.stats.transactions += 1
        self.stats.write_units += sum(units)
        self.stats.item_writes += len(writes)
        self._parsed.pop(id(transact_items), None)
        return done, None

    def read_sketches(self, now: float, keys: Sequence[Key]) -> tuple[float, dict[Key, bytes | None]]:
        """A strongly consistent BatchGetItem of sketch items: when it answers, and what they hold now."""
        self.stats.sketch_reads += len(keys)
        return now + self.latency.cancel_seconds(self.rng), {key: self.sketches.get(key) for key in keys}

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
                answer_at = max(answer_at, now + self.latency.cancel_seconds(self.rng))
                continue
            self._item_bucket(key).take(now, cost)
            self._partition_bucket(key[0]).take(now, cost)
            self.stats.sketch_write_units += cost
            self.stats.write_units += cost
            if held != (None if seen is None else seen["B"]):
                self.stats.sketch_conflicts += 1
                answers.append((SketchOutcome.CONFLICT, held))
                answer_at = max(answer_at, now + self.latency.cancel_seconds(self.rng))
                continue
            self.sketches[key], self.sizes[key] = merged, size_after
            self.stats.sketch_writes += 1
            self.stats.item_writes += 1
            answers.append((SketchOutcome.WRITTEN, None))
            answer_at = max(answer_at, now + self.latency.lock_seconds(self.rng, 1))
        return answer_at, answers

    def count(self, key: Key) -> int:
        return self.counts.get(key, 0)

    def _writes(self, transact_items: Sequence[dict[str, Any]]) -> list[Write]:
        """Parsed once per transaction, however often it is retried (kept until it commits or is a duplicate)."""
        cached = self._parsed.get(id(transact_items))
        if cached is not None and cached[0] is transact_items:
            return cached[1]
        writes = [_write(action) for action in transact_items]
        self._parsed[id(transact_items)] = (transact_items, writes)
        return writes

    def _size_after(self, write: Write) -> int:
        """The item's size after the write: a count's digits are all an ADD can change once the item exists."""
        before = self.sizes.get(write.key)
        if before is None or write.delta is None:
            return item_size(write.image)
        count = self.counts[write.key]
        return before - number_size(count) + number_size(count + write.delta)

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


def _sketch_item_size(key: Key, sketch: bytes) -> int:
    return item_size({"pk": {"S": key[0]}, "sk": {"S": key[1]}, "hll": {"B": sketch}, "ttl": {"N": "1795600000"}})


def _write(action: dict[str, Any]) -> Write:
    [(kind, request)] = action.items()
    if kind == "Put" and request.get("ConditionExpression") == "attribute_not_exists(#pk)":
        item = request["Item"]
        return Write((item["pk"]["S"], item["sk"]["S"]), None, dict(item))
    if kind == "Update" and request["UpdateExpression"] == "ADD #count :delta SET #ttl = if_not_exists(#ttl, :ttl)":
        key, values = request["Key"], request["ExpressionAttributeValues"]
        delta = int(values[":delta"]["N"])
        return Write((key["pk"]["S"], key["sk"]["S"]), delta, {**key, "count": values[":delta"], "ttl": values[":ttl"]})
    raise ValueError(f"the model only runs tally's own writes, not {kind} {request.get('UpdateExpression')!r}")


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
        names = [HOT_COUNTER] + [f"counter-{rank:05d}" for rank in range(1, self.tail + 1)]
        tail_weights = [rank ** -self.zipf_exponent for rank in range(1, self.tail + 1)]
        scale = (1 - self.hot_share) / sum(tail_weights)
        cumulative = list(itertools.accumulate([self.hot_share] + [w * scale for w in tail_weights]))

        def choose(rng: random.Random, n: int) -> list[str]:
            return rng.choices(names, cum_weights=cumulative, k=n)

        return choose


DEFAULT_MIX = CounterMix("one hot counter (30 %) + Zipf tail of 10,000", hot_share=0.3, tail=10_000)
TAIL_ONLY_MIX = CounterMix("Zipf tail of 10,000, no hot counter", hot_share=0.0, tail=10_000)


@dataclass(frozen=True)
class Scenario:
    shards: int
    events_per_second: float  # the whole stream's rate
    windows: int = 3
    mix: CounterMix = DEFAULT_MIX
    lateness_mean_ms: float = 500.0  # events reach the stream this long after their time, on average
    seed: int = 14
    distinct: bool = False  # a distinct rule counts the visitors of the hot counter (one of VISITORS each event)


VISITORS = 1_000_000


_PLACEMENT = Settings()  # default retentions: the model's events are at most seconds late


def shard_windows(scenario: Scenario) -> Iterator[tuple[int, int, list[CounterEvent]]]:
    """(shard, window, its events in stream order): events spread evenly over shards, as random event ids are."""
    rng = random.Random(scenario.seed)
    choose = scenario.mix.chooser()
    per_shard_window = scenario.events_per_second * WINDOW_SECONDS / scenario.shards
    window_ms = WINDOW_SECONDS * 1000
    for window in range(scenario.windows):
        start = START_MS + window * window_ms
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


def fold(events: list[CounterEvent]) -> list[Segment]:
    """tally's fold of one window: the segments it closed early, then the one the window's end closes."""
    folder = SegmentFolder()
    segments = list(folder.fold([event] for event in events))  # each event is its record's only outcome
    last = folder.close()
    return segments + ([last] if last is not None else [])


# --- commit configurations ---------------------------------------------------------------------


@dataclass(frozen=True)
class CommitConfig:
    """What a deployment chooses about commits: how many lanes per bucket, and the retry schedule."""

    name: str
    bucket_lanes: int
    schedule: Callable[[], Backoff]


BEFORE = CommitConfig("one item per bucket, 8 tries within 6.4 s of pauses", 1, Backoff)
RETRIES_ONLY = CommitConfig("one item per bucket, commit schedule (25 tries within 21 s)", 1, commit_backoff)


def lanes_for(shards: int) -> int:
    """The lanes the README recommends: about 125 shards per lane (a bucket takes ~80 transactions/s)."""
    return min(MAX_BUCKET_LANES, math.ceil(shards / 125))


def after(shards: int) -> CommitConfig:
    lanes = lanes_for(shards)
    return CommitConfig(f"{lanes} lane{'s' if lanes > 1 else ''} per bucket, commit schedule", lanes, commit_backoff)


Step = CommitStep | SketchStep


def window_commit(
    segments: list[Segment],
    source: str,
    settings: Settings,
    backoff: Callable[[], Backoff],
    merge_backoff: Callable[[], Backoff] = sketch_backoff,
) -> Generator[Step, Any, CommitResult]:
    """What the final invocation of a window does: commit its segments in order, each segment's counts and then
    its sketches (CountsTable.commit, step by step)."""
    transactions = duplicates = retries = 0
    lane = lane_of(source, settings.bucket_lanes)
    for segment in segments:
        result = yield from commit_steps(segment, source, TABLE, settings, backoff)
        transactions += result.transactions
        duplicates += result.duplicates
        retries += result.retries
        yield from sketch_steps(segment, lane, TABLE, settings, merge_backoff)
    return CommitResult(transactions, duplicates, retries)


# --- the simulation -----------------------------------------------------------------------------


@dataclass
class Invocation:
    shard: int
    window: int
    started: float
    steps: Generator[Step, Any, CommitResult]


@dataclass
class ShardState:
    source: str
    backoff: Callable[[], Backoff]
    merge_backoff: Callable[[], Backoff]
    pending: list[tuple[int, list[Segment]]] = field(default_factory=list)
    busy: bool = False


@dataclass
class RunStats:
    events: int = 0
    retries: int = 0
    failed_retries_exhausted: int = 0
    failed_timeout: int = 0
    commit_seconds: list[float] = field(default_factory=list)  # per shard and window, from the window's end
    all_shards_seconds: list[float] = field(default_factory=list)  # per window: its last shard


class Simulation:
    """Every shard's final invocation of every window, stepped through one event queue."""

    def __init__(
        self,
        scenario: Scenario,
        table: SimulatedTable,
        config: CommitConfig,
        invoke_delay_mean_seconds: float = 0.2,
    ) -> None:
        self.scenario, self.table = scenario, table
        self.settings = Settings(counts_table=TABLE, bucket_lanes=config.bucket_lanes)
        self.rng = random.Random(scenario.seed + 1)
        self.invoke_delay_mean_seconds = invoke_delay_mean_seconds
        self.queue: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self.order = itertools.count()
        self.stats = RunStats()
        self.expected: Counter[Key] = Counter()
        self.expected_sketches: dict[Key, Sketch] = {}
        self.done_at: dict[tuple[int, int], float] = {}
        self.minute_keys: dict[int, str] = {}
        self.shards = [
            ShardState(
                source_id(STREAM_ARN, f"shardId-{shard:08d}"),
                _seeded(config.schedule, scenario.seed, shard),
                _seeded(sketch_backoff, scenario.seed + 1, shard),
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
        for shard, window, events in shard_windows(self.scenario):
            self.stats.events += len(events)
            for event in events:
                self.expected[(event.counter, self._minute_key(event.event_ms // MINUTE_MS))] += 1
                if event.hashed is not None:
                    for bucket in counted_buckets(event.event_ms, event.arrival_ms, _PLACEMENT):
                        self.expected_sketches.setdefault((event.counter, bucket.sort_key), Sketch()).add(event.hashed)
            segments = fold(events)
            if segments:
                window_end = (window + 1) * WINDOW_SECONDS
                self._at(window_end + self.rng.expovariate(1 / self.invoke_delay_mean_seconds), self._arrive, shard, window, segments)
        while self.queue:
            now, _, action, arguments = heapq.heappop(self.queue)
            action(now, *arguments)
        self._check_exact()
        for window in range(self.scenario.windows):
            ends = [t for (_, w), t in self.done_at.items() if w == window]
            if ends:
                self.stats.all_shards_seconds.append(max(ends))
        return self.stats

    def _minute_key(self, minute: int) -> str:
        key = self.minute_keys.get(minute)
        if key is None:
            key = self.minute_keys[minute] = Bucket("M", minute).sort_key
        return key

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
        steps = window_commit(segments, state.source, self.settings, state.backoff, state.merge_backoff)
        self._step(now, Invocation(shard, window, now, steps), None)

    def _step(self, now: float, invocation: Invocation, reply: Any) -> None:
        if now - invocation.started > FUNCTION_TIMEOUT_SECONDS:
            self.stats.failed_timeout += 1
            self._retry(invocation.started + FUNCTION_TIMEOUT_SECONDS, invocation)
            return
        try:
            step = invocation.steps.send(reply)
        except StopIteration:
            self._finished(now, invocation)
            return
        except RetriesExhausted:
            self.stats.failed_retries_exhausted += 1
            self._retry(now, invocation)
            return
        if isinstance(step, Attempt):
            answer_at, codes = self.table.transact(now, step.items)
            outcome = Outcome.COMMITTED if codes is None else classify_cancellation([{"Code": code} for code in codes])
            if outcome is Outcome.FAIL:
                raise AssertionError(f"the model refused tally's transaction: {codes}")
            self.stats.retries += outcome is Outcome.RETRY
            self._at(answer_at, self._step, invocation, outcome)
        elif isinstance(step, ReadSketches):
            answer_at, stored = self.table.read_sketches(now, step.keys)
            self._at(answer_at, self._step, invocation, stored)
        elif isinstance(step, WriteSketches):
            answer_at, answers = self.table.write_sketches(now, step.writes)
            self._at(answer_at, self._step, invocation, answers)
        else:
            self._at(now + step.seconds, self._step, invocation, None)

    def _retry(self, failed_at: float, invocation: Invocation) -> None:
        """Lambda retries the failed invocation with the same records; committed parts are found by their markers.

        The shard stays busy meanwhile: its next window waits for this one, as Lambda keeps a shard in order.
        """
        self._at(failed_at + LAMBDA_RETRY_DELAY_SECONDS, lambda now, shard: self._invoke(now, shard), invocation.shard)

    def _finished(self, now: float, invocation: Invocation) -> None:
        state = self.shards[invocation.shard]
        window_end = (invocation.window + 1) * WINDOW_SECONDS
        self.stats.commit_seconds.append(now - window_end)
        self.done_at[(invocation.shard, invocation.window)] = now - window_end
        state.pending.pop(0)
        state.busy = False
        if state.pending:
            self._invoke(now, invocation.shard)

    def _check_exact(self) -> None:
        """Every minute bucket the model stored holds exactly the events generated in it."""
        stored: Counter[Key] = Counter()
        for (pk, sk), count in self.table.counts.items():
            if sk.startswith("M#"):
                stored[(pk, bucket_sort_key(sk))] += count
        if stored != self.expected:
            lost = sum((self.expected - stored).values())
            doubled = sum((stored - self.expected).values())
            raise AssertionError(f"the model lost {lost} and doubled {doubled} of {self.stats.events} events")
        sketches: dict[Key, Sketch] = {}
        for (pk, sk), data in self.table.sketches.items():
            sketches.setdefault((pk, bucket_sort_key(sk)), Sketch()).merge(Sketch.from_bytes(data))
        if sketches != self.expected_sketches:
            raise AssertionError(f"{sum(sketches.get(k) != s for k, s in self.expected_sketches.items())} sketches differ")


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


def measure(
    scenario: Scenario, config: CommitConfig, latency: Latency = Latency(), limits: Limits = Limits()
) -> dict[str, Any]:
    table = SimulatedTable(latency, limits, random.Random(scenario.seed + 2))
    stats = Simulation(scenario, table, config).run()
    t = table.stats
    return {
        "shards": scenario.shards,
        "configuration": config.name,
        "bucket_lanes": config.bucket_lanes,
        "events_per_second": scenario.events_per_second,
        "windows": scenario.windows,
        "events": stats.events,
        "transactions": t.transactions,
        "attempts": t.attempts,
        "conflicts": t.conflicts,
        "throttled": t.throttled,
        "retries": stats.retries,
        "duplicates": t.duplicates,
        "write_units": t.write_units,
        "write_units_per_1000_events": round(t.write_units * 1000 / max(1, stats.events), 1),
        "p50_commit_seconds": round(percentile(stats.commit_seconds, 0.50), 2),
        "p99_commit_seconds": round(percentile(stats.commit_seconds, 0.99), 2),
        "all_shards_committed_seconds": round(max(stats.all_shards_seconds, default=0.0), 2),
        "failed_invocations": stats.failed_retries_exhausted + stats.failed_timeout,
        "failed_retries_exhausted": stats.failed_retries_exhausted,
        "failed_timeout": stats.failed_timeout,
        "exact": True,  # run() raises otherwise
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
    }


# --- the bench ----------------------------------------------------------------------------------

SHARD_COUNTS = (1, 10, 100, 1000)
EVENTS_PER_SHARD_SECOND = 5.0  # the stream's rate grows with its shards
FIXED_EVENTS_PER_SECOND = 5000.0  # the 1,000-shard rate, spread over fewer shards
_FIGURES = (
    "transactions", "conflicts", "throttled", "retries", "write_units_per_1000_events",
    "p50_commit_seconds", "p99_commit_seconds", "all_shards_committed_seconds", "failed_invocations",
)


def origin_write_units_per_event() -> int:
    """The origin's two plain UpdateItems per event, each on an item well under 1 KB."""
    item = {"id": {"S": "counter-00001_minute_29923800"}, "count": {"N": "1000000"}, "ttl": {"N": "1795600000"}}
    return 2 * write_units(item_size(item))


def results() -> dict[str, Any]:
    """Every figure of the scale model, for bench/results.json."""
    growing = []
    for shards in SHARD_COUNTS:
        scenario = Scenario(shards=shards, events_per_second=EVENTS_PER_SHARD_SECOND * shards, windows=2)
        fixed = measure(scenario, after(shards))
        before = measure(scenario, BEFORE)
        growing.append({**fixed, "before": {name: before[name] for name in ("configuration", "bucket_lanes", *_FIGURES)}})
    at_1000 = Scenario(shards=1000, events_per_second=EVENTS_PER_SHARD_SECOND * 1000, windows=1)
    halves = [
        measure(at_1000, RETRIES_ONLY),
        measure(at_1000, CommitConfig("8 lanes per bucket, 8 tries within 6.4 s of pauses", 8, Backoff)),
    ]
    origin = origin_write_units_per_event() * 1000
    fixed_rate = []
    for mix in (DEFAULT_MIX, TAIL_ONLY_MIX):
        for shards in SHARD_COUNTS:
            run = measure(Scenario(shards=shards, events_per_second=FIXED_EVENTS_PER_SECOND, windows=1, mix=mix), after(shards))
            fixed_rate.append(
                {
                    "mix": mix.name,
                    "shards": shards,
                    "events_per_second": FIXED_EVENTS_PER_SECOND,
                    "write_units_per_1000_events": run["write_units_per_1000_events"],
                    "origin_write_units_per_1000_events": origin,
                    "origin_over_tally": round(origin / run["write_units_per_1000_events"], 2),
                    "transactions": run["transactions"],
                    "failed_invocations": run["failed_invocations"],
                }
            )
    return {"scale": growing, "scale_one_mitigation_at_1000_shards": halves, "scale_fixed_rate": fixed_rate}


DISTINCT_SHARD_COUNTS = (100, 1000)


def distinct_results() -> dict[str, Any]:
    """A distinct rule on the hot counter: one item per bucket, the lanes the README recommends, and twice those."""
    runs = []
    for shards in DISTINCT_SHARD_COUNTS:
        scenario = Scenario(shards=shards, events_per_second=EVENTS_PER_SHARD_SECOND * shards, windows=2, distinct=True)
        doubled = min(MAX_BUCKET_LANES, 2 * lanes_for(shards))
        configs = (RETRIES_ONLY, after(shards), CommitConfig(f"{doubled} lanes per bucket, commit schedule", doubled, commit_backoff))
        for config in {config.bucket_lanes: config for config in configs}.values():  # each lane count once
            runs.append(measure(scenario, config))
    return {"scale_distinct": runs}


def model_description() -> dict[str, Any]:
    latency, limits = Latency(), Limits()
    return {
        "window_seconds": WINDOW_SECONDS,
        "events_per_shard_second": EVENTS_PER_SHARD_SECOND,
        "mix": DEFAULT_MIX.name,
        "lock_median_ms": f"{latency.lock_median_seconds * 1000:g} + {latency.lock_seconds_per_item * 1000:g} per item",
        "lock_sigma": latency.lock_sigma,
        "item_and_partition_write_units_per_second": [limits.item_write_units_per_second, limits.partition_write_units_per_second],
        "function_timeout_seconds": FUNCTION_TIMEOUT_SECONDS,
    }
