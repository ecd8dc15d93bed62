"""Count a table's history from a point-in-time export, exactly once together with the stream.

The stream counts only records that arrived at or after the count-from instant
(``Settings.count_from_ms``); everything the table held at that instant is in an
export taken at it. Each exported item is wrapped into the INSERT record the
stream would have delivered, stamped with the count-from instant as its arrival,
and goes through the handler's own parsing (``invocation.outcomes_of``) and
folding, so the same rules accept or reject it.

Exactly once across interruptions: the files of an export are read one after
the other in the order of their keys, and their items folded, in that order,
into segments as the stream folds records (a segment closes at
BACKFILL_SEGMENT_ITEMS buckets, across file boundaries). The whole export is
one writer of the counts table's protocol (commit.py): an item's place is
(file number, line), its segment's place that of its first item, and each
bucket item is updated once per segment under one watermark per export,
however many files touch it. Most exports fit one segment, so most buckets are
written once: the floor. A rerun rebuilds the very same segments in the same
order and finds its watermarks, so it adds nothing twice. A claim item ties
the table's count-from instant to one export, so a second export of the same
instant cannot be counted on top of the first.

Like a stream record, an exported item must be committed within a day of its
arrival (the count-from instant): late events are judged against it
(``backfill_deadline_ms``).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from tally.core.commit import CommitResult, Writer
from tally.core.records import CounterEvent, Outcome, Reason
from tally.core.segments import Segment, SegmentFolder
from tally.core.settings import STREAM_RETENTION_MS, Settings
from tally.invocation import outcomes_of

CHUNK_ITEMS = 1000  # items parsed at a time; segments span chunks and files
# An item's place in its export: (file number, line), one number that orders them.
LINE_BITS = 40
# A backfill keeps its open segment in memory, not in a window state, so it lets one grow
# to this many buckets (a few dozen MB) before committing it: an export lists items in
# hash order, not time order, and a bigger segment writes each bucket fewer times.
BACKFILL_SEGMENT_ITEMS = 200_000
BACKFILL_STATE_BUDGET_BYTES = 10**9

Commit = Callable[[Segment, Writer], CommitResult]


def backfill_deadline_ms(count_from_ms: int) -> int:
    """The last instant a backfill of ``count_from_ms`` may start or resume, as a retried record may commit."""
    return count_from_ms + STREAM_RETENTION_MS


def export_record(image: Mapping[str, Any], position: int, arrival_ms: int) -> dict[str, Any]:
    """The INSERT record the stream would have delivered for an exported item, arriving at ``arrival_ms``.

    The item's place in the export (``place``) stands in for the sequence
    number: unique and ordered within the export, which names the writer.
    """
    return {
        "eventName": "INSERT",
        "eventSource": "aws:dynamodb",
        "dynamodb": {
            "ApproximateCreationDateTime": arrival_ms // 1000,
            "SequenceNumber": str(position),
            "NewImage": image,
            "StreamViewType": "NEW_IMAGE",
        },
    }


def place(file_index: int, line: int) -> int:
    """An exported item's place: its file's number in key order, then its line."""
    if not 0 <= line < 1 << LINE_BITS:
        raise ValueError(f"line {line} of an export file is out of range")
    return file_index << LINE_BITS | line


def export_outcomes(
    images: Iterable[Mapping[str, Any]], first_position: int, arrival_ms: int, settings: Settings
) -> list[list[Outcome]]:
    """Consecutive exported items -> what each counts as under every rule, by the handler's own parsing."""
    records = [export_record(image, first_position + offset, arrival_ms) for offset, image in enumerate(images)]
    return outcomes_of(records, settings)


def write_units(segment: Segment) -> int:
    """WCU one segment's commit costs: one plain update per bucket item (items stay under 1 KB)."""
    return len(segment.deltas)


