"""One Lambda invocation's work: parse records, fold segments, commit them, carry state.

Pure apart from the ``commit`` callable it is given, so the same code runs in
Lambda, in the local stream runner, and in tests with injected faults.

The event source mapping must use a tumbling window: the open segment travels
in ``state`` and is committed by the final invocation of the window, or
earlier when it outgrows its budget. Only a windowed event names its shard,
and exactly-once commits key every write on the shard that made it (its
watermark, commit.py), so an event without a window is refused: counting it
could lose or double counts silently, refusing keeps its records in the
stream (for 24 hours) until the mapping is fixed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tally.core.commit import CommitResult, ReadAgain, ReadRecords, Unresolved, Writer
from tally.core.item_growth import ItemGrowth, item_growth
from tally.core.overlaps import RecordsAgain
from tally.core.records import CounterEvent, Outcome, Reason, Rejection, parse_record
from tally.core.ladder import Ladder
from tally.core.segments import Segment, SegmentFolder, UnreadableState
from tally.core.settings import Settings

Commit = Callable[[Segment, Writer], CommitResult]


class WindowRequired(RuntimeError):
    """The event comes from an event source mapping without a tumbling window, or names no shard."""


@dataclass
class Summary:
    """What an invocation did, for the log line and the metrics."""

    records: int = 0
    counted: int = 0  # counter events: a record counted by three rules counts 3
    skipped: int = 0
    rejected: Counter[Reason] = field(default_factory=Counter)
    rejected_by_rule: Counter[str] = field(default_factory=Counter)
    bucket_updates: int = 0  # bucket items updated
    updates_already_applied: int = 0  # found applied by an earlier try (or the previous release)
    updates_resumed: int = 0  # items that took a segment's first part from a reader that cut it elsewhere
    commit_retries: int = 0
    # Write units the applied bucket updates consumed (as DynamoDB answered), the most one of them did (the
    # largest item written, in started KB), and the bytes a watermark of this shard adds to an item.
    bucket_write_units: float = 0.0
    largest_bucket_write_units: float = 0.0
    watermark_bytes: int = 0
    bucket_lanes: int = 1  # the lanes they were written with
    sketches_written: int = 0
    sketch_conflicts: int = 0
    overlaps_read: int = 0  # segments whose carried records were read again from the stream to split an overlap
    stream_requests: int = 0  # the Streams API requests that took
    unresolved: list[Unresolved] = field(default_factory=list)  # items an overlap left unresolved (commit.py)
    rejections: list[Rejection] = field(default_factory=list)
    discarded_states: int = 0
    discarded_state_detail: str = ""
    rebuilt_states: int = 0  # unreadable window states whose records were read again from the stream instead

    @property
    def rejected_total(self) -> int:
        return sum(self.rejected.values())

    def item_growth(self) -> ItemGrowth | None:
        """What to tell the operator about the largest item written: None unless it grew past ITEM_GROWTH_KB
        (core/item_growth.py)."""
        return item_growth(self.largest_bucket_write_units, self.watermark_bytes, self.bucket_lanes)

    def as_log_fields(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "counted": self.counted,
            "skipped": self.skipped,
            "rejected": self.rejected_total,
            "rejected_by_reason": {reason.value: n for reason, n in sorted(self.rejected.items())},
            "rejected_by_rule": dict(sorted(self.rejected_by_rule.items())),
            "bucket_updates": self.bucket_updates,
            "updates_already_applied": self.updates_already_applied,
            "updates_resumed": self.updates_resumed,
            "commit_retries": self.commit_retries,
            "bucket_write_units": self.bucket_write_units,
            "largest_bucket_item_kb": self.largest_bucket_write_units,
            "sketches_written": self.sketches_written,
            "sketch_conflicts": self.sketch_conflicts,
            "overlaps_read": self.overlaps_read,
            "stream_requests": self.stream_requests,
            "unresolved": len(self.unresolved),
            "discarded_states": self.discarded_states,
            "rebuilt_states": self.rebuilt_states,
        }


def is_windowed(event: Mapping[str, Any]) -> bool:
    return "window" in event or "isFinalInvokeForWindow" in event


def writer_of(event: Mapping[str, Any]) -> Writer:
    """The shard an event's records come from, as a writer of bucket items; WindowRequired if it names none."""
    records = event.get("Records") or []
    shard = event.get("shardId")
    if not is_windowed(event) or not isinstance(shard, str) or not shard:
        raise WindowRequired(
            "the event has no tumbling window (or no shardId): tally needs the event source mapping's "
            "TumblingWindowInSeconds between 1 and 900, so that every invocation names its shard"
        )
    return Writer.of_shard(_stream_arn(event, records), shard)


