"""The audit's Lambda function: a segment of the Scan, written only under the configured audit folder."""

from __future__ import annotations

import boto3
import pytest
from factories import image
from moto import mock_aws

from tally.core.tables import EVENTS_TABLE
from tally.functions import audit_stages
from tally.parallel_audit import AUDIT_STAGES, gathered_items

WORK = "orders/tally-backfill/audits/a1"
FILTER = {
    "FilterExpression": "#c = :c",
    "ExpressionAttributeNames": {"#c": "counter"},
    "ExpressionAttributeValues": {":c": {"S": "orders"}},
}


@pytest.fixture
def s3(monkeypatch):
    for name, value in {"TALLY_BACKFILL_BUCKET": "exports", "TALLY_BACKFILL_PREFIX": "orders", "EVENTS_TABLE": "orders",
                        "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        dynamodb = boto3.client("dynamodb", region_name="us-east-1")
        dynamodb.create_table(**EVENTS_TABLE.create_table_request("orders"))
        for n in range(10):
            dynamodb.put_item(TableName="orders", Item=image(id=str(n), counter=("orders", "refunds")[n % 2], ts=n))
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="exports")
        yield s3


def test_the_scan_stage_runs_this_modules_function():
    assert [stage.handler_path for stage in AUDIT_STAGES] == ["tally.functions.audit_stages.scan_segment"]


def test_the_function_writes_its_segment_only_under_the_configured_audit_folder(s3):
    assert audit_stages.scan_segment({"work": WORK, "request": FILTER, "segment": 0, "total": 1}) == {"segment": 0, "items": 5}
    assert sorted(item["id"]["S"] for item in gathered_items(s3, "exports", WORK, 1)) == ["0", "2", "4", "6", "8"]
    with pytest.raises(ValueError, match="is not an audit folder"):
        audit_stages.scan_segment({"work": "orders/AWSDynamoDB/x", "request": FILTER, "segment": 0, "total": 1})
