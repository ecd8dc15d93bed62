"""Random event streams as DynamoDB Streams would carry them, and their brute-force expected counts.

The producer side is modelled, not the records alone: every write has an item
``id``. A first write is an INSERT. Writing the same item again unchanged
emits no record at all (DynamoDB only streams changes); writing it changed
emits a MODIFY; a TTL expiry by the service emits a REMOVE. Only INSERTs count.

Each generated record carries the outcome the generator intended (counted, or
the rejection reason it must get), an oracle independent of
``tally.records.parse_record``.
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

from boto3.dynamodb.types import TypeSerializer
from factories import records_again
from tally.core.amounts import average_of, decimal_of
from tally.core.buckets import Bucket, buckets_of
from tally.core.commit import ReadRecords, Writer
from tally.core.overlaps import RecordsAgain
from tally.core.histograms import bin_of
from tally.core.records import MAX_COUNTER_LENGTH, CounterEvent, Outcome, Reason
from tally.core.rules import parse_rules
from tally.core.segments import rejected_counter
from tally.core.settings import Settings
from tally.core.units import DAY_MS, HOUR_MS, MINUTE_MS
from tally.core.sketches import Sketch, hash_of
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

# The rules a stream with ``rules`` set is counted by: a template over the counter attribute,
# a constant that also counts distinct item ids, a conditional summing rule, a rule that needs one
# attribute present and another absent, and a histogram of every item's amount (negative, zero and
# tiny ones included). The generator predicts their outcomes by hand.
FAULT_RULES = parse_rules(
    json.dumps(
        [
            {"name": "per-counter", "counter": "n/{counter}"},
            {"name": "all", "counter": "all", "distinct": "id"},
            {
                "name": "revenue",
                "counter": "revenue/{shop}",
                "when": {"status": {"oneOf": ["paid", "refunded"]}},
                "sum": "amount",
            },
            {
                "name": "unassigned",
                "counter": "unassigned/{status}",
                "when": {"shop": {"exists": False}, "status": {"exists": True}},
            },
            {"name": "amounts", "counter": "amounts/{shop}", "histogram": "amount"},
        ]
    )
)
AMOUNTS = (  # (attribute value, summed units or None when it must be refused)
    (None, None),
    ({"S": "12.50"}, None),
    ({"N": "0.000000001"}, None),  # a ninth digit after the point (a histogram takes it: 1e-9)
    ({"N": "0"}, 0),  # the histogram's zero bin
    ({"N": "1000000000000000000"}, None),  # 10^18: a 19th digit before the point
    ({"N": "999999999999999999.99999999"}, 99_999_999_999_999_999_999_999_999),
    ({"N": "-0.00000001"}, -1),
    ({"BOOL": True}, None),
)


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
    rules: bool = False  # items carry shop, status and amount, counted by FAULT_RULES
    edge_share: float = 0.0  # records arriving on a minute or hour boundary with an event right at a retention's edge


@dataclass
class Expected:
    """Brute-force truth: accepted events and rejections, straight from the generator's intent."""

    events: list[tuple[str, int, int]] = field(default_factory=list)  # (counter, event_ms, arrival_ms), one per counting rule
    amounts: list[tuple[str, int, int, int]] = field(default_factory=list)  # (counter, event_ms, units, arrival_ms)
    values: list[tuple[str, int, Decimal, int]] = field(default_factory=list)  # of histograms: (counter, event_ms, value, arrival_ms)
    rejections: list[tuple[Reason, int]] = field(default_factory=list)  # (reason, arrival_ms)
    distinct: list[tuple[str, int, str, int]] = field(default_factory=list)  # (counter, event_ms, value, arrival_ms)
    intents: dict[str, list[str]] = field(default_factory=dict)  # sequence -> sorted outcome labels
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

    def sum_of(self, counter: str, window: Window) -> int:
        """Units summed into ``counter`` by events in the window."""
        return sum(units for name, at, units, _ in self.amounts if name == counter and window.covers(at))

    def average(self, counter: str, window: Window):
        return average_of(decimal_of(self.sum_of(counter, window)), self.count(counter, window))

    def bucket_sums(self, settings: Settings) -> dict[tuple[str, str], int]:
        """The sum of every bucket item a summing rule writes, in units."""
        totals: Counter[tuple[str, str]] = Counter()
        for counter, at, units, arrival in self.amounts:
            for sort_key in placement(at, arrival, settings) or ():
                totals[(counter, sort_key)] += units
        return dict(totals)

    def bucket_sketches(self, settings: Settings) -> dict[tuple[str, str], Sketch]:
        """The sketch of every bucket item a distinct rule writes: each value once, however often delivered."""
        sketches: dict[tuple[str, str], Sketch] = {}
        for counter, at, value, arrival in self.distinct:
            for sort_key in placement(at, arrival, settings) or ():
                sketches.setdefault((counter, sort_key), Sketch()).add(hash_of(value))
        return sketches

    def values_in(self, counter: str, window: Window) -> list[Decimal]:
        """The values a histogram rule took into ``counter`` from events in the window, in order."""
        return sorted(value for name, at, value, _ in self.values if name == counter and window.covers(at))

    def bucket_bins(self, settings: Settings) -> dict[tuple[str, str], Counter[str]]:
        """The histogram bins of every bucket item a histogram rule writes: how many values fell in each."""
        totals: dict[tuple[str, str], Counter[str]] = {}
        for counter, at, value, arrival in self.values:
            for sort_key in placement(at, arrival, settings) or ():
                totals.setdefault((counter, sort_key), Counter())[bin_of(value)] += 1
        return totals

    def rejections_by_reason(self) -> Counter[Reason]:
        return Counter(reason for reason, _ in self.rejections)


