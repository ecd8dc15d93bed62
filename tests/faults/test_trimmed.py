"""A stream trimmed under a reader: the shard never stops, no bucket goes above its truth, every bucket below
it is marked with a bound that holds, and the repair brings every one to brute force; on moto and DynamoDB Local."""

from __future__ import annotations

import time
import uuid

import boto3
import pytest
from hypothesis import given
from hypothesis import strategies as st
from moto import mock_aws

from tally.core.buckets import bucket_sort_key
from tally.core.repair import Recount, bound_of, correction
from tally.core.tables import UNRESOLVED_ATTRIBUTE, UNRESOLVED_PARTITION
from tally.dynamo.counts_table import CountsTable
from tally.dynamo.tables import create_tables

from . import profiles
from .checks import check_table, table_buckets
from .streams import Stream, StreamSpec, after_now, build_stream, settings_for
from .test_exact_counts import COUNTS_TABLE, EVENTS_TABLE, SETTINGS
from .test_reread import Reader, Run, configs
from tally.local.delivery import DeliveryConfig


def trimmed_reread(client, counts_table: str, stream: Stream, first: Run, second: DeliveryConfig, settings) -> CountsTable:
    """A first reader takes part of each shard; then every record is trimmed from the stream, and a second reader,
    handed the records all the same (it had read them before the trim), counts the shard again to its end."""
    table = CountsTable(client, counts_table, settings, read_again=stream.read_again)
    for shard_id, records in stream.shards.items():
        Reader(table, stream, settings, shard_id, first.config).read(
            records[: int(len(records) * first.stop_share)], page=first.page, close=first.close
        )
    stream.trimmed.update({shard_id: len(records) for shard_id, records in stream.shards.items()})
    for shard_id, records in stream.shards.items():
        Reader(table, stream, settings, shard_id, second).read(records)
    return table


def check_trimmed_then_repaired(client, counts_table: str, stream: Stream, first: Run, second: DeliveryConfig, settings) -> int:
    context = f"reproduce with {stream.spec!r}, {first!r}, {second!r}"
    table = trimmed_reread(client, counts_table, stream, first, second, settings)
    truth = stream.expected.buckets(settings)
    items = client.scan(TableName=counts_table, ConsistentRead=True)["Items"]
    marks: dict[tuple[str, str], set[str]] = {}
    for item in items:
        if UNRESOLVED_ATTRIBUTE in item:
            marks.setdefault((item["pk"]["S"], bucket_sort_key(item["sk"]["S"])), set()).update(item[UNRESOLVED_ATTRIBUTE]["SS"])
    stored = table_buckets(client, counts_table)
    for key in truth.keys() | stored.keys():
        lacking = truth.get(key, 0) - stored.get(key, 0)
        assert lacking >= 0, f"{key} holds {stored.get(key)} of {truth.get(key)}: above its truth; {context}"
        assert lacking <= (bound_of(marks[key]) if key in marks else 0), f"{key} lacks {lacking}, marked {marks.get(key)}; {context}"
    recorded = {(r["counter"]["S"], r["bucket"]["S"]) for r in table.unresolved_records()}
    assert recorded == set(marks), f"records {sorted(recorded)[:4]} against marks {sorted(marks)[:4]}; {context}"

    # The repair, with the brute force as its recount, brings every marked bucket to its truth, once.
    sums, bins = stream.expected.bucket_sums(settings), stream.expected.bucket_bins(settings)
    records = table.unresolved_records()
    for counter, bucket in sorted(marks):
        recount = Recount(truth.get((counter, bucket), 0), sums.get((counter, bucket)), dict(bins.get((counter, bucket), {})))
        lanes = table.bucket_lanes(counter, bucket)
        fix = correction(lanes, recount)
        assert not isinstance(fix, str), f"{counter} {bucket}: {fix}; {context}"
        mine = [r for r in records if (r["counter"]["S"], r["bucket"]["S"]) == (counter, bucket)]
        assert table.repair_bucket(counter, bucket, lanes, fix, mine, "repair test")
        assert isinstance(correction(table.bucket_lanes(counter, bucket), recount), str)  # nothing left to repair
    assert table.unresolved_records() == []
    remaining = [item for item in client.scan(TableName=counts_table, ConsistentRead=True)["Items"]
                 if UNRESOLVED_ATTRIBUTE in item or item["pk"]["S"] == UNRESOLVED_PARTITION]
    assert not remaining, context
    check_table(client, counts_table, stream.expected, settings, context, writers=stream.writer_tags())
    return len(marks)


@profiles.for_test(weight=0.3)
@given(
    spec=st.builds(
        StreamSpec, seed=st.integers(0, 2**32), writes=st.integers(20, 120), counters=st.integers(1, 8),
        hot_share=st.sampled_from([0.0, 0.5]), start_ms=st.just(1_774_742_400_000), max_gap_s=st.sampled_from([0, 1, 5]),
        jump_share=st.just(0.0), odd_share=st.sampled_from([0.0, 0.1]), rewrite_share=st.sampled_from([0.0, 0.1]),
        shards=st.integers(1, 2), rules=st.booleans(),
    ),
    first=st.builds(Run, config=configs, page=st.sampled_from([1, 1000]), stop_share=st.floats(0.2, 0.8), close=st.booleans()),
    second=st.builds(DeliveryConfig, batch_size=st.integers(1, 10), window_seconds=st.sampled_from([60, 300, 900])),
)
def test_a_stream_trimmed_under_a_reader_never_stops_it_and_the_repair_ends_exact(spec, first, second):
    settings = settings_for(spec, SETTINGS)
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_tables(client, EVENTS_TABLE, COUNTS_TABLE)
        check_trimmed_then_repaired(client, COUNTS_TABLE, build_stream(spec, settings), first, second, settings)


SPEC = StreamSpec(
    seed=41, writes=150, counters=4, hot_share=0.5, start_ms=1_774_742_400_000, max_gap_s=2, jump_share=0.0,
    odd_share=0.1, rewrite_share=0.1, shards=2, rules=True,
)


@pytest.mark.parametrize("backend", ["moto", "dynamodb-local"])
def test_a_trimmed_stream_on_both_backends(backend, request):
    first, second = Run(DeliveryConfig(1000, 10), stop_share=0.5), DeliveryConfig(3, 900)
    if backend == "moto":
        with mock_aws():
            client = boto3.client("dynamodb", region_name="us-east-1")
            create_tables(client, EVENTS_TABLE, COUNTS_TABLE)
            settings = settings_for(SPEC, SETTINGS)
            marked = check_trimmed_then_repaired(client, COUNTS_TABLE, build_stream(SPEC, settings), first, second, settings)
    else:
        client = request.getfixturevalue("dynamodb_local").client("dynamodb")
        suffix = uuid.uuid4().hex[:10]
        create_tables(client, f"{EVENTS_TABLE}-{suffix}", f"{COUNTS_TABLE}-{suffix}")
        spec = after_now(SPEC, int(time.time() * 1000))
        settings = settings_for(spec, SETTINGS)
        marked = check_trimmed_then_repaired(client, f"{COUNTS_TABLE}-{suffix}", build_stream(spec, settings), first, second, settings)
    assert marked > 0  # the case leaves items unresolved: the repair had work to do
