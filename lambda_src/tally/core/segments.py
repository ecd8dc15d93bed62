"""Events -> segments: per-bucket deltas for a run of consecutive stream records. No I/O.

A segment holds the deltas of every record from its first to its last, however
many bucket items they touch: with a tumbling window it grows for the whole
window, so each bucket is written once per window and shard however many
events fall in it, by one update (commit.py).

Folding is deterministic in stream order, so a retried invocation rebuilds the
very same segments, with the same first records: their updates find the
watermarks they left and skip what they applied. A reader that cuts the same
records elsewhere (another window length, a runner stopped early) builds other
segments; a segment keeps where the records it folded in this process lie and
what each added to each item (``held``, compactly: no object per record), so
that an item which already took part of it can be sent exactly the rest.

A segment closes early only when it would outgrow MAX_SEGMENT_ITEMS (bounding
the time one commit takes), STATE_BUDGET_BYTES (half of the 1 MB Lambda
allows a tumbling window's state, which carries the open segment) or
MAX_ITEM_BINS histogram bins in one item (one update expression must name
them all, and DynamoDB caps an expression at 4 KB). The first two are the
previous release's, which closed segments at the same records: a segment it
committed in part is rebuilt whole here and its transactions found (it knew
no histograms).
"""

from __future__ import annotations

import base64
import json
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from tally.core.buckets import Bucket, buckets_of
from tally.core.histograms import is_bin
from tally.core.ladder import LATE_PREFIX, Ladder, late_partition, marked_counter
from tally.core.sketches import SPARSE_LIMIT, Sketch, register_index
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
# ... and of one histogram bin: '"+Ab": 1234567, ' (a count above 10^7 is a longer number, but
# takes ten million events of the same item, bin and segment), plus '{"bins": {}}, null, '.
_BIN_BYTES = 16
_BINS_OVERHEAD_BYTES = 24
# Bins one item may take in one segment: an update names each bin in about 11 bytes, within
# DynamoDB's 4 KB per expression beside the count, sum and TTL. A segment that would pass it
# closes, and the next segment writes the item again.
MAX_ITEM_BINS = 256
# ... and of a distinct counter's sketch: its stored form in base64, '{"sketch": ""}' and the rest:
# 11 bytes a hash while it is exact (8 bytes, base64). Its 4,096 registers, zlib-compressed, take at
# most about 8 bytes per register in use (a literal and the match of the zeros after it, each code at
# most 15 bits plus extra bits) beyond the block's header: 11 bytes each in base64 after 200, up to a
# bound that realistic sets stay under (about 1.9 KB compressed from 10,000 values on; see
# test_sketches). A segment's sketch of a few hundred values thus weighs what its values do.
_SKETCH_OVERHEAD_BYTES = 40
_SKETCH_HASH_BYTES = 11
_DENSE_HEADER_BYTES = 200
_SKETCH_REGISTER_BYTES = 11
_DENSE_SKETCH_BYTES = 2_600

