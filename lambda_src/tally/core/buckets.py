"""Bucket math: UTC integer arithmetic on epoch milliseconds, no I/O.

A minute bucket is identified by its minute number (ms // 60_000), an hour
bucket by its hour number (ms // 3_600_000). Sort keys are fixed-width so that
lexicographic order is time order within a counter's item collection.
"""

from __future__ import annotations

import functools
import math
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from enum import Enum
from typing import NamedTuple, Protocol

from tally.core.instants import InvalidInstant, in_range, iso_ms
from tally.core.units import HOUR_MS, MINUTE_MS, MINUTES_PER_HOUR


class Retentions(Protocol):
    """How long buckets are kept (``Settings`` is one): all the bucket math needs of the settings.

    The settings parse the rules, and the rules' alerts use this module: a ``Settings`` import here
    would make a circle of them.
    """

    @property
    def minute_retention_ms(self) -> int: ...

    @property
    def hour_retention_ms(self) -> int: ...



# By kind, without building the enum: every committed bucket computes its end for the TTL.
_LENGTH_MS = {"M": MINUTE_MS, "H": HOUR_MS}


@functools.lru_cache(maxsize=8192)
def _sort_key(kind: str, index: int) -> str:
    """Cached: a commit sorts and writes every bucket of its segment by this key, a window's buckets are few."""
    start = datetime.fromtimestamp(index * _LENGTH_MS[kind] / 1000, UTC)
    return start.strftime("M#%Y-%m-%dT%H:%M" if kind == "M" else "H#%Y-%m-%dT%H")


class Granularity(str, Enum):
    MINUTE = "M"
    HOUR = "H"

    @property
    def length_ms(self) -> int:
        return MINUTE_MS if self is Granularity.MINUTE else HOUR_MS


