"""Each gap tally.local.moto_deploy fills, on moto as it is and with the patches: a test fails once moto no
longer needs a patch (drop it then), and fails if a patch stops reproducing the AWS behaviour it names."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# Run in a fresh interpreter: install() changes moto for the whole process. argv[1] == "patched" installs them.
SCENARIOS = r'''
import io, json, sys, zipfile
import boto3
from moto import mock_aws

if sys.argv[1] == "patched":
    from tally.local import moto_deploy
    moto_deploy.install()

REGION = "us-east-1"
QUEUE = {"Queue": {"Type": "AWS::SQS::Queue"}}
OUTPUT = {"QueueName": {"Value": {"Fn::GetAtt": ["Queue", "QueueName"]}}}
ALARM = {
    "Alarm": {"Type": "AWS::CloudWatch::Alarm", "Properties": {
        "AlarmName": "tally-errors", "Namespace": "AWS/Lambda", "MetricName": "Errors", "Statistic": "Sum",
        "ComparisonOperator": "GreaterThanThreshold", "EvaluationPeriods": 1, "Period": 60, "Threshold": 0}},
    "Api": {"Type": "AWS::ApiGatewayV2::Api", "Properties": {"Name": "tally-read", "ProtocolType": "HTTP"}},
}
found = {}


def outcome(call):
    try:
        return call()
    except Exception as error:
        return type(error).__name__


def outputs(cloudformation, stack):
    described = cloudformation.describe_stacks(StackName=stack)["Stacks"][0]
    return {output["OutputKey"]: output["OutputValue"] for output in described.get("Outputs", [])}


with mock_aws():
    cloudformation = boto3.client("cloudformation", region_name=REGION)
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket="cdk-assets")
    s3.put_object(Bucket="cdk-assets", Key="t.json", Body=json.dumps({"Resources": QUEUE, "Outputs": OUTPUT}))
    found["template_url"] = outcome(lambda: (
        cloudformation.create_stack(StackName="by-url", TemplateURL="http://127.0.0.1:4566/cdk-assets/t.json"),
        outputs(cloudformation, "by-url"),
    )[1])

    cloudformation.create_change_set(
        StackName="by-change-set", ChangeSetName="deploy", ChangeSetType="CREATE",
        TemplateBody=json.dumps({"Resources": QUEUE, "Outputs": OUTPUT}),
    )
    cloudformation.execute_change_set(ChangeSetName="deploy", StackName="by-change-set")
    found["change_set_outputs"] = outputs(cloudformation, "by-change-set")

    unmodelled = {"Resources": ALARM, "Outputs": {
        "AlarmArn": {"Value": {"Fn::GetAtt": ["Alarm", "Arn"]}},
        "ApiUrl": {"Value": {"Fn::GetAtt": ["Api", "ApiEndpoint"]}},
    }}
    found["unmodelled"] = outcome(lambda: (
        cloudformation.create_stack(StackName="alarms", TemplateBody=json.dumps(unmodelled)),
        outputs(cloudformation, "alarms"),
    )[1])
    found["alarms_listed"] = [
        alarm["AlarmName"] for alarm in boto3.client("cloudwatch", region_name=REGION).describe_alarms()["MetricAlarms"]
    ]
    found["apis_listed"] = [api["Name"] for api in boto3.client("apigatewayv2", region_name=REGION).get_apis()["Items"]]

    dynamodb = boto3.client("dynamodb", region_name=REGION)
    table = dynamodb.create_table(
        TableName="events", KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}], BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_IMAGE"},
    )["TableDescription"]
    role = boto3.client("iam", region_name=REGION).create_role(
        RoleName="counter", AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": []})
    )["Role"]["Arn"]
    code = io.BytesIO()
    with zipfile.ZipFile(code, "w") as archive:
        archive.writestr("handler.py", "def handler(event, context):\n    return {}\n")
    awslambda = boto3.client("lambda", region_name=REGION)
    awslambda.create_function(
        FunctionName="counter", Runtime="python3.12", Role=role, Handler="handler.handler", Code={"ZipFile": code.getvalue()}
    )
    awslambda.create_event_source_mapping(
        EventSourceArn=table["LatestStreamArn"], FunctionName="counter", StartingPosition="TRIM_HORIZON"
    )
    dynamodb.put_item(TableName="events", Item={"pk": {"S": "one"}})
    streams = boto3.client("dynamodbstreams", region_name=REGION)
    shard = streams.describe_stream(StreamArn=table["LatestStreamArn"])["StreamDescription"]["Shards"][0]
    iterator = streams.get_shard_iterator(
        StreamArn=table["LatestStreamArn"], ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    found["stream_records"] = len(streams.get_records(ShardIterator=iterator)["Records"])
print(json.dumps(found))
'''


def scenarios(mode: str) -> dict:
    run = subprocess.run([sys.executable, "-c", SCENARIOS, mode], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def unpatched() -> dict:
    return scenarios("moto")


@pytest.fixture(scope="module")
def patched() -> dict:
    return scenarios("patched")


def test_a_template_url_on_the_loopback_endpoint_is_read_from_the_bucket_it_names(unpatched, patched):
    assert not isinstance(unpatched["template_url"], dict)  # moto takes "127" for the bucket
    assert patched["template_url"] == {"QueueName": patched["template_url"]["QueueName"]}
    assert patched["template_url"]["QueueName"].startswith("by-url-Queue")


def test_a_stack_created_by_a_change_set_answers_its_templates_outputs(unpatched, patched):
    assert unpatched["change_set_outputs"] == {}
    assert list(patched["change_set_outputs"]) == ["QueueName"]
    assert patched["change_set_outputs"]["QueueName"].startswith("by-change-set-Queue")


def test_alarms_and_http_apis_are_created_and_answer_get_att(unpatched, patched):
    assert not isinstance(unpatched["unmodelled"], dict)  # moto fails the stack on the first GetAtt
    assert patched["unmodelled"]["AlarmArn"].endswith(":alarm:tally-errors")
    assert patched["unmodelled"]["ApiUrl"].startswith("https://")
    assert patched["alarms_listed"] == ["tally-errors"]
    assert patched["apis_listed"] == ["tally-read"]


def test_a_mapped_streams_records_stay_for_every_reader(unpatched, patched):
    assert unpatched["stream_records"] == 0  # moto hands them to the mapped function and drops them
    assert patched["stream_records"] == 1
