"""Write synthetic events into the events table: by default the origin's workload.

    .venv/bin/python scripts/generate_events.py            # 3 counters, 37 h ending now, 20-100/h each, 6 bad
    .venv/bin/python scripts/generate_events.py --seed 7 --hours 2 --hot page-views 20000 --bad 0
    .venv/bin/python scripts/generate_events.py --shape origin   # the origin's jobs: {id, insertUtcTime, providerId, ...}
    .venv/bin/python scripts/generate_events.py --shape blog     # page views: {id, url, time, clientId, status, loadMs}
    .venv/bin/python scripts/generate_events.py --shape jobs     # jobs placed, then done, cancelled or deleted

A shape writes items of another table's making, with statuses and amounts (and
no bad records); it prints the TALLY_RULES and TALLY_TIME_ATTRIBUTE that count them.
The jobs shape changes its items after writing them (each job's changes in
order): it needs a table streaming NEW_AND_OLD_IMAGES, and leaves the deletions
of expired jobs to the table's TTL (on `expiresAt`, epoch seconds).

Before writing, the items are judged with the settings the pipeline counting
into the counts table has published there (the handler does at every cold
start), by tally's own parsing: items it would refuse or not count at all are
not written (exit status 2, naming the settings they need) unless --unchecked;
items it would reject only for their time (late, future) are written with a
warning, and so is everything when no pipeline has published its settings.

The same --seed (and end time) writes the same events, ids included. Items
are written with BatchWriteItem only (moto turns an UpdateItem on a new key
into two INSERTs; a job's update is a put of its whole new image, which
DynamoDB streams as a MODIFY with both images), and unprocessed items are
retried with backoff. Attribute
names come from TALLY_COUNTER_ATTRIBUTE / TALLY_TIME_ATTRIBUTE, as the handler
reads them.
"""

from __future__ import annotations

import argparse
import random
import shlex
import sys
from collections import Counter

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from botocore.exceptions import ClientError

from tally.core.buckets import iso_minute, iso_second
from tally.core.rules import ENV_RULES, parse_rules
from tally.dynamo.counts_table import CountsTable
from tally.local.agreement import differences, judge
from tally.local.aws import ArgumentParser, add_table_arguments, client, resolve_tables, write_histories, write_items
from tally.local.cli import console as make_console
from tally.local.cli import ScriptError, entry_point, is_missing_table, require_table, where
from tally.core.records import InvalidCounter, validate_counter
from tally.core.settings import ENV_COUNTER_ATTRIBUTE, ENV_TIME_ATTRIBUTE, Settings, SettingsError
from tally.core.units import HOUR_MS
from tally.core.windows import InvalidWindow, now_ms, parse_instant
from tally.local.workload import (
    BAD_KINDS,
    DEFAULT_COUNTERS,
    DEFAULT_HOURS,
    DEFAULT_RATE,
    HISTORY_SHAPES,
    SHAPES,
    Workload,
    bad_items,
)

ALL_SHAPES = {**SHAPES, **HISTORY_SHAPES}

console = make_console(stderr=True)


def parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_table_arguments(parser)
    parser.add_argument("--counters", nargs="+", help="counter names (with --shape: providers or pages)")
    parser.add_argument(
        "--shape",
        choices=sorted(ALL_SHAPES),
        help="write items shaped as the origin's jobs or a blog's page views, for counter rules; "
        "jobs: placed, then updated and some deleted",
    )
    parser.add_argument("--hours", type=int, default=DEFAULT_HOURS, help=f"hours of events (default {DEFAULT_HOURS})")
    parser.add_argument(
        "--rate",
        nargs=2,
        type=int,
        default=list(DEFAULT_RATE),
        metavar=("LOW", "HIGH"),
        help="events per hour per counter, drawn uniformly (default 20 100)",
    )
    parser.add_argument(
        "--unchecked",
        action="store_true",
        help="write even items the pipeline's published settings would not count",
    )
    parser.add_argument("--end", help="ISO-8601 end of the events (default now)")
    parser.add_argument("--start", help="ISO-8601 start of the events instead: they end --hours later")
    parser.add_argument("--seed", type=int, help="same seed, same events (default: a random seed, printed)")
    parser.add_argument(
        "--hot",
        nargs=2,
        action="append",
        default=[],
        metavar=("COUNTER", "RATE"),
        help="also write RATE events per hour to COUNTER (repeatable)",
    )
    parser.add_argument(
        "--bad",
        type=int,
        metavar="N",
        help=f"also write N records tally must reject, cycling through their kinds (default {len(BAD_KINDS)}: "
        "one of each, as make demo writes; none with --shape)",
    )
    return parser