Item = tuple[str, Bucket]  # (counter, bucket)
# minute item (None: the event counts in its hour alone), hour item (or a day, month or late mark, which a
# late record adds to on their own: core/ladder.py), units added to their sums (or None), histogram bin they
# add 1 to (or None), hash of the value they add to their distinct values (or None)
Contribution = tuple[Item | None, Item, int | None, str | None, int | None]
# item, count delta, sum delta in units (None: the item keeps no sum), bin deltas (None: no histogram),
# the distinct values added (None: the item counts none)
Delta = tuple[Item, int, int | None, dict[str, int] | None, Sketch | None]


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

    ``sums`` holds the summed units of the items that summing rules write,
    ``bins`` the histogram bins (name -> values) of those histogram rules write,
    ``sketches`` the distinct values of those distinct rules write.
    """

    first_sequence: str
    first_arrival_ms: int
    last_sequence: str
    records: int = 0
    deltas: dict[Item, int] = field(default_factory=dict)
    sums: dict[Item, int] = field(default_factory=dict)
    bins: dict[Item, dict[str, int]] = field(default_factory=dict)
    sketches: dict[Item, Sketch] = field(default_factory=dict)
    state_bytes: int = 0  # an upper bound on the size of this segment's entries in the window state
    # The records folded in this process and what each adds to each item (never in the window state): an item
    # that already took part of the segment, from a reader that cut the stream elsewhere, is sent the rest,
    # rebuilt from them. None: records are not held (a backfill's segments, too large to keep twice).
    held: HeldRecords | None = field(default_factory=lambda: HeldRecords(), compare=False, repr=False)
    # The last record folded before ``held`` starts: the records up to it came in the window state, as sums.
    carried_last: str | None = field(default=None, compare=False)

    @property
    def unheld_through(self) -> int | None:
        """The last position whose record this segment knows only as part of its sums (None: it holds them all)."""
        if self.held is None:
            return int(self.last_sequence)
        return None if self.carried_last is None else int(self.carried_last)

    def would_overflow(
        self, contributions: list[Contribution], max_items: int | None = None, state_budget: int | None = None
    ) -> bool:
        """Whether adding ``contributions`` would pass the limits (default MAX_SEGMENT_ITEMS, STATE_BUDGET_BYTES)."""
        deltas, sums, bins = self.deltas, self.sums, self.bins
        for minute, hour, units, bin, hashed in contributions:  # most records add to what is there: no growth
            if hashed is not None or hour not in deltas or (minute is not None and minute not in deltas):
                break
            if units is not None and (hour not in sums or (minute is not None and minute not in sums)):
                break
            if bin is not None and (bin not in bins.get(hour, ()) or (minute is not None and bin not in bins.get(minute, ()))):
                break
        else:
            return False
        new: dict[Item, bool] = {}
        new_bins: dict[Item, set[str]] = {}
        new_hashes: dict[Item, set[int]] = {}
        added_bytes = 0
        for minute, hour, units, bin, hashed in contributions:
            for item in (hour,) if minute is None else (minute, hour):
                if item not in deltas and item not in new:
                    new[item] = True
                    added_bytes += _entry_bytes(item[0])
                if units is not None and item not in sums:
                    added_bytes += _SUM_OVERHEAD_BYTES
                if bin is not None and bin not in bins.get(item, ()):
                    new_bins.setdefault(item, set()).add(bin)
                if hashed is not None:
                    new_hashes.setdefault(item, set()).add(hashed)
        for item, hashes in new_hashes.items():
            added_bytes += self._sketch_growth(item, hashes)
        if not added_bytes and not new_bins:
            return False
        for item, names in new_bins.items():
            held = bins.get(item, ())
            added_bytes += _BIN_BYTES * len(names) + (0 if held else _BINS_OVERHEAD_BYTES)
            if len(held) + len(names) + _bins_sharing_the_update(bins, new_bins, item) > MAX_ITEM_BINS:
                return True
        return (
            len(deltas) + len(new) > (max_items or MAX_SEGMENT_ITEMS)
            or self.state_bytes + added_bytes > (state_budget or STATE_BUDGET_BYTES)
        )

    def add(self, sequence: str, contributions: list[Contribution]) -> None:
        """Fold one record's contributions in (the records come in stream order), holding them if it holds any."""
        if self.held is not None:
            self.held.add(sequence, contributions)
        deltas = self.deltas
        for minute, hour, units, bin, hashed in contributions:
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
                if bin is not None:
                    self._add_bin(item, bin)
                if hashed is not None:
                    sketch = self.sketches.get(item)
                    if sketch is None or sketch.hashes is None or hashed not in sketch.hashes:  # else: held already
                        self.state_bytes += self._sketch_growth(item, (hashed,))
                        if sketch is None:
                            sketch = self.sketches[item] = Sketch()
                        sketch.add(hashed)
        self.last_sequence = sequence
        self.records += 1

    def _sketch_growth(self, item: Item, hashes: set[int] | tuple[int, ...]) -> int:
        """State bytes that adding ``hashes`` to the item's sketch adds (its exact hashes, or its registers in use)."""
        sketch = self.sketches.get(item)
        if sketch is None:
            return _sketch_bytes(set(hashes))
        if sketch.registers is not None:
            registers = sketch.registers
            fresh = {register_index(hashed) for hashed in hashes if not registers[register_index(hashed)]}
            if not fresh:
                return 0
            used = sketch.registers_used()
            return _dense_bytes(used + len(fresh)) - _dense_bytes(used)
        held = sketch.hashes or set()
        fresh_hashes = [hashed for hashed in set(hashes) if hashed not in held]
        if not fresh_hashes:
            return 0
        if len(held) + len(fresh_hashes) <= SPARSE_LIMIT:
            return _SKETCH_HASH_BYTES * len(fresh_hashes)
        return _sketch_bytes(held.union(fresh_hashes)) - _sketch_bytes(held)

    def _add_bin(self, item: Item, bin: str) -> None:
        bins = self.bins.get(item)
        if bins is None:
            bins = self.bins[item] = {}
            self.state_bytes += _BINS_OVERHEAD_BYTES
        if bin in bins:
            bins[bin] += 1
        else:
            bins[bin] = 1
            self.state_bytes += _BIN_BYTES

    def ordered_deltas(self) -> list[Delta]:
        """Every item's deltas, in sort-key order (counter, then bucket): the order commits work in."""
        ordered = sorted(self.deltas.items(), key=lambda entry: (entry[0][0], entry[0][1].sort_key))
        return [
            (item, count, self.sums.get(item), self.bins.get(item), self.sketches.get(item)) for item, count in ordered
        ]

    def to_state(self) -> dict[str, Any]:
        """JSON-safe form for the tumbling-window state; sums as decimal strings of units (exact anywhere).

        An entry is [counter, sort key, count], then for an item with a sum
        its units, and for an item with other aggregates its units (or null)
        and an object of them by name: {"bins": {bin name: values}, "sketch": its stored form in base64}.
        """
        entries: list[list[Any]] = []
        for (counter, bucket), delta in self.deltas.items():
            item = (counter, bucket)
            units, aggregates = self.sums.get(item), {}
            if item in self.bins:
                aggregates["bins"] = self.bins[item]
            if item in self.sketches:
                aggregates["sketch"] = base64.b64encode(self.sketches[item].to_bytes()).decode("ascii")
            entry = [counter, bucket.sort_key, delta]
            if units is not None or aggregates:
                entry.append(None if units is None else str(units))
            if aggregates:
                entry.append(aggregates)
            entries.append(entry)
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
            bins: dict[Item, dict[str, int]] = {}
            sketches: dict[Item, Sketch] = {}
            for counter, sk, delta, *extra in state["deltas"]:
                item = (str(counter), Bucket.from_sort_key(sk))
                deltas[item] = int(delta)
                if len(extra) > 2:
                    raise ValueError(f"entry of {len(extra) + 3} fields")
                if extra and extra[0] is not None:
                    sums[item] = int(extra[0])
                if len(extra) == 2:
                    aggregates = _read_aggregates(extra[1])
                    if "bins" in aggregates:
                        bins[item] = _read_bins(aggregates["bins"])
                    if "sketch" in aggregates:
                        sketches[item] = Sketch.from_bytes(base64.b64decode(aggregates["sketch"], validate=True))
            return cls(
                first_sequence=str(state["first"]),
                first_arrival_ms=int(state["arrival"]),
                last_sequence=str(state["last"]),
                carried_last=str(state["last"]),
                records=int(state["records"]),
                deltas=deltas,
                sums=sums,
                bins=bins,
                sketches=sketches,
                state_bytes=sum(_entry_bytes(counter) for counter, _ in deltas)
                + _SUM_OVERHEAD_BYTES * len(sums)
                + sum(_BINS_OVERHEAD_BYTES + _BIN_BYTES * len(item_bins) for item_bins in bins.values())
                + sum(_state_bytes_of(sketch) for sketch in sketches.values()),
            )
        except Exception as error:
            raise UnreadableState(f"segment state unreadable: {type(error).__name__}: {error}"[:300]) from None


