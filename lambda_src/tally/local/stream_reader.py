"""Read a DynamoDB stream through the Streams API and feed each shard to a handler as Lambda would.

The same reader runs against moto's server and against a real table: it lists
the shards (DescribeStream, paginated), reads each one from TRIM_HORIZON (or
after a checkpointed sequence number) with GetShardIterator and GetRecords,
starts a child shard only once its parent has been read to its end, converts
boto3's records to the shape Lambda hands to the function, and gives them to
one ``ShardDelivery`` per shard.

A tumbling window is closed when a record of a later window arrives or when
its end has passed on the wall clock, as Lambda does, and never before: a
reader that later reads the same records again (from its checkpoint, or from
the trim horizon without one) cuts the same windows. After every final
invocation of a window the shard's checkpoint advances: records up to there
are committed, so a restarted reader can resume after them. A stopped reader
leaves its open windows uncommitted, for the next run to read again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from tally.dynamo.stream import GET_RECORDS_LIMIT, lambda_record
from tally.local.delivery import DeliveryConfig, Handler, RetryHook, ShardDelivery

logger = logging.getLogger(__name__)


@dataclass
class ShardProgress:
    """What the reader knows about one shard."""

    shard_id: str
    parent_id: str | None
    delivery: ShardDelivery
    iterator: str | None = None
    last_read: str | None = None  # sequence number of the last record read
    committed: str | None = None  # sequence number up to which every record is committed
    finished: bool = False  # a closed shard read to its end
    records: int = 0


@dataclass
class ReaderStats:
    records: int = 0
    polls: int = 0
    by_event_name: dict[str, int] = field(default_factory=dict)


class StreamReader:
    """Reads every shard of one stream, parents before children, into per-shard deliveries."""

    def __init__(
        self,
        streams_client: Any,
        stream_arn: str,
        handler: Handler,
        *,
        config: DeliveryConfig = DeliveryConfig(),
        context: Any = None,
        on_retry: RetryHook | None = None,
        limit: int = GET_RECORDS_LIMIT,
        checkpoints: dict[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not 1 <= limit <= GET_RECORDS_LIMIT:
            raise ValueError(f"limit must be between 1 and {GET_RECORDS_LIMIT}, got {limit}")
        self.client = streams_client
        self.stream_arn = stream_arn
        self.handler = handler
        self.config = config
        self.context = context
        self.on_retry = on_retry
        self.limit = limit
        self.clock = clock
        self.shards: dict[str, ShardProgress] = {}
        self.stats = ReaderStats()
        self._resume_after = dict(checkpoints or {})
        self.stop = threading.Event()  # set it (e.g. on Ctrl-C) to end run() after the current invocation

    @property
    def checkpoints(self) -> dict[str, str]:
        """Shard id -> the last sequence number whose record (and all before it) is committed."""
        return {shard.shard_id: shard.committed for shard in self.shards.values() if shard.committed}

    @property
    def invocations(self) -> int:
        return sum(shard.delivery.invocations for shard in self.shards.values())

    @property
    def attempts(self) -> int:
        return sum(shard.delivery.attempts for shard in self.shards.values())

    def describe_shards(self) -> Iterator[dict[str, Any]]:
        """Every shard DescribeStream lists, page after page."""
        request: dict[str, Any] = {"StreamArn": self.stream_arn}
        while True:
            description = self.client.describe_stream(**request)["StreamDescription"]
            yield from description.get("Shards", [])
            last = description.get("LastEvaluatedShardId")
            if not last:
                return
            request["ExclusiveStartShardId"] = last

    def poll(self) -> int:
        """One pass over the stream: read every readable shard until it has nothing more. Returns records read."""
        self._refresh_shards()
        read = 0
        progressed = True
        while progressed:  # a parent read to its end makes its children readable in the same pass
            progressed = False
            for shard in list(self.shards.values()):
                if self.stop.is_set():
                    break
                if shard.finished or not self._parent_done(shard):
                    continue
                count = self._drain(shard)
                read += count
                progressed = progressed or shard.finished
        self.close_ended_windows()
        self.stats.polls += 1
        return read

    def run(
        self,
        *,
        until_idle: bool,
        idle_polls: int = 3,
        poll_interval: float = 1.0,
        commit_open_windows: bool = False,
        on_wait: Callable[[float], None] | None = None,
    ) -> None:
        """Poll until ``stop`` is set or, with until_idle, until ``idle_polls`` passes in a row read nothing
        and no window is open.

        Idle with a window open, it waits for the window to end, polling
        meanwhile, and commits it then, as Lambda would: until the clock
        passes its end, and at most its length (a window open now has ended
        by then, whatever the clock says). ``on_wait(seconds)`` is told how
        long. ``commit_open_windows`` commits them at once instead, before
        their end: only for a stream no other reader will read again (a demo's
        own). Stopped, it commits nothing more: open windows are left for the
        next run.
        """
        idle = 0
        waiting_for: tuple[float, float] | None = None  # (the windows' end, when the wait ends on the monotonic clock)
        while not self.stop.is_set():
            idle = 0 if self.poll() else idle + 1
            if not (until_idle and idle >= idle_polls):
                if idle:
                    self.stop.wait(poll_interval)
                continue
            end = self.open_windows_end()
            if end is None or commit_open_windows:
                break
            if waiting_for is None or end > waiting_for[0]:
                seconds = min(max(0.0, end - self.clock()), float(self.config.window_seconds))
                waiting_for = (end, time.monotonic() + seconds)
                if on_wait is not None:
                    on_wait(seconds)
            left = waiting_for[1] - time.monotonic()
            if left <= 0:
                self.close_windows_ending_by(waiting_for[0])
                waiting_for = None
                continue
            self.stop.wait(min(poll_interval, left) if poll_interval > 0 else left)
        if commit_open_windows and not self.stop.is_set():
            self.close()

    def open_windows_end(self) -> float | None:
        """When the last window still open on any shard ends (epoch seconds), None when none is open."""
        ends = [shard.delivery.open_window_end for shard in self.shards.values()]
        return max((end for end in ends if end is not None), default=None)

    @property
    def open_records(self) -> int:
        """Records read into windows that are still open: uncommitted, read again by the next run."""
        return sum(shard.delivery.open_records for shard in self.shards.values())

    def close_windows_ending_by(self, end: float) -> None:
        """Final invocations for the windows that end by ``end``: they were open when a wait that has run its
        course began, so they have ended."""
        for shard in self.shards.values():
            window_end = shard.delivery.open_window_end
            if window_end is not None and window_end <= end:
                shard.delivery.close()

    def close_ended_windows(self) -> None:
        """Final invocations for windows whose end has passed: Lambda does not wait for more records."""
        now = self.clock()
        for shard in self.shards.values():
            end = shard.delivery.open_window_end
            if end is not None and end <= now:
                shard.delivery.close()

    def close(self) -> None:
        """Commit whatever every shard still holds (open windows, partial batches), before their end."""
        for shard in self.shards.values():
            shard.delivery.close()

    def _refresh_shards(self) -> None:
        for description in self.describe_shards():
            shard_id = description["ShardId"]
            if shard_id not in self.shards:
                self.shards[shard_id] = self._new_shard(shard_id, description.get("ParentShardId"))

    def _new_shard(self, shard_id: str, parent_id: str | None) -> ShardProgress:
        progress: ShardProgress

        def track_commits(event: dict, context: Any) -> dict | None:
            response = self.handler(event, context)
            if event.get("isFinalInvokeForWindow", True) and event["Records"]:
                progress.committed = event["Records"][-1]["dynamodb"]["SequenceNumber"]
            return response

        delivery = ShardDelivery(
            track_commits,
            shard_id=shard_id,
            stream_arn=self.stream_arn,
            config=self.config,
            context=self.context,
            on_retry=self.on_retry,
        )
        progress = ShardProgress(shard_id, parent_id, delivery, committed=self._resume_after.get(shard_id))
        progress.last_read = progress.committed
        return progress

    def _parent_done(self, shard: ShardProgress) -> bool:
        """A parent that is no longer listed has been trimmed: its records are gone, so it cannot hold us back."""
        parent = self.shards.get(shard.parent_id) if shard.parent_id else None
        return parent is None or parent.finished

    def _drain(self, shard: ShardProgress) -> int:
        """GetRecords page after page until a page is empty or the shard ends."""
        read = 0
        while True:
            if shard.iterator is None:
                shard.iterator = self._iterator(shard)
            try:
                response = self.client.get_records(ShardIterator=shard.iterator, Limit=self.limit)
            except ClientError as error:
                if error.response.get("Error", {}).get("Code") != "ExpiredIteratorException":
                    raise
                logger.info("iterator of %s expired; resuming after %s", shard.shard_id, shard.last_read)
                shard.iterator = None
                continue
            records = [lambda_record(record, self.stream_arn) for record in response.get("Records", [])]
            shard.iterator = response.get("NextShardIterator")
            if records:
                self._count(records)
                shard.last_read = records[-1]["dynamodb"]["SequenceNumber"]
                shard.records += len(records)
                read += len(records)
                shard.delivery.deliver(records)
            if shard.iterator is None:
                shard.finished = True
                shard.delivery.close()  # nothing follows a closed shard's last record
                return read
            if not records or self.stop.is_set():
                return read

    def _iterator(self, shard: ShardProgress) -> str:
        request = {"StreamArn": self.stream_arn, "ShardId": shard.shard_id}
        if shard.last_read:
            request.update(ShardIteratorType="AFTER_SEQUENCE_NUMBER", SequenceNumber=shard.last_read)
        else:
            request.update(ShardIteratorType="TRIM_HORIZON")
        return self.client.get_shard_iterator(**request)["ShardIterator"]

    def _count(self, records: list[dict[str, Any]]) -> None:
        self.stats.records += len(records)
        for record in records:
            name = str(record.get("eventName"))
            self.stats.by_event_name[name] = self.stats.by_event_name.get(name, 0) + 1
