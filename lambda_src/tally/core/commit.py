"""Segment part -> one TransactWriteItems request, what its cancellation means, and when to try again. No I/O.

Each part of a segment (at most 99 bucket items) is one transaction: it puts a
marker item under a key derived from the segment's source, its first record
and the part's number (condition: it must not exist yet) and adds every delta
to its bucket (the count, and the sum of a summing counter's bucket). Either
all of it happens once, or none of it: a retried part finds its marker and is
skipped.

``commit_steps`` is the whole commit of a segment as a sequence of steps
(send this transaction, wait this long) driven by whoever does the I/O:
``CountsTable`` against DynamoDB with real sleeps, the scale model against a
simulated DynamoDB in simulated time. Both run the same policy.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from boto3.dynamodb.types import TypeSerializer

from tally.core.amounts import decimal_of, text_of
from tally.core.buckets import lane_sort_key
from tally.core.histograms import NEGATIVE, POSITIVE, ZERO_BIN
from tally.core.retry import Backoff
from tally.core.segments import Delta, Segment
from tally.core.settings import DAY_MS, STREAM_RETENTION_MS, Settings
from tally.core.tables import COUNT_ATTRIBUTE, COUNTS_TABLE, SUM_ATTRIBUTE, TTL_ATTRIBUTE

MARKER_PREFIX = "#segment#"
# Markers must outlive every retry of their records (stream retention), with a day to spare.
MARKER_LIFETIME_MS = STREAM_RETENTION_MS + DAY_MS

_serializer = TypeSerializer()

_RETRYABLE_REASONS = frozenset(
    {"TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded", "RequestLimitExceeded"}
)


class Outcome(str, Enum):
    COMMITTED = "committed"  # the transaction succeeded
    DUPLICATE = "duplicate"  # the marker exists: this segment was committed before
    RETRY = "retry"  # conflict or throttling: try again after a pause
    FAIL = "fail"  # anything else: must not be mistaken for either


@dataclass(frozen=True)
class CommitResult:
    transactions: int  # parts of the segment committed now
    duplicates: int  # parts found committed before (a retry)
    retries: int  # conflicted or throttled attempts
    sketches_written: int = 0  # the distinct counters' sketch items, merged after the counts (sketch_writes.py)
    sketch_conflicts: int = 0  # sketch writes that lost a race to another writer and merged again


class RetriesExhausted(RuntimeError):
    """DynamoDB kept pushing back after every retry."""


@dataclass(frozen=True)
class Attempt:
    """Send this TransactWriteItems; the driver answers with its Outcome (and raises on FAIL)."""

    name: str  # the part, for logs: first sequence number and part number
    items: list[dict[str, Any]]


@dataclass(frozen=True)
class Pause:
    """Wait this long before the next step."""

    seconds: float


CommitStep = Attempt | Pause


def commit_steps(
    segment: Segment,
    source: str,
    table_name: str,
    settings: Settings,
    backoff: Callable[[], Backoff],
) -> Generator[CommitStep, Outcome | None, CommitResult]:
    """Commit every part of a segment exactly once, in order: the steps, and the result once done.

    Each part is tried up to ``backoff().attempts`` times, pausing as the
    backoff says between tries while DynamoDB answers conflict or throttling;
    after the last try RetriesExhausted is raised so that Lambda retries the
    invocation. A part whose marker exists was committed before: skipped.
    """
    transactions = duplicates = retries = 0
    for part, deltas in enumerate(segment.parts()):
        items = transact_items(segment, part, deltas, table_name, source, settings)
        attempt = Attempt(f"{segment.first_sequence}#{part}", items)
        for delay in backoff().delays():
            if delay:
                yield Pause(delay)
            outcome = yield attempt
            if outcome is Outcome.COMMITTED:
                transactions += 1
                break
            if outcome is Outcome.DUPLICATE:
                duplicates += 1
                break
            if outcome is not Outcome.RETRY:
                raise ValueError(f"a commit step needs an outcome of its attempt, not {outcome!r}")
            retries += 1
        else:
            raise RetriesExhausted(f"segment part {attempt.name} still conflicted or throttled after {retries} tries")
    return CommitResult(transactions, duplicates, retries)


def source_id(event_source_arn: str | None, shard_id: str | None) -> str:
    """A short, stable name for the stream shard a segment came from."""
    text = f"{event_source_arn or ''}|{shard_id or ''}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:20]


def lane_of(source: str, lanes: int) -> int:
    """The lane a shard adds to: fixed per shard, so its retries write where its first try did."""
    return int(hashlib.sha256(source.encode("utf-8")).hexdigest()[:8], 16) % lanes


def marker_key(segment: Segment, source: str, part: int) -> dict[str, str]:
    """Sequence numbers are unique within a stream; the source tells streams apart."""
    return {
        COUNTS_TABLE.partition_key: MARKER_PREFIX + segment.first_sequence,
        COUNTS_TABLE.sort_key: f"{source}#{part}",
    }


def transact_items(
    segment: Segment, part: int, deltas: list[Delta], table_name: str, source: str, settings: Settings
) -> list[dict[str, Any]]:
    """The TransactItems committing one part of a segment, marker first (index 0 in CancellationReasons)."""
    marker = {
        **marker_key(segment, source, part),
        "records": segment.records,
        "last": segment.last_sequence,
        TTL_ATTRIBUTE: (segment.first_arrival_ms + MARKER_LIFETIME_MS) // 1000,
    }
    items: list[dict[str, Any]] = [
        {
            "Put": {
                "TableName": table_name,
                "Item": _serialize(marker),
                "ConditionExpression": "attribute_not_exists(#pk)",
                "ExpressionAttributeNames": {"#pk": COUNTS_TABLE.partition_key},
            }
        }
    ]
    lane = lane_of(source, settings.bucket_lanes)
    for (counter, bucket), delta, units, bins, _sketch in deltas:
        key = {COUNTS_TABLE.partition_key: counter, COUNTS_TABLE.sort_key: lane_sort_key(bucket.sort_key, lane)}
        names = {"#count": COUNT_ATTRIBUTE, "#ttl": TTL_ATTRIBUTE}
        values: dict[str, Any] = {":delta": delta, ":ttl": bucket.ttl_seconds(settings)}
        adds = "#count :delta"
        serialized = _serialize(values)
        if units is not None:
            # DynamoDB adds numbers exactly; amounts.py keeps every bucket's sum within its 38 digits.
            names["#sum"] = SUM_ATTRIBUTE
            serialized[":sum"] = {"N": text_of(decimal_of(units))}  # plain digits, never "1E-8"
            adds += ", #sum :sum"
        if bins:
            adds += bin_additions(bins, names, serialized)
        items.append(
            {
                "Update": {
                    "TableName": table_name,
                    "Key": _serialize(key),
                    "UpdateExpression": f"ADD {adds} SET #ttl = if_not_exists(#ttl, :ttl)",
                    "ExpressionAttributeNames": names,
                    "ExpressionAttributeValues": serialized,
                }
            }
        )
    return items


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
        placeholder = "#" + _SIGN_LETTER[name[0]] + name[1:]
        names[placeholder] = name
        terms.append(f", {placeholder} {value}")
    return "".join(terms)


_SIGN_LETTER = {POSITIVE: "p", NEGATIVE: "n", ZERO_BIN: "z"}


def classify_cancellation(reasons: Sequence[dict[str, Any]]) -> Outcome:
    """Read CancellationReasons (one per item, marker first).

    A duplicate is exactly: the marker's condition failed and nothing else went
    wrong. A conditional failure anywhere else, or a validation error, is a real
    failure; conflicts and throttling are worth another try.
    """
    codes = [(reason or {}).get("Code", "None") for reason in reasons]
    if not codes:
        return Outcome.FAIL
    if any(code in _RETRYABLE_REASONS for code in codes):
        return Outcome.RETRY
    marker, buckets = codes[0], codes[1:]
    if marker == "ConditionalCheckFailed" and all(code == "None" for code in buckets):
        return Outcome.DUPLICATE
    return Outcome.FAIL


def _serialize(values: dict[str, Any]) -> dict[str, Any]:
    return {name: _serializer.serialize(value) for name, value in values.items()}
