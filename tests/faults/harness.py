"""Fault injection around the real handler code and real (moto) DynamoDB calls.

Three layers can fail, each driven by one seeded ``FaultSchedule`` so that any
failure is reproduced from its seed:

- the DynamoDB client (``FaultyClient``): a bucket UpdateItem throttled,
  refused for provisioned throughput or for a conflict with a transaction,
  refused by a failed condition its watermark does not explain (which must
  fail the invocation, never pass for "already applied"), applied with its
  answer lost, or applied just before the invocation dies (a segment half
  applied); BatchGetItem answering with UnprocessedKeys; Query answering one
  page at a time; reads throttled;
- the invocation (``FaultyHandler``): ``tally.invocation.process`` with the real
  ``CountsTable.commit``, crashing before the first commit, between two commits,
  right after a commit (a timeout once the write landed) or after all its work;
- the event source mapping (``LambdaShard``): Lambda's batches and tumbling
  windows as ``tally.delivery.cut_invocations`` cuts them, then retried with the
  same event, re-cut on retry, redelivered as a whole window or as one
  invocation, and terminated early.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import random
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import Any
from unittest import mock

from botocore.exceptions import ClientError
from tally.core import segments
from tally.local.delivery import DeliveryConfig, cut_invocations
from tally.dynamo.commit import CommitFailed
from tally.dynamo.counts_table import CountsTable
from tally.dynamo.directory import CounterDirectory
from tally.core.commit import RetriesExhausted, Writer
from tally.invocation import Summary, process
from tally.core.retry import Backoff
from tally.core.segments import Segment
from tally.core.settings import Settings

SKETCH_NAME = "#sketch"  # the attribute name every sketch merge's write uses (sketch_writes.sketch_update)


class FaultKind(str, Enum):
    CONFLICT = "conflict_with_a_transaction"
    THROTTLED = "update_throttled"
    PROVISIONED = "provisioned_throughput_exceeded"
    RESPONSE_LOST = "response_lost_after_write"
    TIMEOUT_MID_SEGMENT = "timeout_mid_segment"
    CRASH_BEFORE_COMMIT = "crash_before_first_commit"
    CRASH_BETWEEN_COMMITS = "crash_between_commits"
    TIMEOUT_AFTER_COMMIT = "timeout_after_commit"
    TIMEOUT_AFTER_RETURN = "timeout_after_return"
    RETRY_RECUT = "retry_with_recut_batch"
    WINDOW_REDELIVERED = "window_redelivered"
    INVOCATION_REDELIVERED = "invocation_redelivered"
    WINDOW_TERMINATED_EARLY = "window_terminated_early"
    EMPTY_FINAL_INVOKE = "empty_final_invoke"
    CONDITION_FAILED_ELSEWHERE = "condition_failed_elsewhere"
    UNPROCESSED_KEYS = "unprocessed_keys"
    QUERY_PAGED = "query_paged"
    READ_THROTTLED = "read_throttled"


# Faults of one write request.
REQUEST_FAULTS = frozenset(
    {
        FaultKind.CONFLICT,
        FaultKind.THROTTLED,
        FaultKind.PROVISIONED,
        FaultKind.CONDITION_FAILED_ELSEWHERE,
        FaultKind.RESPONSE_LOST,
        FaultKind.TIMEOUT_MID_SEGMENT,
    }
)
# Faults inside one invocation: the DynamoDB client and the handler.
INVOCATION_FAULTS = REQUEST_FAULTS | frozenset(
    {
        FaultKind.CRASH_BEFORE_COMMIT,
        FaultKind.CRASH_BETWEEN_COMMITS,
        FaultKind.TIMEOUT_AFTER_COMMIT,
        FaultKind.TIMEOUT_AFTER_RETURN,
    }
)
# ... and around it, in how Lambda delivers and redelivers invocations.
WRITE_FAULTS = INVOCATION_FAULTS | frozenset(
    {
        FaultKind.RETRY_RECUT,
        FaultKind.WINDOW_REDELIVERED,
        FaultKind.INVOCATION_REDELIVERED,
        FaultKind.WINDOW_TERMINATED_EARLY,
        FaultKind.EMPTY_FINAL_INVOKE,
    }
)
READ_FAULTS = frozenset({FaultKind.UNPROCESSED_KEYS, FaultKind.QUERY_PAGED, FaultKind.READ_THROTTLED})


@dataclass
class FaultStats:
    """What the fault suite exercised, summed over the session (printed and written by conftest.py)."""

    streams: int = 0
    streams_with_rules: int = 0  # counted by fan-out rules with sums and a histogram
    streams_with_changes: int = 0  # items changed and deleted, counted by transition and deletion rules
    change_records: int = 0  # MODIFY records in those streams
    removal_records: int = 0  # REMOVE records, by owners and by TTL
    ttl_removal_records: int = 0  # REMOVE records signed by DynamoDB's TTL process
    records: int = 0
    invocations: int = 0
    failed_attempts: int = 0
    windows_compared: int = 0
    windows_refused: int = 0
    windows_aligned: int = 0  # compared windows ending now that were answered over whole hours at an edge
    windows_past_minute_retention: int = 0  # compared windows that start where minutes have expired
    quantiles_compared: int = 0  # quantiles of histogram counters' windows, against brute force
    buckets_compared: int = 0
    sketches_compared: int = 0  # buckets of distinct counters whose sketch was compared
    rank_records_compared: int = 0  # hour items whose highest rank record was compared with their count's level
    events_in_minute_and_hour: int = 0
    events_in_hour_only: int = 0  # arrived after their minute's retention
    late_rejections: int = 0  # arrived after their hour's retention
    items_expired: int = 0  # deleted as DynamoDB's TTL would, before windows were read
    discrepancies: int = 0
    fuzzed_records: int = 0
    fuzzed_queries: int = 0
    identical_rewrites: int = 0  # producer writes that, unchanged, put no record on the stream
    rereads_exact: int = 0  # streams read again with other cuts that ended exact
    rereads_refused: int = 0  # ... that ended at a loud refusal (records known only as window state sums)
    faults: Counter[str] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, name: str, amount: int = 1) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + amount)

    def as_json(self) -> dict[str, Any]:
        return {
            "streams": self.streams,
            "streams_with_rules": self.streams_with_rules,
            "streams_with_changes": self.streams_with_changes,
            "change_records": self.change_records,
            "removal_records": self.removal_records,
            "ttl_removal_records": self.ttl_removal_records,
            "records": self.records,
            "identical_rewrites": self.identical_rewrites,
            "invocations": self.invocations,
            "failed_attempts": self.failed_attempts,
            "faults_injected": sum(self.faults.values()),
            "faults_by_kind": dict(sorted(self.faults.items())),
            "windows_compared": self.windows_compared,
            "windows_refused": self.windows_refused,
            "windows_aligned": self.windows_aligned,
            "windows_past_minute_retention": self.windows_past_minute_retention,
            "quantiles_compared": self.quantiles_compared,
            "buckets_compared": self.buckets_compared,
            "sketches_compared": self.sketches_compared,
            "rank_records_compared": self.rank_records_compared,
            "events_in_minute_and_hour": self.events_in_minute_and_hour,
            "events_in_hour_only": self.events_in_hour_only,
            "late_rejections": self.late_rejections,
            "items_expired": self.items_expired,
            "fuzzed_records": self.fuzzed_records,
            "fuzzed_queries": self.fuzzed_queries,
            "discrepancies": self.discrepancies,
        }

    def dumps(self) -> str:
        return json.dumps(self.as_json(), indent=2)


STATS = FaultStats()


class FaultSchedule:
    """Seeded decisions whether each fault point fires, within a budget so that faults eventually stop.

    ``max_in_a_row`` bounds consecutive firings of the same kind, so that a
    retried call (8 backoff attempts) is never starved forever by chance.
    Thread-safe: threads share one schedule in the concurrency tests.
    """

    def __init__(
        self,
        seed: int,
        rates: dict[FaultKind, float],
        budget: int,
        max_in_a_row: int = 3,
        stats: FaultStats = STATS,
    ) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.rates = rates
        self.budget = budget
        self.max_in_a_row = max_in_a_row
        self.injected: Counter[FaultKind] = Counter()
        self.stats = stats
        self._in_a_row: Counter[FaultKind] = Counter()
        self._lock = threading.Lock()

    @classmethod
    def quiet(cls) -> FaultSchedule:
        return cls(0, {}, 0)

    def fires(self, kind: FaultKind) -> bool:
        with self._lock:
            rate = self.rates.get(kind, 0.0)
            if rate <= 0 or sum(self.injected.values()) >= self.budget:
                return False
            if self._in_a_row[kind] >= self.max_in_a_row or self.rng.random() >= rate:
                self._in_a_row[kind] = 0
                return False
            self._in_a_row[kind] += 1
            self.injected[kind] += 1
        with self.stats._lock:
            self.stats.faults[kind.value] += 1
        return True

    def randint(self, low: int, high: int) -> int:
        with self._lock:
            return self.rng.randint(low, high)

    def __repr__(self) -> str:
        return f"FaultSchedule(seed={self.seed}, budget={self.budget}, injected={dict(self.injected)})"


def client_error(code: str, operation: str, item: dict[str, Any] | None = None) -> ClientError:
    """A ClientError shaped as botocore parses DynamoDB's error responses (``item``: ALL_OLD of a failed condition)."""
    response: dict[str, Any] = {
        "Error": {"Code": code, "Message": f"injected {code}"},
        "ResponseMetadata": {"HTTPStatusCode": 400},
    }
    if item is not None:
        response["Item"] = item
    return ClientError(response, operation)


