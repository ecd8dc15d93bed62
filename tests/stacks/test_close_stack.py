"""The close of days and months (context calendarPrefixes): a daily state machine rendering the close's steps, its
functions given the calendar settings every counting and reading function gets, each role the least; nothing of
it where no counter keeps days."""

from __future__ import annotations

from typing import Any

import pytest
from cdk_synthesis import CLOSE_ID, IMPORTED_STACK_NAME, OVERRIDDEN_STACK_NAME, STACK_NAME, Synthesis
from test_backfill_stack import definition, function_of, granted, role_statements
from test_tally_stack import as_list, resources

from tally.closing import CLOSE_STEPS, MAX_PARTS_AT_ONCE
from tally.core.settings import Settings
from tally.core.units import DAY_MS
from tally.stack_outputs import CLOSE_STATE_MACHINE_OUTPUT

pytestmark = pytest.mark.cdk

MODULE = "tally.functions.close_stages"
TABLE = "${CountsTable.Arn}"


@pytest.fixture(scope="module")
def closing(overridden_synthesis: Synthesis) -> dict[str, Any]:
    return overridden_synthesis.templates[OVERRIDDEN_STACK_NAME]


def close_resources(template: dict[str, Any]) -> dict[str, str]:
    return {name: body["Type"] for name, body in template["Resources"].items() if name.startswith(CLOSE_ID)}


