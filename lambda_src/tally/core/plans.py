"""Window -> plan: the bucket items whose signed sum is the window's count. No I/O.

Isolated by default. Bucket items only ever grow, one write at a time, so a
plan that only adds items answers, item by item, a value between what each
held before the segments in flight and what it holds after them; so does
their sum, and a later read of the same window by the same plan reads the
same items (or, for a window reaching past now, more of them) and never
answers less. The default plan therefore reads an hour whole only when the
window covers all of its minutes, and otherwise its covered minutes, never
``hour - minutes``: a 24 h window is at most 23 hours and 60 minutes, 83
keys, wherever it ends. Minutes that cannot hold data yet (later than now
plus the allowed clock skew) are never read.

``allow_transient=True`` is the fast path: a partly covered hour may also be
read as the hour minus its other minutes, whichever reads less (at most 59
keys for 24 h ending now). It may answer a count the table never held while a
segment is being applied (its hour item holds the segment's events before its
minutes do), above the final count or lower than an earlier answer; opt in
only where a transient value does no harm. It never applies to distinct
counts, whose sketches cannot be subtracted.

Two plans share that choice and differ in how they fetch:
- batch: exact keys in BatchGetItem requests (the cost is the number of keys);
- range: one Query per contiguous run of same-granularity buckets (the cost
  is the number of runs first, then the items read).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from tally.core.buckets import Bucket, iso_minute
from tally.core.units import HOUR_MS, MINUTES_PER_HOUR, MINUTE_MS
from tally.core.settings import Settings
from tally.core.windows import QueryError, Window


class PlanKind(str, Enum):
    BATCH = "batch"
    RANGE = "range"


class Series(str, Enum):
    """The buckets a result lists one by one: every minute, or every hour, of its window."""

    MINUTE = "minute"
    HOUR = "hour"


class WindowUnavailable(QueryError):
    """The buckets a window needs have passed their retention."""


@dataclass(frozen=True)
class Term:
    bucket: Bucket
    sign: int  # +1 or -1


@dataclass(frozen=True)
class Run:
    """Contiguous buckets of one granularity: one Query."""

    first: Bucket
    last: Bucket


@dataclass(frozen=True)
class Plan:
    kind: PlanKind
    window: Window
    terms: tuple[Term, ...]

    @property
    def disjoint(self) -> bool:
        """Whether the plan is a union of disjoint buckets (no ``hour - minutes``): isolated, able to read sketches."""
        return all(term.sign > 0 for term in self.terms)

    @property
    def buckets(self) -> list[Bucket]:
        return [term.bucket for term in self.terms]

    def runs(self) -> list[Run]:
        """The plan's buckets as contiguous runs, in sort-key order."""
        runs: list[Run] = []
        for bucket in sorted(self.buckets):
            if runs and runs[-1].last.kind == bucket.kind and runs[-1].last.index + 1 == bucket.index:
                runs[-1] = Run(runs[-1].first, bucket)
            else:
                runs.append(Run(bucket, bucket))
        return runs


