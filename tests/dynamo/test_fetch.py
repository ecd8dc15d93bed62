"""Bucket items read back (tally.dynamo.fetch): exact keys in chunks, ranges across pages, lanes summed and sketches merged."""

from dataclasses import replace

import pytest

from factories import counter_record
from moto_tables import COUNTS, no_sleep_backoff

from tally.core.buckets import Bucket, sketch_partition
from tally.core.commit import RetriesExhausted
from tally.core.ladder import Ladder, late_partition
from tally.core.records import parse_record
from tally.core.segments import Segment, SegmentFolder
from tally.core.sketches import Sketch, hash_of
from tally.core.units import DAY_MS, MINUTE_MS
from tally.dynamo.counts_table import CountsTable

from .support import T0, MINUTE, HOUR, WRITER, Faulty, error, put_counts, visited, shards_visiting, put_legacy_sketch


def test_batch_get_reads_more_than_100_keys_in_chunks(counts_table, dynamodb):
    put_counts(dynamodb, "c", 150)
    keys = [("c", Bucket.of_minute(T0 // MINUTE_MS + i).sort_key) for i in range(250)]
    fetched = counts_table.batch_get(keys)
    assert fetched.requests == 3
    assert fetched.items == 150
    assert sum(fetched.counts.values()) == sum(range(1, 151))


def withhold(count):
    """A BatchGetItem answer that leaves the last ``count`` keys unprocessed, as DynamoDB does past 16 MB."""

    def answer(real, kwargs):
        (table, request), = kwargs["RequestItems"].items()
        served, held = request["Keys"][:-count], request["Keys"][-count:]
        response = real(RequestItems={table: {**request, "Keys": served}}) if served else {"Responses": {table: []}}
        response["UnprocessedKeys"] = {table: {**request, "Keys": held}}
        return response

    return answer


def test_unprocessed_keys_are_fetched_until_none_are_left(dynamodb, settings):
    put_counts(dynamodb, "c", 60)
    client = Faulty(dynamodb)
    client.faults["batch_get_item"] = [withhold(40), withhold(10), withhold(1)]
    table = CountsTable(client, COUNTS, settings, backoff=no_sleep_backoff)
    fetched = table.batch_get([("c", Bucket.of_minute(T0 // MINUTE_MS + i).sort_key) for i in range(60)])
    assert fetched.requests == 4
    assert sum(fetched.counts.values()) == sum(range(1, 61))


def test_keys_left_unprocessed_after_every_retry_raise(dynamodb, settings):
    put_counts(dynamodb, "c", 5)
    client = Faulty(dynamodb)
    client.faults["batch_get_item"] = [withhold(1)] * 3
    table = CountsTable(client, COUNTS, settings, backoff=lambda: no_sleep_backoff(attempts=3))
    with pytest.raises(RetriesExhausted):
        table.batch_get([("c", Bucket.of_minute(T0 // MINUTE_MS + i).sort_key) for i in range(5)])


def test_throttled_reads_are_retried(dynamodb, settings):
    put_counts(dynamodb, "c", 3)
    client = Faulty(dynamodb)
    client.faults["query"] = [error("ProvisionedThroughputExceededException")]
    table = CountsTable(client, COUNTS, settings, backoff=no_sleep_backoff)
    fetched = table.query("c", "M#", "M#~")
    assert sum(fetched.counts.values()) == 6
    assert client.calls["query"] == 2


def test_query_reads_a_range_across_pages(dynamodb, settings):
    put_counts(dynamodb, "c", 30)

    def one_page_of(limit):
        def answer(real, kwargs):
            return real(**kwargs, Limit=limit)

        return answer

    client = Faulty(dynamodb)
    client.faults["query"] = [one_page_of(10), one_page_of(10)]
    table = CountsTable(client, COUNTS, settings, backoff=no_sleep_backoff)
    first, last = Bucket.of_minute(T0 // MINUTE_MS + 2), Bucket.of_minute(T0 // MINUTE_MS + 27)
    fetched = table.query("c", first.sort_key, last.sort_key)
    assert fetched.requests == 3
    assert fetched.items == 26
    assert sum(fetched.counts.values()) == sum(range(3, 29))


LARGEST_AMOUNT_UNITS = 10**26 - 1  # 999999999999999999.99999999: the largest amount a rule sums


def test_sums_of_the_largest_amounts_are_stored_and_read_back_exactly(counts_table, dynamodb):
    # 10^10 of them and a little more in one bucket: 36 digits, past Python's default 28 and DynamoDB's way to 38.
    many = 10**10 * LARGEST_AMOUNT_UNITS + 99
    for first in ("100", "200"):
        summing = Segment(first, T0, first, 1, {("rev", MINUTE): 10**10, ("rev", HOUR): 10**10})
        summing.sums = {("rev", MINUTE): many, ("rev", HOUR): many}
        counts_table.commit(summing, WRITER)
    stored = dynamodb.get_item(TableName=COUNTS, Key={"pk": {"S": "rev"}, "sk": {"S": MINUTE.sort_key}})["Item"]
    assert stored["sum"] == {"N": "19999999999999999999999999800.00000198"}  # 2 x (10^28 - 100 + 99 x 10^-8)
    fetched = counts_table.batch_get([("rev", MINUTE.sort_key), ("rev", HOUR.sort_key)], consistent=True)
    assert fetched.sums == {("rev", MINUTE.sort_key): 2 * many, ("rev", HOUR.sort_key): 2 * many}
    assert counts_table.query("rev", MINUTE.sort_key, MINUTE.sort_key, consistent=True).sums == {
        ("rev", MINUTE.sort_key): 2 * many
    }


def test_a_counters_items_are_read_across_pages(dynamodb, settings):
    put_counts(dynamodb, "c", 30)
    client = Faulty(dynamodb)
    client.faults["query"] = [lambda real, kwargs: real(**kwargs, Limit=7)] * 5
    items = CountsTable(client, COUNTS, settings).counter_items("c")
    assert [item["count"] for item in items] == list(range(1, 31))
    assert client.calls["query"] == 5 + 1  # its partition's five pages, then its one sketch lane's partition


def test_a_counters_items_include_its_sketches_in_every_lane_partition(dynamodb, settings):
    table, shards = shards_visiting(dynamodb, settings, 3, 8)
    lanes = {shard.lane(3) for shard in shards}
    items = {(item["pk"], item["sk"]) for item in table.counter_items("v")}
    sketches = {(sketch_partition("v", lane), bucket.sort_key) for lane in lanes for bucket in (MINUTE, HOUR)}
    assert sketches <= items and all(pk == "v" for pk, _ in items - sketches)


def test_reads_union_the_sketch_lanes_of_a_bucket(dynamodb, settings):
    table, shards = shards_visiting(dynamodb, settings, 4, 12, also=["common"])
    assert len({shard.lane(4) for shard in shards}) > 1
    fetched = table.batch_get([("v", HOUR.sort_key)], consistent=True, distinct={"v"})
    assert fetched.sketches[("v", HOUR.sort_key)] == Sketch(map(hash_of, [f"c{n}" for n in range(12)] + ["common"]))
    assert fetched.counts[("v", HOUR.sort_key)] == 24
    ranged = table.query("v", MINUTE.sort_key, MINUTE.sort_key, consistent=True, distinct=True)
    assert ranged.sketches[("v", MINUTE.sort_key)].count() == 13


def test_reads_merge_the_sketches_0_2_0_left_in_the_counters_partition(dynamodb, settings):
    """An upgrade in place: a bucket counted partly before it keeps both releases' sketch items until they
    expire, and every read merges both."""
    laned = replace(settings, bucket_lanes=2)
    put_legacy_sketch(dynamodb, HOUR, 0, ["old-a", "both"])
    put_legacy_sketch(dynamodb, HOUR, 1, ["old-b"])
    put_legacy_sketch(dynamodb, MINUTE, 1, ["old-b"])
    table = CountsTable(dynamodb, COUNTS, laned, backoff=no_sleep_backoff)
    table.commit(visited("100", ["new", "both"]), WRITER)
    everyone = Sketch(map(hash_of, ["old-a", "old-b", "both", "new"]))
    fetched = table.batch_get([("v", HOUR.sort_key), ("v", MINUTE.sort_key)], consistent=True, distinct={"v"})
    assert fetched.sketches == {("v", HOUR.sort_key): everyone, ("v", MINUTE.sort_key): Sketch(map(hash_of, ["old-b", "new", "both"]))}
    assert fetched.counts == {("v", HOUR.sort_key): 2, ("v", MINUTE.sort_key): 2}
    client = Faulty(dynamodb)
    ranged = CountsTable(client, COUNTS, laned, backoff=no_sleep_backoff).query(
        "v", HOUR.sort_key, HOUR.sort_key, consistent=True, distinct=True
    )
    assert ranged.sketches == {("v", HOUR.sort_key): everyone} and ranged.counts == {("v", HOUR.sort_key): 2}
    assert client.calls["query"] == ranged.requests == 3  # the counter's range (0.2.0's sketches in it), each lane's


def test_a_counters_items_include_its_days_and_months_and_their_late_marks_are_their_own_attributes(dynamodb, settings):
    """Deleting a counter that keeps days deletes them too; a late record's marks are read with its hour and day."""
    kept = replace(settings, calendar_prefixes=("c",))
    table = CountsTable(dynamodb, COUNTS, kept)
    [late] = parse_record(counter_record("c", T0, arrival_s=(T0 + 3 * DAY_MS) / 1000), kept)
    folder = SegmentFolder(ladder=Ladder.of(kept))
    list(folder.fold([[late]]))
    table.commit(folder.close(), WRITER)
    kinds = {(item["pk"], item["sk"].split("#")[0]) for item in table.counter_items("c")}
    assert kinds == {("c", "H"), ("c", "D"), ("c", "MO")}
    days, months = table.query("c", "D#", "D#~"), table.query("c", "MO#", "MO#~")
    assert set(days.late_counts.values()) == {1} and len(days.late_counts) == 1  # UTC's day: its mark
    assert months.counts and not months.late_counts  # a month is never closed into anything: no marks
    assert table.query("c", "H#", "H#~").late_counts and not table.query(late_partition("c"), "D#", "H#~").counts
