"""The benchmark's workloads, as the stream delivers them: Lambda-shaped records in stream order.

Every record reaches the stream at its own event time
(ApproximateCreationDateTime = event time, whole seconds as DynamoDB reports
it), so tumbling windows cut the events as they would in production, except
in the backfill, where a month of history reaches the stream at once. Records
are built directly as Lambda's JSON, in chunks, so the 600,000 records of the
hot counter never sit in memory at once.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import itertools
import json
import math
import random
import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from bench import origin
from tally.core.buckets import counted_buckets
from tally.core.settings import Settings
from tally.core.units import DAY_MS
from tally.local.workload import JOB_RULES, Change, Event as JobEvent, job_history, job_truth

STREAM_ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/tally-events/stream/2026-11-22T00:00:00.000"
SHARD_ID = "shardId-00000001795000000000-bench000"
START_MS = 1_795_046_400_000  # 2026-11-19T19:00Z, an hour boundary
CHUNK = 10_000

Event = tuple[str, int]  # (counter, event time in epoch ms)


def at_event_time(index: int, event_ms: int) -> int:
    """Arrival of the index-th event: live traffic reaches the stream as it happens."""
    return event_ms


def classic_image(counter: str, event_ms: int, item_id: str, sequence: int) -> dict[str, Any]:
    return {"id": {"S": item_id}, "counter": {"S": counter}, "ts": {"N": str(event_ms)}}


def classic_counters(image: Mapping[str, Any]) -> list[tuple[str, str | None]]:
    return [(image["counter"]["S"], None)]


@dataclass(frozen=True)
class Workload:
    """Events as (key, time); ``image`` makes each an item, ``rules`` (TALLY_RULES) count it in tally,
    and ``counters`` restates those rules for the origin and the floor: (counter, amount or None) per item."""

    name: str
    description: str
    events: Callable[[], Iterator[Event]]  # a fresh, identical iteration each call
    total: int
    rules: str | None = None
    time_attribute: str = "ts"
    image: Callable[[str, int, str, int], dict[str, Any]] = classic_image
    counters: Callable[[Mapping[str, Any]], list[tuple[str, str | None]]] = classic_counters

    arrival: Callable[[int, int], int] = at_event_time  # (index, event ms) -> when its record reaches the stream
    time_attribute: str = "insertUtcTime"  # of the items rules count (the classic workloads use "ts")
    # For the origin, counting every record its way: (counter prefix, epoch seconds, amount or None) per counter.
    origin_counted: Callable[[Mapping[str, Any]], list[tuple[str, int, str | None]]] | None = None

    def chunks(self, size: int = CHUNK) -> Iterator[list[dict]]:
        """The stream records, in stream order, ``size`` at a time."""
        return record_chunks(self.events(), size, self.image, self.arrival)

    def counted(self) -> Iterator[Event]:
        """Every (counter, time) the events add to: one per rule that counts an item."""
        for counter, event_ms, _ in self.counted_arrivals():
            yield counter, event_ms

    def counted_arrivals(self) -> Iterator[tuple[str, int, int]]:
        """Every (counter, time, arrival of its record) the events add to."""
        for sequence, (key, event_ms) in enumerate(self.events()):
            arrival = self.arrival(sequence, event_ms)
            for counter, _ in self.counters(self.image(key, event_ms, f"e-{sequence}", sequence)):
                yield counter, event_ms, arrival


def origin_mock(hours: int = 37) -> Workload:
    total = sum(1 for _ in origin.mock_events(START_MS, hours=hours))
    return Workload(
        "origin mock",
        f"3 counters, {hours} h, 20-100 events/h at random times (seed 2019)",
        lambda: origin.mock_events(START_MS, hours=hours),
        total,
    )


def steady(counters: int = 100, per_second: int = 200, seconds: int = 600, seed: int = 7) -> Workload:
    def events() -> Iterator[Event]:
        rng = random.Random(seed)
        names = [f"counter-{index:03d}" for index in range(counters)]
        for index in range(per_second * seconds):
            yield rng.choice(names), START_MS + index * 1000 // per_second

    return Workload(
        "steady",
        f"{counters} counters, {per_second} events/s for {seconds // 60} min",
        events,
        per_second * seconds,
    )


def hot(per_second: int = 2000, seconds: int = 300) -> Workload:
    def events() -> Iterator[Event]:
        for index in range(per_second * seconds):
            yield "hot-counter", START_MS + index * 1000 // per_second

    return Workload("hot counter", f"1 counter, {per_second} events/s for {seconds // 60} min", events, per_second * seconds)


# The classic rule restated, counting the distinct visitors of every counter besides its events.
DISTINCT_RULES = json.dumps([{"name": "visits", "counter": "{counter}", "distinct": "visitor"}])
VISITORS = 100_000  # the population visitors are drawn from


def visit_image(counter: str, event_ms: int, item_id: str, sequence: int) -> dict[str, Any]:
    """An event of a counter with the visitor it came from: drawn from VISITORS by sequence, scrambled."""
    return {**classic_image(counter, event_ms, item_id, sequence), "visitor": {"S": f"v-{sequence * 7_919 % VISITORS}"}}


def with_distinct(workload: Workload) -> Workload:
    """The same events, each naming its visitor, counted with a distinct rule beside the count."""
    return dataclasses.replace(
        workload,
        name=f"{workload.name} + distinct",
        description=f"{workload.description}, distinct visitors of {VISITORS:,}",
        rules=DISTINCT_RULES,
        image=visit_image,
        time_attribute="ts",
    )


def fan_out_rules(histogram: bool = False) -> str:
    """Jobs as the origin's table holds them, counted three ways: per provider, in all, and revenue of done jobs
    (with ``histogram``, the per-provider rule also keeps the distribution of job durations, for quantiles)."""
    jobs: dict[str, Any] = {"name": "jobs", "counter": "jobs/{providerId}"}
    if histogram:
        jobs["histogram"] = "durationMs"
    revenue = {"name": "revenue", "counter": "revenue/{providerId}", "when": {"status": {"equals": "done"}}, "sum": "amount"}
    return json.dumps([jobs, {"name": "jobs-all", "counter": "jobs/all"}, revenue])


_DURATION_STEPS = 10_007  # a prime: job durations run through its quantiles in a scrambled order
_NORMAL = statistics.NormalDist()


def job_duration_ms(sequence: int) -> int:
    """Log-normal job durations, median 800 ms and σ 1 (most between 100 ms and 6 s), deterministic by sequence."""
    z = _NORMAL.inv_cdf((sequence * 7_919 % _DURATION_STEPS + 0.5) / _DURATION_STEPS)
    return max(1, round(800 * math.exp(z)))


def job_image(provider: str, event_ms: int, item_id: str, sequence: int) -> dict[str, Any]:
    """Seven jobs in ten are done; amounts run through 0.00-99.99 by sequence; durations are log-normal."""
    status = "done" if sequence % 10 < 7 else "failed"
    return {
        "id": {"S": item_id},
        "insertUtcTime": {"N": str(event_ms)},
        "counterKeyPrefix": {"S": "jobs"},
        "providerId": {"S": provider},
        "status": {"S": status},
        "amount": {"N": f"{sequence % 100}.{sequence * 7 % 100:02d}"},
        "durationMs": {"N": str(job_duration_ms(sequence))},
    }


def job_counters(image: Mapping[str, Any]) -> list[tuple[str, str | None]]:
    provider = image["providerId"]["S"]
    counters: list[tuple[str, str | None]] = [(f"jobs/{provider}", None), ("jobs/all", None)]
    if image["status"]["S"] == "done":
        counters.append((f"revenue/{provider}", image["amount"]["N"]))
    return counters


def fan_out(
    providers: int = 100, per_second: int = 200, seconds: int = 600, seed: int = 7, histogram: bool = False
) -> Workload:
    base = steady(providers, per_second, seconds, seed)
    duration = f"{seconds // 60} min" if seconds < 2 * 3600 else f"{seconds // 3600} h"
    return Workload(
        "fan-out + histogram" if histogram else "fan-out",
        f"{providers} providers, {per_second} jobs/s for {duration}, 3 rules per job (one summing"
        + (", with a histogram)" if histogram else ")"),
        base.events,
        base.total,
        rules=fan_out_rules(histogram),
        time_attribute="insertUtcTime",
        image=job_image,
        counters=job_counters,
    )


PAGES = 10_000  # the pages a per-page rule names its counters after


@functools.cache
def _page_weights(pages: int) -> list[float]:
    """Cumulative Zipf (s = 1) weights of ``pages`` pages, for drawing one by a uniform number."""
    return list(itertools.accumulate(1 / rank for rank in range(1, pages + 1)))


def page_of(sequence: int, pages: int = PAGES) -> str:
    """The page a job's visit came from: Zipf over ``pages``, drawn from its sequence (scrambled, reproducible)."""
    weights = _page_weights(pages)
    draw = (sequence * 2_654_435_761 % 2**32 + 0.5) / 2**32 * weights[-1]
    return f"p{bisect.bisect_left(weights, draw):05d}"


