"""Close the days and months that are due: each kept counter's day summed once from its hours, each month from its days.

    .venv/bin/python scripts/close_periods.py                              # close what is due now
    .venv/bin/python scripts/close_periods.py --dry-run                    # what is due, nothing written
    .venv/bin/python scripts/close_periods.py --at 2026-11-28T03:15Z       # as a run at that instant would
    .venv/bin/python scripts/close_periods.py --endpoint http://127.0.0.1:5000 --table counts-1a2b
    .venv/bin/python scripts/close_periods.py --skip-missing               # after closes stopped too long

Counters starting with one of the calendar prefixes keep day and month buckets
in UTC and in each calendar zone (TALLY_CALENDAR_PREFIXES and
TALLY_CALENDAR_ZONES; context calendarPrefixes and calendarZones). A day is
closed two days and an hour after it ends, a month once its days are: this
command closes, in each kept zone, the days after the last one closed whose
time has come (at most a month of days a run; run it again to catch up) and
the months they complete, as the stack's daily state machine does in the
account. It reads the settings the counting function published in the counts
table (the calendar it keeps), else this shell's. Running it again, or while
the state machine runs, writes nothing twice.

Prints each run of periods closed, then the periods closed, the counters read,
the items written and those found already closed. --at closes as a run at that
instant would; it may not be later than now (a day closed before its records
are all in would stay short for good). The table is --table, else COUNTS_TABLE,
else a stack's outputs (--stack), else tally-counts; the endpoint --endpoint,
else AWS_ENDPOINT_URL (moto's server, DynamoDB Local), else AWS. Bad input: one
line on stderr, exit status 2. A table that keeps no days or months has nothing
to close: one line saying so, exit status 0 (a daily cron job on it is no
failure).

Closes stopped for longer than the hours are kept (hourRetentionDays) leave
days that can no longer be closed: their hours have expired, and a day closed
from what is left would stay short for good. The close refuses them in one
line, exit status 2, naming --skip-missing: that records them in the zone's
progress as missing and moves past them, then closes the rest as usual.
Calendar reads of a missing day (and of a month holding one) are refused in
one line saying so; the months holding them are never closed. Running it
again skips nothing more.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Sequence

from rich.markup import escape
from rich.table import Table

from tally.closing import CLOSE_WORKERS, CloseRefused, CloseSummary, Closer, Due, instant_by, runs_of
from tally.core.buckets import DAY, Bucket, iso_second
from tally.core.settings import Settings, SettingsError
from tally.core.windows import now_ms
from tally.dynamo.commit import COMMIT_WORKERS
from tally.dynamo.counts_table import CountsTable
from tally.local.aws import ArgumentParser, client, resolve_tables
from tally.local.cli import ScriptError, console, entry_point, require_table, where

err = console(stderr=True)
NOTHING_KEPT = "nothing to close: the table keeps no days or months (calendarPrefixes)"


def parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--at", "--now", dest="at", metavar="INSTANT",
        help="close as a run at this instant would: ISO-8601 with an offset or epoch seconds, not later than now "
        "(default now)",
    )
    parser.add_argument("--dry-run", action="store_true", help="show what is due, write nothing")
    parser.add_argument(
        "--skip-missing", action="store_true",
        help="first move each zone past the days that can no longer be closed (closes stopped past the hour "
        "retention), recording them as missing, then close the rest",
    )
    parser.add_argument("--endpoint", metavar="URL", help="the DynamoDB endpoint (default AWS_ENDPOINT_URL, else AWS)")
    parser.add_argument("--table", "--counts-table", dest="counts_table", help="counts table name")
    parser.add_argument("--stack", help="read the counts table's name from this deployed tally stack's outputs")
    return parser


@entry_point
def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.endpoint:
        os.environ["AWS_ENDPOINT_URL"] = args.endpoint  # every client, and every message naming where
    at = instant(args.at)
    environment_settings = Settings.from_env()  # a bad setting is reported before anything is read
    name = resolve_tables(args).counts
    dynamodb = client("dynamodb", connections=max(CLOSE_WORKERS, COMMIT_WORKERS))  # a close's reads and commits
    require_table(dynamodb, name, "--table or COUNTS_TABLE")
    settings, source = table_settings(CountsTable(dynamodb, name, environment_settings), environment_settings)
    if not settings.calendar_prefixes:
        print(NOTHING_KEPT)
        err.print(f"(the settings of {source})", highlight=False)
        return 0
    closer = Closer(CountsTable(dynamodb, name, settings, previous_release_until_ms=0))
    if args.skip_missing:
        skip_missing(closer, at, args.dry_run)
        if args.dry_run:
            return 0
    try:
        due = closer.plan_due(at)
        if not due.days and not due.months:
            print(f"nothing due at {iso_second(at)}: every day and month whose close time has come is closed")
            return 0
        show_due(due, at, name, source)
        if args.dry_run:
            err.print("dry run: nothing written")
            return 0
        summary = closer.close_due(at, on_run=say_run)
    except CloseRefused as error:  # days whose hours expired: the message names the mend
        raise ScriptError(str(error)) from None
    show_closed(summary, due)
    return 0


def skip_missing(closer: Closer, at: int, dry_run: bool) -> None:
    """Record each zone's days that can no longer be closed as missing and move past them (--dry-run: say which)."""
    runs = closer.unclosable(at)
    if not runs:
        print(f"nothing to skip at {iso_second(at)}: every due day's hours are still kept")
    for zone, first, last in runs:
        days = (last - first).days + 1
        what = f"{zone} days {first.isoformat()}" + (f" .. {last.isoformat()} ({days})" if days > 1 else "")
        print(
            f"{'would skip' if dry_run else 'skipped'} {what}: their hours had expired, so they can no longer be "
            "closed; recorded as missing (calendar reads refuse them, and their months are never closed)"
        )
    if dry_run:
        err.print("dry run: nothing written (the days after them are planned once they are skipped)")
    else:
        closer.skip_missing(at)


