"""Segments committed to moto's DynamoDB (tally.dynamo.commit): exactly once, retried, several updates at a time, sketches merged."""

import threading
import time
from dataclasses import replace

import pytest
from botocore.exceptions import ClientError

from moto_tables import COUNTS, no_sleep_backoff, read_counts

from tally.core.buckets import lane_sort_key
from tally.core.commit import THROUGH, Anchor, RetriesExhausted, anchor_key, legacy_marker_key, order_preserving
from tally.core.lanes import LANES_LEAD_MS, LaneHistory
from tally.core.settings import Settings
from tally.core.units import HOUR_MS, MINUTE_MS
from tally.core.retry import commit_backoff
from tally.core.sketches import Sketch, hash_of
from tally.dynamo.commit import CommitFailed
from tally.dynamo.counts_table import CountsTable

from .support import (
    T0,
    MINUTE,
    HOUR,
    WRITER,
    OTHER_SHARD,
    segment,
    Faulty,
    error,
    big_segment,
    visited,
    shards_visiting,
    COUNT_UPDATES,
    stored_sketch,
)


def test_a_commit_adds_every_delta_once(counts_table, dynamodb):
    result = counts_table.commit(segment(), WRITER)
    assert (result.applied, result.already_applied, result.retries) == (2, 0, 0)
    assert read_counts(dynamodb, "c") == {MINUTE.sort_key: 3, HOUR.sort_key: 3}


def test_the_same_segment_again_is_already_applied_and_changes_nothing(counts_table, dynamodb):
    counts_table.commit(segment(), WRITER)
    assert counts_table.commit(segment(), WRITER).already_applied == 2
    assert read_counts(dynamodb, "c") == {MINUTE.sort_key: 3, HOUR.sort_key: 3}
    assert counts_table.commit(segment(), OTHER_SHARD).applied == 2  # another shard: its own watermark
    item = dynamodb.get_item(TableName=COUNTS, Key={"pk": {"S": "c"}, "sk": {"S": MINUTE.sort_key}})["Item"]
    assert {name for name in item if name.startswith("~")} == {WRITER.tag, OTHER_SHARD.tag}
    assert item["count"] == {"N": "6"}


def test_an_earlier_segment_of_the_same_shard_replayed_later_is_skipped(counts_table, dynamodb):
    counts_table.commit(segment("100000000000000000200"), WRITER)
    assert counts_table.commit(segment("100000000000000000100"), WRITER).already_applied == 2
    assert read_counts(dynamodb, "c") == {MINUTE.sort_key: 3, HOUR.sort_key: 3}


def test_bucket_ttl_is_set_once_and_never_moved(counts_table, dynamodb, settings):
    counts_table.commit(segment("1"), WRITER)
    counts_table.commit(segment("2"), WRITER)
    item = dynamodb.get_item(TableName=COUNTS, Key={"pk": {"S": "c"}, "sk": {"S": MINUTE.sort_key}})["Item"]
    assert int(item["ttl"]["N"]) == MINUTE.ttl_seconds(settings)
    assert int(item["count"]["N"]) == 6


@pytest.mark.parametrize(
    "code",
    [
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "TransactionConflictException",
        "InternalServerError",
        "RequestLimitExceeded",
    ],
)
def test_throttling_and_conflicts_with_transactions_are_retried_then_applied_once(dynamodb, settings, code):
    client = Faulty(dynamodb)
    client.faults["update_item"] = [error(code), error(code)]
    table = CountsTable(client, COUNTS, settings, backoff=no_sleep_backoff)
    result = table.commit(segment(), WRITER)
    assert (result.applied, result.retries) == (2, 2)
    assert client.calls["update_item"] == 4
    assert read_counts(dynamodb, "c") == {MINUTE.sort_key: 3, HOUR.sort_key: 3}


