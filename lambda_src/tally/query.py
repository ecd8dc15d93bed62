"""Rolling-window counts, the engine under ``tally.Reader``: window -> plan -> fetch -> sum.

    table = CountsTable(boto3.client("dynamodb"), "tally-counts", Settings.from_env())
    [result] = count_windows(table, ["page-views"], length_ms=DAY_MS)    # last 24 h, batch plan
    result.total, result.start, result.end, result.by_hour             # aware UTC datetimes
    result.sum, result.average, result.sum_by_hour                     # exact Decimals (None when it does not sum)
    result.histogram.quantile("0.99"), result.histogram_by_hour        # for a histogram counter (else None)
    result.distinct, result.sketch.exact, result.sketch_by_hour        # for a distinct counter (else None)
    result.retired                                                     # epoch ms its rules all retired at, else None

It speaks epoch milliseconds and takes ``now`` from its caller (tests pin it);
``tally.Reader`` is the documented way in. With several counters the batch
plan shares BatchGetItem requests among them (100 keys each), so ``requests``
is what the whole call made.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal

from tally.core.amounts import average_of, decimal_of, text_of
from tally.core.buckets import Bucket, iso_minute, iso_second
from tally.core.calendar import Period, Span, zone_of
from tally.core.calendar_sources import Sources, calendar_sources, hours_only_reason
from tally.core.histograms import Histogram
from tally.core.sketches import Sketch
from tally.core.plans import Plan, PlanKind, Series, align_to_retention, make_plan
from tally.core.records import InvalidCounter, Reason, validate_counter
from tally.core.rules import Rules
from tally.core.segments import REJECTED_COUNTER_PREFIX
from tally.core.settings import Settings
from tally.core.units import HOUR_MS, MINUTE_MS
from tally.core.sums import Point, PlanTotals, series_of, sum_plan
from tally.core.windows import DEFAULT_LENGTH_MS, QueryError, Window, now_ms, utc_of
from tally.dynamo.counts_table import CountsTable
from tally.dynamo.fetch import Fetched


class InvalidQueryCounter(QueryError, InvalidCounter):
    """A counter name no event can write, asked for in a read (an InvalidCounter too)."""


class _Aggregates:
    """What a point holds beside its count: the average of its sum, its distinct count, and those as JSON."""

    count: int
    sum: Decimal | None
    histogram: Histogram | None
    sketch: Sketch | None

    @property
    def average(self) -> Decimal | None:
        if self.sum is None or not self.count:
            return None
        return average_of(self.sum, self.count)

    @property
    def distinct(self) -> int | None:
        return None if self.sketch is None else self.sketch.count()

    def _with_aggregates(self, point: dict[str, object], quantiles: Sequence[str]) -> dict[str, object]:
        point["count"] = self.count
        if self.sum is not None:
            point["sum"] = text_of(self.sum)
            point["average"] = text_of(self.average)
        if self.sketch is not None:
            point["distinct"] = self.distinct
        if self.histogram is not None and quantiles:
            point["quantiles"] = quantiles_json(self.histogram, quantiles)
        return point


@dataclass(frozen=True)
class SeriesPoint(_Aggregates):
    """One bucket of a series: what the window holds from ``start`` until the next point (or the window's end)."""

    start: datetime
    count: int
    sum: Decimal | None = None  # for a summing counter
    histogram: Histogram | None = None  # for a histogram counter
    sketch: Sketch | None = None  # for a distinct counter: its distinct values in this bucket

    def as_json(self, quantiles: Sequence[str] = ()) -> dict[str, object]:
        return self._with_aggregates({"start": iso_minute(_ms(self.start))}, quantiles)


@dataclass(frozen=True)
class WindowCount:
    """One counter over one window: ``start``/``end`` (end exclusive) are the window answered.

    ``retired``: when every rule that can write the counter had been retired (``retiredAt``) by the read's
    now, the instant the last of them retired, in epoch ms; None while one of them counts. Such a counter's
    buckets stay readable until they expire, and no more events will come.
    """

    counter: str
    window: Window
    total: int
    by_hour: dict[datetime, int]  # the hour's start -> count in the window, for each hour that can hold data
    plan: PlanKind
    keys: int  # bucket items the plan reads for this counter
    requests: int  # requests the call made (shared by the counters of one batch call)
    items_read: int  # bucket items DynamoDB returned for this counter
    sum: Decimal | None = None  # for a summing counter: the exact sum in the window
    sum_by_hour: dict[datetime, Decimal] | None = None
    series: tuple[SeriesPoint, ...] | None = None  # every minute or hour of the window, in order, when asked
    series_unit: Series | None = None
    aligned: bool = False  # the window answered holds the one asked, moved out to whole hours
    asked: Window | None = None  # the window asked, when it was aligned
    histogram: Histogram | None = None  # for a histogram counter: its values in the window, for quantiles
    histogram_by_hour: dict[datetime, Histogram] | None = None
    quantiles: tuple[str, ...] = ()  # the quantiles asked, as written ("0.99"): what ``as_json`` answers
    sketch: Sketch | None = None  # for a distinct counter: its distinct values in the window
    sketch_by_hour: dict[datetime, Sketch] | None = None
    # Buckets read whose items an overlap left unresolved: the total may be low, by at most what each mark bounds
    # ("H#2026-11-22T13: ~tag first..last <=3"), until scripts/audit.py COUNTER --repair recounts them.
    unresolved: tuple[str, ...] = ()
    # When every rule that can write the counter had been retired (``retiredAt``) by the read's now, the last of
    # them retired then, in epoch ms: no more events will come, and its buckets stay readable until they expire.
    retired: int | None = None

    @property
    def exact(self) -> bool:
        """Whether every bucket the window read holds every event counted in it (none left unresolved)."""
        return not self.unresolved

    @property
    def distinct(self) -> int | None:
        """Distinct values in the window: exact while every bucket holds at most SPARSE_LIMIT of them, else
        an estimate within STANDARD_ERROR (1.625 %, one standard error). None for a counter that counts none."""
        return None if self.sketch is None else self.sketch.count()

    @property
    def start(self) -> datetime:
        return utc_of(self.window.start_ms)

    @property
    def end(self) -> datetime:
        return utc_of(self.window.end_ms)

    @property
    def average(self) -> Decimal | None:
        """Sum / count (38 significant digits); None for a counter that does not sum or an empty window."""
        if self.sum is None or not self.total:
            return None
        return average_of(self.sum, self.total)

    def average_in_hour(self, hour: datetime) -> Decimal | None:
        if self.sum_by_hour is None or not self.by_hour.get(hour):
            return None
        return average_of(self.sum_by_hour.get(hour, Decimal(0)), self.by_hour[hour])

    def as_json(self) -> dict[str, object]:
        """Counts as JSON numbers; sums, averages and quantiles as decimal strings, so no JSON parser rounds them.

        For a histogram counter, the quantiles asked key ``quantiles`` as written (null for an empty window),
        ``bounds`` hold the lowest and highest value its window may hold, and the hours and series points
        carry their quantiles too.
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
        quantiles = self.quantiles if self.histogram is not None else ()
        if quantiles:
            assert self.histogram is not None
            result["quantiles"] = quantiles_json(self.histogram, quantiles)
            result["bounds"] = {"low": text_of(self.histogram.low), "high": text_of(self.histogram.high)}
        result.update(
            {
                "aligned": self.aligned,
                "plan": self.plan.value,
                "keys": self.keys,
                "requests": self.requests,
                "items_read": self.items_read,
                "by_hour": {_iso(hour): count for hour, count in self.by_hour.items()},
            }
        )
        if self.sum_by_hour is not None:
            result["sum_by_hour"] = {_iso(hour): text_of(value) for hour, value in self.sum_by_hour.items()}
            result["average_by_hour"] = {_iso(hour): text_of(self.average_in_hour(hour)) for hour in self.by_hour}
        if self.sketch_by_hour is not None:
            result["distinct_by_hour"] = {_iso(hour): sketch.count() for hour, sketch in self.sketch_by_hour.items()}
        if self.histogram_by_hour is not None and quantiles:
            result["quantiles_by_hour"] = {
                _iso(hour): quantiles_json(histogram, quantiles) for hour, histogram in self.histogram_by_hour.items()
            }
        if self.series is not None:
            result["series"] = [point.as_json(quantiles) for point in self.series]
        if self.unresolved:
            result["unresolved"] = list(self.unresolved)
        result["retired"] = None if self.retired is None else iso_second(self.retired)
        return result


def quantiles_json(histogram: Histogram, quantiles: Sequence[str]) -> dict[str, str | None]:
    """Each quantile as written -> its value as a decimal string, or None when the histogram holds none."""
    return {q: text_of(histogram.quantile(q)) for q in quantiles}


def validate_query_counter(name: str) -> str:
    """Counter names as events write them, plus the reserved rejection counters."""
    if isinstance(name, str) and name.startswith(REJECTED_COUNTER_PREFIX):
        reasons = sorted(reason.value for reason in Reason if reason.is_rejection)
        if name[len(REJECTED_COUNTER_PREFIX) :] in reasons:
            return name
        raise InvalidQueryCounter(
            f"unknown rejection counter {name!r}: the reasons are {', '.join(reasons)} (e.g. #rejected#{reasons[0]})"
        )
    try:
        return validate_counter(name)
    except InvalidCounter as error:
        raise InvalidQueryCounter(f"{error}: counter names are 1-255 characters, not starting with '#'") from None


def count_windows(
    table: CountsTable,
    counters: Sequence[str],
    *,
    length_ms: int = DEFAULT_LENGTH_MS,
    at_ms: int | None = None,
    plan: PlanKind = PlanKind.BATCH,
    consistent: bool = False,
    now: int | None = None,
    series: Series | None = None,
    align: bool = False,
    quantiles: Sequence[str] = (),
    allow_transient: bool = False,
) -> list[WindowCount]:
    """Count each counter over the window of ``length_ms`` ending at ``at_ms`` (default: now).

    ``align``: answer a window whose edges reach past the minute retention over
    whole hours there (``align_to_retention``) instead of refusing it.
    ``quantiles``: what the results' ``as_json`` answers for histogram counters.
    ``allow_transient``: the fast path that may read an hour minus its other minutes, and so answer a
    count the table never held while a segment is being applied (``make_plan``); never for a counter a
    distinct rule writes, whose sketches cannot be subtracted (its sketch items are read with its counts).
    """
    for counter in counters:
        validate_query_counter(counter)
    now = now_ms() if now is None else now
    asked, window = answered_window(length_ms, at_ms, now, align, table.settings)
    series = Series(series) if series is not None else None
    rules = table.settings.counter_rules
    distinct = {counter for counter in counters if rules.counts_distinct(counter)}
    # Only the plans some counter needs: a disjoint plan may be refused where hour - minutes is not.
    subtracts = {counter: allow_transient and counter not in distinct for counter in dict.fromkeys(counters)}
    contexts = {
        subtract: _Context(
            make_plan(window, now, table.settings, PlanKind(plan), series, allow_transient=subtract),
            series,
            asked if window != asked else None,
            tuple(quantiles),
        )
        for subtract in set(subtracts.values())
    }
    context_of = {counter: contexts[subtract] for counter, subtract in subtracts.items()}
    if PlanKind(plan) is PlanKind.BATCH:
        results = _by_batch(table, counters, context_of, distinct, consistent)
    else:
        results = _by_range(table, counters, context_of, distinct, consistent)
    return [replace(result, retired=retired_at(rules, result.counter, now)) for result in results]


def retired_at(rules: Rules, counter: str, now: int) -> int | None:
    """When ``counter`` stopped counting, every rule that can write it retired by ``now`` (``Rules.retired_at``);
    None while one of them counts. tally's own rejection counters are no rule's, and never retire. No I/O."""
    if not rules.timed or counter.startswith(REJECTED_COUNTER_PREFIX):  # no rule retires at all: no regex to run
        return None
    return rules.retired_at(counter, now)


def answered_window(
    length_ms: int, at_ms: int | None, now: int, align: bool, settings: Settings
) -> tuple[Window, Window]:
    """The window asked (ending at ``at_ms``, default ``now``) and the one answered (aligned, if asked to be)."""
    asked = Window.ending(now if at_ms is None else at_ms, length_ms)
    return asked, align_to_retention(asked, now, settings) if align else asked


@dataclass(frozen=True)
class _Context:
    plan: Plan
    series: Series | None
    asked: Window | None
    quantiles: tuple[str, ...] = ()


def _by_batch(
    table: CountsTable, counters: Sequence[str], context_of: dict[str, _Context], distinct: set[str], consistent: bool
) -> list[WindowCount]:
    keys = [(counter, bucket.sort_key) for counter, context in context_of.items() for bucket in context.plan.buckets]
    fetched = table.batch_get(keys, consistent, distinct)
    return [_result(counter, context_of[counter], fetched, table.settings.counter_rules) for counter in counters]


def _by_range(
    table: CountsTable, counters: Sequence[str], context_of: dict[str, _Context], distinct: set[str], consistent: bool
) -> list[WindowCount]:
    results = []
    for counter in counters:
        fetched = Fetched()
        for run in context_of[counter].plan.runs():
            part = table.query(counter, run.first.sort_key, run.last.sort_key, consistent, counter in distinct)
            fetched.update(part)
        results.append(_result(counter, context_of[counter], fetched, table.settings.counter_rules))
    return results


def _result(counter: str, context: _Context, fetched: Fetched, rules: Rules) -> WindowCount:
    """A counter sums (keeps a histogram) when a rule says so, or a bucket that carries a sum (bins) does;
    it counts distinct values when a rule says so (its sketch items are read only then)."""
    plan = context.plan
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
        by_hour={utc_of(hour * HOUR_MS): count for hour, count in totals.count_by_hour.items()},
        plan=plan.kind,
        keys=len(plan.terms),
        requests=fetched.requests,
        items_read=len(counts),
        sum=decimal_of(totals.units) if summing else None,
        sum_by_hour={utc_of(h * HOUR_MS): decimal_of(u) for h, u in totals.units_by_hour.items()} if summing else None,
        series=_series(context, totals, counts, units, bins, sketches, summing, binning),
        series_unit=context.series,
        aligned=context.asked is not None,
        asked=context.asked,
        histogram=Histogram(totals.bins) if binning else None,
        histogram_by_hour={utc_of(h * HOUR_MS): Histogram(b) for h, b in totals.bins_by_hour.items()} if binning else None,
        quantiles=context.quantiles,
        sketch=totals.sketch,
        sketch_by_hour=_by_hour(totals.sketch_by_hour),
        unresolved=tuple(
            f"{sk}: {mark}" for (pk, sk), marks in sorted(fetched.unresolved.items()) if pk == counter for mark in sorted(marks)
        ),
    )


def _series(
    context: _Context,
    totals: PlanTotals,
    counts: dict[str, int],
    units: dict[str, int],
    bins: dict[str, dict[str, int]],
    sketches: dict[str, Sketch],
    summing: bool,
    binning: bool,
) -> tuple[SeriesPoint, ...] | None:
    if context.series is None:
        return None
    sketched = sketches if totals.sketch is not None else None
    points: list[Point] = series_of(context.plan, context.series, totals, counts, units, bins, sketched)
    return tuple(
        SeriesPoint(
            utc_of(point.start_ms),
            point.count,
            decimal_of(point.units) if summing else None,
            Histogram(point.bins) if binning else None,
            point.sketch,
        )
        for point in points
    )


def _by_hour(sketches: dict[int, Sketch] | None) -> dict[datetime, Sketch] | None:
    return None if sketches is None else {utc_of(hour * HOUR_MS): sketch for hour, sketch in sketches.items()}


def _iso(moment: datetime) -> str:
    return iso_minute(_ms(moment))


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


@dataclass(frozen=True)
class CalendarPoint(_Aggregates):
    """One period of a calendar series: what its counter counted from ``start`` to ``end`` (excluded), local
    instants of the series' zone."""

    start: datetime
    end: datetime
    count: int
    sum: Decimal | None = None
    histogram: Histogram | None = None
    sketch: Sketch | None = None

    def as_json(self, quantiles: Sequence[str] = ()) -> dict[str, object]:
        return self._with_aggregates({"start": self.start.isoformat(), "end": self.end.isoformat()}, quantiles)


@dataclass(frozen=True)
class CalendarSeries:
    """One counter's calendar series: every period of ``period`` over the days asked, in ``zone``, zero where
    nothing was counted (a period still to come, too). Read from the closed months and days a counter of the
    calendar prefixes keeps in a kept zone, and from hour buckets for the rest (``core/calendar_sources.py``);
    ``requests`` and ``items_read`` are this counter's, and the first such counter's requests count the zone's
    progress GetItem when it was read."""

    counter: str
    period: Period
    zone: str
    points: tuple[CalendarPoint, ...]
    plan: PlanKind
    requests: int
    items_read: int
    quantiles: tuple[str, ...] = ()
    unresolved: tuple[str, ...] = ()
    retired: int | None = None

    @property
    def total(self) -> int:
        return sum(point.count for point in self.points)

    @property
    def exact(self) -> bool:
        return not self.unresolved

    def as_json(self) -> dict[str, object]:
        """The series on one line: each point's start, end (local, with their offsets) and count, and the sums,
        averages, distinct counts and quantiles of the counters that keep them."""
        result: dict[str, object] = {
            "counter": self.counter,
            "period": self.period.value,
            "tz": self.zone,
            "start": self.points[0].start.isoformat(),
            "end": self.points[-1].end.isoformat(),
            "total": self.total,
            "points": [point.as_json(self.quantiles) for point in self.points],
            "plan": self.plan.value,
            "requests": self.requests,
            "items_read": self.items_read,
        }
        if self.unresolved:
            result["unresolved"] = list(self.unresolved)
        result["retired"] = None if self.retired is None else iso_second(self.retired)
        return result


def calendar_series(
    table: CountsTable,
    counters: Sequence[str],
    spans: Sequence[Span],
    *,
    period: Period,
    zone: str,
    consistent: bool = False,
    now: int | None = None,
    quantiles: Sequence[str] = (),
) -> list[CalendarSeries]:
    """Each counter's series over ``spans`` (``calendar.spans``: periods whose edges are whole UTC hours).

    A counter of the calendar prefixes in a kept zone takes its closed months and days from their items (a
    Query of each run of them) and the rest from hours (``core/calendar_sources.py``), after the zone's
    progress (one GetItem, held a minute by the table); any other counter takes the whole range from hours.
    Hours are read as windows by the range plan with an hour series, each hour added to the period holding
    it. CalendarError when hours the read needs are past the hour retention, saying what is kept."""
    for counter in counters:
        validate_query_counter(counter)
    now = now_ms() if now is None else now
    settings = table.settings
    reasons = {counter: hours_only_reason(counter, zone, settings) for counter in counters}
    progress, progress_requests = (None, 0)
    if any(reason is None for reason in reasons.values()):
        progress, progress_requests = table.calendar_progress(zone)
    groups: dict[Sources, list[str]] = {}
    for counter in dict.fromkeys(counters):
        sources = calendar_sources(
            period, spans, zone, progress.of_counter(counter) if progress is not None and reasons[counter] is None else None,
            now, settings, reasons[counter],
        )
        groups.setdefault(sources, []).append(counter)
    found: dict[str, CalendarSeries] = {}
    for sources, names in groups.items():
        found.update(_calendar_group(table, names, sources, spans, period, zone, consistent, now, quantiles))
    first_kept = next((counter for counter in counters if reasons[counter] is None), None)
    return [
        replace(found[counter], requests=found[counter].requests + progress_requests) if counter == first_kept
        else found[counter]
        for counter in counters
    ]


def _calendar_group(
    table: CountsTable,
    counters: list[str],
    sources: Sources,
    spans: Sequence[Span],
    period: Period,
    zone: str,
    consistent: bool,
    now: int,
    quantiles: Sequence[str],
) -> dict[str, CalendarSeries]:
    """The series of counters read from the same sources: each window of hours for all of them at once, then
    each counter's runs of months and days."""
    rules = table.settings.counter_rules
    hours: dict[str, list[WindowCount]] = {counter: [] for counter in counters}
    for start, end in sources.hours:
        length_ms = -(-(end - start) // MINUTE_MS) * MINUTE_MS
        for result in count_windows(
            table, counters, length_ms=length_ms, at_ms=end, plan=PlanKind.RANGE, consistent=consistent, now=now,
            series=Series.HOUR, align=True, quantiles=quantiles,
        ):
            hours[result.counter].append(result)
    found = {}
    for counter in counters:
        long = Fetched()
        distinct = rules.counts_distinct(counter)
        for first, last in (*sources.months, *sources.days):
            long.update(table.query(counter, first.sort_key, last.sort_key, consistent, distinct))
        windows = hours[counter]
        parts = [_part_of_hour(point) for result in windows for point in result.series or ()]
        parts += _parts_of_items(counter, long)
        series = _calendar_of(counter, period, zone, spans, parts, rules, quantiles)
        unresolved = [mark for result in windows for mark in result.unresolved]
        unresolved += [
            f"{sk}: {mark}" for (pk, sk), marks in sorted(long.unresolved.items()) if pk == counter for mark in sorted(marks)
        ]
        found[counter] = replace(
            series,
            requests=sum(result.requests for result in windows) + long.requests,
            items_read=sum(result.items_read for result in windows) + len(long.counts),
            unresolved=tuple(unresolved),
            retired=retired_at(rules, counter, now),
        )
    return found


@dataclass(frozen=True)
class _Part:
    """What one hour, day or month item adds to the period holding its first instant."""

    start_ms: int
    count: int
    sum: Decimal | None
    bins: Mapping[str, int] | None
    sketch: Sketch | None


def _part_of_hour(point: SeriesPoint) -> _Part:
    return _Part(_ms(point.start), point.count, point.sum, None if point.histogram is None else point.histogram.bins,
                 point.sketch)


def _parts_of_items(counter: str, fetched: Fetched) -> list[_Part]:
    """The day and month items read, each by its bucket's first instant (a sketch may come alone: it counts 0)."""
    keys = [key for key in {**fetched.counts, **fetched.sketches} if key[0] == counter]
    return [
        _Part(
            Bucket.from_sort_key(key[1]).start_ms,
            fetched.counts.get(key, 0),
            decimal_of(fetched.sums[key]) if key in fetched.sums else None,
            fetched.bins.get(key),
            fetched.sketches.get(key),
        )
        for key in keys
    ]


def _calendar_of(
    counter: str,
    period: Period,
    zone: str,
    spans: Sequence[Span],
    parts: Sequence[_Part],
    rules: Rules,
    quantiles: Sequence[str],
) -> CalendarSeries:
    """Hours, days and months summed into the periods that hold them (what the read cost, and whether the
    counter is retired, are the caller's to say)."""
    starts = [span.start_ms for span in spans]
    counts = [0] * len(spans)
    sums: list[Decimal] | None = [Decimal(0)] * len(spans) if rules.sums(counter) else None
    bins: list[dict[str, int]] | None = [{} for _ in spans] if rules.keeps_histogram(counter) else None
    sketches: list[Sketch] | None = [Sketch() for _ in spans] if rules.counts_distinct(counter) else None
    for part in parts:
        index = bisect_right(starts, part.start_ms) - 1
        if index < 0 or part.start_ms >= spans[index].end_ms:
            continue
        counts[index] += part.count
        if sums is not None and part.sum is not None:
            sums[index] += part.sum
        if bins is not None and part.bins is not None:
            for name, count in part.bins.items():
                bins[index][name] = bins[index].get(name, 0) + count
        if sketches is not None and part.sketch is not None:
            sketches[index].merge(part.sketch)
    local = zone_of(zone)
    points = tuple(
        CalendarPoint(
            datetime.fromtimestamp(span.start_ms / 1000, local),
            datetime.fromtimestamp(span.end_ms / 1000, local),
            counts[index],
            None if sums is None else sums[index],
            None if bins is None else Histogram(bins[index]),
            None if sketches is None else sketches[index],
        )
        for index, span in enumerate(spans)
    )
    return CalendarSeries(counter, period, zone, points, PlanKind.RANGE, 0, 0, tuple(quantiles) if bins is not None else ())
