"""Count counters over a rolling window from the counts table.

    .venv/bin/python scripts/query_window.py page-views sign-ups                 # last 24 h, batch plan
    .venv/bin/python scripts/query_window.py page-views --window 90m --at 2026-11-22T10:30Z --plan range --json
    .venv/bin/python scripts/query_window.py page-views --series minute          # every minute of the last 24 h
    .venv/bin/python scripts/query_window.py --prefix jobs/ --window 7d          # counters that counted in a week
    .venv/bin/python scripts/query_window.py load/home --quantiles 0.5,0.9,0.99  # a histogram rule's counter
    .venv/bin/python scripts/query_window.py --top 10 --prefix views/ --json     # the 10 largest totals of a prefix
    .venv/bin/python scripts/query_window.py --top 10 --prefix views/ --rising   # the 10 largest increases
    .venv/bin/python scripts/query_window.py --alerts --state ALARM             # counters in alarm (rules' alerts)
    .venv/bin/python scripts/query_window.py sign-ups --series day --tz America/New_York --from 2026-11-01 --to 2026-12-01
    .venv/bin/python scripts/query_window.py orders/acme --series month --from 2025-01-01 --to 2027-01-01  # closed months
    .venv/bin/python scripts/query_window.py api-calls/acme --month-to-date --tz Europe/Paris   # this month so far

A window of length L ending at --at (default now) covers whole minutes: its
last minute is the one containing at - 1 ms. An end exactly on a minute
boundary is exclusive (--at 10:00Z --window 1h is [09:00, 10:00)); an end
inside a minute includes that minute, so a window ending now includes the
current minute. Minutes are kept 48 h (TALLY_MINUTE_RETENTION_HOURS): a longer
window ending now is answered over whole hours at its start, with a note on
stderr; one with an explicit --at must end on a whole hour, or take --align.

Counters that a summing counter rule writes (TALLY_RULES) also show their sum
and average; --json carries them as decimal strings. Counters a histogram rule
writes answer --quantiles: the value of rank ceil(q*n) among the window's n
values, within 1 %, in total, per hour and per series point, with the bounds
every value lies within. Counters a distinct rule writes show their distinct
values (exact up to 100 in the window, else estimated, marked ≈, standard
error 1.6 %); --json carries distinct, distinct_exact and distinct_by_hour (and each
series point's distinct). The table is --table,
else COUNTS_TABLE, else a stack's outputs (--stack), else tally-counts. Bad
input exits with status 2 and one line on stderr. A count of 0 says why on
stderr when it can: a window that has not begun, or a counter without a
single bucket. A counter whose rules are all retired (retiredAt) says when,
in a retired column and a note (--json: "retired", null while a rule counts
it): its counts stay readable until they expire, and no more events will come.

--series day, week or month lists every day, week or month of the local days
--from to --to (excluded) in --tz (an IANA zone, DST included; default UTC),
zero where nothing was counted, the first and last period cut to the range
(--week-start names the day weeks begin on, default monday); --json carries
each period's start and end, with their offsets, and its count. --month-to-date
counts this month so far in --tz, exact up to now. Both answer zones whose
offsets are whole hours. A counter of the calendar prefixes (calendarPrefixes)
in UTC or a kept zone (calendarZones) reads its closed days and months from
their own items, kept far longer than hours (dayRetentionDays,
monthRetentionMonths), and only the days since the last close from hours; any
other series, and month to date, is read from hour buckets, within the hour
retention. A range reaching before what is kept exits 2, saying what is.

--top N --prefix P lists the N counters of P with the largest totals over the
window, ties by name, each total exact; --rising ranks by the increase over
the previous window of the same length. The answer says whether it is the
certified top N ("exact"), or else the bound no counter left out exceeds.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from datetime import datetime, timedelta

from botocore.exceptions import ClientError
from rich.markup import escape
from rich.table import Table

from tally.core.amounts import text_of
from tally.core.calendar import Period
from tally.core.buckets import iso_minute, iso_second
from tally.core.histograms import Histogram, percentile_label
from tally.core.sketches import Sketch
from tally.core.plans import PlanKind, Series
from tally.core.settings import Settings
from tally.core.units import HOUR_MS
from tally.core.windows import utc_of
from tally.local.aws import ArgumentParser, client, resolve_tables
from tally.local.cli import console, entry_point, is_missing_table, missing_table
from tally.query import CalendarSeries, WindowCount
from tally.reader import Reader, ReadOptions, read_options

BAR_WIDTH = 40
SPARKS = "▁▂▃▄▅▆▇█"
MAX_HOUR_ROWS = 48  # longer windows show a line a day


def parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("counters", nargs="*", metavar="COUNTER", help="counter names (or --prefix)")
    parser.add_argument(
        "--prefix",
        metavar="PREFIX",
        help="instead of names: every counter starting with PREFIX ('' for all) that counted anything in the window",
    )
    parser.add_argument(
        "--at", help="end of the window, ISO-8601 with an offset; on a minute boundary it is exclusive (default now)"
    )
    parser.add_argument("--window", default="24h", help="window length: 90m, 24h, 7d, 1d12h (default 24h)")
    parser.add_argument(
        "--series",
        choices=[unit.value for unit in Series] + [period.value for period in Period],
        help="also list every minute or hour of the window; or, with --from and --to, every day, week or month",
    )
    parser.add_argument("--tz", metavar="ZONE", help="with --series day|week|month or --month-to-date: an IANA time zone (default UTC)")
    parser.add_argument("--from", dest="start", metavar="DATE", help="with --series day|week|month: the first day, YYYY-MM-DD")
    parser.add_argument("--to", dest="end", metavar="DATE", help="with --series day|week|month: the day after the last, YYYY-MM-DD")
    parser.add_argument("--week-start", metavar="DAY", help="with --series week: the day weeks begin on (default monday)")
    parser.add_argument("--month-to-date", action="store_true", help="count this month so far, in --tz")
    parser.add_argument(
        "--plan", choices=[kind.value for kind in PlanKind],
        help="batch (default) or range; --month-to-date reads by range unless told (fewer requests over a month)",
    )
    parser.add_argument(
        "--align",
        action="store_const",
        const="true",
        default="auto",
        help="answer a window with an explicit --at over whole hours where its minutes have expired",
    )
    parser.add_argument("--consistent", action="store_true", help="strongly consistent reads")
    parser.add_argument(
        "--allow-transient",
        action="store_true",
        help="fast path: read a partly covered hour as the hour minus its other minutes when that is fewer keys; "
        "a read while a commit is being applied may then answer a count the table never held",
    )
    parser.add_argument(
        "--quantiles", metavar="Q,Q,...", help="quantiles of histogram counters, e.g. 0.5,0.9,0.99 (each from 0 to 1)"
    )
    parser.add_argument(
        "--top", metavar="N", help="with --prefix: the N counters (1 to 1000) with the largest totals in the window"
    )
    parser.add_argument(
        "--rising", action="store_true", help="with --top: rank by the increase over the previous window"
    )
    parser.add_argument(
        "--alerts",
        action="store_true",
        help="instead of counts: the state of every counter that crossed an alert of the rules (--prefix narrows it)",
    )
    parser.add_argument("--alert", metavar="NAME", help="with --alerts: this alert only")
    parser.add_argument("--state", choices=["ALARM", "OK"], help="with --alerts: counters in this state only")
    parser.add_argument("--json", action="store_true", help="one JSON object per counter and line")
    parser.add_argument("--table", dest="counts_table", help="counts table name")
    parser.add_argument("--stack", help="read the counts table's name from this deployed tally stack")
    return parser


@entry_point
def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.alerts:
        if args.top is not None or args.rising:
            parser().error("--alerts lists alert states: it takes no --top or --rising")
        return show_alerts(args)
    if args.alert or args.state:
        parser().error("--alert and --state go with --alerts")
    if bool(args.counters) == (args.prefix is not None):
        parser().error("name the counters, or list them with --prefix, not both")
    if args.top is None and args.rising:
        parser().error("--rising ranks a top list: give --top N too")
    calendar_read = args.series in {period.value for period in Period}
    if not calendar_read and (args.start or args.end or args.week_start):
        parser().error("--from, --to and --week-start go with --series day, week or month")
    if args.tz and not (calendar_read or args.month_to_date):
        parser().error("--tz goes with --series day, week or month, or with --month-to-date")
    if args.top is not None:
        if calendar_read or args.month_to_date:
            parser().error("--top ranks totals over a window: it takes no calendar series and no --month-to-date")
        return top(args)
    if calendar_read:
        return calendar(args)
    if args.month_to_date and (args.window != "24h" or args.at or args.series):
        parser().error("--month-to-date sets its own window: it takes no --window, --at or --series")
    options = read_options(
        window=args.window,
        at=args.at,
        series=args.series,
        plan=args.plan,
        align=args.align,
        consistent=args.consistent,
        quantiles=args.quantiles,
        allow_transient=args.allow_transient,
    )
    reader, results = query(args, options)
    notes = reader.notes(results) if results else [f"no counter starting with {args.prefix!r} counted anything"]
    notes += [
        f"{result.counter!r} keeps no histogram (no rule with 'histogram' writes it, and no bucket read holds bins): "
        "no quantiles"
        for result in results
        if options.quantiles and result.histogram is None
    ]
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if args.json:
        for result in results:
            print(json.dumps(result.as_json()))
    elif results:
        show(results, charts=args.prefix is None or args.series is not None, quantiles=options.quantiles)
    return 0


def top(args: argparse.Namespace) -> int:
    """The top N of a prefix: one JSON object on one line with --json, else a table."""
    if args.series is not None or args.quantiles is not None:
        parser().error("--top ranks totals: it takes no --series and no --quantiles")
    tables = resolve_tables(args)
    reader = Reader(tables.counts, client=client("dynamodb"), settings=Settings.from_env())
    options = {"window": args.window, "at": args.at, "plan": args.plan, "align": args.align}
    options |= {"consistent": args.consistent, "allow_transient": args.allow_transient}
    try:
        answer = reader.top(args.prefix, args.top, rising=args.rising, **options)
    except ClientError as error:
        if is_missing_table(error):
            raise missing_table(tables.counts, "--table or COUNTS_TABLE") from None
        raise
    if args.json:
        print(json.dumps(answer.as_json()))
        return 0
    span = f"{iso_minute(answer.window.start_ms)} to {iso_minute(answer.window.end_ms)}"
    table = Table(title=escape(f"top {answer.n} of {args.prefix!r}{' rising' if answer.rising else ''}, {span}"))
    retired = ["retired"] if answer.retired else []
    for column in ["rank", "counter", "total", *(["previous", "increase"] if answer.rising else []), *retired]:
        table.add_column(column, justify="left" if column in ("counter", "retired") else "right")
    for rank, entry in enumerate(answer.entries, start=1):
        increase = [f"{entry.previous:,}", f"{entry.value:,}"] if answer.rising else []
        when = [retired_text(answer.retired.get(entry.counter))] if retired else []
        table.add_row(str(rank), escape(entry.counter), f"{entry.total:,}", *increase, *when)
    out = console()
    out.print(table)
    if answer.exact:
        out.print(f"exact: the certified top {answer.n}")
    else:
        out.print(f"not certified: no counter left out has more than {answer.bound:,}")
    return 0


def query(args: argparse.Namespace, options: ReadOptions) -> tuple[Reader, list[WindowCount]]:
    settings = Settings.from_env()
    tables = resolve_tables(args)
    reader = Reader(tables.counts, client=client("dynamodb"), settings=settings)
    try:
        if args.month_to_date:
            if args.prefix is not None:
                parser().error("--month-to-date counts the counters named: it takes no --prefix")
            month = {"plan": args.plan, "consistent": options.consistent, "quantiles": options.quantiles}
            return reader, reader.month_to_date(args.counters, tz=args.tz, **month)
        if args.prefix is not None:
            return reader, reader.list_counters(args.prefix, **options.as_kwargs())
        return reader, reader.count_many(args.counters, **options.as_kwargs())
    except ClientError as error:
        if is_missing_table(error):
            raise missing_table(tables.counts, "--table or COUNTS_TABLE") from None
        raise


def calendar(args: argparse.Namespace) -> int:
    """A calendar series of each counter named: one JSON object per counter and line, or a table each."""
    if args.prefix is not None or args.month_to_date or args.at or args.window != "24h":
        parser().error("--series day, week or month reads the days --from to --to: it takes no --prefix, "
                       "--month-to-date, --at or --window")
    tables = resolve_tables(args)
    reader = Reader(tables.counts, client=client("dynamodb"), settings=Settings.from_env())
    try:
        found = reader.calendar(
            args.counters, args.series, tz=args.tz, start=args.start, end=args.end, week_start=args.week_start,
            quantiles=args.quantiles, consistent=args.consistent,
        )
    except ClientError as error:
        if is_missing_table(error):
            raise missing_table(tables.counts, "--table or COUNTS_TABLE") from None
        raise
    for note in reader.calendar_notes(found):
        print(f"note: {note}", file=sys.stderr)
    if args.json:
        for series in found:
            print(json.dumps(series.as_json()))
        return 0
    out = console()
    for series in found:
        out.print(calendar_table(series))
    return 0


def calendar_table(series: CalendarSeries) -> Table:
    """One line per period: its first day (and its last, for weeks and months), the count, and the aggregates."""
    first = series.points[0]
    table = Table(title=escape(f"{series.counter}: {series.period.value}s in {series.zone}, total {series.total:,}"))
    columns = ["period", "count"]
    sums = first.sum is not None
    columns += ["sum", "average"] if sums else []
    columns += ["distinct"] if first.sketch is not None else []
    columns += [percentile_label(q) for q in series.quantiles]
    for column in columns:
        table.add_column(column, justify="left" if column == "period" else "right")
    peak = max((point.count for point in series.points), default=0)
    for point in series.points:
        last = (point.end - timedelta(days=1)).date()
        label = point.start.date().isoformat() + ("" if last <= point.start.date() else f" to {last.isoformat()}")
        cells = [label, f"{point.count:,} {sparkline(point.count, peak)}"]
        if sums:
            cells += [text_of(point.sum), text_of(point.average)]
        if point.sketch is not None:
            cells.append(distinct_text(point.sketch))
        cells += quantile_cells(point.histogram, series.quantiles)
        table.add_row(*cells)
    return table


def show_alerts(args: argparse.Namespace) -> int:
    """Alert states (``Reader.alerts``): a table, or one JSON object per line as GET /alerts lists them."""
    if args.counters:
        parser().error("--alerts lists alert states: name no counters (narrow with --prefix, --alert, --state)")
    tables = resolve_tables(args)
    reader = Reader(tables.counts, client=client("dynamodb"), settings=Settings.from_env())
    try:
        found = reader.alerts(args.alert, state=args.state, prefix=args.prefix or "")
    except ClientError as error:
        if is_missing_table(error):
            raise missing_table(tables.counts, "--table or COUNTS_TABLE") from None
        raise
    if args.json:
        for status in found:
            print(json.dumps(status.as_json()))
        return 0
    if not found:
        print("note: no counter has crossed an alert" + (f" into {args.state}" if args.state else ""), file=sys.stderr)
        return 0
    states = Table(title="alerts")
    for column in ("alert", "counter", "state", "since", "window", "total", "threshold"):
        states.add_column(column, justify="right" if column in ("total", "threshold") else "left")
    for status in found:
        shown = status.as_json()
        states.add_row(
            escape(status.alert.name),
            escape(status.counter),
            f"[bold red]{status.state}[/]" if status.state == "ALARM" else status.state,
            str(shown["since"]),
            f"{status.alert.window} [{shown['start']}, {shown['end']})",
            f"{status.total:,}",
            f"{status.alert.direction} {shown['threshold']:,}",
        )
    console().print(states)
    return 0


def show(results: list[WindowCount], charts: bool = True, quantiles: Sequence[str] = ()) -> None:
    out = console()
    summary = Table(title=escape(f"window {results[0].window}"))
    summing = any(result.sum is not None for result in results)
    distinct = any(result.sketch is not None for result in results)
    binning = list(quantiles) if any(result.histogram is not None for result in results) else []
    retired = any(result.retired is not None for result in results)
    columns = (
        "counter",
        "total",
        *(("distinct",) if distinct else ()),
        *(("sum", "average") if summing else ()),
        *map(percentile_label, binning),
        *(("low", "high") if binning else ()),
        *(("retired",) if retired else ()),
        "plan",
        "keys",
        "requests",
        "items read",
    )
    for column in columns:
        summary.add_column(column, justify="left" if column in ("counter", "plan", "retired") else "right")
    for result in results:
        sums = (text_of(result.sum) or "", text_of(result.average) or "") if summing else ()
        histogram = result.histogram
        bounds = ()
        if binning:
            bounds = (text_of(histogram.low) or "", text_of(histogram.high) or "") if histogram else ("", "")
        summary.add_row(
            escape(result.counter),
            f"{result.total:,}",
            *((distinct_text(result.sketch),) if distinct else ()),
            *sums,
            *quantile_cells(histogram, binning),
            *bounds,
            *((retired_text(result.retired),) if retired else ()),
            result.plan.value,
            str(result.keys),
            str(result.requests),
            str(result.items_read),
        )
    out.print(summary)
    for result in results if charts else ():
        if result.series_unit is Series.MINUTE:
            out.print(minute_chart(result))
        elif len(_hours(result)) > MAX_HOUR_ROWS:
            out.print(day_chart(result))
        else:
            out.print(hour_chart(result, binning))


def retired_text(retired: int | None) -> str:
    """When a counter's rules were all retired (no more events will come), or nothing while one counts it."""
    return "" if retired is None else iso_second(retired)