def page_job_image(provider: str, event_ms: int, item_id: str, sequence: int) -> dict[str, Any]:
    """A job as ``job_image`` makes it, with the page it was booked from."""
    return {**job_image(provider, event_ms, item_id, sequence), "page": {"S": page_of(sequence)}}


def page_job_counters(image: Mapping[str, Any]) -> list[tuple[str, str | None]]:
    return [*job_counters(image), (f"views/{image['page']['S']}", None)]


def fan_out_pages(providers: int = 100, per_second: int = 200, seconds: int = 600, seed: int = 7) -> Workload:
    """The fan-out with a per-page rule besides its three: ``views/{page}``, 10,000 pages read Zipf-like, the
    counters a top N ranks."""
    base = fan_out(providers, per_second, seconds, seed)
    rules = json.loads(fan_out_rules()) + [{"name": "views", "counter": "views/{page}"}]
    return dataclasses.replace(
        base,
        name="fan-out + per-page rule",
        description=f"{base.description}; a 4th rule counts views/{{page}}, {PAGES:,} pages (Zipf)",
        rules=json.dumps(rules),
        image=page_job_image,
        counters=page_job_counters,
    )


def backfill(counters: int = 10, days: int = 30, total: int = 100_000, per_second: int = 1000, seed: int = 30) -> Workload:
    """A month of history written at once (a replay, a queue draining after an outage), oldest first."""
    arrives_from = START_MS + days * DAY_MS

    def events() -> Iterator[Event]:
        rng = random.Random(seed)
        names = [f"counter-{index:02d}" for index in range(counters)]
        times = sorted(rng.randrange(START_MS, arrives_from) for _ in range(total))
        for event_ms in times:
            yield rng.choice(names), event_ms

    def arrival(index: int, event_ms: int) -> int:
        return arrives_from + index * 1000 // per_second

    return Workload(
        "backfill",
        f"{counters} counters, {days} days of history written at {per_second} events/s",
        events,
        total,
        arrival=arrival,
    )


