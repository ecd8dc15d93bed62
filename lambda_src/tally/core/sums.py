"""Fetched buckets -> the window's count and sum, in total, per hour and as a series. No I/O."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tally.core.buckets import MINUTES_PER_HOUR, Bucket
from tally.core.plans import Plan, Series
from tally.core.settings import HOUR_MS


@dataclass(frozen=True)
class PlanTotals:
    """Signed sums over a plan's buckets; sums in 10^-8 units (amounts.py)."""

    count: int
    count_by_hour: dict[int, int]
    units: int
    units_by_hour: dict[int, int]


@dataclass(frozen=True)
class Point:
    """One entry of a series: what the window holds from ``start_ms`` to the next entry (or the window's end)."""

    start_ms: int
    count: int
    units: int


def sum_plan(plan: Plan, counts: Mapping[str, int], sums: Mapping[str, int] | None = None) -> PlanTotals:
    """Signed sum of the plan's buckets by sort key (missing buckets count 0), also per hour index.

    An hour's sum, like its count, equals the sum of its minutes, so the same
    signed terms give the window's sum.
    """
    sums = sums or {}
    count_by_hour: dict[int, int] = {}
    units_by_hour: dict[int, int] = {}
    for term in plan.terms:
        sort_key, hour = term.bucket.sort_key, term.bucket.hour_index
        count_by_hour[hour] = count_by_hour.get(hour, 0) + term.sign * counts.get(sort_key, 0)
        units_by_hour[hour] = units_by_hour.get(hour, 0) + term.sign * sums.get(sort_key, 0)
    return PlanTotals(
        count=sum(count_by_hour.values()),
        count_by_hour=dict(sorted(count_by_hour.items())),
        units=sum(units_by_hour.values()),
        units_by_hour=dict(sorted(units_by_hour.items())),
    )


def series_of(
    plan: Plan, series: Series, totals: PlanTotals, counts: Mapping[str, int], sums: Mapping[str, int] | None = None
) -> list[Point]:
    """Every minute or hour of the plan's window in order, empty ones included: the points add up to ``totals``.

    An hour series comes from the per-hour totals (the partial first and last
    hours start at the window's edges); a minute series needs a minute plan
    (``make_plan(..., series=Series.MINUTE)``), whose terms are the minutes.
    """
    window = plan.window
    if series is Series.MINUTE:
        sums = sums or {}
        points = []
        for minute in range(window.first_minute, window.last_minute + 1):
            sort_key = Bucket.of_minute(minute).sort_key
            points.append(Point(minute * 60_000, counts.get(sort_key, 0), sums.get(sort_key, 0)))
        return points
    first_hour, last_hour = window.first_minute // MINUTES_PER_HOUR, window.last_minute // MINUTES_PER_HOUR
    return [
        Point(
            max(hour * HOUR_MS, window.start_ms),
            totals.count_by_hour.get(hour, 0),
            totals.units_by_hour.get(hour, 0),
        )
        for hour in range(first_hour, last_hour + 1)
    ]
