"""Record -> event -> segment -> commit: a segment's updates and sketch merges sent to the counts table.

The policy (which updates, in what order, what an answer means) is ``core/commit.py`` and
``core/sketch_writes.py``; this module runs its steps against DynamoDB, with real pauses. A lost
write surfaces as ``CommitFailed`` (the invocation fails and Lambda retries it), never as a
silently low count.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Generator
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from typing import Any

from botocore.exceptions import ClientError

from tally.core.commit import (
    Answer,
    CommitResult,
    Outcome,
    Pause,
    Put,
    PutAnchor,
    ReadAgain,
    ReadAnchor,
    ReadMarkers,
    ReadRecords,
    RetriesExhausted,
    Send,
    Update,
    Writer,
    commit_steps,
    condition_failed,
    count_of,
)
from tally.core.lanes import LANE_HISTORY_REFRESH_MS, LaneHistory
from tally.core.overlaps import RecordsAgain
from tally.core.retry import Backoff
from tally.core.segments import Segment
from tally.core.settings import Settings
from tally.core.sketch_writes import (
    ReadSketches,
    SketchOutcome,
    SketchWrite,
    WriteSketches,
    sketch_steps,
)
from tally.core.tables import COUNTS_TABLE, SKETCH_ATTRIBUTE
from tally.dynamo.calls import (
    BATCH_GET_LIMIT,
    BATCH_WRITE_LIMIT,
    RETRYABLE_CODES,
    Key,
    TableAccess,
    describe,
    error_code,
    key_of,
    retried_while_throttled,
)

logger = logging.getLogger(__name__)

# Updates of one segment in flight at once: a 4,950-item segment commits in about
# 4,950 / 32 round trips. The client's connection pool must be at least as large.
COMMIT_WORKERS = 32
# Segments whose first record arrived before this process started (plus a margin for
# invocations of the previous release still running then) may have been committed in part
# by the previous release: their commit first reads its markers.
PREVIOUS_RELEASE_MARGIN_MS = 15 * 60_000


class CommitFailed(RuntimeError):
    """A segment could not be committed; the invocation must fail so Lambda retries it."""


class SegmentCommits(TableAccess):
    """The commit path of ``CountsTable``: a segment's updates, ``workers`` at a time, then its sketch merges."""

    read_again: ReadAgain | None
    lanes: LaneHistory | None  # the lanes over time as given; None: read from the table, again once a minute
    _lanes_read: tuple[float, LaneHistory | None] | None  # when (monotonic s) the table's were read, and them
    commit_backoff: Callable[[], Backoff]
    sketch_backoff: Callable[[], Backoff]
    workers: int
    previous_release_until_ms: int
    _anchors: dict[str, dict[str, Any]]  # the shards' anchor items read or put, by sort key: they never change

    def commit(self, segment: Segment, writer: Writer) -> CommitResult:
        """Commit a segment exactly once (the policy is ``commit_steps``), then merge its sketches into their
        items (``sketch_steps``: a union, so a retry merging again changes nothing)."""
        settings = self.segment_settings(segment)
        counts = self._drive(
            commit_steps(
                segment,
                writer,
                self.table_name,
                settings,
                self.commit_backoff,
                after_previous_release=segment.first_arrival_ms < self.previous_release_until_ms,
            )
        )
        lane = writer.lane(settings.bucket_lanes)
        sketches = self._drive(sketch_steps(segment, lane, self.table_name, settings, self.sketch_backoff))
        return dataclasses.replace(counts, sketches_written=sketches.written, sketch_conflicts=sketches.conflicts)

    def segment_settings(self, segment: Segment) -> Settings:
        """The settings a segment commits with: the lanes in force when its first record arrived (core/lanes.py),
        so that every try of it writes the same items whatever lanes the function counts with now."""
        history = self.lanes if self.lanes is not None else self._table_lanes()
        lanes = self.settings.bucket_lanes if history is None else history.lanes_at(segment.first_arrival_ms)
        return self.settings if lanes == self.settings.bucket_lanes else dataclasses.replace(self.settings, bucket_lanes=lanes)

    def _table_lanes(self) -> LaneHistory | None:
        now = time.monotonic()
        if self._lanes_read is None or now - self._lanes_read[0] >= LANE_HISTORY_REFRESH_MS / 1000:
            found = self.lane_history()  # type: ignore[attr-defined]  # PublishedSettingsItem, beside it in CountsTable
            self._lanes_read = (now, None if found is None else found[0])
        return self._lanes_read[1]

    def _drive(self, steps: Generator[Any, Any, Any]) -> Any:
        """Run a policy's steps against DynamoDB, with real pauses; its result once done."""
        sleep = self.commit_backoff().sleep
        reply: Any = None
        try:
            while True:
                step = steps.send(reply)
                if isinstance(step, Pause):
                    sleep(step.seconds)
                    reply = None
                elif isinstance(step, ReadMarkers):
                    reply = self._markers_exist(step.keys)
                elif isinstance(step, ReadRecords):
                    reply = self.read_again(step) if self.read_again else RecordsAgain(None, "no stream reader")
                elif isinstance(step, ReadSketches):
                    reply = self._read_sketches(step.keys)
                elif isinstance(step, WriteSketches):
                    reply = [self._write_sketch(write) for write in step.writes]
                elif isinstance(step, ReadAnchor):
                    reply = self._read_anchor(step.key)
                elif isinstance(step, PutAnchor):
                    reply = self._put_anchor(step.item)
                elif isinstance(step, Put):
                    reply = self._put(step.items)
                else:
                    reply = self._send(step)
        except StopIteration as done:
            return done.value

    def _read_sketches(self, keys: list[Key]) -> dict[Key, bytes | None]:
        """The stored bytes of sketch items, strongly consistent (a merge must start from the latest)."""
        stored: dict[Key, bytes | None] = dict.fromkeys(keys)
        projection = {"#pk": COUNTS_TABLE.partition_key, "#sk": COUNTS_TABLE.sort_key, "#sketch": SKETCH_ATTRIBUTE}
        for item in self._consistent_items([key_of(pk, sk) for pk, sk in keys], "sketch keys", projection):
            if SKETCH_ATTRIBUTE in item:
                stored[(item["pk"]["S"], item["sk"]["S"])] = bytes(item[SKETCH_ATTRIBUTE]["B"])
        return stored

    def _consistent_items(
        self, keys: list[dict[str, Any]], what: str, projection: dict[str, str] | None = None
    ) -> list[dict[str, Any]]:
        """The items of ``keys`` that exist, read strongly consistent with BatchGetItem (which the role has),
        100 keys a request, unprocessed keys again after a pause; ``projection``: the attribute names to read."""
        found: list[dict[str, Any]] = []
        for start in range(0, len(keys), BATCH_GET_LIMIT):
            pending = keys[start : start + BATCH_GET_LIMIT]
            for _ in self.backoff().pauses():
                request: dict[str, Any] = {"Keys": pending, "ConsistentRead": True}
                if projection is not None:
                    request["ProjectionExpression"] = ", ".join(projection)
                    request["ExpressionAttributeNames"] = projection
                response = retried_while_throttled(
                    self.backoff, self.client.batch_get_item, RequestItems={self.table_name: request}
                )
                found += response.get("Responses", {}).get(self.table_name, [])
                pending = response.get("UnprocessedKeys", {}).get(self.table_name, {}).get("Keys", [])
                if not pending:
                    break
            else:
                raise RetriesExhausted(f"{len(pending)} {what} still unprocessed after every retry")
        return found

    def _write_sketch(self, write: SketchWrite) -> tuple[SketchOutcome, bytes | None]:
        """One conditional write of a merged sketch: written, lost to another writer (with what it wrote), or again."""
        try:
            self.client.update_item(**write.request)
        except ClientError as error:
            code = error_code(error)
            if code == "ConditionalCheckFailedException":
                now_held = error.response.get("Item", {}).get(SKETCH_ATTRIBUTE, {}).get("B")
                return SketchOutcome.CONFLICT, None if now_held is None else bytes(now_held)
            if code in RETRYABLE_CODES:
                logger.warning("sketch write of %s retried: %s", write.key, describe(error))
                return SketchOutcome.RETRY, None
            raise CommitFailed(f"sketch write of {write.key}: {describe(error)}") from error
        return SketchOutcome.WRITTEN, None

    def _put(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """BatchWriteItem puts, 25 a request: the items left unprocessed, a throttled request's all of them."""
        left: list[dict[str, Any]] = []
        for start in range(0, len(items), BATCH_WRITE_LIMIT):
            chunk = items[start : start + BATCH_WRITE_LIMIT]
            request = {self.table_name: [{"PutRequest": {"Item": item}} for item in chunk]}
            try:
                response = self.client.batch_write_item(RequestItems=request)
            except ClientError as error:
                if error_code(error) not in RETRYABLE_CODES:
                    raise
                logger.warning("puts throttled, sent again after a pause: %s", describe(error))
                left.extend(chunk)
                continue
            left.extend(r["PutRequest"]["Item"] for r in response.get("UnprocessedItems", {}).get(self.table_name, []))
        return left

    def _send(self, step: Send) -> list[Answer]:
        """Every update of the step, ``workers`` at a time; the first failure stops the rest and is raised."""
        updates = step.updates
        if self.workers <= 1 or len(updates) <= 1:
            answers = [self._update(update) for update in updates]
        else:
            with ThreadPoolExecutor(min(self.workers, len(updates)), thread_name_prefix="tally-commit") as pool:
                futures: list[Future[Answer]] = [pool.submit(self._update, update) for update in updates]
                done, _ = wait(futures, return_when=FIRST_EXCEPTION)
                failed = next((f for f in futures if f in done and f.exception() is not None), None)
                if failed is not None:
                    for future in futures:
                        future.cancel()  # those not started yet; the running ones finish as the pool closes
                    raise failed.exception()  # type: ignore[misc]
                answers = [future.result() for future in futures]
        retried = sum(answer.outcome is Outcome.RETRY for answer in answers)
        if retried:
            logger.warning("%d of %d bucket updates throttled, sent again after a pause", retried, len(updates))
        return answers

    def _update(self, update: Update) -> Answer:
        """One UpdateItem: applied, already applied (with the count it returned), worth another try, or
        CommitFailed."""
        try:
            response = self.client.update_item(**update.request)
        except ClientError as error:
            code = error_code(error)
            if code == "ConditionalCheckFailedException":
                answer = condition_failed(error.response.get("Item"), update.tag, update.position)
                if answer.outcome is Outcome.FAIL:
                    raise CommitFailed(
                        f"update of {update.name} refused by a condition its watermark does not explain"
                    ) from error
                return answer
            if code in RETRYABLE_CODES:
                return Answer(Outcome.RETRY)
            raise CommitFailed(f"update of {update.name}: {describe(error)}") from error
        return Answer(Outcome.APPLIED, count_of(response.get("Attributes")), units=consumed_units(response))

    def _read_anchor(self, key: dict[str, str]) -> dict[str, Any] | None:
        """A shard's anchor item, read strongly consistent unless held."""
        sort_key = key[COUNTS_TABLE.sort_key]
        if sort_key not in self._anchors:
            for item in self._consistent_items([key_of(key[COUNTS_TABLE.partition_key], sort_key)], "anchor keys"):
                self._anchors[sort_key] = item
        return self._anchors.get(sort_key)

    def _put_anchor(self, item: dict[str, Any]) -> dict[str, Any]:
        """Put a shard's anchor unless it has one (another reader of the shard put it first): the one it holds."""
        sort_key = item[COUNTS_TABLE.sort_key]["S"]
        try:
            retried_while_throttled(
                self.backoff, self.client.put_item, TableName=self.table_name, Item=item,
                ConditionExpression="attribute_not_exists(#pk)", ExpressionAttributeNames={"#pk": COUNTS_TABLE.partition_key},
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
            held = item
        except ClientError as error:
            if error_code(error) != "ConditionalCheckFailedException" or "Item" not in error.response:
                raise CommitFailed(f"the shard's anchor: {describe(error)}") from error
            held = error.response["Item"]
        self._anchors[sort_key] = held
        return held

    def _markers_exist(self, keys: list[dict[str, str]]) -> list[bool]:
        """Which of the previous release's marker items exist, read strongly consistent."""
        pk, sk = COUNTS_TABLE.partition_key, COUNTS_TABLE.sort_key
        items = self._consistent_items([key_of(key[pk], key[sk]) for key in keys], "marker keys", {"#pk": pk, "#sk": sk})
        fetched = {(item[pk]["S"], item[sk]["S"]) for item in items}
        return [(key[pk], key[sk]) in fetched for key in keys]

def consumed_units(response: dict[str, Any]) -> float | None:
    """The write units an answer says its request consumed (``ReturnConsumedCapacity=TOTAL``), None if it does not."""
    units = (response.get("ConsumedCapacity") or {}).get("CapacityUnits")
    return None if units is None else float(units)