def table_arns(statements: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Copies of the statements with the counts table's ARN written as TABLE, whatever its logical id (the
    session's templates stay as synthesized)."""
    return [
        {**statement, "Resource": [
            TABLE if isinstance(r, dict) and r.get("Fn::GetAtt", [""])[0].startswith("CountsTable") else r
            for r in as_list(statement["Resource"])
        ]}
        for statement in statements
    ]


def test_a_table_that_keeps_no_days_pays_for_no_close(default_synthesis: Synthesis):
    template = default_synthesis.templates[STACK_NAME]
    assert close_resources(template) == {}
    assert not resources(template, "AWS::StepFunctions::StateMachine") and not resources(template, "AWS::Events::Rule")
    assert not any(body["Properties"]["Handler"].startswith(MODULE) for body in resources(template, "AWS::Lambda::Function").values())
    assert CLOSE_STATE_MACHINE_OUTPUT not in template["Outputs"]


def test_with_calendar_prefixes_the_close_is_a_state_machine_three_functions_and_a_schedule(closing):
    kinds = sorted(close_resources(closing).values())
    assert kinds.count("AWS::StepFunctions::StateMachine") == 1 and kinds.count("AWS::Lambda::Function") == 3
    assert kinds.count("AWS::Events::Rule") == 1 and kinds.count("AWS::CloudWatch::Alarm") == 1
    (machine,) = [name for name, kind in close_resources(closing).items() if kind == "AWS::StepFunctions::StateMachine"]
    assert closing["Outputs"][CLOSE_STATE_MACHINE_OUTPUT]["Value"] == {"Ref": machine}


def test_the_state_machine_plans_closes_the_days_then_the_months_sixteen_parts_at_a_time_and_finishes(closing):
    machine = definition(closing, "CloseStateMachine")
    states = machine["States"]

    assert machine["StartAt"] == "PlanStep"
    assert [states["PlanStep"]["Next"], states["DaysMap"]["Next"], states["MonthsMap"]["Next"]] == [
        "DaysMap", "MonthsMap", "FinishStep"
    ]
    assert states["FinishStep"]["End"] is True and machine["TimeoutSeconds"] == 12 * 3600
    assert "Parameters" not in states["PlanStep"]  # the execution's input whole: {} or {"now": ...}
    for step in CLOSE_STEPS:
        if step.over is None:
            continue
        mapped = states[f"{step.name.capitalize()}Map"]
        assert (mapped["ItemsPath"], mapped["ResultPath"], mapped["MaxConcurrency"]) == (
            f"$.{step.over}", f"$.{step.result}", MAX_PARTS_AT_ONCE
        ) == (f"$.{step.over}", f"$.{step.result}", 16)
        assert mapped["ItemProcessor"]["ProcessorConfig"]["Mode"] == "INLINE" and "ItemSelector" not in mapped
        (child,) = mapped["ItemProcessor"]["States"].values()
        assert child["Resource"].startswith("${ClosePartFunction") and "Parameters" not in child  # the item whole
    assert states["FinishStep"]["Parameters"] == {
        "periods.$": "$.finish", "closed": {"days.$": "$.daysClosed", "months.$": "$.monthsClosed"}
    }
    # A refusal is final; anything else (a throttled or timed-out function) is tried again with backoff.
    for task in (states["PlanStep"], states["FinishStep"], *(states[m]["ItemProcessor"]["States"][f"{m[:-3]}PartStep"]
                                                             for m in ("DaysMap", "MonthsMap"))):
        refusal, then = task["Retry"]
        assert refusal == {"ErrorEquals": ["CloseRefused"], "MaxAttempts": 0}
        assert then["ErrorEquals"] == ["States.ALL"] and then["MaxAttempts"] == 4 and then["BackoffRate"] == 2


def test_a_rule_starts_it_every_day_at_0315_utc_with_no_input_and_may_start_nothing_else(closing):
    ((rule_id, rule),) = [(name, body) for name, body in resources(closing, "AWS::Events::Rule").items() if name.startswith(CLOSE_ID)]
    (target,) = rule["Properties"]["Targets"]
    assert rule["Properties"]["ScheduleExpression"] == "cron(15 3 * * ? *)" and rule["Properties"]["State"] == "ENABLED"
    assert target["Arn"]["Ref"].startswith("CloseStateMachine") and target["Input"] == "{}"
    assert target["RetryPolicy"] == {"MaximumEventAgeInSeconds": 3600, "MaximumRetryAttempts": 3}
    role = target["RoleArn"]["Fn::GetAtt"][0]
    statements = [
        statement
        for policy in resources(closing, "AWS::IAM::Policy").values()
        if {"Ref": role} in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]
    assert statements == [{"Action": "states:StartExecution", "Effect": "Allow", "Resource": {"Ref": target["Arn"]["Ref"]}}]


def test_each_step_is_a_function_of_the_close_module_sized_for_its_work(closing):
    sizes = {}
    for handler in {step.handler for step in CLOSE_STEPS}:
        _, function = function_of(closing, handler, MODULE)
        properties = function["Properties"]
        sizes[handler] = (properties["MemorySize"], properties["Timeout"], properties["Architectures"], properties["Runtime"])
    assert sizes == {
        "plan": (256, 60, ["arm64"], "python3.13"),
        "close_part": (1024, 900, ["arm64"], "python3.13"),
        "finish": (256, 60, ["arm64"], "python3.13"),
    }


def literal_environment(function: dict[str, Any]) -> dict[str, str]:
    return {name: value for name, value in function["Properties"]["Environment"]["Variables"].items() if isinstance(value, str)}


@pytest.mark.parametrize("stack", ["overridden", "adopting"])
def test_every_function_that_counts_reads_or_closes_gets_the_calendar_settings(overridden_synthesis, imported_synthesis, stack):
    synthesis, name, prefixes, zones, days, months = {
        "overridden": (overridden_synthesis, OVERRIDDEN_STACK_NAME, ("revenue/",), ("America/New_York",), 800, 120),
        "adopting": (imported_synthesis, IMPORTED_STACK_NAME, ("orders",), ("Europe/Berlin",), 400, 84),
    }[stack]
    functions = resources(synthesis.templates[name], "AWS::Lambda::Function")
    handlers = {body["Properties"]["Handler"].rpartition(".")[0] for body in functions.values()}
    expected = {"tally.functions.stream_handler", "tally.functions.read_api", MODULE}
    assert expected | ({"tally.functions.backfill_stages", "tally.functions.audit_stages"} if stack == "adopting" else set()) == handlers
    for function in functions.values():
        variables = literal_environment(function)
        if function["Properties"]["Handler"].startswith("tally.functions.audit_stages"):
            continue  # the audit's Scan counts nothing: it reads the events table into S3
        settings = Settings.from_env(variables)
        assert (settings.calendar_prefixes, settings.calendar_zones) == (prefixes, zones), function["Properties"]["Handler"]
        assert (settings.day_retention_ms, settings.month_retention_months) == (days * DAY_MS, months)
        assert function["Properties"]["Environment"]["Variables"]["COUNTS_TABLE"]["Ref"].startswith("CountsTable")


def test_the_plan_reads_progress_items_only(closing):
    assert table_arns(role_statements(closing, "plan", MODULE)) == [{
        "Action": "dynamodb:GetItem", "Effect": "Allow", "Resource": [TABLE],
        "Condition": {"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": ["#calendar"]}},
    }]