def make_plan(
    window: Window,
    now_ms: int,
    settings: Settings,
    kind: PlanKind = PlanKind.BATCH,
    series: Series | None = None,
    allow_transient: bool = False,
) -> Plan:
    """Choose, hour by hour, the reading of the window: disjoint buckets, or the cheapest if ``allow_transient``.

    Raises WindowUnavailable when a needed bucket may already have expired:
    partial hours need minute buckets, so past the minute retention a window
    must cover whole hours there (``align_to_retention`` makes it so).

    A minute series needs every minute on its own, so its plan reads every
    minute of the window that can hold data (and its total is their sum).
    """
    populated_until = (now_ms + settings.max_clock_skew_ms) // MINUTE_MS
    _bound_series(window, series, settings)
    if series is Series.MINUTE:
        return _minute_plan(window, populated_until, now_ms, settings, kind)
    terms: list[Term] = []
    # Hours after populated_until hold nothing yet: a window far in the future costs no more than one ending now.
    last_hour = min(window.last_minute, populated_until) // MINUTES_PER_HOUR
    for hour in range(window.first_minute // MINUTES_PER_HOUR, last_hour + 1):
        terms.extend(_hour_terms(hour, window, populated_until, now_ms, settings, kind, allow_transient))
    return Plan(kind, window, tuple(terms))


def _hour_terms(
    hour: int,
    window: Window,
    populated_until: int,
    now_ms: int,
    settings: Settings,
    kind: PlanKind,
    allow_transient: bool,
) -> list[Term]:
    hour_first = hour * MINUTES_PER_HOUR
    hour_end = hour_first + MINUTES_PER_HOUR - 1
    hour_last = min(hour_end, populated_until)
    first = max(window.first_minute, hour_first)
    last = min(window.last_minute, hour_last)
    if first > last:
        return []  # nothing in this hour can hold data yet
    hour_bucket = Bucket.of_hour(hour)
    if not _alive(hour_bucket, now_ms, settings):
        raise WindowUnavailable(
            f"the window {window} reaches back to {iso_minute(hour_bucket.start_ms)}, past the hour retention "
            f"({settings.hour_retention_ms // (24 * HOUR_MS)} d): nothing that old is kept; shorten it or end it later"
        )
    # Isolated, an hour is read whole only when the window holds all of its minutes: then the item holds
    # nothing the window does not, whatever is still being applied.
    if window.first_minute <= hour_first and window.last_minute >= (hour_last if allow_transient else hour_end):
        return [Term(hour_bucket, +1)]

    covered = [range(first, last + 1)]
    others = [r for r in (range(hour_first, first), range(last + 1, hour_last + 1)) if r]
    options = [
        [Term(Bucket.of_minute(m), +1) for r in covered for m in r],
        [Term(hour_bucket, +1), *(Term(Bucket.of_minute(m), -1) for r in others for m in r)],
    ]
    runs = [len(covered), len(others)]
    if not allow_transient:  # never the hour minus minutes that may still be pending
        options, runs = options[:1], runs[:1]
    alive = [i for i, option in enumerate(options) if all(_alive(t.bucket, now_ms, settings) for t in option)]
    if not alive:
        raise WindowUnavailable(
            f"the minutes of hour {Bucket.of_hour(hour).sort_key[2:]} are past the minute retention "
            f"({settings.minute_retention_ms // HOUR_MS} h): a window reaching that far back must cover whole hours "
            f"there: end it on a whole hour (e.g. at {_last_whole_hour_end(window)}) with a length in whole hours, "
            "or ask for it aligned (align), which starts it at the start of its first hour"
        )
    if kind is PlanKind.RANGE:
        best = min(alive, key=lambda i: (runs[i], len(options[i])))
    else:
        best = min(alive, key=lambda i: len(options[i]))
    return options[best]


def _bound_series(window: Window, series: Series | None, settings: Settings) -> None:
    """A series lists every bucket of its window: no longer than its buckets are kept (2,880 minutes, 2,160 hours)."""
    if series is Series.MINUTE and window.length_ms > settings.minute_retention_ms:
        hours = settings.minute_retention_ms // HOUR_MS
        raise WindowUnavailable(
            f"a minute series lists every minute, and minutes are kept {hours} h: ask for a window of at most "
            f"{hours}h, or for an hour series"
        )
    if series is Series.HOUR and window.length_ms > settings.hour_retention_ms:
        days = settings.hour_retention_ms // (24 * HOUR_MS)
        raise WindowUnavailable(
            f"an hour series lists every hour, and hours are kept {days} d: ask for a window of at most {days}d"
        )


def _minute_plan(window: Window, populated_until: int, now_ms: int, settings: Settings, kind: PlanKind) -> Plan:
    last = min(window.last_minute, populated_until)
    if window.first_minute <= last and not _alive(Bucket.of_minute(window.first_minute), now_ms, settings):
        raise WindowUnavailable(
            f"a minute series reads every minute of the window, and minutes are kept "
            f"{settings.minute_retention_ms // HOUR_MS} h: the window {window} starts before that; "
            "ask for an hour series, or a window that starts later"
        )
    terms = tuple(Term(Bucket.of_minute(minute), +1) for minute in range(window.first_minute, last + 1))
    return Plan(kind, window, terms)


def align_to_retention(window: Window, now_ms: int, settings: Settings) -> Window:
    """The smallest window holding ``window`` whose edges lie on whole hours where minutes are past retention.

    Partial hours are read from minutes, so an edge whose minute may have
    expired moves out to its hour's boundary: the start back to the start of
    its hour, the end forward to the end of its hour. Every other edge stays.
    """
    first, last = window.first_minute, window.last_minute
    if not _alive(Bucket.of_minute(first), now_ms, settings):
        first -= first % MINUTES_PER_HOUR
    if not _alive(Bucket.of_minute(last), now_ms, settings):
        last += MINUTES_PER_HOUR - 1 - last % MINUTES_PER_HOUR
    return Window(first, last)


def _last_whole_hour_end(window: Window) -> str:
    """The end of the latest whole hour the window covers: an end that makes it hour-aligned."""
    end = window.end_ms
    return iso_minute(end - end % HOUR_MS)


def _alive(bucket: Bucket, now_ms: int, settings: Settings) -> bool:
    """A bucket can be trusted until its TTL: after it DynamoDB may delete it at any moment.

    The write path places events with the same test at their arrival, which is
    what keeps every minute read here equal to its share of its hour.
    """
    return bucket.alive_at(now_ms, settings)
