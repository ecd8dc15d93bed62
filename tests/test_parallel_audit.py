"""The audit's Scan in the account: each segment's worker writes what the filter lets through, gathered whole."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import boto3
import pytest
from botocore.stub import Stubber
from factories import image
from moto import mock_aws

from tally.core.tables import EVENTS_TABLE
from tally.local.cli import ScriptError, load_script
from tally.parallel_audit import gathered_items, scan_to_s3

WORK = "orders/tally-backfill/audits/a1"
FILTER = {
    "FilterExpression": "#c IN (:a, :b)",
    "ExpressionAttributeNames": {"#c": "counter"},
    "ExpressionAttributeValues": {":a": {"S": "orders"}, ":b": {"S": "refunds"}},
}
MACHINE = "arn:aws:states:us-east-1:123456789012:stateMachine:TallyAudit"
EXECUTION = "arn:aws:states:us-east-1:123456789012:execution:TallyAudit:audit-a1"
NOW = datetime(2026, 11, 27, tzinfo=UTC)

audit = load_script("audit")


@pytest.fixture
def aws():
    with mock_aws():
        dynamodb = boto3.client("dynamodb", region_name="us-east-1")
        dynamodb.create_table(**EVENTS_TABLE.create_table_request("orders"))
        for n in range(90):
            dynamodb.put_item(TableName="orders", Item=image(id=str(n), counter=("orders", "refunds", "other")[n % 3], ts=n))
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="exports")
        yield dynamodb, s3


def test_every_segments_worker_writes_its_filtered_items_and_together_they_are_the_whole_scan(aws):
    dynamodb, s3 = aws
    written = [scan_to_s3(dynamodb, s3, "orders", "exports", WORK, FILTER, segment, 3) for segment in range(3)]

    gathered = list(gathered_items(s3, "exports", WORK, 3))
    assert sum(part["items"] for part in written) == len(gathered) == 60
    assert sorted(item["id"]["S"] for item in gathered) == sorted(str(n) for n in range(90) if n % 3 != 2)
    with pytest.raises(ValueError, match="segment 3 of 3 does not exist"):
        scan_to_s3(dynamodb, s3, "orders", "exports", WORK, FILTER, 3, 3)


def test_the_script_starts_the_scan_follows_it_and_reads_what_the_workers_found(aws):
    dynamodb, s3 = aws
    for segment in range(2):
        scan_to_s3(dynamodb, s3, "orders", "exports", WORK, FILTER, segment, 2)
    sfn = boto3.client("stepfunctions", region_name="us-east-1")
    run = "arn:aws:states:us-east-1:123456789012:mapRun:TallyAudit/scan:0f9e"
    counts = {"pending": 0, "running": 0, "succeeded": 2, "failed": 0, "timedOut": 0, "aborted": 0, "total": 2, "resultsWritten": 0}
    with Stubber(sfn) as stubber:
        stubber.add_response(
            "start_execution", {"executionArn": EXECUTION, "startDate": NOW},
            {"stateMachineArn": MACHINE, "name": "audit-a1",
             "input": json.dumps({"work": WORK, "request": FILTER, "total": 2, "segments": [0, 1]})},
        )
        stubber.add_response("describe_execution", {"executionArn": EXECUTION, "stateMachineArn": MACHINE, "status": "SUCCEEDED", "startDate": NOW})
        stubber.add_response("list_map_runs", {"mapRuns": [{"executionArn": EXECUTION, "mapRunArn": run, "stateMachineArn": MACHINE, "startDate": NOW}]})
        stubber.add_response("describe_map_run", {"mapRunArn": run, "executionArn": EXECUTION, "status": "SUCCEEDED", "startDate": NOW,
                                                  "maxConcurrency": 100, "toleratedFailurePercentage": 0.0, "toleratedFailureCount": 0,
                                                  "itemCounts": counts, "executionCounts": counts})
        items = audit.scan_in_account(sfn, s3, MACHINE, "s3://exports/orders", 2, FILTER, audit_id="a1")
    assert len(items) == 60

    with Stubber(sfn) as stubber:
        stubber.add_response("start_execution", {"executionArn": EXECUTION, "startDate": NOW})
        stubber.add_response("describe_execution", {"executionArn": EXECUTION, "stateMachineArn": MACHINE, "status": "FAILED",
                                                    "startDate": NOW, "error": "States.TaskFailed", "cause": "throttled"})
        stubber.add_response("list_map_runs", {"mapRuns": []})
        with pytest.raises(ScriptError, match=r"^the audit's Scan in the account FAILED: States.TaskFailed throttled$"):
            audit.scan_in_account(sfn, s3, MACHINE, "s3://exports/orders", 2, FILTER, audit_id="a2")
