"""Calendar periods in a time zone: days, weeks and months as instants, for series and month-to-date. No I/O.

A day in America/New_York is 23, 24 or 25 hours long; a month starts at its
zone's midnight. tally answers calendar reads from its hour buckets (and,
where it keeps them, from closed day and month items, which are sums of
hours: ``calendar_sources.py``), so a period can be read only where its edges
fall on whole UTC hours: zones whose offsets are whole hours (every IANA zone
of the Americas and Europe, UTC, and most others), which ``spans`` checks for
every edge it makes. A local
midnight that a DST change skips begins its day at the first instant after the
gap; one it repeats, at its first occurrence.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from enum import Enum
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from tally.core.units import HOUR_MS, MINUTE_MS
from tally.core.windows import ParameterRefused

WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
# A series lists at most this many periods: ten years of days.
MAX_PERIODS = 3660


class Period(str, Enum):
    DAY = "day"
    WEEK = "week"
    MONTH = "month"


class CalendarError(ParameterRefused):
    """A calendar read tally cannot answer as asked; the message says why and what to ask instead, and
    ``parameter`` which of the read's parameters (tz, from, to, week_start, period) is at fault."""


@dataclass(frozen=True)
class Span:
    """One period of a series: its first local day, and the instants it covers, ``end_ms`` excluded."""

    first_day: date
    start_ms: int
    end_ms: int


def zone_of(name: str | None) -> ZoneInfo:
    """The IANA zone ``name`` (default UTC); CalendarError for a name that is none."""
    if name is None or name == "":
        return ZoneInfo("UTC")
    if isinstance(name, str) and not name.startswith(("/", ".")) and ".." not in name:  # a name, not a path
        try:
            return ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            pass
    raise CalendarError(f"unknown time zone {name!r}: give an IANA name such as America/New_York, or UTC", "tz")


def day_of(text: str | date, what: str) -> date:
    """A local date from ISO text (2026-11-01); CalendarError naming ``what`` (from, to) otherwise."""
    if isinstance(text, date) and not isinstance(text, datetime):
        return text
    try:
        return date.fromisoformat(str(text).strip())
    except ValueError:
        raise CalendarError(f"{what} must be a date, YYYY-MM-DD, got {str(text)[:40]!r}", what) from None


def weekday_of(name: str | None) -> int:
    """Monday 0 .. Sunday 6 from a weekday's English name (default monday)."""
    if name is None or name == "":
        return 0
    key = str(name).strip().lower()
    if key not in WEEKDAYS:
        raise CalendarError(
            f"a week starts on a day of the week ({', '.join(WEEKDAYS)}), got {str(name)[:40]!r}", "week_start"
        )
    return WEEKDAYS.index(key)


def start_of_day(day: date, zone: ZoneInfo) -> int:
    """Epoch ms of the first instant of ``day`` in ``zone``. A midnight a DST change skips is read with the
    offset before the change (PEP 495's fold 0): the instant the clocks jump, the day's first; a repeated
    midnight, at its first occurrence."""
    return int(datetime.combine(day, time(0), tzinfo=zone).timestamp() * 1000)


def first_day(kind: Period, day: date, week_start: int = 0) -> date:
    """The first day of the period of ``kind`` holding ``day``."""
    if kind is Period.DAY:
        return day
    if kind is Period.WEEK:
        return day - timedelta(days=(day.weekday() - week_start) % 7)
    return day.replace(day=1)


def next_first_day(kind: Period, day: date) -> date:
    """The first day of the next period after the one beginning ``day``."""
    if kind is Period.DAY:
        return day + timedelta(days=1)
    if kind is Period.WEEK:
        return day + timedelta(days=7)
    return date(day.year + day.month // 12, day.month % 12 + 1, 1)


def spans(kind: Period, start: date, end: date, zone: ZoneInfo, week_start: int = 0) -> list[Span]:
    """The periods of ``kind`` in ``zone`` over the days ``start`` to ``end`` (excluded), the first and the last
    cut to that range (their ``first_day`` and instants say where); CalendarError where one cannot be read from
    hours."""
    if end <= start:
        raise CalendarError(f"to ({end.isoformat()}) must be after from ({start.isoformat()}): the end is excluded", "to")
    found: list[Span] = []
    day = start
    while day < end:
        following = min(next_first_day(kind, first_day(kind, day, week_start)), end)
        found.append(Span(day, start_of_day(day, zone), start_of_day(following, zone)))
        if len(found) > MAX_PERIODS:
            raise CalendarError(
                f"a series lists at most {MAX_PERIODS} periods: shorten the range or ask for longer periods", "from"
            )
        day = following
    for span in found:
        for edge in (span.start_ms, span.end_ms):
            if edge % HOUR_MS:
                utc = datetime.fromtimestamp(edge / 1000, UTC)
                offset = utc.astimezone(zone).strftime("%z")
                raise CalendarError(
                    f"time zone {zone.key} (UTC{offset[:3]}:{offset[3:]}): its days begin at {utc.strftime('%H:%M')} UTC, "
                    "not on a whole hour; tally answers calendar periods from hour buckets, in zones whose offsets "
                    "are whole hours",
                    "tz",
                )
    return found


def month_start(now_ms: int, zone: ZoneInfo) -> int:
    """The first instant of the month holding ``now_ms`` in ``zone``."""
    first = datetime.fromtimestamp(now_ms / 1000, UTC).astimezone(zone).date().replace(day=1)
    [span] = spans(Period.DAY, first, first + timedelta(days=1), zone)  # checks the month begins on a whole hour
    return span.start_ms


def month_so_far(now_ms: int, zone: ZoneInfo) -> tuple[int, int]:
    """This month so far in ``zone`` as a window: its length (whole minutes, from the month's first instant) and
    its end (now; at the month's very first instant, its first minute's)."""
    start = month_start(now_ms, zone)
    end = max(now_ms, start + 1)
    return -(-(end - start) // MINUTE_MS) * MINUTE_MS, end


def iso_local(ms: int, zone: ZoneInfo) -> str:
    """An instant as its local time with its offset: 2026-11-01T00:00:00-04:00."""
    return datetime.fromtimestamp(ms / 1000, UTC).astimezone(zone).isoformat()
