"""Stream record -> counter events and rejections, through the counter rules. No I/O.

One record may add to several counters (one per matching rule) and be refused
by some rules while others count it. Parsing must be deterministic for a given
record: a retried invocation has to rebuild exactly the same segments, so the
acceptance checks (and the choice of buckets, minute and hour or hour alone)
measure an event's time against the record's own arrival time
(``ApproximateCreationDateTime``), never against the clock of whichever
invocation happens to read it.

``parse_record`` reads a Lambda stream record; ``parse_image`` and
``parse_item`` apply the same rules and acceptance to an item image in
DynamoDB JSON or to a decoded item, for anything that reads items elsewhere
(an exported item is judged as an INSERT). ``judge`` is the one place where
a record kind, its images and who made a deletion meet the rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from enum import Enum
from typing import Any, NamedTuple

from boto3.dynamodb.types import TypeDeserializer

from tally.core.buckets import Bucket, InvalidTime, counted_buckets, counted_rungs, parse_event_time
from tally.core.instants import MAX_EPOCH_MS
from tally.core.rules import (
    ARRIVAL,
    INSERT,
    MAX_COUNTER_LENGTH,
    MODIFY,
    REMOVE,
    RESERVED_PREFIX,
    UNREADABLE,
    Counted,
    InvalidCounter,
    Rule,
    validate_counter,
)
from tally.core.settings import Settings
from tally.core.units import DAY_MS

__all__ = [
    "MAX_COUNTER_LENGTH",
    "RESERVED_PREFIX",
    "CounterEvent",
    "InvalidCounter",
    "Outcome",
    "Reason",
    "Rejection",
    "arrival_of",
    "judge",
    "parse_image",
    "parse_item",
    "parse_record",
    "validate_counter",
]

# DynamoDB Streams sequence numbers are 21 to 40 digits. Anything else cannot come
# from a stream, and a longer one would make a segment marker key DynamoDB refuses.
MAX_SEQUENCE_LENGTH = 40
# An epoch-seconds time read as milliseconds lands in January 1970; within a year of its
# record's arrival once multiplied by 1000, it was almost surely meant as seconds.
SECONDS_MISTAKE_TOLERANCE_MS = 366 * DAY_MS
# The user identity DynamoDB puts on the REMOVE records of items its TTL process deleted.
TTL_DELETION_IDENTITY = {"type": "Service", "principalId": "dynamodb.amazonaws.com"}

_deserializer = TypeDeserializer()


class Reason(str, Enum):
    """Why a record (or one rule's reading of it) is not counted. The first three are routine, the rest rejections."""

    NOT_INSERT = "not_insert"  # a record kind no rule sees (without rules that ask, anything but INSERT)
    NO_RULE_MATCHED = "no_rule_matched"
    BEFORE_COUNT_FROM = "before_count_from"  # arrived before count-from (the deployment's or its rules'): a backfill counts it
    RULE_RETIRED = "rule_retired"  # arrived once the rules that would count it were retired
    MALFORMED_RECORD = "malformed_record"
    MISSING_IMAGE = "missing_image"
    MISSING_OLD_IMAGE = "missing_old_image"  # a rule needs the old image the stream view leaves out
    MISSING_COUNTER = "missing_counter"
    INVALID_COUNTER = "invalid_counter"
    MISSING_SUM = "missing_sum"
    INVALID_SUM = "invalid_sum"
    MISSING_HISTOGRAM = "missing_histogram"
    INVALID_HISTOGRAM = "invalid_histogram"
    MISSING_DISTINCT = "missing_distinct"
    INVALID_DISTINCT = "invalid_distinct"
    MISSING_TIME = "missing_time"
    INVALID_TIME = "invalid_time"
    FUTURE_TIME = "future_time"
    LATE_EVENT = "late_event"

    @property
    def is_rejection(self) -> bool:
        return self not in _ROUTINE


_ROUTINE = frozenset({Reason.NOT_INSERT, Reason.NO_RULE_MATCHED, Reason.BEFORE_COUNT_FROM, Reason.RULE_RETIRED})


class CounterEvent(NamedTuple):
    """One occurrence of ``counter`` at ``event_ms``, read from stream record ``sequence``.

    ``units`` is the amount a summing rule adds (in 10^-8 units, see amounts.py), else None;
    ``bin`` the histogram bin a histogram rule adds 1 to (histograms.py), else None;
    ``hashed`` the hash of the value a distinct rule counts (sketches.py), else None.
    ``hour_only``: its minute was past the minute retention at arrival, so it
    counts in its hour alone (``buckets.counted_buckets`` decides).
    ``long_only``: its hour too was past the hour retention, and its counter keeps days and months that are
    still kept: it counts in those alone (core/ladder.py).
    A named tuple: one is built per counted record and rule, and a tuple builds fastest.
    """

    counter: str
    event_ms: int
    sequence: str
    arrival_ms: int
    units: int | None = None
    hour_only: bool = False
    bin: str | None = None
    hashed: int | None = None
    long_only: bool = False


@dataclass(frozen=True)
class Rejection:
    """A record, or one rule's reading of it, that is not counted.

    ``sequence`` and ``arrival_ms`` are None when unreadable; ``rule`` names the
    rule that refused it (None for the record as a whole, or the classic rule).
    """

    reason: Reason
    detail: str
    sequence: str | None = None
    arrival_ms: int | None = None
    rule: str | None = None


Outcome = CounterEvent | Rejection


class LongOnly(NamedTuple):
    """An event time past the hour retention at arrival whose UTC day is still kept: counted in its days and
    months alone for a counter that keeps them, refused as late (``late``) for any other."""

    event_ms: int
    late: Rejection


def parse_record(record: Mapping[str, Any], settings: Settings) -> list[Outcome]:
    """Classify one Lambda-format DynamoDB stream record: at least one outcome. Never raises."""
    try:
        return _parse(record, settings)
    except Exception as error:  # a poison record must never block the shard
        return [Rejection(Reason.MALFORMED_RECORD, f"unreadable record: {type(error).__name__}: {error}"[:300])]


def _parse(record: Mapping[str, Any], settings: Settings) -> list[Outcome]:
    if not _is_mapping(record) or not _is_mapping(record.get("dynamodb")):
        return [Rejection(Reason.MALFORMED_RECORD, "record has no 'dynamodb' section")]
    stream = record["dynamodb"]
    sequence = stream.get("SequenceNumber")
    arrival_ms = arrival_of(stream.get("ApproximateCreationDateTime"))
    kind = record.get("eventName")
    if type(kind) is not str or kind not in settings.counter_rules.kinds:
        # A routine skip adds to no bucket, so it needs neither field: checking them first
        # would turn every MODIFY or REMOVE without them into a rejection.
        readable = _is_sequence_number(sequence) and arrival_ms is not None
        detail = f"eventName {str(kind)[:32]}"
        return [Rejection(Reason.NOT_INSERT, detail, *((sequence, arrival_ms) if readable else (None, None)))]
    if not _is_sequence_number(sequence):
        return [Rejection(Reason.MALFORMED_RECORD, "record lacks a readable dynamodb.SequenceNumber")]
    if arrival_ms is None:
        return [Rejection(Reason.MALFORMED_RECORD, "record lacks a readable dynamodb.ApproximateCreationDateTime")]
    if settings.count_from_ms is not None and arrival_ms < settings.count_from_ms:
        return [Rejection(Reason.BEFORE_COUNT_FROM, "arrived before count-from", sequence, arrival_ms)]

    new_image = stream.get("NewImage")
    if kind == REMOVE:
        new = None
    elif not _is_mapping(new_image):
        detail = f"{kind} without NewImage (stream view must include NEW_IMAGE)"
        return [Rejection(Reason.MISSING_IMAGE, detail, sequence, arrival_ms)]
    elif kind == INSERT:
        return parse_image(new_image, arrival_ms, sequence, settings)
    else:
        new = _decode(new_image, settings)
    old_image = stream.get("OldImage")
    old = _decode(old_image, settings) if _is_mapping(old_image) else None
    return judge(kind, new, old, arrival_ms, sequence, settings, by_ttl=_deleted_by_ttl(record))


def _deleted_by_ttl(record: Mapping[str, Any]) -> bool:
    """Whether DynamoDB's TTL process made this change (it signs its deletions with a service identity)."""
    identity = record.get("userIdentity")
    return _is_mapping(identity) and all(identity.get(key) == value for key, value in TTL_DELETION_IDENTITY.items())


def parse_image(image: Mapping[str, Any], arrival_ms: int, sequence: str, settings: Settings) -> list[Outcome]:
    """Outcomes of one new item image in DynamoDB JSON (a stream record's NewImage, an export's Item)."""
    return judge(INSERT, _decode(image, settings), None, arrival_ms, sequence, settings)


def _decode(image: Mapping[str, Any], settings: Settings) -> dict[str, Any]:
    """The attributes the rules read, decoded; an undecodable value becomes UNREADABLE."""
    values: dict[str, Any] = {}
    for name in settings.image_attributes:
        if name in image:
            try:
                values[name] = _deserialize(image[name])
            except ValueError:
                values[name] = UNREADABLE
    return values


def parse_item(item: Mapping[str, Any], arrival_ms: int, sequence: str, settings: Settings) -> list[Outcome]:
    """Outcomes of one decoded item (as boto3's TypeDeserializer gives it) inserted at ``arrival_ms``."""
    return judge(INSERT, item, None, arrival_ms, sequence, settings)


def judge(
    kind: str,
    new: Mapping[str, Any] | None,
    old: Mapping[str, Any] | None,
    arrival_ms: int,
    sequence: str,
    settings: Settings,
    by_ttl: bool = False,
) -> list[Outcome]:
    """What the rules make of one change: ``kind`` with its decoded images (None when the record lacks one).

    A rule that sees ``kind`` judges the new image (INSERT, MODIFY) or the old
    one (REMOVE, made by TTL when ``by_ttl``); a ``becomes`` rule counts a
    MODIFY only when the old image did not meet its conditions. Every rule
    that would count either counts or refuses with a reason. A bad or
    unacceptable time rejects the record once per time attribute, whatever
    the number of rules reading it, and only when some rule would have
    counted with it. A rule with a countFrom or retiredAt of its own sees only
    the records arriving between them.
    """
    times: dict[str, tuple[int, bool] | Rejection] = {}  # by time attribute (or ARRIVAL)
    refused_times: dict[str, Rejection] | None = None
    counted = False
    events: list[Outcome] = []
    refusals: list[Outcome] = []
    rules = settings.counter_rules
    outside: Rule | None = None  # a rule left out for the record's arrival, for the skip's reason
    for rule in rules.seeing[kind]:
        in_time = not rules.timed or rule.counts_arrival(arrival_ms)
        if kind == REMOVE:
            if not rule.counts_deletion(by_ttl):
                continue
            image = old
            if image is None:
                if in_time:
                    refusals.append(_missing_old_image(rule, kind, sequence, arrival_ms))
                else:
                    outside = rule
                continue
        else:
            image = new  # type: ignore[assignment]  # never None here: parse_record checked it
        if rule.conditions and not rule.matches(image):
            continue
        if not in_time:
            outside = rule
            continue
        if kind == MODIFY and rule.becomes:
            if old is None:
                refusals.append(_missing_old_image(rule, kind, sequence, arrival_ms))
                continue
            if rule.held_before(old):
                continue
        result = rule.count(image)
        if type(result) is not Counted:
            refusals.append(Rejection(Reason(result.reason), result.detail, sequence, arrival_ms, result.rule))
            continue
        counted = True
        source = rule.time or settings.time_attribute
        time = times.get(source)
        if time is None:
            time = times[source] = _time_of(image, source, rule, arrival_ms, sequence, settings)
        if type(time) is tuple:
            events.append(
                CounterEvent(
                    result.counter, time[0], sequence, arrival_ms, result.units, time[1], result.bin, result.hashed
                )
            )
            continue
        if type(time) is LongOnly:
            if settings.climbs(result.counter, arrival_ms):
                events.append(CounterEvent(result.counter, time.event_ms, sequence, arrival_ms, result.units, False,
                                           result.bin, result.hashed, long_only=True))
                continue
            time = time.late
        if refused_times is None:
            refused_times = {source: time}
        else:
            refused_times.setdefault(source, time)
    if not counted:
        return refusals or [_not_counted(outside, sequence, arrival_ms)]
    if refused_times:
        return [*events, *refused_times.values(), *refusals]
    return events + refusals if refusals else events


def _not_counted(outside: Rule | None, sequence: str, arrival_ms: int) -> Rejection:
    """The routine skip of a record no rule counts: none matched, or the rules it concerns count at other times."""
    if outside is None:
        return Rejection(Reason.NO_RULE_MATCHED, "no rule matched the item", sequence, arrival_ms)
    if outside.retired_ms is not None and arrival_ms >= outside.retired_ms:
        return Rejection(Reason.RULE_RETIRED, f"arrived after {outside.label} was retired", sequence, arrival_ms)
    return Rejection(Reason.BEFORE_COUNT_FROM, f"arrived before {outside.label}'s countFrom", sequence, arrival_ms)


def _missing_old_image(rule: Rule, kind: str, sequence: str, arrival_ms: int) -> Rejection:
    view = "NEW_AND_OLD_IMAGES" if kind == MODIFY else "OLD_IMAGE or NEW_AND_OLD_IMAGES"
    detail = f"{rule.label}: {kind} without OldImage (stream view must be {view})"
    return Rejection(Reason.MISSING_OLD_IMAGE, detail, sequence, arrival_ms, rule.name)


def _time_of(
    item: Mapping[str, Any], source: str, rule: Rule, arrival_ms: int, sequence: str, settings: Settings
) -> tuple[int, bool] | LongOnly | Rejection:
    """The event time read from ``source`` (an attribute, or ARRIVAL) in epoch ms and whether it counts in
    its hour alone, or the rejection it earns (LongOnly: unless its counter keeps days and months).

    A rejection for a rule's own time attribute names the rule; one for the
    table-wide attribute names none, as it is the same for every rule.
    """
    owner = None if source == settings.time_attribute else rule.name
    if source == ARRIVAL:
        event_ms = arrival_ms
    elif source not in item:
        return Rejection(Reason.MISSING_TIME, f"no attribute {source!r}", sequence, arrival_ms, owner)
    else:
        try:
            event_ms = parse_event_time(item[source])
        except (InvalidTime, ValueError) as error:
            return Rejection(Reason.INVALID_TIME, str(error), sequence, arrival_ms, owner)
    if event_ms <= arrival_ms + settings.max_clock_skew_ms:  # place_in_time's answer, without its buckets
        rungs = counted_rungs(event_ms, arrival_ms, settings)
        if rungs:
            return event_ms, rungs == 1
    reason, detail = place_in_time(event_ms, arrival_ms, settings, source)  # type: ignore[misc]
    refused = Rejection(reason, detail, sequence, arrival_ms, owner)  # type: ignore[arg-type]
    if reason is Reason.LATE_EVENT and settings.calendar_prefixes and _day_kept(event_ms, arrival_ms, settings):
        return LongOnly(event_ms, refused)
    return refused


def _day_kept(event_ms: int, arrival_ms: int, settings: Settings) -> bool:
    """Whether the UTC day of ``event_ms`` is still within the day retention at ``arrival_ms``."""
    day = event_ms // DAY_MS
    return (day + 1) * DAY_MS + settings.day_retention_ms > arrival_ms


def place_in_time(
    event_ms: int, arrival_ms: int, settings: Settings, attribute: str | None = None
) -> tuple[Bucket, ...] | tuple[Reason, str]:
    """The buckets an event counts in, or why its time is refused (future or late), judged at its arrival."""
    if event_ms > arrival_ms + settings.max_clock_skew_ms:
        return Reason.FUTURE_TIME, f"{event_ms - arrival_ms} ms after arrival"
    buckets = counted_buckets(event_ms, arrival_ms, settings)
    if not buckets:
        detail = (
            f"{arrival_ms - event_ms} ms before arrival: its hour is past the hour retention "
            f"({settings.hour_retention_ms // DAY_MS} d)"
        )
        if _looks_like_epoch_seconds(event_ms, arrival_ms):
            detail += (
                f"; {attribute or settings.time_attribute} looks like epoch seconds, "
                "tally reads numbers as epoch milliseconds"
            )
        return Reason.LATE_EVENT, detail
    return buckets


def _looks_like_epoch_seconds(event_ms: int, arrival_ms: int) -> bool:
    """A time read as milliseconds that lands near 1970, but within a year of arrival read as seconds."""
    return abs(event_ms * 1000 - arrival_ms) <= SECONDS_MISTAKE_TOLERANCE_MS


def _is_sequence_number(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= MAX_SEQUENCE_LENGTH and value.isascii() and value.isdigit()


def _is_mapping(value: Any) -> bool:
    """Lambda hands over plain dicts: check for those first, the abstract type only after."""
    return type(value) is dict or isinstance(value, Mapping)


def _deserialize(attribute_value: Any) -> Any:
    """boto3's own DynamoDB JSON decoding; malformed values become ValueError.

    Strings and plain integers, which every counted record carries, are read
    directly: the general decoder costs more than the rest of the parse.
    """
    if type(attribute_value) is dict and len(attribute_value) == 1:
        (tag, value), = attribute_value.items()
        if tag == "S" and type(value) is str:
            return value
        if tag == "N" and type(value) is str and 0 < len(value) <= 18 and value.isascii() and value.isdigit():
            return int(value)
    if not _is_mapping(attribute_value) or len(attribute_value) != 1:
        raise ValueError("not a DynamoDB attribute value")
    try:
        return _deserializer.deserialize(dict(attribute_value))
    except Exception as error:
        raise ValueError(f"undecodable attribute value: {type(error).__name__}") from None


def arrival_of(approximate_creation: Any) -> int | None:
    """Epoch ms of a record's ApproximateCreationDateTime (Lambda: epoch seconds; boto3: datetime).

    None when unreadable, or too late for a bucket key (year 10000 on): a
    rejection is counted in the buckets of its arrival, so an arrival no key
    can name would crash the fold and block the shard.
    """
    if type(approximate_creation) is int or (type(approximate_creation) is float and approximate_creation.is_integer()):
        # Whole seconds, as Lambda sends them: no decimal arithmetic needed.
        if not 0 <= approximate_creation < MAX_EPOCH_MS // 1000:
            return None
        return int(approximate_creation) * 1000
    if isinstance(approximate_creation, datetime):
        if approximate_creation.tzinfo is None:
            return None
        return int(approximate_creation.timestamp() * 1000)
    if isinstance(approximate_creation, bool) or not isinstance(approximate_creation, int | float | Decimal):
        return None
    try:
        seconds = Decimal(str(approximate_creation))
    except ArithmeticError:
        return None
    if not seconds.is_finite() or seconds < 0 or seconds * 1000 >= MAX_EPOCH_MS:
        return None
    return int(seconds * 1000)
