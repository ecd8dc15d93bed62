"""The synthesized template carries every property the counting protocol relies on."""

from __future__ import annotations

import json
import re
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_lambda as lambda_
from aws_cdk.assertions import Match
from cdk_synthesis import (
    OVERRIDDEN_STACK_NAME,
    REPO_ROOT,
    STACK_NAME,
    Synthesis,
    cdk_json_context,
    counting_part,
)

from tally_cdk.context import DEFAULT_CONTEXT
from stacks import TallyStack
from tally.core import settings as tally_settings
from tally.stack_outputs import STACK_OUTPUT_KEYS
from tally.core.tables import COUNTS_TABLE, EVENTS_TABLE

pytestmark = pytest.mark.cdk

HANDLER_METRICS = {
    "RecordsCounted",
    "RecordsSkipped",
    "RecordsRejected",
    "BucketUpdates",
    "UpdatesAlreadyApplied",
    "CommitRetries",
    "WindowStatesDiscarded",
    "UpdatesResumed",
    "OverlapsReadAgain",
    "StreamReadRequests",
    "WindowStatesRebuilt",
    "ItemsUnresolved",
}


def resources(template: dict[str, Any], resource_type: str) -> dict[str, dict[str, Any]]:
    return {name: body for name, body in template["Resources"].items() if body["Type"] == resource_type}


def only(template: dict[str, Any], resource_type: str) -> tuple[str, dict[str, Any]]:
    found = resources(template, resource_type)
    assert len(found) == 1, f"expected one {resource_type}, found {sorted(found)}"
    return next(iter(found.items()))


def table_id(template: dict[str, Any], partition_key: str) -> str:
    for name, body in resources(template, "AWS::DynamoDB::Table").items():
        if body["Properties"]["KeySchema"][0]["AttributeName"] == partition_key:
            return name
    raise AssertionError(f"no table with partition key {partition_key!r}")


def render(value: Any) -> str:
    """Flatten an Fn::Join into text, CloudFormation references as ${Ref:X} / ${X.Attr}."""
    if isinstance(value, str):
        return value
    if "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return separator.join(render(part) for part in parts)
    if "Ref" in value:
        return "${Ref:%s}" % value["Ref"]
    if "Fn::GetAtt" in value:
        return "${%s.%s}" % tuple(value["Fn::GetAtt"])
    raise AssertionError(f"unexpected intrinsic {value}")


@pytest.fixture(scope="module")
def template(default_synthesis: Synthesis) -> dict[str, Any]:
    """What counts events; the read API beside it has tests of its own (test_read_api.py)."""
    return counting_part(default_synthesis.templates[STACK_NAME])


@pytest.fixture(scope="module")
def ids(template: dict[str, Any]) -> dict[str, str]:
    """Logical ids of the resources other resources must point at."""
    return {
        "events": table_id(template, EVENTS_TABLE.partition_key),
        "counts": table_id(template, COUNTS_TABLE.partition_key),
        "queue": only(template, "AWS::SQS::Queue")[0],
        "function": only(template, "AWS::Lambda::Function")[0],
        "role": only(template, "AWS::IAM::Role")[0],
        "logs": only(template, "AWS::Logs::LogGroup")[0],
    }


# --- tables -----------------------------------------------------------------------


def test_events_table_is_built_from_its_description_and_retained(default_synthesis, template, ids):
    request = EVENTS_TABLE.create_table_request("unused")
    events = template["Resources"][ids["events"]]

    assert events["Properties"]["KeySchema"] == request["KeySchema"]
    assert events["Properties"]["AttributeDefinitions"] == request["AttributeDefinitions"]
    default_synthesis.template().has_resource(
        "AWS::DynamoDB::Table",
        {
            "Properties": {
                "KeySchema": request["KeySchema"],
                "StreamSpecification": {"StreamViewType": "NEW_IMAGE"},
                "BillingMode": "PAY_PER_REQUEST",
                "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
                "TimeToLiveSpecification": Match.absent(),
            },
            "DeletionPolicy": "Retain",
            "UpdateReplacePolicy": "Retain",
        },
    )


