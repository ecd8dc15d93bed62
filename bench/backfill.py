"""What a backfill writes per 1,000 exported items: ``python -m bench.backfill``.

Runs tally's own backfill (``tally.backfill.backfill_export`` into
``CountsTable.commit``) over the bench workloads, in shuffled order as an export
lists items (by hash, not time), split over several export files, through a
client that meters every write by DynamoDB's rules (``bench.cost``). Beside it:
the floor (one plain write per bucket item the export fills) and what the
previous release paid: it folded each file on its own and committed a
transaction per 99 buckets with a marker, 2 write units per item. Nothing
reaches DynamoDB.

**One rule's history** (``measure_rule``): a table counted by four rules, one
of them (``refunds``) added later with a countFrom of its own, exported at that
instant; the backfill of that rule alone (``HistoryScope.of(settings,
["refunds"])``, as ``scripts/backfill.py --rules refunds`` runs it, the counter
directory recorded) against the floor for that rule's bucket items alone: the
bucket items of ``refunds`` that a backfill of the whole table, all four rules
counting from the same instant, writes. It must write exactly those, with the
same counts, and no other rule's item.

**A calendar prefix's older days** (``measure_calendar``): a table whose
counters ``views/…`` keep days and months from its countFrom, and ``orders/…``
declared a month later with a countFrom of its own, exported at that instant
with 410 days of history; the backfill of that prefix alone (``HistoryScope.of(
settings, calendar=["orders/"])``, as ``scripts/backfill.py --calendar orders/``
runs it, its progress recorded) against the floor: one write per counter-day
and counter-month with events of ``orders/…``, in UTC and New York, for the
days before the prefix's first closed one (three days before the instant)
within the day retention, brute-forced from the events. Every write unit
counts, the progress's included; no minute, hour or other counter's item may
be written.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections import Counter
from datetime import UTC, date, datetime
from typing import Any
from zoneinfo import ZoneInfo

from boto3.dynamodb.types import TypeSerializer
from rich.console import Console
from rich.table import Table

from bench.cost import MeteredClient, metered_counts
from tally.backfill import (
    BACKFILL_SEGMENT_ITEMS,
    BACKFILL_STATE_BUDGET_BYTES,
    BackfillSummary,
    HistoryScope,
    WriteRateLimit,
    backfill_export,
    export_outcomes,
)
from tally.core.ladder import history_days
from tally.core.rules import parse_rules
from tally.core.segments import SegmentFolder
from tally.core.settings import Settings
from tally.core.units import DAY_MS, HOUR_MS
from tally.dynamo.closing import record_history
from tally.dynamo.directory import CounterDirectory
from tally.local.workload import Workload

COUNT_FROM_MS = 1_795_428_000_000
EXPORT_ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/events/export/01795428000000-bench"
FILES = 4  # an export splits a table over several data files
WORKLOADS = {
    "origin's mock (3 counters, 20 h, 20-100 events/h)": Workload(hours=20, seed=1),
    "steady (100 counters, 10 h, 600 events/h each)": Workload(
        counters=[f"counter-{n}" for n in range(100)], hours=10, rate=(600, 600), seed=1
    ),
    "hot counter (1 counter, 10 h, 20,000 events/h)": Workload(counters=["hot"], hours=10, rate=(20_000, 20_000), seed=1),
}
PREVIOUS_PART_ITEMS = 99

# One rule's history: four rules, the last added a month after the table's countFrom, with its own.
RULE_COUNT_FROM_MS = COUNT_FROM_MS + 30 * DAY_MS
RULE_EXPORT_ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/events/export/01798020000000-bench"
ADDED_RULE = "refunds"
RULES = [
    {"name": "orders", "counter": "orders/{shop}"},
    {"name": "revenue", "counter": "revenue/{shop}", "when": {"status": {"equals": "paid"}}, "sum": "amount"},
    {"name": "countries", "counter": "countries/{country}"},
    {"name": ADDED_RULE, "counter": "refunds/{shop}", "when": {"status": {"equals": "refunded"}},
     "countFrom": RULE_COUNT_FROM_MS // 1000},
]
# Orders over the 10 days before the rule's countFrom, a quarter of them refunded: few shops (each hour of
# each shop holds refunds) and many (most refunds in a bucket item of their own).
RULE_WORKLOADS = {
    "few counters (20 shops, 5 countries, 20,000 orders over 10 days)": {"shops": 20, "items": 20_000},
    "many counters (5,000 shops, 5 countries, 20,000 orders over 10 days)": {"shops": 5_000, "items": 20_000},
}

# A calendar prefix's older days: orders/ declared a month after the table's countFrom, with its own; its first
# close began three days before that instant; days kept in UTC and New York.
CALENDAR_COUNT_FROM_MS = RULE_COUNT_FROM_MS
CALENDAR_EXPORT_ARN = RULE_EXPORT_ARN
CALENDAR_PREFIX = "orders/"
CALENDAR_SETTINGS = Settings(count_from_ms=COUNT_FROM_MS, calendar_prefixes=("views/", CALENDAR_PREFIX),
                             calendar_zones=("America/New_York",), calendar_count_from=((CALENDAR_PREFIX, CALENDAR_COUNT_FROM_MS),))
CALENDAR_HISTORY_DAYS = 410
# Half the events are orders, over 410 days: few shops (every counter-day holds events) and many (most hold none).
CALENDAR_WORKLOADS = {
    "few counters (20 shops, 40,000 events over 410 days)": {"shops": 20, "items": 40_000},
    "many counters (5,000 shops, 40,000 events over 410 days)": {"shops": 5_000, "items": 40_000},
}

_serializer = TypeSerializer()


def previous_release_units(images: list, settings: Settings) -> int:
    """The previous release's backfill of one file: its own fold, a transaction per 99 buckets with a marker."""
    folder = SegmentFolder(max_items=BACKFILL_SEGMENT_ITEMS, state_budget=BACKFILL_STATE_BUDGET_BYTES, hold_records=False)
    outcomes = export_outcomes(images, 0, COUNT_FROM_MS, settings)
    segments = [*folder.fold(outcomes), folder.close()]
    buckets = [len(segment.deltas) for segment in segments if segment is not None]
    return sum(2 * (n + math.ceil(n / PREVIOUS_PART_ITEMS)) for n in buckets)


