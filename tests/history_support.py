"""Calendar reads of a counts table against brute force over the events: for the tests of days and months made
complete from an export (adoption, a calendar prefix's older days)."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, date, datetime
from zoneinfo import ZoneInfo

from tally import Reader
from tally.core.ladder import LATE_AFTER_MS
from tally.core.settings import Settings
from tally.core.units import DAY_MS, HOUR_MS
from tally.core.windows import parse_instant

# Instants where days go wrong: New York's daylight saving changes, 29 February, month ends.
EDGES = ("2028-03-12T06:30:00Z", "2028-03-12T07:30:00Z", "2028-11-05T05:30:00Z", "2028-11-05T06:30:00Z",
         "2028-02-29T04:30:00Z", "2028-02-29T23:59:59Z", "2028-10-31T23:30:00Z", "2028-11-01T03:59:00Z")


def local_day(ms: int, zone: str) -> date:
    return datetime.fromtimestamp(ms / 1000, UTC).astimezone(ZoneInfo(zone)).date()


def calendar_read(client, table: str, settings: Settings, counter: str, period: str, zone: str, start: date,
                  end: date) -> dict[date, int]:
    """``counter``'s daily or monthly series from ``start`` to ``end`` (excluded) in ``zone``: its non-zero points."""
    [series] = Reader(table, client=client, settings=settings).calendar(
        [counter], period, tz=zone, start=start.isoformat(), end=end.isoformat())
    return {point.start.date(): point.count for point in series.points if point.count}


def brute(events, counter: str, zone: str, period: str, start: date, end: date) -> dict[date, int]:
    """The same from (event time, arrival, counter) events: each counted on its local day, or its month's first."""
    found: Counter[date] = Counter()
    for ts, _, name in events:
        day = local_day(ts, zone)
        if name == counter and start <= day < end:
            found[day.replace(day=1) if period == "month" else day] += 1
    return dict(found)


def daily_events(rng, days: int, until_ms: int, counters, skip=lambda counter, day_ms: False) -> list[tuple[int, int, str]]:
    """(event time, arrival, counter): an event a day of each counter (unless ``skip``) for ``days`` UTC days
    before ``until_ms``, most within an hour of a midnight of UTC or New York, arriving on time or late; then one
    on time at each of EDGES, of the first counter."""
    found = []
    for day in range((until_ms - days * DAY_MS) // DAY_MS * DAY_MS, until_ms, DAY_MS):
        for counter in counters:
            if skip(counter, day):
                continue
            edge = day + rng.choice([0, 4 * HOUR_MS, 5 * HOUR_MS])  # midnight UTC, EDT or EST
            ts = edge + rng.randrange(-HOUR_MS, HOUR_MS) if rng.random() < 0.7 else day + rng.randrange(DAY_MS)
            late = rng.choice([1000, 1000, 5 * HOUR_MS, LATE_AFTER_MS + 2 * HOUR_MS, 3 * DAY_MS])
            if ts < until_ms:
                found.append((ts, ts + late, counter))
    return found + [(parse_instant(ts), parse_instant(ts) + 1000, counters[0]) for ts in EDGES]
