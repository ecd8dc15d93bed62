"""The counter directory in the table (tally.dynamo.directory): entries written beside commits, listings merged by name."""

import pytest

from moto_tables import COUNTS, no_sleep_backoff, read_counts

from tally.core.buckets import Bucket
from tally.core.commit import RetriesExhausted, Writer
from tally.core.directory import DIRECTORY_PARTITIONS, day_partitions, legacy_partition, partition_of
from tally.core.retry import Backoff, directory_backoff
from tally.core.segments import Segment
from tally.core.units import HOUR_MS
from tally.dynamo.commit import CommitFailed
from tally.dynamo.counts_table import CountsTable
from tally.dynamo.directory import CounterDirectory, DirectoryPage

from .support import T0, MINUTE, HOUR, WRITER, segment, Faulty, error


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
