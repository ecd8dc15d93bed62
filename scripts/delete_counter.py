"""Delete every bucket of some counters from the counts table: to reset a counter, or drop one counted by mistake.

    .venv/bin/python scripts/delete_counter.py jobs/provider-7 --dry-run     # what would go, nothing deleted
    .venv/bin/python scripts/delete_counter.py jobs/provider-7               # asks before deleting
    .venv/bin/python scripts/delete_counter.py '#rejected#missing_counter' --yes

Every item of each counter goes: minute and hour buckets, every lane of each,
sums included, and a distinct counter's sketch items in their lane partitions
('#sketches#<lane>#<counter>'); they are read with strongly consistent Queries and deleted with
BatchWriteItem, unprocessed items retried until none are left. It asks before
deleting (in a terminal; elsewhere pass --yes); --dry-run only shows them.

The stream keeps counting: deleting buckets changes no rule. Events of the
counter that arrive afterwards, the tumbling window open now (committed when
it closes) and retries of records that arrived before (for up to a day) write
fresh buckets, so the counter starts again from them. To stop counting it,
change the rules (or stop producing its events) first. Delete a counter while
nothing writes it: a bucket written during the deletion can leave an hour that
no longer equals its minutes, and windows that read both may be off until those
buckets expire. Buckets written while it ran are reported (exit status 1).

A rejection counter ('#rejected#<reason>') may be deleted: it resets that
reason's count. The other reserved items, the previous release's segment
markers ('#segment#...'), backfill claims ('#backfill#...') and the published
settings ('#settings#'), are tally's bookkeeping and never deleted: without
them a window the previous release committed in part would be counted twice,
or a second export counted.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from botocore.exceptions import ClientError
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.prompt import Confirm
from rich.table import Table

from tally.core.buckets import bucket_sort_key
from tally.core.records import InvalidCounter
from tally.core.segments import REJECTED_COUNTER_PREFIX
from tally.core.settings import Settings
from tally.dynamo.counts_table import CountsTable
from tally.local.aws import ArgumentParser, add_table_arguments, client, resolve_tables
from tally.local.cli import ScriptError, console, entry_point, is_missing_table, missing_table, where
from tally.query import validate_query_counter

err = console(stderr=True)


def parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("counters", nargs="+", metavar="COUNTER", help="counter names, or '#rejected#<reason>'")
    parser.add_argument("--dry-run", action="store_true", help="show what would be deleted, delete nothing")
    parser.add_argument("--yes", action="store_true", help="delete without asking (needed when not in a terminal)")
    add_table_arguments(parser, events=False)
    return parser


@entry_point
def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    counters = list(dict.fromkeys(deletable(name) for name in args.counters))
    settings = Settings.from_env()  # a bad setting is reported before anything is read
    tables = resolve_tables(args)
    counts = CountsTable(client("dynamodb"), tables.counts, settings)
    try:
        found = {counter: counts.counter_items(counter) for counter in counters}
    except ClientError as error:
        if is_missing_table(error):
            raise missing_table(tables.counts, "--counts-table or COUNTS_TABLE") from None
        raise
    show(found, tables.counts)
    total = sum(len(items) for items in found.values())
    if total == 0:
        err.print("nothing to delete")
        return 0
    if args.dry_run:
        err.print(f"dry run: nothing deleted ({total:,} items would be)")
        return 0
    if not args.yes and not confirmed(total, counters, tables.counts):
        err.print("nothing deleted")
        return 1
    delete(counts, [(item["pk"], item["sk"]) for items in found.values() for item in items])
    return report_rewritten(counts, counters)


def deletable(name: str) -> str:
    """A counter name, or a rejection counter; every other reserved name is refused."""
    try:
        return validate_query_counter(name)
    except InvalidCounter as error:
        if name.startswith("#") and not name.startswith(REJECTED_COUNTER_PREFIX):
            raise ScriptError(
                f"{name!r} is not a counter this command deletes: of the reserved names only '#rejected#<reason>' "
                "counters are, markers, claims and settings are tally's bookkeeping"
            ) from None
        raise ScriptError(str(error)) from None


def show(found: dict[str, list[dict]], table: str) -> None:
    """What each counter holds: items, buckets by granularity, the span they cover, the events in hour buckets."""
    summary = Table(title=f"buckets in {table} at {where()}")
    for column in ("counter", "items", "minute buckets", "hour buckets", "first bucket", "last bucket", "events in hours"):
        summary.add_column(column, justify="left" if column in ("counter", "first bucket", "last bucket") else "right")
    for counter, items in found.items():
        buckets = sorted({bucket_sort_key(item["sk"]) for item in items})
        minutes = sum(1 for sk in buckets if sk.startswith("M#"))
        hours = [sk for sk in buckets if sk.startswith("H#")]
        in_hours = sum(item["count"] for item in items if item["sk"].startswith("H#"))
        first, last = (buckets[0][2:], buckets[-1][2:]) if buckets else ("", "")
        summary.add_row(escape(counter), f"{len(items):,}", f"{minutes:,}", f"{len(hours):,}", first, last, f"{in_hours:,}")
    console().print(summary)


def confirmed(total: int, counters: Sequence[str], table: str) -> bool:
    if not sys.stdin.isatty():
        raise ScriptError("deleting needs a confirmation: run it in a terminal, or pass --yes (or --dry-run to look)")
    err.print(
        "The stream keeps counting: later events, the open tumbling window and retries write fresh buckets. "
        "Stop producing the counter's events, or change the rules, first."
    )
    names = ", ".join(counters)
    return Confirm.ask(f"Delete {total:,} items of {escape(names)} from {table}?", console=err, default=False)


def delete(counts: CountsTable, keys: list[tuple[str, str]]) -> None:
    columns = (TextColumn("deleting"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=err, transient=True) as progress:
        task = progress.add_task("delete", total=len(keys))
        counts.delete_items(keys, on_deleted=lambda n: progress.advance(task, n))
    err.print(
        f"deleted {len(keys):,} items; the stream still counts these counters: events from now on, the open window "
        "and retries write fresh buckets",
        highlight=False,
    )


def report_rewritten(counts: CountsTable, counters: Sequence[str]) -> int:
    """Read the counters again: anything there now was written during or after the deletion."""
    rewritten = {counter: len(counts.counter_items(counter)) for counter in counters}
    written = {counter: n for counter, n in rewritten.items() if n}
    if not written:
        return 0
    listed = ", ".join(f"{counter} {n:,}" for counter, n in written.items())
    err.print(
        f"[yellow]warning:[/] items were written while deleting ({escape(listed)}): the stream is still counting; "
        "windows over them may not add up until they expire, or delete again once nothing writes the counter"
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
