"""The in-account backfill (context backfillExports): its state machine renders the stages, its roles the least."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk.assertions import Match, Template
from cdk_synthesis import IMPORTED_STACK_NAME, STACK_NAME, Synthesis
from test_tally_stack import as_list, render, resources

from tally.parallel_backfill import STAGES
from tally_cdk.context import DEFAULT_CONTEXT, ContextError, StackSettings

pytestmark = pytest.mark.cdk

EXPORTS = "arn:${AWS::Partition}:s3:::orders-exports/tally/AWSDynamoDB/*"
WORK = "arn:${AWS::Partition}:s3:::orders-exports/tally/tally-backfill/*"


@pytest.fixture(scope="module")
def adopting(imported_synthesis: Synthesis) -> dict[str, Any]:
    return imported_synthesis.templates[IMPORTED_STACK_NAME]


def render_all(value: Any) -> str:
    """Fn::Join and references flattened, including ${AWS::Partition} (test_tally_stack's render leaves Refs)."""
    return render(value).replace("${Ref:AWS::Partition}", "${AWS::Partition}")


def definition(template: dict[str, Any], name: str = "BackfillStateMachine") -> dict[str, Any]:
    (machine,) = [
        body for logical_id, body in resources(template, "AWS::StepFunctions::StateMachine").items()
        if logical_id.startswith(name)
    ]
    return json.loads(render_all(machine["Properties"]["DefinitionString"]))


def function_of(template: dict[str, Any], handler: str, module: str = "tally.functions.backfill_stages") -> tuple[str, dict[str, Any]]:
    (found,) = [
        (name, body)
        for name, body in resources(template, "AWS::Lambda::Function").items()
        if body["Properties"]["Handler"] == f"{module}.{handler}"
    ]
    return found


def role_statements(template: dict[str, Any], handler: str, module: str = "tally.functions.backfill_stages") -> list[dict[str, Any]]:
    """Every statement of the role of the backfill function running ``handler``, its logs' aside."""
    _, function = function_of(template, handler, module)
    role = function["Properties"]["Role"]["Fn::GetAtt"][0]
    statements = [
        statement
        for policy in resources(template, "AWS::IAM::Policy").values()
        if {"Ref": role} in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]
    return [s for s in statements if not any(a.startswith("logs:") for a in as_list(s["Action"]))]


def granted(statements: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    """(effect, action, resource) of every statement."""
    return {
        (statement["Effect"], action, render_all(resource))
        for statement in statements
        for action in as_list(statement["Action"])
        for resource in as_list(statement["Resource"])
    }


def test_the_state_machine_runs_the_stages_in_order_with_distributed_maps(adopting):
    states = definition(adopting)["States"]

    assert definition(adopting)["StartAt"] == "PlanStep"
    assert [states["PlanStep"]["Next"], states["FoldMap"]["Next"], states["CommitMap"]["Next"]] == [
        "FoldMap", "CommitMap", "SummaryStep"
    ]
    fold, commit = states["FoldMap"], states["CommitMap"]
    assert fold["ItemProcessor"]["ProcessorConfig"]["Mode"] == "DISTRIBUTED"
    assert fold["ItemReader"]["Parameters"] == {"Bucket.$": "$.bucket", "Key.$": "$.filesKey"}
    assert fold["ItemReader"]["ReaderConfig"] == {"InputType": "JSON"}
    assert (fold["MaxConcurrency"], commit["MaxConcurrency"]) == (100, 10)
    assert commit["ItemsPath"] == "$.ranges" and commit["ItemSelector"]["range.$"] == "$$.Map.Item.Value"
    assert fold["ResultPath"] is None and commit["ResultPath"] is None  # a map's results would outgrow the state
    # Each child is given what the shared description of the stages says (the local run gives the same).
    for stage in STAGES:
        if stage.over is None:
            task = states[f"{stage.name.capitalize()}Step"]
            assert task["Parameters"] == {f"{field}.$": f"$.{field}" for field in stage.selects}
            assert task.get("ResultPath", "$") == (f"$.{stage.result}" if stage.result else "$")
        else:
            mapped = states[f"{stage.name.capitalize()}Map"]
            assert mapped["ItemSelector"] == {**{f"{f}.$": f"$.{f}" for f in stage.selects}, f"{stage.item}.$": "$$.Map.Item.Value"}
    # A refusal is final; a failure of anything else is tried again, then redriven.
    for task in (states["PlanStep"], fold["ItemProcessor"]["States"]["FoldStep"], commit["ItemProcessor"]["States"]["CommitStep"]):
        first, then = task["Retry"]
        assert first["MaxAttempts"] == 0 and "PlanRefused" in first["ErrorEquals"]
        assert then["ErrorEquals"] == ["States.ALL"] and then["MaxAttempts"] > 1


def test_every_stage_is_a_function_of_the_handlers_module_with_the_counting_settings(adopting):
    template = Template.from_json(adopting)
    for stage in STAGES:
        _, function = function_of(adopting, stage.handler)
        variables = function["Properties"]["Environment"]["Variables"]
        assert variables["TALLY_COUNT_FROM"] == "1795428000"
        assert (variables["TALLY_BACKFILL_BUCKET"], variables["TALLY_BACKFILL_PREFIX"]) == ("orders-exports", "tally")
        assert variables["TALLY_BACKFILL_RANGES"] == "64" and variables["TALLY_BACKFILL_COMMITTERS"] == "10"
    template.has_resource_properties(
        "AWS::StepFunctions::StateMachine",
        {"TracingConfiguration": {"Enabled": True}, "LoggingConfiguration": Match.object_like({"Level": "ALL"})},
    )
    assert {"BackfillStateMachineArn", "AuditStateMachineArn"} <= set(adopting["Outputs"])
    assert adopting["Outputs"]["BackfillExports"]["Value"] == "s3://orders-exports/tally"


def test_the_audits_scan_is_a_map_over_segments_whose_workers_may_scan_and_write_the_work_folder_only(adopting):
    states = definition(adopting, "BackfillAuditStateMachine")["States"]
    scan = states["ScanMap"]
    assert scan["ItemsPath"] == "$.segments" and scan["ItemProcessor"]["ProcessorConfig"]["Mode"] == "DISTRIBUTED"
    assert scan["ItemSelector"] == {"work.$": "$.work", "request.$": "$.request", "total.$": "$.total",
                                    "segment.$": "$$.Map.Item.Value"}
    _, function = function_of(adopting, "scan_segment", "tally.functions.audit_stages")
    assert function["Properties"]["Environment"]["Variables"]["EVENTS_TABLE"] == "orders"
    table = "arn:${AWS::Partition}:dynamodb:${Ref:AWS::Region}:${Ref:AWS::AccountId}:table/orders"
    assert granted(role_statements(adopting, "scan_segment", "tally.functions.audit_stages")) == {
        ("Allow", "dynamodb:Scan", table), ("Allow", "s3:PutObject", WORK)
    }


def test_fold_workers_read_the_exports_and_write_the_work_folder_only(adopting):
    assert granted(role_statements(adopting, "fold_file")) == {("Allow", "s3:GetObject", EXPORTS), ("Allow", "s3:PutObject", WORK)}


def test_the_plan_may_describe_the_tables_exports_write_claims_and_read_the_zones_progress_only(adopting):
    statements = role_statements(adopting, "plan")
    assert ("Allow", "dynamodb:DescribeExport", "arn:${AWS::Partition}:dynamodb:${Ref:AWS::Region}:${Ref:AWS::AccountId}:table/orders/export/*") in granted(statements)
    (claims,) = [s for s in statements if "dynamodb:PutItem" in as_list(s["Action"])]
    # Query: a claim of the table's history at another instant is found before another export is counted.
    assert set(as_list(claims["Action"])) == {"dynamodb:PutItem", "dynamodb:GetItem", "dynamodb:Query"}
    assert claims["Condition"] == {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["#backfill#*"]}}
    (progress,) = [s for s in statements if as_list(s["Action"]) == ["dynamodb:GetItem"]]  # a calendar prefix's days
    assert progress["Condition"] == {"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": ["#calendar"]}}


