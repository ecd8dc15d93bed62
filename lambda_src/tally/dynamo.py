"""All DynamoDB I/O of the counts table: commits, batch gets, range queries, table setup.

Everything here retries what DynamoDB asks to be retried (throttling, lost
answers, unprocessed keys) with jittered exponential backoff, and raises
everything else: a lost write must surface as a failed invocation, never as a
silently low count.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import logging
import time
from collections.abc import Callable, Collection, Generator, Iterable, Iterator
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from tally.version import __version__
from tally.core.commit import (
    Answer,
    CommitResult,
    Outcome,
    Pause,
    Put,
    ReadMarkers,
    RetriesExhausted,
    Send,
    Update,
    Writer,
    commit_steps,
    condition_failed,
    count_of,
)
from tally.core.sketch_writes import (
    ReadSketches,
    SketchOutcome,
    SketchWrite,
    WriteSketches,
    sketch_steps,
)
from tally.core.buckets import Bucket, bucket_item_keys, last_lane_bound, sketch_partitions, stored_bucket
from tally.core.directory import Entry, day_partitions, entries_of, entry_item
from tally.core.amounts import stored_units
from tally.core.ranking import RankRecord
from tally.core.histograms import is_bin
from tally.core.sketches import Sketch
from tally.core.retry import Backoff, commit_backoff, directory_backoff, sketch_backoff
from tally.core.segments import Segment
from tally.core.settings import Settings
from tally.core.tables import (
    COUNT_ATTRIBUTE,
    COUNTS_TABLE,
    EVENTS_TABLE,
    SKETCH_ATTRIBUTE,
    SUM_ATTRIBUTE,
    TTL_ATTRIBUTE,
    TableDescription,
)

logger = logging.getLogger(__name__)

BATCH_GET_LIMIT = 100
BATCH_WRITE_LIMIT = 25
# Directory entries a container remembers having written (a few MB): past it, it forgets and may put some again.
DIRECTORY_MEMORY = 100_000
# Updates of one segment in flight at once: a 4,950-item segment commits in about
# 4,950 / 32 round trips. The client's connection pool must be at least as large.
COMMIT_WORKERS = 32
# Segments whose first record arrived before this process started (plus a margin for
# invocations of the previous release still running then) may have been committed in part
# by the previous release: their commit first reads its markers.
PREVIOUS_RELEASE_MARGIN_MS = 15 * 60_000
# Worth another try: throttling, an answer lost (the write may have landed: its watermark
# tells), and a write that met a transaction on its item (another release's, or a backfill's).
_RETRYABLE_CODES = frozenset(
    {
        "ThrottlingException",
        "ProvisionedThroughputExceededException",
        "RequestLimitExceeded",
        "TransactionInProgressException",
        "TransactionConflictException",
        "InternalServerError",
    }
)

Key = tuple[str, str]  # (pk, sk)


class CommitFailed(RuntimeError):
    """A segment could not be committed; the invocation must fail so Lambda retries it."""


class BackfillClaimed(RuntimeError):
    """The table's history at this instant is being, or was, counted from another export."""


BACKFILL_PREFIX = "#backfill#"
# Backfills of this release fold an export across its files under one watermark.
BACKFILL_PROTOCOL = "watermarks"
# The settings the pipeline counts with, published where the counts are, so that whoever writes
# events or reads counts can check it agrees (pk, sk). Reserved: no counter name starts with '#'.
SETTINGS_KEY = ("#settings#", "counting")


@dataclass(frozen=True)
class PublishedSettings:
    """What the pipeline last published: its counting environment, who published it and when."""

    environment: dict[str, str]
    publisher: str
    published_ms: int
    version: str | None = None  # the release that published them (None: one before 0.2.0)

    def settings(self) -> Settings:
        """The published settings as ``Settings.from_env`` reads them (SettingsError if this release cannot)."""
        return Settings.from_env(self.environment)


