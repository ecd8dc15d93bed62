"""CountsTable's own parts: the retry schedules it picks, and deleting items."""

import pytest

from moto_tables import COUNTS, no_sleep_backoff, read_counts

from tally.core.commit import RetriesExhausted
from tally.core.retry import Backoff, commit_backoff
from tally.dynamo.counts_table import CountsTable

from .support import Faulty, put_counts


def test_commits_and_reads_retry_on_their_own_schedules_unless_one_is_given(dynamodb, settings):
    table = CountsTable(dynamodb, COUNTS, settings)
    assert table.commit_backoff is commit_backoff and table.backoff is Backoff
    given = CountsTable(dynamodb, COUNTS, settings, backoff=no_sleep_backoff)
    assert given.commit_backoff is given.backoff is no_sleep_backoff


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
