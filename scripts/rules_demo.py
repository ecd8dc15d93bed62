"""Adding a counter rule to a live table, its history counted once, end to end on this machine (`make rules-demo`).

moto's server plays DynamoDB, DynamoDB Streams and S3. The steps are the ones
docs/adopting.md gives for a rule added later (its own countFrom, its history
backfilled with --rules, audited with --rules):

1. a table of orders and refunds from three shops (20 hours of history), with
   a stream, counted live by the stream runner with the first rules: orders/{shop}
   (orders) and all (every item);
2. the team adds refunds/{shop} (refunds, with the sum of their amounts), counting
   from a whole second a few seconds ahead (its own countFrom): the function is
   deployed with it a little ahead of that instant, the stream runner going on
   from its checkpoints; live traffic before the instant is counted by the first
   rules alone, after it by all three;
3. a point-in-time export of the table taken at the rule's countFrom;
4. the backfill's state machine (``backfill.py --rules refunds --stack`` on AWS)
   counts that export for refunds alone (its input's ``rules``: "refunds"): the
   same stages and handlers the stack's Step Functions run, here in worker
   processes (``tally.local.state_machine``); the first rules' bucket items are
   the same before and after it; live traffic goes on after it;
5. what a reader sees of refunds/{shop} at each step, beside a brute-force count
   of the items written: nothing before the instant, then what arrived since it,
   then, after the backfill, the rule's whole history;
6. scripts/audit.py --rules refunds recounts the rule's counters over the 24 h
   ending now from the raw items and must report no difference.

moto exports the table as it is when asked, whatever ExportTime says, so the
export is requested at the rule's countFrom, before the live traffic after it;
on AWS the export is taken later, for that instant. Exit status 1 if the audit
finds a difference (or a read differs from the brute force, or the backfill
wrote a counter of the first rules).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from rich.table import Table

from tally import exports
from tally.backfill import BackfillSummary
from tally.core.buckets import iso_minute, iso_second
from tally.core.settings import ENV_COUNT_FROM, Settings
from tally.core.rules import ENV_RULES
from tally.core.units import DAY_MS, MINUTE_MS
from tally.core.windows import now_ms
from tally.dynamo.tables import create_tables
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
from tally.local.cli import console as make_console
from tally.local.cli import load_script
from tally.local.delivery import DeliveryConfig
from tally.local.dynamodb_local import ENV_BACKEND
from tally.local.stream_reader import StreamReader
from tally.local.workload import Workload
from tally.parallel_backfill import STAGES, summary_from_json
from tally.reader import Reader

EVENTS_TABLE = "orders"
COUNTS_TABLE = "tally-counts"
BUCKET = "tally-exports"
EXPORT_PREFIX = "rules"
DEMO_RANGES = 8
SHOPS = ("berlin", "lisbon", "oslo")
REFUND_SHARE = 0.2
NEW_RULE = "refunds"
FIRST_RULES = (
    {"name": "orders", "counter": "orders/{shop}", "when": {"kind": {"equals": "order"}}},
    {"name": "all", "counter": "all"},
)
# Live items of each step after the first rules' history (a few seconds of a shop's traffic).
LIVE_ITEMS = 30
# The reads and the audit look at the 24 h ending now, which must hold every item the demo writes.
MAX_HISTORY_HOURS = 23

console = make_console()


def new_rule(count_from_ms: int) -> dict[str, Any]:
    return {
        "name": NEW_RULE,
        "counter": "refunds/{shop}",
        "when": {"kind": {"equals": "refund"}},
        "sum": "amount",
        "countFrom": iso_second(count_from_ms),
    }


def new_counters() -> list[str]:
    return [f"refunds/{shop}" for shop in SHOPS]


def first_counters() -> list[str]:
    return [*(f"orders/{shop}" for shop in SHOPS), "all"]


@dataclass
class Reading:
    """A counter's count and sum over the window a reader asked."""

    count: int
    sum: Decimal | None = None