class Bucket(NamedTuple):
    """One bucket of one granularity: ``index`` is minutes or hours since the epoch.

    A named tuple: the write path builds two per record and hashes them into
    segment deltas, which a tuple does at C speed.
    """

    kind: str  # Granularity value: "M" or "H"
    index: int

    @property
    def granularity(self) -> Granularity:
        return Granularity(self.kind)

    @property
    def start_ms(self) -> int:
        return self.index * _LENGTH_MS[self.kind]

    @property
    def end_ms(self) -> int:
        return (self.index + 1) * _LENGTH_MS[self.kind]

    @property
    def sort_key(self) -> str:
        return _sort_key(self.kind, self.index)

    @property
    def hour_index(self) -> int:
        """The hour this bucket lies in (itself, for an hour bucket)."""
        if self.kind == "H":
            return self.index
        return self.index // MINUTES_PER_HOUR

    def ttl_seconds(self, settings: Retentions) -> int:
        """Expiry (epoch seconds): bucket end plus the retention of its granularity."""
        if self.kind == "M":
            return ((self.index + 1) * MINUTE_MS + settings.minute_retention_ms) // 1000
        return ((self.index + 1) * HOUR_MS + settings.hour_retention_ms) // 1000

    def alive_at(self, instant_ms: int, settings: Retentions) -> bool:
        """Whether the bucket is still within its retention at ``instant_ms``.

        Until its TTL a query may read it; from its TTL on DynamoDB may delete it
        at any moment, so no query reads it again. Writes and reads both decide
        with this one test.
        """
        return self.ttl_seconds(settings) * 1000 > instant_ms

    @classmethod
    def of_minute(cls, index: int) -> Bucket:
        return cls("M", index)

    @classmethod
    def of_hour(cls, index: int) -> Bucket:
        return cls("H", index)

    @classmethod
    def from_sort_key(cls, sort_key: str) -> Bucket:
        """Inverse of ``sort_key``; raises ValueError for anything else."""
        if sort_key.startswith("M#") and len(sort_key) == 18:
            moment = datetime.strptime(sort_key[2:], "%Y-%m-%dT%H:%M").replace(tzinfo=UTC)
            return cls.of_minute(_epoch_ms(moment) // MINUTE_MS)
        if sort_key.startswith("H#") and len(sort_key) == 15:
            moment = datetime.strptime(sort_key[2:], "%Y-%m-%dT%H").replace(tzinfo=UTC)
            return cls.of_hour(_epoch_ms(moment) // HOUR_MS)
        raise ValueError(f"not a bucket sort key: {sort_key!r}")


def buckets_of(event_ms: int) -> tuple[Bucket, Bucket]:
    """The minute and hour buckets an instant lies in."""
    return Bucket("M", event_ms // MINUTE_MS), Bucket("H", event_ms // HOUR_MS)


def counted_buckets(event_ms: int, arrival_ms: int, settings: Retentions) -> tuple[Bucket, ...]:
    """The buckets an event counts in, decided by its stream record's arrival.

    - minute and hour while the minute is within the minute retention;
    - the hour alone once only the hour is (its minute is past the minute
      retention: no query reads that minute again, at arrival or after);
    - none past the hour retention: the event is late and rejected.

    Why it is exact: a query reads a minute only while ``alive_at(now)``, and
    ``now`` is never before the arrival of an event it can see, so every minute
    a query reads holds every event of that minute its hour holds. A retry that
    commits after the minute's TTL writes an item no query reads again. The
    decision uses the record's arrival, never a clock, so a retried invocation
    rebuilds the same segments.
    """
    minute, hour = Bucket("M", event_ms // MINUTE_MS), Bucket("H", event_ms // HOUR_MS)
    if minute.alive_at(arrival_ms, settings):
        return minute, hour
    if hour.alive_at(arrival_ms, settings):
        return (hour,)
    return ()


class InvalidTime(ValueError):
    """An event time that is not a usable instant."""


def parse_event_time(value: object) -> int:
    """Epoch milliseconds from an event-time attribute value.

    Accepted: a number of epoch milliseconds (fractions are floored), or an
    ISO-8601 string with a UTC offset (``Z`` or ``+hh:mm``). A string without an
    offset is refused: guessing its zone would miscount silently.
    """
    if type(value) is int:
        return _in_range(value)
    if isinstance(value, bool):
        raise InvalidTime("a boolean is not a time")
    if isinstance(value, Decimal | int | float):
        return _from_number(value)
    if isinstance(value, str):
        return _from_iso(value)
    raise InvalidTime(f"unsupported type {type(value).__name__}")


def _from_number(value: Decimal | int | float) -> int:
    try:
        if isinstance(value, float) and not math.isfinite(value):
            raise InvalidTime("not a finite number")
        number = Decimal(value)
        if not number.is_finite():
            raise InvalidTime("not a finite number")
        ms = int(number.to_integral_value(rounding="ROUND_FLOOR"))
    except (InvalidOperation, OverflowError, ValueError) as error:
        raise InvalidTime(f"not a number of milliseconds: {error}") from None
    return _in_range(ms)


def _from_iso(text: str) -> int:
    try:
        return iso_ms(text)
    except InvalidInstant as error:
        raise InvalidTime(str(error)) from None


def _in_range(ms: int) -> int:
    try:
        return in_range(ms)
    except InvalidInstant as error:
        raise InvalidTime(str(error)) from None


def _epoch_ms(moment: datetime) -> int:
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def iso_minute(ms: int) -> str:
    """``YYYY-MM-DDTHH:MMZ`` for display."""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%MZ")


def iso_second(ms: int) -> str:
    """``YYYY-MM-DDTHH:MM:SSZ``: an instant to the second, for display and keys."""
    return datetime.fromtimestamp(ms // 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


LANE_SEPARATOR = "#"


def lane_sort_key(sort_key: str, lane: int) -> str:
    """The sort key of one lane of a bucket. Lane 0 is the bucket's own item, so one lane reads as no lanes.

    ``M#2026-11-22T13:17#3`` sorts after its bucket and before the next one, so
    a range of buckets in a Query holds their lanes too.
    """
    return sort_key if lane == 0 else f"{sort_key}{LANE_SEPARATOR}{lane}"


def lane_sort_keys(sort_key: str, lanes: int) -> list[str]:
    return [lane_sort_key(sort_key, lane) for lane in range(lanes)]


def bucket_sort_key(sort_key: str) -> str:
    """The bucket a stored sort key belongs to: itself, or the bucket of a lane."""
    kind, _, rest = sort_key.partition("#")
    start, _, _lane = rest.partition(LANE_SEPARATOR)
    return f"{kind}#{start}"


def last_lane_bound(sort_key: str) -> str:
    """An upper bound for a key range that must hold every lane of ``sort_key`` and nothing after it."""
    return f"{sort_key}{LANE_SEPARATOR}~"


# A distinct counter's sketch items: lane k of every bucket of counter c lives in partition
# ``#sketches#k#c`` under the bucket's sort key. Each lane's sketch writes then draw on a partition key's
# 1,000 write units a second of their own, not on the counter's (its counts') nor on the other lanes'.
# Reserved: no counter name starts with '#'. Part of the table's layout: a reader with another number of
# lanes misses sketches, as it misses count lanes.
SKETCH_PREFIX = "#sketches#"


def sketch_partition(counter: str, lane: int) -> str:
    """The partition of lane ``lane`` of a counter's sketch items: ``#sketches#3#views/home``."""
    return f"{SKETCH_PREFIX}{lane}{LANE_SEPARATOR}{counter}"


def sketch_partitions(counter: str, lanes: int) -> list[str]:
    return [sketch_partition(counter, lane) for lane in range(lanes)]


def sketch_counter(partition: str) -> str | None:
    """The counter whose sketch lane ``partition`` is, or None for any other partition key."""
    if not partition.startswith(SKETCH_PREFIX):
        return None
    lane, separator, counter = partition[len(SKETCH_PREFIX) :].partition(LANE_SEPARATOR)
    return counter if separator and lane.isdigit() and counter else None


# Release 0.2.0 kept lane k of a bucket's sketch in the counter's own partition, at ``<bucket>#d<k>``.
# Readers merge those items too until they expire (a bucket's TTL: its end plus the hour retention).
LEGACY_SKETCH_LANE_PREFIX = "d"


def legacy_sketch_sort_key(sort_key: str, lane: int) -> str:
    """Where 0.2.0 wrote lane ``lane`` of a bucket's sketch, in the counter's partition: ``H#2026-11-22T13#d0``.

    It sorts after the bucket's count lanes and before the next bucket, so a range of the counter's
    buckets (to ``last_lane_bound``) holds these items too."""
    return f"{sort_key}{LANE_SEPARATOR}{LEGACY_SKETCH_LANE_PREFIX}{lane}"


def legacy_sketch_sort_keys(sort_key: str, lanes: int) -> list[str]:
    return [legacy_sketch_sort_key(sort_key, lane) for lane in range(lanes)]


def stored_bucket(pk: str, sk: str) -> tuple[str, str]:
    """The (counter, bucket sort key) a stored item of a bucket belongs to: a lane of its count, a lane of
    its sketch in the lane's partition, or a sketch at 0.2.0's key."""
    counter = sketch_counter(pk)
    return (pk if counter is None else counter), bucket_sort_key(sk)


def bucket_item_keys(counter: str, sort_key: str, lanes: int, distinct: bool) -> list[tuple[str, str]]:
    """The (pk, sk) of every item a read of one bucket takes: each lane of its count and, for a distinct
    counter, each lane of its sketch in the lane's partition and at 0.2.0's key (until those expire)."""
    keys = [(counter, stored) for stored in lane_sort_keys(sort_key, lanes)]
    if distinct:
        keys += [(partition, sort_key) for partition in sketch_partitions(counter, lanes)]
        keys += [(counter, stored) for stored in legacy_sketch_sort_keys(sort_key, lanes)]
    return keys
