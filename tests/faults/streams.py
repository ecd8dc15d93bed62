"""Random event streams as DynamoDB Streams would carry them, and their brute-force expected counts.

The producer side is modelled, not the records alone: every write has an item
``id``. A first write is an INSERT. Writing the same item again unchanged
emits no record at all (DynamoDB only streams changes); writing it changed
emits a MODIFY; a TTL expiry by the service emits a REMOVE. Only INSERTs count.

Each generated record carries the outcome the generator intended (counted, or
the rejection reason it must get), an oracle independent of
``tally.records.parse_record``: ``placement`` states the rule for late and
future events from the design, in plain arithmetic.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from boto3.dynamodb.types import TypeSerializer
from tally.core.buckets import Bucket, buckets_of
from tally.core.records import MAX_COUNTER_LENGTH, Reason
from tally.core.segments import rejected_counter
from tally.core.settings import DAY_MS, HOUR_MS, MINUTE_MS, Settings
from tally.core.windows import Window

STREAM_ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/tally-events/stream/2026-01-01T00:00:00.000"
TTL_DELETION_IDENTITY = {"type": "Service", "principalId": "dynamodb.amazonaws.com"}

_serializer = TypeSerializer()

# Counter names that must be refused, and why each one is tempting.
INVALID_COUNTER_NAMES = (
    "",  # empty
    "#segment#100000000000000000001",  # would overwrite a segment marker
    "#rejected#late_event",  # would inflate a rejection counter
    "#",  # the reserved prefix alone
    "x" * (MAX_COUNTER_LENGTH + 1),  # too long for a key we promise to store
    "lone \ud800 surrogate",  # cannot be encoded as UTF-8
)
VALID_ODD_COUNTER_NAMES = ("ünïcødé", "with space", "a#b", "x" * MAX_COUNTER_LENGTH, "😀", "M#2026-01-01T00:00")


@dataclass(frozen=True)
class StreamSpec:
    """Everything that shapes one random stream; ``seed`` drives the rest."""

    seed: int
    writes: int
    counters: int
    hot_share: float
    start_ms: int
    max_gap_s: int
    jump_share: float
    odd_share: float
    rewrite_share: float
    shards: int


@dataclass
class Expected:
    """Brute-force truth: accepted events and rejections, straight from the generator's intent."""

    events: list[tuple[str, int, int]] = field(default_factory=list)  # (counter, event_ms, arrival_ms)
    rejections: list[tuple[Reason, int]] = field(default_factory=list)  # (reason, arrival_ms)
    intents: dict[str, Reason | None] = field(default_factory=dict)  # sequence -> rejection reason, None = counted
    last_arrival_ms: int = 0  # the stream's start until a record arrives

    def count(self, counter: str, window: Window) -> int:
        """Events of ``counter`` whose minute is in the window; for '#rejected#...' rejections by arrival."""
        if counter.startswith("#rejected#"):
            return sum(1 for reason, at in self.rejections if rejected_counter(reason) == counter and window.covers(at))
        return sum(1 for name, at, _ in self.events if name == counter and window.covers(at))

    def buckets(self, settings: Settings) -> dict[tuple[str, str], int]:
        """Every bucket item the counts table must hold, with its count."""
        totals: Counter[tuple[str, str]] = Counter()
        for counter, at, arrival in self.events:
            for sort_key in placement(at, arrival, settings) or ():
                totals[(counter, sort_key)] += 1
        for reason, at in self.rejections:
            for bucket in buckets_of(at):
                totals[(rejected_counter(reason), bucket.sort_key)] += 1
        return dict(totals)

    def rejections_by_reason(self) -> Counter[Reason]:
        return Counter(reason for reason, _ in self.rejections)


@dataclass
class Stream:
    spec: StreamSpec
    shards: dict[str, list[dict[str, Any]]]  # shard id -> records in stream order
    expected: Expected
    identical_rewrites: int = 0

    @property
    def records(self) -> int:
        return sum(len(records) for records in self.shards.values())