@dataclass
class RulesDemo:
    """What the demo wrote, when, and what it read: enough to check it from outside."""

    status: int = 1
    count_from_ms: int | None = None
    items: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # step -> items written, in order
    readings: dict[str, dict[str, Reading]] = field(default_factory=dict)  # step -> counter -> what tally answered
    first_rules_before: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # their bucket items
    first_rules_after: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    backfill: BackfillSummary | None = None

    def all_items(self) -> list[dict[str, Any]]:
        return [item for items in self.items.values() for item in items]


def parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=2024, help="workload seed (default 2024)")
    parser.add_argument("--history-hours", type=int, default=20, help="hours of history before the rule (default 20)")
    parser.add_argument(
        "--rate", nargs=2, type=int, default=[10, 30], metavar=("LOW", "HIGH"), help="items per hour and shop (default 10 30)"
    )
    parser.add_argument("--workers", type=int, default=4, help="worker processes of the backfill's maps (default 4)")
    return parser


def main(argv: list[str] | None = None) -> int:
    return run(argv).status


def run(argv: list[str] | None = None) -> RulesDemo:
    """The demo, on a moto server of its own; the environment is put back afterwards."""
    args = parser().parse_args(argv)
    if not 1 <= args.workers <= 64:
        parser().error("--workers must be between 1 and 64")
    if not 1 <= args.history_hours <= MAX_HISTORY_HOURS:
        parser().error(
            f"--history-hours must be between 1 and {MAX_HISTORY_HOURS}: the demo reads and audits the 24 h ending now"
        )
    if not 0 <= args.rate[0] <= args.rate[1]:
        parser().error("--rate must be LOW HIGH with 0 <= LOW <= HIGH")
    if os.environ.get(ENV_BACKEND) == "dynamodb-local":
        parser().error(
            "the rules demo exports the events table to S3, which DynamoDB Local cannot do: "
            "run it on moto's server (unset TALLY_LOCAL_BACKEND)"
        )
    saved_environment = dict(os.environ)
    server = MotoServer().start()
    try:
        server.reset()
        os.environ.update({**server.environment(), "EVENTS_TABLE": EVENTS_TABLE, "COUNTS_TABLE": COUNTS_TABLE})
        os.environ.pop(ENV_COUNT_FROM, None)  # tally has counted this table from its first item
        os.environ[ENV_RULES] = json.dumps(list(FIRST_RULES))
        demo = RulesDemo()
        demo.status = add_rule(args, demo)
        return demo
    finally:
        server.stop()
        os.environ.clear()
        os.environ.update(saved_environment)