@dataclass
class Stream:
    spec: StreamSpec
    shards: dict[str, list[dict[str, Any]]]  # shard id -> records in stream order
    expected: Expected
    identical_rewrites: int = 0
    trimmed: dict[str, int] = field(default_factory=dict)  # shard id -> records trimmed from its start
    reads_again: int = 0

    def read_again(self, step: ReadRecords) -> RecordsAgain:
        """A shard's records from ``step.first`` through ``step.through`` as GetRecords gives them (1,000 a page),
        or None as the Streams API refuses a range that starts before the shard's trim horizon."""
        self.reads_again += 1
        shard = step.writer.shard_id or ""
        return records_again(self.shards.get(shard, [])[self.trimmed.get(shard, 0):], step)

    @property
    def records(self) -> int:
        return sum(len(records) for records in self.shards.values())

    def writer_tags(self) -> set[str]:
        """The watermark attribute of each shard: the only ones its bucket items may hold."""
        return {Writer.of_shard(STREAM_ARN, shard).tag for shard in self.shards}


def after_now(spec: StreamSpec, now_ms: int) -> StreamSpec:
    """The same stream moved by whole days (hours and days stay aligned) to arrive from two days after ``now_ms``.

    For DynamoDB Local, whose TTL process deletes bucket items whose TTL has
    passed (moto keeps them): a stream dated in the past would lose its buckets
    while the check runs. Moved so, every bucket's TTL (never before its
    event's arrival) lies in the future.
    """
    days = (now_ms + 2 * DAY_MS - spec.start_ms) // DAY_MS + 1
    return dataclasses.replace(spec, start_ms=spec.start_ms + days * DAY_MS)


def build_stream(spec: StreamSpec, settings: Settings) -> Stream:
    rng = random.Random(spec.seed)
    names = [f"c{i}" for i in range(spec.counters)]
    expected = Expected(last_arrival_ms=spec.start_ms)
    shard_ids = [f"shardId-{spec.seed % 10**8:08d}-{i:08x}" for i in range(spec.shards)]
    shards: dict[str, list[dict[str, Any]]] = {shard: [] for shard in shard_ids}
    items: dict[str, dict[str, Any]] = {}  # id -> current item, as the events table holds it
    sequence = _first_sequence(rng, spec.writes)
    arrival_ms = spec.start_ms
    identical_rewrites = 0

    for write in range(spec.writes):
        arrival_ms += rng.randint(0, spec.max_gap_s) * 1000
        if rng.random() < spec.jump_share:
            arrival_ms += rng.randint(30, 180) * MINUTE_MS  # across hours, now and then across a day
        offset = None
        if rng.random() < spec.edge_share:
            arrival_ms, offset = _on_an_edge(rng, arrival_ms, settings)
        elif write == spec.writes - 1 and spec.odd_share and rng.random() < 0.5:
            offset = rng.randint(MINUTE_MS, settings.max_clock_skew_ms)  # the last event is stamped ahead of it
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
            image, intent, time_intent, event_ms, counter = _new_image(
                rng, spec, names, item_id, arrival_ms, settings, offset
            )
            items[item_id] = image or {}
            record = _record(record_name, item_id, sequence, arrival_ms, image)
            if record_name == "MODIFY":
                intent = Reason.NOT_INSERT
            elif spec.rules and image is not None:
                counted, refusals = _rules_oracle(image, settings)
                if counted and time_intent is not None:
                    counted, refusals = [], [time_intent, *refusals]
                for name, units, value in counted:
                    expected.events.append((name, event_ms, _arrival_ms(record)))
                    if name == "all":  # its rule counts distinct item ids too
                        expected.distinct.append((name, event_ms, item_id, _arrival_ms(record)))
                    if units is not None:
                        expected.amounts.append((name, event_ms, units, _arrival_ms(record)))
                    if value is not None:
                        expected.values.append((name, event_ms, value, _arrival_ms(record)))
                for reason in refusals:
                    expected.rejections.append((reason, _arrival_ms(record)))
                labels = [f"counter:{name}" for name, _, _ in counted] + [reason.value for reason in refusals]
                expected.intents[str(sequence)] = sorted(labels)
                expected.last_arrival_ms = max(expected.last_arrival_ms, _arrival_ms(record))
                shards[shard].append(record)
                continue
            if intent is None:
                expected.events.append((counter, event_ms, _arrival_ms(record)))
            elif intent is not Reason.NOT_INSERT:
                expected.rejections.append((intent, _arrival_ms(record)))
        expected.intents[str(sequence)] = [f"counter:{counter}"] if intent is None else [intent.value]
        expected.last_arrival_ms = max(expected.last_arrival_ms, _arrival_ms(record))
        shards[shard].append(record)
    return Stream(spec, shards, expected, identical_rewrites)


