"""The long rungs of the bucket ladder: days and months, closed from the rungs below, late records added directly.
No I/O.

Minutes and hours are written by every segment. Days and months (in UTC and
in each zone the settings keep, for the counters of the calendar prefixes)
would cost a write per counter, zone and segment that way, several times the
hour's; instead each is written once, by a close (``tally.closing``), after
its period ended:

    day   = the sum of its hours    - their late marks
    month = the sum of its days     - their late marks

An event's record is **late** when it arrives more than ``LATE_AFTER_MS``
after its hour ended, or comes from an export (a backfill counts history at
any time). A late record adds, besides its minute and hour, directly to its
day and month in every kept zone, and marks what it added to its hour and to
its days: attributes of those very items (``late``, ``late_sum``, ``L<bin>``),
added by the same update as the record itself. A segment folds the marks as
items of a pseudo-counter (``#late#<counter>``, same sort keys), so that
windows' state, held records and overlaps treat them like any item, and the
commit writes them into their items' updates (``commit.late_of``). Every
other record is on time: it reaches its day only through the close, which
runs ``CLOSE_AFTER_MS`` after the period ends, when no on-time record of it
can still be committed (the event source mapping gives a record up a day
after it arrived, ``STREAM_RETENTION_MS``). Both kinds are decided by the
record alone, so a retry rebuilds the same segments (one with another calendar
than its first try tells from an hour's watermark whether that try marked it,
``commit.without_unmarked``), and every addition is an ADD: a late record and
a close reach a day in either order and the day holds both once. A close's sums are read where nothing of them moves: on-time
records are all in; a late one adds to its hour and to its mark in one
update of one item, and the close subtracts the mark. Distinct values merge by union,
so a day's sketch takes its hours' sketches whole and late values again
changes nothing: sketches keep no marks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date, timedelta

from tally.core.buckets import DAY, MONTH, Bucket, day_date, day_index, local_day_of_hour, month_first_day, month_index
from tally.core.settings import STREAM_RETENTION_MS, Settings
from tally.core.units import DAY_MS, HOUR_MS

# A record arriving this long after its hour ended goes straight to its days and months.
LATE_AFTER_MS = DAY_MS
# A period is closed this long after it ends: every on-time record of it is in by then (a late one is
# added directly), with an hour's margin for the last invocation's retries.
CLOSE_AFTER_MS = LATE_AFTER_MS + STREAM_RETENTION_MS + HOUR_MS
# The pseudo-counter a segment folds a counter's late marks under (what late records add to its hours and
# days); the commit writes them as attributes of the counter's own items, never as items of their own.
LATE_PREFIX = "#late#"

Item = tuple[str, Bucket]
# What mends closes stopped past the hour retention: it records the days they can no longer close as missing and
# moves past them (the close's refusal names it, on every surface that closes; reads of those days name it too).
SKIP_MISSING = "scripts/close_periods.py --skip-missing"


def late_partition(counter: str) -> str:
    """The pseudo-counter of ``counter``'s late marks in a segment: ``#late#orders/acme``, same sort keys."""
    return LATE_PREFIX + counter


def marked_counter(name: str) -> str:
    """The counter a segment's ``name`` adds to: itself, or, for a late marks' pseudo-counter, the counter marked."""
    return name[len(LATE_PREFIX):] if name.startswith(LATE_PREFIX) else name


def is_late(hour: int, arrival_ms: int) -> bool:
    """Whether a record of UTC hour ``hour`` arriving at ``arrival_ms`` is late for the long rungs."""
    return arrival_ms >= (hour + 1) * HOUR_MS + LATE_AFTER_MS


@dataclass(frozen=True)
class LongItems:
    """What a late record of one counter and hour adds to: its day and month in each kept zone (direct), and
    the marks of its hour and of those days (as pseudo-items of ``late_partition``)."""

    direct: tuple[Item, ...]
    marks: tuple[Item, ...]


def long_items(counter: str, hour: int, zones: Iterable[str], hour_kept: bool = True) -> LongItems:
    """``hour_kept`` False: the record's hour is past the hour retention, so it has no hour to mark."""
    direct: list[Item] = []
    marks: list[Item] = [(late_partition(counter), Bucket.of_hour(hour))] if hour_kept else []
    for zone in zones:
        day = Bucket(DAY, local_day_of_hour(hour, zone), zone)
        direct.append((counter, day))
        direct.append((counter, Bucket(MONTH, month_index(day_date(day.index)), zone)))
        marks.append((late_partition(counter), day))
    return LongItems(tuple(direct), tuple(marks))


