"""Segment -> one conditional UpdateItem per bucket item, what each answer means, and when to try again. No I/O.

Exactly once, per item. Every bucket item keeps a watermark per writer (a
stream shard, or one export being backfilled): an attribute named by the
writer's tag, holding the position of the last record of that writer the
item has taken into account (it holds every record of the writer up to there
that touches it), in an order-preserving encoding. A segment adds its delta
to an item only if the item's watermark for its writer lies before the
segment's first record, and moves the watermark to its last in the same write:

    ADD count :n[, sum :s, ...] SET ttl = if_not_exists(ttl, :ttl), #w = :last
    condition: attribute_not_exists(#w) OR #w < :first

A writer commits its segments one after the other, in stream order, so a
retried segment finds the items it reached before at its own end (or a later
one) and skips them, and completes the rest. No marker items, no
transactions: one plain write per bucket item per segment, the floor of any
exact design. A failed condition is judged from the item returned with it
(``ReturnValuesOnConditionCheckFailure=ALL_OLD``, ``Outcome.TAKEN``): a
watermark at or past the item's last record in the segment means applied
before; one inside the segment means another reader cut the stream elsewhere
and the item took the segment's first part, so it is sent exactly the rest,
rebuilt from the records the segment holds (``untaken``), conditioned on the
watermark it showed. Where the records are not held (they came in the window
state as sums), the commit reads them again from the stream, once per segment
(``ReadRecords``, core/overlaps.py), and splits there. Where they cannot be
read again (trimmed from the stream) or no longer add up to what the state
carried, the item is left unresolved: it is sent the part it surely has not
taken, its watermark moves on, it is marked (``UNRESOLVED_ATTRIBUTE``, which
reads show) and an unresolved record names it and the range for the repair
(``scripts/audit.py --repair``); every other item commits as usual, and the
shard moves on. An unresolved item is low, never high. Anything else fails
the commit.

The watermark's last byte (``THROUGH``) tells it from the previous release's,
which held the first record of the last segment taken and not where that
segment ended. A shard's update fails on such a watermark too (it is one byte
shorter: ``SIZED_UPDATE_CONDITION``), and the first segment of this release to
meet one on a shard puts the shard's ``Anchor``: where this release began to
meet them. Where that segment went on from the previous release's reading (a
counted record of the shard lies before it), an item still holding such a
watermark took every record of the shard that touches it before the anchor
and none after, and is sent exactly the rest; where it may be the shard read
again from its trim horizon, the item is left unresolved and keeps its
watermark, so every later segment is judged against it too.

What a reader sees meanwhile: a segment's hour items are all written before
any of its minute items (two phases). A window read while a segment is half
applied holds none, some or all of the segment's events: the default plans
only add items, each of which only grows (core/plans.py). Only the fast path
that reads an hour minus its other minutes may also count the segment's
events in minutes that are still pending (at most the segment's events in
that counter's partly read hours).
That is what a reader saw between the transactions of a segment of more than
99 buckets before (a segment's items were cut into transactions in sort-key
order, hours before minutes).

Upgrade: the previous release committed a segment in transactions of 99
buckets, each with a marker item. A segment it committed in part, retried by
this release, must skip the buckets of those transactions: the commit first
reads the marker of the segment's first transaction (and the others when that
one exists) for segments that may predate this release.

``commit_steps`` is the whole commit of a segment as a sequence of steps
(read these markers, send these updates at once, wait this long) driven by
whoever does the I/O: ``CountsTable`` against DynamoDB with a thread pool and
real sleeps, the scale model against a simulated DynamoDB in simulated time.
Both run the same policy.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
from collections import Counter
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from enum import Enum
from functools import cached_property, lru_cache
from typing import Any

from tally.core.amounts import decimal_of, text_of
from tally.core.buckets import DAY, MONTH, Bucket, day_date, lane_sort_key, local_day_of_hour, month_index
from tally.core.histograms import LATE_BIN_PREFIX, NEGATIVE, POSITIVE, ZERO_BIN, is_bin, is_late_bin, late_bin
from tally.core.ladder import LATE_PREFIX, late_partition, marked_counter
from tally.core.overlaps import RecordsAgain, Unmatched, held_records, with_carried_records
from tally.core.ranking import crossed_level, is_ranked, level_of, rank_item
from tally.core.retry import Backoff
from tally.core.segments import Delta, HeldRecords, Item, Segment
from tally.core.settings import Settings
from tally.core.tables import (
    ANCHOR_PARTITION,
    COUNT_ATTRIBUTE,
    COUNTS_TABLE,
    LATE_COUNT_ATTRIBUTE,
    LATE_SUM_ATTRIBUTE,
    SUM_ATTRIBUTE,
    TTL_ATTRIBUTE,
    UNRESOLVED_ATTRIBUTE,
    UNRESOLVED_PARTITION,
)

# Watermark attributes start with this character and no other attribute does, so an item's
# writers can be told from its aggregates at a glance (and by code that prunes them).
WATERMARK_PREFIX = "~"
# 48 bits of the writer's hash: two shards writing the same item collide with odds of about
# 10^-12 per pair, and a collision costs nothing unless their segments also interleave.
WATERMARK_TAG_BYTES = 6

# The previous release's bookkeeping, read only to take over segments it committed in part.
LEGACY_MARKER_PREFIX = "#segment#"
LEGACY_PART_ITEMS = 99

UPDATE_CONDITION = "attribute_not_exists(#w) OR #w < :w"
# A shard's update also fails on a watermark of the previous release (``Watermark.through`` false): one byte
# shorter than this release's for the same position, it would pass the plain condition below a segment that may
# still overlap what its item took. ``:n`` is the size of the segment's position: a watermark of this release before
# it is longer (in the same shard, positions take the same bytes; a shorter one fails here and is judged as taken).
SIZED_UPDATE_CONDITION = "attribute_not_exists(#w) OR (#w < :w AND size(#w) > :n)"
# What the rest of a segment is sent on: the item still holds the watermark it showed.
RESUME_CONDITION = "#w = :seen"
# Ends every watermark this release writes: the position before it is the last record taken. The previous
# release wrote the bare position of the first record of the last segment taken.
THROUGH = b"\x01"
# Ends the watermark of an hour item instead when the try that wrote it kept days for the item's counter: its late
# records marked the hour (core/ladder.py). A retry that keeps days and finds the hour taken by a try that kept none
# leaves those records out of its days and months, which the close takes from the unmarked hour.
CLIMBED = b"\x02"
# Rounds of "the item moved on meanwhile, judge again" before a resumed update gives up (RetriesExhausted).
MAX_RESUMES = 8


class Outcome(str, Enum):
    APPLIED = "applied"  # the update added its delta
    TAKEN = "taken"  # the item's watermark is at or past the segment's first record: judged by ``untaken``
    ALREADY_APPLIED = "already_applied"  # the item holds every record the segment adds to it
    RETRY = "retry"  # throttled, or the answer was lost: try again after a pause
    FAIL = "fail"  # anything else: must not be mistaken for either


@dataclass(frozen=True)
class Answer:
    """What DynamoDB answered one update: its outcome, the item's count as it returned it, and its watermark.

    ``count`` is the count after the update (``ReturnValues=UPDATED_NEW``)
    when applied, the count the item holds (``ALL_OLD`` of the failed
    condition) when taken, None when nothing came back. ``watermark``: this
    writer's watermark on the item, when taken. ``units``: the write units
    DynamoDB says the update consumed (``ReturnConsumedCapacity``), when
    applied: a unit per started KB of the larger of the item before and after.
    """

    outcome: Outcome
    count: int | None = None
    watermark: bytes | None = None
    units: float | None = None


class Unsplit(Exception):
    """An item took part of a segment, and the part it has not taken cannot be told from the records the segment
    holds; ``carried``: the records it needs came in the window state as sums, and the stream may still hold them."""

    def __init__(self, why: str, *, carried: bool) -> None:
        super().__init__(why)
        self.carried = carried


@dataclass(frozen=True)
class CommitResult:
    applied: int  # bucket items updated now
    already_applied: int  # bucket items found updated before (a retry), or by the previous release
    retries: int  # updates throttled or lost and sent again
    # Hour items this commit created, or may have created on a try whose answer was lost (found already
    # applied): the counter directory's entries come from them (directory.py).
    born: tuple[Item, ...] = ()
    ranked: int = 0  # rank records put: hour items the commit carried into a higher level (ranking.py)
    # Items that had taken the segment's first part from a reader that cut the stream elsewhere, sent the rest.
    resumed: int = 0
    sketches_written: int = 0  # the distinct counters' sketch items, merged after the counts (sketch_writes.py)
    sketch_conflicts: int = 0  # sketch writes that lost a race to another writer and merged again
    # Carried records read again from the stream to split an overlap (at most once a segment), and the requests.
    overlaps_read: int = 0
    stream_requests: int = 0
    # Items left unresolved: sent what they surely had not taken, marked, and recorded for the repair.
    unresolved: tuple[Unresolved, ...] = ()
    # What the applied bucket updates consumed, as DynamoDB answered them, and the most one of them did: the
    # largest item written, in started KB (item_growth.py).
    write_units: float = 0.0
    largest_write_units: float = 0.0


class RetriesExhausted(RuntimeError):
    """DynamoDB kept pushing back after every retry."""


@dataclass(frozen=True)
class Writer:
    """Who commits a segment: the tag of its watermark, and its lane.

    ``source`` names the writer (a stream shard; an export being backfilled)
    and picks its lane and tag; ``legacy_source`` is what the previous release
    keyed its markers on for the same records. A writer's segments are placed
    by their first record's sequence number (an exported item's place in its
    export), and it commits them one after the other, in that order.
    """

    source: str
    legacy_source: str
    label: str = field(default="", compare=False)  # what an operator calls it: the shard id, the export's ARN
    # Where its records can be read again: a stream shard's (None for an export).
    stream_arn: str | None = field(default=None, compare=False)
    shard_id: str | None = field(default=None, compare=False)

    @classmethod
    def of_shard(cls, stream_arn: str | None, shard_id: str | None) -> Writer:
        source = source_id(stream_arn, shard_id)
        return cls(source, source, shard_id or "", stream_arn, shard_id)

    @classmethod
    def of_export(cls, export_arn: str, rules: tuple[str, ...] = (), calendar: tuple[str, ...] = ()) -> Writer:
        """A whole export is one writer: an item touched by a thousand export files still holds one watermark.

        Counted for some rules only (a rule added later, its history backfilled), it is another writer for each
        set of rules, so counting the same export for other rules never finds this one's watermarks; so it is
        for the days and months of some calendar prefixes (``calendar``).
        """
        if calendar:
            source = source_id(export_arn + "#calendar=" + ",".join(sorted(calendar)), None)
            return cls(source, source, f"{export_arn} (calendar {', '.join(calendar)})")
        if not rules:
            source = source_id(export_arn, None)
            return cls(source, source, export_arn)
        source = source_id(export_arn + "#rules=" + ",".join(sorted(rules)), None)
        return cls(source, source, f"{export_arn} (rules {', '.join(rules)})")

    @classmethod
    def of_close(cls) -> Writer:
        """What closes days and months (tally.closing): one writer, whose every segment is at position 1, since
        each day or month item takes one close in its life."""
        source = source_id("tally:close", None)
        return cls(source, source, "close")

    @cached_property
    def tag(self) -> str:
        """The watermark's attribute name: 9 characters."""
        digest = bytes.fromhex(self.source)[:WATERMARK_TAG_BYTES]
        return WATERMARK_PREFIX + base64.urlsafe_b64encode(digest).decode("ascii")

    def position(self, segment: Segment) -> bytes:
        """Where ``segment`` starts in this writer's order, encoded so that DynamoDB compares it rightly."""
        return order_preserving(int(segment.first_sequence))

    def watermark(self, segment: Segment, climbed: bool = False) -> bytes:
        """What an item holds once it took ``segment``: its last record's position, then THROUGH (CLIMBED: an hour
        item written with the days of its counter kept).

        It still compares rightly with a position: the encodings are prefix-free,
        so it sorts before a later record's and after the same record's."""
        return order_preserving(int(segment.last_sequence)) + (CLIMBED if climbed else THROUGH)

    def watermark_bytes(self, segment: Segment) -> int:
        """What the watermark of ``segment`` adds to an item, by DynamoDB's rules: its name and its bytes."""
        return len(self.tag) + len(self.watermark(segment))

    def lane(self, lanes: int) -> int:
        return lane_of(self.source, lanes)


