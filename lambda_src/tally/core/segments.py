"""Events -> segments: per-bucket deltas for a run of consecutive stream records. No I/O.

A segment holds the deltas of every record from its first to its last, however
many bucket items they touch: with a tumbling window it grows for the whole
window, so each bucket is written once per window and shard however many
events fall in it, by one update (commit.py).

Folding is deterministic in stream order, so a retried invocation rebuilds the
very same segments, with the same first records: their updates find the
watermarks they left and skip what they applied.

A segment closes early only when it would outgrow MAX_SEGMENT_ITEMS (bounding
the time one commit takes) or STATE_BUDGET_BYTES (half of the 1 MB Lambda
allows a tumbling window's state, which carries the open segment). Both are
the previous release's, which closed segments at the same records: a segment
it committed in part is rebuilt whole here and its transactions found.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from tally.core.buckets import Bucket, buckets_of
from tally.core.records import CounterEvent, Outcome, Reason

MAX_SEGMENT_ITEMS = 4950
STATE_BUDGET_BYTES = 512_000
REJECTED_COUNTER_PREFIX = "#rejected#"
# Version 1: [counter, sort key, delta] entries. Version 2 adds a fourth field, the sum in
# units, to summing entries. Version 3 has version 2's form: its number tells the previous
# release (which reads 1 and 2) that the segment belongs to a release that commits without
# markers; taking it over, that release would add again what this one may have applied, so
# it discards it instead (WindowStatesDiscarded alarm). Later aggregates extend version 3
# with optional fields.
STATE_VERSION = 3
READABLE_STATE_VERSIONS = (1, 2, STATE_VERSION)
# JSON of one state entry beyond its counter name: sort key, delta, brackets, commas.
_ENTRY_OVERHEAD_BYTES = 48
# ... and of a summing entry's sum: up to 38 digits, sign, quotes, comma.
_SUM_OVERHEAD_BYTES = 44

Item = tuple[str, Bucket]  # (counter, bucket)
# minute item (None: the event counts in its hour alone), hour item, units added to their sums (or None)
Contribution = tuple[Item | None, Item, int | None]
Delta = tuple[Item, int, int | None]  # item, count delta, sum delta in units (None: the item keeps no sum)


class UnreadableState(ValueError):
    """A tumbling-window state this release cannot read (another format version, or damaged)."""


def rejected_counter(reason: Reason) -> str:
    """The reserved counter that counts rejections of one reason, by arrival time."""
    return REJECTED_COUNTER_PREFIX + reason.value


def _entry_bytes(counter: str) -> int:
    return len(json.dumps(counter)) + _ENTRY_OVERHEAD_BYTES


@dataclass
class Segment:
    """Deltas per (counter, bucket) for the records from ``first_sequence`` to ``last_sequence``.

    ``sums`` holds the summed units of the items that summing rules write.
    """

    first_sequence: str
    first_arrival_ms: int
    last_sequence: str
    records: int = 0
    deltas: dict[Item, int] = field(default_factory=dict)
    sums: dict[Item, int] = field(default_factory=dict)
    state_bytes: int = 0  # an upper bound on the size of this segment's entries in the window state

    def would_overflow(
        self, contributions: list[Contribution], max_items: int | None = None, state_budget: int | None = None
    ) -> bool:
        """Whether adding ``contributions`` would pass the limits (default MAX_SEGMENT_ITEMS, STATE_BUDGET_BYTES)."""
        deltas, sums = self.deltas, self.sums
        new: dict[Item, bool] = {}
        added_bytes = 0
        for minute, hour, units in contributions:
            for item in (hour,) if minute is None else (minute, hour):
                if item not in deltas and item not in new:
                    new[item] = True
                    added_bytes += _entry_bytes(item[0])
                if units is not None and item not in sums:
                    added_bytes += _SUM_OVERHEAD_BYTES
        if not added_bytes:
            return False
        return (
            len(deltas) + len(new) > (max_items or MAX_SEGMENT_ITEMS)
            or self.state_bytes + added_bytes > (state_budget or STATE_BUDGET_BYTES)
        )

    def add(self, sequence: str, contributions: list[Contribution]) -> None:
        deltas = self.deltas
        for minute, hour, units in contributions:
            for item in (hour,) if minute is None else (minute, hour):
                if item in deltas:
                    deltas[item] += 1
                else:
                    deltas[item] = 1
                    self.state_bytes += _entry_bytes(item[0])
                if units is not None:
                    if item in self.sums:
                        self.sums[item] += units
                    else:
                        self.sums[item] = units
                        self.state_bytes += _SUM_OVERHEAD_BYTES
        self.last_sequence = sequence
        self.records += 1

    def ordered_deltas(self) -> list[Delta]:
        """Every item's deltas, in sort-key order (counter, then bucket): the order commits work in."""
        ordered = sorted(self.deltas.items(), key=lambda entry: (entry[0][0], entry[0][1].sort_key))
        return [(item, count, self.sums.get(item)) for item, count in ordered]

    def to_state(self) -> dict[str, Any]:
        """JSON-safe form for the tumbling-window state; sums as decimal strings of units (exact anywhere)."""
        entries: list[list[Any]] = []
        for (counter, bucket), delta in self.deltas.items():
            units = self.sums.get((counter, bucket))
            entry = [counter, bucket.sort_key, delta]
            entries.append(entry if units is None else [*entry, str(units)])
        return {
            "v": STATE_VERSION,
            "first": self.first_sequence,
            "arrival": self.first_arrival_ms,
            "last": self.last_sequence,
            "records": self.records,
            "deltas": entries,
        }

    @classmethod
    def from_state(cls, state: Any) -> Segment:
        """Read what ``to_state`` wrote (this version or an earlier one); raise UnreadableState for anything else."""
        if not isinstance(state, dict):
            raise UnreadableState(f"segment state is a {type(state).__name__}, not an object")
        if state.get("v") not in READABLE_STATE_VERSIONS:
            raise UnreadableState(
                f"segment state version {state.get('v')!r}, this release reads "
                + " and ".join(str(v) for v in READABLE_STATE_VERSIONS)
            )
        try:
            deltas: dict[Item, int] = {}
            sums: dict[Item, int] = {}
            for counter, sk, delta, *units in state["deltas"]:
                item = (str(counter), Bucket.from_sort_key(sk))
                deltas[item] = int(delta)
                if units:
                    [unit_text] = units
                    sums[item] = int(unit_text)
            return cls(
                first_sequence=str(state["first"]),
                first_arrival_ms=int(state["arrival"]),
                last_sequence=str(state["last"]),
                records=int(state["records"]),
                deltas=deltas,
                sums=sums,
                state_bytes=sum(_entry_bytes(counter) for counter, _ in deltas) + _SUM_OVERHEAD_BYTES * len(sums),
            )
        except Exception as error:
            raise UnreadableState(f"segment state unreadable: {type(error).__name__}: {error}"[:300]) from None


