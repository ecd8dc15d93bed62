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

``scripts/close_periods.py`` runs ``close_due`` on this machine; in the
account a Step Functions state machine runs the same steps in parallel, once
a day (``CLOSE_STEPS``: a plan, a map over the days' parts, one over the
months' parts, a finish), each a Lambda function of
``tally.functions.close_stages`` over ``CloseStages``, which speaks the
state machine's JSON. Nothing here closes a period before its close time by
the clock: a period closed early would stay short for good (each item takes
one close in its life), so the stages refuse it, whatever they are given.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import date
from typing import Any

from tally.core.buckets import DAY, MONTH, Bucket, day_date, day_index, iso_second, lane_sort_key
from tally.core.commit import Writer
from tally.core.directory import DIRECTORY_PARTITIONS, days_between
from tally.core.instants import InvalidInstant, parse_instant
from tally.core.ladder import (
    SKIP_MISSING,
    Closed,
    Progress,
    children,
    closed_value,
    closes_at,
    due_days,
    first_closable_day,
    first_whole_month,
)
from tally.core.segments import MAX_SEGMENT_ITEMS, Item, Segment
from tally.core.settings import Settings
from tally.core.sketches import Sketch, union
from tally.core.units import DAY_MS
from tally.core.windows import now_ms
from tally.dynamo.closing import ProgressItems
from tally.dynamo.counts_table import CountsTable
from tally.dynamo.directory import CounterDirectory

# Periods one run closes at most: a month of days per zone (a table enabling calendar buckets closes its
# hours' months over several runs), and their months.
MAX_DAYS_PER_RUN = 31
# Counters whose children are read at once: a close part is bound by its reads' round trips.
CLOSE_WORKERS = 32
# Counters whose reads a part holds at once.
READ_CHUNK = 2048

# The close's Lambda functions, one per kind of step (named here, never imported: they import this module).
STEPS_MODULE = "tally.functions.close_stages"


@dataclass(frozen=True)
class CloseStep:
    """One state of the close's state machine (the construct renders ``CLOSE_STEPS``, the local runner runs them).

    The plan is given the execution's input (``{}``, or ``{"now": instant}``)
    and its answer is the state. A map step's children are given one item each
    of the state's list ``over`` (a run of periods and a directory partition:
    ``{"periods": [...], "part": n}``), at most ``MAX_PARTS_AT_ONCE`` at a
    time; their answers go to the state under ``result``. The finish is given
    ``{"periods": state["finish"], "closed": {"days": ..., "months": ...}}``
    (the maps' answers) and its answer is the execution's output.
    """

    name: str
    handler: str  # a function of STEPS_MODULE
    over: str | None = None
    result: str | None = None

    @property
    def handler_path(self) -> str:
        return f"{STEPS_MODULE}.{self.handler}"


CLOSE_STEPS = (
    CloseStep("plan", "plan"),
    CloseStep("days", "close_part", over="days", result="daysClosed"),
    CloseStep("months", "close_part", over="months", result="monthsClosed"),
    CloseStep("finish", "finish"),
)
# Parts closed at once: one per directory partition of a run (each reads its counters 32 at a time).
MAX_PARTS_AT_ONCE = DIRECTORY_PARTITIONS
# Days one part of the state machine closes at most: a run that catches up a month of days is cut in weeks, so a
# part of a million counters a day stays well within Lambda's 15 minutes (bench/close_scale.py).
MAX_DAYS_PER_PART = 7


class CloseRefused(ValueError):
    """A step given what it must not close (a period not due by the clock, a malformed run); no retry mends it."""


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

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "write_units": round(self.write_units, 1)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CloseSummary:
        return cls(
            periods=list(data.get("periods", [])),
            counters=int(data.get("counters", 0)),
            written=int(data.get("written", 0)),
            already_closed=int(data.get("already_closed", 0)),
            empty=int(data.get("empty", 0)),
            unresolved=list(data.get("unresolved", [])),
            reads=int(data.get("reads", 0)),
            write_units=float(data.get("write_units", 0.0)),
        )


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
            if due:
                self._refuse_expired(Bucket.of_day(due[0], zone), now_ms)
            days += [Bucket.of_day(day, zone) for day in due]
            last_month = None if progress.months is None else Bucket.of_month(progress.months, zone)
            if last_month is not None:
                month = last_month._replace(index=last_month.index + 1)
            else:  # a zone's first close: months begin with the first whole one (its finish records the one before)
                month = Bucket.of_month(first if progress.since is not None else first_whole_month(first), zone)
            closed_through = due[-1] if due else progress.days
            while closed_through is not None and closes_at(month) <= now_ms and children(month)[1].index <= day_index(closed_through):
                if not progress.month_missing(month):  # a month holding missing days is never closed short
                    months.append(month)
                month = month._replace(index=month.index + 1)
        return Due(tuple(days), tuple(months))

    def _expired(self, day: Bucket, now_ms: int) -> bool:
        """Whether ``day``'s first hour may be gone within the day a run has: its close would be short."""
        return not children(day)[0].alive_at(now_ms + DAY_MS, self.settings)

    def _refuse_expired(self, day: Bucket, now_ms: int) -> None:
        """CloseRefused for a day that can no longer be closed (``_expired``), in one line naming the mend."""
        if self._expired(day, now_ms):
            raise CloseRefused(
                f"{day.sort_key} can no longer be closed: its hours are past the hour retention "
                f"({self.settings.hour_retention_ms // DAY_MS} days, hourRetentionDays), the closes having stopped "
                f"since; run {SKIP_MISSING} to record such days of {day.zone} as missing and close the days after them"
            )

    def unclosable(self, now_ms: int) -> list[tuple[str, date, date]]:
        """Each kept zone's run of due days that can no longer be closed at ``now_ms`` (``_expired``: their hours
        are past the hour retention, the closes having stopped too long): (zone, first, last)."""
        found = []
        for zone in self.settings.kept_zones:
            progress = self.progress.read(zone)
            if progress.days is None:  # no close yet: closes begin where every hour is kept
                continue
            expired = []
            for day in due_days(zone, progress.days, progress.days, now_ms):
                if not self._expired(Bucket.of_day(day, zone), now_ms):
                    break
                expired.append(day)
            if expired:
                found.append((zone, expired[0], expired[-1]))
        return found

    def skip_missing(self, now_ms: int) -> list[tuple[str, date, date]]:
        """Move each kept zone's progress past the days that can no longer be closed (``unclosable``), recording
        them as missing: reads refuse them, the months holding them are never closed, and the close carries on
        with the days after them. The runs skipped (none the second time)."""
        return [run for run in self.unclosable(now_ms) if self.progress.skip(*run)]

    def close_part(self, periods: Sequence[Bucket], part: int) -> CloseSummary:
        """Close ``periods`` (consecutive days, or months, of one zone) for the kept counters of directory
        partition ``part``: each counter's children of all of them read at once (``workers`` at a time), then
        one segment of the close's writer per MAX_SEGMENT_ITEMS items."""
        summary = CloseSummary()
        if not periods:
            return summary
        counters = sorted({name for period in periods for name in self._counters(period, part, summary)})
        segment = _close_segment(periods)
        unsure: list[tuple[Item, set[str]]] = []
        for counter, (closed_by_period, requests) in self._read_all(counters, periods):
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

    def _read_all(
        self, counters: list[str], periods: Sequence[Bucket]
    ) -> Iterator[tuple[str, tuple[dict[str, tuple[Closed, Sketch | None, set[str]]], int]]]:
        """Each counter's ``_closed``, ``workers`` reads in flight, a few thousand counters held at a time: a part
        of a million counters a day must fit a function's memory."""
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            for start in range(0, len(counters), READ_CHUNK):
                chunk = counters[start : start + READ_CHUNK]
                yield from zip(chunk, pool.map(lambda counter: self._closed(counter, periods), chunk))

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
            first_day = min(days, default=None, key=lambda p: p.index)
            if first_day is not None and day_date(first_day.index).day != 1 and self.progress.read(zone).since is None:
                # The zone's first close began within a month: that month is short of the days before, so it is
                # passed over (recorded as the last month reached, which readers never take: it begins before
                # since), and the next plan begins with the month after. Recorded first, since with it.
                partial = Bucket.of_month(day_date(first_day.index), zone)
                self.progress.advance(zone, None, partial, first_day)
            self.progress.advance(zone, last_day, last_month, first_day, self.settings.calendar_prefixes)

    def close_due(
        self,
        now_ms: int,
        parts: int = DIRECTORY_PARTITIONS,
        on_run: Callable[[list[Bucket], CloseSummary], None] = lambda run, summary: None,
    ) -> CloseSummary:
        """Close everything due at ``now_ms``, in order: each day (all its parts), then the months; ``on_run`` is
        told each run of periods once it is finished, with what its parts did."""
        summary = CloseSummary()
        due = self.plan_due(now_ms)
        for stage in (due.days, due.months):
            for run in runs_of(stage):
                done = CloseSummary()
                for part in range(parts):
                    done.add(self.close_part(run, part))
                self.finish(run)
                done.periods += [period.sort_key for period in run]
                summary.add(done)
                on_run(run, done)
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
        and the requests it took (a Query of its children, plus one per sketch lane of a distinct counter). A
        child's late marks are attributes of the child itself, added in the same update as the late records, so
        the close never reads one without the other."""
        first, last = children(periods[0])[0], children(periods[-1])[1]
        rules = self.settings.counter_rules
        distinct = rules.counts_distinct(counter)
        read = self.table.query(counter, first.sort_key, last.sort_key, distinct=distinct)
        sums, bins = rules.sums(counter), rules.keeps_histogram(counter)
        closed = {}
        for period in periods:
            within = _within(period)
            sketches = [sketch for key, sketch in read.sketches.items() if within(key[1])]
            closed[period.sort_key] = (
                closed_value(
                    _of(read.counts, within), _of(read.late_counts, within),
                    _of(read.sums, within) if sums else None, _of(read.late_sums, within),
                    _of(read.bins, within) if bins else None, _of(read.late_bins, within),
                ),
                union(sketches) if sketches else None,
                {f"close {sort_key}: {mark}" for (_, sort_key), marks in read.unresolved.items() if within(sort_key)
                 for mark in marks},
            )
        return closed, read.requests


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


def runs_of(periods: Sequence[Bucket], longest: int = MAX_DAYS_PER_RUN) -> list[list[Bucket]]:
    """``periods`` in runs a close reads at once: consecutive periods of one zone and kind, at most ``longest``
    of them (a month of days: their children fit one Query of a few pages)."""
    found: list[list[Bucket]] = []
    for period in periods:
        last = found[-1][-1] if found else None
        if last is not None and (last.zone, last.kind) == (period.zone, period.kind) and period.index == last.index + 1 \
                and len(found[-1]) < longest:
            found[-1].append(period)
        else:
            found.append([period])
    return found


def instant_by(text: str, clock_ms: int) -> int:
    """The instant a close is asked to close at, never later than ``clock_ms``; ValueError (its text follows the
    parameter's name) for one that is not an instant or is later."""
    try:
        at = parse_instant(text)
    except InvalidInstant as error:
        raise ValueError(str(error)) from None
    if at > clock_ms:
        raise ValueError(
            f"{text} is later than the clock ({iso_second(clock_ms)}): a period closed before its records are all in "
            "would stay short for good"
        )
    return at


def _widest(prefixes: tuple[str, ...]) -> list[str]:
    """The prefixes none of the others starts: listing them lists every kept counter once."""
    ordered = sorted(set(prefixes))
    return [p for p in ordered if not any(p != q and p.startswith(q) for q in ordered)]


class CloseStages:
    """The state machine's steps (``CLOSE_STEPS``) over a ``Closer``, in the JSON the states pass each other.

    Each refuses (``CloseRefused``) a period whose close time has not come by
    ``clock`` (default the machine's): the plan an instant ``now`` later than
    it, a part or the finish a period not due. So an execution started by hand
    with any input, or a part's event edited, can close nothing early.
    """

    def __init__(self, closer: Closer, clock: Callable[[], int] = now_ms) -> None:
        self.closer = closer
        self.clock = clock

    def plan(self, now: str | int | None = None) -> dict[str, Any]:
        """What is due at ``now`` (default the clock): each run of days (at most ``MAX_DAYS_PER_PART``), and of
        months, as one item per directory partition for the maps, and every period for the finish."""
        at = self._instant(now)
        due = self.closer.plan_due(at)

        def items(periods: Sequence[Bucket]) -> list[dict[str, Any]]:
            return [
                {"periods": [period.sort_key for period in run], "part": part}
                for run in runs_of(periods, MAX_DAYS_PER_PART)
                for part in range(DIRECTORY_PARTITIONS)
            ]

        return {
            "now": iso_second(at),
            "days": items(due.days),
            "months": items(due.months),
            "finish": [period.sort_key for period in (*due.days, *due.months)],
        }

    def close_part(self, periods: Sequence[str], part: int) -> dict[str, Any]:
        """Close one run of periods (their sort keys) for directory partition ``part``: what it did (its
        numbers only: the maps keep every part's answer in the execution's state, whose size is bounded)."""
        if not isinstance(part, int) or isinstance(part, bool) or not 0 <= part < DIRECTORY_PARTITIONS:
            raise CloseRefused(f"part must be a directory partition, 0 to {DIRECTORY_PARTITIONS - 1}, got {part!r}")
        run = self._due(periods)
        if len(runs_of(run)) != 1:
            raise CloseRefused(f"a part closes one run of consecutive periods of one zone and kind, got {list(periods)}")
        summary = self.closer.close_part(run, part)
        return {"part": part, **{name: value for name, value in summary.to_json().items() if name != "periods"}}

    def finish(self, periods: Sequence[str], closed: Mapping[str, Sequence[Mapping[str, Any]]] | None = None) -> dict[str, Any]:
        """Every part of ``periods`` is closed: each zone's progress moves on to them. The answer: the periods,
        each kept zone's progress now, and what the parts did (``closed``: the maps' answers), added up."""
        finished = self._due(periods)
        self.closer.finish(finished)
        total = CloseSummary()
        for answers in (closed or {}).values():
            for answer in answers:
                total.add(CloseSummary.from_json({**answer, "periods": []}))
        total.periods = [period.sort_key for period in finished]
        progress = {zone: progress_json(self.closer.progress.read(zone)) for zone in self.closer.settings.kept_zones}
        return {"periods": total.periods, "progress": progress, "closed": total.to_json()}

    def _instant(self, now: str | int | None) -> int:
        clock = self.clock()
        if now is None or now == "":
            return clock
        try:
            return instant_by(str(now), clock)
        except ValueError as error:
            raise CloseRefused(f"now {error}") from None

    def _due(self, sort_keys: Sequence[str]) -> list[Bucket]:
        """The periods these sort keys name, each a day or month of a kept zone whose close time has come."""
        if isinstance(sort_keys, str) or not all(isinstance(key, str) for key in sort_keys):
            raise CloseRefused(f"periods must be a list of day and month sort keys, got {sort_keys!r}")
        clock = self.clock()
        found = []
        for key in sort_keys:
            try:
                period = Bucket.from_sort_key(key)
            except ValueError:
                period = None
            if period is None or not period.is_long:
                raise CloseRefused(f"{key!r} is not a day or a month (D#UTC@2026-11-28, MO#UTC@2026-11)")
            if period.zone not in self.closer.settings.kept_zones:
                kept = ", ".join(self.closer.settings.kept_zones) or "none"
                raise CloseRefused(f"{key}: zone {period.zone} is not kept (kept zones: {kept})")
            if closes_at(period) > clock:
                raise CloseRefused(
                    f"{key} closes at {iso_second(closes_at(period))}, after the clock ({iso_second(clock)}): "
                    "closed now it would stay short for good"
                )
            found.append(period)
        return found


def progress_json(progress: Progress) -> dict[str, Any]:
    """A zone's progress as the finish reports it: ISO dates, None where nothing is closed yet, and the runs of
    missing days (``first..last``) where closes stopped too long were skipped, and the days a whole-table backfill
    made complete, per calendar prefix (``first..last``)."""
    found: dict[str, Any] = {
        name: None if value is None else value.isoformat()
        for name, value in (("since", progress.since), ("days", progress.days), ("months", progress.months))
    }
    if progress.missing:
        found["missing"] = [f"{first.isoformat()}..{last.isoformat()}" for first, last in progress.missing]
    if progress.adopted:
        found["adopted"] = {prefix: f"{first.isoformat()}..{last.isoformat()}" for prefix, first, last in progress.adopted}
    return found
