"""Closing days and months: each kept counter's day summed once from its hours, each month once from its days.

``core/ladder.py`` says why a close is exact; this module does it against the
counts table. A close of one period (a day or a month of one kept zone) is
cut into the counter directory's partitions (``parts``): each part lists the
kept counters the directory has on the period's UTC days, reads each one's
children and late marks (a Query each, plus its sketch lanes for a distinct
counter), and commits what they add as one segment of the close's writer
(``Writer.of_close``) through the stream's own commit. Each item takes it
once, judged by its own watermark, so a part run again, a close interrupted
and started over, or two closes racing write nothing twice. Once every part
of a period is in, ``finish`` moves the zone's progress item on, which tells
readers the period's items are complete (``dynamo/closing.py``).

The local pipeline and ``scripts/close_periods.py`` run ``close_due``; in the
account a Step Functions state machine runs the same steps
(``plan_due``, ``close_part``, ``finish``) in parallel.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from tally.core.buckets import DAY, MONTH, Bucket, day_index, lane_sort_key
from tally.core.commit import Writer
from tally.core.directory import DIRECTORY_PARTITIONS, days_between
from tally.core.ladder import Closed, children, closed_value, closes_at, due_days, first_closable_day, late_partition
from tally.core.segments import MAX_SEGMENT_ITEMS, Item, Segment
from tally.core.settings import Settings
from tally.core.sketches import Sketch, union
from tally.dynamo.closing import ProgressItems
from tally.dynamo.counts_table import CountsTable
from tally.dynamo.directory import CounterDirectory

# Periods one run closes at most: a month of days per zone (a table enabling calendar buckets closes its
# hours' months over several runs), and their months.
MAX_DAYS_PER_RUN = 31
# Counters whose children are read at once: a close part is bound by its reads' round trips.
CLOSE_WORKERS = 32


@dataclass
class CloseSummary:
    """What a close did: periods finished, counters read, items written or found written, requests made."""

    periods: list[str] = field(default_factory=list)
    counters: int = 0
    written: int = 0
    already_closed: int = 0
    empty: int = 0  # counters whose period held only late records (already added directly) or nothing
    # Periods written from children an overlap left unresolved: marked so, as their children are (counter sort key).
    unresolved: list[str] = field(default_factory=list)
    reads: int = 0
    write_units: float = 0.0

    def add(self, other: CloseSummary) -> None:
        self.periods += other.periods
        self.counters += other.counters
        self.written += other.written
        self.already_closed += other.already_closed
        self.empty += other.empty
        self.reads += other.reads
        self.unresolved += other.unresolved
        self.write_units += other.write_units


@dataclass(frozen=True)
class Due:
    """The periods a run closes, per zone: days first, then the months whose last day is among them."""

    days: tuple[Bucket, ...]
    months: tuple[Bucket, ...]


class Closer:
    """Closes the kept zones' days and months in the counts table ``table`` (its settings say which)."""

    def __init__(self, table: CountsTable, settings: Settings | None = None, workers: int = CLOSE_WORKERS) -> None:
        self.table = table
        self.workers = workers
        self.settings = settings or table.settings
        self.directory = CounterDirectory(table.client, table.table_name, self.settings)
        self.progress = ProgressItems(table.client, table.table_name, self.table.backoff)
        self.writer = Writer.of_close()
        # Names by (UTC day, partition), listed once a run: a zone's day spans two UTC days, and every kept
        # zone's days list the same ones.
        self._listed: dict[tuple[int, int], list[str]] = {}

    def plan_due(self, now_ms: int, max_days: int = MAX_DAYS_PER_RUN) -> Due:
        """What is due at ``now_ms``, from each zone's progress: the days after the last closed whose close time
        has come (at most ``max_days`` a zone), and the months they complete."""
        days: list[Bucket] = []
        months: list[Bucket] = []
        for zone in self.settings.kept_zones:
            progress = self.progress.read(zone)
            first = progress.since or first_closable_day(zone, now_ms, self.settings)
            due = due_days(zone, progress.days, first, now_ms)[:max_days]
            days += [Bucket.of_day(day, zone) for day in due]
            last_month = None if progress.months is None else Bucket.of_month(progress.months, zone)
            month = Bucket.of_month(first, zone) if last_month is None else last_month._replace(index=last_month.index + 1)
            closed_through = due[-1] if due else progress.days
            while closed_through is not None and closes_at(month) <= now_ms and children(month)[1].index <= day_index(closed_through):
                months.append(month)
                month = month._replace(index=month.index + 1)
        return Due(tuple(days), tuple(months))

    def close_part(self, periods: Sequence[Bucket], part: int) -> CloseSummary:
        """Close ``periods`` (consecutive days, or months, of one zone) for the kept counters of directory
        partition ``part``: each counter's children of all of them read at once (``workers`` at a time), then
        one segment of the close's writer per MAX_SEGMENT_ITEMS items."""
        summary = CloseSummary()
        if not periods:
            return summary
        counters = sorted({name for period in periods for name in self._counters(period, part, summary)})
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            read = list(pool.map(lambda counter: self._closed(counter, periods), counters))
        segment = _close_segment(periods)
        unsure: list[tuple[Item, set[str]]] = []
        for counter, (closed_by_period, requests) in zip(counters, read):
            summary.counters += 1
            summary.reads += requests
            for period in periods:
                closed, sketch, marks = closed_by_period.get(period.sort_key, (None, None, set()))
                if marks:
                    unsure.append(((counter, period), marks))
                if closed is None or closed.count == 0:  # nothing, or only late records: added directly
                    summary.empty += 1
                    continue
                item: Item = (counter, period)
                segment.deltas[item] = closed.count
                if closed.units is not None:
                    segment.sums[item] = closed.units
                if closed.bins:
                    segment.bins[item] = closed.bins
                if sketch is not None:
                    segment.sketches[item] = sketch
                if len(segment.deltas) >= MAX_SEGMENT_ITEMS:
                    self._commit(segment, summary)
                    segment = _close_segment(periods)
        if segment.deltas:
            self._commit(segment, summary)
        for (counter, period), marks in unsure:
            # Reads show the period as not exact, by at most what its children's marks bound, as they show those.
            stored = lane_sort_key(period.sort_key, self.writer.lane(self.settings.bucket_lanes))
            self.progress.mark_unresolved(counter, stored, marks, period.ttl_seconds(self.settings))
            summary.unresolved.append(f"{counter} {period.sort_key}")
        return summary

    def _commit(self, segment: Segment, summary: CloseSummary) -> None:
        result = self.table.commit(segment, self.writer)
        summary.written += result.applied
        summary.already_closed += result.already_applied
        summary.write_units += result.write_units

    def finish(self, periods: list[Bucket]) -> None:
        """Every part of ``periods`` is closed: each zone's progress moves on to the last of them (the first close
        of a zone also says where its closed days begin, ``since``: readers take no day before it from its item)."""
        for zone in {period.zone for period in periods}:
            mine = [period for period in periods if period.zone == zone]
            days = [p for p in mine if p.kind == DAY]
            last_day = max(days, default=None, key=lambda p: p.index)
            last_month = max((p for p in mine if p.kind == MONTH), default=None, key=lambda p: p.index)
            self.progress.advance(zone, last_day, last_month, min(days, default=None, key=lambda p: p.index))

    def close_due(self, now_ms: int, parts: int = DIRECTORY_PARTITIONS) -> CloseSummary:
        """Close everything due at ``now_ms``, in order: each day (all its parts), then the months."""
        summary = CloseSummary()
        due = self.plan_due(now_ms)
        for stage in (due.days, due.months):
            for run in runs_of(stage):
                for part in range(parts):
                    summary.add(self.close_part(run, part))
                self.finish(run)
                summary.periods += [period.sort_key for period in run]
        return summary

    def _counters(self, period: Bucket, part: int, summary: CloseSummary) -> list[str]:
        """The kept counters with directory entries in partition ``part`` on any UTC day the period touches: a
        Query of the names starting with the one kept prefix, or of all names where several are kept."""
        widest = _widest(self.settings.calendar_prefixes)
        prefix = widest[0] if len(widest) == 1 else ""
        names: set[str] = set()
        for day in days_between(period.start_ms, period.end_ms):
            if (day, part) not in self._listed:
                page = self.directory.part(prefix, [day], part)
                self._listed[(day, part)] = page.names
                summary.reads += page.requests
            names.update(self._listed[(day, part)])
        return sorted(name for name in names if self.settings.keeps_calendar(name))

    def _closed(
        self, counter: str, periods: Sequence[Bucket]
    ) -> tuple[dict[str, tuple[Closed, Sketch | None, set[str]]], int]:
        """What ``counter``'s periods add, by period sort key: their children less the children's late marks, the
        children's distinct values, and the marks of children an overlap left unresolved (``close <child>: <mark>``);
        and the requests it took (a Query of its children, one of its marks, one per sketch lane of a distinct
        counter)."""
        first, last = children(periods[0])[0], children(periods[-1])[1]
        rules = self.settings.counter_rules
        distinct = rules.counts_distinct(counter)
        read = self.table.query(counter, first.sort_key, last.sort_key, distinct=distinct)
        marks = self.table.query(late_partition(counter), first.sort_key, last.sort_key)
        sums, bins = rules.sums(counter), rules.keeps_histogram(counter)
        closed = {}
        for period in periods:
            within = _within(period)
            sketches = [sketch for key, sketch in read.sketches.items() if within(key[1])]
            closed[period.sort_key] = (
                closed_value(
                    _of(read.counts, within), _of(marks.counts, within),
                    _of(read.sums, within) if sums else None, _of(marks.sums, within),
                    _of(read.bins, within) if bins else None, _of(marks.bins, within),
                ),
                union(sketches) if sketches else None,
                {f"close {sort_key}: {mark}" for (_, sort_key), marks in read.unresolved.items() if within(sort_key)
                 for mark in marks},
            )
        return closed, read.requests + marks.requests


