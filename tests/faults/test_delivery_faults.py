"""The local runner's delivery (``tally.delivery.ShardDelivery``) under the same faults, on moto and on DynamoDB Local."""

from __future__ import annotations

import random
import time
import uuid

import boto3
from hypothesis import given
from hypothesis import strategies as st
from moto import mock_aws
from tally.local.delivery import DeliveryConfig, ShardDelivery
from tally.dynamo.counts_table import CountsTable
from tally.dynamo.tables import create_tables

from . import profiles
from .checks import check_summaries, check_table
from .harness import (
    INVOCATION_FAULTS,
    STATS,
    FaultSchedule,
    FaultyClient,
    FaultyHandler,
    quick_backoff,
)
from .streams import STREAM_ARN, StreamSpec, after_now, build_stream, settings_for
from .test_exact_counts import COUNTS_TABLE, EVENTS_TABLE, SETTINGS, stream_specs



DELIVERIES = {
    "spec": stream_specs,
    "batch_size": st.integers(1, 30),
    "window_seconds": st.sampled_from([1, 60, 300]),
    "fault_seed": st.integers(0, 2**32),
    "chunking_seed": st.integers(0, 2**32),
}


@profiles.for_test(weight=0.4)
@given(**DELIVERIES)
def test_shard_delivery_through_faults_counts_exactly(
    spec: StreamSpec, batch_size: int, window_seconds: int, fault_seed: int, chunking_seed: int
) -> None:
    """Records fed to ShardDelivery in random chunks, invocations failing as scheduled, into moto."""
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_tables(client, EVENTS_TABLE, COUNTS_TABLE)
        deliver_through_faults(client, COUNTS_TABLE, spec, batch_size, window_seconds, fault_seed, chunking_seed)


@profiles.for_test(weight=0.2)
@given(**DELIVERIES)
def test_shard_delivery_through_faults_counts_exactly_on_dynamodb_local(
    dynamodb_local, spec: StreamSpec, batch_size: int, window_seconds: int, fault_seed: int, chunking_seed: int
) -> None:
    """The same, each stream counted into tables of its own on DynamoDB Local, dated after now (``after_now``)."""
    client = dynamodb_local.client("dynamodb")
    suffix = uuid.uuid4().hex[:10]
    create_tables(client, f"{EVENTS_TABLE}-{suffix}", f"{COUNTS_TABLE}-{suffix}")
    spec = after_now(spec, int(time.time() * 1000))
    deliver_through_faults(client, f"{COUNTS_TABLE}-{suffix}", spec, batch_size, window_seconds, fault_seed, chunking_seed)


def deliver_through_faults(
    client, counts_table: str, spec: StreamSpec, batch_size: int, window_seconds: int, fault_seed: int, chunking_seed: int
) -> None:
    settings = settings_for(spec, SETTINGS)
    stream = build_stream(spec, settings)
    STATS.add("streams")
    STATS.add("streams_with_rules", spec.rules)
    STATS.add("records", stream.records)
    STATS.add("identical_rewrites", stream.identical_rewrites)
    schedule = FaultSchedule(fault_seed, {kind: 0.2 for kind in INVOCATION_FAULTS}, budget=60)
    chunks = random.Random(chunking_seed)
    config = DeliveryConfig(batch_size=batch_size, window_seconds=window_seconds, max_attempts=1_000)
    table = CountsTable(FaultyClient(client, schedule), counts_table, settings, backoff=quick_backoff(fault_seed))
    handler = FaultyHandler(table, settings, schedule)
    summaries = []

    def keep_summary(event, context):
        response = handler(event, context)
        summaries.append(handler.last_summary)
        return response

    def count_failure(event, error, attempts):
        STATS.add("failed_attempts")

    for shard_id, records in stream.shards.items():
        delivery = ShardDelivery(
            keep_summary, shard_id=shard_id, stream_arn=STREAM_ARN, config=config, on_retry=count_failure
        )
        position = 0
        while position < len(records):
            step = chunks.randint(1, 40)
            delivery.deliver(records[position : position + step])
            position += step
        delivery.close()
        STATS.add("invocations", delivery.invocations)
    context = (
        f"reproduce with {spec!r}, batch {batch_size}, window {window_seconds}, "
        f"chunks {chunking_seed}; {schedule!r}"
    )
    check_table(client, counts_table, stream.expected, settings, context, writers=stream.writer_tags())
    check_summaries(summaries, stream.records, stream.expected, context)
