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

A day or month a close wrote from children so marked carries their marks up
(``close <child>: <mark>``, closing.py): it lacks what they lacked when it
was closed, and a repair of the child does not reach it. It is repaired the
same way, recounted over its local midnights, after its children in the
same run (``repair_rank``): a period one of whose marked children is left
unresolved is left so too (``waiting_on``), since its difference could not
be told from theirs. Such a period has no unresolved record of its own (a
close writes none): the repair finds it by its counter's marked day and
month items, and records it (``period_record``) before repairing anything,
so a later run finds it again though the hours' records are gone.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tally.core.amounts import stored_units
from tally.core.buckets import DAY, MONTH, Bucket
from tally.core.histograms import is_bin
from tally.core.tables import COUNT_ATTRIBUTE, COUNTS_TABLE, SUM_ATTRIBUTE, TTL_ATTRIBUTE, UNRESOLVED_ATTRIBUTE, UNRESOLVED_PARTITION
from tally.core.units import MINUTE_MS

_BOUND = re.compile(r"<=(\d+)$")
# What a close writes on a period whose child an overlap left unresolved: ``close <child sort key>: <its mark>``.
_CLOSE_MARK = re.compile(r"^close ([^ ]+): ")
# The order a run repairs buckets in: minutes and hours, then the days closed from them, then the months.
_RANKS = {"M": 0, "H": 0, DAY: 1, MONTH: 2}


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


def repair_rank(sort_key: str) -> int:
    """When a run repairs a bucket: minutes and hours first, then days (closed from hours), then months."""
    return _RANKS[Bucket.from_sort_key(sort_key).kind]


def bucket_minutes(sort_key: str) -> tuple[int, int]:
    """The first and last minute (since the epoch) of a bucket named by its sort key: a day or a month from its
    zone's local midnight to the next (whole UTC hours: kept zones' offsets are)."""
    bucket = Bucket.from_sort_key(sort_key)
    return bucket.start_ms // MINUTE_MS, bucket.end_ms // MINUTE_MS - 1


def children_named(marks: Iterable[str]) -> set[str]:
    """The children (sort keys) a period's close marks say were unresolved when it was closed."""
    return {match.group(1) for mark in marks if (match := _CLOSE_MARK.match(mark))}


def waiting_on(lanes: list[Lane], unresolved: Collection[str]) -> str | None:
    """Why a day or month is not repaired yet: a child its marks name that is still ``unresolved`` (sort keys of
    its counter), or None."""
    named = sorted(children_named(mark for lane in lanes for mark in lane.marks) & set(unresolved))
    if not named:
        return None
    return (
        f"it was closed from {named[0]}{' and others' if len(named) > 1 else ''}, left unresolved: "
        "it is repaired once they are"
    )


def period_record(counter: str, sort_key: str, marks: Iterable[str], ttl_seconds: int | None) -> dict[str, Any]:
    """The unresolved record (DynamoDB JSON) of a day or month a close marked, which a close does not write: the
    repair puts it on finding the period, so a run stopped, or a period left unresolved, is found again. One per
    period (its key names the counter and the period), so putting it again changes nothing."""
    listed = sorted(marks)
    key = f"{counter}|{sort_key}|close"
    item: dict[str, Any] = {
        COUNTS_TABLE.partition_key: {"S": UNRESOLVED_PARTITION},
        COUNTS_TABLE.sort_key: {"S": hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]},
        "counter": {"S": counter},
        "bucket": {"S": sort_key},
        "writer": {"S": "close"},
        "missing_at_most": {"S": str(bound_of(listed))},
        "why": {"S": "closed from children an overlap left unresolved"},
        "mark": {"S": listed[0]},
    }
    if ttl_seconds is not None:
        item[TTL_ATTRIBUTE] = {"N": str(ttl_seconds)}
    return item