def test_an_answer_lost_after_the_write_is_found_applied_by_the_retry(dynamodb, settings):
    def lost_answer(real, kwargs):
        real(**kwargs)
        raise ClientError({"Error": {"Code": "InternalServerError", "Message": "lost"}}, "UpdateItem")

    client = Faulty(dynamodb)
    client.faults["update_item"] = [lost_answer]
    table = CountsTable(client, COUNTS, settings, backoff=no_sleep_backoff)
    result = table.commit(segment(), WRITER)
    assert (result.applied, result.already_applied, result.retries) == (1, 1, 1)
    assert read_counts(dynamodb, "c") == {MINUTE.sort_key: 3, HOUR.sort_key: 3}


def test_throttling_that_never_ends_raises_so_lambda_retries(dynamodb, settings):
    client = Faulty(dynamodb)
    client.faults["update_item"] = [error("ThrottlingException")] * 3
    table = CountsTable(client, COUNTS, settings, backoff=lambda: no_sleep_backoff(attempts=3))
    with pytest.raises(RetriesExhausted, match="still throttled"):
        table.commit(segment(), WRITER)
    assert read_counts(dynamodb, "c") == {}  # hours go first: the minutes never started


@pytest.mark.parametrize(
    "old",
    [{}, {"count": {"N": "3"}}, {WRITER.tag: {"B": order_preserving(99) + THROUGH}}, {OTHER_SHARD.tag: {"B": order_preserving(100)}}],
    ids=["no item", "no watermark", "an earlier watermark", "another shard's"],
)
def test_a_failed_condition_the_watermark_does_not_explain_fails_the_commit(dynamodb, settings, old):
    client = Faulty(dynamodb)
    client.faults["update_item"] = [error("ConditionalCheckFailedException", item=old)]
    table = CountsTable(client, COUNTS, settings, backoff=no_sleep_backoff)
    with pytest.raises(CommitFailed, match="condition its watermark does not explain"):
        table.commit(segment("100"), WRITER)


def test_a_real_validation_failure_raises_and_is_not_retried(counts_table, dynamodb):
    # A bucket whose count is not a number makes DynamoDB refuse the ADD.
    dynamodb.put_item(TableName=COUNTS, Item={"pk": {"S": "c"}, "sk": {"S": MINUTE.sort_key}, "count": {"S": "x"}})
    with pytest.raises(CommitFailed, match="ValidationException"):
        counts_table.commit(segment(), WRITER)
    hour = dynamodb.get_item(TableName=COUNTS, Key={"pk": {"S": "c"}, "sk": {"S": HOUR.sort_key}})["Item"]
    assert hour["count"] == {"N": "3"}  # item by item: the hour went first, a retry skips it


def test_other_errors_surface_unchanged(dynamodb, settings):
    client = Faulty(dynamodb)
    client.faults["update_item"] = [error("AccessDeniedException")]
    table = CountsTable(client, COUNTS, settings, backoff=no_sleep_backoff)
    with pytest.raises(CommitFailed, match="AccessDeniedException"):
        table.commit(segment(), WRITER)
    assert client.calls["update_item"] == 1


def test_a_segment_half_applied_before_a_crash_is_completed_by_the_retry(dynamodb, settings):
    client = Faulty(dynamodb)

    def lost_response(real, kwargs):
        real(**kwargs)
        raise TimeoutError("the write landed, the invocation died")

    client.faults["update_item"] = [lambda real, kwargs: real(**kwargs)] * 200 + [lost_response]
    table = CountsTable(client, COUNTS, settings, backoff=no_sleep_backoff, workers=1)
    with pytest.raises(TimeoutError):
        table.commit(big_segment(), WRITER)  # 300 items: the 150 hours and 51 minutes land
    result = table.commit(big_segment(), WRITER)  # the retried invocation
    assert (result.already_applied, result.applied) == (201, 99)
    assert client.calls["update_item"] == 201 + 300
    assert all(read_counts(dynamodb, f"c{i:03d}") == {MINUTE.sort_key: 1, HOUR.sort_key: 1} for i in range(150))


