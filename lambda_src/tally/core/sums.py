"""Fetched buckets -> the window's count and sum, in total and per hour. No I/O."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tally.core.plans import Plan


@dataclass(frozen=True)
class PlanTotals:
    """Signed sums over a plan's buckets; sums in 10^-8 units (amounts.py)."""

    count: int
    count_by_hour: dict[int, int]
    units: int
    units_by_hour: dict[int, int]


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