class FaultyClient:
    """A boto3 DynamoDB client whose calls fail as the schedule says, before (or after) reaching moto."""

    def __init__(self, client: Any, schedule: FaultSchedule) -> None:
        self._client = client
        self.schedule = schedule
        self.native_retryable = 0  # conflicts or throttling produced by the backend itself (lost sketch merges too)
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def update_item(self, **kwargs: Any) -> dict[str, Any]:
        """The counts' watermarked updates and the sketch merges' conditional writes: a transaction conflict (for
        a sketch write: lost to another writer, answered with the item as it is, as ALL_OLD answers), throttled,
        refused by a condition other than the watermark, or written with the answer lost or the invocation dying
        after it."""
        sketch = SKETCH_NAME in kwargs.get("ExpressionAttributeNames", {})
        if self.schedule.fires(FaultKind.CONFLICT):
            if not sketch:
                raise client_error("TransactionConflictException", "UpdateItem")
            held = self._client.get_item(TableName=kwargs["TableName"], Key=kwargs["Key"], ConsistentRead=True)
            raise client_error("ConditionalCheckFailedException", "UpdateItem", held.get("Item", {}))
        if self.schedule.fires(FaultKind.THROTTLED):
            raise client_error("ThrottlingException", "UpdateItem")
        if self.schedule.fires(FaultKind.PROVISIONED):
            raise client_error("ProvisionedThroughputExceededException", "UpdateItem")
        if self.schedule.fires(FaultKind.CONDITION_FAILED_ELSEWHERE):
            # As if another condition of the update had failed: the item comes back as it is.
            found = self._client.get_item(TableName=kwargs["TableName"], Key=kwargs["Key"], ConsistentRead=True)
            raise client_error("ConditionalCheckFailedException", "UpdateItem", found.get("Item", {}))
        try:
            response = self._client.update_item(**kwargs)
        except ClientError as error:
            code = error.response["Error"]["Code"]
            # Retried by the writer: the backend's throttling and conflicts, and a sketch merge another shard won.
            if code in ("ThrottlingException", "TransactionConflictException") or (
                sketch and code == "ConditionalCheckFailedException"
            ):
                with self._lock:
                    self.native_retryable += 1
            raise
        if self.schedule.fires(FaultKind.RESPONSE_LOST):
            raise client_error("InternalServerError", "UpdateItem")
        if self.schedule.fires(FaultKind.TIMEOUT_MID_SEGMENT):
            raise InjectedCrash(FaultKind.TIMEOUT_MID_SEGMENT.value)  # this item applied, the segment's others not
        return response

    def batch_get_item(self, **kwargs: Any) -> dict[str, Any]:
        if self.schedule.fires(FaultKind.READ_THROTTLED):
            raise client_error("ProvisionedThroughputExceededException", "BatchGetItem")
        request = kwargs["RequestItems"]
        [(table, spec)] = request.items()
        keys = spec["Keys"]
        if len(keys) < 2 or not self.schedule.fires(FaultKind.UNPROCESSED_KEYS):
            return self._client.batch_get_item(**kwargs)
        served = self.schedule.randint(0, len(keys) - 1)  # sometimes nothing at all is served
        withheld = keys[served:]
        response = self._client.batch_get_item(RequestItems={table: {**spec, "Keys": keys[:served]}}) if served else {}
        return {
            "Responses": response.get("Responses", {table: []}),
            "UnprocessedKeys": {table: {**spec, "Keys": withheld}},
        }

    def batch_write_item(self, **kwargs: Any) -> dict[str, Any]:
        """The counter directory's puts: throttled, or written with the answer lost (then put again)."""
        if self.schedule.fires(FaultKind.PROVISIONED):
            raise client_error("ProvisionedThroughputExceededException", "BatchWriteItem")
        response = self._client.batch_write_item(**kwargs)
        if self.schedule.fires(FaultKind.RESPONSE_LOST):
            raise client_error("InternalServerError", "BatchWriteItem")
        return response

    def query(self, **kwargs: Any) -> dict[str, Any]:
        if self.schedule.fires(FaultKind.READ_THROTTLED):
            raise client_error("ProvisionedThroughputExceededException", "Query")
        if self.schedule.fires(FaultKind.QUERY_PAGED):
            # DynamoDB ends a page at 1 MB; a page of a few items makes every range a paged one.
            kwargs = {**kwargs, "Limit": min(kwargs.get("Limit", 10), self.schedule.randint(1, 10))}
        return self._client.query(**kwargs)