def test_counts_table_is_built_from_its_description_with_ttl(default_synthesis, template, ids):
    request = COUNTS_TABLE.create_table_request("unused")
    counts = template["Resources"][ids["counts"]]

    assert counts["Properties"]["KeySchema"] == request["KeySchema"]
    assert counts["Properties"]["AttributeDefinitions"] == request["AttributeDefinitions"]
    assert counts["Properties"]["TimeToLiveSpecification"] == COUNTS_TABLE.ttl_request("unused")[
        "TimeToLiveSpecification"
    ]
    default_synthesis.template().has_resource(
        "AWS::DynamoDB::Table",
        {
            "Properties": {
                "KeySchema": request["KeySchema"],
                "TimeToLiveSpecification": {"AttributeName": "ttl", "Enabled": True},
                "BillingMode": "PAY_PER_REQUEST",
                "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
                "StreamSpecification": Match.absent(),
            },
            "DeletionPolicy": "Delete",
        },
    )


# --- function ---------------------------------------------------------------------


def test_function_runtime_architecture_size_and_handler(template, ids):
    function = template["Resources"][ids["function"]]["Properties"]

    assert (function["Handler"], function["Runtime"], function["Architectures"]) == (
        "tally.functions.stream_handler.handler",
        "python3.13",
        ["arm64"],
    )
    assert (function["MemorySize"], function["Timeout"]) == (256, 60)


def test_function_environment_comes_from_the_settings_contract(template, ids):
    variables = template["Resources"][ids["function"]]["Properties"]["Environment"]["Variables"]

    assert variables == {
        tally_settings.ENV_COUNTS_TABLE: {"Ref": ids["counts"]},
        tally_settings.ENV_COUNTER_ATTRIBUTE: "counter",
        tally_settings.ENV_TIME_ATTRIBUTE: "ts",
        tally_settings.ENV_VALUE_ATTRIBUTE: "value",
        tally_settings.ENV_MINUTE_RETENTION_HOURS: "48",
        tally_settings.ENV_HOUR_RETENTION_DAYS: "90",
        tally_settings.ENV_MAX_CLOCK_SKEW_SECONDS: "300",
        tally_settings.ENV_BUCKET_LANES: "1",
        "POWERTOOLS_SERVICE_NAME": "tally",
        "POWERTOOLS_METRICS_NAMESPACE": "Tally",
    }
    # The values the stack deploys are the handler's own defaults unless context says otherwise.
    defaults = tally_settings.Settings()
    assert tally_settings.Settings.from_env({k: v for k, v in variables.items() if isinstance(v, str)}) == defaults


def test_function_uses_the_pinned_powertools_layer_matching_runtime_and_architecture(template, ids):
    function = template["Resources"][ids["function"]]["Properties"]
    (layer,) = function["Layers"]

    assert render(layer) == (
        "arn:${Ref:AWS::Partition}:lambda:${Ref:AWS::Region}:017000801446:layer:"
        "AWSLambdaPowertoolsPythonV3-python313-arm64:27"
    )
    flavour = re.search(r"-python(\d)(\d+)-(\w+):", render(layer))
    assert f"python{flavour[1]}.{flavour[2]}" == function["Runtime"]
    assert [flavour[3]] == function["Architectures"]


def test_function_logs_to_its_own_log_group_with_retention(template, ids):
    function = template["Resources"][ids["function"]]["Properties"]
    log_group = template["Resources"][ids["logs"]]

    assert function["LoggingConfig"]["LogGroup"] == {"Ref": ids["logs"]}
    assert log_group["Properties"]["RetentionInDays"] == 30
    assert log_group["DeletionPolicy"] == "Delete"