def add_rule(args: argparse.Namespace, demo: RulesDemo) -> int:
    dynamodb, s3 = client("dynamodb"), client("s3")
    create_tables(dynamodb, EVENTS_TABLE, COUNTS_TABLE)
    s3.create_bucket(Bucket=BUCKET)
    rng = random.Random(f"rules-demo-{args.seed}")
    stream_arn = stream_arn_of(dynamodb, EVENTS_TABLE)

    started = now_ms()
    history = Workload(counters=SHOPS, hours=args.history_hours, rate=tuple(args.rate), seed=args.seed).events(
        started - MINUTE_MS
    )
    demo.items["history"] = [order(event.id, event.counter, event.ts_ms, rng) for event in history]
    write_items(dynamodb, EVENTS_TABLE, demo.items["history"])
    stream = stream_runner(stream_arn, checkpoints=None)
    records = read_stream(stream)
    console.print(
        f"1. table [bold]{EVENTS_TABLE}[/] holds {len(history):,} orders and refunds of {len(SHOPS)} shops "
        f"({args.history_hours} h of history ending {iso_minute(started)}); the stream runner counted its "
        f"{records:,} records with the first rules: {', '.join(rule['counter'] for rule in FIRST_RULES)}"
    )

    # Traffic goes on while the rule is prepared; its countFrom lies ahead of all of it and of the deployment.
    demo.items["before countFrom"] = live_items(rng, LIVE_ITEMS)
    write_items(dynamodb, EVENTS_TABLE, demo.items["before countFrom"])
    count_from_ms = (now_ms() // 1000 + 2) * 1000
    demo.count_from_ms = count_from_ms
    rule = new_rule(count_from_ms)
    os.environ[ENV_RULES] = json.dumps([*FIRST_RULES, rule])
    stream = stream_runner(stream_arn, checkpoints=stream.checkpoints)
    console.print(
        f"2. the team adds a rule, deployed ahead of its countFrom (TALLY_RULES, as -c rules=… deploys it): "
        f"{json.dumps(rule)}"
    )
    records = read_stream(stream)
    reader = Reader(COUNTS_TABLE, client=dynamodb, settings=Settings.from_env())
    demo.readings["before countFrom"] = read(reader, new_counters())
    console.print(
        f"   the stream runner, going on from its checkpoints with the new rules, counted {records:,} records "
        f"that arrived before {iso_second(count_from_ms)}, with the first rules alone"
    )

    while now_ms() < count_from_ms:
        time.sleep(0.02)
    table_arn = dynamodb.describe_table(TableName=EVENTS_TABLE)["Table"]["TableArn"]
    export = exports.start_export(dynamodb, table_arn, BUCKET, EXPORT_PREFIX, count_from_ms)
    exports.wait_until_done(dynamodb, export.arn, poll_seconds=0.1)
    console.print(f"3. exported the table at the rule's countFrom to s3://{BUCKET}/{EXPORT_PREFIX}")

    demo.items["since countFrom"] = live_items(rng, LIVE_ITEMS)
    write_items(dynamodb, EVENTS_TABLE, demo.items["since countFrom"])
    records = read_stream(stream)
    demo.readings["before the backfill"] = read(reader, new_counters())
    console.print(f"   live traffic after countFrom: the stream runner counted {records:,} records with all three rules")

    demo.first_rules_before = bucket_items(dynamodb, first_counters())
    console.print(
        f"4. the backfill's state machine ({' → '.join(stage.name for stage in STAGES)}) for "
        f'{{"rules": "{NEW_RULE}"}}, children in {args.workers} worker processes'
    )
    environment = state_machine.backfill_environment(BUCKET, EXPORT_PREFIX, DEMO_RANGES)
    final = state_machine.run_backfill(
        export.arn, NEW_RULE, s3=s3, workers=args.workers, environment=environment, say=console.print
    )
    demo.backfill = summary_from_json(final["summary"])
    load_script("backfill").show(demo.backfill)
    demo.first_rules_after = bucket_items(dynamodb, first_counters())
    untouched = demo.first_rules_after == demo.first_rules_before and set(demo.backfill.counted) <= set(new_counters())
    console.print(
        f"   the backfill counted {NEW_RULE}/{{shop}} alone; the first rules' {len(demo.first_rules_before):,} "
        f"bucket items ({', '.join(first_counters())}) are "
        + ("[green]the same[/] as before it" if untouched else "[red]not[/] the same as before it")
    )

    demo.items["after the backfill"] = live_items(rng, LIVE_ITEMS)
    write_items(dynamodb, EVENTS_TABLE, demo.items["after the backfill"])
    records = read_stream(stream)
    demo.readings["after the backfill"] = read(reader, new_counters())
    console.print(f"   live traffic goes on: the stream runner counted {records:,} more records")
    read_right = show_readings(demo)

    # The next whole second: every item written so far lies before it. --at is exclusive on a minute boundary, so
    # the current second, truncated, would end the window before the items of a minute that has just begun.
    at = iso_second(now_ms() + 1000)
    console.print(f"6. [bold]scripts/audit.py[/] --rules {NEW_RULE} --window 24h --at {at}")
    status = load_script("audit").main(["--rules", NEW_RULE, "--window", "24h", "--at", at])
    if status != 0:
        console.print("[bold red]VERDICT: DIFFERENCE[/] — see the audit above")
    elif not (untouched and read_right):
        status = 1
        console.print("[bold red]VERDICT: DIFFERENCE[/] — the audit is equal, but see the reads and the first rules above")
    else:
        console.print(f"[bold green]VERDICT: NO DIFFERENCE[/] — the history and the live traffic of {NEW_RULE} each counted once")
    return status


def order(item_id: str, shop: str, ts_ms: int, rng: random.Random) -> dict[str, Any]:
    """An order or a refund of one shop, with an amount in cents."""
    kind = "refund" if rng.random() < REFUND_SHARE else "order"
    return {"id": item_id, "shop": shop, "kind": kind, "amount": Decimal(rng.randint(100, 20_000)) / 100, "ts": ts_ms}


def live_items(rng: random.Random, count: int) -> list[dict[str, Any]]:
    """Items made in the last half minute, as a live producer writes them."""
    now = now_ms()
    return [
        order(str(uuid.UUID(int=rng.getrandbits(128), version=4)), rng.choice(SHOPS), now - rng.randrange(30_000), rng)
        for _ in range(count)
    ]


def stream_runner(stream_arn: str, checkpoints: dict[str, str] | None) -> StreamReader:
    """The stream runner with the function as TALLY_RULES deploys it now, resuming after ``checkpoints``."""
    return StreamReader(
        client("dynamodbstreams"),
        stream_arn,
        local_handler(COUNTS_TABLE, log_level="ERROR"),
        config=DeliveryConfig(batch_size=1000, window_seconds=60),
        context=LocalContext(),
        checkpoints=checkpoints,
    )


def read_stream(reader: StreamReader) -> int:
    """Run the stream runner until the stream is idle, committing its open windows; the records it read."""
    before = reader.stats.records
    reader.run(until_idle=True, idle_polls=2, poll_interval=0.1, commit_open_windows=True)
    return reader.stats.records - before


def read(reader: Reader, counters: Sequence[str]) -> dict[str, Reading]:
    """What a reader sees of ``counters`` over the 24 h ending now (every item the demo wrote lies in it)."""
    at = datetime.fromtimestamp(now_ms() / 1000, UTC)
    answers = reader.count_many(list(counters), window=timedelta(milliseconds=DAY_MS), at=at, consistent=True, align=False)
    return {answer.counter: Reading(answer.total, answer.sum) for answer in answers}


def bucket_items(dynamodb: Any, counters: Iterable[str]) -> dict[tuple[str, str], dict[str, Any]]:
    """Every item of these counters in the counts table, whole, by key."""
    found = {}
    for counter in counters:
        pages = dynamodb.get_paginator("query").paginate(
            TableName=COUNTS_TABLE,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": counter}},
            ConsistentRead=True,
        )
        for page in pages:
            found.update({(counter, item["sk"]["S"]): item for item in page["Items"]})
    return found


def refunds_of(items: Iterable[Mapping[str, Any]]) -> dict[str, Reading]:
    """Brute force: each shop's refunds among ``items``, and the sum of their amounts."""
    found = {counter: Reading(0, Decimal(0)) for counter in new_counters()}
    for item in items:
        if item["kind"] == "refund":
            reading = found[f"refunds/{item['shop']}"]
            reading.count += 1
            reading.sum += item["amount"]  # type: ignore[operator]
    return found


def show_readings(demo: RulesDemo) -> bool:
    """What a reader saw of the new rule's counters at each step, beside a brute-force count of the items written;
    whether every reading matched."""
    since = refunds_of(demo.items["since countFrom"])
    whole = refunds_of(demo.all_items())
    console.print(
        f"5. what a reader sees of {NEW_RULE}/{{shop}} (24 h ending now) at each step, beside the refunds written: "
        "count (sum of amounts)"
    )
    table = Table()
    for column in (
        "counter", "tally, before countFrom", "tally, before the backfill", "refunds since countFrom",
        "tally, after the backfill", "every refund", "",
    ):
        table.add_column(column, justify="left" if column == "counter" else "right")
    matched = True
    for counter in new_counters():
        early = demo.readings["before countFrom"][counter]
        before = demo.readings["before the backfill"][counter]
        after = demo.readings["after the backfill"][counter]
        matches = same(before, since[counter]) and same(after, whole[counter]) and early.count == 0
        matched = matched and matches
        table.add_row(
            counter,
            f"{early.count:,}",
            shown(before),
            shown(since[counter]),
            shown(after),
            shown(whole[counter]),
            "[green]MATCH" if matches else "[red]MISMATCH",
        )
    console.print(table)
    return matched


def same(read: Reading, written: Reading) -> bool:
    return read.count == written.count and (read.sum or 0) == written.sum


def shown(reading: Reading) -> str:
    return f"{reading.count:,} ({reading.sum or 0:,.2f})"


if __name__ == "__main__":
    sys.exit(main())
