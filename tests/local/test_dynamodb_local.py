"""Amazon's DynamoDB Local as the local toolkit's second backend: the demo's verdicts on it, its refusals, and
where it and moto differ from DynamoDB as documented."""

from __future__ import annotations

from pathlib import Path

import boto3
import pytest
from botocore.exceptions import ClientError

from tally.dynamo import create_tables
from tally.local.aws import MotoServer, local_server
from tally.local.cli import ScriptError
from tally.local.dynamodb_local import ENV_BACKEND, ENV_JAR, DynamoDBLocalServer, find_jar

pytestmark = pytest.mark.dynamodb_local

KEYS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing", "region_name": "us-east-1"}


@pytest.fixture(scope="module")
def dynamodb_local():
    with DynamoDBLocalServer() as server:
        yield server


def test_the_backend_defaults_to_moto(monkeypatch):
    monkeypatch.delenv(ENV_BACKEND, raising=False)
    assert isinstance(local_server(), MotoServer)


def test_a_missing_jar_or_java_says_what_to_install(monkeypatch, tmp_path):
    from tally.local import dynamodb_local as dynamodb_local_module

    monkeypatch.setenv(ENV_JAR, str(tmp_path / "DynamoDBLocal.jar"))
    with pytest.raises(ScriptError, match="no such file"):
        find_jar()
    monkeypatch.delenv(ENV_JAR)
    monkeypatch.setattr(dynamodb_local_module, "PACKAGE", Path("node_modules") / "not-installed")
    with pytest.raises(ScriptError, match="npm ci"):
        find_jar()
    monkeypatch.setattr(dynamodb_local_module.shutil, "which", lambda name: None)
    with pytest.raises(ScriptError, match="default-jre-headless"):
        DynamoDBLocalServer()


def test_dynamodb_local_has_no_backups_and_tables_are_created_without_them(dynamodb_local):
    """DynamoDB Local answers UpdateContinuousBackups with UnknownOperationException (it has neither backups nor
    exports); moto and DynamoDB enable point-in-time recovery. create_tables takes both."""
    client = boto3.client("dynamodb", endpoint_url=dynamodb_local.endpoint_url, **KEYS)
    create_tables(client, "pitr-events", "pitr-counts")
    with pytest.raises(ClientError) as refused:
        client.update_continuous_backups(
            TableName="pitr-counts", PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True}
        )
    assert refused.value.response["Error"]["Code"] == "UnknownOperationException"
    assert client.describe_time_to_live(TableName="pitr-counts")["TimeToLiveDescription"]["TimeToLiveStatus"] == "ENABLED"


def stream_record_time(endpoint_url: str, table: str) -> tuple[float, float]:
    """(the record's ApproximateCreationDateTime, the client's clock at the write), in epoch seconds."""
    import time

    client = boto3.client("dynamodb", endpoint_url=endpoint_url, **KEYS)
    client.create_table(
        TableName=table,
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_IMAGE"},
    )
    written = time.time()
    client.put_item(TableName=table, Item={"id": {"S": "x"}})
    streams = boto3.client("dynamodbstreams", endpoint_url=endpoint_url, **KEYS)
    arn = client.describe_table(TableName=table)["Table"]["LatestStreamArn"]
    shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
    iterator = streams.get_shard_iterator(StreamArn=arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON")
    [record] = streams.get_records(ShardIterator=iterator["ShardIterator"])["Records"]
    return record["dynamodb"]["ApproximateCreationDateTime"].timestamp(), written


def test_stream_records_are_stamped_at_their_write_to_the_minute_on_dynamodb_local_and_finer_on_moto(dynamodb_local):
    """DynamoDB documents ApproximateCreationDateTime rounded down to the second. DynamoDB Local rounds it down
    to the minute; moto keeps a finer time. Either is at most a minute before the write, well inside the clock
    skew tally allows an event time ahead of its arrival, so the arrival rules judge alike."""
    local, written = stream_record_time(dynamodb_local.endpoint_url, "stamped")
    assert local % 60 == 0 and written - 61 <= local <= written + 1
    with MotoServer() as moto:
        stamped, written = stream_record_time(moto.endpoint_url, "stamped")
    assert written - 2 <= stamped <= written + 2