CALENDAR_START_MS = 1_789_862_400_000  # 2026-09-20T00:00Z: October and November whole, New York's DST end between
# How late a calendar workload's records reach the stream: (share, least, most) in ms; the rest within seconds.
CALENDAR_LATENESS = ((0.05, 60_000, 30 * 60_000), (0.01, 25 * 3_600_000, 10 * DAY_MS))


def calendar(counters: int = 200, days: int = 75, total: int = 100_000, seed: int = 75) -> Workload:
    """A season of traffic for day and month buckets: ``counters`` counters (Zipf popularity, the busiest about
    a sixth of the events, the quietest a few a day), events spread over ``days`` days from 2026-09-20; 94 % reach
    the stream within 5 seconds, 5 % 1-30 minutes late, 1 % 25 hours to 10 days late (late for the long rungs:
    they add to their days and months directly). In stream order, by arrival."""
    weights = list(itertools.accumulate(1 / rank for rank in range(1, counters + 1)))
    names = [f"shop-{index:03d}/orders" for index in range(counters)]

    @functools.cache
    def timeline() -> tuple[tuple[tuple[str, int], ...], tuple[int, ...]]:
        rng = random.Random(seed)
        drawn = []
        for _ in range(total):
            name = names[bisect.bisect_left(weights, rng.random() * weights[-1])]
            event_ms = CALENDAR_START_MS + rng.randrange(days * DAY_MS)
            draw, delay = rng.random(), rng.randrange(5_000)
            for share, least, most in CALENDAR_LATENESS:
                if draw < share:
                    delay = rng.randrange(least, most)
                    break
                draw -= share
            drawn.append((event_ms + delay, event_ms, name))
        drawn.sort()
        return tuple((name, event_ms) for _, event_ms, name in drawn), tuple(arrival for arrival, _, _ in drawn)

    def events() -> Iterator[Event]:
        return iter(timeline()[0])

    def arrival(index: int, event_ms: int) -> int:
        return timeline()[1][index]

    return Workload(
        "calendar",
        f"{counters} counters (Zipf), {days} days from 2026-09-20, {total:,} events: 94 % on time, 5 % 1-30 min late, "
        "1 % 1-10 days late",
        events,
        total,
        arrival=arrival,
    )