def test_committers_write_buckets_directory_and_ranks_never_claims_settings_or_alerts(adopting):
    statements = role_statements(adopting, "commit_range")
    actions = granted(statements)
    assert not any(resource == EXPORTS for _, _, resource in actions)  # the export's files are the workers'
    assert {action for effect, action, _ in actions if effect == "Allow" and action.startswith("dynamodb:")} == {
        "dynamodb:UpdateItem", "dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:BatchWriteItem"
    }
    (deny,) = [s for s in statements if s["Effect"] == "Deny"]
    assert deny["Condition"] == {"ForAnyValue:StringLike": {"dynamodb:LeadingKeys": ["#backfill#*", "#settings#*", "#alerts#*"]}}
    (batch,) = [s for s in statements if "dynamodb:BatchWriteItem" in as_list(s["Action"])]
    assert batch["Condition"] == {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["#counters#*", "#ranks#*"]}}


def test_the_summary_reads_the_work_folder_and_updates_the_zones_progress_only(adopting):
    statements = role_statements(adopting, "summarize")
    assert {action for _, action, _ in granted(statements)} == {"s3:GetObject", "s3:ListBucket", "dynamodb:UpdateItem"}
    (progress,) = [s for s in statements if "dynamodb:UpdateItem" in as_list(s["Action"])]
    assert progress["Condition"] == {"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": ["#calendar"]}}


