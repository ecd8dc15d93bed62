"""CountsTable against moto: commits, retries, batch gets and queries."""

import threading
import time

import pytest
from botocore.exceptions import ClientError

from moto_tables import COUNTS, no_sleep_backoff, read_counts

import tally
from dataclasses import replace

from tally.core.buckets import Bucket, legacy_sketch_sort_key, sketch_partition
from tally.core.commit import Writer, order_preserving
from tally.core.sketches import Sketch, hash_of
from tally.core.retry import Backoff, commit_backoff, directory_backoff
from tally.core.directory import DIRECTORY_PARTITIONS, day_partitions, legacy_partition, partition_of
from tally.dynamo import CommitFailed, CounterDirectory, CountsTable, DirectoryPage, RetriesExhausted
from tally.core.segments import Segment
from tally.core.units import HOUR_MS, MINUTE_MS

T0 = 1_795_000_000_000 - 1_795_000_000_000 % HOUR_MS
MINUTE = Bucket.of_minute(T0 // MINUTE_MS)
HOUR = Bucket.of_hour(T0 // HOUR_MS)
WRITER = Writer.of_shard("arn:aws:dynamodb:us-east-1:1:table/e/stream/x", "shardId-1")
OTHER_SHARD = Writer.of_shard("arn:aws:dynamodb:us-east-1:1:table/e/stream/x", "shardId-2")


def segment(first="100", delta=3):
    return Segment(first, T0, first, 1, {("c", MINUTE): delta, ("c", HOUR): delta})


class Faulty:
    """Wraps a boto3 client; ``faults[method]`` is a list of callables run (and popped) before the real call."""

    def __init__(self, client):
        self.client = client
        self.faults = {}
        self.calls = {}

    def __getattr__(self, name):
        real = getattr(self.client, name)

        def call(**kwargs):
            self.calls[name] = self.calls.get(name, 0) + 1
            pending = self.faults.get(name)
            if pending:
                return pending.pop(0)(real, kwargs)
            return real(**kwargs)

        return call


def error(code, item=None):
    def raise_it(_real, _kwargs):
        response = {"Error": {"Code": code, "Message": code}}
        if item is not None:
            response["Item"] = item
        raise ClientError(response, "UpdateItem")

    return raise_it


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
    [{}, {"count": {"N": "3"}}, {WRITER.tag: {"B": order_preserving(99)}}, {OTHER_SHARD.tag: {"B": order_preserving(100)}}],
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


def put_counts(client, counter, n):
    for i in range(n):
        client.put_item(
            TableName=COUNTS,
            Item={"pk": {"S": counter}, "sk": {"S": Bucket.of_minute(T0 // MINUTE_MS + i).sort_key}, "count": {"N": str(i + 1)}},
        )


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


def big_segment(counters=150, first="500"):
    deltas = {(f"c{i:03d}", bucket): 1 for i in range(counters) for bucket in (MINUTE, HOUR)}
    return Segment(first, T0, first, len(deltas) // 2, deltas)


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


def test_commits_and_reads_retry_on_their_own_schedules_unless_one_is_given(dynamodb, settings):
    table = CountsTable(dynamodb, COUNTS, settings)
    assert table.commit_backoff is commit_backoff and table.backoff is Backoff
    given = CountsTable(dynamodb, COUNTS, settings, backoff=no_sleep_backoff)
    assert given.commit_backoff is given.backoff is no_sleep_backoff


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


def test_a_sum_past_38_digits_is_refused_as_dynamodb_refuses_it(dynamodb):
    # The local toolkit adds numbers as DynamoDB does; amounts.py keeps real sums far from this.
    key = {"pk": {"S": "x"}, "sk": {"S": "y"}}
    update = {"TableName": COUNTS, "Key": key, "UpdateExpression": "ADD #s :v", "ExpressionAttributeNames": {"#s": "sum"}}
    dynamodb.update_item(**update, ExpressionAttributeValues={":v": {"N": "9" * 38}})
    with pytest.raises(ClientError, match="Number overflow"):
        dynamodb.update_item(**update, ExpressionAttributeValues={":v": {"N": "0.1"}})


def directory_items(dynamodb):
    """Every counter-directory entry in the table: {(partition, counter): ttl}."""
    items = dynamodb.scan(TableName=COUNTS, ConsistentRead=True)["Items"]
    return {(i["pk"]["S"], i["sk"]["S"]): int(i["ttl"]["N"]) for i in items if i["pk"]["S"].startswith("#counters#")}


def test_the_directory_gets_an_entry_when_a_commit_creates_an_hour_item_of_a_day(dynamodb, settings):
    table = CountsTable(dynamodb, COUNTS, settings, backoff=no_sleep_backoff)
    directory = CounterDirectory(dynamodb, COUNTS, settings)
    next_day = Bucket.of_hour(T0 // HOUR_MS + 24)
    deltas = {("c", MINUTE): 1, ("c", HOUR): 1, ("d", next_day): 2, ("#rejected#late_event", HOUR): 1}
    result = directory.recording(table.commit)(Segment("100", T0, "100", 4, deltas), WRITER)

    day = T0 // 86_400_000
    assert set(result.born) == {("c", HOUR), ("d", next_day), ("#rejected#late_event", HOUR)}
    assert directory_items(dynamodb) == {
        (partition_of(day, "c"), "c"): ((day + 1) * 86_400_000 + settings.hour_retention_ms) // 1000,
        (partition_of(day + 1, "d"), "d"): ((day + 2) * 86_400_000 + settings.hour_retention_ms) // 1000,
    }
    assert read_counts(dynamodb, "c") == {MINUTE.sort_key: 1, HOUR.sort_key: 1}


def test_directory_entries_wait_on_the_directory_schedule_and_listings_on_the_plain_one(dynamodb, settings):
    directory = CounterDirectory(dynamodb, COUNTS, settings)
    assert directory.put_backoff is directory_backoff and directory.backoff is Backoff
    assert directory_backoff().attempts > Backoff().attempts
    given = CounterDirectory(dynamodb, COUNTS, settings, backoff=no_sleep_backoff)
    assert given.put_backoff is given.backoff is no_sleep_backoff


def test_only_the_writer_that_creates_an_hour_item_writes_its_entry(dynamodb, settings):
    """Another shard adding to the same hour item learns from the count it gets back that the item is not new:
    its commit puts nothing, however many shards write the counter."""
    table = CountsTable(dynamodb, COUNTS, settings, backoff=no_sleep_backoff)
    client = Faulty(dynamodb)
    first = CounterDirectory(client, COUNTS, settings).recording(table.commit)(segment(), WRITER)
    assert first.born == (("c", HOUR),) and client.calls["batch_write_item"] == 1
    for shard in range(2, 6):
        writer = Writer.of_shard("arn:aws:dynamodb:us-east-1:1:table/e/stream/x", f"shardId-{shard}")
        assert CounterDirectory(client, COUNTS, settings).recording(table.commit)(segment(), writer).born == ()
    assert client.calls["batch_write_item"] == 1 and len(directory_items(dynamodb)) == 1
    assert read_counts(dynamodb, "c") == {MINUTE.sort_key: 15, HOUR.sort_key: 15}


def test_a_warm_directory_writes_an_entry_once_and_a_cold_one_again_changing_nothing(dynamodb, settings):
    client = Faulty(dynamodb)
    directory = CounterDirectory(client, COUNTS, settings)
    assert directory.record([("c", MINUTE), ("c", HOUR)]) == 1
    assert directory.record([("c", MINUTE), ("e", HOUR)]) == 1  # only e is new to it
    before = directory_items(dynamodb)
    assert CounterDirectory(client, COUNTS, settings).record([("c", MINUTE), ("e", HOUR)]) == 2
    assert directory_items(dynamodb) == before and len(before) == 2
    assert client.calls["batch_write_item"] == 3


def test_a_failed_commit_writes_no_entry_and_its_retry_writes_it(dynamodb, settings):
    client = Faulty(dynamodb)
    client.faults["update_item"] = [error("ValidationException")]
    table = CountsTable(client, COUNTS, settings, backoff=no_sleep_backoff, workers=1)
    directory = CounterDirectory(client, COUNTS, settings)
    commit = directory.recording(table.commit)
    with pytest.raises(CommitFailed):
        commit(segment(), WRITER)
    assert directory_items(dynamodb) == {}
    commit(segment(), WRITER)
    commit(segment(), WRITER)  # a retry after a crash between the two finds its watermarks, puts the same entry
    assert list(directory_items(dynamodb)) == [(partition_of(T0 // 86_400_000, "c"), "c")]


def test_a_commit_whose_answer_was_lost_and_whose_process_died_still_gets_its_entry(dynamodb, settings):
    """The hour item was created by a try whose answer never came back, and the process died before its entry:
    the retry, a new container, finds the item applied and puts the entry (a maybe-new item is listed)."""
    client = Faulty(dynamodb)

    def lose_answer(real, kwargs):
        real(**kwargs)
        raise RuntimeError("the invocation timed out with the write done")

    client.faults["update_item"] = [lose_answer]
    table = CountsTable(client, COUNTS, settings, backoff=no_sleep_backoff, workers=1)
    with pytest.raises(RuntimeError):
        CounterDirectory(client, COUNTS, settings).recording(table.commit)(segment(), WRITER)
    assert directory_items(dynamodb) == {}
    result = CounterDirectory(client, COUNTS, settings).recording(table.commit)(segment(), WRITER)
    assert result.already_applied == 1 and result.born == (("c", HOUR),)
    assert list(directory_items(dynamodb)) == [(partition_of(T0 // 86_400_000, "c"), "c")]


def test_directory_entries_left_unprocessed_or_throttled_are_retried(dynamodb, settings):
    client = Faulty(dynamodb)

    def withhold_all(real, kwargs):
        return {"UnprocessedItems": kwargs["RequestItems"]}

    client.faults["batch_write_item"] = [error("ProvisionedThroughputExceededException"), withhold_all]
    directory = CounterDirectory(client, COUNTS, settings, backoff=no_sleep_backoff)
    counters = [f"c{n:02}" for n in range(30)]
    assert directory.record([(name, HOUR) for name in counters]) == 30
    assert sorted(sk for _, sk in directory_items(dynamodb)) == counters
    assert client.calls["batch_write_item"] == 4  # 25 + 5 entries, one throttled and one withheld attempt


def test_directory_entries_never_written_raise_and_are_not_remembered(dynamodb, settings):
    client = Faulty(dynamodb)
    client.faults["batch_write_item"] = [lambda real, kwargs: {"UnprocessedItems": kwargs["RequestItems"]}] * 3
    directory = CounterDirectory(client, COUNTS, settings, backoff=lambda: no_sleep_backoff(attempts=3))
    with pytest.raises(RetriesExhausted):
        directory.record([("c", HOUR)])
    assert directory.written == set() and directory.record([("c", HOUR)]) == 1


def test_the_directory_spreads_a_day_over_its_partitions_and_lists_them_merged_by_name(dynamodb, settings):
    directory = CounterDirectory(dynamodb, COUNTS, settings)
    day = T0 // 86_400_000
    names = [f"jobs/{n:03}" for n in range(120)] + ["jobless", "views/a"]
    directory.record([(name, Bucket.of_hour(day * 24 + n % 2 * 24)) for n, name in enumerate(names)])
    used = {partition for partition, _ in directory_items(dynamodb)}
    assert used <= set(day_partitions(day) + day_partitions(day + 1)) and len(used) == 2 * DIRECTORY_PARTITIONS
    found, requests = directory.counters("jobs/", [day, day + 1])
    assert found == names[:120] and requests == 2 * (DIRECTORY_PARTITIONS + 1)  # with the previous release's
    everything, _ = directory.counters("", [day + 1])
    assert everything == sorted(name for n, name in enumerate(names) if n % 2)
    assert directory.counters("jobs/", [day + 5]) == ([], DIRECTORY_PARTITIONS + 1)


def test_a_listing_pages_in_name_order_each_page_after_the_last_name_of_the_one_before(dynamodb, settings):
    directory = CounterDirectory(dynamodb, COUNTS, settings)
    day = T0 // 86_400_000
    names = [f"views/p{n:04}" for n in range(500)]
    directory.record([(name, Bucket.of_hour(day * 24 + n % 30)) for n, name in enumerate(names)])
    directory.record([(name, Bucket.of_hour(day * 24 + 24)) for name in names[::7]])  # the next day too: once
    pages, after = [], None
    while True:
        page = directory.page("views/", [day, day + 1], after=after, limit=64)
        pages.append(page)
        if not page.more:
            break
        after = page.names[-1]
    assert [name for page in pages for name in page.names] == names
    assert [len(page.names) for page in pages] == [64] * 7 + [52]
    # Lazily: a page reads about its share of each partition, not a page's worth of each.
    assert max(page.requests for page in pages) <= 2 * 2 * (DIRECTORY_PARTITIONS + 1)
    assert directory.page("views/p04", [day], limit=3).names == names[400:403]
    assert directory.page("views/", [day], after=names[-1], limit=3) == DirectoryPage([], DIRECTORY_PARTITIONS + 1, False)


def test_a_listing_merges_the_previous_releases_partition_of_a_day_with_this_ones(dynamodb, settings):
    """The upgrade: a day counted partly by each release lists the counters of both, each once."""
    day = T0 // 86_400_000
    ttl = str((day + 1) * 86_400 + settings.hour_retention_ms // 1000)
    for name in ("a", "c", "old-only"):
        item = {"pk": {"S": legacy_partition(day)}, "sk": {"S": name}, "ttl": {"N": ttl}}
        dynamodb.put_item(TableName=COUNTS, Item=item)
    directory = CounterDirectory(dynamodb, COUNTS, settings)
    directory.record([(name, HOUR) for name in ("a", "b", "c")])
    assert directory.counters("", [day]) == (["a", "b", "c", "old-only"], DIRECTORY_PARTITIONS + 1)
    assert directory.page("", [day], after="a", limit=2).names == ["b", "c"]


def hold_back(count):
    """A BatchWriteItem answer that leaves the last ``count`` requests unprocessed, as DynamoDB does when throttled."""

    def answer(real, kwargs):
        (table, requests), = kwargs["RequestItems"].items()
        done, held = requests[:-count], requests[-count:]
        response = real(RequestItems={table: done}) if done else {}
        return {**response, "UnprocessedItems": {table: held}}

    return answer


def test_deleting_retries_unprocessed_items_until_none_are_left(dynamodb, settings):
    put_counts(dynamodb, "c", 60)
    put_counts(dynamodb, "other", 1)
    client = Faulty(dynamodb)
    client.faults["batch_write_item"] = [hold_back(10), hold_back(3), hold_back(1)]
    table = CountsTable(client, COUNTS, settings, backoff=no_sleep_backoff)
    keys = [(item["pk"], item["sk"]) for item in table.counter_items("c")]
    deleted = []
    assert table.delete_items(keys, on_deleted=deleted.append) == 60
    assert sum(deleted) == 60 and client.calls["batch_write_item"] == 3 + 3  # the first batch of 25 answered with unprocessed items 3 times
    assert table.counter_items("c") == [] and read_counts(dynamodb, "other")


def test_items_unprocessed_after_every_retry_raise(dynamodb, settings):
    put_counts(dynamodb, "c", 2)
    client = Faulty(dynamodb)
    client.faults["batch_write_item"] = [hold_back(1)] * 3
    table = CountsTable(client, COUNTS, settings, backoff=lambda: no_sleep_backoff(attempts=3))
    with pytest.raises(RetriesExhausted):
        table.delete_items([(item["pk"], item["sk"]) for item in table.counter_items("c")])


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


def test_published_settings_read_back_as_published(counts_table, settings):
    assert counts_table.published_settings() is None
    counts_table.publish_settings("Tally-Counter", T0)
    published = counts_table.published_settings()
    assert (published.publisher, published.published_ms) == ("Tally-Counter", T0)
    assert published.settings() == replace(settings, counts_table=published.settings().counts_table)
    assert published.version == tally.__version__


def test_settings_a_release_before_0_2_0_published_read_without_a_version(counts_table, dynamodb):
    counts_table.publish_settings("Tally-Counter", T0)
    dynamodb.update_item(TableName=COUNTS, Key={"pk": {"S": "#settings#"}, "sk": {"S": "counting"}},
                         UpdateExpression="REMOVE version")
    assert counts_table.published_settings().version is None


def visited(first, clients):
    """A segment of one shard: its clients' visits to counter 'v' in one minute and its hour."""
    sketch = Sketch(map(hash_of, clients))
    items = {("v", MINUTE): len(clients), ("v", HOUR): len(clients)}
    return Segment(first, T0, first, len(clients), dict(items), sketches={item: sketch.copy() for item in items})


def shards_visiting(dynamodb, settings, lanes, shard_count, also=()):
    """A table of ``lanes`` lanes on which each of ``shard_count`` shards commits its own client's visit to 'v'
    (and ``also``'s): the table and the shards."""
    table = CountsTable(dynamodb, COUNTS, replace(settings, bucket_lanes=lanes), backoff=no_sleep_backoff)
    shards = [Writer.of_shard("arn:aws:dynamodb:us-east-1:1:table/e/stream/x", f"shardId-{n}") for n in range(shard_count)]
    for n, shard in enumerate(shards):
        table.commit(visited(str(100 + n), [f"c{n}", *also]), shard)
    return table, shards


def passes(real, kwargs):
    return real(**kwargs)


COUNT_UPDATES = [passes, passes]  # a visited segment's two count updates (its hour, its minute) come first


def stored_sketch(dynamodb, bucket, lane=0):
    """Lane ``lane`` of counter 'v''s sketch of ``bucket``, from the lane's own partition."""
    key = {"pk": {"S": sketch_partition("v", lane)}, "sk": {"S": bucket.sort_key}}
    return Sketch.from_bytes(dynamodb.get_item(TableName=COUNTS, Key=key)["Item"]["hll"]["B"])


def put_legacy_sketch(dynamodb, bucket, lane, values):
    """A sketch item as 0.2.0 wrote it: in the counter's own partition, at ``<bucket>#d<lane>``."""
    item = {"pk": {"S": "v"}, "sk": {"S": legacy_sketch_sort_key(bucket.sort_key, lane)},
            "hll": {"B": Sketch(map(hash_of, values)).to_bytes()}, "ttl": {"N": str(bucket.end_ms // 1000 + 86_400)}}
    dynamodb.put_item(TableName=COUNTS, Item=item)


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


def test_reads_union_the_sketch_lanes_of_a_bucket(dynamodb, settings):
    table, shards = shards_visiting(dynamodb, settings, 4, 12, also=["common"])
    assert len({shard.lane(4) for shard in shards}) > 1
    fetched = table.batch_get([("v", HOUR.sort_key)], consistent=True, distinct={"v"})
    assert fetched.sketches[("v", HOUR.sort_key)] == Sketch(map(hash_of, [f"c{n}" for n in range(12)] + ["common"]))
    assert fetched.counts[("v", HOUR.sort_key)] == 24
    ranged = table.query("v", MINUTE.sort_key, MINUTE.sort_key, consistent=True, distinct=True)
    assert ranged.sketches[("v", MINUTE.sort_key)].count() == 13


def test_each_lane_merges_its_sketches_in_a_partition_of_its_own(dynamodb, settings):
    table, shards = shards_visiting(dynamodb, settings, 4, 12)
    lanes = {shard.lane(4) for shard in shards}
    assert len(lanes) > 1
    for lane in lanes:
        written = [f"c{n}" for n, shard in enumerate(shards) if shard.lane(4) == lane]
        assert stored_sketch(dynamodb, HOUR, lane) == stored_sketch(dynamodb, MINUTE, lane) == Sketch(map(hash_of, written))
    in_counter = dynamodb.query(TableName=COUNTS, KeyConditionExpression="pk = :pk", ExpressionAttributeValues={":pk": {"S": "v"}})
    assert not any("hll" in item for item in in_counter["Items"])  # the counter's partition holds its counts only


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


def test_one_query_tells_a_prefix_with_more_names_in_one_partition_than_a_limit(dynamodb, settings):
    day = T0 // 86_400_000
    first = day_partitions(day)[0]
    names = [f"v/{index:03d}" for index in range(400)]
    crowded = [name for name in names if partition_of(day, name) == first]
    CounterDirectory(dynamodb, COUNTS, settings).record([(name, Bucket.of_hour(T0 // HOUR_MS)) for name in names])
    client = Faulty(dynamodb)
    directory = CounterDirectory(client, COUNTS, settings)
    assert directory.exceeds("v/", [day - 1, day], len(crowded) - 1) == (True, 1)
    assert directory.exceeds("v/", [day], len(crowded)) == (False, 1)  # the other partitions may hold more
    assert directory.exceeds("w/", [day], 0) == (False, 1)
    assert client.calls["query"] == 3