class WriteRateLimit:
    """Keeps write units per second at or below ``per_second``, averaged from the start (a second of burst)."""

    def __init__(
        self,
        per_second: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if per_second <= 0:
            raise ValueError(f"write rate must be positive, got {per_second}")
        self.per_second = per_second
        self._clock = clock
        self._sleep = sleep
        self._start: float | None = None
        self.spent = 0
        self.waited = 0.0

    def spend(self, units: int) -> None:
        """Wait, if need be, until ``units`` more may be written."""
        now = self._clock()
        if self._start is None:
            self._start = now
        allowed_at = self._start + (self.spent + units) / self.per_second - 1.0
        if allowed_at > now:
            self._sleep(allowed_at - now)
            self.waited += allowed_at - now
        self.spent += units


@dataclass
class BackfillSummary:
    """What a backfill read, counted and wrote."""

    items: int = 0
    counted: Counter[str] = field(default_factory=Counter)  # per counter (one item may count in several)
    rejected: Counter[Reason] = field(default_factory=Counter)
    rejected_by_rule: Counter[str] = field(default_factory=Counter)
    skipped: Counter[Reason] = field(default_factory=Counter)
    files: int = 0
    bucket_updates: int = 0
    updates_already_applied: int = 0  # applied by an earlier, interrupted run
    commit_retries: int = 0
    write_units: int = 0

    @property
    def counted_total(self) -> int:
        return sum(self.counted.values())

    def add(self, records: Iterable[list[Outcome]]) -> None:
        """One entry per item: the outcomes of every rule that matched it."""
        for outcomes in records:
            self.items += 1
            for outcome in outcomes:
                if isinstance(outcome, CounterEvent):
                    self.counted[outcome.counter] += 1
                elif outcome.reason.is_rejection:
                    self.rejected[outcome.reason] += 1
                    if outcome.rule is not None:
                        self.rejected_by_rule[outcome.rule] += 1
                else:
                    self.skipped[outcome.reason] += 1

    def add_commit(self, result: CommitResult, units: int) -> None:
        self.bucket_updates += result.applied
        self.updates_already_applied += result.already_applied
        self.commit_retries += result.retries
        self.write_units += units


def chunks(lines: Iterable[Mapping[str, Any]], size: int | None = None) -> Iterator[tuple[int, list[Mapping[str, Any]]]]:
    """(first position, images) for consecutive runs of ``size`` (default CHUNK_ITEMS) items."""
    size = size or CHUNK_ITEMS
    chunk: list[Mapping[str, Any]] = []
    first = 0
    for position, image in enumerate(lines):
        if not chunk:
            first = position
        chunk.append(image)
        if len(chunk) == size:
            yield first, chunk
            chunk = []
    if chunk:
        yield first, chunk


def backfill_export(
    export_arn: str,
    files: Iterable[tuple[str, Iterable[Mapping[str, Any]]]],
    *,
    count_from_ms: int,
    settings: Settings,
    commit: Commit,
    limit: WriteRateLimit,
    summary: BackfillSummary,
    on_items: Callable[[int], None] = lambda n: None,
) -> None:
    """Count an export's items: one fold over all its files, each segment committed as it closes.

    ``files`` are (key, items) in the order of their keys, the only order a
    rerun can reproduce. A segment closes at BACKFILL_SEGMENT_ITEMS buckets,
    and each bucket is written once per segment however many items fall in
    it; the fold is deterministic, so a rerun rebuilds the same segments and
    skips what it applied before.
    """
    writer = Writer.of_export(export_arn)
    # An export is read in one order only, and its segments are too large to hold their records twice.
    folder = SegmentFolder(max_items=BACKFILL_SEGMENT_ITEMS, state_budget=BACKFILL_STATE_BUDGET_BYTES, hold_records=False)

    def commit_segment(segment: Segment) -> None:
        units = write_units(segment)
        limit.spend(units)
        summary.add_commit(commit(segment, writer), units)

    previous_key = None
    for file_index, (key, images) in enumerate(files):
        if previous_key is not None and key <= previous_key:
            raise ValueError(f"export files must come in the order of their keys: {key!r} after {previous_key!r}")
        previous_key = key
        for first, chunk in chunks(images):
            outcomes = export_outcomes(chunk, place(file_index, first), count_from_ms, settings)
            for segment in folder.fold(outcomes):
                commit_segment(segment)
            summary.add(outcomes)
            on_items(len(chunk))
        summary.files += 1
    last = folder.close()
    if last is not None:
        commit_segment(last)