def build_stream(spec: StreamSpec, settings: Settings) -> Stream:
    rng = random.Random(spec.seed)
    names = [f"c{i}" for i in range(spec.counters)]
    expected = Expected(last_arrival_ms=spec.start_ms)
    shard_ids = [f"shardId-{spec.seed % 10**8:08d}-{i:08x}" for i in range(spec.shards)]
    shards: dict[str, list[dict[str, Any]]] = {shard: [] for shard in shard_ids}
    items: dict[str, dict[str, Any]] = {}  # id -> current item, as the events table holds it
    sequence = 10**20 + rng.randrange(10**6) * 10**6
    arrival_ms = spec.start_ms
    identical_rewrites = 0

    for write in range(spec.writes):
        arrival_ms += rng.randint(0, spec.max_gap_s) * 1000
        if rng.random() < spec.jump_share:
            arrival_ms += rng.randint(30, 180) * MINUTE_MS  # across hours, now and then across a day
        item_id, record_name = f"e{write}", "INSERT"
        if items and rng.random() < spec.rewrite_share:
            item_id = rng.choice(sorted(items))
            action = rng.random()
            if action < 0.4:
                identical_rewrites += 1  # same item written again: DynamoDB streams nothing
                continue
            record_name = "MODIFY" if action < 0.8 else "REMOVE"
        sequence += rng.randint(1, 10**6)
        shard = shard_ids[hash_shard(item_id, len(shard_ids))]
        if record_name == "REMOVE":
            del items[item_id]
            record = _record("REMOVE", item_id, sequence, arrival_ms, None, identity=TTL_DELETION_IDENTITY)
            intent: Reason | None = Reason.NOT_INSERT
        else:
            image, intent, event_ms, counter = _new_image(rng, spec, names, item_id, arrival_ms, settings)
            if record_name == "MODIFY":
                intent = Reason.NOT_INSERT
            items[item_id] = image or {}
            record = _record(record_name, item_id, sequence, arrival_ms, image)
            if intent is None:
                expected.events.append((counter, event_ms, _arrival_ms(record)))
            elif intent is not Reason.NOT_INSERT:
                expected.rejections.append((intent, _arrival_ms(record)))
        expected.intents[str(sequence)] = intent
        expected.last_arrival_ms = max(expected.last_arrival_ms, _arrival_ms(record))
        shards[shard].append(record)
    return Stream(spec, shards, expected, identical_rewrites)


def hash_shard(item_id: str, shards: int) -> int:
    """Items stay on one shard, as DynamoDB keeps a key's records in order on one shard."""
    return sum(item_id.encode()) % shards


def _arrival_ms(record: dict[str, Any]) -> int:
    return int(float(record["dynamodb"]["ApproximateCreationDateTime"]) * 1000)


def _record(
    name: str,
    item_id: str,
    sequence: int,
    arrival_ms: int,
    image: dict[str, Any] | None,
    identity: dict[str, str] | None = None,
) -> dict[str, Any]:
    stream: dict[str, Any] = {
        "ApproximateCreationDateTime": arrival_ms // 1000,
        "Keys": {"id": {"S": item_id}},
        "SequenceNumber": str(sequence),
        "SizeBytes": 100,
        "StreamViewType": "NEW_IMAGE",
    }
    if image is not None:
        stream["NewImage"] = image
    record = {
        "eventID": f"{sequence:032x}"[-32:],
        "eventName": name,
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "dynamodb": stream,
        "eventSourceARN": STREAM_ARN,
    }
    if identity is not None:
        record["userIdentity"] = identity
    return record


def _new_image(
    rng: random.Random, spec: StreamSpec, names: list[str], item_id: str, arrival_ms: int, settings: Settings
) -> tuple[dict[str, Any] | None, Reason | None, int, str]:
    """An event item and the outcome it must get: None when counted, else its rejection reason."""
    arrival_ms -= arrival_ms % 1000  # Lambda reports arrival in whole seconds
    counter = names[0] if rng.random() < spec.hot_share else rng.choice(names)
    event_ms = arrival_ms + _time_offset(rng, spec, settings)
    intent = time_verdict(event_ms, arrival_ms, settings)
    attributes: dict[str, Any] = {
        "id": {"S": item_id},
        settings.counter_attribute: {"S": counter},
        settings.time_attribute: _time_value(rng, event_ms),
    }
    if rng.random() < 0.2:
        attributes[settings.value_attribute] = {"N": str(rng.randint(-5, 5))}
    if rng.random() < spec.odd_share:
        odd = rng.randrange(8)
        if odd == 0:
            counter = rng.choice(VALID_ODD_COUNTER_NAMES)
            attributes[settings.counter_attribute] = {"S": counter}
        elif odd == 1:
            attributes[settings.counter_attribute] = {"S": rng.choice(INVALID_COUNTER_NAMES)}
            intent = Reason.INVALID_COUNTER
        elif odd == 2:
            attributes[settings.counter_attribute] = {"N": "7"}
            intent = Reason.INVALID_COUNTER
        elif odd == 3:
            del attributes[settings.counter_attribute]
            intent = Reason.MISSING_COUNTER
        elif odd == 4:
            del attributes[settings.time_attribute]
            intent = Reason.MISSING_TIME
        elif odd == 5:
            attributes[settings.time_attribute] = rng.choice(
                [{"S": "yesterday"}, {"S": "2026-03-28T13:17:00"}, {"N": "NaN"}, {"N": "-1"}, {"BOOL": True}]
            )
            intent = Reason.INVALID_TIME
        elif odd == 6:
            return None, Reason.MISSING_IMAGE, event_ms, counter
        else:
            attributes["extra"] = {"M": {"nested": {"L": [{"N": "1"}, {"S": "x"}]}}}
    return attributes, intent, event_ms, counter


