"""Fetched bucket counts -> the window's total and its per-hour breakdown. No I/O."""

from __future__ import annotations

from collections.abc import Mapping

from tally.core.plans import Plan


def sum_plan(plan: Plan, counts: Mapping[str, int]) -> tuple[int, dict[int, int]]:
    """Signed sum of the plan's buckets (missing buckets count 0), also per hour index."""
    by_hour: dict[int, int] = {}
    for term in plan.terms:
        value = term.sign * counts.get(term.bucket.sort_key, 0)
        hour = term.bucket.hour_index
        by_hour[hour] = by_hour.get(hour, 0) + value
    return sum(by_hour.values()), dict(sorted(by_hour.items()))