@dataclass
class Fetched:
    """Counts (and the sums of summing counters' buckets, in units, the bins of histogram counters'
    buckets and the sketches of distinct counters') read for some keys, and what that cost."""

    counts: dict[Key, int] = field(default_factory=dict)
    sums: dict[Key, int] = field(default_factory=dict)
    bins: dict[Key, dict[str, int]] = field(default_factory=dict)
    sketches: dict[Key, Sketch] = field(default_factory=dict)
    requests: int = 0
    items: int = 0

    def add(self, key: Key, item: dict[str, Any]) -> None:
        """One item read: a bucket, one lane of it (lanes add up, sums and bins as counts), or one lane of its
        sketch (lanes merge)."""
        if COUNT_ATTRIBUTE in item:
            self.counts[key] = self.counts.get(key, 0) + int(item[COUNT_ATTRIBUTE]["N"])
        if SUM_ATTRIBUTE in item:
            self.sums[key] = self.sums.get(key, 0) + stored_units(item[SUM_ATTRIBUTE]["N"])
        for name, value in item.items():
            if is_bin(name):
                bins = self.bins.setdefault(key, {})
                bins[name] = bins.get(name, 0) + int(value["N"])
        if SKETCH_ATTRIBUTE in item:
            sketch = Sketch.from_bytes(item[SKETCH_ATTRIBUTE]["B"])
            if key in self.sketches:
                self.sketches[key].merge(sketch)  # lanes of one bucket: the union of their values
            else:
                self.sketches[key] = sketch
        self.items += 1

    def update(self, other: Fetched) -> None:
        """Take in what another request read (other keys; a request reads all lanes of its keys)."""
        self.counts.update(other.counts)
        self.sums.update(other.sums)
        self.bins.update(other.bins)
        self.sketches.update(other.sketches)
        self.requests += other.requests
        self.items += other.items


