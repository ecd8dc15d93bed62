"""Fetched buckets -> the window's count, sum, histogram and distinct values, in total, per hour and as a series.
No I/O."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tally.core.buckets import Bucket
from tally.core.units import HOUR_MS, MINUTES_PER_HOUR
from tally.core.histograms import signed_sum
from tally.core.plans import Plan, Series
from tally.core.sketches import Sketch, union


@dataclass(frozen=True)
class PlanTotals:
    """Signed sums over a plan's buckets; sums in 10^-8 units (amounts.py), bins by name (histograms.py)."""

    count: int
    count_by_hour: dict[int, int]
    units: int
    units_by_hour: dict[int, int]
    bins: dict[str, int]
    bins_by_hour: dict[int, dict[str, int]]
    sketch: Sketch | None = None  # the window's distinct values, from a union plan
    sketch_by_hour: dict[int, Sketch] | None = None


@dataclass(frozen=True)
class Point:
    """One entry of a series: what the window holds from ``start_ms`` to the next entry (or the window's end)."""

    start_ms: int
    count: int
    units: int
    bins: dict[str, int]
    sketch: Sketch | None = None


def sum_plan(
    plan: Plan,
    counts: Mapping[str, int],
    sums: Mapping[str, int] | None = None,
    bins: Mapping[str, Mapping[str, int]] | None = None,
    sketches: Mapping[str, Sketch] | None = None,
) -> PlanTotals:
    """Signed sum of the plan's buckets by sort key (missing buckets count 0), also per hour index.

    An hour's sum and histogram bins, like its count, equal those of its
    minutes, so the same signed terms give the window's sum and bins. Sketches
    (``sketches``, for distinct counts) need a union plan: they are merged, never subtracted.
    """
    if sketches is not None and not plan.disjoint:
        raise ValueError("distinct values need a union plan: sketches cannot be subtracted")
    sums, bins = sums or {}, bins or {}
    count_by_hour: dict[int, int] = {}
    units_by_hour: dict[int, int] = {}
    terms_by_hour: dict[int, list[tuple[int, Mapping[str, int]]]] = {}
    for term in plan.terms:
        sort_key, hour = term.bucket.sort_key, term.bucket.hour_index
        count_by_hour[hour] = count_by_hour.get(hour, 0) + term.sign * counts.get(sort_key, 0)
        units_by_hour[hour] = units_by_hour.get(hour, 0) + term.sign * sums.get(sort_key, 0)
        if sort_key in bins:
            terms_by_hour.setdefault(hour, []).append((term.sign, bins[sort_key]))
    bins_by_hour = {hour: signed_sum(terms_by_hour.get(hour, ())) for hour in sorted(count_by_hour)}
    return PlanTotals(
        count=sum(count_by_hour.values()),
        count_by_hour=dict(sorted(count_by_hour.items())),
        units=sum(units_by_hour.values()),
        units_by_hour=dict(sorted(units_by_hour.items())),
        bins=signed_sum((1, hour_bins) for hour_bins in bins_by_hour.values()),
        bins_by_hour=bins_by_hour,
        **(_union_by_hour(plan, sketches) if sketches is not None else {}),
    )


def _union_by_hour(plan: Plan, sketches: Mapping[str, Sketch]) -> dict[str, object]:
    by_hour: dict[int, list[Sketch]] = {}
    for term in plan.terms:
        hour_sketches = by_hour.setdefault(term.bucket.hour_index, [])
        if term.bucket.sort_key in sketches:
            hour_sketches.append(sketches[term.bucket.sort_key])
    sketch_by_hour = {hour: union(hour_sketches) for hour, hour_sketches in sorted(by_hour.items())}
    return {"sketch": union(sketch_by_hour.values()), "sketch_by_hour": sketch_by_hour}


def series_of(
    plan: Plan,
    series: Series,
    totals: PlanTotals,
    counts: Mapping[str, int],
    sums: Mapping[str, int] | None = None,
    bins: Mapping[str, Mapping[str, int]] | None = None,
    sketches: Mapping[str, Sketch] | None = None,
) -> list[Point]:
    """Every minute or hour of the plan's window in order, empty ones included: the points add up to ``totals``.

    An hour series comes from the per-hour totals (the partial first and last
    hours start at the window's edges); a minute series needs a minute plan
    (``make_plan(..., series=Series.MINUTE)``), whose terms are the minutes.
    """
    window = plan.window
    if series is Series.MINUTE:
        sums, bins = sums or {}, bins or {}
        points = []
        for minute in range(window.first_minute, window.last_minute + 1):
            sort_key = Bucket.of_minute(minute).sort_key
            sketch = None if sketches is None else sketches.get(sort_key, Sketch())
            points.append(
                Point(
                    minute * 60_000,
                    counts.get(sort_key, 0),
                    sums.get(sort_key, 0),
                    dict(bins.get(sort_key, {})),
                    sketch,
                )
            )
        return points
    first_hour, last_hour = window.first_minute // MINUTES_PER_HOUR, window.last_minute // MINUTES_PER_HOUR
    return [
        Point(
            max(hour * HOUR_MS, window.start_ms),
            totals.count_by_hour.get(hour, 0),
            totals.units_by_hour.get(hour, 0),
            totals.bins_by_hour.get(hour, {}),
            None if totals.sketch_by_hour is None else totals.sketch_by_hour.get(hour, Sketch()),
        )
        for hour in range(first_hour, last_hour + 1)
    ]
