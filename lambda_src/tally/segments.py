"""Events -> segments: per-bucket deltas for a run of consecutive stream records. No I/O.

A segment is what one transaction commits: at most 99 bucket items plus its
marker, the 100-item TransactWriteItems limit. Folding is deterministic in
stream order, so a retried invocation rebuilds the very same segments.

The tumbling-window state carries the open segment. Its size is bounded by
99 items x (255-character counter + 18-character sort key), under 60 KB, far
below Lambda's 1 MB state limit, so the item limit is the only one that closes
a segment early.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from tally.buckets import Bucket, buckets_of
from tally.records import CounterEvent, Reason, Rejection

MAX_SEGMENT_ITEMS = 99
REJECTED_COUNTER_PREFIX = "#rejected#"
STATE_VERSION = 1


def rejected_counter(reason: Reason) -> str:
    """The reserved counter that counts rejections of one reason, by arrival time."""
    return REJECTED_COUNTER_PREFIX + reason.value


@dataclass
class Segment:
    """Deltas per (counter, bucket) for the records from ``first_sequence`` to ``last_sequence``."""

    first_sequence: str
    first_arrival_ms: int
    last_sequence: str
    records: int = 0
    deltas: dict[tuple[str, Bucket], int] = field(default_factory=dict)

    def would_overflow(self, items: Iterable[tuple[str, Bucket]]) -> bool:
        new = {item for item in items if item not in self.deltas}
        return len(self.deltas) + len(new) > MAX_SEGMENT_ITEMS

    def add(self, sequence: str, items: Iterable[tuple[str, Bucket]]) -> None:
        for item in items:
            self.deltas[item] = self.deltas.get(item, 0) + 1
        self.last_sequence = sequence
        self.records += 1

    def to_state(self) -> dict[str, Any]:
        """JSON-safe form for the tumbling-window state."""
        return {
            "v": STATE_VERSION,
            "first": self.first_sequence,
            "arrival": self.first_arrival_ms,
            "last": self.last_sequence,
            "records": self.records,
            "deltas": [[counter, bucket.sort_key, delta] for (counter, bucket), delta in self.deltas.items()],
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Segment:
        if state.get("v") != STATE_VERSION:
            raise ValueError(f"unknown segment state version {state.get('v')!r}")
        return cls(
            first_sequence=state["first"],
            first_arrival_ms=int(state["arrival"]),
            last_sequence=state["last"],
            records=int(state["records"]),
            deltas={(counter, Bucket.from_sort_key(sk)): int(delta) for counter, sk, delta in state["deltas"]},
        )


def contribution(outcome: CounterEvent | Rejection) -> tuple[tuple[str, Bucket], ...]:
    """The bucket items one parsed record adds 1 to.

    An event counts in its minute and its hour. A rejection counts, by arrival
    time, under its reason's reserved counter, so rejections are queryable like
    any counter. Routine skips (MODIFY, REMOVE) and unreadable records add nothing.
    """
    if isinstance(outcome, CounterEvent):
        return tuple((outcome.counter, bucket) for bucket in buckets_of(outcome.event_ms))
    if outcome.reason.is_rejection and outcome.arrival_ms is not None:
        name = rejected_counter(outcome.reason)
        return tuple((name, bucket) for bucket in buckets_of(outcome.arrival_ms))
    return ()


class SegmentFolder:
    """Folds parsed records, in stream order, into segments of at most 99 items."""

    def __init__(self, open_segment: Segment | None = None) -> None:
        self.open: Segment | None = open_segment

    def fold(self, outcomes: Iterable[CounterEvent | Rejection]) -> Iterator[Segment]:
        """Yield each segment as it closes; the last one stays in ``open``."""
        for outcome in outcomes:
            items = contribution(outcome)
            if not items:
                continue
            if self.open is not None and self.open.would_overflow(items):
                yield self.open
                self.open = None
            if self.open is None:
                assert outcome.sequence is not None and outcome.arrival_ms is not None
                self.open = Segment(outcome.sequence, outcome.arrival_ms, outcome.sequence)
            self.open.add(outcome.sequence, items)

    def close(self) -> Segment | None:
        """Hand over the open segment (end of window or invocation)."""
        segment, self.open = self.open, None
        return segment