def instant(text: str | None) -> int:
    """The instant to close at: --at, not later than now; else now."""
    clock = now_ms()
    if text is None:
        return clock
    try:
        return instant_by(text, clock)
    except ValueError as error:
        raise ScriptError(f"--at {error}") from None


def table_settings(counts: CountsTable, environment_settings: Settings) -> tuple[Settings, str]:
    """The settings to close with, and where they come from: those the counting function published in the table
    (the calendar it keeps, the lanes it writes), else this shell's."""
    published = counts.published_settings()
    if published is None:
        return environment_settings, f"this shell's environment (no counting function has published its settings in {counts.table_name})"
    try:
        settings = published.settings()
    except SettingsError as error:
        raise ScriptError(f"the settings {published.publisher} published in {counts.table_name} are unreadable here: {error}") from None
    source = f"{published.publisher}, published in {counts.table_name} at {iso_second(published.published_ms)}"
    return dataclasses.replace(settings, counts_table=counts.table_name), source


def span(run: Sequence[Bucket]) -> str:
    first, last = (period.sort_key.split("@", 1)[1] for period in (run[0], run[-1]))
    return first if first == last else f"{first} .. {last}"


def show_due(due: Due, at: int, table: str, source: str) -> None:
    listing = Table(title=f"due at {iso_second(at)} in {table} at {where()}")
    for column in ("zone", "days", "months"):
        listing.add_column(column)
    for zone in dict.fromkeys(period.zone for period in (*due.days, *due.months)):
        cells = []
        for periods in (due.days, due.months):
            runs = runs_of([period for period in periods if period.zone == zone])
            count = sum(len(run) for run in runs)
            cells.append(", ".join(span(run) for run in runs) + (f" ({count})" if count > 1 else "") if runs else "")
        listing.add_row(zone, *cells)
    console().print(listing)
    err.print(f"settings: {source}", highlight=False)


def say_run(run: list[Bucket], done: CloseSummary) -> None:
    kind = "days" if run[0].kind == DAY else "months"
    err.print(
        f"closed {run[0].zone} {kind} {span(run)}: {done.counters:,} counters, {done.written:,} items written, "
        f"{done.already_closed:,} already closed",
        highlight=False,
    )


def show_closed(summary: CloseSummary, due: Due) -> None:
    zones = len({period.zone for period in (*due.days, *due.months)})
    print(
        f"closed {len(due.days):,} days and {len(due.months):,} months of {zones} zone{'s' if zones > 1 else ''}: "
        f"{summary.counters:,} counters, {summary.written:,} items written, {summary.already_closed:,} already closed "
        f"({summary.reads:,} read requests, {summary.write_units:,.0f} write units)"
    )
    if summary.unresolved:
        shown = ", ".join(summary.unresolved[:5]) + (f" and {len(summary.unresolved) - 5:,} more" if len(summary.unresolved) > 5 else "")
        err.print(
            f"[yellow]note:[/] {len(summary.unresolved):,} periods were closed from hours an overlap left unresolved "
            f"({escape(shown)}): reads say they may be low, as they say of those hours, until scripts/audit.py "
            "--repair recounts them from the events table",
        )


if __name__ == "__main__":
    sys.exit(main())