def distinct_text(sketch: Sketch | None) -> str:
    """Exact counts as they are, estimates marked with ≈."""
    if sketch is None:
        return ""
    return f"{sketch.count():,}" if sketch.exact else f"≈{sketch.count():,}"


def quantile_cells(histogram: Histogram | None, quantiles: Sequence[str]) -> list[str]:
    if histogram is None:
        return [""] * len(quantiles)
    return [text_of(histogram.quantile(q)) or "" for q in quantiles]


def hour_chart(result: WindowCount, quantiles: Sequence[str] = ()) -> Table:
    """The window's count per hour as bars (first and last hour may be partial); sums and quantiles beside them,
    under a header that names them."""
    by_hour = result.histogram_by_hour if quantiles else None
    header = result.sum_by_hour is not None or by_hour is not None or result.sketch_by_hour is not None
    chart = Table(title=escape(f"{result.counter} per hour"), show_header=header, box=None, pad_edge=False)
    chart.add_column("hour", style="dim")
    chart.add_column("")
    chart.add_column("count", justify="right")
    if result.sketch_by_hour is not None:
        chart.add_column("distinct", justify="right")
    if result.sum_by_hour is not None:
        chart.add_column("sum", justify="right")
        chart.add_column("average", justify="right")
    for q in quantiles if by_hour is not None else ():
        chart.add_column(percentile_label(q), justify="right")
    peak = max(result.by_hour.values(), default=0) or 1
    for hour in _hours(result):
        count = result.by_hour.get(hour, 0)
        sums = ()
        if result.sum_by_hour is not None:
            sums = (text_of(result.sum_by_hour.get(hour)) or "0", text_of(result.average_in_hour(hour)) or "")
        cells = quantile_cells(by_hour.get(hour, Histogram({})), quantiles) if by_hour is not None else ()
        distinct = () if result.sketch_by_hour is None else (distinct_text(result.sketch_by_hour.get(hour, Sketch())),)
        chart.add_row(
            _label(hour), "█" * round(BAR_WIDTH * count / peak), f"{count:,}", *distinct, *sums, *cells
        )
    return chart