def export_files(images: list, export_id: str) -> list[tuple[str, list]]:
    """``images`` as an export lays them out: FILES data files of about equal size, keyed in order."""
    size = math.ceil(len(images) / FILES)
    return [
        (f"AWSDynamoDB/{export_id}/data/{index:04d}.json.gz", images[index * size : (index + 1) * size])
        for index in range(FILES)
    ]


def measure(workload: Workload) -> dict[str, float]:
    """Write units of tally's backfill, of the previous release's for the same segments, and of the floor."""
    events = workload.events(COUNT_FROM_MS - HOUR_MS // 60)
    random.Random(7).shuffle(events)
    images = [{name: _serializer.serialize(value) for name, value in event.item().items()} for event in events]
    settings = Settings(count_from_ms=COUNT_FROM_MS)
    client = MeteredClient(("pk", "sk"))
    table = metered_counts(client, settings)
    summary = BackfillSummary()
    files = export_files(images, "01795428000000-bench")
    backfill_export(
        EXPORT_ARN,
        files,
        scope=HistoryScope(COUNT_FROM_MS),
        settings=settings,
        commit=table.commit,
        limit=WriteRateLimit(1e12),
        summary=summary,
    )
    floor = len(client.items)
    previous = sum(previous_release_units(images, settings) for _, images in files)
    return {
        "items": summary.items,
        "bucket_updates": summary.bucket_updates,
        "write_units": client.meter.units,
        "floor_write_units": floor,
        "previous_release_write_units": previous,
        "write_units_per_1000_items": round(client.meter.units * 1000 / summary.items, 1),
        "units_over_floor": round(client.meter.units / floor, 3),
        "previous_over_tally": round(previous / client.meter.units, 2),
    }


def rule_settings(own_count_from: bool = True) -> Settings:
    """The table's settings: RULES, the added rule from its own countFrom (``own_count_from``), or every rule
    counting from the added rule's instant, as a table counted whole at that instant would."""
    rules = [
        {name: value for name, value in rule.items() if own_count_from or name != "countFrom"} for rule in RULES
    ]
    count_from = COUNT_FROM_MS if own_count_from else RULE_COUNT_FROM_MS
    return Settings(count_from_ms=count_from, rules=parse_rules(json.dumps(rules)))


def rule_images(items: int, shops: int, seed: int = 3) -> list[dict[str, Any]]:
    """Orders as an export lists them (shuffled), each in DynamoDB JSON."""
    rng = random.Random(seed)
    images = []
    for n in range(items):
        order = {
            "id": str(n),
            "shop": f"shop-{rng.randrange(shops)}",
            "country": f"country-{rng.randrange(5)}",
            "status": "refunded" if rng.random() < 0.25 else "paid",
            "amount": rng.randrange(1, 500),
            "ts": RULE_COUNT_FROM_MS - 1 - rng.randrange(10 * DAY_MS),
        }
        images.append({name: _serializer.serialize(value) for name, value in order.items()})
    return images


def rule_of(key: tuple[str, ...]) -> str:
    """The rule that wrote an item of the counts table: its counter's prefix names it (the directory's entries
    name their counter in the sort key); anything else (rejections, markers) is "other"."""
    counter = key[1] if key[0].startswith("#counters#") else key[0]
    prefix = counter.split("/", 1)[0]
    return {rule["counter"].split("/", 1)[0]: rule["name"] for rule in RULES}.get(prefix, "other")


def _backfill_files(images: list, scope: HistoryScope, settings: Settings) -> tuple[MeteredClient, BackfillSummary, float]:
    """One backfill of ``images`` in FILES files, the counter directory recorded, as scripts/backfill.py runs it."""
    client = MeteredClient(("pk", "sk"))
    counts = metered_counts(client, settings)
    summary = BackfillSummary()
    files = export_files(images, "01798020000000-bench")
    start = time.perf_counter()
    backfill_export(
        RULE_EXPORT_ARN,
        files,
        scope=scope,
        settings=settings,
        commit=CounterDirectory(client, settings.counts_table, settings).recording(counts.commit),
        limit=WriteRateLimit(1e12),
        summary=summary,
    )
    return client, summary, time.perf_counter() - start


def _counts(items: dict, rule: str) -> dict:
    """The bucket items of one rule as readers see them (watermarks aside: the two backfills are two writers)."""
    return {
        key: {name: value for name, value in item.items() if not name.startswith("~")}
        for key, item in items.items()
        if not key[0].startswith("#") and rule_of(key) == rule
    }


def measure_rule(items: int, shops: int) -> dict[str, Any]:
    """The backfill of ADDED_RULE alone against the floor for its bucket items, beside the whole table's."""
    images = rule_images(items, shops)
    settings = rule_settings()
    scope = HistoryScope.of(settings, [ADDED_RULE])
    client, summary, seconds = _backfill_files(images, scope, scope.settings_for(settings))
    whole = rule_settings(own_count_from=False)
    table_client, _, table_seconds = _backfill_files(images, HistoryScope(RULE_COUNT_FROM_MS), whole)
    rule_buckets = _counts(table_client.items, ADDED_RULE)
    written = Counter(rule_of(key) for key in client.items)
    buckets_by_rule = Counter(rule_of(key) for key in table_client.items if not key[0].startswith("#"))
    floor = len(rule_buckets)
    meter, table_meter = client.meter, table_client.meter
    bucket_units = meter.units - meter.batch_units  # the directory's entries are its batched puts
    return {
        "items": summary.items,
        "rules": len(RULES),
        "rule": ADDED_RULE,
        "rule_events": sum(summary.counted.values()),
        "bucket_items_by_rule_in_whole_table": dict(sorted(buckets_by_rule.items())),
        "floor_write_units": floor,
        "bucket_write_units": bucket_units,
        "directory_write_units": meter.batch_units,
        "write_units": meter.units,
        "units_over_floor": round(bucket_units / floor, 3),
        "units_with_directory_over_floor": round(meter.units / floor, 3),
        "other_rules_items_written": sum(n for rule, n in written.items() if rule != ADDED_RULE),
        "same_buckets_as_whole_table": _counts(client.items, ADDED_RULE) == rule_buckets,
        "whole_table_write_units": table_meter.units,
        "rule_share_of_bucket_items": round(floor / sum(buckets_by_rule.values()), 3),
        "rule_over_whole_table_write_units": round(meter.units / table_meter.units, 3),
        "seconds": round(seconds, 2),
        "whole_table_seconds": round(table_seconds, 2),
    }


def rule_results() -> list[dict[str, Any]]:
    """measure_rule for every RULE_WORKLOADS (a few seconds in all)."""
    return [{"workload": name, **measure_rule(**shape)} for name, shape in RULE_WORKLOADS.items()]


def calendar_images(items: int, shops: int, seed: int = 5) -> list[dict[str, Any]]:
    """Events of orders/ and views/ shops over CALENDAR_HISTORY_DAYS before the prefix's instant, as an export
    lists them (shuffled), each in DynamoDB JSON."""
    rng = random.Random(seed)
    return [
        {name: _serializer.serialize(value) for name, value in {
            "id": str(n),
            "counter": f"{rng.choice((CALENDAR_PREFIX, 'views/'))}shop-{rng.randrange(shops)}",
            "ts": CALENDAR_COUNT_FROM_MS - 1 - rng.randrange(CALENDAR_HISTORY_DAYS * DAY_MS),
        }.items()}
        for n in range(items)
    ]


def calendar_runs(settings: Settings) -> dict[str, dict[str, tuple[date, date]]]:
    """The days the backfill writes in each kept zone: before the first closed one, three days before the instant."""
    runs = {}
    for zone in settings.kept_zones:
        since = datetime.fromtimestamp((CALENDAR_COUNT_FROM_MS - 3 * DAY_MS) / 1000, UTC).astimezone(ZoneInfo(zone)).date()
        run = history_days(CALENDAR_COUNT_FROM_MS, zone, settings, since)
        if run is not None:
            runs[zone] = run
    return {CALENDAR_PREFIX: runs}


def calendar_floor(images: list[dict[str, Any]], runs: dict[str, tuple[date, date]]) -> set[tuple[str, str]]:
    """The items a calendar backfill must write, from the events alone: each orders/ counter's day and month, in
    each zone where the event's local day lies in the zone's run."""
    found = set()
    for image in images:
        counter = image["counter"]["S"]
        if not counter.startswith(CALENDAR_PREFIX):
            continue
        instant = datetime.fromtimestamp(int(image["ts"]["N"]) / 1000, UTC)
        for zone, (first, last) in runs.items():
            day = instant.astimezone(ZoneInfo(zone)).date()
            if first <= day <= last:
                found.add((counter, f"D#{zone}@{day.isoformat()}"))
                found.add((counter, f"MO#{zone}@{day.isoformat()[:7]}"))
    return found


def measure_calendar(items: int, shops: int) -> dict[str, Any]:
    """The backfill of CALENDAR_PREFIX's older days alone, every write unit against the floor, beside the whole
    table's backfill of the same export (every counter keeping days from that instant)."""
    images = calendar_images(items, shops)
    settings = CALENDAR_SETTINGS
    scope = HistoryScope.of(settings, calendar=[CALENDAR_PREFIX])
    runs = calendar_runs(settings)
    client = MeteredClient(("pk", "sk"))
    counts = metered_counts(client, settings)
    summary = BackfillSummary()
    start = time.perf_counter()
    backfill_export(CALENDAR_EXPORT_ARN, export_files(images, "01798020000000-bench"), scope=scope,
                    settings=scope.settings_for(settings), commit=counts.commit, limit=WriteRateLimit(1e12),
                    summary=summary, runs=runs)
    bucket_units = client.meter.units
    record_history(client, settings.counts_table, runs)
    seconds = time.perf_counter() - start
    floor = calendar_floor(images, runs[CALENDAR_PREFIX])
    written = {key for key in client.items if key[0] != "#calendar"}
    whole = Settings(count_from_ms=CALENDAR_COUNT_FROM_MS, calendar_prefixes=settings.calendar_prefixes,
                     calendar_zones=settings.calendar_zones)
    table_client, _, _ = _backfill_files(images, HistoryScope(CALENDAR_COUNT_FROM_MS), whole)
    return {
        "items": summary.items,
        "prefix_events": sum(summary.counted.values()),
        "zones": len(settings.kept_zones),
        "days_written": {zone: f"{first.isoformat()}..{last.isoformat()}" for zone, (first, last) in runs[CALENDAR_PREFIX].items()},
        "floor_write_units": len(floor),
        "bucket_write_units": bucket_units,
        "progress_write_units": client.meter.units - bucket_units,
        "write_units": client.meter.units,
        "units_over_floor": round(client.meter.units / len(floor), 3),
        "same_items_as_floor": written == floor,
        "minute_or_hour_items_written": sum(1 for _, sk in written if sk.startswith(("M#", "H#"))),
        "other_counters_items_written": sum(1 for counter, _ in written if not counter.startswith(CALENDAR_PREFIX)),
        "whole_table_write_units": table_client.meter.units,
        "calendar_over_whole_table_write_units": round(client.meter.units / table_client.meter.units, 3),
        "seconds": round(seconds, 2),
    }


def calendar_results() -> list[dict[str, Any]]:
    """measure_calendar for every CALENDAR_WORKLOADS (about 20 seconds of one core in all)."""
    return [{"workload": name, **measure_calendar(**shape)} for name, shape in CALENDAR_WORKLOADS.items()]


def report_calendar(out: Console, rows: list[dict[str, Any]]) -> None:
    table = Table(title=f"a calendar prefix's older days: the backfill of {CALENDAR_PREFIX!r} alone (declared later "
                        "with a countFrom of its own; UTC and New York) against one write per counter-day and "
                        "counter-month with events")
    for column in ("workload", "items", "prefix's events", "floor WCU", "bucket WCU", "progress WCU", "all WCU / floor",
                   "same items as floor", "minute, hour or other items", "whole table WCU", "calendar / whole table"):
        table.add_column(column, justify="left" if column == "workload" else "right")
    for row in rows:
        table.add_row(
            row["workload"], f"{row['items']:,}", f"{row['prefix_events']:,}", f"{row['floor_write_units']:,}",
            f"{row['bucket_write_units']:,}", f"{row['progress_write_units']:,}", f"{row['units_over_floor']}x",
            "yes" if row["same_items_as_floor"] else "NO",
            f"{row['minute_or_hour_items_written'] + row['other_counters_items_written']:,}",
            f"{row['whole_table_write_units']:,}", f"{row['calendar_over_whole_table_write_units']:.1%}",
        )
    out.print(table)


def report_rule(out: Console, rows: list[dict[str, Any]]) -> None:
    table = Table(title=f"one rule's history: the backfill of {ADDED_RULE!r} alone (one of {len(RULES)} rules, added "
                        "with a countFrom of its own) against the floor for its bucket items")
    for column in ("workload", "items", "rule's events", "floor WCU", "bucket WCU", "WCU / floor", "directory WCU",
                   "other rules' items", "same buckets as whole table", "rule's share of bucket items",
                   "whole table WCU", "rule / whole table"):
        table.add_column(column, justify="left" if column == "workload" else "right")
    for row in rows:
        table.add_row(
            row["workload"], f"{row['items']:,}", f"{row['rule_events']:,}", f"{row['floor_write_units']:,}",
            f"{row['bucket_write_units']:,}", f"{row['units_over_floor']}x", f"{row['directory_write_units']:,}",
            f"{row['other_rules_items_written']:,}", "yes" if row["same_buckets_as_whole_table"] else "NO",
            f"{row['rule_share_of_bucket_items']:.1%}", f"{row['whole_table_write_units']:,}",
            f"{row['rule_over_whole_table_write_units']:.1%}",
        )
    out.print(table)


def main() -> None:
    table = Table(title=f"backfill writes (export order shuffled, {FILES} files, one writer per export)")
    for column in ("workload", "items", "bucket updates", "WCU", "floor WCU", "WCU / floor",
                   "previous release WCU", "previous / tally", "WCU per 1,000 items"):
        table.add_column(column, justify="left" if column == "workload" else "right")
    for name, workload in WORKLOADS.items():
        figures = measure(workload)
        table.add_row(
            name,
            f"{figures['items']:,}",
            f"{figures['bucket_updates']:,}",
            f"{figures['write_units']:,}",
            f"{figures['floor_write_units']:,}",
            f"{figures['units_over_floor']}x",
            f"{figures['previous_release_write_units']:,}",
            f"{figures['previous_over_tally']}x",
            f"{figures['write_units_per_1000_items']:,}",
        )
    Console(width=160).print(table)
    report_rule(Console(width=160), rule_results())
    report_calendar(Console(width=160), calendar_results())


if __name__ == "__main__":
    main()
