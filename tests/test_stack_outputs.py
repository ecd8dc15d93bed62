"""Scripts find a deployed tally through its stack outputs."""

from __future__ import annotations

import json

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber
from moto import mock_aws

from tally.stack_outputs import StackOutputsError, table_names_from_stack

REGION = "us-east-1"
OUTPUT_VALUES = {
    "EventsTableName": "Tally-EventsTable-ABC",
    "CountsTableName": "Tally-CountsTable-DEF",
    "EventsStreamArn": "arn:aws:dynamodb:us-east-1:123456789012:table/Tally-EventsTable-ABC/stream/2024-01-01T00:00:00.000",
    "FailureQueueUrl": "https://sqs.us-east-1.amazonaws.com/123456789012/Tally-FailureQueue",
}


def _template(outputs: dict[str, str]) -> str:
    return json.dumps(
        {
            "Resources": {"Queue": {"Type": "AWS::SQS::Queue"}},
            "Outputs": {key: {"Value": value} for key, value in outputs.items()},
        }
    )


@pytest.fixture
def cloudformation():
    with mock_aws():
        yield boto3.client("cloudformation", region_name=REGION)


def test_reads_every_output_of_a_tally_stack(cloudformation):
    cloudformation.create_stack(StackName="Tally", TemplateBody=_template({**OUTPUT_VALUES, "Other": "x"}))

    assert table_names_from_stack("Tally", cloudformation) == OUTPUT_VALUES


def test_names_the_missing_outputs(cloudformation):
    partial = {key: OUTPUT_VALUES[key] for key in ("EventsTableName", "FailureQueueUrl")}
    cloudformation.create_stack(StackName="Partial", TemplateBody=_template(partial))

    with pytest.raises(StackOutputsError, match="'Partial' lacks the outputs CountsTableName, EventsStreamArn"):
        table_names_from_stack("Partial", cloudformation)


def test_a_missing_stack_is_a_clear_error(cloudformation):
    with pytest.raises(StackOutputsError, match="stack 'Nowhere' not found"):
        table_names_from_stack("Nowhere", cloudformation)


def test_other_client_errors_propagate():
    client = boto3.client("cloudformation", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(client) as stubber:
        stubber.add_client_error("describe_stacks", service_error_code="AccessDenied", http_status_code=403)
        with pytest.raises(ClientError, match="AccessDenied"):
            table_names_from_stack("Tally", client)
