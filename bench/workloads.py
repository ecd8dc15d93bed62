"""The benchmark's workloads, as the stream delivers them: Lambda-shaped records in stream order.

Every record reaches the stream at its own event time
(ApproximateCreationDateTime = event time, whole seconds as DynamoDB reports
it), so tumbling windows cut the events as they would in production. Records
are built directly as Lambda's JSON, in chunks, so the 600,000 records of the
hot counter never sit in memory at once.
"""

from __future__ import annotations

import itertools
import json
import random
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from bench import origin
from tally.core.settings import HOUR_MS, MINUTE_MS

STREAM_ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/tally-events/stream/2026-11-22T00:00:00.000"
SHARD_ID = "shardId-00000001795000000000-bench000"
START_MS = 1_795_046_400_000  # 2026-11-19T19:00Z, an hour boundary
CHUNK = 10_000

Event = tuple[str, int]  # (counter, event time in epoch ms)


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
    image: Callable[[str, int, str, int], dict[str, Any]] = classic_image
    counters: Callable[[Mapping[str, Any]], list[tuple[str, str | None]]] = classic_counters

    def counted(self) -> Iterator[Event]:
        """Every (counter, time) the events add to: one per rule that counts an item."""
        for sequence, (key, event_ms) in enumerate(self.events()):
            for counter, _ in self.counters(self.image(key, event_ms, f"e-{sequence}", sequence)):
                yield counter, event_ms


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


# Jobs as the origin's table holds them, counted three ways: per provider, in all, and revenue of done jobs.
FAN_OUT_RULES = json.dumps(
    [
        {"name": "jobs", "counter": "jobs/{providerId}"},
        {"name": "jobs-all", "counter": "jobs/all"},
        {"name": "revenue", "counter": "revenue/{providerId}", "when": {"status": {"equals": "done"}}, "sum": "amount"},
    ]
)


def job_image(provider: str, event_ms: int, item_id: str, sequence: int) -> dict[str, Any]:
    """Seven jobs in ten are done; amounts run through 0.00-99.99 by sequence."""
    status = "done" if sequence % 10 < 7 else "failed"
    return {
        "id": {"S": item_id},
        "insertUtcTime": {"N": str(event_ms)},
        "counterKeyPrefix": {"S": "jobs"},
        "providerId": {"S": provider},
        "status": {"S": status},
        "amount": {"N": f"{sequence % 100}.{sequence * 7 % 100:02d}"},
    }


def job_counters(image: Mapping[str, Any]) -> list[tuple[str, str | None]]:
    provider = image["providerId"]["S"]
    counters: list[tuple[str, str | None]] = [(f"jobs/{provider}", None), ("jobs/all", None)]
    if image["status"]["S"] == "done":
        counters.append((f"revenue/{provider}", image["amount"]["N"]))
    return counters


def fan_out(providers: int = 100, per_second: int = 200, seconds: int = 600, seed: int = 7) -> Workload:
    base = steady(providers, per_second, seconds, seed)
    return Workload(
        "fan-out",
        f"{providers} providers, {per_second} jobs/s for {seconds // 60} min, 3 rules per job (one summing)",
        base.events,
        base.total,
        rules=FAN_OUT_RULES,
        image=job_image,
        counters=job_counters,
    )


def stream_record(counter: str, event_ms: int, sequence: int, image: Callable[..., dict] = classic_image) -> dict:
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
            "NewImage": image(counter, event_ms, item_id, sequence),
            "SequenceNumber": str(100_000_000_000_000_000_000 + sequence),
            "SizeBytes": 80,
            "StreamViewType": "NEW_IMAGE",
        },
        "eventSourceARN": STREAM_ARN,
    }


def record_chunks(
    events: Iterable[Event], size: int = CHUNK, image: Callable[..., dict] = classic_image
) -> Iterator[list[dict]]:
    """Stream records of ``events``, numbered in order, ``size`` at a time."""
    numbered = enumerate(events)
    while chunk := [
        stream_record(counter, ms, sequence, image) for sequence, (counter, ms) in itertools.islice(numbered, size)
    ]:
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