def parse_workload(args: argparse.Namespace, parser: argparse.ArgumentParser) -> tuple[Workload, int]:
    """The workload and its end time (epoch ms), or parser.error with what is wrong."""
    try:
        default_counters = ALL_SHAPES[args.shape].keys if args.shape else DEFAULT_COUNTERS
        counters = [validate_counter(name) for name in args.counters or default_counters]
        if args.shape and (args.bad or args.hot):
            raise ValueError("--bad and --hot write tally's own event shape; leave them out with --shape")
        if args.bad is None:
            args.bad = 0 if args.shape else len(BAD_KINDS)
        hot = {validate_counter(name): int(rate) for name, rate in args.hot}
        if args.start and args.end:
            raise ValueError("give --start or --end, not both")
        if args.start:
            end_ms = parse_instant(args.start) + args.hours * HOUR_MS
        else:
            end_ms = parse_instant(args.end) if args.end else now_ms()
        seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
        workload = Workload(counters=counters, hours=args.hours, rate=tuple(args.rate), hot=hot, seed=seed)
        if args.bad < 0:
            raise ValueError("--bad must not be negative")
    except (InvalidCounter, InvalidWindow, ValueError) as error:
        parser.error(str(error))
    return workload, end_ms


@entry_point
def main(argv: list[str] | None = None) -> int:
    argument_parser = parser()
    args = argument_parser.parse_args(argv)
    workload, end_ms = parse_workload(args, argument_parser)
    settings = Settings.from_env()
    events = workload.events(end_ms)
    histories: list = []
    if args.shape in HISTORY_SHAPES:
        shape = HISTORY_SHAPES[args.shape]
        histories = shape.histories(workload, end_ms)
        items = [history[0].new for history in histories]  # their inserts, checked as any item is
        needed = {ENV_TIME_ATTRIBUTE: shape.time_attribute, ENV_RULES: shape.rules_json}
        bad = []
    elif args.shape:
        shape = SHAPES[args.shape]
        items = shape.items(workload, end_ms)
        needed = {ENV_TIME_ATTRIBUTE: shape.time_attribute, ENV_RULES: shape.rules_json}
        bad = []
    else:
        items = [event.item(settings) for event in events]
        needed = {ENV_COUNTER_ATTRIBUTE: settings.counter_attribute, ENV_TIME_ATTRIBUTE: settings.time_attribute, ENV_RULES: ""}
        bad = bad_items(args.bad, end_ms, workload.seed, settings)
    tables = resolve_tables(args)
    table = tables.events

    dynamodb = client("dynamodb")
    require_table(dynamodb, table, "--table or EVENTS_TABLE")
    if args.unchecked:
        console.print("[yellow]warning:[/] --unchecked: the items are not checked against the pipeline's settings")
    else:
        check_pipeline(CountsTable(dynamodb, tables.counts, settings), items, needed)
    items += bad
    what = f"the histories of {len(histories)} jobs" if histories else f"{len(items)} events"
    console.print(f"writing {what} to {table}: {workload.hours} h ending {iso_minute(end_ms)}, seed {workload.seed}")
    if histories:
        warn_about_stream_view(dynamodb, table, shape.rules_json)
        write_with_progress(dynamodb, table, [], histories)
    else:
        write_with_progress(dynamodb, table, items, [])
    print_totals(Counter(event.counter for event in events), args.bad)
    if args.shape:
        print(f"export TALLY_TIME_ATTRIBUTE={shape.time_attribute} TALLY_RULES={shlex.quote(shape.rules_json)}")
    return 0


