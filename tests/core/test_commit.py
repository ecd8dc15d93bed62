from decimal import Decimal

import pytest

from tally.core.buckets import Bucket, lane_sort_key
from tally.core.commit import (
    MARKER_PREFIX,
    Outcome,
    classify_cancellation,
    lane_of,
    marker_key,
    source_id,
    transact_items,
)
from tally.core.histograms import bin_of
from tally.core.segments import MAX_ITEM_BINS, Segment
from tally.core.settings import HOUR_MS, Settings

T0 = 1_795_000_000_000 - 1_795_000_000_000 % HOUR_MS


def segment():
    return Segment(
        first_sequence="100",
        first_arrival_ms=T0,
        last_sequence="180",
        records=81,
        deltas={("b", Bucket.of_hour(T0 // HOUR_MS)): 5, ("a", Bucket.of_minute(T0 // 60_000)): 76},
    )


def test_marker_put_first_then_one_add_per_bucket():
    [part] = segment().parts()
    items = transact_items(segment(), 0, part, "counts", "src", Settings())
    put = items[0]["Put"]
    assert put["Item"]["pk"] == {"S": MARKER_PREFIX + "100"}
    assert put["Item"]["sk"] == {"S": "src#0"}
    assert put["Item"]["last"] == {"S": "180"}
    assert put["Item"]["records"] == {"N": "81"}
    assert put["ConditionExpression"] == "attribute_not_exists(#pk)"
    updates = [item["Update"] for item in items[1:]]
    assert [u["Key"]["pk"]["S"] for u in updates] == ["a", "b"]
    assert updates[0]["UpdateExpression"] == "ADD #count :delta SET #ttl = if_not_exists(#ttl, :ttl)"
    assert updates[0]["ExpressionAttributeValues"][":delta"] == {"N": "76"}
    assert updates[1]["ExpressionAttributeValues"][":delta"] == {"N": "5"}
    assert updates[1]["ExpressionAttributeValues"][":ttl"] == {"N": str((T0 + HOUR_MS + 90 * 86_400_000) // 1000)}
    assert all(item.get("Put", item.get("Update"))["TableName"] == "counts" for item in items)


def test_the_marker_outlives_stream_retention():
    [part] = segment().parts()
    ttl = int(transact_items(segment(), 0, part, "counts", "src", Settings())[0]["Put"]["Item"]["ttl"]["N"])
    assert ttl * 1000 >= T0 + 24 * HOUR_MS


def test_markers_are_deterministic_and_tell_parts_shards_and_streams_apart():
    assert marker_key(segment(), source_id("arn1", "shard-1"), 0) == marker_key(segment(), source_id("arn1", "shard-1"), 0)
    assert marker_key(segment(), "src", 0) != marker_key(segment(), "src", 1)
    assert source_id("arn1", "shard-1") != source_id("arn1", "shard-2")
    assert source_id("arn1", None) != source_id("arn2", None)


def codes(*names):
    return [{"Code": name} for name in names]


@pytest.mark.parametrize(
    ("reasons", "outcome"),
    [
        (codes("ConditionalCheckFailed", "None", "None"), Outcome.DUPLICATE),
        (codes("ConditionalCheckFailed"), Outcome.DUPLICATE),
        (codes("None", "TransactionConflict", "None"), Outcome.RETRY),
        (codes("ConditionalCheckFailed", "TransactionConflict"), Outcome.RETRY),
        (codes("None", "ThrottlingError"), Outcome.RETRY),
        (codes("None", "ProvisionedThroughputExceeded"), Outcome.RETRY),
        (codes("None", "ConditionalCheckFailed"), Outcome.FAIL),  # a bucket's condition is not the marker's
        (codes("ConditionalCheckFailed", "ConditionalCheckFailed"), Outcome.FAIL),
        (codes("None", "ValidationError"), Outcome.FAIL),
        (codes("ConditionalCheckFailed", "ValidationError"), Outcome.FAIL),
        ([], Outcome.FAIL),
    ],
)
def test_only_a_lone_marker_condition_failure_means_already_committed(reasons, outcome):
    assert classify_cancellation(reasons) is outcome


def test_one_lane_writes_the_buckets_own_items():
    [part] = segment().parts()
    items = transact_items(segment(), 0, part, "counts", "src", Settings(bucket_lanes=1))
    assert [item["Update"]["Key"]["sk"]["S"] for item in items[1:]] == [
        Bucket.of_minute(T0 // 60_000).sort_key,
        Bucket.of_hour(T0 // HOUR_MS).sort_key,
    ]


def test_with_lanes_a_shard_writes_its_own_lane_of_every_bucket_every_time():
    [part] = segment().parts()
    settings = Settings(bucket_lanes=8)
    sources = [source_id("arn", f"shardId-{n}") for n in range(200)]
    lanes = {source: lane_of(source, 8) for source in sources}
    assert set(lanes.values()) == set(range(8))  # shards spread over every lane
    for source in sources[:20]:
        items = transact_items(segment(), 0, part, "counts", source, settings)
        keys = [item["Update"]["Key"]["sk"]["S"] for item in items[1:]]
        assert keys == [lane_sort_key(b.sort_key, lanes[source]) for b in (Bucket.of_minute(T0 // 60_000), Bucket.of_hour(T0 // HOUR_MS))]
        assert keys == [item["Update"]["Key"]["sk"]["S"] for item in transact_items(segment(), 0, part, "counts", source, settings)[1:]]


def test_histogram_bins_are_added_beside_the_count_in_the_same_update():
    item = ("load", Bucket.of_minute(T0 // 60_000))
    bins = {bin_of(Decimal(5)): 2, bin_of(Decimal(-5)): 1, bin_of(0): 2}
    with_bins = Segment("100", T0, "102", 3, deltas={item: 5}, sums={item: 0}, bins={item: bins})
    [part] = with_bins.parts()
    [update] = [action["Update"] for action in transact_items(with_bins, 0, part, "counts", "src", Settings())[1:]]
    expression = update["UpdateExpression"]
    assert expression.startswith("ADD #count :delta, #sum :sum, ") and expression.endswith(" SET #ttl = if_not_exists(#ttl, :ttl)")
    names, values = update["ExpressionAttributeNames"], update["ExpressionAttributeValues"]
    added = dict(term.split(" ") for term in expression[len("ADD ") : expression.index(" SET")].split(", "))
    assert {names[name]: int(values[value]["N"]) for name, value in added.items() if name not in ("#count", "#sum")} == bins
    assert len([name for name in values if name.startswith(":b")]) == 2  # one value per distinct count


def test_an_update_naming_the_most_bins_a_segment_allows_fits_in_dynamodbs_expression_limit():
    item = ("x" * 255, Bucket.of_minute(T0 // 60_000))
    # The widest placeholders: every bin a distinct count.
    bins = {bin_of(-Decimal(1.03**k)): 10**6 + k for k in range(MAX_ITEM_BINS)}
    wide = Segment("100", T0, "100", 1, deltas={item: 1}, sums={item: 10**20}, bins={item: bins})
    [part] = wide.parts()
    [update] = [action["Update"] for action in transact_items(wide, 0, part, "counts", "src", Settings())[1:]]
    assert len(bins) == MAX_ITEM_BINS
    assert len(update["UpdateExpression"].encode()) <= 4096 - 512  # room to spare for other terms
