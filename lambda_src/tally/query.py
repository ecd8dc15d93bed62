"""Rolling-window counts: window -> plan -> fetch -> sum.

    table = CountsTable(boto3.client("dynamodb"), "tally-counts", Settings.from_env())
    [result] = count_windows(table, ["page-views"])          # last 24 h, batch plan
    result.total, result.by_hour

With several counters the batch plan shares BatchGetItem requests among them
(100 keys each), so ``requests`` is what the whole call made.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tally.core.buckets import iso_minute
from tally.dynamo import CountsTable, Fetched
from tally.core.plans import Plan, PlanKind, make_plan
from tally.core.records import InvalidCounter, Reason, validate_counter
from tally.core.segments import REJECTED_COUNTER_PREFIX
from tally.core.settings import HOUR_MS
from tally.core.sums import sum_plan
from tally.core.windows import DEFAULT_LENGTH_MS, Window, now_ms


@dataclass(frozen=True)
class WindowCount:
    counter: str
    window: Window
    total: int
    by_hour: dict[int, int]  # hour index (hours since the epoch) -> count in the window
    plan: PlanKind
    keys: int  # bucket items the plan reads for this counter
    requests: int  # requests the call made (shared by the counters of one batch call)
    items_read: int  # bucket items DynamoDB returned for this counter

    def as_json(self) -> dict[str, object]:
        return {
            "counter": self.counter,
            "start": iso_minute(self.window.start_ms),
            "end": iso_minute(self.window.end_ms),
            "total": self.total,
            "plan": self.plan.value,
            "keys": self.keys,
            "requests": self.requests,
            "items_read": self.items_read,
            "by_hour": {iso_minute(hour * HOUR_MS): count for hour, count in self.by_hour.items()},
        }


def validate_query_counter(name: str) -> str:
    """Counter names as events write them, plus the reserved rejection counters."""
    if isinstance(name, str) and name.startswith(REJECTED_COUNTER_PREFIX):
        if name[len(REJECTED_COUNTER_PREFIX) :] in {reason.value for reason in Reason if reason.is_rejection}:
            return name
        raise InvalidCounter(f"unknown rejection counter {name!r}")
    return validate_counter(name)


def count_windows(
    table: CountsTable,
    counters: Sequence[str],
    *,
    length_ms: int = DEFAULT_LENGTH_MS,
    at_ms: int | None = None,
    plan: PlanKind = PlanKind.BATCH,
    consistent: bool = False,
    now: int | None = None,
) -> list[WindowCount]:
    """Count each counter over the window of ``length_ms`` ending at ``at_ms`` (default: now)."""
    for counter in counters:
        validate_query_counter(counter)
    now = now_ms() if now is None else now
    window = Window.ending(now if at_ms is None else at_ms, length_ms)
    the_plan = make_plan(window, now, table.settings, PlanKind(plan))
    if the_plan.kind is PlanKind.BATCH:
        return _by_batch(table, counters, the_plan, consistent)
    return _by_range(table, counters, the_plan, consistent)


def _by_batch(table: CountsTable, counters: Sequence[str], plan: Plan, consistent: bool) -> list[WindowCount]:
    keys = [(counter, bucket.sort_key) for counter in dict.fromkeys(counters) for bucket in plan.buckets]
    fetched = table.batch_get(keys, consistent)
    return [_result(counter, plan, fetched) for counter in counters]


def _by_range(table: CountsTable, counters: Sequence[str], plan: Plan, consistent: bool) -> list[WindowCount]:
    results = []
    for counter in counters:
        fetched = Fetched()
        for run in plan.runs():
            part = table.query(counter, run.first.sort_key, run.last.sort_key, consistent)
            fetched.counts.update(part.counts)
            fetched.requests += part.requests
            fetched.items += part.items
        results.append(_result(counter, plan, fetched))
    return results


def _result(counter: str, plan: Plan, fetched: Fetched) -> WindowCount:
    counts = {sk: count for (pk, sk), count in fetched.counts.items() if pk == counter}
    total, by_hour = sum_plan(plan, counts)
    return WindowCount(
        counter=counter,
        window=plan.window,
        total=total,
        by_hour=by_hour,
        plan=plan.kind,
        keys=len(plan.terms),
        requests=fetched.requests,
        items_read=len(counts),
    )