class CountsTable:
    """The counts table as tally uses it, over a low-level boto3 DynamoDB client."""

    def __init__(
        self,
        client: Any,
        table_name: str,
        settings: Settings,
        backoff: Callable[[], Backoff] | None = None,
        *,
        workers: int = COMMIT_WORKERS,
        previous_release_until_ms: int | None = None,
    ) -> None:
        """``backoff`` paces every retry when given; by default reads use ``Backoff`` and commits ``commit_backoff``.

        ``workers``: updates of a segment sent at once. ``previous_release_until_ms``:
        segments whose first record arrived before it are checked for the previous
        release's markers (default: this process's start plus PREVIOUS_RELEASE_MARGIN_MS).
        Sketch merges use ``sketch_backoff`` unless ``backoff`` is given.
        """
        self.client = client
        self.table_name = table_name
        self.settings = settings
        self.backoff = backoff or Backoff
        self.commit_backoff = backoff or commit_backoff
        self.sketch_backoff = backoff or sketch_backoff
        self.workers = workers
        if previous_release_until_ms is None:
            previous_release_until_ms = int(time.time() * 1000) + PREVIOUS_RELEASE_MARGIN_MS
        self.previous_release_until_ms = previous_release_until_ms

    def commit(self, segment: Segment, writer: Writer) -> CommitResult:
        """Commit a segment exactly once (the policy is ``commit_steps``), then merge its sketches into their
        items (``sketch_steps``: a union, so a retry merging again changes nothing)."""
        counts = self._drive(
            commit_steps(
                segment,
                writer,
                self.table_name,
                self.settings,
                self.commit_backoff,
                after_previous_release=segment.first_arrival_ms < self.previous_release_until_ms,
            )
        )
        lane = writer.lane(self.settings.bucket_lanes)
        sketches = self._drive(sketch_steps(segment, lane, self.table_name, self.settings, self.sketch_backoff))
        return dataclasses.replace(counts, sketches_written=sketches.written, sketch_conflicts=sketches.conflicts)

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
                elif isinstance(step, ReadSketches):
                    reply = self._read_sketches(step.keys)
                elif isinstance(step, WriteSketches):
                    reply = [self._write_sketch(write) for write in step.writes]
                elif isinstance(step, Put):
                    reply = self._put(step.items)
                else:
                    reply = self._send(step)
        except StopIteration as done:
            return done.value

    def _read_sketches(self, keys: list[Key]) -> dict[Key, bytes | None]:
        """The stored bytes of sketch items, strongly consistent (a merge must start from the latest)."""
        stored: dict[Key, bytes | None] = dict.fromkeys(keys)
        for start in range(0, len(keys), BATCH_GET_LIMIT):
            pending = [_key(pk, sk) for pk, sk in keys[start : start + BATCH_GET_LIMIT]]
            for _ in self.backoff().pauses():
                request = {
                    self.table_name: {
                        "Keys": pending,
                        "ConsistentRead": True,
                        "ProjectionExpression": "#pk, #sk, #sketch",
                        "ExpressionAttributeNames": {
                            "#pk": COUNTS_TABLE.partition_key,
                            "#sk": COUNTS_TABLE.sort_key,
                            "#sketch": SKETCH_ATTRIBUTE,
                        },
                    }
                }
                response = self._call(self.client.batch_get_item, RequestItems=request)
                for item in response.get("Responses", {}).get(self.table_name, []):
                    if SKETCH_ATTRIBUTE in item:
                        stored[(item["pk"]["S"], item["sk"]["S"])] = bytes(item[SKETCH_ATTRIBUTE]["B"])
                pending = response.get("UnprocessedKeys", {}).get(self.table_name, {}).get("Keys", [])
                if not pending:
                    break
            else:
                raise RetriesExhausted(f"{len(pending)} sketch keys still unprocessed after every retry")
        return stored

    def _write_sketch(self, write: SketchWrite) -> tuple[SketchOutcome, bytes | None]:
        """One conditional write of a merged sketch: written, lost to another writer (with what it wrote), or again."""
        try:
            self.client.update_item(**write.request)
        except ClientError as error:
            code = error_code(error)
            if code == "ConditionalCheckFailedException":
                now_held = error.response.get("Item", {}).get(SKETCH_ATTRIBUTE, {}).get("B")
                return SketchOutcome.CONFLICT, None if now_held is None else bytes(now_held)
            if code in _RETRYABLE_CODES:
                logger.warning("sketch write of %s retried: %s", write.key, _describe(error))
                return SketchOutcome.RETRY, None
            raise CommitFailed(f"sketch write of {write.key}: {_describe(error)}") from error
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
                if error_code(error) not in _RETRYABLE_CODES:
                    raise
                logger.warning("puts throttled, sent again after a pause: %s", _describe(error))
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
            if code in _RETRYABLE_CODES:
                return Answer(Outcome.RETRY)
            raise CommitFailed(f"update of {update.name}: {_describe(error)}") from error
        return Answer(Outcome.APPLIED, count_of(response.get("Attributes")))

    def _markers_exist(self, keys: list[dict[str, str]]) -> list[bool]:
        """Which of the previous release's marker items exist, read strongly consistent."""
        fetched: set[tuple[str, str]] = set()
        pk, sk = COUNTS_TABLE.partition_key, COUNTS_TABLE.sort_key
        for start in range(0, len(keys), BATCH_GET_LIMIT):
            pending = [_key(key[pk], key[sk]) for key in keys[start : start + BATCH_GET_LIMIT]]
            for _ in self.backoff().pauses():
                request = {self.table_name: {"Keys": pending, "ConsistentRead": True, "ProjectionExpression": "#pk, #sk"}}
                request[self.table_name]["ExpressionAttributeNames"] = {"#pk": pk, "#sk": sk}
                response = self._call(self.client.batch_get_item, RequestItems=request)
                for item in response.get("Responses", {}).get(self.table_name, []):
                    fetched.add((item[pk]["S"], item[sk]["S"]))
                pending = response.get("UnprocessedKeys", {}).get(self.table_name, {}).get("Keys", [])
                if not pending:
                    break
            else:
                raise RetriesExhausted(f"{len(pending)} marker keys still unprocessed after every retry")
        return [(key[pk], key[sk]) in fetched for key in keys]

    def claim_backfill(
        self, table_arn: str, count_from_iso: str, export_arn: str, expires_s: int, protocol: str = BACKFILL_PROTOCOL
    ) -> None:
        """Tie a table's count-from instant to one export, or raise BackfillClaimed naming the other one.

        Watermarks are kept per export, so counting a second export of the
        same instant would add every item again; the claim makes that
        impossible. Claiming again with the same export (a resumed run)
        succeeds if it is counted the same way (``protocol``: this process's
        segments, or the in-account backfill's ranges, which place their
        writes differently), and never if the previous release began it: that
        release cut its segments file by file, so this one could not tell what it applied.
        """
        key = {COUNTS_TABLE.partition_key: {"S": BACKFILL_PREFIX + table_arn}, COUNTS_TABLE.sort_key: {"S": count_from_iso}}
        try:
            self.client.put_item(
                TableName=self.table_name,
                Item={
                    **key,
                    "export": {"S": export_arn},
                    "protocol": {"S": protocol},
                    TTL_ATTRIBUTE: {"N": str(expires_s)},
                },
                ConditionExpression="attribute_not_exists(#pk) OR (#export = :export AND #protocol = :protocol)",
                ExpressionAttributeNames={"#pk": COUNTS_TABLE.partition_key, "#export": "export", "#protocol": "protocol"},
                ExpressionAttributeValues={":export": {"S": export_arn}, ":protocol": {"S": protocol}},
            )
        except ClientError as error:
            if error_code(error) != "ConditionalCheckFailedException":
                raise
            claimed = self.client.get_item(TableName=self.table_name, Key=key, ConsistentRead=True).get("Item", {})
            other = claimed.get("export", {}).get("S", "?")
            claimed_protocol = claimed.get("protocol", {}).get("S")
            if other == export_arn and claimed_protocol is not None:
                raise BackfillClaimed(
                    f"the backfill of {export_arn} was begun "
                    + ("in the account (backfill.py --stack)" if claimed_protocol != BACKFILL_PROTOCOL else "by one process (backfill.py --here)")
                    + ", which writes its segments at other places: finish it the same way"
                ) from None
            if other == export_arn:
                raise BackfillClaimed(
                    f"the backfill of {export_arn} was begun by the previous release of tally, which committed it "
                    "file by file with markers: finish it with that release"
                ) from None
            raise BackfillClaimed(
                f"the history of {table_arn} at {count_from_iso} is counted from export {other}; "
                f"counting {export_arn} too would count its items twice"
            ) from None

    def publish_settings(self, publisher: str, published_ms: int) -> None:
        """Write the settings this table is counted with (``Settings.counting_environment``), replacing the last."""
        self.client.put_item(
            TableName=self.table_name,
            Item={
                **_key(*SETTINGS_KEY),
                "environment": {"M": {name: {"S": value} for name, value in self.settings.counting_environment().items()}},
                "publisher": {"S": publisher},
                "published": {"N": str(published_ms)},
                "version": {"S": __version__},
            },
        )

    def published_settings(self) -> PublishedSettings | None:
        """What the pipeline counting into this table last published, or None if nothing has."""
        item = self._call(
            self.client.get_item, TableName=self.table_name, Key=_key(*SETTINGS_KEY), ConsistentRead=True
        ).get("Item")
        if item is None:
            return None
        environment = {name: value["S"] for name, value in item["environment"]["M"].items()}
        version = item.get("version", {}).get("S")
        return PublishedSettings(environment, item["publisher"]["S"], int(item["published"]["N"]), version)

    def batch_get(self, keys: Iterable[Key], consistent: bool = False, distinct: Collection[str] = ()) -> Fetched:
        """Counts of exact bucket keys, 100 keys a request, unprocessed keys retried until none are left.

        With bucket lanes, every lane of every bucket is read and a bucket's count is the sum of its lanes.
        For the counters in ``distinct``, every lane of each bucket's sketch is read too, from the lane's
        partition and from where 0.2.0 kept it (``bucket_item_keys``), and merged.
        Reads take whole items: a projection cannot name histogram bins it does not know, and DynamoDB
        charges a read by the whole item anyway.
        """
        fetched = Fetched()
        lanes = self.settings.bucket_lanes
        unique = list(
            dict.fromkeys(stored for pk, sk in keys for stored in bucket_item_keys(pk, sk, lanes, pk in distinct))
        )
        for start in range(0, len(unique), BATCH_GET_LIMIT):
            pending = [_key(pk, sk) for pk, sk in unique[start : start + BATCH_GET_LIMIT]]
            for _ in self.backoff().pauses():
                request = {self.table_name: {"Keys": pending, "ConsistentRead": consistent}}
                response = self._call(self.client.batch_get_item, RequestItems=request)
                fetched.requests += 1
                for item in response.get("Responses", {}).get(self.table_name, []):
                    fetched.add(stored_bucket(item["pk"]["S"], item["sk"]["S"]), item)
                pending = response.get("UnprocessedKeys", {}).get(self.table_name, {}).get("Keys", [])
                if not pending:
                    break
            else:
                raise RetriesExhausted(f"{len(pending)} keys still unprocessed after every retry")
        return fetched

    def query(
        self, counter: str, first_sk: str, last_sk: str, consistent: bool = False, distinct: bool = False
    ) -> Fetched:
        """Counts of every bucket of ``counter`` with first_sk <= sk <= last_sk, all pages (lanes summed);
        with ``distinct``, their sketches too (lanes merged).

        Whole items, as ``batch_get`` reads them. A distinct counter's range is one Query more per lane: the
        same range of sort keys in each lane's sketch partition (``sketch_partitions``), while 0.2.0's sketch
        items come with the counter's own Query (they sort among its buckets' lanes). A Query per lane, not a
        BatchGetItem of the range's exact sketch keys, because DynamoDB charges a Query by the summed size of
        the items it returns, rounded up to 4 KB once per request, and a BatchGetItem by every key it asks
        for, each rounded up to 4 KB and a missing item as one: sketch items are under 4 KB, and a lane
        holds sketches only of the buckets its shards wrote. So a lane's Query costs one read unit
        (strongly consistent) per 4 KB of sketches actually there, at least one, where the exact keys would
        cost one per bucket of the range, found or not: for a run of 60 minute buckets, from 1 unit (small
        sketches) to 28 (60 full HyperLogLogs of 1.9 KB) against 60. The price is requests:
        ``1 + bucket_lanes`` per run instead of one.
        """
        fetched = Fetched()
        lanes = self.settings.bucket_lanes
        ranges = [(counter, last_lane_bound(last_sk) if lanes > 1 or distinct else last_sk)]
        if distinct:
            ranges += [(partition, last_sk) for partition in sketch_partitions(counter, lanes)]
        for partition, last in ranges:
            for item in self._range(partition, first_sk, last, consistent, fetched):
                fetched.add(stored_bucket(partition, item["sk"]["S"]), item)
        return fetched

    def _range(self, partition: str, first_sk: str, last_sk: str, consistent: bool, fetched: Fetched) -> Iterator[dict[str, Any]]:
        """Every item of ``partition`` with first_sk <= sk <= last_sk, all pages, each Query counted in ``fetched``."""
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "KeyConditionExpression": "#pk = :pk AND #sk BETWEEN :first AND :last",
            "ExpressionAttributeNames": {"#pk": COUNTS_TABLE.partition_key, "#sk": COUNTS_TABLE.sort_key},
            "ExpressionAttributeValues": {":pk": {"S": partition}, ":first": {"S": first_sk}, ":last": {"S": last_sk}},
            "ConsistentRead": consistent,
        }
        while True:
            response = self._call(self.client.query, **request)
            fetched.requests += 1
            yield from response.get("Items", [])
            if "LastEvaluatedKey" not in response:
                return
            request["ExclusiveStartKey"] = response["LastEvaluatedKey"]

    def counter_items(self, counter: str) -> list[dict[str, Any]]:
        """Every stored item of ``counter`` (all buckets, all lanes, and the sketches of a distinct counter in
        their lane partitions) as {pk, sk, count}, all pages, strongly consistent."""
        items: list[dict[str, Any]] = []
        for partition in (counter, *sketch_partitions(counter, self.settings.bucket_lanes)):
            request: dict[str, Any] = {
                "TableName": self.table_name,
                "KeyConditionExpression": "#pk = :pk",
                "ProjectionExpression": "#pk, #sk, #count",
                "ExpressionAttributeNames": {
                    "#pk": COUNTS_TABLE.partition_key, "#sk": COUNTS_TABLE.sort_key, "#count": COUNT_ATTRIBUTE
                },
                "ExpressionAttributeValues": {":pk": {"S": partition}},
                "ConsistentRead": True,
            }
            while True:
                response = self._call(self.client.query, **request)
                items.extend(
                    {"pk": item["pk"]["S"], "sk": item["sk"]["S"], "count": int(item.get(COUNT_ATTRIBUTE, {}).get("N", 0))}
                    for item in response.get("Items", [])
                )
                if "LastEvaluatedKey" not in response:
                    break
                request["ExclusiveStartKey"] = response["LastEvaluatedKey"]
        return items

    def delete_items(self, keys: Iterable[Key], on_deleted: Callable[[int], None] | None = None) -> int:
        """Delete items by key with BatchWriteItem, unprocessed ones retried until none are left."""
        requests = [{"DeleteRequest": {"Key": _key(pk, sk)}} for pk, sk in keys]
        return batch_write(self.client, self.table_name, requests, backoff=self.backoff, on_written=on_deleted)

    def has_counter(self, counter: str) -> bool:
        """Whether any bucket of ``counter`` exists, at any time: one Query of at most one key."""
        response = self._call(
            self.client.query,
            TableName=self.table_name,
            KeyConditionExpression="#pk = :pk",
            ProjectionExpression="#pk",
            ExpressionAttributeNames={"#pk": COUNTS_TABLE.partition_key},
            ExpressionAttributeValues={":pk": {"S": counter}},
            Limit=1,
        )
        return bool(response.get("Items"))

    def _call(self, operation: Callable[..., dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
        return retried_while_throttled(self.backoff, operation, **kwargs)


@dataclass(frozen=True)
class DirectoryPage:
    """Counter names of a listing in name order, the Queries they took, and whether names after them may exist."""

    names: list[str]
    requests: int
    more: bool


class CounterDirectory:
    """The counter directory (``core/directory.py``) in the counts table: written beside commits, read by listings.

    An instance remembers the entries it has written, so a warm function puts
    each (day, counter) entry once, however many of the counter's hour items
    it creates that day; another container puts it again, which changes nothing.
    Entries left unprocessed are put again on ``directory_backoff`` (a wait
    costs only time), listings' Queries on the plain schedule (a reader waits).
    """

    def __init__(
        self, client: Any, table_name: str, settings: Settings, backoff: Callable[[], Backoff] | None = None
    ) -> None:
        self.client = client
        self.table_name = table_name
        self.settings = settings
        self.backoff = backoff or Backoff
        self.put_backoff = backoff or directory_backoff
        self.written: set[Entry] = set()

    def recording(self, commit: Callable[[Segment, Writer], CommitResult]) -> Callable[[Segment, Writer], CommitResult]:
        """``commit``, then the directory entries of the hour items it created (or found applied, which a retry
        whose first try created them and failed before its entries finds)."""

        def commit_and_record(segment: Segment, writer: Writer) -> CommitResult:
            result = commit(segment, writer)
            self.record(result.born)
            return result

        return commit_and_record

    def record(self, items: Iterable[tuple[str, Bucket]]) -> int:
        """Put the entries of these bucket items this instance has not written yet; the number put."""
        new = sorted(entries_of(items) - self.written)
        if len(self.written) + len(new) > DIRECTORY_MEMORY:
            self.written.clear()  # a long-lived container forgets old days; at worst an entry is put again
        requests = [{"PutRequest": {"Item": entry_item(entry, self.settings)}} for entry in new]
        batch_write(self.client, self.table_name, requests, backoff=self.put_backoff)
        self.written.update(new)
        return len(new)

    def counters(self, prefix: str, days: Iterable[int], consistent: bool = False) -> tuple[list[str], int]:
        """Names starting with ``prefix`` that have an entry on any of ``days`` (sorted), and the Queries made."""
        page = self.page(prefix, days, consistent=consistent)
        return page.names, page.requests

    def page(
        self,
        prefix: str,
        days: Iterable[int],
        *,
        after: str | None = None,
        limit: int | None = None,
        consistent: bool = False,
    ) -> DirectoryPage:
        """The first ``limit`` names (all without one) after ``after`` that start with ``prefix`` and have an
        entry on any of ``days``, in name order: every partition of every day read in pages, merged.

        Each partition is read lazily, in pages that grow, so a page of a
        listing reads about its share of each partition, and a day that only
        the previous release wrote is read as far as the page needs.
        """
        requests = [0]

        def names_in(partition: str) -> Iterator[str]:
            request = self._names_request(partition, prefix, consistent)
            if after is not None:
                request["ExclusiveStartKey"] = _key(partition, after)
            page_size = _FIRST_PAGE
            while True:
                if limit is not None:
                    request["Limit"] = page_size
                    page_size = min(4 * page_size, _LARGEST_PAGE)
                response = retried_while_throttled(self.backoff, self.client.query, **request)
                requests[0] += 1
                for item in response.get("Items", []):
                    yield item[COUNTS_TABLE.sort_key]["S"]
                if "LastEvaluatedKey" not in response:
                    return
                request["ExclusiveStartKey"] = response["LastEvaluatedKey"]

        partitions = [partition for day in days for partition in day_partitions(day)]
        merged = (name for name, _ in itertools.groupby(heapq.merge(*(names_in(p) for p in partitions))))
        names = list(itertools.islice(merged, None if limit is None else limit + 1))
        more = limit is not None and len(names) > limit
        return DirectoryPage(names[:limit] if more else names, requests[0], more)

    def _names_request(self, partition: str, prefix: str, consistent: bool) -> dict[str, Any]:
        """A Query of one directory partition's names starting with ``prefix``, names only."""
        return {
            "TableName": self.table_name,
            "KeyConditionExpression": "#pk = :pk" + (" AND begins_with(#sk, :prefix)" if prefix else ""),
            "ProjectionExpression": "#sk",
            "ExpressionAttributeNames": {"#pk": COUNTS_TABLE.partition_key, "#sk": COUNTS_TABLE.sort_key},
            "ExpressionAttributeValues": {":pk": {"S": partition}, **({":prefix": {"S": prefix}} if prefix else {})},
            "ConsistentRead": consistent,
        }

    def exceeds(self, prefix: str, days: Iterable[int], limit: int, consistent: bool = False) -> tuple[bool, int]:
        """Whether one partition alone holds more than ``limit`` names starting with ``prefix`` on ``days`` (so a
        listing of them all would too), and the Queries made: one, of at most ``limit + 1`` names, where a
        listing reads every partition of every day. False says nothing about the other partitions."""
        partition = day_partitions(max(days))[0]
        request = {**self._names_request(partition, prefix, consistent), "Limit": limit + 1}
        response = retried_while_throttled(self.backoff, self.client.query, **request)
        return len(response.get("Items", [])) > limit, 1


# A listing page's first Query per partition reads this many names; the next ones four times more.
_FIRST_PAGE = 8
_LARGEST_PAGE = 1_000


class RankIndex:
    """The rank records (``core/ranking.py``) in the counts table: written by commits, read by top-N answers."""

    def __init__(self, client: Any, table_name: str, backoff: Callable[[], Backoff] | None = None) -> None:
        self.client = client
        self.table_name = table_name
        self.backoff = backoff or Backoff

    def page(
        self, partition: str, start_key: str | None, limit: int, consistent: bool = False
    ) -> tuple[list[RankRecord], str | None, int]:
        """Up to ``limit`` records of a day, highest level first, after ``start_key``: the records, the key to go
        on from (None at the partition's end) and the Queries made. A page is empty only at the end."""
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "KeyConditionExpression": "#pk = :pk",
            "ProjectionExpression": "#sk",
            "ExpressionAttributeNames": {"#pk": COUNTS_TABLE.partition_key, "#sk": COUNTS_TABLE.sort_key},
            "ExpressionAttributeValues": {":pk": {"S": partition}},
            "ScanIndexForward": False,
            "Limit": limit,
            "ConsistentRead": consistent,
        }
        if start_key is not None:
            request["ExclusiveStartKey"] = _key(partition, start_key)
        requests = 0
        while True:
            response = retried_while_throttled(self.backoff, self.client.query, **request)
            requests += 1
            records = [RankRecord.parse(partition, item[COUNTS_TABLE.sort_key]["S"]) for item in response.get("Items", [])]
            last = response.get("LastEvaluatedKey")
            next_key = None if last is None else last[COUNTS_TABLE.sort_key]["S"]
            if records or next_key is None:
                return records, next_key, requests
            request["ExclusiveStartKey"] = last


def retried_while_throttled(backoff: Callable[[], Backoff], operation: Callable[..., dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
    """One request, retried while DynamoDB throttles it."""
    for attempt in backoff().pauses():
        try:
            return operation(**kwargs)
        except ClientError as error:
            if error_code(error) not in _RETRYABLE_CODES:
                raise
            logger.warning("request throttled (attempt %d): %s", attempt + 1, _describe(error))
    raise RetriesExhausted("requests still throttled after every retry")


def batch_write(
    client: Any,
    table: str,
    requests: list[dict[str, Any]],
    *,
    backoff: Callable[[], Backoff] = Backoff,
    on_written: Callable[[int], None] | None = None,
) -> int:
    """Put or delete requests in BatchWriteItem calls of 25; UnprocessedItems are retried with backoff, never dropped."""
    written = 0
    for start in range(0, len(requests), BATCH_WRITE_LIMIT):
        pending = requests[start : start + BATCH_WRITE_LIMIT]
        done = len(pending)
        for _ in backoff().pauses():
            response = retried_while_throttled(backoff, client.batch_write_item, RequestItems={table: pending})
            pending = response.get("UnprocessedItems", {}).get(table, [])
            if not pending:
                break
        else:
            raise RetriesExhausted(f"{len(pending)} items still unprocessed after every retry")
        written += done
        if on_written is not None:
            on_written(done)
    return written


def create_tables(
    client: Any, events_table: str, counts_table: str, events: TableDescription = EVENTS_TABLE
) -> None:
    """Create both tables as the stack does (used locally and in tests), and wait for them.

    Point-in-time recovery is on for both, as in the stack. ``events`` describes
    the events table: ``tables.events_table_for(rules)`` streams the images the rules need.
    """
    for description, name in ((events, events_table), (COUNTS_TABLE, counts_table)):
        _create_table(client, description, name)


def _create_table(client: Any, description: TableDescription, name: str) -> None:
    client.create_table(**description.create_table_request(name))
    client.get_waiter("table_exists").wait(TableName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 60})
    ttl = description.ttl_request(name)
    if ttl:
        client.update_time_to_live(**ttl)
    # As the stack does; a point-in-time export (the backfill's source) needs it. DynamoDB Local has
    # neither backups nor exports, and answers UnknownOperationException.
    try:
        client.update_continuous_backups(
            TableName=name, PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True}
        )
    except ClientError as error:
        if error_code(error) != "UnknownOperationException":
            raise


def error_code(error: ClientError) -> str:
    """The error's code, as DynamoDB names it (``ConditionalCheckFailedException``, ``ThrottlingException``, ...)."""
    return str(error.response.get("Error", {}).get("Code", ""))


def _describe(error: ClientError) -> str:
    reasons = error.response.get("CancellationReasons")
    detail = f" reasons={[r.get('Code') for r in reasons]}" if reasons else ""
    return f"{error_code(error)}: {error.response.get('Error', {}).get('Message', '')}{detail}"


def _key(pk: str, sk: str) -> dict[str, dict[str, str]]:
    return {COUNTS_TABLE.partition_key: {"S": pk}, COUNTS_TABLE.sort_key: {"S": sk}}
