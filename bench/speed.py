"""Handler speed: parsing and folding alone (CPU, no I/O), and whole invocations against moto.

The CPU figure is the best of a few runs on one core, because the machine is
shared and a slow run measures the neighbours. Whole invocations run tally's
real Lambda entry point (Powertools logging and metrics included, their output
discarded) and the origin's handler on the same 1,000 records in one process,
so their ratio holds even where the absolute times do not.
"""

from __future__ import annotations

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
from bench.workloads import SHARD_ID, STREAM_ARN, Workload, record_chunks
from bench.writes import ORIGIN_TABLE
from tally.local.delivery import DeliveryConfig, cut_invocations
from tally.local.aws import OFFLINE_ENVIRONMENT
from tally.dynamo.tables import create_tables
from tally.core.records import parse_record
from tally.core.segments import SegmentFolder
from tally.core.settings import Settings

CPU_RECORDS = 100_000
CPU_RUNS = 3
INVOCATION_RECORDS = 1000


def first_records(workload: Workload, count: int) -> list[dict]:
    return next(record_chunks(itertools.islice(workload.events(), count), count))


def best_rate(work: Callable[[], object], items: int, runs: int = CPU_RUNS) -> float:
    """Items per second of the fastest of ``runs`` runs."""
    fastest = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        work()
        fastest = min(fastest, time.perf_counter() - start)
    return items / fastest


def parse_and_fold(workload: Workload, settings: Settings) -> dict[str, float]:
    """Records per second on one core: parse_record, SegmentFolder.fold, and both together."""
    records = first_records(workload, CPU_RECORDS)
    outcomes = [parse_record(record, settings) for record in records]

    def parse() -> list:
        return [parse_record(record, settings) for record in records]

    def fold() -> list:
        return list(SegmentFolder().fold(outcomes))

    def both() -> list:
        return list(SegmentFolder().fold(parse_record(record, settings) for record in records))

    return {
        "records": CPU_RECORDS,
        "parse_records_per_second": round(best_rate(parse, CPU_RECORDS)),
        "fold_records_per_second": round(best_rate(fold, CPU_RECORDS)),
        "parse_and_fold_records_per_second": round(best_rate(both, CPU_RECORDS)),
    }


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