def minute_chart(result: WindowCount) -> Table:
    """A minute series, one line per hour: a sparkline of its minutes (scaled to the busiest minute) and the hour's count."""
    chart = spark_table(f"{result.counter} per minute", "hour", "minutes")
    points = result.series or ()
    peak = max((point.count for point in points), default=0) or 1
    rows: dict[datetime, list[str]] = {}
    for point in points:
        hour = point.start.replace(minute=0)
        rows.setdefault(hour, []).append(sparkline(point.count, peak))
    for hour, sparks in rows.items():
        pad = " " * (points[0].start.minute if hour == points[0].start.replace(minute=0) else 0)
        chart.add_row(_label(hour), pad + "".join(sparks), f"{result.by_hour.get(hour, 0):,}")
    return chart


def day_chart(result: WindowCount) -> Table:
    """A long window, one line per UTC day: a sparkline of its hours (scaled to the busiest hour) and the day's count."""
    chart = spark_table(f"{result.counter} per hour, a line a day", "day", "hours")
    peak = max(result.by_hour.values(), default=0) or 1
    rows: dict[str, tuple[list[str], int]] = {}
    for hour in _hours(result):
        count = result.by_hour.get(hour, 0)
        sparks, total = rows.setdefault(hour.strftime("%Y-%m-%d"), ([" "] * 24, 0))
        sparks[hour.hour] = sparkline(count, peak)
        rows[hour.strftime("%Y-%m-%d")] = (sparks, total + count)
    for day, (sparks, total) in rows.items():
        chart.add_row(day, "".join(sparks), f"{total:,}")
    return chart


def spark_table(title: str, period: str, parts: str) -> Table:
    """A chart of one line per period: its label, a sparkline of its parts, its count."""
    chart = Table(title=escape(title), show_header=False, box=None, pad_edge=False)
    chart.add_column(period, style="dim")
    chart.add_column(parts)
    chart.add_column("count", justify="right")
    return chart


def sparkline(count: int, peak: int) -> str:
    """One character for a count: blank for none, then eight heights up to ``peak``."""
    return SPARKS[(count * len(SPARKS) - 1) // peak] if count else " "


def _hours(result: WindowCount) -> list[datetime]:
    """Every hour of the window that can hold data (the hours after now have nothing to show)."""
    first = result.window.start_ms // HOUR_MS
    last = min((result.window.end_ms - 1) // HOUR_MS, int(max(result.by_hour, default=utc_of(0)).timestamp()) // 3600)
    return [utc_of(hour * HOUR_MS) for hour in range(first, last + 1)]


def _label(hour: datetime) -> str:
    return iso_minute(int(hour.timestamp() * 1000))


if __name__ == "__main__":
    sys.exit(main())