class Slow:
    """Every UpdateItem takes 20 ms; records how many were in flight at once."""

    def __init__(self, client, fail_on=None):
        self.client, self.fail_on = client, fail_on
        self.lock, self.now, self.most, self.calls = threading.Lock(), 0, 0, 0

    def __getattr__(self, name):
        return getattr(self.client, name)

    def update_item(self, **kwargs):
        with self.lock:
            self.now, self.calls = self.now + 1, self.calls + 1
            self.most = max(self.most, self.now)
            fail = self.calls == self.fail_on
        try:
            time.sleep(0.02)
            if fail:
                raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "no"}}, "UpdateItem")
            return self.client.update_item(**kwargs)
        finally:
            with self.lock:
                self.now -= 1


def test_the_updates_of_a_segment_go_out_several_at_a_time_up_to_the_workers(dynamodb, settings):
    client = Slow(dynamodb)
    table = CountsTable(client, COUNTS, settings, backoff=no_sleep_backoff, workers=8)
    assert table.commit(big_segment(40), WRITER).applied == 80
    assert client.most == 8
    assert all(read_counts(dynamodb, f"c{i:03d}") == {MINUTE.sort_key: 1, HOUR.sort_key: 1} for i in range(40))


def test_a_failed_update_stops_the_rest_of_its_segment_and_is_raised(dynamodb, settings):
    client = Slow(dynamodb, fail_on=3)
    table = CountsTable(client, COUNTS, settings, backoff=no_sleep_backoff, workers=4)
    with pytest.raises(CommitFailed, match="AccessDeniedException"):
        table.commit(big_segment(100), WRITER)
    assert client.calls < 100  # the hours not started yet were never sent, the minutes never started
    assert not any(read_counts(dynamodb, f"c{i:03d}").get(MINUTE.sort_key) for i in range(100))


def test_a_commit_waits_its_turn_behind_many_shards_within_the_function_timeout(dynamodb, settings):
    # The commit schedule: many short pauses (at most a second each), and all of them well inside 60 s.
    schedule = commit_backoff()
    worst = sum(min(schedule.cap_seconds, schedule.base_seconds * 2 ** (n - 1)) for n in range(1, schedule.attempts))
    assert schedule.attempts >= 20 and worst <= 30
    client = Faulty(dynamodb)
    client.faults["update_item"] = [error("ThrottlingException")] * (schedule.attempts - 1)
    pauses = []
    table = CountsTable(client, COUNTS, settings)
    table.commit_backoff = lambda: replace(commit_backoff(), sleep=pauses.append)
    result = table.commit(segment(), WRITER)
    assert (result.applied, result.retries) == (2, schedule.attempts - 1)
    assert len(pauses) == schedule.attempts - 1 and max(pauses) <= schedule.cap_seconds
    assert read_counts(dynamodb, "c") == {MINUTE.sort_key: 3, HOUR.sort_key: 3}


def test_a_sum_past_38_digits_is_refused_as_dynamodb_refuses_it(dynamodb):
    # The local toolkit adds numbers as DynamoDB does; amounts.py keeps real sums far from this.
    key = {"pk": {"S": "x"}, "sk": {"S": "y"}}
    update = {"TableName": COUNTS, "Key": key, "UpdateExpression": "ADD #s :v", "ExpressionAttributeNames": {"#s": "sum"}}
    dynamodb.update_item(**update, ExpressionAttributeValues={":v": {"N": "9" * 38}})
    with pytest.raises(ClientError, match="Number overflow"):
        dynamodb.update_item(**update, ExpressionAttributeValues={":v": {"N": "0.1"}})


def test_sketches_merge_into_their_own_items_beside_the_counts(counts_table, dynamodb):
    counts_table.commit(visited("100", ["a", "b"]), WRITER)
    result = counts_table.commit(visited("200", ["b", "c"]), WRITER)
    assert result.sketches_written == 2
    assert stored_sketch(dynamodb, HOUR) == Sketch(map(hash_of, "abc"))
    assert read_counts(dynamodb, "v") == {MINUTE.sort_key: 4, HOUR.sort_key: 4}  # the count items hold no sketch
    again = counts_table.commit(visited("200", ["b", "c"]), WRITER)  # a retry of the same segment
    assert (again.applied, again.already_applied, again.sketches_written) == (0, 2, 0)  # the union holds them
    assert read_counts(dynamodb, "v")[HOUR.sort_key] == 4


