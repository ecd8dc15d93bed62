"""What bucket updates cost, on moto: asked on every update, summed, published, and a warning naming the lanes to set
once the items grow past ITEM_GROWTH_KB (tally.core.item_growth; the stack's ItemGrowthAlarm reads the metric)."""

import pytest

from bench.cost import item_size, write_units
from factories import LambdaContext, counter_record, window_event
from moto_tables import COUNTS, no_sleep_backoff

from tally.dynamo.counts_table import CountsTable
from tally.functions import stream_handler
from tally.invocation import process

from .test_stream_handler import T0, emitted

HOUR_KEY = {"pk": {"S": "c"}, "sk": {"S": "H#2026-11-18T11"}}
# What moto answers every UpdateItem, whatever the item's size, asked or not (docs/design.md, Running locally).
MOTO_UPDATE_UNITS = 0.5


class Recording:
    """moto's client, keeping every UpdateItem request it forwards."""

    def __init__(self, client):
        self.client, self.requests = client, []

    def __getattr__(self, name):
        return getattr(self.client, name)

    def update_item(self, **request):
        self.requests.append(request)
        return self.client.update_item(**request)


class ChargedByDynamoDBsRules(Recording):
    """moto, answering each UpdateItem the units DynamoDB charges (bench/cost.py, checked against DynamoDB Local):
    one per started KB of the larger of the item before and after the update."""

    def update_item(self, **request):
        def size():
            item = self.client.get_item(TableName=request["TableName"], Key=request["Key"], ConsistentRead=True)
            return item_size(item.get("Item", {}))

        before = size()
        response = super().update_item(**request)
        response["ConsumedCapacity"] = {"TableName": request["TableName"], "CapacityUnits": float(write_units(max(before, size())))}
        return response


def test_every_bucket_update_asks_for_its_units_and_the_commit_sums_what_dynamodb_answers(dynamodb, settings):
    client = Recording(dynamodb)
    table = CountsTable(client, COUNTS, settings, backoff=no_sleep_backoff)
    summary = process(window_event([counter_record("c", T0), counter_record("d", T0)], final=True), table.commit, settings)[1]
    assert [request["ReturnConsumedCapacity"] for request in client.requests] == ["TOTAL"] * 4
    assert summary.bucket_updates == 4
    assert (summary.bucket_write_units, summary.largest_bucket_write_units) == (4 * MOTO_UPDATE_UNITS, MOTO_UPDATE_UNITS)
    assert summary.item_growth() is None


def test_the_handler_publishes_what_its_bucket_updates_cost_and_the_largest_item(lambda_handler, capsys, caplog):
    lambda_handler(window_event([counter_record("c", T0)], final=True), LambdaContext())
    totals = next(blob for blob in emitted(capsys) if "BucketWriteUnits" in blob)
    assert (totals["BucketUpdates"], totals["BucketWriteUnits"], totals["LargestBucketItemKB"]) == (
        [2], [2 * MOTO_UPDATE_UNITS], [MOTO_UPDATE_UNITS]
    )
    [kb] = [m for m in totals["_aws"]["CloudWatchMetrics"][0]["Metrics"] if m["Name"] == "LargestBucketItemKB"]
    assert kb["Unit"] == "Kilobytes"
    [done] = [r for r in caplog.records if r.getMessage() == "invocation done"]
    assert (done.bucket_write_units, done.largest_bucket_item_kb) == (2 * MOTO_UPDATE_UNITS, MOTO_UPDATE_UNITS)
    assert not [r for r in caplog.records if r.getMessage() == "bucket items growing"]


@pytest.mark.filterwarnings("ignore:No application metrics to publish")
def test_an_invocation_that_updates_no_bucket_publishes_no_item_size(lambda_handler, capsys):
    lambda_handler(window_event([counter_record("c", T0)]), LambdaContext())  # not final: the segment waits
    totals = next(blob for blob in emitted(capsys) if "BucketUpdates" in blob)
    assert totals["BucketUpdates"] == [0] and "LargestBucketItemKB" not in totals and "BucketWriteUnits" not in totals


def test_an_item_holding_300_shards_watermarks_logs_the_lanes_to_set(lambda_handler, dynamodb, settings, capsys, caplog):
    """300 shards write one counter's hour with one lane: its item holds 300 watermarks of 20 bytes (6 KB), and
    the warning asks for about one lane per 64 shards: 5."""
    table = CountsTable(dynamodb, COUNTS, settings, backoff=no_sleep_backoff)
    for shard in range(299):
        event = window_event([counter_record("c", T0)], final=True, shard_id=f"shardId-{shard:020d}-aaaaaaaa")
        process(event, table.commit, settings)
    handler_table = stream_handler.counts_table()
    handler_table.client = ChargedByDynamoDBsRules(handler_table.client)
    capsys.readouterr()
    lambda_handler(window_event([counter_record("c", T0)], final=True), LambdaContext())

    stored = dynamodb.get_item(TableName=COUNTS, Key=HOUR_KEY, ConsistentRead=True)["Item"]
    assert sum(name.startswith("~") for name in stored) == 300
    units = write_units(item_size(stored))
    assert units == 6  # 300 watermarks of 20 bytes, the key, the count and the TTL: 6,035 bytes
    [warning] = [r for r in caplog.records if r.getMessage() == "bucket items growing"]
    assert warning.levelname == "WARNING"
    assert (warning.largest_bucket_item_kb, warning.watermarks_on_item) == (6, 308)  # 6 KB over 20 bytes, rounded up
    assert (warning.bucket_lanes, warning.recommended_bucket_lanes) == (1, 5)
    assert warning.shard == window_event([])["shardId"]
    totals = next(blob for blob in emitted(capsys) if "LargestBucketItemKB" in blob)
    assert totals["LargestBucketItemKB"] == [6.0]