def order_preserving(number: int) -> bytes:
    """A non-negative integer as bytes that sort as the numbers do: its length, then big-endian digits.

    DynamoDB compares binary values byte by byte, unsigned. Stream sequence
    numbers run from 21 to 40 decimal digits (more than a Number's 38), and a
    21-digit one takes 10 bytes here where its text would take 22.
    """
    if number < 0:
        raise ValueError(f"positions are never negative, got {number}")
    body = number.to_bytes(max(1, (number.bit_length() + 7) // 8), "big")
    return bytes([len(body)]) + body


@dataclass(frozen=True)
class Watermark:
    """A watermark read back: a position, and whether it is the last record taken (this release) or the first
    record of the last segment taken (the previous release's)."""

    position: int
    through: bool
    # Written by a try that kept days for the item's counter (an hour item's late records are marked in it); the
    # previous release kept none.
    climbed: bool = False

    @classmethod
    def decode(cls, raw: bytes) -> Watermark:
        length = raw[0] if raw else 0
        body, rest = raw[1 : 1 + length], raw[1 + length :]
        if not raw or len(body) != length or rest not in (b"", THROUGH, CLIMBED):
            raise ValueError(f"not a watermark: {raw.hex()}")
        return cls(int.from_bytes(body, "big"), rest != b"", rest == CLIMBED)


def source_id(event_source_arn: str | None, shard_id: str | None) -> str:
    """A short, stable name for the stream shard (or export file) a segment came from."""
    text = f"{event_source_arn or ''}|{shard_id or ''}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:20]


@lru_cache(maxsize=1024)
def lane_of(source: str, lanes: int) -> int:
    """The lane a writer adds to: fixed per writer, so its retries write where its first try did."""
    return int(hashlib.sha256(source.encode("utf-8")).hexdigest()[:8], 16) % lanes


@dataclass(frozen=True)
class Update:
    """One bucket item's UpdateItem, and what to check its answer against."""

    item: Item
    request: dict[str, Any]
    tag: str
    position: bytes  # the segment's first record: a watermark at or past it makes the condition fail
    added: int = 0  # the count it adds
    resumes: int = 0  # how often the item was judged to hold part of the segment before this update
    unresolved: Unresolved | None = None  # the item's part it cannot place, which this update marks

    @property
    def name(self) -> str:
        counter, bucket = self.item
        return f"{counter} {bucket.sort_key}"


@dataclass(frozen=True)
class Unresolved:
    """An item left unresolved by a segment: the records of ``writer`` from ``first`` to ``last`` of which it
    may lack up to ``missing_at_most`` (those past its watermark ``seen`` that could not be placed), and why."""

    item: Item
    writer: Writer
    first: str
    last: str
    seen: int
    missing_at_most: int
    why: str

    @property
    def mark(self) -> str:
        """What the item itself keeps in its UNRESOLVED_ATTRIBUTE string set: short, since the item is read often."""
        return f"{self.writer.tag} {self.first}..{self.last} <={self.missing_at_most}"

    def record(self, settings: Settings) -> dict[str, Any]:
        """The unresolved record the repair lists (UNRESOLVED_PARTITION), kept as long as the bucket is."""
        counter, bucket = self.item
        key = f"{counter}|{bucket.sort_key}|{self.writer.tag}|{self.first}"
        fields = {
            COUNTS_TABLE.partition_key: UNRESOLVED_PARTITION,
            COUNTS_TABLE.sort_key: hashlib.sha256(key.encode("utf-8")).hexdigest()[:32],
            "counter": counter,
            "bucket": bucket.sort_key,
            "lane": str(self.writer.lane(settings.bucket_lanes)),
            "writer": self.writer.tag,
            "shard": self.writer.label,
            "records": f"{self.first}..{self.last}",
            "seen": str(self.seen),
            "missing_at_most": str(self.missing_at_most),
            "why": self.why[:1000],
            "mark": self.mark,
        }
        item: dict[str, Any] = {name: {"S": value} for name, value in fields.items()}
        item[TTL_ATTRIBUTE] = {"N": str(bucket.ttl_seconds(settings))}
        return item


@dataclass(frozen=True)
class ReadRecords:
    """Read ``writer``'s records from ``first`` through ``through`` again from its stream; the driver answers with
    a RecordsAgain. ``first`` None: from the shard's trim horizon, at most ``at_most`` records (the first ones)."""

    writer: Writer
    first: str | None
    through: str
    at_most: int | None = None


# Records read from a shard's trim horizon to tell whether an anchor's segment was its first counted one.
ANCHOR_CHECK_RECORDS = 1000
# An anchor outlives what it judges: a shard of the previous release is read (or read again) for a day at most
# after its last record, and a shard lives a few hours.
ANCHOR_TTL_MS = 8 * 24 * 3_600_000


@dataclass(frozen=True)
class Anchor:
    """Where this release began to meet a shard's items that hold the previous release's watermarks.

    Such a watermark names the first record F of the last segment its item took,
    not the segment's end. The first segment of this release on the shard to meet
    one ([first..last], written here before any of them is judged) tells the rest:
    if it goes on from where the previous release stopped (``trusted``), an item
    still holding F took every record of the shard that touches it before
    ``first``, and none after (a segment between that touched it would have met it;
    the previous release's segment retried is this very one, whose end is ``last``
    when F is ``first``). A segment that starts at the shard's first counted record
    may be the shard read again from its trim horizon instead (a mapping created
    again): not trusted, and such items are left unresolved, low and marked.
    """

    first: int
    last: int
    trusted: bool
    why: str = ""

    def holds_through(self, old_position: int) -> int | None:
        """The last position an item holding the previous release's watermark ``old_position`` took (it holds
        every record up to there that touches it, none after); None where the anchor cannot tell."""
        if not self.trusted or old_position > self.first:
            return None
        return self.last if old_position == self.first else self.first - 1

    def item(self, key: Mapping[str, str], expires_ms: int) -> dict[str, Any]:
        fields = {**key, "first": str(self.first), "last": str(self.last), "why": self.why[:1000]}
        item: dict[str, Any] = {name: {"S": value} for name, value in fields.items()}
        item["trusted"] = {"BOOL": self.trusted}
        item[TTL_ATTRIBUTE] = {"N": str(expires_ms // 1000)}
        return item

    @classmethod
    def of_item(cls, item: Mapping[str, Any]) -> Anchor:
        return cls(int(item["first"]["S"]), int(item["last"]["S"]), bool(item["trusted"]["BOOL"]), item["why"]["S"])


def anchor_key(writer: Writer) -> dict[str, str]:
    return {COUNTS_TABLE.partition_key: ANCHOR_PARTITION, COUNTS_TABLE.sort_key: writer.source}


def anchor_of(segment: Segment, before: RecordsAgain, settings: Settings) -> Anchor:
    """The anchor ``segment`` makes, from the shard's first records ``before`` it: trusted only where one of them
    is counted (the segment does not start the shard's counted records)."""
    first, last = int(segment.first_sequence), int(segment.last_sequence)
    if before.records is None:
        return Anchor(first, last, False, f"the shard's first records could not be read: {before.why_not}")
    counted = held_records(before.records, settings)
    if counted:
        return Anchor(first, last, True, f"record {counted[0][0]} before it is counted: it goes on reading the shard")
    return Anchor(first, last, False, f"it starts the shard's counted records (none of its first {len(before.records)} "
                  "before it counts): it may be the shard read again from its trim horizon")


@dataclass(frozen=True)
class ReadAnchor:
    """Read a writer's anchor item (strongly consistent); the driver answers with it, or None."""

    key: dict[str, str]


@dataclass(frozen=True)
class PutAnchor:
    """Put this anchor item unless the writer has one; the driver answers with the one the table holds then."""

    item: dict[str, Any]


@dataclass(frozen=True)
class ReadMarkers:
    """Tell which of these marker items of the previous release exist (strongly consistent reads)."""

    keys: list[dict[str, str]]


@dataclass(frozen=True)
class Send:
    """Send these updates, at once if the driver can; it answers with one Answer per update, in order."""

    updates: list[Update]


@dataclass(frozen=True)
class Put:
    """Put these items (BatchWriteItem, 25 a request); the driver answers with the items left unprocessed,
    throttled requests' included."""

    items: list[dict[str, Any]]


@dataclass(frozen=True)
class Pause:
    """Wait this long before the next step."""

    seconds: float


CommitStep = ReadMarkers | ReadRecords | ReadAnchor | PutAnchor | Send | Put | Pause
# What answers a ReadRecords: dynamo/stream.py's ShardRecords over the Streams API, or a test's stream.
ReadAgain = Callable[[ReadRecords], RecordsAgain]


# What late records add to an item's late marks: count, units (None: no sum), bins (None: none).
Late = tuple[int, int | None, dict[str, int] | None]


def additions(delta: Delta, late: Late | None = None) -> dict[str, int | Decimal]:
    """What one bucket item of a segment adds, by attribute: its count, its sum for a summing
    counter, one count per histogram bin for a histogram rule, and ``late``'s part of them as the
    item's late marks (core/ladder.py), in the same update so that a close never sees one without the other."""
    _, count, units, bins, _sketch = delta
    added: dict[str, int | Decimal] = {COUNT_ATTRIBUTE: count}
    if units is not None:
        added[SUM_ATTRIBUTE] = decimal_of(units)
    if bins:
        added.update(bins)
    if late is not None:
        late_count, late_units, late_bins = late
        added[LATE_COUNT_ATTRIBUTE] = late_count
        if late_units is not None:
            added[LATE_SUM_ATTRIBUTE] = decimal_of(late_units)
        for name, value in (late_bins or {}).items():
            added[late_bin(name)] = value
    return added


def late_of(segment: Segment, item: Item, after: int | None = None) -> Late | None:
    """What the segment's late records add to ``item``'s late marks: all of it, or that of the records held past
    position ``after`` (the rest of an item that took the segment's first part). None for none."""
    mark = (late_partition(item[0]), item[1])
    if mark not in segment.deltas:
        return None
    if after is None:
        return segment.deltas[mark], segment.sums.get(mark), segment.bins.get(mark)
    records = [(units, bin) for position, units, bin in _held_for(segment, mark) if position > after]
    if not records:
        return None
    _, count, units, bins, _ = _delta_of(segment, mark, records)
    return count, units, bins


def bucket_update(
    table_name: str,
    key: Mapping[str, str],
    added: Mapping[str, int | Decimal],
    ttl_seconds: int,
    tag: str,
    position: bytes,
    watermark: bytes,
    seen: bytes | None = None,
    mark: str | None = None,
    sized: bool = False,
) -> dict[str, Any]:
    """The UpdateItem request that adds ``added`` (attribute -> amount, one ADD term each) to one item, once.

    Every aggregate of a bucket goes through here: a new one is one more
    entry of ``added``, and shares the item's watermark and its condition.
    Histogram bins (up to MAX_ITEM_BINS) take the short placeholders of
    ``bin_additions``, so that all of them fit DynamoDB's 4 KB expression.
    ``seen``: the rest of a segment, sent only if the item still holds that watermark. ``mark``: added to the
    item's UNRESOLVED_ATTRIBUTE string set (an item left unresolved). ``sized``: a shard's update, which also fails
    on the previous release's watermarks (SIZED_UPDATE_CONDITION).
    """
    names = {"#ttl": TTL_ATTRIBUTE, "#w": tag}
    values: dict[str, Any] = {":ttl": {"N": str(ttl_seconds)}, ":to": {"B": watermark}}
    condition = RESUME_CONDITION
    if seen is None:
        values[":w"] = {"B": position}
        condition = UPDATE_CONDITION
        if sized:
            values[":n"] = {"N": str(len(position))}
            condition = SIZED_UPDATE_CONDITION
    else:
        values[":seen"] = {"B": seen}
    terms = []
    bins: dict[str, int] = {}
    for index, (attribute, amount) in enumerate(added.items()):
        if is_bin(attribute) or is_late_bin(attribute):
            bins[attribute] = int(amount)
            continue
        names[f"#a{index}"] = attribute
        # DynamoDB adds numbers exactly; amounts.py keeps every bucket's sum within its 38 digits.
        values[f":a{index}"] = {"N": str(amount) if type(amount) is int else text_of(amount)}
        terms.append(f"#a{index} :a{index}")
    if mark is not None:
        names["#u"], values[":u"] = UNRESOLVED_ATTRIBUTE, {"SS": [mark]}
        terms.append("#u :u")
    adds = ", ".join(terms) + (bin_additions(bins, names, values) if bins else "")
    return {
        "TableName": table_name,
        "Key": {name: {"S": value} for name, value in key.items()},
        "UpdateExpression": f"ADD {adds} SET #ttl = if_not_exists(#ttl, :ttl), #w = :to",
        "ConditionExpression": condition,
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
        # The count after the update tells its writer whether it created the item (free: a write's units
        # do not depend on what it returns).
        "ReturnValues": "UPDATED_NEW",
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        # The units it consumed, the item's size in started KB: how the items grow with the shards (free too).
        "ReturnConsumedCapacity": "TOTAL",
    }


def segment_updates(
    segment: Segment, writer: Writer, table_name: str, settings: Settings, skip: Iterable[Item] = ()
) -> tuple[list[Update], list[Update]]:
    """The segment's updates in two phases, hour items first, then minute items; ``skip`` leaves items out."""
    skipped = set(skip)
    position = writer.position(segment)  # once a segment, not an item
    watermarks = {climbed: writer.watermark(segment, climbed) for climbed in (False, True)}
    hours: list[Update] = []
    minutes: list[Update] = []
    for delta in segment.ordered_deltas():
        if delta[0] in skipped or delta[0][0].startswith(LATE_PREFIX):  # marks ride on their items' updates
            continue
        watermark = watermarks[climbs(delta[0], settings)]
        update = item_update(delta, writer, table_name, settings, position, watermark, late=late_of(segment, delta[0]))
        (hours if delta[0][1].kind == "H" else minutes).append(update)
    return hours, minutes


def climbs(item: Item, settings: Settings) -> bool:
    """Whether ``item`` is an hour whose late records these settings mark (its counter keeps days): what the end of
    its watermark says (CLIMBED), so that a retry with other settings tells which of its records are marked."""
    return item[1].kind == "H" and settings.keeps_calendar(item[0])


def item_update(
    delta: Delta,
    writer: Writer,
    table_name: str,
    settings: Settings,
    position: bytes,
    watermark: bytes,
    seen: bytes | None = None,
    unresolved: Unresolved | None = None,
    late: Late | None = None,
) -> Update:
    """One bucket item's update for ``delta`` of the segment at ``position`` that leaves ``watermark`` (the rest
    of it, on the watermark ``seen``; marking the item ``unresolved``), with ``late``'s share as its late marks."""
    counter, bucket = delta[0]
    key = {
        COUNTS_TABLE.partition_key: counter,
        COUNTS_TABLE.sort_key: lane_sort_key(bucket.sort_key, writer.lane(settings.bucket_lanes)),
    }
    mark = None if unresolved is None else unresolved.mark
    request = bucket_update(
        table_name, key, additions(delta, late), bucket.ttl_seconds(settings), writer.tag, position, watermark, seen, mark,
        sized=writer.shard_id is not None,
    )
    return Update(delta[0], request, writer.tag, position, delta[1], unresolved=unresolved)


def untaken(
    segment: Segment, item: Item, watermark: Watermark, writer: Writer, anchor: Anchor | None = None
) -> Delta | None:
    """What ``item`` has not taken of ``segment``, its watermark for the segment's writer being ``watermark``
    (at or past the segment's first record, or the previous release's); None when it took all of it.

    The item holds every record of the writer up to its watermark. The
    segment knows where each record it holds lies; those it carried in the
    window state it knows only as sums, anywhere from its first record to
    ``unheld_through``. Raises Unsplit where the watermark falls among records
    known only as sums (``carried``: reading them again may resolve it), or where
    a previous release's watermark names another segment that overlaps this one
    and ``anchor`` (the shard's, None for an export) cannot tell where that ended.
    """
    held = list(_held_for(segment, item))
    carried = segment.deltas[item] - len(held)
    if not held and not carried:  # a day or month the segment's late records reach no more (without_unmarked)
        return None
    first = int(segment.first_sequence)
    carried_through = segment.unheld_through if segment.unheld_through is not None else int(segment.last_sequence)
    item_first = first if carried else held[0][0]
    item_last = held[-1][0] if held else carried_through
    at = watermark.position
    if not watermark.through:  # the previous release's: the first record of the segment it took last
        through = None if anchor is None else anchor.holds_through(at)
        if through is None:
            if at >= item_last or (at == first and anchor is None):
                return None
            why = "" if anchor is None else f"; the shard's anchor at {anchor.first} cannot tell: {anchor.why}"
            raise Unsplit(f"its watermark, of the previous release, names a segment from {at} whose end it does "
                          f"not keep{why}", carried=False)
        at = through
    if at >= item_last:
        return None
    if at < item_first:
        return segment_delta(segment, item)
    if carried and at < carried_through:
        raise Unsplit(f"records {first}..{carried_through} came in the window state as sums", carried=True)
    return _delta_of(segment, item, [(units, bin) for position, units, bin in held if position > at])


def _delta_of(segment: Segment, item: Item, records: list[tuple[int | None, str | None]]) -> Delta:
    """The delta some of the segment's held records add to ``item``: their count, units and bins."""
    units = sum(u for u, _ in records if u is not None) if item in segment.sums else None
    bins = dict(Counter(bin for _, bin in records if bin is not None)) or None
    return (item, len(records), units, bins, None)


def segment_delta(segment: Segment, item: Item) -> Delta:
    """The whole delta ``segment`` adds to ``item`` (its sketch aside: sketches merge on their own items)."""
    return (item, segment.deltas[item], segment.sums.get(item), segment.bins.get(item), None)


def _held_for(segment: Segment, item: Item) -> Iterator[tuple[int, int | None, str | None]]:
    """The held records that add to ``item``: position, units, histogram bin; in stream order."""
    if segment.held is not None:
        yield from segment.held.of_item(item)


def unresolved_rest(segment: Segment, item: Item, watermark: Watermark, writer: Writer, why: str) -> tuple[Delta, Unresolved]:
    """What an item ``untaken`` could not split is sent instead: the records it surely has not taken (those held
    past both its watermark and the records carried as sums; none past a previous release's watermark, whose
    segment's end is unknown), and the Unresolved that bounds the rest it may lack."""
    held = list(_held_for(segment, item))
    at = watermark.position
    if watermark.through:
        unheld = segment.unheld_through if segment.unheld_through is not None else at
        sure = [(units, bin) for position, units, bin in held if position > max(at, unheld)]
    else:
        sure = []
    taken = sum(1 for position, _, _ in held if position <= at)
    unresolved = Unresolved(
        item, writer, segment.first_sequence, segment.last_sequence, at,
        missing_at_most=segment.deltas[item] - len(sure) - taken, why=why,
    )
    return _delta_of(segment, item, sure), unresolved


def count_of(item: Mapping[str, Any] | None) -> int | None:
    """The count of an item as DynamoDB returned it (UPDATED_NEW, ALL_OLD), None when it holds none."""
    count = (item or {}).get(COUNT_ATTRIBUTE)
    return None if count is None else int(count["N"])


def is_born(update: Update, answer: Answer) -> bool:
    """Whether the update created its item, as far as its answer tells: applied with a count equal to what it
    added, or found already applied or taken in part by this writer (a lost try, or the previous release's in a
    failed invocation, may have created it without its directory entry)."""
    if answer.outcome is Outcome.ALREADY_APPLIED or (answer.outcome is Outcome.APPLIED and update.resumes):
        return True
    return answer.outcome is Outcome.APPLIED and answer.count == update.added


def condition_failed(old_item: Mapping[str, Any] | None, tag: str, position: bytes) -> Answer:
    """What a failed condition means, from the item as it was (ALL_OLD): taken (to be judged by ``untaken``,
    with the watermark and count it returned), or a failure.

    Only this writer's watermark at or past the segment's first record, or one
    no longer than that position (SIZED_UPDATE_CONDITION: the previous
    release's, or a shorter one of this release), makes it "taken"; a missing
    item, a missing or other watermark is a failure, never a silent skip.
    """
    watermark = (old_item or {}).get(tag, {}).get("B")
    if watermark is not None and (bytes(watermark) >= position or len(bytes(watermark)) <= len(position)):
        return Answer(Outcome.TAKEN, count_of(old_item), bytes(watermark))
    return Answer(Outcome.FAIL)


def legacy_parts(segment: Segment) -> list[list[Item]]:
    """The previous release's transactions of a segment: its items in sort-key order, 99 at a time."""
    items = [delta[0] for delta in segment.ordered_deltas()]
    return [items[start : start + LEGACY_PART_ITEMS] for start in range(0, len(items), LEGACY_PART_ITEMS)]


def legacy_marker_key(segment: Segment, legacy_source: str, part: int) -> dict[str, str]:
    """The marker the previous release put beside transaction ``part`` of ``segment``."""
    return {
        COUNTS_TABLE.partition_key: LEGACY_MARKER_PREFIX + segment.first_sequence,
        COUNTS_TABLE.sort_key: f"{legacy_source}#{part}",
    }


def commit_steps(
    segment: Segment,
    writer: Writer,
    table_name: str,
    settings: Settings,
    backoff: Callable[[], Backoff],
    *,
    after_previous_release: bool = False,
) -> Generator[CommitStep, Sequence[bool] | Sequence[Outcome] | None, CommitResult]:
    """Commit a segment exactly once: the steps, and the result once done.

    ``after_previous_release``: the segment may have been committed in part by
    the previous release; its transactions' markers say which items to skip.
    Each phase sends its updates; the throttled ones are sent again after a
    pause, up to ``backoff().attempts`` rounds, then RetriesExhausted is
    raised so that Lambda retries the invocation. The driver raises on FAIL.
    An item that took part of the segment is sent the rest (``untaken``); where
    that needs records the window state carried as sums, they are read again
    (one ReadRecords a segment at most), and where they cannot be, the item is
    left unresolved (its record put before the update that marks it).
    """
    skip: list[Item] = []
    if after_previous_release:
        parts = legacy_parts(segment)
        keys = [legacy_marker_key(segment, writer.legacy_source, part) for part in range(len(parts))]
        found = yield ReadMarkers(keys[:1])  # transactions went in order: none if not the first
        if found and found[0] and len(keys) > 1:
            found = yield ReadMarkers(keys)
        for part, exists in zip(parts, found or ()):
            if exists:
                skip.extend(part)
    applied, already, retries, resumed = 0, len(skip), 0, 0
    units, largest_units = 0.0, 0.0
    born: list[Item] = [item for item in skip if item[1].kind == "H"]  # found applied, by the previous release
    lane = writer.lane(settings.bucket_lanes)
    ranks: list[dict[str, Any]] = []
    ranked = 0
    overlap = _Overlap(segment)
    # Hour items that hold late records of the segment unmarked, through a position (None: all of them): taken by
    # a try that kept no days for their counter (the previous release's among them).
    unmarked: dict[Item, int | None] = {item: None for item in skip if _has_marks(segment, item)}
    for number, phase in enumerate(segment_updates(segment, writer, table_name, settings, skip)):
        if number == 1 and unmarked:  # the days and months, less what those hours hold unmarked
            overlap.segment = without_unmarked(overlap.segment, unmarked)
            phase = segment_updates(overlap.segment, writer, table_name, settings, skip)[1]
        pending = phase
        for delay in backoff().delays():
            if not pending:
                break
            if delay:
                yield Pause(delay)
            answers = yield Send(pending)
            if answers is None or len(answers) != len(pending):
                raise ValueError("a Send step needs one answer per update")
            rests = yield from overlap.rests(pending, answers, writer, table_name, settings, backoff)
            retry = []
            for update, answer in zip(pending, answers):
                outcome = answer.outcome if isinstance(answer, Answer) else None
                if outcome is Outcome.TAKEN:
                    rest = rests[id(update)]
                    _note_unmarked(unmarked, update, overlap.watermark_of(answer), rest, overlap.segment)
                    if rest is not None:
                        resumed += update.resumes == 0
                        retry.append(rest)
                        continue
                    answer = Answer(Outcome.ALREADY_APPLIED, answer.count)
                    already += 1
                elif outcome is Outcome.APPLIED:
                    applied += 1
                    if update.unresolved is not None:
                        overlap.unresolved.append(update.unresolved)
                    units += answer.units or 0.0
                    largest_units = max(largest_units, answer.units or 0.0)
                elif outcome is Outcome.RETRY:
                    retry.append(update)
                    continue
                else:
                    raise ValueError(f"a commit step needs an answer of its update, not {answer!r}")
                if update.item[1].kind == "H":
                    if is_born(update, answer):
                        born.append(update.item)
                    level = rank_level(update, answer, settings)
                    if level is not None:
                        ranks.append(rank_item(update.item[0], update.item[1], lane, level, settings))
            retries += sum(not update.resumes for update in retry)
            pending = retry
        if pending:
            raise RetriesExhausted(
                f"{len(pending)} bucket updates of segment {segment.first_sequence} still throttled after every retry"
            )
        if ranks:  # the hours' levels, before the minutes: the index lags its counts by one round trip
            ranked += yield from put_steps(ranks, backoff, f"rank records of segment {segment.first_sequence}")
            ranks = []
    return CommitResult(
        applied,
        already,
        retries,
        born=tuple(born),
        ranked=ranked,
        resumed=resumed,
        overlaps_read=overlap.reads,
        stream_requests=overlap.stream_requests,
        unresolved=tuple(overlap.unresolved),
        write_units=units,
        largest_write_units=largest_units,
    )


def _has_marks(segment: Segment, item: Item) -> bool:
    """Whether ``item`` is an hour that the segment's late records mark."""
    return item[1].kind == "H" and (late_partition(item[0]), item[1]) in segment.deltas


def _note_unmarked(
    unmarked: dict[Item, int | None], update: Update, watermark: Watermark | None, rest: Update | None, segment: Segment
) -> None:
    """Where an hour item marked by the segment's late records was found taken by a try that kept no days for its
    counter (its watermark does not end with CLIMBED), the records it took unmarked: all of them where it took the
    whole segment, else those through its watermark (or all it was not sent, where left unresolved: low, and
    marked so, never twice)."""
    if not _has_marks(segment, update.item) or watermark is None:
        return
    if watermark.climbed or unmarked.get(update.item, 0) is None:
        return
    through: int | None = None  # the whole segment
    if rest is not None and rest.unresolved is None:
        through = watermark.position
    elif rest is not None and watermark.through:  # left unresolved: what it was not sent, taken or lacking
        through = max(watermark.position, segment.unheld_through or watermark.position)
    previous = unmarked.get(update.item)
    unmarked[update.item] = through if through is None or previous is None else max(previous, through)


def without_unmarked(segment: Segment, unmarked: Mapping[Item, int | None]) -> Segment:
    """``segment`` less, in the days and months its late records add to (and in those days' marks), the records
    that hour items hold unmarked (``unmarked``: hour item -> through which position, None for all). A close sums
    an hour less its marks, so such a record reaches its day from its hour; added directly too, it would count
    twice. Their items are still written, with what is left (nothing, maybe): their watermarks then tell a later
    try that the segment reached them. ValueError where the records cannot be told apart (they came in the window
    state as sums, the hour took part of them)."""
    unheld = segment.unheld_through
    left_out: dict[str, set[int]] = {}  # counter -> positions of the held records left out of its long items
    carried: dict[Item, list[Any]] = {}  # long item -> [count, units, bins] of carried records left out
    affected: set[Item] = set()
    zones: dict[str, set[str]] = {}
    for counter, bucket in segment.deltas:
        if bucket.kind in (DAY, MONTH) and not counter.startswith(LATE_PREFIX):
            zones.setdefault(counter, set()).add(bucket.zone)
    for (counter, hour), through in unmarked.items():
        mark = (late_partition(counter), hour)
        held = list(_held_for(segment, mark))
        left_out.setdefault(counter, set()).update(p for p, _, _ in held if through is None or p <= through)
        count = segment.deltas[mark] - len(held)
        if count and through is not None and (unheld is None or through < unheld):
            raise ValueError(f"{counter} {hour.sort_key} took late records that came in the window state as sums unmarked, "
                             f"in part: what its days hold of them cannot be told")
        units = None if mark not in segment.sums else segment.sums[mark] - sum(u for _, u, _ in held if u is not None)
        bins = Counter(segment.bins.get(mark, {}))
        bins.subtract(b for _, b, _ in held if b is not None)
        for zone in sorted(zones.get(counter, ())):
            day = Bucket(DAY, local_day_of_hour(hour.index, zone), zone)
            month = Bucket(MONTH, month_index(day_date(day.index)), zone)
            for item in ((counter, day), (counter, month), (late_partition(counter), day)):
                if item not in segment.deltas:
                    continue
                affected.add(item)
                if count:
                    total = carried.setdefault(item, [0, 0, Counter()])
                    total[0] += count
                    total[1] += units or 0
                    total[2].update(bins)
    deltas, sums, bins_of = dict(segment.deltas), dict(segment.sums), {k: dict(v) for k, v in segment.bins.items()}

    for item in affected:
        positions = left_out.get(marked_counter(item[0]), set())
        out = [(u, b) for p, u, b in _held_for(segment, item) if p in positions]
        count, units, bins = carried.get(item, [0, 0, Counter()])
        deltas[item] -= count + len(out)
        if item in sums:
            sums[item] -= units + sum(u for u, _ in out if u is not None)
        if item in bins_of:
            removed = Counter(bins) + Counter(b for _, b in out if b is not None)
            bins_of[item] = {name: value - removed[name] for name, value in bins_of[item].items() if value != removed[name]}
            if not bins_of[item]:
                del bins_of[item]
        if deltas[item] < 0 or any(value < 0 for value in bins_of.get(item, {}).values()):
            raise ValueError(f"{item[0]} {item[1].sort_key} holds fewer late records than the hours left unmarked")
    held = segment.held
    if held is not None and affected:
        held = HeldRecords.of(
            (position, [c for c in contributions if not (c[1] in affected and position in left_out.get(marked_counter(c[1][0]), ()))])
            for position, contributions in held.records()
        )
    return dataclasses.replace(segment, deltas=deltas, sums=sums, bins=bins_of, held=held)


class _Overlap:
    """How one commit sends items what they have not taken of its segment: from the records it holds, from its
    carried records read again (once), or, where neither places them, as unresolved items."""

    def __init__(self, segment: Segment) -> None:
        self.segment = segment
        self.reads = 0
        self.stream_requests = 0
        self.why_not_read: str | None = None  # why the carried records could not be used, once tried
        self.unresolved: list[Unresolved] = []
        self.anchor: Anchor | None = None  # the shard's, once an item holding the previous release's watermark is met

    def rests(
        self,
        pending: Sequence[Update],
        answers: Sequence[Any],
        writer: Writer,
        table_name: str,
        settings: Settings,
        backoff: Callable[[], Backoff],
    ) -> Generator[CommitStep, Any, dict[int, Update | None]]:
        """The update each taken answer leads to (None: the item took it all), by id of the update answered."""
        rests: dict[int, Update | None] = {}
        unsplit: list[tuple[Update, Answer, Unsplit]] = []
        if self.anchor is None and writer.shard_id is not None and any(
            isinstance(answer, Answer) and answer.watermark is not None and not Watermark.decode(answer.watermark).through
            for answer in answers
        ):
            yield from self._place_anchor(writer, settings)
        for update, answer in zip(pending, answers):
            if isinstance(answer, Answer) and answer.outcome is Outcome.TAKEN:
                try:
                    rests[id(update)] = self._rest_of(update, answer, writer, table_name, settings)
                except Unsplit as error:
                    unsplit.append((update, answer, error))
        if not unsplit:
            return rests
        if any(error.carried for _, _, error in unsplit) and self.why_not_read is None:
            yield from self._read_carried(writer, settings)
        marked: list[Update] = []
        for update, answer, error in unsplit:
            try:
                rests[id(update)] = self._rest_of(update, answer, writer, table_name, settings)
            except Unsplit as still:
                why = f"{still}; {self.why_not_read}" if still.carried and self.why_not_read else str(still)
                marked.append(self._unresolved_update(update, answer, writer, table_name, settings, why))
                rests[id(update)] = marked[-1]
        # The records first: an item marked and then lost to a crash would never be listed for the repair.
        records = [update.unresolved.record(settings) for update in marked if update.unresolved is not None]
        yield from put_steps(list({item["sk"]["S"]: item for item in records}.values()), backoff, "unresolved records")
        return rests

    def _place_anchor(self, writer: Writer, settings: Settings) -> Generator[CommitStep, Any, None]:
        """The shard's anchor: the one it has, or this segment, checked against the shard's first records."""
        key = anchor_key(writer)
        found = yield ReadAnchor(key)
        if found is None:
            segment = self.segment
            before = yield ReadRecords(writer, None, str(int(segment.first_sequence) - 1), ANCHOR_CHECK_RECORDS)
            if not isinstance(before, RecordsAgain):
                raise ValueError(f"a ReadRecords step needs a RecordsAgain, not {before!r}")
            self.stream_requests += before.requests
            anchor = anchor_of(segment, before, settings)
            found = yield PutAnchor(anchor.item(key, segment.first_arrival_ms + ANCHOR_TTL_MS))
        self.anchor = Anchor.of_item(found)

    def watermark_of(self, answer: Answer) -> Watermark | None:
        """The watermark a taken answer showed, as this release's where the previous release's is placed by the
        shard's anchor (the position through which its item holds the shard's records)."""
        if answer.watermark is None:
            return None
        watermark = Watermark.decode(answer.watermark)
        through = None if watermark.through or self.anchor is None else self.anchor.holds_through(watermark.position)
        return watermark if through is None else Watermark(through, True)

    def _read_carried(self, writer: Writer, settings: Settings) -> Generator[CommitStep, Any, None]:
        segment = self.segment
        if segment.carried_last is None or writer.shard_id is None:
            self.why_not_read = "the records are not held (an export's segment)"
            return
        self.reads += 1
        again = yield ReadRecords(writer, segment.first_sequence, segment.carried_last)
        if not isinstance(again, RecordsAgain):
            raise ValueError(f"a ReadRecords step needs a RecordsAgain, not {again!r}")
        self.stream_requests += again.requests
        if again.records is None:
            self.why_not_read = f"reading them again from the stream failed: {again.why_not}"
            return
        try:
            self.segment = with_carried_records(segment, again.records, settings)
            self.why_not_read = ""
        except Unmatched as error:
            self.why_not_read = f"the records read again from the stream differ: {error}"

    def _rest_of(
        self, update: Update, answer: Answer, writer: Writer, table_name: str, settings: Settings
    ) -> Update | None:
        """The update that sends an item what it has not taken of the segment, on the watermark it showed; None
        when it took everything. A watermark moving on under the resumed update (another reader of the same
        shard at work) is judged again, MAX_RESUMES times at most."""
        if answer.watermark is None:
            raise ValueError(f"a taken answer carries the item's watermark: {answer!r}")
        if update.resumes >= MAX_RESUMES:
            raise RetriesExhausted(f"{update.name}: its watermark kept moving under {MAX_RESUMES} resumed updates")
        watermark = self.watermark_of(answer)
        assert watermark is not None
        rest = untaken(self.segment, update.item, watermark, writer, self.anchor)
        if rest is None:
            return None
        whole = rest[1] == self.segment.deltas[update.item]
        late = late_of(self.segment, update.item, None if whole else watermark.position)
        watermark_to = writer.watermark(self.segment, climbs(update.item, settings))
        resend = item_update(
            rest, writer, table_name, settings, update.position, watermark_to, seen=answer.watermark, late=late,
        )
        return dataclasses.replace(resend, resumes=update.resumes + 1)

    def _unresolved_update(
        self, update: Update, answer: Answer, writer: Writer, table_name: str, settings: Settings, why: str
    ) -> Update:
        watermark = self.watermark_of(answer)
        assert watermark is not None
        rest, unresolved = unresolved_rest(self.segment, update.item, watermark, writer, why)
        unheld = self.segment.unheld_through if self.segment.unheld_through is not None else watermark.position
        late = late_of(self.segment, update.item, max(watermark.position, unheld)) if watermark.through and rest[1] else None
        # The previous release's watermark, placed by no anchor, stays: the item may hold records past this segment
        # (up to where that release's segment ended), so every later segment of the shard is judged against it too.
        watermark_to = writer.watermark(self.segment, climbs(update.item, settings)) if watermark.through else answer.watermark
        resend = item_update(
            rest, writer, table_name, settings, update.position, watermark_to, seen=answer.watermark, unresolved=unresolved,
            late=late,
        )
        return dataclasses.replace(resend, resumes=update.resumes + 1)


def rank_level(update: Update, answer: Answer, settings: Settings) -> int | None:
    """The level to record for an hour item an update answered: the one it carried the item into, or, found
    already applied, the item's own (its lost first try may have crossed it); None for nothing to record,
    and always for a counter outside the ranked prefixes."""
    if answer.count is None or not is_ranked(update.item[0], settings):
        return None
    if answer.outcome is Outcome.ALREADY_APPLIED:
        return level_of(answer.count)
    return crossed_level(answer.count, update.added)


def put_steps(
    items: list[dict[str, Any]], backoff: Callable[[], Backoff], what: str
) -> Generator[Put | Pause, Sequence[dict[str, Any]] | None, int]:
    """Put idempotent items, those left unprocessed again after a pause; RetriesExhausted when some never are."""
    pending = items
    for delay in backoff().delays():
        if not pending:
            break
        if delay:
            yield Pause(delay)
        left = yield Put(pending)
        pending = list(left or ())
    if pending:
        raise RetriesExhausted(f"{len(pending)} {what} still unprocessed after every retry")
    return len(items)


def bin_additions(bins: dict[str, int], names: dict[str, str], values: dict[str, Any]) -> str:
    """The ``ADD`` terms of an item's histogram bins (", #pAb :b0, ..."); their names and values go in place.

    Placeholders stay short (a bin's own name, its sign spelled p, n or z; one value per distinct
    count), so that MAX_ITEM_BINS bins take at most 12 bytes each of DynamoDB's 4 KB per expression.
    """
    placeholders: dict[int, str] = {}
    terms = []
    for name, count in bins.items():
        value = placeholders.get(count)
        if value is None:
            value = placeholders[count] = f":b{len(placeholders)}"
            values[value] = {"N": str(count)}
        if name.startswith(LATE_BIN_PREFIX):  # a late mark's share of a bin: #Lp2Q
            placeholder = "#L" + _SIGN_LETTER[name[1]] + name[2:]
        else:
            placeholder = "#" + _SIGN_LETTER[name[0]] + name[1:]
        names[placeholder] = name
        terms.append(f", {placeholder} {value}")
    return "".join(terms)


_SIGN_LETTER = {POSITIVE: "p", NEGATIVE: "n", ZERO_BIN: "z"}