def test_the_wildcards_acknowledged_are_the_reviewed_ones(imported_synthesis: Synthesis):
    (report,) = imported_synthesis.validation_report["pluginReports"]
    backfill = sorted(
        (entry["acknowledgedAt"].removeprefix("Adopting/Default/Backfill/"), entry["acknowledgedId"].removeprefix("AwsSolutions::"))
        for entry in report["suppressedViolations"]
        if "/Backfill/" in entry["acknowledgedAt"] and "IAM5" in entry["acknowledgedId"]
    )
    wildcards = {finding.split("[Resource::", 1)[1].rstrip("]") for _, finding in backfill}

    assert {"*", EXPORTS.replace("${AWS::Partition}", "<AWS::Partition>"), WORK.replace("${AWS::Partition}", "<AWS::Partition>"),
            "arn:<AWS::Partition>:dynamodb:<AWS::Region>:<AWS::AccountId>:table/orders/export/*"} <= wildcards
    others = {w for w in wildcards if "s3:::" not in w and "export/*" not in w and w != "*"}
    assert all(w.endswith(("Function", ".Arn>:*")) or ":execution:" in w for w in others), others
    assert not [path for path, _ in backfill if path.startswith("FoldFunctionRole") and "dynamodb" in _]


def test_the_backfill_is_off_unless_an_exports_prefix_is_given(default_synthesis: Synthesis):
    assert not resources(default_synthesis.templates[STACK_NAME], "AWS::StepFunctions::StateMachine")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"backfillExports": "orders-exports/tally"}, "backfillExports must be empty or s3://BUCKET/PREFIX"),
        ({"backfillExports": "s3://B"}, "backfillExports must be empty or s3://BUCKET/PREFIX"),
        ({"backfillRanges": 0}, "context backfillRanges must be between 1 and 10000"),
        ({"backfillWorkers": "many"}, "context backfillWorkers must be a whole number"),
    ],
)
def test_bad_backfill_context_is_refused_naming_the_key(overrides, message):
    with pytest.raises(ContextError, match=message):
        StackSettings.from_context({**DEFAULT_CONTEXT, **overrides}.get)


def test_backfill_context_reaches_its_settings():
    settings = StackSettings.from_context({**DEFAULT_CONTEXT, "backfillExports": "s3://my-exports/orders/", "backfillMaxWcu": "4000"}.get)
    assert (settings.backfill.bucket, settings.backfill.prefix, settings.backfill.max_wcu) == ("my-exports", "orders", 4000)
    assert settings.backfill.enabled and not StackSettings.from_context({}.get).backfill.enabled