def test_a_sketch_write_that_loses_a_race_merges_again_with_the_winners_values(dynamodb, settings):
    faulty = Faulty(dynamodb)
    other = CountsTable(dynamodb, COUNTS, settings, backoff=no_sleep_backoff)

    def another_shard_commits_first(real, kwargs):
        other.commit(visited("900", ["z"]), OTHER_SHARD)  # between this writer's read and its write
        return real(**kwargs)

    faulty.faults["update_item"] = [*COUNT_UPDATES, another_shard_commits_first]  # at its first sketch write
    result = CountsTable(faulty, COUNTS, settings, backoff=no_sleep_backoff).commit(visited("100", ["a"]), WRITER)
    assert result.sketch_conflicts == 2 and result.sketches_written == 2  # it wrote both items first
    assert stored_sketch(dynamodb, HOUR) == stored_sketch(dynamodb, MINUTE) == Sketch(map(hash_of, "az"))


def test_throttled_sketch_writes_are_sent_again_and_other_errors_fail_the_commit(dynamodb, settings):
    faulty = Faulty(dynamodb)
    table = CountsTable(faulty, COUNTS, settings, backoff=no_sleep_backoff)
    faulty.faults["update_item"] = [*COUNT_UPDATES, error("ProvisionedThroughputExceededException")]
    table.commit(visited("100", ["a"]), WRITER)
    assert stored_sketch(dynamodb, HOUR) == Sketch([hash_of("a")])
    faulty.faults["update_item"] = [*COUNT_UPDATES, error("ValidationException")]
    with pytest.raises(CommitFailed, match="sketch write"):
        table.commit(visited("200", ["b"]), WRITER)


def test_each_lane_merges_its_sketches_in_a_partition_of_its_own(dynamodb, settings):
    table, shards = shards_visiting(dynamodb, settings, 4, 12)
    lanes = {shard.lane(4) for shard in shards}
    assert len(lanes) > 1
    for lane in lanes:
        written = [f"c{n}" for n, shard in enumerate(shards) if shard.lane(4) == lane]
        assert stored_sketch(dynamodb, HOUR, lane) == stored_sketch(dynamodb, MINUTE, lane) == Sketch(map(hash_of, written))
    in_counter = dynamodb.query(TableName=COUNTS, KeyConditionExpression="pk = :pk", ExpressionAttributeValues={":pk": {"S": "v"}})
    assert not any("hll" in item for item in in_counter["Items"])  # the counter's partition holds its counts only


def test_a_segment_committed_in_part_and_retried_after_lanes_were_raised_adds_nothing_twice(dynamodb):
    """The function counted with one lane; a batch's hour items were written, then its minute update failed. The
    stack is deployed again with four lanes before Lambda's retry: the retry writes the lane of the lanes in force
    when the batch's records arrived, where its hours already are. Without the lanes' history it wrote the writer's
    new lane, and the hour counted twice."""
    now = T0 + 10 * MINUTE_MS
    writer = next(w for w in (WRITER, OTHER_SHARD) if w.lane(4) != 0)  # four lanes move it off lane 0
    one_lane = CountsTable(Faulty(dynamodb), COUNTS, Settings(bucket_lanes=1), backoff=no_sleep_backoff)
    assert one_lane.adopt_lanes(now) == LaneHistory.always(1)
    one_lane.client.faults["update_item"] = [lambda real, kwargs: real(**kwargs), error("ValidationException")]
    with pytest.raises(CommitFailed):
        one_lane.commit(segment(), writer)  # hours first, then the minute fails
    assert read_counts(dynamodb, "c") == {HOUR.sort_key: 3}

    four_lanes = CountsTable(dynamodb, COUNTS, Settings(bucket_lanes=4), backoff=no_sleep_backoff)
    history = four_lanes.adopt_lanes(now + MINUTE_MS)
    assert history.changes == ((0, 1), (now + MINUTE_MS + LANES_LEAD_MS, 4))
    result = four_lanes.commit(segment(), writer)  # the retry, arrived at T0: one lane
    assert (result.applied, result.already_applied) == (1, 1)
    assert read_counts(dynamodb, "c") == {HOUR.sort_key: 3, MINUTE.sort_key: 3}
    # A batch that arrives once the four lanes are in force writes the writer's lane of four.
    later = replace(segment("200"), first_arrival_ms=now + MINUTE_MS + LANES_LEAD_MS)
    four_lanes.commit(later, writer)
    stored = {item["sk"]["S"] for item in dynamodb.scan(TableName=COUNTS)["Items"] if item["pk"]["S"] == "c"}
    assert lane_sort_key(HOUR.sort_key, writer.lane(4)) in stored


