"""Count the history the stream will never deliver: a point-in-time export of the events table.

    .venv/bin/python scripts/backfill.py --count-from 2026-11-23T10:00:00Z --export-to s3://my-bucket/tally-backfill
    .venv/bin/python scripts/backfill.py --count-from 2026-11-23T10:00:00Z --export-arn arn:aws:dynamodb:...:export/...
    .venv/bin/python scripts/backfill.py --stack Tally --count-from 2026-11-23T10:00:00Z --export-to s3://my-exports/orders
    .venv/bin/python scripts/backfill.py --stack Tally --rules refunds --export-to s3://my-exports/orders
    .venv/bin/python scripts/backfill.py --calendar refunds/ --export-to s3://my-exports/orders

With --stack naming a stack deployed with backfillExports, the export is
counted in the account: the stack's state machine folds its files in parallel
Lambda workers and commits each counter range once, and this command starts
it (or finds it running, or redrives it after a failure) and follows it with a
progress bar; --export-to must then be the stack's backfillExports. --here
counts in this process instead, as without --stack.

The counting function counts only records that arrived at or after the
count-from instant (TALLY_COUNT_FROM, context countFrom); this command counts
the table as it was at that very instant, read from an export taken at it
(--export-to starts one, which needs point-in-time recovery on the table;
--export-arn reads one already taken). Every item goes through the handler's
own parsing and acceptance, with the count-from instant as its arrival.

--rules NAME... counts the history of rules added later instead: each has a
countFrom of its own in TALLY_RULES (the same for all those named), the export
is taken at it, and only those rules count its items, into their own counters
(no other rule's counter, and no rejection counter, is written). A rule's
history is counted once: a second export, or the rule with other companions,
is refused.

--calendar PREFIX... counts the older history of calendar prefixes declared on
a live table into their days and months alone. Such a prefix is declared with
a countFrom of its own (TALLY_CALENDAR_COUNT_FROM, context calendarCountFrom,
the same for all those named), at or after the deployment that declares it:
from that instant on, a late record of its counters adds to its days and months
directly, and the export is taken at it. The backfill runs after the first
close that closed the prefix's days (its progress says from which day,
since:PREFIX): in every kept zone it adds each exported item of the prefix's
counters to its day and month, for the days before that one that ended a day
or more before the instant and lie within dayRetentionDays, and marks those
days as a late record does. No minute, hour or other counter is written. Once
it has finished, the zones' progress records those days (adopted:PREFIX):
reads take them, and the months wholly within them, from their items. A
prefix's history is counted once: a second export, a prefix that is not in
calendarPrefixes or has no countFrom of its own, or one with other companions,
is refused.

Rerunning with the same --export-arn after an interruption resumes: what was
committed is found by its watermarks and not counted again. A backfill must run
(and finish) within a day of count-from, as a stream record is committed
within a day of its arrival. --max-wcu caps the
write units per second it spends on the counts table. Bad input, an export
that failed or was taken at another instant, or a table already backfilled
from another export: one line on stderr, exit status 2. --export-to checks
that last before it starts an export: a history already counted (or being
counted) from an export is refused before another is started and billed.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from botocore.exceptions import ClientError
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from tally.backfill import (
    BackfillSummary,
    HistoryScope,
    ScopeRefused,
    WriteRateLimit,
    backfill_export,
    nothing_older,
    unseen_history,
)
from tally.core.settings import Settings, SettingsError, parse_count_from
from tally.core.buckets import iso_second
from tally.core.windows import now_ms
from tally.dynamo.backfill import BackfillClaimed
from tally.dynamo.closing import HistoryNotReady, history_runs, record_adoption, record_history
from tally.dynamo.counts_table import CountsTable
from tally.dynamo.directory import CounterDirectory
from tally import exports
from tally.local.aws import ArgumentParser, add_table_arguments, client, resolve_tables
from tally.local.cli import ScriptError, entry_point, explain
from tally.local.cli import console as cli_console
from tally.local import state_machine
from tally.parallel_backfill import summary_from_json
from tally.stack_outputs import STATE_MACHINE_OUTPUT, StackOutputsError, stack_outputs

console = cli_console(stderr=True)

DEFAULT_MAX_WCU = 1000


def parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--export-arn", help="count this completed (or running) export")
    source.add_argument("--export-to", metavar="s3://BUCKET/PREFIX", help="start an export at count-from into S3")
    parser.add_argument(
        "--count-from",
        help="the instant the stream counts from: ISO-8601 with an offset or epoch seconds (default TALLY_COUNT_FROM)",
    )
    parser.add_argument(
        "--rules",
        nargs="+",
        metavar="NAME",
        help="count the history of these rules only, added later with a countFrom of their own (default: the whole table)",
    )
    parser.add_argument(
        "--calendar",
        nargs="+",
        metavar="PREFIX",
        help="count the older history of these calendar prefixes only, declared later with a countFrom of their own, "
        "into their days and months alone",
    )
    parser.add_argument(
        "--max-wcu",
        type=float,
        help=f"write units per second on the counts table at most, with --here (default {DEFAULT_MAX_WCU}; "
        "in the account: the stack's backfillMaxWcu)",
    )
    parser.add_argument(
        "--here", action="store_true", help="count in this process even when --stack has the backfill in the account"
    )
    parser.add_argument("--poll-seconds", type=float, default=10.0, help="how often to ask whether the export is done")
    add_table_arguments(parser)
    return parser


@entry_point
def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    summary = run(args)
    show(summary)
    return 0


def run(args: argparse.Namespace) -> BackfillSummary:
    try:
        settings = Settings.from_env()
        scope = HistoryScope.of(
            settings, args.rules or (), _count_from(args.count_from) if args.count_from else None, args.calendar or ()
        )
        count_from_ms = scope.count_from_ms
        if args.max_wcu is not None and args.max_wcu <= 0:
            raise ScriptError("--max-wcu must be positive")
        state_machine_arn = _state_machine(args.stack) if args.stack and not args.here else None
        if state_machine_arn and args.max_wcu is not None:
            raise ScriptError("--max-wcu caps a backfill --here; in the account the stack's backfillMaxWcu does")
        refusal = scope.refusal_at(now_ms())
        if refusal is not None:
            raise ScriptError(refusal)
        settings = scope.settings_for(settings)
        for line in unseen_history(settings):
            console.print(f"[yellow]note:[/yellow] {line}")
        tables = resolve_tables(args)
        dynamodb, s3 = client("dynamodb"), client("s3")
        runs = _history_runs(dynamodb, tables.counts, settings, scope)  # before an export is started and billed
        export = _export(args, dynamodb, tables.events, count_from_ms, CountsTable(dynamodb, tables.counts, settings), scope)
        export = exports.wait_until_done(
            dynamodb, export.arn, poll_seconds=args.poll_seconds, on_poll=_report_status
        )
        refusal = scope.export_refusal(export.arn, export.export_time_ms)
        if refusal is not None:
            raise ScriptError(refusal)
        if state_machine_arn:  # the plan claims the export, by the in-account protocol
            return count_in_account(client("stepfunctions"), s3, state_machine_arn, export.arn, args.poll_seconds, scope)
        # Exported items all predate this process, but never a marker of the previous release: the claim
        # refuses an export that release began counting.
        counts = CountsTable(dynamodb, tables.counts, settings, previous_release_until_ms=0)
        counts.claim_backfill(
            export.table_arn, iso_second(count_from_ms), export.arn, scope.claim_expires_s(settings),
            rules=scope.rules, calendar=scope.calendar,
        )
        limit = WriteRateLimit(args.max_wcu or DEFAULT_MAX_WCU)
        summary = count_export(s3, export, counts, settings, limit, scope, runs)
        if scope.calendar:  # every segment is in: the days written are complete
            record_history(dynamodb, tables.counts, runs or {})
        elif not scope.rules:  # every segment is in: the days the export covers are complete
            record_adoption(dynamodb, tables.counts, settings, count_from_ms)
        return summary
    except (SettingsError, ScopeRefused, exports.ExportError, BackfillClaimed, StackOutputsError, HistoryNotReady) as error:
        raise ScriptError(str(error)) from None
    except ClientError as error:
        if explain(error) is not None:  # a missing table, refused credentials: the shared edge says it
            raise
        detail = error.response.get("Error", {})
        raise ScriptError(f"{error.operation_name}: {detail.get('Code')}: {detail.get('Message')}") from None


def _history_runs(dynamodb: Any, counts_table: str, settings: Settings, scope: HistoryScope) -> dict | None:
    """The days a calendar backfill writes (``history_runs``), or a one-line refusal where none; None for any
    other scope."""
    if not scope.calendar:
        return None
    runs = history_runs(dynamodb, counts_table, settings, scope.calendar, scope.count_from_ms)
    if not runs:
        raise ScriptError(nothing_older(scope))
    return runs


def _state_machine(stack_name: str) -> str:
    """The stack's in-account backfill, or a one-line refusal saying how to get one or count here."""
    outputs = stack_outputs(stack_name, client("cloudformation"))
    arn = outputs.get(STATE_MACHINE_OUTPUT)
    if not arn:
        raise ScriptError(
            f"stack {stack_name!r} has no backfill in the account: deploy it with -c backfillExports=s3://BUCKET/PREFIX, "
            "or count in this process with --here"
        )
    return arn