def test_code_asset_is_the_tally_package_without_caches(default_synthesis):
    staged = default_synthesis.function_asset_folder()
    staged_files = {path.relative_to(staged).as_posix() for path in staged.rglob("*")}

    assert {"tally/core/settings.py", "tally/core/tables.py", "tally/functions/stream_handler.py"} <= staged_files
    assert not [name for name in staged_files if "__pycache__" in name or ".egg-info" in name or name.endswith(".pyc")]
    assert default_synthesis.function_asset()["source"]["packaging"] == "zip"


# --- event source mapping ------------------------------------------------------------


def test_event_source_mapping_keeps_retries_on_the_same_batch(template, ids):
    _, mapping = only(template, "AWS::Lambda::EventSourceMapping")

    assert mapping["Properties"] == {
        "EventSourceArn": {"Fn::GetAtt": [ids["events"], "StreamArn"]},
        "FunctionName": {"Ref": ids["function"]},
        "StartingPosition": "TRIM_HORIZON",
        "BatchSize": 1000,
        "MaximumBatchingWindowInSeconds": 10,
        "TumblingWindowInSeconds": 60,
        "ParallelizationFactor": 1,
        "BisectBatchOnFunctionError": False,
        "MaximumRetryAttempts": -1,
        "MaximumRecordAgeInSeconds": 86400,
        "DestinationConfig": {"OnFailure": {"Destination": {"Fn::GetAtt": [ids["queue"], "Arn"]}}},
    }


def test_records_are_committed_within_the_age_the_retentions_assume(template):
    """The previous release's markers outlive every retry only if a record is committed within the stream retention."""
    _, mapping = only(template, "AWS::Lambda::EventSourceMapping")
    assert mapping["Properties"]["MaximumRecordAgeInSeconds"] * 1000 <= tally_settings.STREAM_RETENTION_MS


# --- failure queue -------------------------------------------------------------------


def test_failure_queue_is_encrypted_and_keeps_messages_14_days(default_synthesis):
    default_synthesis.template().has_resource_properties(
        "AWS::SQS::Queue", {"SqsManagedSseEnabled": True, "MessageRetentionPeriod": 14 * 24 * 3600}
    )


def test_failure_queue_refuses_requests_without_tls(template, ids):
    _, policy = only(template, "AWS::SQS::QueuePolicy")

    assert policy["Properties"]["Queues"] == [{"Ref": ids["queue"]}]
    assert {
        "Effect": "Deny",
        "Principal": {"AWS": "*"},
        "Action": "sqs:*",
        "Condition": {"Bool": {"aws:SecureTransport": "false"}},
        "Resource": {"Fn::GetAtt": [ids["queue"], "Arn"]},
    } in policy["Properties"]["PolicyDocument"]["Statement"]


# --- IAM ------------------------------------------------------------------------------


def policy_statements(template: dict[str, Any]) -> list[dict[str, Any]]:
    statements = [
        statement
        for policy in resources(template, "AWS::IAM::Policy").values()
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]
    for role in resources(template, "AWS::IAM::Role").values():
        for inline in role["Properties"].get("Policies", []):
            statements.extend(inline["PolicyDocument"]["Statement"])
    return statements


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def test_function_role_has_no_managed_policies(template, ids):
    role = template["Resources"][ids["role"]]["Properties"]

    assert "ManagedPolicyArns" not in role
    assert role["AssumeRolePolicyDocument"]["Statement"] == [
        {"Action": "sts:AssumeRole", "Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}}
    ]
    assert template["Resources"][ids["function"]]["Properties"]["Role"] == {"Fn::GetAtt": [ids["role"], "Arn"]}


def test_no_wildcard_actions(template):
    actions = [action for statement in policy_statements(template) for action in as_list(statement["Action"])]

    assert actions
    assert [action for action in actions if action.endswith("*")] == []


def test_every_resource_is_scoped_except_list_streams(template, ids):
    scoped = [
        {"Fn::GetAtt": [ids["events"], "StreamArn"]},
        {"Fn::GetAtt": [ids["counts"], "Arn"]},
        {"Fn::GetAtt": [ids["queue"], "Arn"]},
        {"Fn::GetAtt": [ids["logs"], "Arn"]},
    ]
    unscoped = []
    for statement in policy_statements(template):
        assert statement["Effect"] == "Allow"
        for resource in as_list(statement["Resource"]):
            if resource == "*":
                unscoped.append(statement)
            else:
                assert resource in scoped, f"{resource} is outside the stack's tables, stream, queue and logs"

    # dynamodb:ListStreams has no resource-level permissions, so AWS requires "*".
    assert [as_list(statement["Action"]) for statement in unscoped] == [["dynamodb:ListStreams"]]


def test_batch_writes_reach_the_counter_directory_and_the_rank_records_only(template, ids):
    [statement] = [s for s in policy_statements(template) if "dynamodb:BatchWriteItem" in as_list(s["Action"])]
    assert as_list(statement["Action"]) == ["dynamodb:BatchWriteItem"]
    assert [render(resource) for resource in as_list(statement["Resource"])] == ["${%s.Arn}" % ids["counts"]]
    assert statement["Condition"] == {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["#counters#*", "#ranks#*"]}}


