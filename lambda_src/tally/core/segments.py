"""Events -> segments: per-bucket deltas for a run of consecutive stream records. No I/O.

A segment holds the deltas of every record from its first to its last, however
many bucket items they touch: with a tumbling window it grows for the whole
window, so each bucket is written once per window and shard however many
events fall in it. It is committed in parts of at most 99 bucket items, one
TransactWriteItems each (99 updates + 1 marker = DynamoDB's 100-item limit).

Folding is deterministic in stream order, and so is the split into parts, so a
retried invocation rebuilds the very same parts and finds their markers.

A segment closes early only when it would outgrow MAX_SEGMENT_ITEMS (bounding
the time one commit takes) or STATE_BUDGET_BYTES (half of the 1 MB Lambda
allows a tumbling window's state, which carries the open segment).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from tally.core.buckets import Bucket, buckets_of
from tally.core.records import CounterEvent, Reason, Rejection

MAX_PART_ITEMS = 99
MAX_SEGMENT_ITEMS = 50 * MAX_PART_ITEMS
STATE_BUDGET_BYTES = 512_000
REJECTED_COUNTER_PREFIX = "#rejected#"
STATE_VERSION = 1
# JSON of one state entry beyond its counter name: sort key, delta, brackets, commas.
_ENTRY_OVERHEAD_BYTES = 48

Item = tuple[str, Bucket]  # (counter, bucket)


class UnreadableState(ValueError):
    """A tumbling-window state this release cannot read (another format version, or damaged)."""


def rejected_counter(reason: Reason) -> str:
    """The reserved counter that counts rejections of one reason, by arrival time."""
    return REJECTED_COUNTER_PREFIX + reason.value


def _entry_bytes(counter: str) -> int:
    return len(json.dumps(counter)) + _ENTRY_OVERHEAD_BYTES


@dataclass
class Segment:
    """Deltas per (counter, bucket) for the records from ``first_sequence`` to ``last_sequence``."""

    first_sequence: str
    first_arrival_ms: int
    last_sequence: str
    records: int = 0
    deltas: dict[Item, int] = field(default_factory=dict)
    state_bytes: int = 0  # an upper bound on the size of this segment's entries in the window state

    def would_overflow(
        self, items: tuple[Item, ...], max_items: int | None = None, state_budget: int | None = None
    ) -> bool:
        """Whether adding ``items`` would pass the limits (default MAX_SEGMENT_ITEMS, STATE_BUDGET_BYTES)."""
        new = [item for item in items if item not in self.deltas]
        if not new:
            return False
        added_bytes = sum(_entry_bytes(counter) for counter, _ in new)
        return len(self.deltas) + len(new) > (max_items or MAX_SEGMENT_ITEMS) or (
            self.state_bytes + added_bytes > (state_budget or STATE_BUDGET_BYTES)
        )

    def add(self, sequence: str, items: tuple[Item, ...]) -> None:
        deltas = self.deltas
        for item in items:
            if item in deltas:
                deltas[item] += 1
            else:
                deltas[item] = 1
                self.state_bytes += _entry_bytes(item[0])
        self.last_sequence = sequence
        self.records += 1

    def parts(self) -> list[list[tuple[Item, int]]]:
        """The deltas in sort-key order, cut into transactions of at most MAX_PART_ITEMS items."""
        ordered = sorted(self.deltas.items(), key=lambda entry: (entry[0][0], entry[0][1].sort_key))
        return [ordered[start : start + MAX_PART_ITEMS] for start in range(0, len(ordered), MAX_PART_ITEMS)]

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
    def from_state(cls, state: Any) -> Segment:
        """Read what ``to_state`` wrote; raise UnreadableState for anything else, whatever is wrong with it."""
        if not isinstance(state, dict):
            raise UnreadableState(f"segment state is a {type(state).__name__}, not an object")
        if state.get("v") != STATE_VERSION:
            raise UnreadableState(f"segment state version {state.get('v')!r}, this release reads {STATE_VERSION}")
        try:
            deltas = {(str(counter), Bucket.from_sort_key(sk)): int(delta) for counter, sk, delta in state["deltas"]}
            return cls(
                first_sequence=str(state["first"]),
                first_arrival_ms=int(state["arrival"]),
                last_sequence=str(state["last"]),
                records=int(state["records"]),
                deltas=deltas,
                state_bytes=sum(_entry_bytes(counter) for counter, _ in deltas),
            )
        except Exception as error:
            raise UnreadableState(f"segment state unreadable: {type(error).__name__}: {error}"[:300]) from None


def contribution(outcome: CounterEvent | Rejection) -> tuple[Item, Item] | None:
    """The bucket items one parsed record adds 1 to.

    An event counts in its minute and its hour. A rejection counts, by arrival
    time, under its reason's reserved counter, so rejections are queryable like
    any counter. Routine skips (MODIFY, REMOVE) and unreadable records add nothing (None).
    """
    if type(outcome) is CounterEvent:
        minute, hour = buckets_of(outcome.event_ms)
        return ((outcome.counter, minute), (outcome.counter, hour))
    if outcome.reason.is_rejection and outcome.arrival_ms is not None:
        name = rejected_counter(outcome.reason)
        minute, hour = buckets_of(outcome.arrival_ms)
        return ((name, minute), (name, hour))
    return None


class SegmentFolder:
    """Folds parsed records, in stream order, into segments.

    The limits default to the handler's (a segment must fit in a tumbling
    window's state); a backfill, which keeps its segment in memory, may raise them.
    """

    def __init__(
        self, open_segment: Segment | None = None, *, max_items: int | None = None, state_budget: int | None = None
    ) -> None:
        self.open: Segment | None = open_segment
        self.max_items = max_items
        self.state_budget = state_budget

    def fold(self, outcomes: Iterable[CounterEvent | Rejection]) -> Iterator[Segment]:
        """Yield each segment that had to close early; the last one stays in ``open``."""
        for outcome in outcomes:
            items = contribution(outcome)
            if items is None:
                continue
            segment = self.open
            if segment is not None:
                minute, hour = items
                known = segment.deltas
                if (minute not in known or hour not in known) and segment.would_overflow(
                    items, self.max_items, self.state_budget
                ):
                    yield segment
                    self.open = None
            if self.open is None:
                assert outcome.sequence is not None and outcome.arrival_ms is not None
                self.open = Segment(outcome.sequence, outcome.arrival_ms, outcome.sequence)
            self.open.add(outcome.sequence, items)

    def close(self) -> Segment | None:
        """Hand over the open segment (end of window or invocation)."""
        segment, self.open = self.open, None
        return segment
