"""Stream record -> counter event, or a rejection with its reason. No I/O.

Parsing must be deterministic for a given record: a retried invocation has to
rebuild exactly the same segments, so the acceptance checks measure an event's
time against the record's own arrival time (``ApproximateCreationDateTime``),
never against the clock of whichever invocation happens to read it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from enum import Enum
from typing import Any, NamedTuple

from boto3.dynamodb.types import TypeDeserializer

from tally.core.buckets import MAX_EPOCH_MS, InvalidTime, parse_event_time
from tally.core.settings import DAY_MS, Settings

MAX_COUNTER_LENGTH = 255
# DynamoDB Streams sequence numbers are 21 to 40 digits. Anything else cannot come
# from a stream, and a longer one would make a segment marker key DynamoDB refuses.
MAX_SEQUENCE_LENGTH = 40
RESERVED_PREFIX = "#"
# An epoch-seconds time read as milliseconds lands in January 1970; within a year of its
# record's arrival once multiplied by 1000, it was almost surely meant as seconds.
SECONDS_MISTAKE_TOLERANCE_MS = 366 * DAY_MS

_deserializer = TypeDeserializer()


class Reason(str, Enum):
    """Why a record is not counted. NOT_INSERT and BEFORE_COUNT_FROM are routine; the rest are rejections."""

    NOT_INSERT = "not_insert"
    BEFORE_COUNT_FROM = "before_count_from"  # arrived before the cutoff: the backfill counts it
    MALFORMED_RECORD = "malformed_record"
    MISSING_IMAGE = "missing_image"
    MISSING_COUNTER = "missing_counter"
    INVALID_COUNTER = "invalid_counter"
    MISSING_TIME = "missing_time"
    INVALID_TIME = "invalid_time"
    FUTURE_TIME = "future_time"
    LATE_EVENT = "late_event"

    @property
    def is_rejection(self) -> bool:
        return self not in _ROUTINE


_ROUTINE = frozenset({Reason.NOT_INSERT, Reason.BEFORE_COUNT_FROM})


class CounterEvent(NamedTuple):
    """One occurrence of ``counter`` at ``event_ms``, read from stream record ``sequence``.

    A named tuple: one is built per counted record, and a tuple builds fastest.
    """

    counter: str
    event_ms: int
    sequence: str
    arrival_ms: int


@dataclass(frozen=True)
class Rejection:
    """A record that is not counted. ``sequence`` and ``arrival_ms`` are None when unreadable."""

    reason: Reason
    detail: str
    sequence: str | None = None
    arrival_ms: int | None = None


class InvalidCounter(ValueError):
    """A counter name tally will not store."""


def validate_counter(name: object) -> str:
    """Return ``name`` if it can be a counter; raise InvalidCounter saying why.

    Names starting with '#' are reserved for bookkeeping items (segment markers,
    rejection counters), so no event can write into them.
    """
    if not isinstance(name, str):
        raise InvalidCounter(f"counter must be a string, got {type(name).__name__}")
    if not name:
        raise InvalidCounter("counter is empty")
    if len(name) > MAX_COUNTER_LENGTH:
        raise InvalidCounter(f"counter longer than {MAX_COUNTER_LENGTH} characters")
    if name.startswith(RESERVED_PREFIX):
        raise InvalidCounter(f"counter starts with reserved {RESERVED_PREFIX!r}")
    if not name.isascii():
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidCounter("counter is not valid UTF-8") from None
    return name


def parse_record(record: Mapping[str, Any], settings: Settings) -> CounterEvent | Rejection:
    """Classify one Lambda-format DynamoDB stream record. Never raises."""
    try:
        return _parse(record, settings)
    except Exception as error:  # a poison record must never block the shard
        return Rejection(Reason.MALFORMED_RECORD, f"unreadable record: {type(error).__name__}: {error}"[:300])


def _parse(record: Mapping[str, Any], settings: Settings) -> CounterEvent | Rejection:
    if not _is_mapping(record) or not _is_mapping(record.get("dynamodb")):
        return Rejection(Reason.MALFORMED_RECORD, "record has no 'dynamodb' section")
    stream = record["dynamodb"]
    sequence = stream.get("SequenceNumber")
    arrival_ms = arrival_of(stream.get("ApproximateCreationDateTime"))
    if record.get("eventName") != "INSERT":
        # A routine skip adds to no bucket, so it needs neither field: checking them first
        # would turn every MODIFY or REMOVE without them into a rejection.
        readable = _is_sequence_number(sequence) and arrival_ms is not None
        detail = f"eventName {str(record.get('eventName'))[:32]}"
        return Rejection(Reason.NOT_INSERT, detail, *((sequence, arrival_ms) if readable else (None, None)))
    if not _is_sequence_number(sequence):
        return Rejection(Reason.MALFORMED_RECORD, "record lacks a readable dynamodb.SequenceNumber")
    if arrival_ms is None:
        return Rejection(Reason.MALFORMED_RECORD, "record lacks a readable dynamodb.ApproximateCreationDateTime")
    if settings.count_from_ms is not None and arrival_ms < settings.count_from_ms:
        return Rejection(Reason.BEFORE_COUNT_FROM, "arrived before count-from", sequence, arrival_ms)

    image = stream.get("NewImage")
    if not _is_mapping(image):
        detail = "INSERT without NewImage (stream view must include NEW_IMAGE)"
        return Rejection(Reason.MISSING_IMAGE, detail, sequence, arrival_ms)

    raw_counter = image.get(settings.counter_attribute)
    if raw_counter is None:
        return Rejection(Reason.MISSING_COUNTER, f"no attribute {settings.counter_attribute!r}", sequence, arrival_ms)
    try:
        counter = validate_counter(_deserialize(raw_counter))
    except (InvalidCounter, ValueError) as error:
        return Rejection(Reason.INVALID_COUNTER, str(error), sequence, arrival_ms)

    raw_time = image.get(settings.time_attribute)
    if raw_time is None:
        return Rejection(Reason.MISSING_TIME, f"no attribute {settings.time_attribute!r}", sequence, arrival_ms)
    try:
        event_ms = parse_event_time(_deserialize(raw_time))
    except (InvalidTime, ValueError) as error:
        return Rejection(Reason.INVALID_TIME, str(error), sequence, arrival_ms)

    if event_ms > arrival_ms + settings.max_clock_skew_ms:
        return Rejection(Reason.FUTURE_TIME, f"{event_ms - arrival_ms} ms after arrival", sequence, arrival_ms)
    if arrival_ms - event_ms > settings.max_event_age_ms:
        detail = f"{arrival_ms - event_ms} ms before arrival"
        if _looks_like_epoch_seconds(event_ms, arrival_ms):
            detail += f"; {settings.time_attribute} looks like epoch seconds, tally reads numbers as epoch milliseconds"
        return Rejection(Reason.LATE_EVENT, detail, sequence, arrival_ms)
    return CounterEvent(counter, event_ms, sequence, arrival_ms)


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