class HeldItem:
    """The held records that add to one item, as ordinals among the segment's held records (an array of machine
    integers: one entry per contribution, so a record that adds twice is there twice), and what the entries that
    carry them add to the item's sum (units) and histogram (a bin's name), by entry."""

    __slots__ = ("ordinals", "unit_entries", "units", "bin_entries", "bins")

    def __init__(self) -> None:
        self.ordinals = array("I")
        self.unit_entries = array("I")
        self.units: list[int] = []
        self.bin_entries = array("I")
        self.bins: list[str] = []

    def records(self) -> Iterator[tuple[int, int | None, str | None]]:
        """Each entry's record ordinal, units (None: it adds none) and bin (None: it adds to no histogram)."""
        units = dict(zip(self.unit_entries, self.units, strict=True))
        bins = dict(zip(self.bin_entries, self.bins, strict=True))
        for entry, ordinal in enumerate(self.ordinals):
            yield ordinal, units.get(entry), bins.get(entry)


class HeldRecords:
    """The records a segment folded in this process, as much of them as an overlap needs and in compact form:
    their positions (the stream's sequence numbers) in stream order, and per item the records that add to it
    (``HeldItem``). No Python object is kept per record, so a window of held records costs the garbage
    collector nothing; sketches are left out, as an item's sketch merges whole (commit.py)."""

    __slots__ = ("positions", "items")

    def __init__(self) -> None:
        self.positions: list[str] = []
        self.items: dict[Item, HeldItem] = {}

    @classmethod
    def of(cls, records: Iterable[tuple[int, list[Contribution]]]) -> HeldRecords:
        """Records given by position with their contributions, in stream order (records read again)."""
        held = cls()
        for position, contributions in records:
            held.add(str(position), contributions)
        return held

    def add(self, sequence: str, contributions: list[Contribution]) -> None:
        """Hold one more record: it runs for every record folded, so its work per item is written out here."""
        ordinal = len(self.positions)
        self.positions.append(sequence)
        items = self.items
        for minute, hour, units, bin, _hashed in contributions:
            for item in (hour,) if minute is None else (minute, hour):
                kept = items.get(item)
                if kept is None:
                    kept = items[item] = HeldItem()
                ordinals = kept.ordinals
                if units is not None:
                    kept.unit_entries.append(len(ordinals))
                    kept.units.append(units)
                if bin is not None:
                    kept.bin_entries.append(len(ordinals))
                    kept.bins.append(bin)
                ordinals.append(ordinal)

    def records(self) -> Iterator[tuple[int, list[Contribution]]]:
        """Each record held, by position, with what it adds to each item (as an hour's contribution: an item
        alone), in stream order: what ``of`` takes."""
        by_ordinal: list[list[Contribution]] = [[] for _ in self.positions]
        for item, kept in self.items.items():
            for ordinal, units, bin in kept.records():
                by_ordinal[ordinal].append((None, item, units, bin, None))
        for sequence, contributions in zip(self.positions, by_ordinal, strict=True):
            yield int(sequence), contributions

    def of_item(self, item: Item) -> Iterator[tuple[int, int | None, str | None]]:
        """The held records that add to ``item``: position, units (None: the item keeps no sum), histogram bin."""
        kept = self.items.get(item)
        if kept is None:
            return
        positions = self.positions
        for ordinal, units, bin in kept.records():
            yield int(positions[ordinal]), units, bin

    def __len__(self) -> int:
        return len(self.positions)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, HeldRecords):
            return NotImplemented
        mine = {item: list(self.of_item(item)) for item in self.items}
        return self.positions == other.positions and mine == {item: list(other.of_item(item)) for item in other.items}

    __hash__ = None  # type: ignore[assignment]


