"""After a stream is drained: compare the counts table and queried windows with the brute-force truth."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

from tally.core.buckets import Bucket, bucket_sort_key
from tally.core.commit import MARKER_PREFIX
from tally.dynamo import CountsTable
from tally.invocation import Summary
from tally.core.plans import PlanKind, WindowUnavailable
from tally.query import count_windows
from tally.core.records import Reason
from tally.core.segments import rejected_counter
from tally.core.settings import DAY_MS, HOUR_MS, MINUTE_MS, Settings
from tally.core.amounts import decimal_of, stored_units
from tally.core.tables import COUNT_ATTRIBUTE, SUM_ATTRIBUTE
from tally.core.windows import Window

from .harness import STATS, FaultStats
from .streams import Expected

NOTABLE_LENGTHS_MIN = (
    1,
    2,
    59,
    60,
    61,
    90,
    119,
    120,
    121,
    23 * 60,
    24 * 60 - 1,
    24 * 60,
    24 * 60 + 1,
    36 * 60,
    48 * 60,
)


def table_buckets(client: Any, table_name: str) -> dict[tuple[str, str], int]:
    """Every bucket of the counts table, its lanes summed (segment markers left out)."""
    return table_contents(client, table_name)[0]


def table_contents(client: Any, table_name: str) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], int]]:
    """Every bucket's count, its lanes summed, and the sum (in units) of those that keep one."""
    counts: dict[tuple[str, str], int] = {}
    sums: dict[tuple[str, str], int] = {}
    for page in client.get_paginator("scan").paginate(TableName=table_name, ConsistentRead=True):
        for item in page["Items"]:
            if not item["pk"]["S"].startswith(MARKER_PREFIX):
                key = (item["pk"]["S"], bucket_sort_key(item["sk"]["S"]))
                counts[key] = counts.get(key, 0) + int(item[COUNT_ATTRIBUTE]["N"])
                if SUM_ATTRIBUTE in item:
                    sums[key] = sums.get(key, 0) + stored_units(item[SUM_ATTRIBUTE]["N"])
    return counts, sums


def check_table(client: Any, table_name: str, expected: Expected, context: str, stats: FaultStats = STATS) -> None:
    """Exact: every bucket the events make, with its count, and nothing else (a bucket at 0 must not exist)."""
    actual, actual_sums = table_contents(client, table_name)
    truth, truth_sums = expected.buckets(), expected.bucket_sums()
    stats.add("buckets_compared", len(truth.keys() | actual.keys()))
    wrong = {
        key: (actual.get(key), truth.get(key))
        for key in truth.keys() | actual.keys()
        if actual.get(key) != truth.get(key)
    }
    wrong.update(
        {
            ("sum", *key): (actual_sums.get(key), truth_sums.get(key))
            for key in truth_sums.keys() | actual_sums.keys()
            if actual_sums.get(key) != truth_sums.get(key)
        }
    )
    if wrong:
        stats.add("discrepancies", len(wrong))
    sample = dict(sorted(wrong.items())[:8])
    assert not wrong, f"{len(wrong)} buckets differ (actual, expected), e.g. {sample}; {context}"


def check_summaries(summaries: list[Summary], records: int, expected: Expected, context: str) -> None:
    """The invocations' own accounting: each record once, every rejection under its reason."""
    total = Counter[Reason]()
    for summary in summaries:
        total.update(summary.rejected)
    assert sum(s.records for s in summaries) == records, context
    assert sum(s.counted for s in summaries) == len(expected.events), context
    assert +total == +expected.rejections_by_reason(), (
        f"rejections {dict(total)} != {dict(expected.rejections_by_reason())}; {context}"
    )
    for summary in summaries:
        assert all(rejection.reason.is_rejection and rejection.detail for rejection in summary.rejections), context


def check_windows(
    table: CountsTable,
    expected: Expected,
    settings: Settings,
    rng: random.Random,
    instants: int,
    context: str,
    stats: FaultStats = STATS,
) -> None:
    """Windows at random instants after the stream drained, by both plans, against the brute-force count."""
    counters = sorted({name for name, _ in expected.events}) + ["never-written"]
    counters += sorted({rejected_counter(reason) for reason, _ in expected.rejections})
    counters.append(rejected_counter(Reason.FUTURE_TIME))
    for _ in range(instants):
        now, at, length_ms = _instant(rng, expected.last_arrival_ms, settings)
        chosen = rng.sample(counters, min(len(counters), 5))
        window = Window.ending(now if at is None else at, length_ms)
        for plan in (PlanKind.BATCH, PlanKind.RANGE):
            try:
                results = count_windows(table, chosen, length_ms=length_ms, at_ms=at, plan=plan, now=now)
            except WindowUnavailable:
                oldest = Bucket.of_minute(window.first_minute)
                assert oldest.ttl_seconds(settings) * 1000 <= now, (
                    f"refused a window within retention: {window}; {context}"
                )
                stats.add("windows_refused")
                continue
            for result in results:
                stats.add("windows_compared")
                truth = expected.count(result.counter, window)
                by_hour = Counter(
                    at_ms // HOUR_MS for name, at_ms in _occurrences(expected, result.counter) if window.covers(at_ms)
                )
                summing = any(name == result.counter for name, _, _ in expected.amounts)
                truth_sum = decimal_of(expected.sum_of(result.counter, window)) if summing else None
                sums_differ = summing and (
                    result.sum != truth_sum or result.average != expected.average(result.counter, window)
                )
                if result.total != truth or +Counter(result.by_hour) != +by_hour or sums_differ:
                    stats.add("discrepancies")
                where = (
                    f"{result.counter!r} over {window} ({length_ms // MINUTE_MS} min), "
                    f"plan {plan.value}, now {now}, at {at}"
                )
                assert result.total == truth, f"{where}: counted {result.total}, brute force {truth}; {context}"
                assert not sums_differ, (
                    f"{where}: sum {result.sum} average {result.average}, brute force {truth_sum} "
                    f"{expected.average(result.counter, window)}; {context}"
                )
                assert +Counter(result.by_hour) == +by_hour, (
                    f"{where}: by hour {result.by_hour} != {dict(by_hour)}; {context}"
                )


def _occurrences(expected: Expected, counter: str) -> list[tuple[str, int]]:
    if counter.startswith("#rejected#"):
        return [(counter, at) for reason, at in expected.rejections if rejected_counter(reason) == counter]
    return [(name, at) for name, at in expected.events if name == counter]


def _instant(rng: random.Random, last_arrival_ms: int, settings: Settings) -> tuple[int, int | None, int]:
    """(now, window end or None for now, length): now is never before the last record arrived."""
    now = last_arrival_ms + rng.choice([0, rng.randint(0, settings.max_clock_skew_ms), rng.randint(0, 2 * DAY_MS)])
    kind = rng.randrange(4)
    if kind == 0:
        at = None
    elif kind == 1:
        at = now - rng.randint(0, DAY_MS + 2 * HOUR_MS)
    elif kind == 2:
        at = now + rng.randint(0, 2 * HOUR_MS)
    else:
        at = now - now % HOUR_MS - rng.choice([0, 1, MINUTE_MS])  # right at, or just before, an hour boundary
    minutes = rng.choice(NOTABLE_LENGTHS_MIN) if rng.random() < 0.6 else rng.randint(1, 48 * 60)
    return now, at, minutes * MINUTE_MS