@dataclass(frozen=True)
class Progress:
    """How far a zone's closes got (its progress item, ``dynamo/closing.py``): the first day closed, the last
    day closed and the first day of the last month closed; None where nothing is closed yet. Days and months
    between ``since`` and these are complete in their items, except the days ``missing`` (runs of days, first
    and last, that closes stopped too long left unclosable: their hours had expired, ``close_periods.py
    --skip-missing`` moved past them) and the months holding any of them. So are, for the counters of a prefix
    in ``adopted``, the days from its first to its last and the months wholly within them: those a whole-table
    backfill made complete (``adopted_days``), whether or not a close has run since."""

    since: date | None = None
    days: date | None = None
    months: date | None = None  # the first day of the last month closed
    missing: tuple[tuple[date, date], ...] = ()
    # Each calendar prefix, and the first and last day a close closed its counters: a prefix declared later
    # begins later, one no longer declared stops where it was.
    prefixes: tuple[tuple[str, date, date], ...] = ()
    # Each calendar prefix a whole-table backfill counted, and the first and last day it made complete.
    adopted: tuple[tuple[str, date, date], ...] = ()

    def of_counter(self, counter: str) -> Progress:
        """The progress of ``counter``'s own days: those closed under a prefix it starts with (the widest span,
        where several are kept), within the zone's, and those a backfill of such a prefix made complete;
        nothing closed where no close knew of one."""
        adopted = tuple(entry for entry in self.adopted if counter.startswith(entry[0]))
        matching = [(since, days) for prefix, since, days in self.prefixes if counter.startswith(prefix)]
        if not matching or self.since is None or self.days is None:
            return Progress(missing=self.missing, adopted=adopted)
        since, days = max(self.since, min(s for s, _ in matching)), min(self.days, max(d for _, d in matching))
        whole = month_first_day(month_index(date.fromordinal(days.toordinal() + 1)) - 1)  # the last month days ends
        months = None if self.months is None else min(self.months, whole)
        return Progress(since, days, months, self.missing, self.prefixes, adopted)

    @property
    def adopted_run(self) -> tuple[date, date] | None:
        """The first and last day a backfill made complete (the latest, where several prefixes match), or None."""
        return max(((first, last) for _, first, last in self.adopted), key=lambda run: (run[1], -run[0].toordinal()), default=None)

    def day_closed(self, day: Bucket) -> bool:
        local = day_date(day.index)
        closed = self.since is not None and self.days is not None and self.since <= local <= self.days
        adopted = self.adopted_run
        return (closed or (adopted is not None and adopted[0] <= local <= adopted[1])) and self.missing_run(day) is None

    def month_closed(self, month: Bucket) -> bool:
        first = month_first_day(month.index)
        closed = self.since is not None and self.months is not None and self.since <= first <= self.months
        adopted = self.adopted_run
        whole = adopted is not None and adopted[0] <= first and month_first_day(month.index + 1) <= adopted[1] + timedelta(days=1)
        return (closed or whole) and not self.month_missing(month)

    def missing_run(self, day: Bucket) -> tuple[date, date] | None:
        """The run of missing days holding ``day`` (the widest, where runs recorded apart overlap), or None."""
        local = day_date(day.index)
        runs = [run for run in self.missing if run[0] <= local <= run[1]]
        return max(runs, key=lambda run: (run[1] - run[0], run[0]), default=None)

    def month_missing(self, month: Bucket) -> bool:
        """Whether a day of ``month`` is missing: the month can be neither closed nor read whole."""
        first, last = month_first_day(month.index), month_first_day(month.index + 1)
        return any(start < last and first <= end for start, end in self.missing)


def closes_at(period: Bucket) -> int:
    """When ``period`` (a day or a month) may be closed: ``CLOSE_AFTER_MS`` after its end."""
    return period.end_ms + CLOSE_AFTER_MS