@dataclass(frozen=True)
class ChangeWorkload(Workload):
    """Items that change: ``changes`` gives (arrival ms, change) in stream order, a fresh iteration each call;
    ``truth`` restates the rules for the floor and the origin: (counter, event ms, amount) per counter."""

    changes: Callable[[], Iterator[tuple[int, Change]]] = lambda: iter(())
    truth: Callable[[Change, int], list[tuple[str, int, Decimal | None]]] = job_truth

    def chunks(self, size: int = CHUNK) -> Iterator[list[dict]]:
        numbered = enumerate(self.changes())
        while chunk := [change_record(change, arrival, sequence) for sequence, (arrival, change) in itertools.islice(numbered, size)]:
            yield chunk

    def counted_arrivals(self) -> Iterator[tuple[str, int, int]]:
        for arrival, change in self.changes():
            for counter, event_ms, _ in self.truth(change, arrival):
                yield counter, event_ms, arrival


TTL_IDENTITY = {"type": "Service", "principalId": "dynamodb.amazonaws.com"}


def _attribute(value: Any) -> dict[str, str]:
    """A job's attribute in DynamoDB JSON: its values are strings and numbers only (boto3's serializer is
    several times slower, and the benchmark builds hundreds of thousands of images)."""
    return {"S": value} if isinstance(value, str) else {"N": str(value)}


def _value(attribute: Mapping[str, str]) -> Any:
    ((tag, text),) = attribute.items()
    return text if tag == "S" else (int(text) if text.isdigit() else Decimal(text))


def change_record(change: Change, arrival_ms: int, sequence: int) -> dict:
    """The record a table streaming NEW_AND_OLD_IMAGES makes of one change, as Lambda hands it over."""
    stream: dict[str, Any] = {
        "ApproximateCreationDateTime": arrival_ms // 1000,
        "Keys": {"id": {"S": change.key["id"]}},
        "SequenceNumber": str(100_000_000_000_000_000_000 + sequence),
        "SizeBytes": 240,
        "StreamViewType": "NEW_AND_OLD_IMAGES",
    }
    for name, image in (("NewImage", change.new), ("OldImage", change.old)):
        if image is not None:
            stream[name] = {key: _attribute(value) for key, value in image.items()}
    record = {
        "eventID": f"{sequence:032x}",
        "eventName": change.kind,
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "dynamodb": stream,
        "eventSourceARN": STREAM_ARN,
    }
    if change.by_ttl:
        record["userIdentity"] = TTL_IDENTITY
    return record


def change_of(record: Mapping[str, Any]) -> tuple[Change, int]:
    """A change and its arrival (ms), read back from its stream record."""
    stream = record["dynamodb"]
    images = [
        {key: _value(value) for key, value in stream[name].items()} if name in stream else None
        for name in ("NewImage", "OldImage")
    ]
    by_ttl = record.get("userIdentity") == TTL_IDENTITY
    return Change(record["eventName"], images[0], images[1], 0, by_ttl), int(stream["ApproximateCreationDateTime"]) * 1000


