"""Segment sketches -> read, merge and conditional write of each bucket's sketch item. No I/O.

A distinct counter's bucket keeps its sketch (sketches.py) in an item of its
own, per lane, in a partition of the lane's own: ``pk = #sketches#<lane>#<counter>``,
``sk = <bucket sort key>`` (``buckets.sketch_partition``). A hot counter's
count items take its partition key's 1,000 write units a second; each lane's
sketch writes take another partition key's, so lanes multiply the sketches'
write limit as they multiply the items that contend. DynamoDB
cannot take a register-wise maximum in an update expression, so a segment
adds its values to a sketch item by reading it (strongly consistent), merging
and writing the merged sketch back on condition that the item still holds
what was read. A writer that loses that race gets the item as it is now with
the failed condition (``ALL_OLD``) and merges again, after a jittered pause.

Why retries cannot inflate: a merge is a set union or register-wise maximum,
so merging the same values twice leaves a sketch unchanged, and then nothing
is written at all. The sketch writes of a segment follow its counts' commit;
a sketch write that keeps failing fails the invocation (RetriesExhausted),
Lambda retries it, the counts find their watermarks and skip, and the
sketches merge again, harmlessly. Keeping sketches out of the count items
keeps the counts' one plain update per item per segment, and its cost, as it
is: only the sketch writes of one bucket contend, never its counts.

``sketch_steps`` is the policy as a generator of steps, driven by
``CountsTable`` against DynamoDB and by the scale model in simulated time.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from tally.core.buckets import sketch_partition
from tally.core.commit import Pause, RetriesExhausted
from tally.core.retry import Backoff
from tally.core.segments import Item, Segment
from tally.core.settings import Settings
from tally.core.sketches import Sketch
from tally.core.tables import COUNTS_TABLE, SKETCH_ATTRIBUTE, TTL_ATTRIBUTE

Key = tuple[str, str]  # (pk, sk) of a sketch item


class SketchOutcome(str, Enum):
    WRITTEN = "written"
    CONFLICT = "conflict"  # the item changed since it was read: merge again with what it holds now
    RETRY = "retry"  # throttled, or the answer was lost: the same write again after a pause


@dataclass(frozen=True)
class ReadSketches:
    """Read these sketch items, strongly consistent; the driver answers {key: stored bytes or None}."""

    keys: list[Key]


@dataclass(frozen=True)
class SketchWrite:
    key: Key
    request: dict[str, Any]  # the UpdateItem request


@dataclass(frozen=True)
class WriteSketches:
    """Send these writes (at once if the driver can); it answers one (outcome, bytes the item holds now or
    None) per write, in order: the bytes matter for a conflict only."""

    writes: list[SketchWrite]


SketchStep = ReadSketches | WriteSketches | Pause


@dataclass(frozen=True)
class SketchResult:
    written: int = 0  # sketch items written
    unchanged: int = 0  # sketch items that already held every value (a retry, or nothing new)
    conflicts: int = 0  # writes that lost a race and merged again
    retries: int = 0  # writes throttled or lost and sent again


def sketch_key(item: Item, lane: int) -> Key:
    """The key of lane ``lane`` of a bucket's sketch item: the bucket's sort key in the lane's partition."""
    counter, bucket = item
    return sketch_partition(counter, lane), bucket.sort_key


def sketch_update(
    table_name: str, key: Key, merged: bytes, seen: bytes | None, ttl_seconds: int
) -> dict[str, Any]:
    """Write ``merged`` over what was read (``seen``; None: no item yet), or fail and return the item as it is."""
    values: dict[str, Any] = {":sketch": {"B": merged}, ":ttl": {"N": str(ttl_seconds)}}
    if seen is None:
        condition = "attribute_not_exists(#sketch)"
    else:
        condition = "#sketch = :seen"
        values[":seen"] = {"B": seen}
    return {
        "TableName": table_name,
        "Key": {COUNTS_TABLE.partition_key: {"S": key[0]}, COUNTS_TABLE.sort_key: {"S": key[1]}},
        "UpdateExpression": "SET #sketch = :sketch, #ttl = if_not_exists(#ttl, :ttl)",
        "ConditionExpression": condition,
        "ExpressionAttributeNames": {"#sketch": SKETCH_ATTRIBUTE, "#ttl": TTL_ATTRIBUTE},
        "ExpressionAttributeValues": values,
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }


def sketch_steps(
    segment: Segment, lane: int, table_name: str, settings: Settings, backoff: Callable[[], Backoff]
) -> Generator[SketchStep, Mapping[Key, bytes | None] | Sequence[tuple[SketchOutcome, bytes | None]] | None, SketchResult]:
    """Merge every sketch of the segment into its item: read them all, then write the changed ones, merging
    again where another writer came first, up to ``backoff().attempts`` rounds."""
    added = {sketch_key(item, lane): (item, sketch) for item, sketch in sorted(segment.sketches.items())}
    if not added:
        return SketchResult()
    stored = yield ReadSketches(list(added))
    if not isinstance(stored, Mapping):
        raise ValueError("a ReadSketches step needs the stored bytes of every key")
    pending = {key: stored.get(key) for key in added}
    written = unchanged = conflicts = retries = 0
    for delay in backoff().delays():
        writes = []
        for key, seen in pending.items():
            item, sketch = added[key]
            merged = Sketch.from_bytes(seen) if seen is not None else Sketch()
            merged.merge(sketch)
            merged_bytes = merged.to_bytes()
            if merged_bytes == seen:
                unchanged += 1  # every value is in it already: nothing to write
                continue
            ttl = item[1].ttl_seconds(settings)
            writes.append(SketchWrite(key, sketch_update(table_name, key, merged_bytes, seen, ttl)))
        if not writes:
            return SketchResult(written, unchanged, conflicts, retries)
        if delay:
            yield Pause(delay)
        answers = yield WriteSketches(writes)
        if answers is None or len(answers) != len(writes):
            raise ValueError("a WriteSketches step needs one answer per write")
        pending = {}
        for write, (outcome, now_held) in zip(writes, answers):
            if outcome is SketchOutcome.WRITTEN:
                written += 1
            elif outcome is SketchOutcome.CONFLICT:
                conflicts += 1
                pending[write.key] = now_held
            elif outcome is SketchOutcome.RETRY:
                retries += 1
                pending[write.key] = _seen(write.request)
            else:
                raise ValueError(f"a sketch write needs an outcome, not {outcome!r}")
    if pending:
        raise RetriesExhausted(
            f"{len(pending)} sketch items of segment {segment.first_sequence} still changing or throttled after "
            f"every retry"
        )
    return SketchResult(written, unchanged, conflicts, retries)


def _seen(request: Mapping[str, Any]) -> bytes | None:
    """What a write was conditioned on: resending it unchanged needs the same."""
    seen = request["ExpressionAttributeValues"].get(":seen")
    return None if seen is None else bytes(seen["B"])
