"""A shard's records read again through the Streams API: moto's, DynamoDB Local's, and answers they never give."""

import uuid

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from tally.core.commit import ReadRecords, Writer
from tally.dynamo.stream import ShardRecords, lambda_record
from tally.dynamo.tables import create_tables

STREAM_ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/e/stream/2026-11-22T00:00:00.000"
SHARD = "shardId-00000001700000000000-aaaaaaaa"


def written(dynamodb, streams, events: str, count: int) -> tuple[str, str, list[dict]]:
    """``count`` items put into the events table, and the records its stream holds for them (Lambda's shape)."""
    for n in range(count):
        dynamodb.put_item(TableName=events, Item={"id": {"S": f"e{n}"}, "counter": {"S": "c"}, "ts": {"N": "1"}})
    arn = dynamodb.describe_table(TableName=events)["Table"]["LatestStreamArn"]
    shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
    iterator = streams.get_shard_iterator(StreamArn=arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
    records: list[dict] = []
    while len(records) < count:
        page = streams.get_records(ShardIterator=iterator)
        records += [lambda_record(record, arn) for record in page["Records"]]
        iterator = page["NextShardIterator"]
    return arn, shard, records


def check_ranges(dynamodb, streams, events: str) -> None:
    arn, shard, records = written(dynamodb, streams, events, 12)
    sequences = [r["dynamodb"]["SequenceNumber"] for r in records]
    writer = Writer.of_shard(arn, shard)
    for limit in (1, 5, 1000):
        again = ShardRecords(streams, limit=limit).read(ReadRecords(writer, sequences[2], sequences[8]))
        assert again.records is not None, again.why_not
        assert [r["dynamodb"]["SequenceNumber"] for r in again.records] == sequences[2:9]
        assert [r["dynamodb"]["NewImage"] for r in again.records] == [r["dynamodb"]["NewImage"] for r in records[2:9]]
        assert again.records[0]["eventSourceARN"] == arn
        assert again.requests >= 2 + (6 // limit if limit < 7 else 0)  # an iterator, then a page per `limit` records


def check_first_records(dynamodb, streams, events: str) -> None:
    """A shard's first records, for its anchor: from the trim horizon, through a record, at most so many."""
    arn, shard, records = written(dynamodb, streams, events, 12)
    sequences = [r["dynamodb"]["SequenceNumber"] for r in records]
    writer = Writer.of_shard(arn, shard)
    for limit in (1, 5, 1000):
        reader = ShardRecords(streams, limit=limit)
        again = reader.read(ReadRecords(writer, None, sequences[6], at_most=1000))
        assert [r["dynamodb"]["SequenceNumber"] for r in again.records] == sequences[:7]
        assert again.records[0]["eventSourceARN"] == arn
        again = reader.read(ReadRecords(writer, None, sequences[6], at_most=3))
        assert [r["dynamodb"]["SequenceNumber"] for r in again.records] == sequences[:3]
    before_the_first = str(int(sequences[0]) - 1)
    assert ShardRecords(streams).read(ReadRecords(writer, None, before_the_first, at_most=1000)).records == []


def test_a_range_reads_again_whole_through_motos_streams_in_pages_of_any_limit():
    with mock_aws():
        dynamodb = boto3.client("dynamodb", region_name="us-east-1")
        create_tables(dynamodb, "events", "counts")
        check_ranges(dynamodb, boto3.client("dynamodbstreams", region_name="us-east-1"), "events")


def test_a_range_reads_again_whole_through_dynamodb_locals_streams(dynamodb_local):
    suffix = uuid.uuid4().hex[:10]
    dynamodb = dynamodb_local.client("dynamodb")
    create_tables(dynamodb, f"events-{suffix}", f"counts-{suffix}")
    check_ranges(dynamodb, dynamodb_local.client("dynamodbstreams"), f"events-{suffix}")


def test_a_shards_first_records_read_from_its_trim_horizon_on_moto_and_dynamodb_local(dynamodb_local):
    with mock_aws():
        dynamodb = boto3.client("dynamodb", region_name="us-east-1")
        create_tables(dynamodb, "events", "counts")
        check_first_records(dynamodb, boto3.client("dynamodbstreams", region_name="us-east-1"), "events")
    suffix = uuid.uuid4().hex[:10]
    dynamodb = dynamodb_local.client("dynamodb")
    create_tables(dynamodb, f"events-{suffix}", f"counts-{suffix}")
    check_first_records(dynamodb, dynamodb_local.client("dynamodbstreams"), f"events-{suffix}")


def test_a_shards_first_records_read_past_empty_pages_and_a_trimmed_shard_answers_none():
    reader, stubber = stubbed()
    first = ReadRecords(Writer.of_shard(STREAM_ARN, SHARD), None, str(FIRST + 3), at_most=10)
    stubber.add_response("get_shard_iterator", {"ShardIterator": "i" * 20},
                         {"StreamArn": STREAM_ARN, "ShardId": SHARD, "ShardIteratorType": "TRIM_HORIZON"})
    stubber.add_response("get_records", {"Records": [], "NextShardIterator": "j" * 20})
    stubber.add_response("get_records", {"Records": [boto3_record(FIRST), boto3_record(FIRST + 9)], "NextShardIterator": "k" * 20})
    with stubber:
        again = reader.read(first)
    assert [r["dynamodb"]["SequenceNumber"] for r in again.records] == [str(FIRST)] and again.requests == 3
    reader, stubber = stubbed()
    stubber.add_client_error("get_shard_iterator", "ResourceNotFoundException", "no such shard")
    with stubber:
        again = reader.read(first)
    assert again.records is None and "ResourceNotFoundException" in again.why_not


def stubbed() -> tuple[ShardRecords, Stubber]:
    client = boto3.client("dynamodbstreams", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    return ShardRecords(client, limit=2), Stubber(client)


def boto3_record(sequence: int) -> dict:
    return {"eventName": "INSERT", "dynamodb": {"SequenceNumber": str(sequence), "NewImage": {"id": {"S": str(sequence)}}}}


FIRST = 100_000_000_000_000_000_010
STEP = ReadRecords(Writer.of_shard(STREAM_ARN, SHARD), str(FIRST), str(FIRST + 3))


def test_a_trimmed_range_answers_none_with_the_reason_and_no_retry():
    reader, stubber = stubbed()
    stubber.add_client_error("get_shard_iterator", "TrimmedDataAccessException", "records trimmed")
    with stubber:
        again = reader.read(STEP)
    assert again.records is None and "TrimmedDataAccessException" in again.why_not and again.requests == 1


def test_records_that_start_past_the_first_asked_for_are_a_trimmed_range():
    reader, stubber = stubbed()
    stubber.add_response("get_shard_iterator", {"ShardIterator": "i" * 20})
    stubber.add_response("get_records", {"Records": [boto3_record(FIRST + 1)], "NextShardIterator": "j" * 20})
    with stubber:
        again = reader.read(STEP)
    assert again.records is None and f"is {FIRST + 1}" in again.why_not


def test_an_expired_iterator_goes_on_after_the_last_record_read_and_empty_pages_are_read_past():
    reader, stubber = stubbed()
    stubber.add_response("get_shard_iterator", {"ShardIterator": "i" * 20},
                         {"StreamArn": STREAM_ARN, "ShardId": SHARD, "ShardIteratorType": "AT_SEQUENCE_NUMBER", "SequenceNumber": str(FIRST)})
    stubber.add_response("get_records", {"Records": [boto3_record(FIRST), boto3_record(FIRST + 1)], "NextShardIterator": "j" * 20})
    stubber.add_client_error("get_records", "ExpiredIteratorException", "expired")
    stubber.add_response("get_shard_iterator", {"ShardIterator": "k" * 20},
                         {"StreamArn": STREAM_ARN, "ShardId": SHARD, "ShardIteratorType": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": str(FIRST + 1)})
    stubber.add_response("get_records", {"Records": [], "NextShardIterator": "l" * 20})
    stubber.add_response("get_records", {"Records": [boto3_record(FIRST + 3), boto3_record(FIRST + 9)], "NextShardIterator": "m" * 20})
    with stubber:
        again = reader.read(STEP)
    assert [r["dynamodb"]["SequenceNumber"] for r in again.records] == [str(FIRST), str(FIRST + 1), str(FIRST + 3)]
    assert again.requests == 6
    stubber.assert_no_pending_responses()


def test_a_shard_that_ends_before_the_range_does_answers_none_and_other_errors_are_raised():
    reader, stubber = stubbed()
    stubber.add_response("get_shard_iterator", {"ShardIterator": "i" * 20})
    stubber.add_response("get_records", {"Records": [boto3_record(FIRST)]})  # no NextShardIterator: a closed shard's end
    with stubber:
        again = reader.read(STEP)
    assert again.records is None and "ended before record" in again.why_not
    reader, stubber = stubbed()
    stubber.add_client_error("get_shard_iterator", "InternalServerError", "try again")
    with stubber, pytest.raises(Exception, match="InternalServerError"):
        reader.read(STEP)  # the invocation fails and Lambda tries it again: never an unresolved item for a blip


def test_an_event_without_a_stream_is_never_read_again():
    again = ShardRecords(None).read(ReadRecords(Writer.of_export("arn:export"), "1", "2"))
    assert again.records is None and again.requests == 0
