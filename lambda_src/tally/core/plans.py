"""Window -> plan: the bucket items whose signed sum is the window's count. No I/O.

Because an hour always equals the sum of its minutes, a partly covered hour
can be read either as its covered minutes or as the hour minus its other
minutes, whichever reads less. Minutes that cannot hold data yet (later than
now plus the allowed clock skew) are never read, so a window ending now reads
the current hour whole unless an event stamped slightly in the future could be
in it.

Two plans share that choice and differ in how they fetch:
- batch: exact keys in BatchGetItem requests (the cost is the number of keys);
- range: one Query per contiguous run of same-granularity buckets (the cost
  is the number of runs first, then the items read).

A union plan (``union=True``) is for what cannot be subtracted, distinct
counts: only disjoint buckets that cover the window, each hour whole or its
covered minutes, never ``hour - minutes`` (at most 23 hours and 2 x 59
minutes for 24 h). It keeps the same retention rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from tally.core.buckets import MINUTES_PER_HOUR, Bucket, Granularity, iso_minute
from tally.core.settings import MINUTE_MS, Settings
from tally.core.windows import Window


class PlanKind(str, Enum):
    BATCH = "batch"
    RANGE = "range"


class WindowUnavailable(ValueError):
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
        """Whether the plan is a union of disjoint buckets (no ``hour - minutes``): it can read distinct counts."""
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
    window: Window, now_ms: int, settings: Settings, kind: PlanKind = PlanKind.BATCH, union: bool = False
) -> Plan:
    """Choose, hour by hour, the cheapest exact reading of the window (a union of disjoint buckets if ``union``).

    Raises WindowUnavailable when a needed bucket may already have expired:
    partial hours need minute buckets, so past the minute retention a window
    must cover whole hours there.
    """
    populated_until = (now_ms + settings.max_clock_skew_ms) // MINUTE_MS
    terms: list[Term] = []
    for hour in range(window.first_minute // MINUTES_PER_HOUR, window.last_minute // MINUTES_PER_HOUR + 1):
        terms.extend(_hour_terms(hour, window, populated_until, now_ms, settings, kind, union))
    return Plan(kind, window, tuple(terms))


def _hour_terms(
    hour: int, window: Window, populated_until: int, now_ms: int, settings: Settings, kind: PlanKind, union: bool
) -> list[Term]:
    hour_first = hour * MINUTES_PER_HOUR
    hour_last = min(hour_first + MINUTES_PER_HOUR - 1, populated_until)
    first = max(window.first_minute, hour_first)
    last = min(window.last_minute, hour_last)
    if first > last:
        return []  # nothing in this hour can hold data yet
    hour_bucket = Bucket.of_hour(hour)
    if first == hour_first and last == hour_last:
        _require_alive(hour_bucket, now_ms, settings)
        return [Term(hour_bucket, +1)]

    covered = [range(first, last + 1)]
    others = [r for r in (range(hour_first, first), range(last + 1, hour_last + 1)) if r]
    options = [
        [Term(Bucket.of_minute(m), +1) for r in covered for m in r],
        [Term(hour_bucket, +1), *(Term(Bucket.of_minute(m), -1) for r in others for m in r)],
    ]
    runs = [len(covered), len(others)]
    if union:  # what cannot be subtracted is read as the covered minutes only
        options, runs = options[:1], runs[:1]
    alive = [i for i, option in enumerate(options) if all(_alive(t.bucket, now_ms, settings) for t in option)]
    if not alive:
        raise WindowUnavailable(
            f"the minutes of hour {Bucket.of_hour(hour).sort_key[2:]} are past the minute retention "
            f"({settings.minute_retention_ms // 3_600_000} h): a window reaching that far back must cover "
            f"whole hours there, e.g. a length in whole hours ending at {_last_whole_hour_end(window)}"
        )
    if kind is PlanKind.RANGE:
        best = min(alive, key=lambda i: (runs[i], len(options[i])))
    else:
        best = min(alive, key=lambda i: len(options[i]))
    return options[best]


def _last_whole_hour_end(window: Window) -> str:
    """The last minute of the latest whole hour the window covers: an end that makes it hour-aligned."""
    last = window.last_minute
    if (last + 1) % MINUTES_PER_HOUR:
        last = last // MINUTES_PER_HOUR * MINUTES_PER_HOUR - 1
    return iso_minute(last * MINUTE_MS)


def _alive(bucket: Bucket, now_ms: int, settings: Settings) -> bool:
    """A bucket can be trusted until its TTL: after it DynamoDB may delete it at any moment.

    The write path places events with the same test at their arrival, which is
    what keeps every minute read here equal to its share of its hour.
    """
    return bucket.alive_at(now_ms, settings)


def _require_alive(bucket: Bucket, now_ms: int, settings: Settings) -> None:
    if not _alive(bucket, now_ms, settings):
        granularity = "hour" if bucket.granularity is Granularity.HOUR else "minute"
        raise WindowUnavailable(f"bucket {bucket.sort_key} is past the {granularity} retention")
