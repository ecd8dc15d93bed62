"""Adopting tally on a table that already has history, end to end on this machine (`make adopt-demo`).

moto's server plays DynamoDB, DynamoDB Streams and S3. The steps are the ones
README "Adopting tally on an existing table" gives for AWS:

1. a table full of events (20 hours of history, a few bad items, and a year of
   checkouts, a few a day), with a stream;
2. tally's settings: count from the next whole second (countFrom / TALLY_COUNT_FROM);
   checkouts keep days and months (calendarPrefixes) in UTC and New York
   (calendarZones);
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
   and the audit's recount of what they found is shown beside;
7. as soon as the backfill has ended, before any close: a daily series of the
   last 365 days and the last 12 monthly totals of checkouts, in UTC and New
   York, each period against scripts/audit.py --series, which
   recounts it from the raw items: the days the export made complete are read
   from their day items, the last few from hours.

moto exports the table as it is when asked, whatever ExportTime says, so the
export is requested at the count-from instant, before live traffic; on AWS the
export is taken later, for that instant. Exit status 1 if an audit finds a difference.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections import Counter
from datetime import date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from rich.table import Table


from tally.core.buckets import iso_minute, iso_second
from tally.core.settings import (
    ENV_CALENDAR_PREFIXES,
    ENV_CALENDAR_ZONES,
    ENV_COUNT_FROM,
    ENV_DAY_RETENTION_DAYS,
    ENV_EVENTS_TABLE,
    Settings,
)
from tally.core.units import DAY_MS, MINUTE_MS
from tally.core.windows import now_ms
from tally.dynamo.closing import ProgressItems
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
from tally.local.workload import DEFAULT_COUNTERS, Event, Workload, bad_items

EVENTS_TABLE = "orders"
COUNTS_TABLE = "tally-counts"
BUCKET = "tally-exports"
EXPORT_PREFIX = "adoption"
DEMO_RANGES = 8
DEMO_SEGMENTS = 6
# tally backfills history up to the hour retention (90 d); the demo keeps its own workload small.
MAX_HISTORY_HOURS = 72
# The counters that keep days and months, the zone they are kept in besides UTC, and how far back the export's
# items reach them (the default dayRetentionDays): the year of history the table holds for them.
CALENDAR_COUNTERS = ("checkouts",)
ZONE = "America/New_York"
YEAR_DAYS = 400
PER_DAY = (0, 6)  # events a day of each calendar counter in that year, inclusive

console = make_console()


def parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=2019, help="workload seed (default 2019)")
    parser.add_argument("--history-hours", type=int, default=20, help="hours of history before adoption (default 20)")
    parser.add_argument("--rate", nargs=2, type=int, default=[20, 100], metavar=("LOW", "HIGH"))
    parser.add_argument(
        "--year-rate", nargs=2, type=int, default=list(PER_DAY), metavar=("LOW", "HIGH"),
        help=f"events a day of {', '.join(CALENDAR_COUNTERS)} in the {YEAR_DAYS} days of history before those hours "
        f"(default {PER_DAY[0]} {PER_DAY[1]})",
    )
    parser.add_argument("--workers", type=int, default=4, help="worker processes of the backfill's maps (default 4)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not 1 <= args.workers <= 64:
        parser().error("--workers must be between 1 and 64")
    if not 1 <= args.history_hours <= MAX_HISTORY_HOURS:
        parser().error(f"--history-hours must be between 1 and {MAX_HISTORY_HOURS}: the demo writes every event of it")
    if not 0 <= args.year_rate[0] <= args.year_rate[1]:
        parser().error("--year-rate must be 0 <= LOW <= HIGH")
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
        os.environ.update({
            ENV_CALENDAR_PREFIXES: json.dumps(list(CALENDAR_COUNTERS)),
            ENV_CALENDAR_ZONES: json.dumps([ZONE]),
            ENV_DAY_RETENTION_DAYS: str(YEAR_DAYS),
        })
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
    year = year_of_history(started - args.history_hours * 60 * MINUTE_MS, args.seed, tuple(args.year_rate))
    write_items(dynamodb, EVENTS_TABLE, [event.item() for event in history + year] + bad_items(6, started, args.seed))
    console.print(
        f"1. table [bold]{EVENTS_TABLE}[/] holds {len(history):,} events ({args.history_hours} h of history "
        f"ending {iso_minute(started)}), {len(year):,} of {', '.join(CALENDAR_COUNTERS)} in the {YEAR_DAYS} days "
        "before, and 6 bad items; its stream has them all"
    )

    count_from_ms = (now_ms() // 1000 + 1) * 1000
    count_from = str(count_from_ms // 1000)
    os.environ[ENV_COUNT_FROM] = count_from
    console.print(f"2. tally's settings: countFrom = {count_from} ({iso_second(count_from_ms)}), as -c countFrom=… deploys it")
    console.print(
        f"   calendarPrefixes = {json.dumps(list(CALENDAR_COUNTERS))}, calendarZones = {json.dumps([ZONE])}: "
        f"their days and months are kept for {YEAR_DAYS} days and for years"
    )

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
    series_status = days_and_months(audit)
    if status == 0 and series_status == 0:
        console.print(
            "[bold green]VERDICT: NO DIFFERENCE[/] — history and live traffic each counted once, "
            "in the last 24 hours and in every day and month of the last year"
        )
    else:
        console.print("[bold red]VERDICT: DIFFERENCE[/] — see the audits above")
    return max(status, series_status)


def year_of_history(end_ms: int, seed: int, per_day: tuple[int, int] = PER_DAY) -> list[Event]:
    """``per_day`` events a day (LOW to HIGH) of each calendar counter in the YEAR_DAYS before ``end_ms``, at
    random times: a daily series in UTC and one in New York group them differently."""
    rng = random.Random(f"year-{seed}")
    events = []
    for day in range(YEAR_DAYS):
        start = end_ms - (day + 1) * DAY_MS
        for counter in CALENDAR_COUNTERS:
            for _ in range(rng.randint(*per_day)):
                events.append(Event(str(rng.getrandbits(64)), counter, rng.randrange(start, start + DAY_MS)))
    return sorted(events, key=lambda event: event.ts_ms)


def days_and_months(audit: Any) -> int:
    """Step 7: a daily series of the last 365 days and the last 12 months of the calendar counters, in UTC and
    the zone, read as soon as the backfill ended, each period against the audit's recount (``--series``). A
    table of the months, then each series' verdict; 0 when every period is equal, else 1."""
    zones = ("UTC", ZONE)
    adopted = {zone: ProgressItems(client("dynamodb"), COUNTS_TABLE).read(zone).adopted_run for zone in zones}
    named = {zone: "none" if run is None else f"{run[0]} .. {run[1]}" for zone, run in adopted.items()}
    made = named["UTC"] if len(set(named.values())) == 1 else ", ".join(f"{run} of {zone}" for zone, run in named.items())
    console.print(
        f"7. days and months of {', '.join(CALENDAR_COUNTERS)}, read as soon as the backfill ended (no close has run): "
        f"the days the export made complete ({made}) from their items, the days after from hours"
    )
    console.print("   each period against [bold]scripts/audit.py --series[/], which recounts it from the table's items")
    months: dict[str, list[dict[str, Any]]] = {}
    verdicts = []
    # The same days and months in both zones, up to the earlier zone's today: the table's rows pair them.
    today = min(datetime.fromtimestamp(now_ms() / 1000, ZoneInfo(zone)).date() for zone in zones)
    end = today + timedelta(days=1)
    this_month = today.replace(day=1)
    first_month = date(this_month.year - (this_month.month <= 11), (this_month.month - 12) % 12 + 1, 1)  # 11 before
    next_month = date(this_month.year + this_month.month // 12, this_month.month % 12 + 1, 1)
    for zone in zones:
        for series, start, stop, what in (
            ("day", end - timedelta(days=365), end, "365 days"),
            ("month", first_month, next_month, "12 months"),
        ):
            arguments = [*CALENDAR_COUNTERS, "--series", series, "--tz", zone, "--from", start.isoformat(), "--to", stop.isoformat()]
            rows = audit.audit_series(audit.parser().parse_args(arguments))
            if series == "month":
                months[zone] = rows
            totals = ", ".join(
                f"{counter} {sum(row['tally'] for row in rows if row['counter'] == counter):,}" for counter in CALENDAR_COUNTERS
            )
            verdicts.append(f"   {what} of {zone}, {start} .. {stop - timedelta(days=1)}: {totals} — {audit.verdict(rows)}")
    table = Table(title="the last 12 months: tally's totals (a difference from the audit's recount shows as ≠)")
    table.add_column("month")
    for counter in CALENDAR_COUNTERS:
        for zone in zones:
            table.add_column(f"{counter} {zone}", justify="right")
    for index, first in enumerate(months[zones[0]][: 12]):
        cells = []
        for counter in CALENDAR_COUNTERS:
            for zone in zones:
                row = [row for row in months[zone] if row["counter"] == counter][index]
                cells.append(f"{row['tally']:,}" if row["difference"] == 0 else f"[red]{row['tally']:,} ≠ {row['recount']:,}")
        table.add_row(first["start"][:7] + (" (to date)" if index == 11 else ""), *cells)
    console.print(table)
    for line in verdicts:
        console.print(line, highlight=False)
    return 0 if all(line.endswith("VERDICT: NO DIFFERENCE") for line in verdicts) else 1


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