_AGGREGATE_FIELDS = frozenset({"bins", "sketch"})


def _bins_sharing_the_update(bins: dict[Item, dict[str, int]], new_bins: dict[Item, set[str]], item: Item) -> int:
    """The bins of the item whose update ``item``'s also names: a late mark's item and its bucket's are one
    item in the table (core/ladder.py), so their bins share one update expression."""
    counter, bucket = item
    other = (marked_counter(counter), bucket) if counter.startswith(LATE_PREFIX) else (late_partition(counter), bucket)
    return len(set(bins.get(other, ())) | new_bins.get(other, set()))


def _sketch_bytes(hashes: set[int]) -> int:
    """State bytes of the sketch of these hashes: exact while few, else dense."""
    if len(hashes) > SPARSE_LIMIT:
        return _dense_bytes(len({register_index(hashed) for hashed in hashes}))
    return _SKETCH_OVERHEAD_BYTES + _SKETCH_HASH_BYTES * len(hashes)


def _dense_bytes(registers_used: int) -> int:
    """State bytes of a dense sketch with that many registers in use."""
    return _SKETCH_OVERHEAD_BYTES + min(_DENSE_SKETCH_BYTES, _DENSE_HEADER_BYTES + _SKETCH_REGISTER_BYTES * registers_used)


def _state_bytes_of(sketch: Sketch) -> int:
    if sketch.exact:
        return _SKETCH_OVERHEAD_BYTES + _SKETCH_HASH_BYTES * len(sketch.hashes or ())
    return _dense_bytes(sketch.registers_used())


