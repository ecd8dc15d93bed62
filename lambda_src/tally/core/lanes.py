"""Lanes over time: how many lanes a segment's items are split into, fixed by when its first record arrived. No I/O.

A writer adds to one lane of each bucket, its hash modulo the lanes (commit.py). Raising ``bucketLanes`` moves
most writers to another lane, and a batch that had committed in part under the old value and is retried under
the new one would add its applied part again, in its new lane. So the counts table keeps the lanes' history
(dynamo/settings.py): a change counts from LANES_LEAD_MS after the first function that counts with it starts,
and a segment takes the lanes in force when its first record arrived. Every try of a batch, before or after the
deploy, on a warm instance of the old configuration or a new one, writes the same items.
"""

from __future__ import annotations

from dataclasses import dataclass

# From a function's start with new lanes to their first arrival: longer than any function goes without reading
# the history again (LANE_HISTORY_REFRESH_MS) plus its longest invocation (60 s), so that every instance, old
# configuration or new, knows the change before a record it applies to arrives.
LANES_LEAD_MS = 5 * 60_000
LANE_HISTORY_REFRESH_MS = 60_000


@dataclass(frozen=True)
class LaneHistory:
    """The lanes in force from each instant on: (from epoch ms, lanes) pairs, ascending, the first from 0."""

    changes: tuple[tuple[int, int], ...]

    def __post_init__(self) -> None:
        starts = [start for start, _ in self.changes]
        if not self.changes or starts[0] != 0 or starts != sorted(set(starts)):
            raise ValueError(f"a lane history starts at 0 and goes forward, got {self.changes}")
        if any(lanes < 1 for _, lanes in self.changes):
            raise ValueError(f"lanes are at least 1, got {self.changes}")

    @classmethod
    def always(cls, lanes: int) -> LaneHistory:
        return cls(((0, lanes),))

    @property
    def latest(self) -> int:
        return self.changes[-1][1]

    def lanes_at(self, arrival_ms: int) -> int:
        """The lanes of a segment whose first record arrived at ``arrival_ms``."""
        lanes = self.changes[0][1]
        for start, value in self.changes:
            if start > arrival_ms:
                break
            lanes = value
        return lanes

    def adopting(self, lanes: int, now_ms: int) -> LaneHistory | None:
        """The history with ``lanes`` in force from LANES_LEAD_MS after ``now_ms``; None when they are the last
        ones in it already (in force, or to be)."""
        if lanes == self.latest:
            return None
        start = max(now_ms + LANES_LEAD_MS, self.changes[-1][0] + 1)
        return LaneHistory((*self.changes, (start, lanes)))
