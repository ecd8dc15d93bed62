"""Where a calendar read finds each period: closed months, closed days, or hours. No I/O.

A counter of the calendar prefixes keeps, in UTC and in each kept zone, an
item per day and per month, written once by the close (``core/ladder.py``)
and complete from then on: a late record adds to them directly. A
whole-table backfill makes the days and months of its export complete too,
once its commit has finished (``Progress.adopted``). The zone's
progress says which are closed (``Progress``). So a calendar read of such a
counter in such a zone takes

- each month of a monthly series that the range holds whole (not a first or
  last month cut to the range) from its month item, when the month is closed
  and its item still kept (``monthRetentionMonths``);
- every other day from its day item, when the day is closed and its item
  still kept (``dayRetentionDays``);
- the rest from hours, as a window read groups them: the days before the
  first close (after those a backfill made complete), the days since the
  last one (today's included), and the days whose items have expired.

Closed days follow each other from the first close on, and expire oldest
first, so the days taken from hours are at most a head before the closed days
and a tail after them, and, after an adoption, the days between the backfill's
and the first close's: at most three windows, each one Query a counter (and
one for the current hour's minutes). Hours are kept ``hourRetentionDays``: a
window of them that begins earlier is refused (``CalendarError`` naming
``from``), saying what is kept. A counter outside the calendar prefixes, or a
zone that is not kept, has only hours, as before days were kept.

Each period is then the sum of its parts (counts, sums and histogram bins
added, distinct values merged), exactly what a window read of its instants
holds: a day item holds its hours less nothing (``core/ladder.py``), a
month item its days.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, timedelta

from tally.core.buckets import DAY, Bucket, day_date, day_index, local_day_of_hour, month_first_day, month_index
from tally.core.calendar import CalendarError, Period, Span, iso_local, zone_of
from tally.core.ladder import SKIP_MISSING, Progress, first_whole_month
from tally.core.settings import Settings
from tally.core.units import DAY_MS, HOUR_MS

Run = tuple[Bucket, Bucket]  # the first and the last of consecutive periods of one kind, read by one Query


@dataclass(frozen=True)
class Sources:
    """What a calendar read reads for one counter: runs of closed months and of closed days (a Query each), and
    windows of hours ([start, end) epoch ms, whole hours, cut at now), in time order."""

    months: tuple[Run, ...] = ()
    days: tuple[Run, ...] = ()
    hours: tuple[tuple[int, int], ...] = ()


def hours_only_reason(counter: str, zone: str, settings: Settings) -> str | None:
    """Why ``counter`` in ``zone`` is read from hours alone, in words a refusal ends with; None when it keeps
    days and months there."""
    if not settings.calendar_prefixes:
        return "no counter keeps days and months here (calendarPrefixes)"
    if not settings.keeps_calendar(counter):
        prefixes = ", ".join(repr(prefix) for prefix in settings.calendar_prefixes)
        return f"{counter!r} keeps no days and months: only the counters of calendarPrefixes ({prefixes}) do"
    if zone not in settings.kept_zones:
        return f"days and months are kept in {', '.join(settings.kept_zones)} only (calendarZones), not {zone}"
    return None


def calendar_sources(
    kind: Period,
    spans: Sequence[Span],
    zone: str,
    progress: Progress | None,
    now_ms: int,
    settings: Settings,
    hours_only: str | None = None,
) -> Sources:
    """Where each period of ``spans`` (``calendar.spans`` of ``kind`` in ``zone``) is read at ``now_ms``, given the
    zone's ``progress``; None reads hours alone (``hours_only`` says why, for a refusal). CalendarError when
    hours the read needs are past the hour retention."""
    last_day = local_day_of_hour((spans[-1].end_ms - 1) // HOUR_MS, zone)
    months: list[Bucket] = []
    days: list[Bucket] = []
    from_hours: list[int] = []  # day indexes
    for position, span in enumerate(spans):
        first = day_index(span.first_day)
        last = day_index(spans[position + 1].first_day) - 1 if position + 1 < len(spans) else last_day
        if progress is not None and kind is Period.MONTH and span.first_day.day == 1:
            month = Bucket.of_month(span.first_day, zone)
            if last == day_index(month_first_day(month.index + 1)) - 1 and progress.month_closed(month) \
                    and month.alive_at(now_ms, settings):
                months.append(month)
                continue
        for index in range(first, last + 1):
            day = Bucket(DAY, index, zone)
            if progress is not None and progress.missing and day.alive_at(now_ms, settings):
                missing = progress.missing_run(day)
                if missing is not None:
                    raise _missing(missing, zone, spans)
            if progress is not None and progress.day_closed(day) and day.alive_at(now_ms, settings):
                days.append(day)
            else:
                from_hours.append(index)
    hours = []
    for first, last in _runs(from_hours):
        start, end = Bucket(DAY, first, zone).start_ms, min(Bucket(DAY, last, zone).end_ms, now_ms)
        if start < end:  # nothing to read of days still to come
            hours.append((start, end))
    oldest = oldest_hour_ms(now_ms, settings)
    for start, _ in hours:
        if start < oldest:
            raise _refusal(kind, spans, zone, progress, start, now_ms, settings, hours_only)
    return Sources(
        tuple(_bucket_runs(months)),
        tuple(_bucket_runs(days)),
        tuple(hours),
    )


def oldest_hour_ms(now_ms: int, settings: Settings) -> int:
    """The start of the oldest hour every read at ``now_ms`` still finds."""
    return -(-(now_ms - settings.hour_retention_ms) // HOUR_MS) * HOUR_MS


def _runs(indexes: Sequence[int]) -> list[tuple[int, int]]:
    """Increasing integers as runs of consecutive ones: (first, last)."""
    found: list[tuple[int, int]] = []
    for index in indexes:
        if found and index == found[-1][1] + 1:
            found[-1] = (found[-1][0], index)
        else:
            found.append((index, index))
    return found


def _bucket_runs(buckets: Sequence[Bucket]) -> list[Run]:
    return [(buckets[0]._replace(index=first), buckets[0]._replace(index=last)) for first, last in _runs([b.index for b in buckets])]


def _missing(run: tuple[date, date], zone: str, spans: Sequence[Span]) -> CalendarError:
    """Why a range holding missing days is refused, in one line: which days, why, and where a range may lie."""
    first, last = run
    days = first.isoformat() if first == last else f"{first.isoformat()} to {last.isoformat()}"
    return CalendarError(
        f"the days of {zone} from {days} are missing: the closes stopped until their hours had expired "
        f"(hourRetentionDays), and {SKIP_MISSING} moved past them; a range may end on {first.isoformat()} "
        f"or begin on {(last + timedelta(days=1)).isoformat()}",
        "from" if day_index(spans[0].first_day) >= day_index(first) else "to",
    )


def _refusal(
    kind: Period,
    spans: Sequence[Span],
    zone: str,
    progress: Progress | None,
    start_ms: int,
    now_ms: int,
    settings: Settings,
    hours_only: str | None,
) -> CalendarError:
    """Why hours from ``start_ms`` cannot be read, in one line, and what is kept instead."""
    hour_days = settings.hour_retention_ms // DAY_MS
    oldest = iso_local(oldest_hour_ms(now_ms, settings), zone_of(zone))
    first = spans[0].first_day.isoformat()
    if progress is None:
        return CalendarError(
            f"the range begins {first}, past the hour retention ({hour_days} days, hourRetentionDays): calendar reads "
            f"come from hours, and the oldest kept in {zone} begins {oldest}" + (f"; {hours_only}" if hours_only else ""),
            "from",
        )
    closed = progress.since is not None and progress.days is not None
    adopted = progress.adopted_run
    if not closed and adopted is None:
        return CalendarError(
            f"the range begins {first}, past the hour retention ({hour_days} days, hourRetentionDays), and no day "
            f"of {zone} is closed yet: the oldest hour kept there begins {oldest}",
            "from",
        )
    day = day_date(local_day_of_hour(start_ms // HOUR_MS, zone))
    last_complete = max(d for d in (progress.days if closed else None, adopted[1] if adopted else None) if d is not None)
    if day > last_complete and closed:  # the closes are behind, not the range too old
        return CalendarError(
            f"the days of {zone} from {day.isoformat()} are not closed (the last closed is "
            f"{progress.days.isoformat()}) and past the hour retention ({hour_days} days, hourRetentionDays): "
            "the closes have stopped; end the range before them",
            "from" if start_ms == spans[0].start_ms else "to",
        )
    if day > last_complete:  # adopted, and no close has run since
        return CalendarError(
            f"the days of {zone} from {day.isoformat()} are not closed (no close has run since the backfill made "
            f"the days to {last_complete.isoformat()} complete) and past the hour retention ({hour_days} days, "
            "hourRetentionDays): the closes have not begun; end the range before them",
            "from" if start_ms == spans[0].start_ms else "to",
        )
    began, since = (adopted[0], "since the backfill") if adopted is not None else (progress.since, "since the first close")
    assert began is not None
    kept = (
        f"days are kept from {began.isoformat()} ({since}) for "
        f"{settings.day_retention_ms // DAY_MS} days (dayRetentionDays)"
    )
    if kind is Period.MONTH:
        kept = (
            f"months are kept from {first_whole_month(began).isoformat()[:7]} ({since}) for "
            f"{settings.month_retention_months} months (monthRetentionMonths), {kept}"
        )
    earliest = _earliest(kind, zone, progress, now_ms, settings)
    return CalendarError(
        f"the range begins {first}, before what {zone} keeps: {kept}, hours for {hour_days} days "
        f"(hourRetentionDays); {earliest}",
        "from",
    )


def _earliest(kind: Period, zone: str, progress: Progress, now_ms: int, settings: Settings) -> str:
    """Where a range in ``zone`` may begin at ``now_ms``, in words: from the first closed day still kept (else
    from the first whole day of hours kept), and, for a monthly series, on the first of any closed month still
    kept before that."""
    adopted = progress.adopted_run
    began = adopted[0] if adopted is not None else progress.since
    assert began is not None
    oldest = oldest_hour_ms(now_ms, settings)
    # The first day whose item is kept: the day after the one that ended a day retention ago, give or take DST.
    day = Bucket(DAY, max(day_index(began), local_day_of_hour((now_ms - settings.day_retention_ms) // HOUR_MS, zone) - 1), zone)
    while not day.alive_at(now_ms, settings) or progress.missing_run(day) is not None:
        day = day._replace(index=day.index + 1)
    if not progress.day_closed(day):  # every closed day has expired: hours only
        day = Bucket(DAY, local_day_of_hour(oldest // HOUR_MS, zone), zone)
        if day.start_ms < oldest:
            day = day._replace(index=day.index + 1)
    days = f"a range may begin on {day_date(day.index).isoformat()} or later"
    adopted_month = None if adopted is None else month_first_day(month_index(adopted[1] + timedelta(days=1)) - 1)
    last_month = max((d for d in (progress.months, adopted_month) if d is not None), default=None)
    if kind is Period.MONTH and last_month is not None:
        month = Bucket.of_month(first_whole_month(began), zone)
        while not month.alive_at(now_ms, settings) and month_first_day(month.index) < last_month:
            month = month._replace(index=month.index + 1)
        first = month_first_day(month.index)
        if progress.month_closed(month) and month.alive_at(now_ms, settings) and first < day_date(day.index):
            return f"a range may begin on the first of a month from {first.isoformat()[:7]} on, or on any day from {day_date(day.index).isoformat()}"
    return days