def test_each_resource_gets_exactly_the_actions_the_handler_needs(template, ids):
    granted: dict[str, set[str]] = {}
    for statement in policy_statements(template):
        for resource in as_list(statement["Resource"]):
            granted.setdefault(render(resource), set()).update(as_list(statement["Action"]))

    assert granted == {
        "${%s.Arn}" % ids["counts"]: {
            "dynamodb:PutItem",
            "dynamodb:UpdateItem",
            "dynamodb:BatchGetItem",
            "dynamodb:BatchWriteItem",
        },
        "${%s.StreamArn}" % ids["events"]: {
            "dynamodb:DescribeStream",
            "dynamodb:GetRecords",
            "dynamodb:GetShardIterator",
        },
        "*": {"dynamodb:ListStreams"},
        "${%s.Arn}" % ids["queue"]: {"sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"},
        "${%s.Arn}" % ids["logs"]: {"logs:CreateLogStream", "logs:PutLogEvents"},
    }


# --- alarms and dashboard -------------------------------------------------------------


def alarms_by_metric(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {body["Properties"]["MetricName"]: body["Properties"] for body in resources(template, "AWS::CloudWatch::Alarm").values()}


def test_six_alarms_watch_the_failure_signals_and_one_the_items_growth(template, ids):
    alarms = alarms_by_metric(template)

    assert set(alarms) == {
        "IteratorAge",
        "Errors",
        "ApproximateNumberOfMessagesVisible",
        "RecordsRejected",
        "WindowStatesDiscarded",
        "ItemsUnresolved",
        "LargestBucketItemKB",
    }
    expected = {
        "IteratorAge": ("AWS/Lambda", "Maximum", 6 * 60 * 1000, [{"Name": "FunctionName", "Value": {"Ref": ids["function"]}}]),
        "Errors": ("AWS/Lambda", "Sum", 0, [{"Name": "FunctionName", "Value": {"Ref": ids["function"]}}]),
        "ApproximateNumberOfMessagesVisible": (
            "AWS/SQS",
            "Maximum",
            0,
            [{"Name": "QueueName", "Value": {"Fn::GetAtt": [ids["queue"], "QueueName"]}}],
        ),
        "RecordsRejected": ("Tally", "Sum", 0, [{"Name": "service", "Value": "tally"}]),
        "WindowStatesDiscarded": ("Tally", "Sum", 0, [{"Name": "service", "Value": "tally"}]),
        "ItemsUnresolved": ("Tally", "Sum", 0, [{"Name": "service", "Value": "tally"}]),
    }
    for metric, (namespace, statistic, threshold, dimensions) in expected.items():
        alarm = alarms[metric]
        assert (alarm["Namespace"], alarm["Statistic"], alarm["Threshold"], alarm["Dimensions"]) == (
            namespace,
            statistic,
            threshold,
            dimensions,
        ), metric
        assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
        assert alarm["TreatMissingData"] == "notBreaching"
        assert "AlarmActions" not in alarm


def test_bucket_items_past_4_kb_for_15_minutes_alarm_naming_bucket_lanes_and_how_to_choose_it(template):
    """The largest item an invocation wrote (its update's write units), past ITEM_GROWTH_KB three periods in a
    row: before the commits stop keeping up, with the setting to raise and how to choose its value."""
    alarm = alarms_by_metric(template)["LargestBucketItemKB"]

    assert (alarm["Namespace"], alarm["Statistic"], alarm["Dimensions"]) == (
        "Tally", "Maximum", [{"Name": "service", "Value": "tally"}]
    )
    assert (alarm["Threshold"], alarm["Period"], alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"]) == (4, 300, 3, 3)
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold" and alarm["TreatMissingData"] == "notBreaching"
    description = alarm["AlarmDescription"]
    for named in ("bucketLanes", "TALLY_BUCKET_LANES", "one lane per 64 shards", "describe-stream",
                  "bucket items growing", "recommended_bucket_lanes", "keep their lanes, whatever retries them",
                  "never lower it"):
        assert named in description, named
    assert len(description) <= 1024  # CloudWatch's limit


def test_dashboard_shows_alarms_handler_metrics_and_service_metrics(default_synthesis):
    template = default_synthesis.templates[STACK_NAME]
    _, dashboard = only(template, "AWS::CloudWatch::Dashboard")
    body = json.loads(render(dashboard["Properties"]["DashboardBody"]))
    widgets = [widget["properties"] for widget in body["widgets"]]

    alarm_widget = next(widget for widget in widgets if "alarms" in widget)
    alarm_ids = {name for name, body in template["Resources"].items() if body["Type"] == "AWS::CloudWatch::Alarm"}
    assert {arn.removeprefix("${").removesuffix(".Arn}") for arn in alarm_widget["alarms"]} == alarm_ids

    metrics = [metric for widget in widgets for metric in widget.get("metrics", [])]
    tally_metrics = {metric[1] for metric in metrics if metric[0] == "Tally"}
    assert tally_metrics == HANDLER_METRICS | {"BucketWriteUnits", "LargestBucketItemKB"}
    assert all(metric[2:4] == ["service", "tally"] for metric in metrics if metric[0] == "Tally")
    plotted = {(metric[0], metric[1]) for metric in metrics if not isinstance(metric[0], dict)}
    assert {("AWS/Lambda", "IteratorAge"), ("AWS/Lambda", "Errors"), ("AWS/SQS", "ApproximateNumberOfMessagesVisible")} <= plotted
    expressions = [metric[0]["expression"] for metric in metrics if isinstance(metric[0], dict)]
    assert any("RecordsRejected" in expression and "reason" in expression for expression in expressions)


# --- outputs --------------------------------------------------------------------------


def test_outputs_are_the_keys_the_scripts_read(template, ids):
    outputs = {key: value["Value"] for key, value in template["Outputs"].items()}

    assert set(STACK_OUTPUT_KEYS) <= set(outputs)
    assert outputs["EventsTableName"] == {"Ref": ids["events"]}
    assert outputs["CountsTableName"] == {"Ref": ids["counts"]}
    assert outputs["EventsStreamArn"] == {"Fn::GetAtt": [ids["events"], "StreamArn"]}
    assert outputs["FailureQueueUrl"] == {"Ref": ids["queue"]}


# --- context --------------------------------------------------------------------------


def test_cdk_json_lists_every_default_and_runs_the_venv_python():
    assert cdk_json_context() == DEFAULT_CONTEXT
    assert json.loads((REPO_ROOT / "cdk.json").read_text())["app"] == ".venv/bin/python app.py"


def test_a_becomes_rule_gives_the_events_table_new_and_old_images(overridden_synthesis, template):
    # The overridden rules count a transition, which is judged against the old image; the default rule is not.
    views = {
        name: [
            body["Properties"]["StreamSpecification"]["StreamViewType"]
            for body in resources(stack, "AWS::DynamoDB::Table").values()
            if "StreamSpecification" in body["Properties"]
        ]
        for name, stack in ((OVERRIDDEN_STACK_NAME, overridden_synthesis.templates[OVERRIDDEN_STACK_NAME]), ("default", template))
    }
    assert views == {OVERRIDDEN_STACK_NAME: ["NEW_AND_OLD_IMAGES"], "default": ["NEW_IMAGE"]}


def test_context_overrides_reach_the_template(overridden_synthesis):
    template = counting_part(overridden_synthesis.templates[OVERRIDDEN_STACK_NAME])
    _, mapping = only(template, "AWS::Lambda::EventSourceMapping")
    _, function = only(template, "AWS::Lambda::Function")
    variables = function["Properties"]["Environment"]["Variables"]

    assert mapping["Properties"]["TumblingWindowInSeconds"] == 300
    assert mapping["Properties"]["BatchSize"] == 250
    assert variables[tally_settings.ENV_COUNTER_ATTRIBUTE] == "metric"
    assert variables[tally_settings.ENV_MINUTE_RETENTION_HOURS] == "72"
    ranked = tally_settings.Settings.from_env({"TALLY_RANKED_PREFIXES": variables["TALLY_RANKED_PREFIXES"]})
    assert ranked.ranked_prefixes == ("jobs/", "revenue/")
    rules = tally_settings.Settings.from_env({"TALLY_RULES": variables["TALLY_RULES"]}).counter_rules
    assert [(rule.name, rule.counter.text, rule.sum) for rule in rules.rules] == [
        ("jobs", "jobs/{providerId}", None),
        ("revenue", "revenue/{shop}", "amount"),
        ("done", "done/{providerId}", None),
    ]
    assert render(function["Properties"]["Layers"][0]).endswith("-python313-arm64:31")
    policies = {
        body["Properties"]["KeySchema"][0]["AttributeName"]: body["DeletionPolicy"]
        for body in resources(template, "AWS::DynamoDB::Table").values()
    }
    assert policies == {EVENTS_TABLE.partition_key: "Delete", COUNTS_TABLE.partition_key: "Retain"}


def test_alarm_topic_and_window_length_shape_the_alarms(overridden_synthesis):
    alarms = alarms_by_metric(overridden_synthesis.templates[OVERRIDDEN_STACK_NAME])

    for alarm in alarms.values():
        assert alarm["AlarmActions"] == ["arn:aws:sns:eu-west-1:123456789012:tally-alarms"]
    # Five minutes plus the 300 s window a record may wait in.
    assert alarms["IteratorAge"]["Threshold"] == 10 * 60 * 1000


@pytest.mark.parametrize(
    ("change", "refusal"),
    [
        (lambda mapping: setattr(mapping, "parallelization_factor", 2), "ParallelizationFactor must be 1, got 2"),
        (lambda mapping: setattr(mapping, "tumbling_window_in_seconds", 0), "TumblingWindowInSeconds must be 1-900"),
        (lambda mapping: setattr(mapping, "bisect_batch_on_function_error", True), "BisectBatchOnFunctionError must stay off"),
    ],
    ids=["parallelization factor", "no window", "bisect"],
)
def test_the_stack_refuses_a_mapping_changed_against_the_commit_protocol(change, refusal, tmp_path):
    """A shard's segments must commit in stream order, through windows, rebuilt the same on retry."""
    app = cdk.App(outdir=str(tmp_path))
    stack = TallyStack(app, "Changed")
    [mapping] = [node for node in stack.node.find_all() if isinstance(node, lambda_.CfnEventSourceMapping)]
    change(mapping)  # what an escape hatch or an Aspect could do
    with pytest.raises(RuntimeError, match=refusal):
        app.synth()