def outcome_labels(outcomes: list[Outcome]) -> list[str]:
    """What parse_record made of a record, in the generator's terms."""
    return sorted(f"counter:{o.counter}" if isinstance(o, CounterEvent) else o.reason.value for o in outcomes)


def settings_for(spec: StreamSpec, settings: Settings) -> Settings:
    """The handler's settings for a stream: with FAULT_RULES when its items are made for them."""
    if not spec.rules:
        return settings
    return dataclasses.replace(settings, rules=FAULT_RULES)


Counted = tuple[str, int | None, Decimal | None]  # (counter, units summed, value binned)


def _rules_oracle(image: dict[str, Any], settings: Settings) -> tuple[list[Counted], list[Reason]]:
    """FAULT_RULES applied by hand: (counter, units, value) per counting rule, and each refusing rule's reason."""
    counted: list[Counted] = []
    refusals: list[Reason] = []
    counter = image.get(settings.counter_attribute)
    if counter is None:
        refusals.append(Reason.MISSING_COUNTER)
    else:
        name = _rendered("n/", counter)
        if name is None:
            refusals.append(Reason.INVALID_COUNTER)
        else:
            counted.append((name, None, None))
    counted.append(("all", None, None))
    if "shop" not in image and "status" in image:
        name = _rendered("unassigned/", image["status"])
        if name is None:
            refusals.append(Reason.INVALID_COUNTER)
        else:
            counted.append((name, None, None))
    shop, amount = image.get("shop"), image.get("amount")
    if image.get("status") in ({"S": "paid"}, {"S": "refunded"}):
        revenue = _amount_rule("revenue/", shop, amount, (Reason.MISSING_SUM, Reason.INVALID_SUM), _units)
        if isinstance(revenue, Reason):
            refusals.append(revenue)
        else:
            counted.append((revenue[0], revenue[1], None))
    amounts = _amount_rule("amounts/", shop, amount, (Reason.MISSING_HISTOGRAM, Reason.INVALID_HISTOGRAM), _histogram_value)
    if isinstance(amounts, Reason):
        refusals.append(amounts)
    else:
        counted.append((amounts[0], None, amounts[1]))
    return counted, refusals


def _amount_rule(
    prefix: str, shop: dict | None, amount: dict | None, reasons: tuple[Reason, Reason], take: Any
) -> tuple[str, Any] | Reason:
    """A rule counting into prefix + shop that takes the amount (``take``: what it takes, None when refused):
    (counter, what it took), or the reason it refuses: the counter's, then ``reasons`` (missing, invalid)."""
    name = None if shop is None else _rendered(prefix, shop)
    if shop is None:
        return Reason.MISSING_COUNTER
    if name is None:
        return Reason.INVALID_COUNTER
    if amount is None:
        return reasons[0]
    taken = take(amount)
    return reasons[1] if taken is None else (name, taken)


def _histogram_value(amount: dict[str, Any]) -> Decimal | None:
    """The number a histogram takes, restated from the documented range: 0, or a magnitude in [1e-9, 1e18)."""
    if "N" not in amount:
        return None
    value = Decimal(amount["N"])
    return value if not value or Decimal("1e-9") <= abs(value) < Decimal("1e18") else None


def _units(amount: dict[str, Any]) -> int | None:
    """The amount in 10^-8 units, restated from the documented limits: 18 digits before the point, 8 after."""
    for value, units in AMOUNTS:
        if value == amount:
            return units
    whole, _, fraction = amount["N"].lstrip("-").partition(".")
    sign = -1 if amount["N"].startswith("-") else 1
    return sign * (int(whole) * 10**8 + int(fraction.ljust(8, "0")))