def check_pipeline(counts: CountsTable, items: list[dict], needed: dict[str, str]) -> None:
    """Refuse items the pipeline counting into ``counts`` would not count (ScriptError); warn when it cannot tell.

    ``needed``: the settings the items are made for, to name in the refusal.
    """
    try:
        published = counts.published_settings()
        pipeline_settings = published.settings() if published else None
    except ClientError as error:
        if not is_missing_table(error):
            raise
        published = pipeline_settings = None
    except SettingsError as error:
        console.print(f"[yellow]warning:[/] the settings published in {counts.table_name!r} are unreadable ({error}): unchecked")
        return
    if published is None or pipeline_settings is None:
        console.print(
            f"[yellow]warning:[/] no pipeline has published its settings in counts table {counts.table_name!r} at "
            f"{where()} (none has started on it yet): the items are written unchecked"
        )
        return
    judgement = judge(items, pipeline_settings, now_ms())
    pipeline = (
        f"the pipeline counting into {counts.table_name!r} (settings published by {published.publisher} "
        f"at {iso_second(published.published_ms)})"
    )
    by_shape = judgement.reasons(time_only=False)
    if by_shape:
        missing = differences(published.environment, needed)
        fix = (
            f"the items need {' '.join(f'{name}={shlex.quote(value)}' for name, value in missing.items())}: "
            "start the pipeline with them (`export` them, then `local_pipeline.py --keep-running` or `run_stream.py`; "
            "a stack: its `rules` and `timeAttribute` context), "
            if missing
            else ""
        )
        raise ScriptError(
            f"{pipeline} would refuse {judgement.spoiled:,} of {len(items):,} items ({judgement.lost:,} not counted "
            f"at all): {judgement.describe(by_shape)}; nothing written; {fix}or pass --unchecked to write them anyway"
        )
    by_time = judgement.reasons(time_only=True)
    if by_time:
        console.print(f"[yellow]warning:[/] {pipeline} will reject some items for their time: {judgement.describe(by_time)}")


def warn_about_stream_view(dynamodb_client: object, table: str, rules_json: str) -> None:
    """Say so when the table's stream lacks an image the shape's rules judge: tally would reject those records."""
    description = dynamodb_client.describe_table(TableName=table)["Table"]  # type: ignore[attr-defined]
    view = description.get("StreamSpecification", {}).get("StreamViewType", "no stream")
    shortfall = parse_rules(rules_json).view_shortfall(view)
    if shortfall:
        console.print(f"[yellow]warning:[/] {table} streams {view}: {shortfall}")


def write_with_progress(dynamodb_client: object, table: str, items: list[dict], histories: list) -> None:
    """Items, or the producers' changes of items' histories, with a progress bar."""
    changes = sum(1 for history in histories for change in history if not change.by_ttl)
    columns = (TextColumn("writing"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("write", total=len(items) + changes)
        advance = lambda n: progress.advance(task, n)  # noqa: E731
        write_items(dynamodb_client, table, items, on_written=advance)
        write_histories(dynamodb_client, table, histories, on_written=advance)


def print_totals(per_counter: Counter[str], bad: int) -> None:
    table = Table(title="events written")
    table.add_column("counter")
    table.add_column("events", justify="right")
    for counter, count in sorted(per_counter.items()):
        table.add_row(counter, str(count))
    if bad:
        table.add_row("[dim](records tally must reject)", str(bad))
    table.add_row("[bold]total", f"[bold]{sum(per_counter.values()) + bad}")
    make_console().print(table)


if __name__ == "__main__":
    sys.exit(main())
