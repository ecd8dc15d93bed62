"""Rules with alerts add the once-a-minute evaluation, and may put events on the alert bus alone."""

from __future__ import annotations

import json
from typing import Any

import aws_cdk as cdk
import pytest
from cdk_nag import AwsSolutionsChecks
from cdk_synthesis import Synthesis, cdk_json_context, counting_part, synthesize
from test_cfn_lint import findings

from stacks import TallyStack
from tally.alerting import ENV_ALERT_BUS
from tally_cdk.context import ContextError, StackSettings

pytestmark = pytest.mark.cdk

ALERTING_STACK = "TallyAlerting"
ALERT_RULES = [
    {
        "name": "logins",
        "counter": "logins/{ip}",
        "alerts": [{"name": "burst", "window": "10m", "above": 100}, {"name": "quiet", "window": "1h", "below": 1}],
    }
]


@pytest.fixture(scope="module")
def alerting(tmp_path_factory: pytest.TempPathFactory) -> Synthesis:
    outdir = tmp_path_factory.mktemp("cdk-alerting")
    context = {**cdk_json_context(), "rules": json.dumps(ALERT_RULES), "alertBus": "security-alerts", "readApi": False}
    app = cdk.App(outdir=str(outdir), context=context)
    TallyStack(app, ALERTING_STACK)
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return synthesize(app, outdir, [ALERTING_STACK])


def resources(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {name: body for name, body in template["Resources"].items() if body["Type"] == kind}


def functions(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {body["Properties"]["Handler"]: body for body in resources(template, "AWS::Lambda::Function").values()}


def statements_of(template: dict[str, Any], function: dict[str, Any]) -> list[dict[str, Any]]:
    role = function["Properties"]["Role"]["Fn::GetAtt"][0]
    return [
        statement
        for policy in resources(template, "AWS::IAM::Policy").values()
        if {"Ref": role} in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def bus_of(resource: Any) -> str:
    """The event bus an ARN (an Fn::Join of the partition, region and account) names."""
    parts = resource["Fn::Join"][1] if isinstance(resource, dict) else [resource]
    return "".join(part for part in parts if isinstance(part, str))


def test_the_counting_function_may_put_events_on_the_alert_bus_only(alerting):
    template = alerting.templates[ALERTING_STACK]
    counting = functions(template)["tally.functions.stream_handler.handler"]
    puts = [s for s in statements_of(template, counting) if "events:PutEvents" in json.dumps(s["Action"])]
    assert [(s["Action"], bus_of(s["Resource"])) for s in puts] == [
        ("events:PutEvents", "arn::events:::event-bus/security-alerts")
    ]
    assert counting["Properties"]["Environment"]["Variables"][ENV_ALERT_BUS] == "security-alerts"


def test_the_counting_function_may_query_the_counts_table_for_the_windows_its_commits_change(alerting, default_synthesis):
    template = alerting.templates[ALERTING_STACK]
    counting = functions(template)["tally.functions.stream_handler.handler"]
    queries = [s for s in statements_of(template, counting) if s["Action"] == "dynamodb:Query"]
    assert len(queries) == 1 and "CountsTable" in json.dumps(queries[0]["Resource"])
    assert "dynamodb:Query" not in json.dumps(counting_part(default_synthesis.templates["Tally"]))


def test_a_schedule_runs_the_alert_evaluation_every_minute_with_least_privilege(alerting):
    template = alerting.templates[ALERTING_STACK]
    evaluation = functions(template)["tally.functions.alert_schedule.scheduled"]
    [(rule_id, rule)] = resources(template, "AWS::Events::Rule").items()
    assert rule["Properties"]["ScheduleExpression"] == "rate(1 minute)"
    [target] = rule["Properties"]["Targets"]
    assert target["RetryPolicy"] == {"MaximumEventAgeInSeconds": 120, "MaximumRetryAttempts": 2}
    function_id = next(name for name, body in resources(template, "AWS::Lambda::Function").items() if body is evaluation)
    assert target["Arn"] == {"Fn::GetAtt": [function_id, "Arn"]}
    statements = statements_of(template, evaluation)
    dynamodb = {tuple(s["Action"]) if isinstance(s["Action"], list) else (s["Action"],): s for s in statements
                if "dynamodb" in json.dumps(s["Action"])}
    assert set(dynamodb) == {("dynamodb:Query", "dynamodb:BatchGetItem"), ("dynamodb:UpdateItem",)}
    assert dynamodb[("dynamodb:UpdateItem",)]["Condition"] == {
        "ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["#alerts#*"]}
    }
    puts = [bus_of(s["Resource"]) for s in statements if s["Action"] == "events:PutEvents"]
    assert puts == ["arn::events:::event-bus/security-alerts"]
    assert "PutItem" not in json.dumps(statements)  # it publishes no settings: it does not count


def test_the_alerting_stack_passes_cdk_nag_and_cfn_lint(alerting):
    assert alerting.validation_error is None
    assert findings(alerting.templates[ALERTING_STACK]) == []


def test_without_alerts_there_is_no_schedule_and_no_bus_permission(default_synthesis):
    template = counting_part(default_synthesis.templates["Tally"])
    assert resources(template, "AWS::Events::Rule") == {}
    assert "events:PutEvents" not in json.dumps(template)


def test_the_default_bus_is_the_accounts_default(tmp_path_factory):
    outdir = tmp_path_factory.mktemp("cdk-default-bus")
    app = cdk.App(outdir=str(outdir), context={**cdk_json_context(), "rules": json.dumps(ALERT_RULES), "readApi": False})
    TallyStack(app, ALERTING_STACK)
    template = synthesize(app, outdir, [ALERTING_STACK]).templates[ALERTING_STACK]
    counting = functions(template)["tally.functions.stream_handler.handler"]
    [put] = [s for s in statements_of(template, counting) if s["Action"] == "events:PutEvents"]
    assert bus_of(put["Resource"]) == "arn::events:::event-bus/default"
    assert ENV_ALERT_BUS not in counting["Properties"]["Environment"]["Variables"]


@pytest.mark.parametrize("bus", ["bus with spaces", "arn:aws:sns:us-east-1:123456789012:topic", 7])
def test_a_bad_alert_bus_fails_the_synth_naming_the_key(bus):
    with pytest.raises(ContextError, match="context alertBus must be empty, an event bus name or an event bus ARN"):
        StackSettings.from_context({**cdk_json_context(), "alertBus": bus}.get)
