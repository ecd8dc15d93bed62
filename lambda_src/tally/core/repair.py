"""Repair of a bucket an overlap left unresolved: what to add, from a recount of the events table. No I/O.

An unresolved bucket item is low, never high, by at most the bound its marks
give (core/commit.py). The repair recounts the bucket from the events table
(scripts/audit.py) and adds the difference to the marked item, in one
transaction that clears every mark of the bucket and deletes its unresolved
records, conditioned on every lane of the bucket still holding what was read:
a commit landing meanwhile cancels it, and it is judged again. Once done the
marks are gone, so running it again repairs nothing twice.

Nothing is guessed: a difference outside 0..bound (an event the stream has
not committed yet, one tally placed in its hour alone or refused for its
lateness, a recount the table no longer supports) is refused, and the bucket
stays marked, with the reason.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tally.core.amounts import stored_units
from tally.core.histograms import is_bin
from tally.core.tables import COUNT_ATTRIBUTE, COUNTS_TABLE, SUM_ATTRIBUTE, UNRESOLVED_ATTRIBUTE

_BOUND = re.compile(r"<=(\d+)$")


@dataclass(frozen=True)
class Recount:
    """A bucket's truth from the events table: its events, the units they sum to, their histogram bins."""

    count: int
    units: int | None = None
    bins: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Lane:
    """One stored lane item of a bucket, as read (strongly consistent): its key, aggregates and marks."""

    sort_key: str
    count: int
    units: int | None
    bins: Mapping[str, int]
    marks: frozenset[str]

    @classmethod
    def of(cls, item: Mapping[str, Any]) -> Lane:
        return cls(
            sort_key=item[COUNTS_TABLE.sort_key]["S"],
            count=int(item.get(COUNT_ATTRIBUTE, {"N": "0"})["N"]),
            units=stored_units(item[SUM_ATTRIBUTE]["N"]) if SUM_ATTRIBUTE in item else None,
            bins={name: int(value["N"]) for name, value in item.items() if is_bin(name)},
            marks=frozenset(item.get(UNRESOLVED_ATTRIBUTE, {}).get("SS", ())),
        )


@dataclass(frozen=True)
class Correction:
    """What the repair adds to the marked lane ``sort_key`` of the bucket: events, units and bins."""

    sort_key: str
    count: int
    units: int
    bins: Mapping[str, int]
    stored: int  # the bucket's count before, all lanes
    bound: int  # what its marks allowed it to lack


def bound_of(marks: Iterable[str]) -> int:
    """What a bucket's marks allow it to lack, added up ("... <=3")."""
    total = 0
    for mark in marks:
        match = _BOUND.search(mark)
        if match is None:
            raise ValueError(f"not a mark of an unresolved item: {mark!r}")
        total += int(match.group(1))
    return total


def correction(lanes: list[Lane], recount: Recount) -> Correction | str:
    """The correction a bucket's lanes need to hold ``recount``, or why none is made."""
    marked = [lane for lane in lanes if lane.marks]
    if not marked:
        return "no lane of the bucket is marked unresolved (repaired already?)"
    bound = bound_of(mark for lane in marked for mark in lane.marks)
    stored = sum(lane.count for lane in lanes)
    difference = recount.count - stored
    if not 0 <= difference <= bound:
        return (
            f"the events table holds {recount.count} events, the bucket {stored}: a difference of {difference} "
            f"outside 0..{bound}, so it is left unresolved (events not committed yet, placed in their hour alone or "
            "refused as too late, or items changed since: audit the window, and repair again once the stream has caught up)"
        )
    units = 0
    if recount.units is not None:
        units = recount.units - sum(lane.units or 0 for lane in lanes)
    bins: dict[str, int] = {}
    for name in set(recount.bins) | {name for lane in lanes for name in lane.bins}:
        lacking = recount.bins.get(name, 0) - sum(lane.bins.get(name, 0) for lane in lanes)
        if lacking < 0:
            return f"the bucket holds more in histogram bin {name} than the events table: left unresolved"
        if lacking:
            bins[name] = lacking
    if sum(bins.values()) not in (0, difference):
        return f"the histogram bins lack {sum(bins.values())} values where the count lacks {difference}: left unresolved"
    return Correction(marked[0].sort_key, difference, units, bins, stored, bound)