def count_in_account(
    sfn: Any, s3: Any, state_machine_arn: str, export_arn: str, poll_seconds: float, scope: HistoryScope
) -> BackfillSummary:
    """Start the stack's state machine on the export (or find it, or redrive it) and follow it to the end."""
    execution_arn, how = state_machine.start_or_resume(sfn, state_machine_arn, export_arn, scope.text)
    console.print(f"{how} {execution_arn}")
    follower = state_machine.ExecutionFollower(sfn, s3, execution_arn)
    follow(follower, poll_seconds)
    return summary_from_json(follower.output()["summary"])


def follow(follower: state_machine.ExecutionFollower, poll_seconds: float, sleep: Any = time.sleep) -> None:
    """Progress bars until the execution ends: files folded, items folded (with the ETA), ranges committed."""
    columns = (TextColumn("{task.description:>16}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        files = progress.add_task("files folded", total=None)
        items = progress.add_task("items folded", total=None)
        ranges = progress.add_task("ranges committed", total=None)
        while True:
            snapshot = follower.poll()
            progress.update(files, total=snapshot.files, completed=snapshot.files_done)
            progress.update(items, total=snapshot.items, completed=snapshot.items_folded)
            progress.update(
                ranges,
                total=snapshot.ranges,
                completed=snapshot.ranges_done,
                description=f"ranges committed ({snapshot.bucket_updates:,} buckets)",
            )
            if snapshot.status == "SUCCEEDED":
                return
            if snapshot.status in state_machine.FAILED_STATUSES:
                raise ScriptError(
                    f"the backfill's execution {follower.failure()}; run this command again to redrive it "
                    "(only what did not finish runs again, and nothing is counted twice)"
                )
            sleep(poll_seconds)


def _count_from(text: str) -> int:
    try:
        return parse_count_from(text)
    except ValueError as error:
        raise ScriptError(f"--count-from {error}") from None


def _export(
    args: argparse.Namespace, dynamodb: Any, events_table: str, count_from_ms: int, counts: CountsTable, scope: HistoryScope
) -> exports.Export:
    """The export to count: --export-arn's, or one started now at count-from (--export-to), once no claim says that
    history is counted from another export already (an export is billed, and takes minutes to hours)."""
    if args.export_arn:
        return exports.describe(dynamodb, args.export_arn)
    bucket, _, prefix = args.export_to.removeprefix("s3://").partition("/")
    if not args.export_to.startswith("s3://") or not bucket:
        raise ScriptError(f"--export-to must look like s3://BUCKET/PREFIX, got {args.export_to!r}")
    table_arn = dynamodb.describe_table(TableName=events_table)["Table"]["TableArn"]
    refusal = counts.new_export_refusal(table_arn, iso_second(count_from_ms), scope.rules, scope.calendar)
    if refusal is not None:
        raise ScriptError(refusal)
    export = exports.start_export(dynamodb, table_arn, bucket, prefix.strip("/"), count_from_ms)
    console.print(f"started export {export.arn}\n  (if interrupted, resume with --export-arn {export.arn})")
    return export


def count_export(
    s3: Any,
    export: exports.Export,
    counts: CountsTable,
    settings: Settings,
    limit: WriteRateLimit,
    scope: HistoryScope,
    runs: dict | None = None,
) -> BackfillSummary:
    """Every data file of a completed export, counted with a progress bar (``settings``: the scope's; ``runs``:
    the days a calendar backfill writes)."""
    # One writer per export: its files are counted in one fixed order, that of their keys.
    files = sorted(exports.data_files(s3, export), key=lambda file: file.key)
    known = [file.item_count for file in files]
    total = sum(known) if all(count is not None for count in known) else export.item_count  # type: ignore[arg-type]
    summary = BackfillSummary()
    # Days and months alone: no minute or hour for the counter directory to list.
    commit = counts.commit if scope.calendar else CounterDirectory(counts.client, counts.table_name, settings).recording(counts.commit)
    columns = (
        TextColumn("counting"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("items"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("backfill", total=total)
        backfill_export(
            export.arn,
            ((file.key, exports.items(s3, export.bucket, file.key)) for file in files),
            scope=scope,
            settings=settings,
            commit=commit,
            limit=limit,
            summary=summary,
            on_items=lambda n: progress.advance(task, n),
            runs=runs,
        )
    return summary


def show(summary: BackfillSummary) -> None:
    out = cli_console()
    table = Table(title="backfill", show_header=False)
    table.add_column("what")
    table.add_column("how many", justify="right")
    table.add_row("export files", f"{summary.files:,}")
    table.add_row("items read", f"{summary.items:,}")
    table.add_row("counted", f"{summary.counted_total:,}")
    for reason, count in sorted(summary.rejected.items()):
        table.add_row(f"rejected: {reason.value}", f"{count:,}")
    for rule, count in sorted(summary.rejected_by_rule.items()):
        table.add_row(f"rejected by rule {rule}", f"{count:,}")
    for reason, count in sorted(summary.skipped.items()):
        table.add_row(f"skipped: {reason.value}", f"{count:,}")
    table.add_row("bucket updates", f"{summary.bucket_updates:,}")
    table.add_row("already applied (resumed)", f"{summary.updates_already_applied:,}")
    table.add_row("write units (WCU)", f"{summary.write_units:,}")
    out.print(table)
    per_counter = Table(title="counted per counter")
    per_counter.add_column("counter")
    per_counter.add_column("events", justify="right")
    for counter, count in summary.counted.most_common(20):
        per_counter.add_row(counter, f"{count:,}")
    if len(summary.counted) > 20:
        per_counter.add_row(f"[dim]… {len(summary.counted) - 20} more counters", "")
    out.print(per_counter)


_reported: set[tuple[str, str]] = set()


def _report_status(export: exports.Export) -> None:
    """Each status once: an export takes minutes, polled every --poll-seconds."""
    if export.status != "COMPLETED" and (export.arn, export.status) not in _reported:
        _reported.add((export.arn, export.status))
        console.print(f"export {export.status.lower().replace('_', ' ')} …")


if __name__ == "__main__":
    sys.exit(main())