def test_the_finish_reads_and_moves_progress_items_only(closing):
    assert table_arns(role_statements(closing, "finish", MODULE)) == [{
        "Action": ["dynamodb:GetItem", "dynamodb:UpdateItem"], "Effect": "Allow", "Resource": [TABLE],
        "Condition": {"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": ["#calendar"]}},
    }]


def test_a_part_queries_and_updates_counter_partitions_never_reserved_ones_but_the_sketches(closing):
    statements = table_arns(role_statements(closing, "close_part", MODULE))
    assert {(effect, action) for effect, action, resource in granted(statements)} == {
        ("Allow", "dynamodb:Query"), ("Allow", "dynamodb:UpdateItem"), ("Deny", "dynamodb:UpdateItem"),
        ("Allow", "dynamodb:BatchGetItem"), ("Allow", "dynamodb:GetItem"),
    }
    assert {resource for _, _, resource in granted(statements)} == {TABLE}
    conditions = {(s["Effect"], tuple(as_list(s["Action"]))): s.get("Condition") for s in statements}
    assert conditions == {
        ("Allow", ("dynamodb:Query", "dynamodb:UpdateItem")): None,  # counter partitions: any name
        ("Deny", ("dynamodb:UpdateItem",)): {
            "ForAnyValue:StringLike": {"dynamodb:LeadingKeys": ["#*"]},
            "ForAnyValue:StringNotLike": {"dynamodb:LeadingKeys": ["#sketches#*"]},
        },
        ("Allow", ("dynamodb:BatchGetItem",)): {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["#sketches#*"]}},
        ("Allow", ("dynamodb:GetItem",)): {"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": ["#settings#"]}},
    }


def test_a_failed_execution_raises_an_alarm_that_notifies_the_topic(closing):
    alarms = [body["Properties"] for body in resources(closing, "AWS::CloudWatch::Alarm").values()
              if body["Properties"].get("Namespace") == "AWS/States"]
    (alarm,) = alarms
    assert (alarm["MetricName"], alarm["Statistic"], alarm["Threshold"], alarm["ComparisonOperator"]) == (
        "ExecutionsFailed", "Sum", 0, "GreaterThanThreshold"
    )
    assert alarm["Dimensions"][0]["Value"]["Ref"].startswith("CloseStateMachine")
    assert alarm["TreatMissingData"] == "notBreaching" and alarm["AlarmActions"]  # alarmTopicArn


def test_the_wildcards_acknowledged_are_the_state_machines_own_functions_and_tracing(overridden_synthesis: Synthesis):
    (report,) = overridden_synthesis.validation_report["pluginReports"]
    close = {
        (entry["acknowledgedAt"].removeprefix(f"{OVERRIDDEN_STACK_NAME}/Default/Close/"), entry["acknowledgedId"])
        for entry in report["suppressedViolations"]
        if "/Close/" in entry["acknowledgedAt"] and "IAM5" in entry["acknowledgedId"]
    }
    wildcards = {finding.split("[Resource::", 1)[1].rstrip("]") for _, finding in close}
    assert {path for path, _ in close} == {"StateMachine/Role/DefaultPolicy/Resource"}
    assert "*" in wildcards and len(wildcards) == 4
    assert all(w.startswith("<Close") and w.endswith(".Arn>:*") for w in wildcards - {"*"})
