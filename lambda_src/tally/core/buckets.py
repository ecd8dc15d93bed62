"""Bucket math: the bucket ladder, minute -> hour -> day -> month, in integer arithmetic on epoch ms. No I/O.

A minute bucket is identified by its minute number (ms // 60_000), an hour
bucket by its hour number (ms // 3_600_000), both UTC. Day and month buckets
belong to a time zone (UTC or a zone the settings keep): a day by its local
date's number of days since 1970-01-01, a month by year * 12 + month - 1, so a
day in New York is 23, 24 or 25 hours long. Sort keys are fixed-width within a
granularity and zone, so that lexicographic order is time order within a
counter's item collection: ``M#2026-11-28T13:17``, ``H#2026-11-28T13``,
``D#Europe/Berlin@2026-11-28``, ``MO#UTC@2026-11``.
"""

from __future__ import annotations

import functools
import math
from datetime import UTC, date, datetime, time
from decimal import Decimal, InvalidOperation
from enum import Enum
from typing import NamedTuple, Protocol
from zoneinfo import ZoneInfo

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

    @property
    def day_retention_ms(self) -> int: ...

    @property
    def month_retention_months(self) -> int: ...


# By kind, without building the enum: every committed bucket computes its end for the TTL.
_LENGTH_MS = {"M": MINUTE_MS, "H": HOUR_MS}
DAY = "D"
MONTH = "MO"
# The ordinal of 1970-01-01: a day bucket's index is its local date's ordinal minus it.
EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
# Between a zone's name and the period in a long bucket's sort key: no IANA name holds it.
ZONE_SEPARATOR = "@"


@functools.lru_cache(maxsize=8192)
def _sort_key(kind: str, index: int, zone: str = "") -> str:
    """Cached: a commit sorts and writes every bucket of its segment by this key, a window's buckets are few."""
    if kind == DAY:
        return f"D#{zone}{ZONE_SEPARATOR}{day_date(index).isoformat()}"
    if kind == MONTH:
        year, month = divmod(index, 12)
        return f"MO#{zone}{ZONE_SEPARATOR}{year:04d}-{month + 1:02d}"
    start = datetime.fromtimestamp(index * _LENGTH_MS[kind] / 1000, UTC)
    return start.strftime("M#%Y-%m-%dT%H:%M" if kind == "M" else "H#%Y-%m-%dT%H")


def day_date(index: int) -> date:
    """The local date of day bucket ``index``."""
    return date.fromordinal(index + EPOCH_ORDINAL)


def day_index(day: date) -> int:
    return day.toordinal() - EPOCH_ORDINAL


def month_index(day: date) -> int:
    """The month bucket holding ``day``: year * 12 + month - 1."""
    return day.year * 12 + day.month - 1


def month_first_day(index: int) -> date:
    year, month = divmod(index, 12)
    return date(year, month + 1, 1)


@functools.lru_cache(maxsize=1024)
def zone_named(name: str) -> ZoneInfo:
    return ZoneInfo(name)


@functools.lru_cache(maxsize=65536)
def local_midnight_ms(day: date, zone: str) -> int:
    """Epoch ms of the first instant of ``day`` in ``zone`` (a midnight a DST change skips: the instant the
    clocks jump, PEP 495's fold 0)."""
    return int(datetime.combine(day, time(0), tzinfo=zone_named(zone)).timestamp() * 1000)


@functools.lru_cache(maxsize=65536)
def local_day_of_hour(hour: int, zone: str) -> int:
    """The local day (bucket index) in ``zone`` that holds UTC hour ``hour``'s first instant."""
    local = datetime.fromtimestamp(hour * 3600, UTC).astimezone(zone_named(zone))
    return day_index(local.date())


class Granularity(str, Enum):
    MINUTE = "M"
    HOUR = "H"
    DAY = "D"
    MONTH = "MO"

    @property
    def length_ms(self) -> int:
        """A minute's or an hour's length; days and months have none of their own (DST, month lengths)."""
        return _LENGTH_MS[self.value]


