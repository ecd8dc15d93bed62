"""Run tally's handler over an events table's stream, here, the way Lambda's event source mapping would.

    .venv/bin/python scripts/run_stream.py --until-idle            # drain what is there, then exit
    .venv/bin/python scripts/run_stream.py                         # follow the stream until Ctrl-C

Works against moto's server (AWS_ENDPOINT_URL) and against a real table
(--table, EVENTS_TABLE or --stack). The handler runs in this process and
writes to the counts table (--counts-table, COUNTS_TABLE or --stack). On
Ctrl-C the current invocation finishes, open windows are committed, and the
exit status is 0. The handler's log lines and progress go to stderr; the
summary line goes to stdout.
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
        "--window-seconds", type=int, default=60, help="tumbling window length, 0 for none (default 60)"
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
    if not args.until_idle:
        stop_on_interrupt(reader)
        console.print(f"following {stream_arn} into {tables.counts} (Ctrl-C to stop)")
    try:
        reader.run(until_idle=args.until_idle, idle_polls=args.idle_polls, poll_interval=args.poll_interval)
    except DeliveryFailed as error:
        console.print(f"[red]gave up: {error}")
        return 1
    finally:
        if args.checkpoint:
            args.checkpoint.write_text(json.dumps(reader.checkpoints, indent=2))
    print(summary(reader))
    return 0


def report_retry(event: dict, error: Exception, attempt: int) -> None:
    """Say a failed invocation is retried; give up at once on errors no retry heals (a missing table, say)."""
    if is_permanent(error):
        raise error
    console.print(f"[yellow]invocation failed (attempt {attempt}), retrying: {type(error).__name__}: {error}")


def stop_on_interrupt(reader: StreamReader) -> None:
    """First Ctrl-C: stop after the current invocation and commit open windows. Second: stop at once."""

    def interrupted(signum: int, frame: object) -> None:
        console.print("stopping: finishing the current invocation and committing open windows")
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