class InjectedCrash(RuntimeError):
    """The invocation died here (error, timeout, out of memory): Lambda will retry it."""


def quick_backoff(seed: int, schedule: Callable[[], Backoff] = Backoff) -> Callable[[], Backoff]:
    """Real backoff schedule (``Backoff``'s 8 tries unless told), no real sleeping, seeded jitter."""
    rng = random.Random(seed)
    return lambda: dataclasses.replace(schedule(), sleep=lambda _seconds: None, rng=rng)


class FaultyHandler:
    """A Lambda handler: ``process`` with the real ``CountsTable.commit``, crashing where the schedule says.

    ``last_summary`` is the summary of the last invocation that returned.
    """

    def __init__(self, table: CountsTable, settings: Settings, schedule: FaultSchedule) -> None:
        self.table = table
        self.settings = settings
        self.schedule = schedule
        self.last_summary: Summary | None = None
        # The handler's counter directory, written after each commit; a crash after a commit skips it.
        self.directory = CounterDirectory(table.client, table.table_name, settings, backoff=table.backoff)

    def __call__(self, event: dict[str, Any], context: Any = None) -> dict[str, Any]:
        commits_done = 0

        def commit(segment: Segment, writer: Writer):
            nonlocal commits_done
            crash = FaultKind.CRASH_BETWEEN_COMMITS if commits_done else FaultKind.CRASH_BEFORE_COMMIT
            if self.schedule.fires(crash):
                raise InjectedCrash(crash.value)
            result = self.table.commit(segment, writer)
            commits_done += 1
            if self.schedule.fires(FaultKind.TIMEOUT_AFTER_COMMIT):
                raise InjectedCrash(FaultKind.TIMEOUT_AFTER_COMMIT.value)
            return result

        try:
            response, summary = process(event, self.directory.recording(commit), self.settings)
            if self.schedule.fires(FaultKind.TIMEOUT_AFTER_RETURN):
                raise InjectedCrash(FaultKind.TIMEOUT_AFTER_RETURN.value)
        except InjectedCrash:
            self.directory.written.clear()  # a crashed runtime starts afresh, its memory gone
            raise
        self.last_summary = summary
        return response