def _rendered(prefix: str, value: dict[str, Any]) -> str | None:
    """prefix + the attribute's text, or None when a rule must refuse it."""
    if "N" in value:
        text = value["N"]
    elif "S" in value and value["S"]:
        text = value["S"]
    else:
        return None
    name = prefix + text
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return name if len(name) <= MAX_COUNTER_LENGTH else None


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
    rng: random.Random,
    spec: StreamSpec,
    names: list[str],
    item_id: str,
    arrival_ms: int,
    settings: Settings,
    offset: int | None = None,
) -> tuple[dict[str, Any] | None, Reason | None, Reason | None, int, str]:
    """An event item, the outcome the classic rule must give it (None when counted, else its rejection
    reason) and the rejection its time alone earns (None when acceptable). ``offset``: its time minus
    its arrival, drawn when None."""
    arrival_ms -= arrival_ms % 1000  # Lambda reports arrival in whole seconds
    counter = names[0] if rng.random() < spec.hot_share else rng.choice(names)
    if offset is None:
        offset = _time_offset(rng, spec, settings)
    time_intent = time_verdict(arrival_ms + offset, arrival_ms, settings)
    counter_intent: Reason | None = None
    event_ms = arrival_ms + offset
    attributes: dict[str, Any] = {
        "id": {"S": item_id},
        settings.counter_attribute: {"S": counter},
        settings.time_attribute: _time_value(rng, event_ms),
    }
    if rng.random() < 0.2:
        attributes[settings.value_attribute] = {"N": str(rng.randint(-5, 5))}
    if spec.rules:
        attributes["status"] = {"S": rng.choice(["paid", "paid", "refunded", "open"])}
        attributes["shop"] = {"S": rng.choice(["s0", "s1", "ünï shop"])}
        cents = rng.randint(-10**6, 10**7)
        attributes["amount"] = {"N": f"{'-' if cents < 0 else ''}{abs(cents) // 100}.{abs(cents) % 100:02d}"}
        if rng.random() < spec.odd_share:
            odd = rng.randrange(4)
            if odd == 0:
                del attributes["shop"]  # counted by the "unassigned" rule
            elif odd == 1:
                attributes["shop"] = rng.choice([{"N": "5"}, {"BOOL": True}, {"S": ""}])
            elif odd == 2:
                amount = rng.choice(AMOUNTS)[0]
                if amount is None:
                    del attributes["amount"]
                else:
                    attributes["amount"] = amount
            else:
                del attributes["status"]
    if rng.random() < spec.odd_share:
        odd = rng.randrange(8)
        if odd == 0:
            counter = rng.choice(VALID_ODD_COUNTER_NAMES)
            attributes[settings.counter_attribute] = {"S": counter}
        elif odd == 1:
            attributes[settings.counter_attribute] = {"S": rng.choice(INVALID_COUNTER_NAMES)}
            counter_intent = Reason.INVALID_COUNTER
        elif odd == 2:
            attributes[settings.counter_attribute] = {"N": "7"}
            counter_intent = Reason.INVALID_COUNTER
        elif odd == 3:
            del attributes[settings.counter_attribute]
            counter_intent = Reason.MISSING_COUNTER
        elif odd == 4:
            del attributes[settings.time_attribute]
            time_intent = Reason.MISSING_TIME
        elif odd == 5:
            attributes[settings.time_attribute] = rng.choice(
                [{"S": "yesterday"}, {"S": "2026-03-28T13:17:00"}, {"N": "NaN"}, {"N": "-1"}, {"BOOL": True}]
            )
            time_intent = Reason.INVALID_TIME
        elif odd == 6:
            return None, Reason.MISSING_IMAGE, None, event_ms, counter
        else:
            attributes["extra"] = {"M": {"nested": {"L": [{"N": "1"}, {"S": "x"}]}}}
    return attributes, counter_intent or time_intent, time_intent, event_ms, counter


def _first_sequence(rng: random.Random, writes: int) -> int:
    """Where a stream's sequence numbers start: 21 digits, or just below a power of ten, so that
    they grow a digit within the stream (stream sequence numbers run from 21 to 40 digits)."""
    if rng.random() < 0.5:
        return 10**20 + rng.randrange(10**6) * 10**6
    return 10 ** rng.choice([21, 22, 30, 39]) - rng.randint(1, max(1, writes // 2)) * 10**6


def _on_an_edge(rng: random.Random, arrival_ms: int, settings: Settings) -> tuple[int, int]:
    """A later arrival on a minute (or hour) boundary, and an event time at most a millisecond from the
    instant its minute (or hour) bucket expires at that arrival: the last one counted, the first one not."""
    boundary = HOUR_MS if rng.random() < 0.3 else MINUTE_MS
    arrival_ms += -arrival_ms % boundary
    retention = settings.hour_retention_ms if boundary == HOUR_MS else settings.minute_retention_ms
    # The bucket that ends ``retention`` before arrival expires exactly at arrival: its last
    # millisecond is out (in its hour alone, or late), the next bucket's first is in.
    return arrival_ms, -retention + rng.choice([-boundary, -1, 0, 1])


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
