"""What a backfill writes per 1,000 exported items: ``python -m bench.backfill``.

Runs tally's own backfill (``tally.backfill.backfill_export`` into
``CountsTable.commit``) over the bench workloads, in shuffled order as an export
lists items (by hash, not time), split over several export files, through a
client that meters every write by DynamoDB's rules (``bench.cost``). Beside it:
the floor (one plain write per bucket item the export fills) and what the
previous release paid: it folded each file on its own and committed a
transaction per 99 buckets with a marker, 2 write units per item. Nothing
reaches DynamoDB.
"""

from __future__ import annotations

import math
import random

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
from tally.core.segments import SegmentFolder
from tally.core.settings import Settings
from tally.core.units import HOUR_MS
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

_serializer = TypeSerializer()


def previous_release_units(images: list, settings: Settings) -> int:
    """The previous release's backfill of one file: its own fold, a transaction per 99 buckets with a marker."""
    folder = SegmentFolder(max_items=BACKFILL_SEGMENT_ITEMS, state_budget=BACKFILL_STATE_BUDGET_BYTES, hold_records=False)
    outcomes = export_outcomes(images, 0, COUNT_FROM_MS, settings)
    segments = [*folder.fold(outcomes), folder.close()]
    buckets = [len(segment.deltas) for segment in segments if segment is not None]
    return sum(2 * (n + math.ceil(n / PREVIOUS_PART_ITEMS)) for n in buckets)


def measure(workload: Workload) -> dict[str, float]:
    """Write units of tally's backfill, of the previous release's for the same segments, and of the floor."""
    events = workload.events(COUNT_FROM_MS - HOUR_MS // 60)
    random.Random(7).shuffle(events)
    images = [{name: _serializer.serialize(value) for name, value in event.item().items()} for event in events]
    settings = Settings(count_from_ms=COUNT_FROM_MS)
    client = MeteredClient(("pk", "sk"))
    table = metered_counts(client, settings)
    summary = BackfillSummary()
    size = math.ceil(len(images) / FILES)
    files = [
        (f"AWSDynamoDB/01795428000000-bench/data/{index:04d}.json.gz", images[index * size : (index + 1) * size])
        for index in range(FILES)
    ]
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


if __name__ == "__main__":
    main()