def test_a_function_with_the_same_lanes_writes_no_history_and_the_first_starts_from_the_last_published(dynamodb):
    table = CountsTable(dynamodb, COUNTS, Settings(bucket_lanes=2), backoff=no_sleep_backoff)
    table.publish_settings("earlier", 0)  # the function before counted with 2 lanes
    raised = CountsTable(dynamodb, COUNTS, Settings(bucket_lanes=8), backoff=no_sleep_backoff)
    history = raised.adopt_lanes(T0)
    assert history.changes == ((0, 2), (T0 + LANES_LEAD_MS, 8))
    assert raised.lane_history(consistent=True) == (history, 1)
    assert raised.adopt_lanes(T0 + HOUR_MS) == history  # its next cold start writes nothing
    assert raised.lane_history(consistent=True)[1] == 1


def test_functions_starting_at_once_agree_on_one_history(dynamodb):
    """Two instances of the new configuration race their first write: one wins, the other reads it and agrees."""
    tables = [CountsTable(dynamodb, COUNTS, Settings(bucket_lanes=4), backoff=no_sleep_backoff) for _ in range(2)]
    CountsTable(dynamodb, COUNTS, Settings(bucket_lanes=1), backoff=no_sleep_backoff).adopt_lanes(0)
    start = threading.Barrier(2)
    results = []

    def adopt(table):
        start.wait()
        results.append(table.adopt_lanes(T0))

    threads = [threading.Thread(target=adopt, args=(table,)) for table in tables]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results[0] == results[1] == LaneHistory(((0, 1), (T0 + LANES_LEAD_MS, 4)))


def test_a_shards_anchor_is_put_once_and_every_reader_of_the_shard_then_holds_that_one(dynamodb, settings):
    """Two readers of a shard (a mapping and the one replacing it) meeting the previous release's watermarks at
    once: the first anchor put wins, and the other reader judges by it too."""
    key = anchor_key(WRITER)
    went_on = Anchor(200, 260, True, "went on").item(key, T0)
    reread = Anchor(100, 150, False, "from the trim horizon").item(key, T0)
    first, second = CountsTable(dynamodb, COUNTS, settings), CountsTable(dynamodb, COUNTS, settings)
    assert second._read_anchor(key) is None
    assert first._put_anchor(went_on) == went_on
    assert Anchor.of_item(second._put_anchor(reread)) == Anchor.of_item(went_on)
    assert Anchor.of_item(CountsTable(dynamodb, COUNTS, settings)._read_anchor(key)) == Anchor.of_item(went_on)


def test_a_segment_the_previous_release_committed_in_part_skips_the_transaction_its_marker_names(dynamodb, settings):
    """Markers read strongly consistent from the table: the items of a transaction whose marker exists are taken."""
    marker = legacy_marker_key(segment(), WRITER.legacy_source, 0)
    dynamodb.put_item(TableName=COUNTS, Item={name: {"S": value} for name, value in marker.items()})
    result = CountsTable(dynamodb, COUNTS, settings, previous_release_until_ms=T0 + 1).commit(segment(), WRITER)
    assert (result.applied, result.already_applied) == (0, 2)
    assert read_counts(dynamodb, "c") == {}
    assert CountsTable(dynamodb, COUNTS, settings, previous_release_until_ms=0).commit(segment("200"), WRITER).applied == 2
