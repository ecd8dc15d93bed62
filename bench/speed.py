"""Handler speed: parsing and folding alone (CPU, no I/O), and whole invocations against moto.

The CPU figures are the best of a few runs on one core, each timed by the
CPU time of this process, because the machine is shared and a wall-clock
time measures the neighbours too. Besides the plain count they are measured
for each aggregate a rule may keep (a sum, a histogram, distinct values) and
for a counter that keeps days and months, on the same records, with their
ratios to the plain count. Whole invocations run tally's real Lambda entry
point (Powertools logging and metrics included, their output discarded) and
the origin's handler on the same 1,000 records in one process, so their ratio
holds even where the absolute times do not.
"""

from __future__ import annotations

import dataclasses
import io
import itertools
import os
import time
from collections.abc import Callable
from contextlib import redirect_stdout
from typing import Any

import boto3
from moto import mock_aws

from bench import origin
from bench.workloads import SHARD_ID, STREAM_ARN, Workload, classic_image, record_chunks
from bench.writes import ORIGIN_TABLE
from tally.local.delivery import DeliveryConfig, cut_invocations
from tally.local.aws import OFFLINE_ENVIRONMENT
from tally.dynamo.tables import create_tables
from tally.core.ladder import Ladder
from tally.invocation import outcomes_of
from tally.core.records import parse_record
from tally.core.rules import parse_rules
from tally.core.segments import SegmentFolder
from tally.core.settings import Settings
from tally.core.units import DAY_MS

CPU_RECORDS = 100_000
CPU_RUNS = 3
INVOCATION_RECORDS = 1000
# Each aggregate a rule may keep, on the steady workload's counters: the rules (None: the classic rule) and
# the counters that keep days and months (with one zone besides UTC).
AGGREGATE_RULES = {
    "sum": '[{"name": "amount", "counter": "{counter}", "sum": "amount"}]',
    "histogram": '[{"name": "latency", "counter": "{counter}", "histogram": "latencyMs"}]',
    "distinct": '[{"name": "visitors", "counter": "{counter}", "distinct": "visitor"}]',
    "calendar": None,
}
CALENDAR_ZONE = "America/New_York"
LATE_EVERY = 100  # one record in so many is two days late, as in the calendar workload (1 %)


def first_records(workload: Workload, count: int, image=classic_image) -> list[dict]:  # noqa: ANN001 - a workload image
    return next(record_chunks(itertools.islice(workload.events(), count), count, image))


def aggregate_image(counter: str, event_ms: int, item_id: str, sequence: int) -> dict[str, Any]:
    """A steady event with an amount, a latency and a visitor (deterministic by sequence); one in LATE_EVERY
    happened two days before it reached the stream, so a counter that keeps days adds it to them directly."""
    late = sequence % LATE_EVERY == 0
    image = classic_image(counter, event_ms - 2 * DAY_MS if late else event_ms, item_id, sequence)
    image["amount"] = {"N": f"{sequence % 1000}.{sequence * 7 % 100:02d}"}
    image["latencyMs"] = {"N": str(1 + sequence * 7_919 % 5_000)}
    image["visitor"] = {"S": f"v-{sequence * 7_919 % 100_000}"}
    return image


def best_rate(work: Callable[[], object], items: int, runs: int = CPU_RUNS) -> float:
    """Items per second of CPU time, of the fastest of ``runs`` runs."""
    fastest = float("inf")
    for _ in range(runs):
        start = time.process_time()
        work()
        fastest = min(fastest, time.process_time() - start)
    return items / fastest


def rates(records: list[dict], settings: Settings, batch: int = INVOCATION_RECORDS) -> dict[str, int]:
    """Records per second of CPU time: parse_record (a batch of records at a time, into a list, as an invocation
    parses its batch), SegmentFolder.fold (as the handler folds, holding the records for an overlap, with the
    settings' ladder), and both together, one record after the other."""
    ladder = Ladder.of(settings)
    outcomes = [parse_record(record, settings) for record in records]

    def parse() -> None:
        for start in range(0, len(records), batch):
            outcomes_of(records[start : start + batch], settings)

    def fold() -> list:
        return list(SegmentFolder(ladder=ladder).fold(outcomes))

    def both() -> list:
        return list(SegmentFolder(ladder=ladder).fold(parse_record(record, settings) for record in records))

    return {
        "parse_records_per_second": round(best_rate(parse, len(records))),
        "fold_records_per_second": round(best_rate(fold, len(records))),
        "parse_and_fold_records_per_second": round(best_rate(both, len(records))),
    }


def parse_and_fold(workload: Workload, settings: Settings) -> dict[str, Any]:
    """Records per second on one core, the plain count and each aggregate, with the aggregates' ratios to it."""
    plain = rates(first_records(workload, CPU_RECORDS), settings)
    with_aggregates = first_records(workload, CPU_RECORDS, aggregate_image)
    aggregates = []
    for name, rules in AGGREGATE_RULES.items():
        if rules is None:
            variant = dataclasses.replace(settings, calendar_prefixes=("counter-",), calendar_zones=(CALENDAR_ZONE,))
        else:
            variant = dataclasses.replace(settings, rules=parse_rules(rules))
        measured = rates(with_aggregates, variant)
        aggregates.append({
            "aggregate": name,
            **measured,
            "fold_over_plain": round(measured["fold_records_per_second"] / plain["fold_records_per_second"], 2),
            "parse_and_fold_over_plain": round(
                measured["parse_and_fold_records_per_second"] / plain["parse_and_fold_records_per_second"], 2
            ),
        })
    return {"records": CPU_RECORDS, "clock": "CPU time of the process", **plain, "aggregates": aggregates}


class _Context:
    """The attributes Powertools reads from Lambda's context object."""

    function_name = "tally-bench"
    function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:tally-bench"
    memory_limit_in_mb = 256
    aws_request_id = "00000000-0000-0000-0000-000000000000"

    @staticmethod
    def get_remaining_time_in_millis() -> int:
        return 60_000


def invocations(workloads: list[Workload], settings: Settings, config: DeliveryConfig) -> list[dict[str, Any]]:
    """Wall time of one invocation of 1,000 records against in-process moto, each design, per workload."""
    os.environ.update(OFFLINE_ENVIRONMENT)
    os.environ["COUNTS_TABLE"] = settings.counts_table
    results = []
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_tables(client, settings.events_table, settings.counts_table)
        client.create_table(**origin.create_table_request(ORIGIN_TABLE))
        from tally.functions import stream_handler  # after the environment: it reads it at import

        discard = io.StringIO()
        stream_handler.logger.registered_handler.setStream(discard)
        origin_handler = origin.OriginHandler(client, ORIGIN_TABLE)
        for workload in workloads:
            records = first_records(workload, INVOCATION_RECORDS)
            [event] = cut_invocations(records, shard_id=SHARD_ID, stream_arn=STREAM_ARN, config=config)
            with redirect_stdout(discard):
                start = time.perf_counter()
                stream_handler.handler(event, _Context())
                tally_seconds = time.perf_counter() - start
            start = time.perf_counter()
            origin_handler({"Records": records})
            origin_seconds = time.perf_counter() - start
            results.append(
                {
                    "workload": workload.name,
                    "records": INVOCATION_RECORDS,
                    "final_invocation_of_window": event.get("isFinalInvokeForWindow", True),
                    "tally_seconds": round(tally_seconds, 3),
                    "origin_seconds": round(origin_seconds, 3),
                    "origin_over_tally": round(origin_seconds / tally_seconds, 2),
                }
            )
    return results
