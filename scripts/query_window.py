"""Count counters over a rolling window from the counts table.

    .venv/bin/python scripts/query_window.py page-views sign-ups                 # last 24 h, batch plan
    .venv/bin/python scripts/query_window.py page-views --window 90m --at 2026-11-22T10:30Z --plan range --json
    .venv/bin/python scripts/query_window.py load/home --quantiles 0.5,0.9,0.99  # a histogram rule's counter

A window of length L ending at --at (default now) covers the minutes
(at - L, at]. Counters that a summing counter rule writes (TALLY_RULES) also
show their sum and average; --json carries them as decimal strings. Counters a
histogram rule writes answer --quantiles: the value of rank ceil(q*n) among the
window's n values, within 1 %, in total and per hour, with the bounds every
value lies within. Counters a distinct rule writes show their distinct values
(exact up to 100 a bucket, else estimated, marked ≈, standard error 1.6 %).
The table is --table, else COUNTS_TABLE, else a stack's outputs (--stack),
else tally-counts. Bad input exits with status 2 and one line on stderr.
A count of 0 says why on stderr when it can: a window that has not begun, or a
counter without a single bucket.
"""

from __future__ import annotations

import argparse
import json
import sys

from botocore.exceptions import ClientError
from rich.markup import escape
from rich.table import Table

from tally.core.amounts import text_of
from tally.core.buckets import iso_minute
from tally.core.histograms import Histogram, InvalidQuantile, parse_quantile, percentile_label
from tally.core.sketches import Sketch
from tally.dynamo import CountsTable
from tally.local.aws import ArgumentParser, client, resolve_tables
from tally.local.cli import ScriptError, console, entry_point, is_missing_table, missing_table
from tally.core.plans import PlanKind, WindowUnavailable
from tally.query import WindowCount, count_windows, validate_query_counter
from tally.core.records import InvalidCounter
from tally.core.settings import HOUR_MS, Settings, SettingsError
from tally.local.stack_outputs import StackOutputsError
from tally.core.windows import InvalidWindow, now_ms, parse_instant, parse_length

BAR_WIDTH = 40


def parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("counters", nargs="+", metavar="COUNTER", help="counter names")
    parser.add_argument("--at", help="ISO-8601 end of the window, with an offset (default now)")
    parser.add_argument("--window", default="24h", help="window length: 90m, 24h, 7d (default 24h)")
    parser.add_argument("--plan", choices=[kind.value for kind in PlanKind], default=PlanKind.BATCH.value)
    parser.add_argument("--consistent", action="store_true", help="strongly consistent reads")
    parser.add_argument(
        "--quantiles", type=quantile_list, default=[], metavar="Q,Q,...", help="e.g. 0.5,0.9,0.99 (each from 0 to 1)"
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per counter and line")
    parser.add_argument("--table", dest="counts_table", help="counts table name")
    parser.add_argument("--stack", help="read the counts table's name from this deployed tally stack")
    return parser


def quantile_list(text: str) -> list[str]:
    """Quantiles as written (``0.5,0.99``): they key the JSON answer as the user wrote them."""
    quantiles = [part.strip() for part in text.split(",")]
    try:
        for q in quantiles:
            parse_quantile(q)
    except InvalidQuantile as error:
        raise argparse.ArgumentTypeError(f"{error}; write them like 0.5,0.9,0.99") from None
    return list(dict.fromkeys(quantiles))


@entry_point
def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    table, results = query(args)
    for note in notes(table, results, args.quantiles):
        print(f"note: {note}", file=sys.stderr)
    if args.json:
        for result in results:
            print(json.dumps(result.as_json(args.quantiles)))
    else:
        show(results, args.quantiles)
    return 0


def query(args: argparse.Namespace) -> tuple[CountsTable, list[WindowCount]]:
    try:
        counters = [validate_query_counter(name) for name in args.counters]
        length_ms = parse_length(args.window)
        at_ms = parse_instant(args.at) if args.at else None
        settings = Settings.from_env()
        tables = resolve_tables(args)
        table = CountsTable(client("dynamodb"), tables.counts, settings)
        return table, count_windows(
            table, counters, length_ms=length_ms, at_ms=at_ms, plan=PlanKind(args.plan), consistent=args.consistent
        )
    except (InvalidCounter, InvalidWindow, WindowUnavailable, SettingsError, StackOutputsError) as error:
        raise ScriptError(str(error)) from None
    except ClientError as error:
        if is_missing_table(error):
            raise missing_table(tables.counts, "--table or COUNTS_TABLE") from None
        raise


def notes(table: CountsTable, results: list[WindowCount], quantiles: list[str] = ()) -> list[str]:
    """Why a count is 0, where that is knowable: a 0 that is an answer and a 0 that is a mistake look alike.
    And why a counter answers no quantiles."""
    if not results:
        return []
    window = results[0].window
    if window.start_ms > now_ms():
        return [f"the window {window} lies entirely in the future: nothing can be counted in it yet"]
    missing = [
        f"no bucket of {result.counter!r} exists at all: no event has been counted under that name "
        "(names are case-sensitive)"
        for result in results
        if result.items_read == 0 and not table.has_counter(result.counter)
    ]
    unbinned = [
        f"{result.counter!r} keeps no histogram (no rule with 'histogram' writes it, and no bucket read holds bins): "
        "no quantiles"
        for result in results
        if quantiles and result.histogram is None
    ]
    return missing + unbinned


def show(results: list[WindowCount], quantiles: list[str] = ()) -> None:
    out = console()
    summary = Table(title=escape(f"window {results[0].window}"))
    summing = any(result.sum is not None for result in results)
    distinct = any(result.sketch is not None for result in results)
    binning = [q for q in quantiles if any(result.histogram is not None for result in results)]
    columns = (
        "counter",
        "total",
        *(("distinct",) if distinct else ()),
        *(("sum", "average") if summing else ()),
        *map(percentile_label, binning),
        *(("low", "high") if binning else ()),
        "plan",
        "keys",
        "requests",
        "items read",
    )
    for column in columns:
        summary.add_column(column, justify="left" if column in ("counter", "plan") else "right")
    for result in results:
        sums = (text_of(result.sum) or "", text_of(result.average) or "") if summing else ()
        bounds = ()
        if binning:
            histogram = result.histogram
            bounds = (text_of(histogram.low) or "", text_of(histogram.high) or "") if histogram else ("", "")
        summary.add_row(
            escape(result.counter),
            f"{result.total:,}",
            *((distinct_text(result.sketch),) if distinct else ()),
            *sums,
            *quantile_cells(result.histogram, binning),
            *bounds,
            result.plan.value,
            str(result.keys),
            str(result.requests),
            str(result.items_read),
        )
    out.print(summary)
    for result in results:
        out.print(hour_chart(result, binning))


def distinct_text(sketch: Sketch | None) -> str:
    """Exact counts as they are, estimates marked with ≈."""
    if sketch is None:
        return ""
    return f"{sketch.count():,}" if sketch.exact else f"≈{sketch.count():,}"


def quantile_cells(histogram: Histogram | None, quantiles: list[str]) -> list[str]:
    if histogram is None:
        return [""] * len(quantiles)
    return [text_of(histogram.quantile(q)) or "" for q in quantiles]


def hour_chart(result: WindowCount, quantiles: list[str] = ()) -> Table:
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
    first_hour, last_hour = result.window.start_ms // HOUR_MS, (result.window.end_ms - 1) // HOUR_MS
    peak = max(result.by_hour.values(), default=0) or 1
    for hour in range(first_hour, last_hour + 1):
        count = result.by_hour.get(hour, 0)
        sums = ()
        if result.sum_by_hour is not None:
            sums = (text_of(result.sum_by_hour.get(hour)) or "0", text_of(result.average_in_hour(hour)) or "")
        cells = quantile_cells(by_hour.get(hour, Histogram({})), quantiles) if by_hour is not None else ()
        distinct = () if result.sketch_by_hour is None else (distinct_text(result.sketch_by_hour.get(hour, Sketch())),)
        chart.add_row(
            iso_minute(hour * HOUR_MS), "█" * round(BAR_WIDTH * count / peak), f"{count:,}", *distinct, *sums, *cells
        )
    return chart


if __name__ == "__main__":
    sys.exit(main())