def _time_offset(rng: random.Random, spec: StreamSpec, settings: Settings) -> int:
    """Event time minus arrival: mostly recent, sometimes late by any amount, at a retention's edge, or ahead."""
    skew, minutes, hours = settings.max_clock_skew_ms, settings.minute_retention_ms, settings.hour_retention_ms
    if rng.random() >= spec.odd_share:
        return -rng.randint(0, 120_000)
    choice = rng.randrange(10)
    if choice == 0:
        return -minutes + rng.randint(-2 * MINUTE_MS, 2 * MINUTE_MS)  # around the minute retention's edge
    if choice == 1:
        return -hours + rng.randint(-2 * HOUR_MS, 2 * HOUR_MS)  # around the hour retention's edge
    if choice == 2:
        return skew  # as far ahead as accepted
    if choice == 3:
        return skew + rng.choice([1, 1000, DAY_MS])
    if choice == 4:
        return -rng.randint(0, minutes + HOUR_MS)
    if choice == 5:
        return rng.randint(0, skew)
    if choice == 6:
        return -rng.randint(0, hours + 2 * DAY_MS)  # late by any amount
    if choice == 7:
        return -rng.choice([1, 1000, 23 * HOUR_MS + 30 * MINUTE_MS, 3 * DAY_MS, 8 * DAY_MS, 40 * DAY_MS, 400 * DAY_MS])
    return -rng.randint(0, 3_600_000)


def time_verdict(event_ms: int, arrival_ms: int, settings: Settings) -> Reason | None:
    """Future past the clock skew, late once the hour is past the hour retention at arrival, else counted."""
    if event_ms - arrival_ms > settings.max_clock_skew_ms:
        return Reason.FUTURE_TIME
    if placement(event_ms, arrival_ms, settings) is None:
        return Reason.LATE_EVENT
    return None


def placement(event_ms: int, arrival_ms: int, settings: Settings) -> tuple[str, ...] | None:
    """Sort keys of the buckets an event counts in, stated from the design, or None when it is late.

    A bucket is readable until its end plus its retention. The event counts in
    its minute and hour while its minute is readable at arrival, in its hour
    alone while only the hour is, and nowhere after that.
    """
    minute_end = (event_ms // MINUTE_MS + 1) * MINUTE_MS
    hour_end = (event_ms // HOUR_MS + 1) * HOUR_MS
    minute, hour = Bucket.of_minute(event_ms // MINUTE_MS).sort_key, Bucket.of_hour(event_ms // HOUR_MS).sort_key
    if minute_end + settings.minute_retention_ms > arrival_ms:
        return minute, hour
    if hour_end + settings.hour_retention_ms > arrival_ms:
        return (hour,)
    return None


def _time_value(rng: random.Random, event_ms: int) -> dict[str, Any]:
    """The event time as producers write it: epoch ms (sometimes fractional) or ISO-8601 with an offset."""
    style = rng.randrange(4)
    if style == 0:
        return {"N": f"{event_ms}.{rng.randint(0, 999):03d}"}
    if style == 1:
        zone = timezone(timedelta(minutes=rng.choice([0, 60, -300, 330, 765, -720])))
        moment = datetime.fromtimestamp(event_ms / 1000, UTC).astimezone(zone)
        moment = moment.replace(microsecond=(event_ms % 1000) * 1000)
        return {"S": moment.isoformat(timespec="milliseconds")}
    return _serializer.serialize(event_ms)
