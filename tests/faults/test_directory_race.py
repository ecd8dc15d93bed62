"""Two shards creating the same hour item at once: the counter directory gets its entry, whatever the order.

The entry of a (day, counter) is put by the writer whose update created one of
its hour items, told by the update's answer: the count it returns equals what
it added. Two shards adding to a new hour item at once must therefore each get
the count as their own update left it, or neither knows it was first, and the
counter disappears from listings of that day. The race is forced here, not
waited for: the second shard commits in the instant between the first one's
write and its answer.
"""

from __future__ import annotations

import threading

import boto3
from factories import STREAM_ARN, counter_record, window_event
from moto import mock_aws
from moto.dynamodb import models
from tally.core.directory import partition_of
from tally.core.settings import Settings
from tally.core.units import DAY_MS
from tally.dynamo.counts_table import CountsTable
from tally.dynamo.directory import CounterDirectory
from tally.dynamo.tables import create_tables
from tally.invocation import process

from .harness import quick_backoff

COUNTS, EVENTS = "race-counts", "race-events"
EVENT_MS = 1_795_000_000_000  # 2026-11-18T11:06:40Z
SHARDS = ("shardId-00000001700000000000-first", "shardId-00000001700000000000-second")
# How long the first writer waits for the second to finish in its gap: only a backend that holds the
# first writer's answer back (as DynamoDB does) makes it wait that long.
GAP_S = 0.5


def commit_one_event(client, shard_id: str) -> None:
    """One shard's invocation: one event of ``views/home`` in the same minute, committed and recorded."""
    settings = Settings(counts_table=COUNTS, events_table=EVENTS)
    table = CountsTable(client, COUNTS, settings, backoff=quick_backoff(1))
    directory = CounterDirectory(client, COUNTS, settings, backoff=quick_backoff(2))
    event = window_event([counter_record("views/home", EVENT_MS)], final=True, shard_id=shard_id)
    assert event["eventSourceARN"] == STREAM_ARN
    process(event, directory.recording(table.commit), settings)


def test_two_shards_creating_one_hour_item_at_once_leave_its_directory_entry(monkeypatch):
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_tables(client, EVENTS, COUNTS)
        second_done = threading.Event()
        raced = []
        update_item = models.DynamoDBBackend.update_item

        def second_shard_in_the_gap(self, *args, **kwargs):
            """The first shard's first write (its hour item, which it creates), then the whole second shard."""
            item = update_item(self, *args, **kwargs)
            if not raced:
                raced.append(threading.current_thread().name)
                second = threading.Thread(target=lambda: (commit_one_event(client, SHARDS[1]), second_done.set()))
                second.start()
                second_done.wait(GAP_S)
            return item

        monkeypatch.setattr(models.DynamoDBBackend, "update_item", second_shard_in_the_gap)
        commit_one_event(client, SHARDS[0])
        assert second_done.wait(10), "the second shard never finished"
        monkeypatch.undo()

        hour = client.get_item(TableName=COUNTS, Key={"pk": {"S": "views/home"}, "sk": {"S": "H#2026-11-18T11"}})
        assert hour["Item"]["count"]["N"] == "2"  # both added, one at a time
        entries = client.query(
            TableName=COUNTS,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": partition_of(EVENT_MS // DAY_MS, "views/home")}},
            ConsistentRead=True,
        )["Items"]
        assert [entry["sk"]["S"] for entry in entries] == ["views/home"], "the directory lost the counter's day"