def contribution(outcome: Outcome) -> Contribution | None:
    """The bucket items one outcome adds 1 to, and the units it adds to their sums.

    An event counts in its minute and its hour, or in its hour alone (minute
    None) when its parse found the minute past the minute retention at
    arrival. A rejection counts, by arrival time, under its reason's reserved
    counter, so rejections are queryable like any counter. Routine skips
    (MODIFY, REMOVE, no rule matched) and unreadable records add nothing (None).
    """
    if type(outcome) is CounterEvent:
        minute, hour = buckets_of(outcome.event_ms)
        if outcome.hour_only:
            return (None, (outcome.counter, hour), outcome.units)
        return ((outcome.counter, minute), (outcome.counter, hour), outcome.units)
    if outcome.reason.is_rejection and outcome.arrival_ms is not None:
        name = rejected_counter(outcome.reason)
        minute, hour = buckets_of(outcome.arrival_ms)
        return ((name, minute), (name, hour), None)
    return None


class SegmentFolder:
    """Folds parsed records, in stream order, into segments; all of one record's outcomes go to one segment.

    The limits default to the handler's (a segment must fit in a tumbling
    window's state); a backfill, which keeps its segment in memory, may raise them.
    """

    def __init__(
        self, open_segment: Segment | None = None, *, max_items: int | None = None, state_budget: int | None = None
    ) -> None:
        self.open: Segment | None = open_segment
        self.max_items = max_items
        self.state_budget = state_budget

    def fold(self, records: Iterable[list[Outcome]]) -> Iterator[Segment]:
        """Yield each segment that had to close early; the last one stays in ``open``."""
        for outcomes in records:
            contributions = [c for c in map(contribution, outcomes) if c is not None]
            if not contributions:
                continue
            segment = self.open
            if segment is not None and segment.would_overflow(contributions, self.max_items, self.state_budget):
                yield segment
                self.open = None
            if self.open is None:
                first = outcomes[0]
                assert first.sequence is not None and first.arrival_ms is not None
                self.open = Segment(first.sequence, first.arrival_ms, first.sequence)
            self.open.add(outcomes[0].sequence, contributions)  # type: ignore[arg-type]

    def close(self) -> Segment | None:
        """Hand over the open segment (end of window or invocation)."""
        segment, self.open = self.open, None
        return segment