@contextlib.contextmanager
def segment_limit(items: int) -> Iterator[None]:
    """Close segments at ``items`` bucket items.

    Exactly-once does not depend on the limit, and a small one puts far more
    commit boundaries (and crash points between commits) into short streams.
    """
    with mock.patch.object(segments, "MAX_SEGMENT_ITEMS", items):
        yield


# Errors a correct system may raise in an invocation that Lambda then retries (Lambda retries any
# error; these are the ones a fault may cause, anything else is a bug and ends the test).
RETRIED_ERRORS = (InjectedCrash, RetriesExhausted, CommitFailed)
MAX_ATTEMPTS_PER_SHARD = 5_000
# Faults stop once their budget is spent: an invocation failing this often in a row never will succeed.
MAX_FAILURES_IN_A_ROW = 200


class LambdaShard:
    """One shard's records handed to a handler the way Lambda's event source mapping may hand them.

    The batches and windows are ``cut_invocations``'s. On top, per the schedule:
    a window may be terminated early (its final invoke comes before its last
    record, the rest forms a new window) or end with a separate empty final
    invoke; these shapes are fixed per window, as Lambda's are for a given
    stream. A failed invocation is retried with the same event and state, or
    re-cut into two smaller batches, or the whole window is redelivered from
    its first record with empty state. A successful invocation or a completed
    window may be delivered once more.

    ``summaries`` holds the summary of every invocation whose result moved
    the shard forward, once per record.
    """

    def __init__(
        self,
        records: list[dict[str, Any]],
        *,
        shard_id: str,
        stream_arn: str,
        config: DeliveryConfig,
        handler: FaultyHandler,
        schedule: FaultSchedule,
        stats: FaultStats = STATS,
    ) -> None:
        self.config = config
        self.handler = handler
        self.schedule = schedule
        self.stats = stats
        self.summaries: list[Summary] = []
        self.attempts = 0
        self.failures_in_a_row = 0
        self.failed: list[BaseException] = []  # every failed attempt's error, in order
        events = cut_invocations(records, shard_id=shard_id, stream_arn=stream_arn, config=config)
        self.windows = self._shape(_split_windows(events))

    def steps(self) -> Iterator[None]:
        """Deliver everything; yields after every handler call so that shards can interleave."""
        for window in self.windows:
            summaries = yield from self._deliver_window(list(window))
            self.summaries.extend(summaries)
            if self.schedule.fires(FaultKind.WINDOW_REDELIVERED):
                yield from self._deliver_window(list(window))

    def run(self) -> None:
        for _ in self.steps():
            pass

    def _deliver_window(self, events: list[dict[str, Any]]) -> Iterator[None]:
        original = list(events)
        summaries: list[Summary] = []
        state: dict[str, Any] = {}
        index = 0
        while index < len(events):
            event = {**events[index], "state": state}
            try:
                response, summary = self._attempt(event)
            except RETRIED_ERRORS:
                yield
                if self.schedule.fires(FaultKind.WINDOW_REDELIVERED):
                    events, state, index, summaries = list(original), {}, 0, []
                elif len(event["Records"]) > 1 and self.schedule.fires(FaultKind.RETRY_RECUT):
                    events[index : index + 1] = _split_event(event, self.schedule.randint(1, len(event["Records"]) - 1))
                continue
            yield
            summaries.append(summary)
            if self.schedule.fires(FaultKind.INVOCATION_REDELIVERED):
                again = yield from self._until_success(event)
                assert again == response, f"redelivered invocation answered differently; {self.schedule!r}"
            state = {} if event["isFinalInvokeForWindow"] else dict(response.get("state") or {})
            index += 1
        return summaries

    def _until_success(self, event: dict[str, Any]) -> Iterator[None]:
        while True:
            try:
                response, _ = self._attempt(event)
            except RETRIED_ERRORS:
                yield
                continue
            yield
            return response

    def _attempt(self, event: dict[str, Any]) -> tuple[dict[str, Any], Summary]:
        self.attempts += 1
        if self.attempts > MAX_ATTEMPTS_PER_SHARD:
            raise AssertionError(f"shard never drained after {MAX_ATTEMPTS_PER_SHARD} attempts; {self.schedule!r}")
        try:
            response = self.handler(event)
        except RETRIED_ERRORS as error:
            self.stats.add("failed_attempts")
            self.failed.append(error)
            self.failures_in_a_row += 1
            if self.failures_in_a_row >= MAX_FAILURES_IN_A_ROW:
                raise AssertionError(f"an invocation failed {self.failures_in_a_row} times in a row: {error!r}") from error
            raise
        self.failures_in_a_row = 0
        self.stats.add("invocations")
        return response, self.handler.last_summary

    def _shape(self, windows: list[list[dict[str, Any]]]) -> list[list[dict[str, Any]]]:
        shaped: list[list[dict[str, Any]]] = []
        for window in windows:
            records = [record for event in window for record in event["Records"]]
            if len(records) > 1 and self.schedule.fires(FaultKind.WINDOW_TERMINATED_EARLY):
                cut = self.schedule.randint(1, len(records) - 1)
                shaped.append(_rebatch(window[0], records[:cut], self.config.batch_size, terminated_early=True))
                shaped.append(_rebatch(window[0], records[cut:], self.config.batch_size))
            else:
                shaped.append(window)
        for window in shaped:
            if window[-1]["Records"] and self.schedule.fires(FaultKind.EMPTY_FINAL_INVOKE):
                window[-1] = {**window[-1], "isFinalInvokeForWindow": False}
                window.append({**window[-1], "Records": [], "isFinalInvokeForWindow": True})
        return shaped