class Bucket(NamedTuple):
    """One bucket of one granularity: ``index`` is minutes or hours since the epoch, or a local day or month
    in ``zone`` (an IANA name; empty for minutes and hours, which are UTC).

    A named tuple: the write path builds two per record and hashes them into
    segment deltas, which a tuple does at C speed.
    """

    kind: str  # Granularity value: "M", "H", "D" or "MO"
    index: int
    zone: str = ""

    @property
    def granularity(self) -> Granularity:
        return Granularity(self.kind)

    @property
    def start_ms(self) -> int:
        if self.kind == DAY:
            return local_midnight_ms(day_date(self.index), self.zone)
        if self.kind == MONTH:
            return local_midnight_ms(month_first_day(self.index), self.zone)
        return self.index * _LENGTH_MS[self.kind]

    @property
    def end_ms(self) -> int:
        if self.kind in (DAY, MONTH):
            return self._replace(index=self.index + 1).start_ms
        return (self.index + 1) * _LENGTH_MS[self.kind]

    @property
    def sort_key(self) -> str:
        return _sort_key(self.kind, self.index, self.zone)

    @property
    def is_long(self) -> bool:
        """A day or a month: a rung above the hours, kept in a time zone."""
        return self.kind == DAY or self.kind == MONTH

    @property
    def hour_index(self) -> int:
        """The hour this bucket lies in (itself, for an hour bucket)."""
        if self.kind == "H":
            return self.index
        return self.index // MINUTES_PER_HOUR

    def ttl_seconds(self, settings: Retentions) -> int:
        """Expiry (epoch seconds): bucket end plus the retention of its granularity (a month's: so many months)."""
        if self.kind == "M":
            return ((self.index + 1) * MINUTE_MS + settings.minute_retention_ms) // 1000
        if self.kind == "H":
            return ((self.index + 1) * HOUR_MS + settings.hour_retention_ms) // 1000
        if self.kind == DAY:
            return (self.end_ms + settings.day_retention_ms) // 1000
        return self._replace(index=self.index + 1 + settings.month_retention_months).start_ms // 1000

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
    def of_day(cls, day: date, zone: str) -> Bucket:
        return cls(DAY, day_index(day), zone)

    @classmethod
    def of_month(cls, day: date, zone: str) -> Bucket:
        """The month bucket holding ``day`` in ``zone``."""
        return cls(MONTH, month_index(day), zone)

    @classmethod
    def from_sort_key(cls, sort_key: str) -> Bucket:
        """Inverse of ``sort_key``; raises ValueError for anything else."""
        if sort_key.startswith("M#") and len(sort_key) == 18:
            moment = datetime.strptime(sort_key[2:], "%Y-%m-%dT%H:%M").replace(tzinfo=UTC)
            return cls.of_minute(_epoch_ms(moment) // MINUTE_MS)
        if sort_key.startswith("H#") and len(sort_key) == 15:
            moment = datetime.strptime(sort_key[2:], "%Y-%m-%dT%H").replace(tzinfo=UTC)
            return cls.of_hour(_epoch_ms(moment) // HOUR_MS)
        kind, _, rest = sort_key.partition("#")
        zone, separator, period = rest.rpartition(ZONE_SEPARATOR)
        if kind in (DAY, MONTH) and separator and zone and "#" not in rest:
            try:
                zone_named(zone)
                if kind == DAY and len(period) == 10:
                    bucket = cls.of_day(date.fromisoformat(period), zone)
                elif kind == MONTH and len(period) == 7:
                    bucket = cls.of_month(date.fromisoformat(period + "-01"), zone)
                else:
                    bucket = None
            except (ValueError, KeyError, OSError):
                bucket = None
            if bucket is not None and bucket.sort_key == sort_key:
                return bucket
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
    rungs = counted_rungs(event_ms, arrival_ms, settings)
    if rungs == 2:
        return Bucket("M", event_ms // MINUTE_MS), Bucket("H", event_ms // HOUR_MS)
    return (Bucket("H", event_ms // HOUR_MS),) if rungs else ()


def counted_rungs(event_ms: int, arrival_ms: int, settings: Retentions) -> int:
    """How many of ``counted_buckets`` there are (2: minute and hour, 1: the hour alone, 0: late), in integers:
    ``Bucket.alive_at`` of each at ``arrival_ms``, without building them, for the parse of every record."""
    if ((event_ms // MINUTE_MS + 1) * MINUTE_MS + settings.minute_retention_ms) // 1000 * 1000 > arrival_ms:
        return 2
    if ((event_ms // HOUR_MS + 1) * HOUR_MS + settings.hour_retention_ms) // 1000 * 1000 > arrival_ms:
        return 1
    return 0


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
