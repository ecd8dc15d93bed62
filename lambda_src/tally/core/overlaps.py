"""An overlap resolved from the stream: a segment's carried records read again, checked, then held. No I/O.

A tumbling window of several invocations carries its earlier records in the
window state as sums. An item that took part of them (another reader cut the
stream elsewhere: a runner stopped early, a mapping created again with other
batches or another window length) must be sent exactly the part it has not
taken, which sums cannot tell. The records are still in the stream: read from
the segment's first record through the last one carried and parsed with the
same settings, they give each record's contributions again. They replace the
sums only if they add up to exactly what the state carried, item by item
(counts, sums, histogram bins) and record by record: a range trimmed from the
stream, a gap, or a rule changed since the window began is ``Unmatched``, and
the commit leaves that item unresolved instead (commit.py), never guessed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tally.core.records import parse_record
from tally.core.ladder import Ladder
from tally.core.segments import Contribution, HeldRecords, Segment, added_by
from tally.core.settings import Settings


class Unmatched(ValueError):
    """The records read again are not the records the window state carried; the message says how they differ."""


@dataclass(frozen=True)
class RecordsAgain:
    """What reading a writer's records again gave: the records (Lambda's shape), or None with the reason they
    could not all be read (trimmed, the shard gone, no stream to read); and the requests it took."""

    records: list[Mapping[str, Any]] | None
    why_not: str = ""
    requests: int = 0


def held_records(records: Iterable[Mapping[str, Any]], settings: Settings) -> list[tuple[int, list[Contribution]]]:
    """Each record that adds to some item, by position, with what it adds: the same parse and the same
    contributions as the invocation that folded it first."""
    held = []
    ladder = Ladder.of(settings)
    for record in records:
        outcomes = parse_record(record, settings)
        added = added_by(outcomes, ladder)
        if added and outcomes[0].sequence is not None:
            held.append((int(outcomes[0].sequence), added))
    return held


def with_carried_records(segment: Segment, records: Iterable[Mapping[str, Any]], settings: Settings) -> Segment:
    """``segment`` holding every record it counts: its carried ones rebuilt from ``records`` (read again from
    its first record on). Raises Unmatched where they differ from what the window state carried."""
    if segment.carried_last is None:
        return segment
    first, carried_last = int(segment.first_sequence), int(segment.carried_last)
    rebuilt = [(position, c) for position, c in held_records(records, settings) if first <= position <= carried_last]
    if not rebuilt or rebuilt[0][0] != first or rebuilt[-1][0] != carried_last:
        ends = f"{rebuilt[0][0]}..{rebuilt[-1][0]}" if rebuilt else "none"
        raise Unmatched(f"the stream gave records {ends} where the window state carried {first}..{carried_last}")
    every = [*rebuilt, *(segment.held.records() if segment.held is not None else ())]
    check = Segment(segment.first_sequence, segment.first_arrival_ms, segment.first_sequence, held=None)
    for position, added in every:
        check.add(str(position), added)
    held = len(every) - len(rebuilt)
    if check.records != segment.records:
        raise Unmatched(f"the stream gave {check.records - held} counted records where the window state "
                        f"carried {segment.records - held}")
    for name in ("deltas", "sums", "bins"):
        ours, theirs = getattr(check, name), getattr(segment, name)
        if ours != theirs:
            differing = sorted(item for item in ours.keys() | theirs.keys() if ours.get(item) != theirs.get(item))
            counter, bucket = differing[0]
            raise Unmatched(f"the records read again add other {name} than the window state carried "
                            f"({len(differing)} items, e.g. {counter} {bucket.sort_key}): a rule changed since")
    return dataclasses.replace(segment, held=HeldRecords.of(every), carried_last=None)
