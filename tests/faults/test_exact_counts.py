"""Exact counts under retries, duplicates and faults: random streams, random deployments, seeded faults.

After each stream is drained and the faults have stopped, the counts table
must hold exactly the buckets the accepted events make, every window queried
by either plan must equal a brute-force count, and every rejection must be
accounted for under its reason.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass

import boto3
import pytest
from hypothesis import given
from hypothesis import strategies as st
from moto import mock_aws
from sweeps import sweep
from tally.local.delivery import DeliveryConfig
from tally.dynamo.counts_table import CountsTable
from tally.dynamo.tables import create_tables
from tally.core.records import Reason, parse_record
from tally.core.segments import MAX_SEGMENT_ITEMS
from tally.core.settings import Settings
from tally.core.units import HOUR_MS

from . import profiles
from .checks import check_directory, check_ranks, check_summaries, check_table, check_windows, scanned
from .harness import (
    READ_FAULTS,
    REQUEST_FAULTS,
    STATS,
    WRITE_FAULTS,
    FaultKind,
    FaultSchedule,
    FaultyClient,
    FaultyHandler,
    LambdaShard,
    interleave,
    quick_backoff,
    segment_limit,
)
from .streams import STREAM_ARN, Stream, StreamSpec, build_stream, outcome_labels, placement, settings_for

EVENTS_TABLE = "tally-events"
COUNTS_TABLE = "tally-counts"
SETTINGS = Settings(counts_table=COUNTS_TABLE, events_table=EVENTS_TABLE, ranked_prefixes=("",))
# 2026-03-29T00:00Z: streams start around a day boundary (and a DST change elsewhere, which UTC ignores).
DAY_BOUNDARY_MS = 1_774_742_400_000


@dataclass(frozen=True)
class Deployment:
    """How Lambda reads the stream, and which faults hit it."""

    batch_size: int
    window_seconds: int
    fault_seed: int
    fault_rate: float
    fault_budget: int
    query_seed: int
    segment_items: int = MAX_SEGMENT_ITEMS
    lanes: int = 1  # bucket lanes: each shard adds to one, reads sum them all
    workers: int = 1  # updates of a segment sent at once (1: faults strike in a reproducible order)

    def config(self) -> DeliveryConfig:
        return DeliveryConfig(batch_size=self.batch_size, window_seconds=self.window_seconds)


stream_specs = st.builds(
    StreamSpec,
    seed=st.integers(0, 2**32),
    writes=st.integers(0, 150),
    counters=st.one_of(st.integers(1, 12), st.integers(40, 120)),  # many counters fill segments
    hot_share=st.sampled_from([0.0, 0.5, 0.9]),
    start_ms=st.integers(DAY_BOUNDARY_MS - 2 * HOUR_MS, DAY_BOUNDARY_MS + HOUR_MS),
    max_gap_s=st.sampled_from([0, 1, 5, 30, 120]),
    jump_share=st.sampled_from([0.0, 0.02, 0.1]),
    odd_share=st.sampled_from([0.0, 0.1, 0.3]),
    rewrite_share=st.sampled_from([0.0, 0.1, 0.3]),
    shards=st.integers(1, 3),
    rules=st.booleans(),
    edge_share=st.sampled_from([0.0, 0.05, 0.2]),
)

deployments = st.builds(
    Deployment,
    batch_size=st.one_of(st.integers(1, 12), st.sampled_from([100, 1000])),
    window_seconds=st.sampled_from([1, 10, 60, 300, 900]),
    fault_seed=st.integers(0, 2**32),
    fault_rate=st.sampled_from([0.0, 0.05, 0.15, 0.3]),
    fault_budget=st.integers(0, 80),
    query_seed=st.integers(0, 2**32),
    segment_items=st.sampled_from([2, 3, 9, 40, MAX_SEGMENT_ITEMS]),
    lanes=st.sampled_from([1, 1, 2, 4]),
    workers=st.sampled_from([1, 1, 4]),
)


def drain(stream: Stream, deployment: Deployment, client, settings: Settings, kinds) -> tuple[list, FaultSchedule]:
    """Deliver every shard through faults of ``kinds`` until all of it is processed; return the summaries."""
    rates = {kind: deployment.fault_rate for kind in kinds}
    schedule = FaultSchedule(deployment.fault_seed, rates, deployment.fault_budget)
    table = CountsTable(
        FaultyClient(client, schedule),
        COUNTS_TABLE,
        settings,
        backoff=quick_backoff(deployment.fault_seed),
        workers=deployment.workers,
    )
    handler = FaultyHandler(table, settings, schedule)
    shards = [
        LambdaShard(
            records,
            shard_id=shard_id,
            stream_arn=STREAM_ARN,
            config=deployment.config(),
            handler=handler,
            schedule=schedule,
        )
        for shard_id, records in stream.shards.items()
    ]
    interleave(shards, random.Random(deployment.fault_seed))
    return [summary for shard in shards for summary in shard.summaries], schedule


def run_and_check(
    spec: StreamSpec,
    deployment: Deployment,
    settings: Settings = SETTINGS,
    write_faults: frozenset | set = WRITE_FAULTS,
    instants: int = 4,
) -> None:
    settings = settings_for(spec, dataclasses.replace(settings, bucket_lanes=deployment.lanes))
    stream = build_stream(spec, settings)
    STATS.add("streams_with_rules", spec.rules)
    check_stream(stream, deployment, settings, write_faults, instants)


def check_stream(
    stream: Stream,
    deployment: Deployment,
    settings: Settings,
    write_faults: frozenset | set = WRITE_FAULTS,
    instants: int = 4,
) -> None:
    """Every record parses as the generator meant; drained through faults, the table and windows are exact."""
    spec = stream.spec
    STATS.add("streams")
    STATS.add("records", stream.records)
    STATS.add("identical_rewrites", stream.identical_rewrites)
    for _, event_ms, arrival_ms in stream.expected.events:
        hour_only = len(placement(event_ms, arrival_ms, settings) or ()) == 1
        STATS.add("events_in_hour_only" if hour_only else "events_in_minute_and_hour")
    STATS.add("late_rejections", stream.expected.rejections_by_reason()[Reason.LATE_EVENT])
    context = f"reproduce with {spec!r}, {deployment!r}"
    for records in stream.shards.values():
        for record in records:
            outcomes = parse_record(record, settings)
            intent = stream.expected.intents[record["dynamodb"]["SequenceNumber"]]
            got = outcome_labels(outcomes)
            assert got == intent, f"record {record} parsed as {outcomes}, meant {intent}; {context}"

    with mock_aws(), segment_limit(deployment.segment_items):
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_tables(client, EVENTS_TABLE, COUNTS_TABLE)
        summaries, schedule = drain(stream, deployment, client, settings, write_faults)
        context += f"; {schedule!r}"
        items = scanned(client, COUNTS_TABLE)  # the drained table, read once for every check below
        check_table(client, COUNTS_TABLE, stream.expected, settings, context, writers=stream.writer_tags(), items=items)
        check_directory(client, COUNTS_TABLE, stream.expected, context, items)
        check_ranks(client, COUNTS_TABLE, settings, context, items)
        check_summaries(summaries, stream.records, stream.expected, context)

        read_rates = {kind: 0.3 for kind in READ_FAULTS}
        reads = FaultSchedule(deployment.query_seed, read_rates, budget=10**6)
        table = CountsTable(
            FaultyClient(client, reads), COUNTS_TABLE, settings, backoff=quick_backoff(deployment.query_seed)
        )
        check_windows(
            table, client, stream.expected, settings, random.Random(deployment.query_seed), instants, context, items=items
        )


@profiles.for_test(weight=0.5)
@given(spec=stream_specs, deployment=deployments)
def test_counts_are_exact_after_faults_and_redeliveries(spec: StreamSpec, deployment: Deployment) -> None:
    run_and_check(spec, deployment)


# Faults that only act on a failed invocation, and the failure that gives them one.
NEEDS_A_FAILURE = {FaultKind.RETRY_RECUT: {FaultKind.TIMEOUT_AFTER_RETURN, FaultKind.CRASH_BEFORE_COMMIT}}


ALL_FAULTS = sorted(WRITE_FAULTS | READ_FAULTS, key=lambda kind: kind.value)
# Faults of one request, which need no invocation cut in pieces: these meet the wide stream.
WIDE_STREAM_FAULTS = READ_FAULTS | REQUEST_FAULTS


@pytest.mark.parametrize("kind", sweep(ALL_FAULTS), ids=lambda kind: kind.value)
def test_each_fault_alone_leaves_counts_exact(kind: FaultKind) -> None:
    """Every fault kind at a high rate, on its own, against invocations of several segments.

    Events are stamped up to two minutes before their arrival, 30 s after midnight,
    so their buckets straddle a day boundary. Two shards add to lanes of their own.
    Every stream is counted by the rules, so each fault meets sums and histogram
    bins as well as counts. Faults of one request meet a wide stream under the
    real segment limits (a segment of over a hundred buckets); the others a
    narrow one under a tiny segment limit, so that commits come in many pieces.
    """
    wide = kind in WIDE_STREAM_FAULTS
    spec = StreamSpec(
        seed=7,
        writes=240 if wide else 60,  # over a hundred buckets per shard's window
        counters=150 if wide else 20,
        hot_share=0.3,
        start_ms=DAY_BOUNDARY_MS + 30_000,
        max_gap_s=1,
        jump_share=0.0,
        odd_share=0.2,
        rewrite_share=0.2,
        shards=2,
        rules=True,
        edge_share=0.1,
    )
    deployment = Deployment(
        batch_size=100 if wide else 15,
        window_seconds=900,
        fault_seed=11,
        fault_rate=0.5,
        fault_budget=40,
        query_seed=3,
        segment_items=MAX_SEGMENT_ITEMS if wide else 9,
        lanes=3,
        workers=4 if wide else 1,
    )
    kinds = {kind} | NEEDS_A_FAILURE.get(kind, set())
    before = STATS.faults[kind.value]
    run_and_check(spec, deployment, write_faults=kinds & WRITE_FAULTS, instants=3 if kind in READ_FAULTS else 1)
    assert STATS.faults[kind.value] > before, f"{kind.value} was never injected"