def children(period: Bucket) -> tuple[Bucket, Bucket]:
    """The first and last bucket of the rung below that a period sums: a day's UTC hours, a month's days."""
    if period.kind == DAY:
        return Bucket.of_hour(period.start_ms // HOUR_MS), Bucket.of_hour(period.end_ms // HOUR_MS - 1)
    if period.kind == MONTH:
        following = period._replace(index=period.index + 1)
        return Bucket(DAY, _first_day_index(period), period.zone), Bucket(DAY, _first_day_index(following) - 1, period.zone)
    raise ValueError(f"only days and months are closed, not {period.sort_key}")


def _first_day_index(month: Bucket) -> int:
    return day_index(month_first_day(month.index))


@dataclass(frozen=True)
class Closed:
    """What a close adds to one period of one counter: its children's sums less their late marks."""

    count: int
    units: int | None
    bins: dict[str, int] | None


def closed_value(
    counts: Mapping[str, int],
    marks: Mapping[str, int],
    sums: Mapping[str, int] | None = None,
    mark_sums: Mapping[str, int] | None = None,
    bins: Mapping[str, Mapping[str, int]] | None = None,
    mark_bins: Mapping[str, Mapping[str, int]] | None = None,
) -> Closed:
    """The close of one period from its children read by sort key (``counts``, ``sums``, ``bins``) and their
    marks (same keys). ``units`` is None for a counter that keeps no sum, ``bins`` None for one without
    histograms. A mark is part of its child, so nothing here is negative unless the table is damaged:
    ValueError then, never a write."""
    count = sum(counts.values()) - sum(marks.values())
    units = None if sums is None else sum(sums.values()) - sum((mark_sums or {}).values())
    total_bins: dict[str, int] | None = None
    if bins is not None:
        total_bins = {}
        for child in bins.values():
            for name, value in child.items():
                total_bins[name] = total_bins.get(name, 0) + value
        for child in (mark_bins or {}).values():
            for name, value in child.items():
                total_bins[name] = total_bins.get(name, 0) - value
        total_bins = {name: value for name, value in total_bins.items() if value}
        if any(value < 0 for value in total_bins.values()):
            raise ValueError("a late mark holds more of a histogram bin than its bucket")
    if count < 0:
        raise ValueError(f"late marks hold {-count} more events than their buckets")
    return Closed(count, units, total_bins)


def due_days(zone: str, after: date | None, first: date, now_ms: int) -> list[date]:
    """The days of ``zone`` to close at ``now_ms``: from the day after ``after`` (the last one closed; None:
    from ``first``) through the last whose close time has come."""
    day = first if after is None else max(first, date.fromordinal(after.toordinal() + 1))
    found = []
    while closes_at(Bucket.of_day(day, zone)) <= now_ms:
        found.append(day)
        day = date.fromordinal(day.toordinal() + 1)
    return found


def first_closable_day(zone: str, now_ms: int, settings: Settings) -> date:
    """Where a zone's closes begin: the first day whose every hour is still kept at ``now_ms``, with a day of
    slack. Every record of such a day is in its hours: on-time ones, and late ones too (a late record adds to
    its day directly only once days are kept, and then marks its hour, which the close subtracts). Its month,
    unless the day is the month's first, is never closed: it would be short of the days before."""
    earliest = now_ms - settings.hour_retention_ms + DAY_MS  # a day of slack before those hours expire
    day = Bucket(DAY, local_day_of_hour(earliest // HOUR_MS, zone), zone)
    if day.start_ms < earliest:
        day = day._replace(index=day.index + 1)
    return day_date(day.index)


def adopted_days(count_from_ms: int, zone: str, settings: Settings) -> tuple[date, date] | None:
    """The local days of ``zone`` that a whole-table backfill of an export taken at ``count_from_ms`` leaves
    complete in their day items (and so the months wholly within them): from the first day all of whose
    instants lie in UTC days still kept at that instant (an older event is refused, ``records._day_kept``) to
    the last day that ended ``LATE_AFTER_MS`` or more before it: a record of such a day is in the export or,
    arriving later, late, and adds to its items directly. (A day that ended less than that before may still
    get on-time records after the instant, which reach its hours alone until its close.) None when no whole
    day lies between."""
    last = Bucket(DAY, local_day_of_hour(count_from_ms // HOUR_MS, zone), zone)
    while last.end_ms > count_from_ms - LATE_AFTER_MS:
        last = last._replace(index=last.index - 1)
    oldest_kept_ms = (count_from_ms - settings.day_retention_ms) // DAY_MS * DAY_MS  # the first UTC day kept
    first = Bucket(DAY, local_day_of_hour(oldest_kept_ms // HOUR_MS, zone), zone)
    while first.start_ms < oldest_kept_ms:
        first = first._replace(index=first.index + 1)
    if first.index > last.index:
        return None
    return day_date(first.index), day_date(last.index)


def first_whole_month(since: date) -> date:
    """The first month a zone whose closes began on ``since`` closes: ``since``'s own on its first day, else the
    next (its first day)."""
    return since if since.day == 1 else month_first_day(month_index(since) + 1)


class Ladder:
    """Which records of a segment climb past the hours: those of the calendar prefixes' counters that are late
    (all of them for an export, ``every_late``). ``of`` is None for settings that keep no days."""

    def __init__(self, settings: Settings, every_late: bool = False) -> None:
        self.prefixes = settings.calendar_prefixes
        self.zones = settings.kept_zones
        self.every_late = every_late
        # Prefixes with a countFrom of their own climb only from it (Settings.climbs): checked only where some do.
        self.gated = settings if settings.calendar_count_from else None

    @classmethod
    def of(cls, settings: Settings, every_late: bool = False) -> Ladder | None:
        return cls(settings, every_late) if settings.calendar_prefixes else None

    def climbed(self, contribution: tuple, counter: str, event_ms: int, arrival_ms: int) -> list[tuple]:
        """``contribution`` (minute, hour, units, bin, hashed) and, for a late record of a kept counter, what it
        adds directly to its days and months and to the late marks (same units and bin; marks take no hash)."""
        hour = event_ms // HOUR_MS
        if not counter.startswith(self.prefixes) or not (self.every_late or is_late(hour, arrival_ms)) or (
            self.gated is not None and not self.gated.climbs(counter, arrival_ms)
        ):
            return [contribution]
        _minute, _hour, units, bin, hashed = contribution
        items = long_items(counter, hour, self.zones)
        return [
            contribution,
            *((None, item, units, bin, hashed) for item in items.direct),
            *((None, item, units, bin, None) for item in items.marks),
        ]

    def long_only(self, counter: str, event_ms: int, units: int | None, bin: str | None, hashed: int | None) -> list[tuple]:
        """What a record whose hour is past the hour retention adds: its days and months, and the marks of those
        days (a close of their months may be still to come)."""
        return _added(long_items(counter, event_ms // HOUR_MS, self.zones, hour_kept=False), units, bin, hashed)


def _added(items: LongItems, units: int | None, bin: str | None, hashed: int | None) -> list[tuple]:
    """What a record adds to ``items``: to each item direct its units, bin and hash; to each mark the same but
    the hash (sketches keep no marks)."""
    return [
        *((None, item, units, bin, hashed) for item in items.direct),
        *((None, item, units, bin, None) for item in items.marks),
    ]


Run = tuple[date, date]  # the first and last day of a run of days


def history_days(count_from_ms: int, zone: str, settings: Settings, since: date) -> Run | None:
    """The local days of ``zone`` a calendar backfill of an export taken at ``count_from_ms`` (a calendar prefix's
    own countFrom) writes and leaves complete: those ``adopted_days`` would (every instant in a UTC day kept at
    that instant, ended ``LATE_AFTER_MS`` or more before it) that lie before ``since``, the first day the
    closes closed the prefix's counters from hours (its ``since:<prefix>``). Each such day gets, from the
    export, every record that arrived before the instant; one arriving later is late and climbs to it directly,
    and none of it is in an hour a close reads. None when no day lies between."""
    adopted = adopted_days(count_from_ms, zone, settings)
    if adopted is None:
        return None
    first, last = adopted[0], min(adopted[1], since - timedelta(days=1))
    return (first, last) if first <= last else None


class HistoryLadder(Ladder):
    """What a calendar backfill adds (``backfill.py --calendar``): every record of a prefix's counters, in each
    kept zone where its local day lies in ``runs[prefix][zone]`` (``history_days``), adds to that day and its month
    directly and marks the day (the month's close, where one is still to come, subtracts the mark), as a late
    record whose hour has expired does (``long_only``); nothing to its minute or hour, and nothing elsewhere."""

    def __init__(self, settings: Settings, runs: Mapping[str, Mapping[str, Run]]) -> None:
        super().__init__(settings, every_late=True)
        self.runs = {prefix: {zone: (day_index(first), day_index(last)) for zone, (first, last) in zones.items()}
                     for prefix, zones in runs.items()}

    def climbed(self, contribution: tuple, counter: str, event_ms: int, arrival_ms: int) -> list[tuple]:
        _minute, _hour, units, bin, hashed = contribution
        return self.long_only(counter, event_ms, units, bin, hashed)

    def long_only(self, counter: str, event_ms: int, units: int | None, bin: str | None, hashed: int | None) -> list[tuple]:
        hour = event_ms // HOUR_MS
        zones = [
            zone for prefix, runs in self.runs.items() if counter.startswith(prefix)
            for zone, (first, last) in runs.items() if first <= local_day_of_hour(hour, zone) <= last
        ]
        return _added(long_items(counter, hour, zones, hour_kept=False), units, bin, hashed)
