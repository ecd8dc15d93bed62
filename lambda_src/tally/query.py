"""Rolling-window counts: window -> plan -> fetch -> sum.

    table = CountsTable(boto3.client("dynamodb"), "tally-counts", Settings.from_env())
    [result] = count_windows(table, ["page-views"])          # last 24 h, batch plan
    result.total, result.by_hour                             # and for a summing counter
    result.sum, result.average, result.sum_by_hour           # exact Decimals (None when it does not sum)
    result.histogram.quantile("0.99"), result.histogram_by_hour  # for a histogram counter (else None)

With several counters the batch plan shares BatchGetItem requests among them
(100 keys each), so ``requests`` is what the whole call made.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

from tally.core.histograms import Histogram
from tally.core.sketches import Sketch

from tally.core.amounts import average_of, decimal_of, text_of
from tally.core.buckets import iso_minute
from tally.dynamo import CountsTable, Fetched
from tally.core.plans import Plan, PlanKind, make_plan
from tally.core.records import InvalidCounter, Reason, validate_counter
from tally.core.rules import Rules
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
    sum: Decimal | None = None  # for a summing counter: the exact sum in the window
    sum_by_hour: dict[int, Decimal] | None = None
    histogram: Histogram | None = None  # for a histogram counter: its values in the window, for quantiles
    histogram_by_hour: dict[int, Histogram] | None = None
    sketch: Sketch | None = None  # for a distinct counter: its distinct values in the window
    sketch_by_hour: dict[int, Sketch] | None = None

    @property
    def distinct(self) -> int | None:
        """Distinct values in the window: exact while every bucket holds at most SPARSE_LIMIT of them, else
        an estimate within STANDARD_ERROR (1.625 %, one standard error). None for a counter that counts none."""
        return None if self.sketch is None else self.sketch.count()

    @property
    def average(self) -> Decimal | None:
        """Sum / count (38 significant digits); None for a counter that does not sum or an empty window."""
        if self.sum is None or not self.total:
            return None
        return average_of(self.sum, self.total)

    def average_in_hour(self, hour: int) -> Decimal | None:
        if self.sum_by_hour is None or not self.by_hour.get(hour):
            return None
        return average_of(self.sum_by_hour.get(hour, Decimal(0)), self.by_hour[hour])

    def as_json(self, quantiles: Sequence[str] = ()) -> dict[str, object]:
        """Counts as JSON numbers; sums, averages and quantiles as decimal strings, so no JSON parser rounds them.

        ``quantiles`` as the user wrote them (``"0.99"``) become the keys of ``quantiles`` (null for no values),
        for a counter that keeps a histogram; ``bounds`` hold the lowest and highest value it may have seen.
        """
        result: dict[str, object] = {
            "counter": self.counter,
            "start": iso_minute(self.window.start_ms),
            "end": iso_minute(self.window.end_ms),
            "total": self.total,
        }
        if self.sum is not None:
            result["sum"] = text_of(self.sum)
            result["average"] = text_of(self.average)
        if self.sketch is not None:
            result["distinct"] = self.distinct
            result["distinct_exact"] = self.sketch.exact
        if self.histogram is not None and quantiles:
            result["quantiles"] = _quantiles_json(self.histogram, quantiles)
            result["bounds"] = {"low": text_of(self.histogram.low), "high": text_of(self.histogram.high)}
        result.update(
            {
                "plan": self.plan.value,
                "keys": self.keys,
                "requests": self.requests,
                "items_read": self.items_read,
                "by_hour": {iso_minute(hour * HOUR_MS): count for hour, count in self.by_hour.items()},
            }
        )
        if self.sum_by_hour is not None:
            result["sum_by_hour"] = {iso_minute(h * HOUR_MS): text_of(v) for h, v in self.sum_by_hour.items()}
            result["average_by_hour"] = {
                iso_minute(hour * HOUR_MS): text_of(self.average_in_hour(hour)) for hour in self.by_hour
            }
        if self.sketch_by_hour is not None:
            result["distinct_by_hour"] = {iso_minute(h * HOUR_MS): s.count() for h, s in self.sketch_by_hour.items()}
        if self.histogram_by_hour is not None and quantiles:
            result["quantiles_by_hour"] = {
                iso_minute(hour * HOUR_MS): _quantiles_json(histogram, quantiles)
                for hour, histogram in self.histogram_by_hour.items()
            }
        return result


def _quantiles_json(histogram: Histogram, quantiles: Sequence[str]) -> dict[str, str | None]:
    return {q: text_of(histogram.quantile(q)) for q in quantiles}


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
    """Count each counter over the window of ``length_ms`` ending at ``at_ms`` (default: now).

    A counter a distinct rule writes is read by a union plan (disjoint buckets: sketches cannot be
    subtracted), its sketch items with its counts.
    """
    for counter in counters:
        validate_query_counter(counter)
    now = now_ms() if now is None else now
    window = Window.ending(now if at_ms is None else at_ms, length_ms)
    rules = table.settings.counter_rules
    distinct = {counter for counter in counters if rules.counts_distinct(counter)}
    # Only the plans some counter needs: a union plan may be refused where hour - minutes is not.
    kinds = {counter in distinct for counter in counters}
    plans = {union: make_plan(window, now, table.settings, PlanKind(plan), union) for union in kinds}
    plan_of = {counter: plans[counter in distinct] for counter in dict.fromkeys(counters)}
    fetched = _fetch(table, plan_of, distinct, consistent)
    return [_result(counter, plan_of[counter], fetched[counter], rules) for counter in counters]


def _fetch(table: CountsTable, plan_of: dict[str, Plan], distinct: set[str], consistent: bool) -> dict[str, Fetched]:
    """What each counter's plan reads: one Fetched shared by the batch plans' counters (their keys share
    BatchGetItem requests), one per counter of a range plan (its own Queries)."""
    fetched: dict[str, Fetched] = {}
    batch = {counter: plan for counter, plan in plan_of.items() if plan.kind is PlanKind.BATCH}
    if batch:
        keys = [(counter, bucket.sort_key) for counter, plan in batch.items() for bucket in plan.buckets]
        fetched.update(dict.fromkeys(batch, table.batch_get(keys, consistent, distinct)))
    for counter, plan in plan_of.items():
        if plan.kind is PlanKind.RANGE:
            fetched[counter] = Fetched()
            for run in plan.runs():
                part = table.query(counter, run.first.sort_key, run.last.sort_key, consistent, counter in distinct)
                fetched[counter].update(part)
    return fetched


def _result(counter: str, plan: Plan, fetched: Fetched, rules: Rules) -> WindowCount:
    """A counter sums (keeps a histogram) when a rule says so, or a bucket that carries a sum (bins) does;
    it counts distinct values when a rule says so (its sketch items are read only then)."""
    counts = {sk: count for (pk, sk), count in fetched.counts.items() if pk == counter}
    units = {sk: value for (pk, sk), value in fetched.sums.items() if pk == counter}
    bins = {sk: value for (pk, sk), value in fetched.bins.items() if pk == counter}
    sketches = {sk: value for (pk, sk), value in fetched.sketches.items() if pk == counter}
    totals = sum_plan(plan, counts, units, bins, sketches if rules.counts_distinct(counter) else None)
    summing = rules.sums(counter) or bool(units)
    binning = rules.keeps_histogram(counter) or bool(bins)
    return WindowCount(
        counter=counter,
        window=plan.window,
        total=totals.count,
        by_hour=totals.count_by_hour,
        plan=plan.kind,
        keys=len(plan.terms),
        requests=fetched.requests,
        items_read=len(counts),
        sum=decimal_of(totals.units) if summing else None,
        sum_by_hour={h: decimal_of(u) for h, u in totals.units_by_hour.items()} if summing else None,
        histogram=Histogram(totals.bins) if binning else None,
        histogram_by_hour={h: Histogram(b) for h, b in totals.bins_by_hour.items()} if binning else None,
        sketch=totals.sketch,
        sketch_by_hour=totals.sketch_by_hour,
    )
