"""The benchmark's workloads, as the stream delivers them: Lambda-shaped records in stream order.

Every record reaches the stream at its own event time
(ApproximateCreationDateTime = event time, whole seconds as DynamoDB reports
it), so tumbling windows cut the events as they would in production. Records
are built directly as Lambda's JSON, in chunks, so the 600,000 records of the
hot counter never sit in memory at once.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from bench import origin
from tally.core.settings import HOUR_MS, MINUTE_MS

STREAM_ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/tally-events/stream/2026-11-22T00:00:00.000"
SHARD_ID = "shardId-00000001795000000000-bench000"
START_MS = 1_795_046_400_000  # 2026-11-19T19:00Z, an hour boundary
CHUNK = 10_000

Event = tuple[str, int]  # (counter, event time in epoch ms)


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    events: Callable[[], Iterator[Event]]  # a fresh, identical iteration each call
    total: int


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


def stream_record(counter: str, event_ms: int, sequence: int) -> dict:
    """An INSERT of an event item, as Lambda hands it to the function."""
    item_id = f"e-{sequence}"
    return {
        "eventID": f"{sequence:032x}",
        "eventName": "INSERT",
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "dynamodb": {
            "ApproximateCreationDateTime": event_ms // 1000,
            "Keys": {"id": {"S": item_id}},
            "NewImage": {"id": {"S": item_id}, "counter": {"S": counter}, "ts": {"N": str(event_ms)}},
            "SequenceNumber": str(100_000_000_000_000_000_000 + sequence),
            "SizeBytes": 80,
            "StreamViewType": "NEW_IMAGE",
        },
        "eventSourceARN": STREAM_ARN,
    }


def record_chunks(events: Iterable[Event], size: int = CHUNK) -> Iterator[list[dict]]:
    """Stream records of ``events``, numbered in order, ``size`` at a time."""
    numbered = enumerate(events)
    while chunk := [stream_record(counter, ms, sequence) for sequence, (counter, ms) in itertools.islice(numbered, size)]:
        yield chunk


def floor_writes(events: Iterable[Event], window_seconds: int) -> int:
    """One write per distinct bucket item per tumbling window it is touched in."""
    touched = set()
    for counter, event_ms in events:
        window = event_ms // 1000 // window_seconds
        touched.add((counter, "M", event_ms // MINUTE_MS, window))
        touched.add((counter, "H", event_ms // HOUR_MS, window))
    return len(touched)


def busiest_item_per_second(events: Iterable[Event]) -> int:
    """Most events of one counter within one second: a write-per-event design's peak rate on its hour item."""
    per_second = Counter((counter, event_ms // 1000) for counter, event_ms in events)
    return max(per_second.values(), default=0)
