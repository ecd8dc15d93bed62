"""What a backfill writes per 1,000 exported items: ``python -m bench.backfill``.

Runs tally's own backfill fold (``tally.backfill.backfill_file``) over the
bench workloads, in shuffled order as an export lists items (by hash, not
time), and prices each segment's commit by DynamoDB's rules: a transactional
write is 2 write units per item of up to 1 KB, and bucket items and markers
stay under 1 KB. Nothing is written: the commit only counts.
"""

from __future__ import annotations

import random

from boto3.dynamodb.types import TypeSerializer
from rich.console import Console
from rich.table import Table

from tally.backfill import BackfillSummary, WriteRateLimit, backfill_file
from tally.core.settings import HOUR_MS, Settings
from tally.core.commit import CommitResult
from tally.local.workload import Workload

COUNT_FROM_MS = 1_795_428_000_000
WORKLOADS = {
    "origin's mock (3 counters, 20 h, 20-100 events/h)": Workload(hours=20, seed=1),
    "steady (100 counters, 10 h, 600 events/h each)": Workload(
        counters=[f"counter-{n}" for n in range(100)], hours=10, rate=(600, 600), seed=1
    ),
    "hot counter (1 counter, 10 h, 20,000 events/h)": Workload(counters=["hot"], hours=10, rate=(20_000, 20_000), seed=1),
}

_serializer = TypeSerializer()


def measure(workload: Workload) -> BackfillSummary:
    events = workload.events(COUNT_FROM_MS - HOUR_MS // 60)
    random.Random(7).shuffle(events)
    images = ({name: _serializer.serialize(value) for name, value in event.item().items()} for event in events)
    summary = BackfillSummary()
    backfill_file(
        "arn:bench:export",
        "data/0.json.gz",
        images,
        count_from_ms=COUNT_FROM_MS,
        settings=Settings(count_from_ms=COUNT_FROM_MS),
        commit=lambda segment, source: CommitResult(len(segment.parts()), 0, 0),
        limit=WriteRateLimit(1e12),
        summary=summary,
    )
    return summary


def main() -> None:
    table = Table(title="backfill writes (export order shuffled)")
    for column in ("workload", "items", "transactions", "WCU", "WCU per 1,000 items"):
        table.add_column(column, justify="left" if column == "workload" else "right")
    for name, workload in WORKLOADS.items():
        summary = measure(workload)
        table.add_row(
            name,
            f"{summary.items:,}",
            f"{summary.transactions_committed:,}",
            f"{summary.write_units:,}",
            f"{summary.write_units * 1000 / summary.items:,.0f}",
        )
    Console().print(table)


if __name__ == "__main__":
    main()
