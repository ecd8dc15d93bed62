"""Lambda's event source mapping, replayed: stream records -> handler invocations.

The local stream runner, the fault-injection tests and the benchmarks all need
to call the handler exactly as Lambda would: batches of at most BatchSize
records, tumbling windows whose state travels from one invocation to the next,
and failed invocations retried with the very same event. This module does that
and nothing else (no I/O of its own).

Windows follow the records' arrival time (``ApproximateCreationDateTime``):
window start = floor(arrival / length) * length. Stream order is authoritative,
so a record stamped before the open window (clock jitter between writers)
joins the open window instead of reopening an old one, and a record without a
readable arrival joins its neighbours' window.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tally.core.buckets import iso_second
from tally.core.records import arrival_of

MIN_WINDOW_SECONDS, MAX_WINDOW_SECONDS = 1, 900

Handler = Callable[[dict, Any], "dict | None"]
RetryHook = Callable[[dict, BaseException, int], None]


@dataclass(frozen=True)
class DeliveryConfig:
    batch_size: int = 1000  # records per invocation at most (Lambda's BatchSize)
    window_seconds: int = 60  # tumbling window length (Lambda's TumblingWindowInSeconds, 1-900)
    max_attempts: int = 10  # tries per invocation before giving up (then raise DeliveryFailed)

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {self.batch_size}")
        if not MIN_WINDOW_SECONDS <= self.window_seconds <= MAX_WINDOW_SECONDS:
            raise ValueError(
                f"window seconds must be between {MIN_WINDOW_SECONDS} and {MAX_WINDOW_SECONDS}, got "
                f"{self.window_seconds}: tally counts through a tumbling window, the only way an invocation names its shard"
            )
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {self.max_attempts}")


class DeliveryFailed(RuntimeError):
    """An invocation failed on every attempt; Lambda would now give up on the batch."""

    def __init__(self, message: str, event: dict, attempts: int) -> None:
        super().__init__(message)
        self.event = event
        self.attempts = attempts


def window_start(record: dict, window_seconds: int) -> int | None:
    """Start (epoch seconds) of the tumbling window a record arrived in, or None if its arrival is unreadable."""
    stream = record.get("dynamodb") if isinstance(record, dict) else None
    arrival_ms = arrival_of(stream.get("ApproximateCreationDateTime")) if isinstance(stream, dict) else None
    if arrival_ms is None:
        return None
    return arrival_ms // 1000 // window_seconds * window_seconds


def _window_event(
    batch: Sequence[dict],
    start: int,
    *,
    final: bool,
    state: dict,
    shard_id: str,
    stream_arn: str,
    config: DeliveryConfig,
) -> dict:
    return {
        "Records": list(batch),
        "window": {"start": iso_second(start * 1000), "end": iso_second((start + config.window_seconds) * 1000)},
        "state": state,
        "shardId": shard_id,
        "eventSourceARN": stream_arn,
        "isFinalInvokeForWindow": final,
        "isWindowTerminatedEarly": False,
    }


def _batches(records: Sequence[dict], size: int) -> list[list[dict]]:
    return [list(records[i : i + size]) for i in range(0, len(records), size)]


def _group_by_window(
    records: Sequence[dict], window_seconds: int, open_start: int | None = None
) -> list[tuple[int, list[dict]]]:
    """Consecutive records grouped by window, windows never going backwards (see module docstring)."""
    starts = [window_start(record, window_seconds) for record in records]
    known = [start for start in starts if start is not None]
    current = open_start if open_start is not None else (known[0] if known else 0)
    groups: list[tuple[int, list[dict]]] = []
    for record, start in zip(records, starts, strict=True):
        if start is not None and start > current:
            current = start
        if groups and groups[-1][0] == current:
            groups[-1][1].append(record)
        else:
            groups.append((current, [record]))
    return groups


def cut_invocations(records: Sequence[dict], *, shard_id: str, stream_arn: str, config: DeliveryConfig) -> list[dict]:
    """Pure. Lambda-shaped events for one shard's records in stream order, state left {}.

    Records grouped into tumbling windows by arrival, each window's records cut
    into batches of at most batch_size, the last batch of each window marked
    isFinalInvokeForWindow.
    """
    events = []
    for start, window_records in _group_by_window(records, config.window_seconds):
        batches = _batches(window_records, config.batch_size)
        for index, batch in enumerate(batches):
            events.append(
                _window_event(
                    batch,
                    start,
                    final=index == len(batches) - 1,
                    state={},
                    shard_id=shard_id,
                    stream_arn=stream_arn,
                    config=config,
                )
            )
    return events


class ShardDelivery:
    """Feeds one shard's records to a handler the way Lambda's event source mapping does.

    Carries the tumbling-window state returned by each invocation into the next
    invocation of the same window, and retries a failed invocation with the very
    same event (same Records, same input state) up to max_attempts, calling
    on_retry(event, error, attempts_so_far) before each retry; raises
    DeliveryFailed after. Handlers must not mutate the event they are given.

    A full batch is held until the next record shows whether it ends its window,
    so feeding records in any chunks and then calling close() invokes exactly
    the events ``cut_invocations`` cuts from all of them (with state carried).
    """

    def __init__(
        self,
        handler: Handler,
        *,
        shard_id: str,
        stream_arn: str,
        config: DeliveryConfig = DeliveryConfig(),
        context: Any = None,
        on_retry: RetryHook | None = None,
    ) -> None:
        self.handler = handler
        self.shard_id = shard_id
        self.stream_arn = stream_arn
        self.config = config
        self.context = context
        self.on_retry = on_retry
        self.invocations = 0
        self.attempts = 0
        self._pending: list[dict] = []
        self._open_start: int | None = None
        self._open_records = 0
        self._state: dict = {}

    @property
    def open_records(self) -> int:
        """Records delivered into the window still open: not committed until its final invocation."""
        return self._open_records

    @property
    def open_window_end(self) -> int | None:
        """End (epoch seconds) of the window still waiting for records, if any."""
        if self._open_start is None:
            return None
        return self._open_start + self.config.window_seconds

    def deliver(self, records: Sequence[dict]) -> None:
        """Records that have arrived, in order: invoke every batch known to be complete."""
        for start, window_records in _group_by_window(records, self.config.window_seconds, self._open_start):
            if self._open_start is not None and start != self._open_start:
                self._finish_window()
            self._open_start = start
            self._open_records += len(window_records)
            self._pending.extend(window_records)
            while len(self._pending) > self.config.batch_size:
                self._invoke_window_batch(final=False)

    def close(self) -> None:
        """Final invocation(s) for whatever is still open (Lambda closes a window when its time passes)."""
        if self._open_start is not None:
            self._finish_window()

    def _finish_window(self) -> None:
        while len(self._pending) > self.config.batch_size:
            self._invoke_window_batch(final=False)
        self._invoke_window_batch(final=True)
        self._open_start = None
        self._open_records = 0

    def _invoke_window_batch(self, *, final: bool) -> None:
        assert self._open_start is not None
        size = self.config.batch_size
        batch, self._pending = self._pending[:size], self._pending[size:]
        event = _window_event(
            batch,
            self._open_start,
            final=final,
            state=self._state,
            shard_id=self.shard_id,
            stream_arn=self.stream_arn,
            config=self.config,
        )
        response = self._invoke(event)
        self._state = {} if final else dict((response or {}).get("state") or {})

    def _invoke(self, event: dict) -> dict | None:
        attempt = 0
        while True:
            attempt += 1
            self.attempts += 1
            try:
                response = self.handler(event, self.context)
            except Exception as error:
                if attempt >= self.config.max_attempts:
                    raise DeliveryFailed(
                        f"invocation of {len(event['Records'])} records on {self.shard_id} failed "
                        f"{attempt} times, last: {type(error).__name__}: {error}",
                        event,
                        attempt,
                    ) from error
                if self.on_retry is not None:
                    self.on_retry(event, error, attempt)
                continue
            self.invocations += 1
            return response