def _read_aggregates(raw: Any) -> dict[str, Any]:
    """An entry's object of aggregates; a field this release does not know is a state it cannot take over."""
    if not isinstance(raw, dict) or not raw or not set(raw) <= _AGGREGATE_FIELDS:
        raise ValueError(f"aggregates must be an object of {sorted(_AGGREGATE_FIELDS)}, got {str(raw)[:60]}")
    return raw


def _read_bins(raw: Any) -> dict[str, int]:
    if not isinstance(raw, dict) or not raw:
        raise ValueError("bins must be a non-empty object")
    bins = {}
    for name, count in raw.items():
        if not is_bin(name) or type(count) is not int or count < 1:
            raise ValueError(f"not a histogram bin: {str(name)[:8]!r}: {str(count)[:24]}")
        bins[name] = count
    return bins


def contribution(outcome: Outcome) -> Contribution | None:
    """The bucket items one outcome adds 1 to, and what it adds to their sums, histograms and distinct values.

    An event counts in its minute and its hour, or in its hour alone (minute
    None) when its parse found the minute past the minute retention at
    arrival. A rejection counts, by arrival time, under its reason's reserved
    counter, so rejections are queryable like any counter. Routine skips
    (MODIFY, REMOVE, no rule matched) and unreadable records add nothing (None).
    """
    if type(outcome) is CounterEvent:
        if outcome.long_only:
            return None  # its days and months alone: Ladder.climbed
        minute, hour = buckets_of(outcome.event_ms)
        if outcome.hour_only:
            return (None, (outcome.counter, hour), outcome.units, outcome.bin, outcome.hashed)
        return ((outcome.counter, minute), (outcome.counter, hour), outcome.units, outcome.bin, outcome.hashed)
    if outcome.reason.is_rejection and outcome.arrival_ms is not None:
        name = rejected_counter(outcome.reason)
        minute, hour = buckets_of(outcome.arrival_ms)
        return ((name, minute), (name, hour), None, None, None)
    return None


def contributions(outcome: Outcome, ladder: Ladder | None = None) -> list[Contribution]:
    """What one outcome adds: ``contribution``, and with a ``ladder`` what a late record of a kept counter
    adds to its days, months and late marks."""
    if type(outcome) is CounterEvent and outcome.long_only:
        if ladder is None:
            return []
        return ladder.long_only(outcome.counter, outcome.event_ms, outcome.units, outcome.bin, outcome.hashed)
    one = contribution(outcome)
    if one is None:
        return []
    if ladder is None or type(outcome) is not CounterEvent:
        return [one]
    return ladder.climbed(one, outcome.counter, outcome.event_ms, outcome.arrival_ms)


def added_by(outcomes: list[Outcome], ladder: Ladder | None) -> list[Contribution]:
    """What one record's outcomes add: the fold's step, and an overlap's where it reads records again."""
    if ladder is None:
        return [c for c in map(contribution, outcomes) if c is not None]
    return [c for outcome in outcomes for c in contributions(outcome, ladder)]


class SegmentFolder:
    """Folds parsed records, in stream order, into segments; all of one record's outcomes go to one segment.

    The limits default to the handler's (a segment must fit in a tumbling
    window's state); a backfill, which keeps its segment in memory, may raise them.
    ``ladder``: the settings' (``Ladder.of``), where counters keep days and months.
    """

    def __init__(
        self,
        open_segment: Segment | None = None,
        *,
        max_items: int | None = None,
        state_budget: int | None = None,
        hold_records: bool = True,
        ladder: Ladder | None = None,
    ) -> None:
        self.open: Segment | None = open_segment
        self.ladder = ladder
        self.max_items = max_items
        self.state_budget = state_budget
        self.hold_records = hold_records

    def fold(self, records: Iterable[list[Outcome]]) -> Iterator[Segment]:
        """Yield each segment that had to close early; the last one stays in ``open``."""
        ladder = self.ladder
        for outcomes in records:
            added = added_by(outcomes, ladder)
            if not added:
                continue
            segment = self.open
            if segment is not None and segment.would_overflow(added, self.max_items, self.state_budget):
                yield segment
                self.open = None
            if self.open is None:
                first = outcomes[0]
                assert first.sequence is not None and first.arrival_ms is not None
                self.open = Segment(first.sequence, first.arrival_ms, first.sequence, held=HeldRecords() if self.hold_records else None)
            self.open.add(outcomes[0].sequence, added)  # type: ignore[arg-type]

    def close(self) -> Segment | None:
        """Hand over the open segment (end of window or invocation)."""
        segment, self.open = self.open, None
        return segment
