"""Count a table's history from a point-in-time export, exactly once together with the stream.

The stream counts only records that arrived at or after the count-from instant
(``Settings.count_from_ms``); everything the table held at that instant is in an
export taken at it. Each exported item is wrapped into the INSERT record the
stream would have delivered, stamped with the count-from instant as its arrival,
and goes through the handler's own parsing (``invocation.outcomes_of``) and
folding, so the same rules accept or reject it.

Exactly once across interruptions: the items of one export file are folded,
in file order, into segments as the stream folds records (a segment closes at
BACKFILL_SEGMENT_ITEMS buckets); a segment's marker keys derive from the
export, the file and the position of its first item, and it is committed with
the counts table's own marker protocol. A rerun rebuilds the very same
segments and finds their markers, so it adds nothing twice. A claim item ties
the table's count-from instant to one export, so a second export of the same
instant cannot be counted on top of the first.

Like a stream record, an exported item must be committed within a day of its
arrival (the count-from instant): late events are judged against it, and the markers
that make a rerun safe live two days from arrival (``backfill_deadline_ms``).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from tally.core.commit import CommitResult, source_id
from tally.core.records import CounterEvent, Outcome, Reason
from tally.core.segments import Segment, SegmentFolder
from tally.core.settings import STREAM_RETENTION_MS, Settings
from tally.invocation import outcomes_of

CHUNK_ITEMS = 1000  # items parsed at a time; segments span chunks
# A backfill keeps its open segment in memory, not in a window state, so it lets one grow
# to this many buckets (a few dozen MB) before committing it: an export lists items in
# hash order, not time order, and a bigger segment writes each bucket fewer times.
BACKFILL_SEGMENT_ITEMS = 200_000
BACKFILL_STATE_BUDGET_BYTES = 10**9
# A transactional write costs 2 WCU per started KB of each item; bucket items and markers stay under 1 KB.
WCU_PER_TRANSACTION_ITEM = 2

Commit = Callable[[Segment, str], CommitResult]


def backfill_deadline_ms(count_from_ms: int) -> int:
    """The last instant a backfill of ``count_from_ms`` may start or resume, as a retried record may commit."""
    return count_from_ms + STREAM_RETENTION_MS


def export_record(image: Mapping[str, Any], position: int, arrival_ms: int) -> dict[str, Any]:
    """The INSERT record the stream would have delivered for an exported item, arriving at ``arrival_ms``.

    The item's line number in its export file stands in for the sequence number:
    unique within the file, and the file's name is part of the segment source.
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


def export_outcomes(
    images: Iterable[Mapping[str, Any]], first_position: int, arrival_ms: int, settings: Settings
) -> list[list[Outcome]]:
    """Consecutive exported items -> what each counts as under every rule, by the handler's own parsing."""
    records = [export_record(image, first_position + offset, arrival_ms) for offset, image in enumerate(images)]
    return outcomes_of(records, settings)


def file_source(export_arn: str, data_file: str) -> str:
    """The segment source of one export file: markers of different files or exports never meet."""
    return source_id(export_arn, data_file)


def write_units(segment: Segment) -> int:
    """WCU one segment's commit costs: every bucket update plus one marker per part, transactional."""
    parts = segment.parts()
    return WCU_PER_TRANSACTION_ITEM * (sum(len(part) for part in parts) + len(parts))


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
    transactions_committed: int = 0
    duplicate_transactions: int = 0  # committed by an earlier, interrupted run
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
        self.transactions_committed += result.transactions
        self.duplicate_transactions += result.duplicates
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


def backfill_file(
    export_arn: str,
    data_file: str,
    images: Iterable[Mapping[str, Any]],
    *,
    count_from_ms: int,
    settings: Settings,
    commit: Commit,
    limit: WriteRateLimit,
    summary: BackfillSummary,
    on_items: Callable[[int], None] = lambda n: None,
) -> None:
    """Count one export file's items: one fold over the whole file, each segment committed as it closes.

    A segment closes at BACKFILL_SEGMENT_ITEMS buckets, and each bucket is
    written once per segment however many items fall in it; the fold is
    deterministic, so a rerun rebuilds the same segments and skips the parts
    already committed.
    """
    source = file_source(export_arn, data_file)
    folder = SegmentFolder(max_items=BACKFILL_SEGMENT_ITEMS, state_budget=BACKFILL_STATE_BUDGET_BYTES)

    def commit_segment(segment: Segment) -> None:
        units = write_units(segment)
        limit.spend(units)
        summary.add_commit(commit(segment, source), units)

    for first, chunk in chunks(images):
        outcomes = export_outcomes(chunk, first, count_from_ms, settings)
        for segment in folder.fold(outcomes):
            commit_segment(segment)
        summary.add(outcomes)
        on_items(len(chunk))
    last = folder.close()
    if last is not None:
        commit_segment(last)
    summary.files += 1