def origin_job_counters(record: Mapping[str, Any]) -> list[tuple[str, int, str | None]]:
    """What the jobs' rules count for one record, for the origin to count its way: two updates per counter."""
    change, arrival = change_of(record)
    return [(counter, event_ms // 1000, None if amount is None else str(amount)) for counter, event_ms, amount in job_truth(change, arrival)]


def transitions(
    providers: int = 100, per_second: int = 200, seconds: int = 300, ttl_minutes: int = 120, seed: int = 7
) -> ChangeWorkload:
    """Jobs placed at a steady rate, then done or cancelled minutes later (a few reopened, some deleted by
    their owner); those left expire ``ttl_minutes`` after placement and DynamoDB's TTL deletes them up
    to 10 minutes later. Counted by the demo's job rules: placements, transitions, deletions."""
    base = steady(providers, per_second, seconds, seed)
    horizon = START_MS + seconds * 1000 + (ttl_minutes + 10) * 60_000

    def changes() -> Iterator[tuple[int, Change]]:
        rng = random.Random(seed)
        arrivals = []
        for index, (provider, placed_ms) in enumerate(base.events()):
            event = JobEvent(f"job-{index}", provider, placed_ms)
            for change in job_history(event, rng, horizon, ttl_seconds=ttl_minutes * 60):
                arrival = change.at_ms + (rng.randrange(600_000) if change.by_ttl else 0)
                arrivals.append((arrival, index, change))
        arrivals.sort(key=lambda entry: entry[:2])  # one job's changes keep their order
        for arrival, _, change in arrivals:
            yield arrival, change

    total = sum(1 for _ in changes())
    return ChangeWorkload(
        "transitions",
        f"{base.total:,} jobs ({providers} providers, {per_second}/s for {seconds // 60} min), then done, cancelled, "
        f"deleted or expired: {total:,} records, 5 rules",
        base.events,
        total,
        rules=json.dumps(list(JOB_RULES)),
        time_attribute="placedAt",
        origin_counted=origin_job_counters,
        changes=changes,
    )


def stream_record(
    counter: str, event_ms: int, sequence: int, image: Callable[..., dict] = classic_image, arrival_ms: int | None = None
) -> dict:
    """An INSERT of an event item, as Lambda hands it to the function."""
    item_id = f"e-{sequence}"
    return {
        "eventID": f"{sequence:032x}",
        "eventName": "INSERT",
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "dynamodb": {
            "ApproximateCreationDateTime": (event_ms if arrival_ms is None else arrival_ms) // 1000,
            "Keys": {"id": {"S": item_id}},
            "NewImage": image(counter, event_ms, item_id, sequence),
            "SequenceNumber": str(100_000_000_000_000_000_000 + sequence),
            "SizeBytes": 80,
            "StreamViewType": "NEW_IMAGE",
        },
        "eventSourceARN": STREAM_ARN,
    }


def record_chunks(
    events: Iterable[Event],
    size: int = CHUNK,
    image: Callable[..., dict] = classic_image,
    arrival: Callable[[int, int], int] = at_event_time,
) -> Iterator[list[dict]]:
    """Stream records of ``events``, numbered in order, ``size`` at a time."""
    numbered = enumerate(events)
    while chunk := [
        stream_record(counter, ms, sequence, image, arrival(sequence, ms))
        for sequence, (counter, ms) in itertools.islice(numbered, size)
    ]:
        yield chunk


def floor_writes(events: Iterable[tuple[str, int, int]], window_seconds: int, settings: Settings) -> int:
    """One write per distinct bucket item per tumbling window it is touched in.

    ``events`` are (counter, time, arrival). The bucket items are those an
    exact count needs: an event's minute and hour, or its hour alone once its
    minute is past the minute retention at arrival (no query reads it again).
    """
    touched = set()
    for counter, event_ms, arrival_ms in events:
        window = arrival_ms // 1000 // window_seconds
        for bucket in counted_buckets(event_ms, arrival_ms, settings):
            touched.add((counter, bucket, window))
    return len(touched)


def hour_only_events(workload: Workload, settings: Settings) -> int:
    """Counted events whose minute is past the minute retention when they reach the stream."""
    return sum(len(counted_buckets(ms, arrival, settings)) == 1 for _, ms, arrival in workload.counted_arrivals())


def busiest_item_per_second(events: Iterable[Event]) -> int:
    """Most events of one counter within one second: a write-per-event design's peak rate on its hour item."""
    per_second = Counter((counter, event_ms // 1000) for counter, event_ms in events)
    return max(per_second.values(), default=0)