def _close_segment(periods: Sequence[Bucket]) -> Segment:
    """An empty segment of the close's writer: at position 1 (each item takes one close in its life), dated
    when its periods could first be closed (the lanes it writes are those in force then, whenever it runs)."""
    return Segment("1", closes_at(periods[0]), "1", records=1, held=None)


def _within(period: Bucket) -> Callable[[str], bool]:
    """Whether a child's sort key lies in ``period``."""
    first, last = children(period)
    low, high = first.sort_key, last.sort_key
    return lambda sort_key: low <= sort_key <= high


def _of(values: dict, within: Callable[[str], bool]) -> dict:
    """Fetched values keyed by (partition, bucket sort key) -> by sort key, those ``within`` a period."""
    return {sort_key: value for (_partition, sort_key), value in values.items() if within(sort_key)}


def runs_of(periods: Sequence[Bucket]) -> list[list[Bucket]]:
    """``periods`` in runs a close reads at once: consecutive periods of one zone and kind, at most a month of
    days (their children fit one Query of a few pages)."""
    found: list[list[Bucket]] = []
    for period in periods:
        last = found[-1][-1] if found else None
        if last is not None and (last.zone, last.kind) == (period.zone, period.kind) and period.index == last.index + 1 \
                and len(found[-1]) < MAX_DAYS_PER_RUN:
            found[-1].append(period)
        else:
            found.append([period])
    return found


def _widest(prefixes: tuple[str, ...]) -> list[str]:
    """The prefixes none of the others starts: listing them lists every kept counter once."""
    ordered = sorted(set(prefixes))
    return [p for p in ordered if not any(p != q and p.startswith(q) for q in ordered)]
