"""Adopting tally on a table that already has history, end to end on this machine (`make adopt-demo`).

moto's server plays DynamoDB, DynamoDB Streams and S3. The steps are the ones
README "Adopting tally on an existing table" gives for AWS:

1. a table full of events (20 hours of history, a few bad items), with a stream;
2. tally's settings: count from the next whole second (countFrom / TALLY_COUNT_FROM);
3. a point-in-time export of the table taken at that instant;
4. live traffic after it, counted by the stream runner (the history's records
   arrived before count-from: routine skips);
5. the backfill's state machine (``backfill.py --stack`` on AWS) counts the export: a
   plan, a map of fold workers over its data files, a map of committers over the
   counter ranges, a summary; the same stages and handlers the stack's Step
   Functions run, here in worker processes (``tally.local.state_machine``);
6. scripts/audit.py recounts every counter's 24 h window from the raw items,
   with a rule of its own, and must report no difference; then its Scan runs
   as the stack's audit state machine does, segments in worker processes,
   and the audit's recount of what they found is shown beside.

moto exports the table as it is when asked, whatever ExportTime says, so the
export is requested at the count-from instant, before live traffic; on AWS the
export is taken later, for that instant. Exit status 1 if the audit finds a difference.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from typing import Any


from tally.core.buckets import iso_minute, iso_second
from tally.core.settings import ENV_COUNT_FROM, ENV_EVENTS_TABLE, Settings
from tally.core.units import MINUTE_MS
from tally.core.windows import now_ms
from tally.dynamo.tables import create_tables
from tally import exports
from tally.parallel_audit import AUDIT_STAGES, audit_work_prefix, gathered_items
from tally.parallel_backfill import STAGES, BackfillConfig, summary_from_json
from tally.local import state_machine
from tally.local.aws import (
    ArgumentParser,
    LocalContext,
    MotoServer,
    client,
    local_handler,
    stream_arn_of,
    write_items,
)
from tally.local.dynamodb_local import ENV_BACKEND
from tally.local.cli import console as make_console
from tally.local.cli import load_script
from tally.local.delivery import DeliveryConfig
from tally.local.stream_reader import StreamReader
from tally.local.workload import DEFAULT_COUNTERS, Workload, bad_items

EVENTS_TABLE = "orders"
COUNTS_TABLE = "tally-counts"
BUCKET = "tally-exports"
EXPORT_PREFIX = "adoption"
DEMO_RANGES = 8
DEMO_SEGMENTS = 6
# tally backfills history up to the hour retention (90 d); the demo keeps its own workload small.
MAX_HISTORY_HOURS = 72

console = make_console()


def parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=2019, help="workload seed (default 2019)")
    parser.add_argument("--history-hours", type=int, default=20, help="hours of history before adoption (default 20)")
    parser.add_argument("--rate", nargs=2, type=int, default=[20, 100], metavar=("LOW", "HIGH"))
    parser.add_argument("--workers", type=int, default=4, help="worker processes of the backfill's maps (default 4)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not 1 <= args.workers <= 64:
        parser().error("--workers must be between 1 and 64")
    if not 1 <= args.history_hours <= MAX_HISTORY_HOURS:
        parser().error(f"--history-hours must be between 1 and {MAX_HISTORY_HOURS}: the demo writes every event of it")
    if os.environ.get(ENV_BACKEND) == "dynamodb-local":
        parser().error(
            "the adoption demo exports the events table to S3, which DynamoDB Local cannot do: "
            "run it on moto's server (unset TALLY_LOCAL_BACKEND)"
        )
    saved_environment = dict(os.environ)
    server = MotoServer().start()
    try:
        server.reset()
        os.environ.update({**server.environment(), "EVENTS_TABLE": EVENTS_TABLE, "COUNTS_TABLE": COUNTS_TABLE})
        os.environ.pop(ENV_COUNT_FROM, None)
        return adopt(args)
    finally:
        server.stop()
        os.environ.clear()
        os.environ.update(saved_environment)


def adopt(args: argparse.Namespace) -> int:
    dynamodb, s3 = client("dynamodb"), client("s3")
    create_tables(dynamodb, EVENTS_TABLE, COUNTS_TABLE)
    s3.create_bucket(Bucket=BUCKET)
    started = now_ms()
    history = Workload(hours=args.history_hours, rate=tuple(args.rate), seed=args.seed).events(started - MINUTE_MS)
    write_items(dynamodb, EVENTS_TABLE, [event.item() for event in history] + bad_items(6, started, args.seed))
    console.print(
        f"1. table [bold]{EVENTS_TABLE}[/] holds {len(history):,} events ({args.history_hours} h of history "
        f"ending {iso_minute(started)}) and 6 bad items; its stream has them all"
    )

    count_from_ms = (now_ms() // 1000 + 1) * 1000
    count_from = str(count_from_ms // 1000)
    os.environ[ENV_COUNT_FROM] = count_from
    console.print(f"2. tally's settings: countFrom = {count_from} ({iso_second(count_from_ms)}), as -c countFrom=… deploys it")

    table_arn = dynamodb.describe_table(TableName=EVENTS_TABLE)["Table"]["TableArn"]
    export = exports.start_export(dynamodb, table_arn, BUCKET, EXPORT_PREFIX, count_from_ms)
    exports.wait_until_done(dynamodb, export.arn, poll_seconds=0.1)
    console.print(f"3. exported the table at count-from to s3://{BUCKET}/{EXPORT_PREFIX}")

    while now_ms() < count_from_ms:
        time.sleep(0.05)
    live = Workload(hours=1, rate=tuple(args.rate), seed=args.seed + 1).events(now_ms())
    write_items(dynamodb, EVENTS_TABLE, [event.item() for event in live])
    reader = StreamReader(
        client("dynamodbstreams"),
        stream_arn_of(dynamodb, EVENTS_TABLE),
        local_handler(COUNTS_TABLE, log_level="ERROR"),
        config=DeliveryConfig(batch_size=1000, window_seconds=60),
        context=LocalContext(),
    )
    reader.run(until_idle=True, idle_polls=2, poll_interval=0.2, commit_open_windows=True)
    console.print(
        f"4. live traffic: {len(live):,} events written after count-from; the stream runner read "
        f"{reader.stats.records:,} records (the history's arrived before count-from: skipped, not counted)"
    )

    console.print(
        f"5. the backfill's state machine ({' → '.join(stage.name for stage in STAGES)}), "
        f"children in {args.workers} worker processes"
    )
    environment = state_machine.backfill_environment(BUCKET, EXPORT_PREFIX, DEMO_RANGES)
    final = state_machine.run_backfill(
        export.arn, "", s3=s3, workers=args.workers, environment=environment, say=console.print
    )
    load_script("backfill").show(summary_from_json(final["summary"]))

    at = iso_second(now_ms())
    console.print(f"6. [bold]scripts/audit.py[/] {' '.join(DEFAULT_COUNTERS)} --window 24h --at {at}")
    audit = load_script("audit")
    status = audit.main([*DEFAULT_COUNTERS, "--window", "24h", "--at", at])
    recount = recount_in_workers(audit, at, s3, args.workers, environment)
    console.print(
        f"   the audit's Scan as the stack runs it ({DEMO_SEGMENTS} segments in {args.workers} worker processes), "
        "recounted: " + ", ".join(f"{counter} {recount[counter]:,}" for counter in DEFAULT_COUNTERS)
    )
    if status == 0:
        console.print("[bold green]VERDICT: NO DIFFERENCE[/] — history and live traffic each counted once")
    else:
        console.print("[bold red]VERDICT: DIFFERENCE[/] — see the audit above")
    return status


def recount_in_workers(audit: Any, at: str, s3: Any, workers: int, environment: dict[str, str]) -> Counter[str]:
    """The audit's Scan stages (``AUDIT_STAGES``) with the audit's own filter, then its own recount of what they found."""
    settings = Settings.from_env()
    last_minute = (audit.instant_ms(at) - 1) // MINUTE_MS
    first_minute = last_minute - audit.window_minutes("24h") + 1
    rules = [audit.classic_rule(settings.counter_attribute)]
    condition = audit.scan_filter(DEFAULT_COUNTERS, rules, True, settings.time_attribute, first_minute, last_minute)
    work = audit_work_prefix(BackfillConfig(BUCKET, EXPORT_PREFIX), "demo")
    state_machine.run(
        {"work": work, "request": condition, "total": DEMO_SEGMENTS, "segments": list(range(DEMO_SEGMENTS))},
        s3=s3,
        workers=workers,
        environment={**environment, ENV_EVENTS_TABLE: EVENTS_TABLE},
        stages=AUDIT_STAGES,
    )
    items = gathered_items(s3, BUCKET, work, DEMO_SEGMENTS)
    return audit.recount_items(items, DEFAULT_COUNTERS, rules, settings.time_attribute, first_minute, last_minute)


if __name__ == "__main__":
    sys.exit(main())