def _split_windows(events: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    windows: list[list[dict[str, Any]]] = [[]]
    for event in events:
        windows[-1].append(event)
        if event["isFinalInvokeForWindow"]:
            windows.append([])
    return [window for window in windows if window]


def _rebatch(
    template: dict[str, Any], records: list[dict[str, Any]], batch_size: int, *, terminated_early: bool = False
) -> list[dict[str, Any]]:
    batches = [records[i : i + batch_size] for i in range(0, len(records), batch_size)]
    events = [{**template, "Records": batch, "isFinalInvokeForWindow": False} for batch in batches]
    events[-1] = {**events[-1], "isFinalInvokeForWindow": True, "isWindowTerminatedEarly": terminated_early}
    return events


def _split_event(event: dict[str, Any], at: int) -> list[dict[str, Any]]:
    """One batch as two; the second keeps the final flags, the first carries none."""
    first = {
        **event,
        "Records": event["Records"][:at],
        "isFinalInvokeForWindow": False,
        "isWindowTerminatedEarly": False,
    }
    return [first, {**event, "Records": event["Records"][at:]}]


def interleave(shards: list[LambdaShard], rng: random.Random) -> None:
    """Run the shards' deliveries with their invocations interleaved in a seeded order."""
    running = [shard.steps() for shard in shards]
    while running:
        steps = rng.choice(running)
        try:
            next(steps)
        except StopIteration:
            running.remove(steps)