def process(
    event: Mapping[str, Any], commit: Commit, settings: Settings, read_again: ReadAgain | None = None
) -> tuple[dict[str, Any], Summary]:
    """Handle one stream event; return the Lambda response and a summary.

    Raises whatever ``commit`` raises: Lambda then retries the same batch with
    the same input state, and what was committed before is skipped. Raises
    WindowRequired, before any work, for an event without a tumbling window.
    ``read_again`` reads the shard's records again: a window state this release
    cannot read is rebuilt from its records rather than discarded.
    """
    writer = writer_of(event)
    summary = Summary(bucket_lanes=settings.bucket_lanes)
    records = event.get("Records") or []
    open_segment, carried_again = _resume(event.get("state"), summary, writer, read_again)
    folder = SegmentFolder(open_segment, ladder=Ladder.of(settings))
    for segment in folder.fold(outcomes_of(carried_again, settings)):
        _commit(segment, writer, commit, summary)

    outcomes = outcomes_of(records, settings)
    for record_outcomes in outcomes:
        summary.records += 1
        for outcome in record_outcomes:
            _tally(summary, outcome)

    for segment in folder.fold(outcomes):
        _commit(segment, writer, commit, summary)
    if event.get("isFinalInvokeForWindow"):
        last = folder.close()
        if last is not None:
            _commit(last, writer, commit, summary)
    return {"state": {"segment": folder.open.to_state()} if folder.open else {}}, summary


def outcomes_of(records: list[Any], settings: Settings) -> list[list[Outcome]]:
    """Stream records -> what each one counts as, per rule. The backfill parses exported items through here too."""
    return [parse_record(record, settings) for record in records]


def _resume(
    state: Any, summary: Summary, writer: Writer, read_again: ReadAgain | None
) -> tuple[Segment | None, list[Any]]:
    """The window's open segment from the state Lambda hands back (or None), or the records it held, read again.

    A state this release cannot read (another release's format, or damage) is
    never raised on: raising would fail every retry with the same state and
    block the shard for a day. Where it still names its first and last records,
    they are read again from the stream and folded anew, as the window's first
    invocation folded them (WindowStatesRebuilt). Otherwise, or where they have
    left the stream, it is discarded: its records stay uncounted, and the
    summary says so, with whatever the state tells about them, for the log,
    the WindowStatesDiscarded metric and its alarm. This invocation's own
    records start a fresh segment, so a retry rebuilds or discards the same.
    """
    if not state:
        return None, []
    try:
        if not isinstance(state, Mapping):
            raise UnreadableState(f"window state is a {type(state).__name__}, not an object")
        return (Segment.from_state(state["segment"]) if "segment" in state else None), []
    except UnreadableState as error:
        span = _span(state)
        again = RecordsAgain(None, "the state names no records")
        if span is not None and read_again is not None:
            again = read_again(ReadRecords(writer, *span))
            summary.stream_requests += again.requests
        if again.records is not None:
            summary.rebuilt_states += 1
            return None, again.records
        summary.discarded_states += 1
        summary.discarded_state_detail = f"{error}; {_lost_records(state)}; not read again: {again.why_not}"[:600]
        return None, []


def _span(state: Any) -> tuple[str, str] | None:
    """The first and last records an unreadable state says it folded, when it says so plainly."""
    segment = state.get("segment") if isinstance(state, Mapping) else None
    first, last = (segment.get("first"), segment.get("last")) if isinstance(segment, Mapping) else (None, None)
    if isinstance(first, str) and isinstance(last, str) and first.isdigit() and last.isdigit() and int(first) <= int(last):
        return first, last
    return None


def _lost_records(state: Any) -> str:
    """What an unreadable state still says about the records it held, for recounting them from the events."""
    segment = state.get("segment") if isinstance(state, Mapping) else None
    if not isinstance(segment, Mapping):
        return "its records are unknown"
    first, last, records = segment.get("first"), segment.get("last"), segment.get("records")
    return f"{records} records from sequence {first} to {last} not counted"[:300]


def _tally(summary: Summary, outcome: Outcome) -> None:
    if isinstance(outcome, CounterEvent):
        summary.counted += 1
    elif outcome.reason.is_rejection:
        summary.rejected[outcome.reason] += 1
        if outcome.rule is not None:
            summary.rejected_by_rule[outcome.rule] += 1
        summary.rejections.append(outcome)
    else:
        summary.skipped += 1


def _commit(segment: Segment, writer: Writer, commit: Commit, summary: Summary) -> None:
    result = commit(segment, writer)
    summary.bucket_updates += result.applied
    summary.updates_already_applied += result.already_applied
    summary.updates_resumed += result.resumed
    summary.commit_retries += result.retries
    summary.bucket_write_units += result.write_units
    if result.largest_write_units > summary.largest_bucket_write_units:
        summary.largest_bucket_write_units = result.largest_write_units
        summary.watermark_bytes = writer.watermark_bytes(segment)
    summary.sketches_written += result.sketches_written
    summary.sketch_conflicts += result.sketch_conflicts
    summary.overlaps_read += result.overlaps_read
    summary.stream_requests += result.stream_requests
    summary.unresolved.extend(result.unresolved)


def _stream_arn(event: Mapping[str, Any], records: list[Any]) -> str | None:
    """The stream's ARN: on a windowed event, and on each of its records."""
    arn = event.get("eventSourceARN")
    if arn:
        return str(arn)
    for record in records:
        if isinstance(record, Mapping) and record.get("eventSourceARN"):
            return str(record["eventSourceARN"])
    return None
