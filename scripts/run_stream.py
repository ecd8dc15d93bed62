"""Run tally's handler over an events table's stream, here, the way Lambda's event source mapping would.

    .venv/bin/python scripts/run_stream.py --until-idle            # drain what is there, then exit
    .venv/bin/python scripts/run_stream.py                         # follow the stream until Ctrl-C

Works against moto's server (AWS_ENDPOINT_URL) and against a real table
(--table, EVENTS_TABLE or --stack). The handler runs in this process and
writes to the counts table (--counts-table, COUNTS_TABLE or --stack).

Windows are cut as Lambda cuts them: a tumbling window is committed once its
end has passed, never before, so a later run cuts the same windows whether it
resumes from --checkpoint or reads the stream again from its trim horizon, and
changes no count unless new records arrived. --until-idle waits for the open
windows to end (at most --window-seconds). On Ctrl-C the current invocation
finishes and the open windows are left uncommitted, for the next run to read
again; the exit status is 0. The handler's log lines and progress go to
stderr; the summary line goes to stdout.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path

from tally.local.delivery import DeliveryConfig, DeliveryFailed
from tally.local.aws import ArgumentParser, LocalContext, add_table_arguments, client, local_handler, resolve_tables, stream_arn_of
from tally.local.cli import console as make_console
from tally.local.cli import entry_point, is_permanent, require_table
from tally.local.stream_reader import GET_RECORDS_LIMIT, StreamReader
from tally.core.settings import Settings

console = make_console(stderr=True)


def parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_table_arguments(parser)
    parser.add_argument("--until-idle", action="store_true", help="drain the stream and exit instead of following it")
    parser.add_argument("--idle-polls", type=int, default=3, help="empty passes in a row that mean idle (default 3)")
    parser.add_argument("--poll-interval", type=float, default=1.0, help="seconds between empty passes (default 1)")
    parser.add_argument("--batch-size", type=int, default=1000, help="records per invocation at most (default 1000)")
    parser.add_argument(
        "--window-seconds", type=int, default=60, help="tumbling window length, 1-900 s (default 60)"
    )
    parser.add_argument("--max-attempts", type=int, default=10, help="tries per invocation (default 10)")
    parser.add_argument(
        "--limit", type=int, default=GET_RECORDS_LIMIT, help="records per GetRecords call (default 1000)"
    )
    parser.add_argument("--checkpoint", type=Path, help="JSON file to resume from and to record progress in")
    parser.add_argument("--log-level", default="WARNING", help="the handler's log level (default WARNING)")
    return parser


@entry_point
def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    Settings.from_env()  # the handler's settings, checked before any record is read
    try:
        config = DeliveryConfig(args.batch_size, args.window_seconds, args.max_attempts)
    except ValueError as error:
        parser().error(str(error))
    tables = resolve_tables(args)
    dynamodb = client("dynamodb")
    stream_arn = tables.stream_arn or stream_arn_of(dynamodb, tables.events)
    require_table(dynamodb, tables.counts, "--counts-table or COUNTS_TABLE")
    checkpoints = json.loads(args.checkpoint.read_text()) if args.checkpoint and args.checkpoint.exists() else {}

    reader = StreamReader(
        client("dynamodbstreams"),
        stream_arn,
        local_handler(tables.counts, args.log_level),
        config=config,
        context=LocalContext(),
        on_retry=report_retry,
        limit=args.limit,
        checkpoints=checkpoints,
    )
    stop_on_interrupt(reader)
    if not args.until_idle:
        console.print(f"following {stream_arn} into {tables.counts} (Ctrl-C to stop)")
    try:
        reader.run(
            until_idle=args.until_idle,
            idle_polls=args.idle_polls,
            poll_interval=args.poll_interval,
            on_wait=report_wait,
        )
    except DeliveryFailed as error:
        console.print(f"[red]gave up: {error}")
        return 1
    finally:
        if args.checkpoint:
            args.checkpoint.write_text(json.dumps(reader.checkpoints, indent=2))
    if reader.open_records:
        console.print(
            f"{reader.open_records} records of windows still open are not committed: the next run reads them again"
        )
    print(summary(reader))
    return 0


def report_wait(seconds: float) -> None:
    console.print(f"waiting {seconds:.0f} s for the open tumbling window to end, as Lambda would (Ctrl-C leaves it open)")


def report_retry(event: dict, error: Exception, attempt: int) -> None:
    """Say a failed invocation is retried; give up at once on errors no retry heals (a missing table, say)."""
    if is_permanent(error):
        raise error
    console.print(f"[yellow]invocation failed (attempt {attempt}), retrying: {type(error).__name__}: {error}")


def stop_on_interrupt(reader: StreamReader) -> None:
    """First Ctrl-C: stop after the current invocation, leaving open windows for the next run. Second: at once."""

    def interrupted(signum: int, frame: object) -> None:
        console.print("stopping after the current invocation; open windows are left for the next run")
        reader.stop.set()
        signal.signal(signal.SIGINT, signal.default_int_handler)

    signal.signal(signal.SIGINT, interrupted)


def summary(reader: StreamReader) -> str:
    names = ", ".join(f"{name} {count}" for name, count in sorted(reader.stats.by_event_name.items())) or "none"
    retries = reader.attempts - reader.invocations
    return (
        f"{reader.stats.records} records ({names}) from {len(reader.shards)} shard(s) in "
        f"{reader.invocations} invocations ({retries} retried)"
    )


if __name__ == "__main__":
    sys.exit(main())
