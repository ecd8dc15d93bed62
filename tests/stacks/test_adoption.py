"""Counting a table that already exists: the imported stack, the construct in a user's own app."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
import pytest
from documents import code_block
from aws_cdk import aws_dynamodb as dynamodb
from cdk_nag import AwsSolutionsChecks
from cdk_synthesis import IMPORTED_STACK_NAME, ORDERS_STREAM_ARN, READ_API_ID, Synthesis, counting_part, synthesize
from test_tally_stack import as_list, only, policy_statements, render, resources

from tally_cdk import StackSettings, Tally, TallyConfigurationError

pytestmark = pytest.mark.cdk

# The stack as it was deployed before tally became a construct: these logical ids must not change,
# or an update would replace the tables, the function and the event source mapping.
DEPLOYED_LOGICAL_IDS = {
    "CountingFunction8317A52D",
    "CountingFunctionDynamoDBEventSourceTallyEventsTable0C8B69028F81E2A9",
    "CountingFunctionLogs5990805B",
    "CountingFunctionRoleDefaultPolicy51123989",
    "CountingFunctionRoleF41CD913",
    "CountsTableB8E46BA5",
    "Dashboard9E4231ED",
    "EventsTableD24865E5",
    "FailureQueue4F308C52",
    "FailureQueueAlarm42FD2376",
    "FailureQueuePolicy42243A53",
    "FunctionErrorsAlarm60070EC7",
    "IteratorAgeAlarm6757AA2B",
    "RecordsRejectedAlarm3FC810F8",
    "WindowStateDiscardedAlarm69FD38A2",
}
# Resources a later release added beside them: new ids, so an update creates them and replaces nothing.
ADDED_LOGICAL_IDS = {"ItemsUnresolvedAlarm35E650C8", "ItemGrowthAlarmC4A1CF50"}


@pytest.fixture(scope="module")
def imported(imported_synthesis: Synthesis) -> dict[str, Any]:
    return imported_synthesis.templates[IMPORTED_STACK_NAME]


def test_a_deployed_stack_updates_in_place(default_synthesis: Synthesis):
    logical_ids = set(default_synthesis.templates["Tally"]["Resources"])

    assert DEPLOYED_LOGICAL_IDS <= logical_ids
    added = {added for added in logical_ids - DEPLOYED_LOGICAL_IDS if not added.startswith(READ_API_ID)}
    assert added == ADDED_LOGICAL_IDS


def test_an_imported_table_leaves_only_the_counts_table_and_a_mapping_on_its_stream(imported):
    (table,) = resources(imported, "AWS::DynamoDB::Table").values()
    _, mapping = only(imported, "AWS::Lambda::EventSourceMapping")

    assert table["Properties"]["KeySchema"][0]["AttributeName"] == "pk"
    assert mapping["Properties"]["EventSourceArn"] == ORDERS_STREAM_ARN
    assert mapping["Properties"]["StartingPosition"] == "TRIM_HORIZON"


def test_the_function_may_read_that_stream_only(imported):
    stream_actions = {"dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator"}
    granted: dict[str, set[str]] = {}
    for statement in policy_statements(counting_part(imported)):  # the backfill's roles: test_backfill_stack
        for resource in as_list(statement["Resource"]):
            granted.setdefault(render(resource), set()).update(as_list(statement["Action"]))

    assert granted[ORDERS_STREAM_ARN] == stream_actions
    assert granted["*"] == {"dynamodb:ListStreams"}
    elsewhere = {resource for resource, actions in granted.items() if actions & stream_actions}
    assert elsewhere == {ORDERS_STREAM_ARN}
    assert not any("orders" in resource for resource in granted if resource != ORDERS_STREAM_ARN)


def test_count_from_reaches_the_function_as_epoch_seconds(imported):
    _, function = only(counting_part(imported), "AWS::Lambda::Function")
    assert function["Properties"]["Environment"]["Variables"]["TALLY_COUNT_FROM"] == "1795428000"


def test_outputs_name_the_imported_table_and_stream(imported):
    outputs = {key: value["Value"] for key, value in imported["Outputs"].items()}
    assert outputs["EventsTableName"] == "orders"
    assert outputs["EventsStreamArn"] == ORDERS_STREAM_ARN


def own_stack(tmp_path, view: dynamodb.StreamViewType | None, rules: list | None = None) -> cdk.Stack:
    app = cdk.App(outdir=str(tmp_path))
    stack = cdk.Stack(app, "Shop")
    table = dynamodb.Table(
        stack, "Orders", partition_key=dynamodb.Attribute(name="id", type=dynamodb.AttributeType.STRING), stream=view
    )
    settings = StackSettings.from_context({"rules": rules}.get) if rules else None
    Tally(stack, "Tally", events_table=table, settings=settings)
    return stack


@pytest.mark.parametrize("view", [dynamodb.StreamViewType.KEYS_ONLY, dynamodb.StreamViewType.OLD_IMAGE])
def test_a_stream_without_new_images_is_refused_at_synth(tmp_path, view):
    with pytest.raises(TallyConfigurationError, match=f"Shop/Orders streams {view.value}.*NEW_IMAGE or NEW_AND_OLD_IMAGES"):
        own_stack(tmp_path, view)


def test_a_table_without_a_stream_is_refused_at_synth(tmp_path):
    with pytest.raises(TallyConfigurationError, match="Shop/Orders has no stream"):
        own_stack(tmp_path, None)


DONE = {"name": "done", "counter": "done/{shop}", "becomes": {"status": {"equals": "done"}}}
ENDED = {"name": "ended", "counter": "sessions/ended", "on": "REMOVE"}


@pytest.mark.parametrize(
    ("view", "rules", "message"),
    [
        ("NEW_IMAGE", [DONE], "streams NEW_IMAGE: rule 'done' judges changes against the old image, so the view must be NEW_AND_OLD_IMAGES"),
        ("OLD_IMAGE", [DONE], "streams OLD_IMAGE: rule 'done' judges changes against the old image, so the view must be NEW_AND_OLD_IMAGES"),
        ("NEW_IMAGE", [{"counter": "orders"}, ENDED], "rule 'ended' judges deletions on the old image, so the view must be OLD_IMAGE or NEW_AND_OLD_IMAGES"),
        ("OLD_IMAGE", [ENDED, {"name": "orders", "counter": "orders"}], "rule 'orders' reads each new item, so the view must be NEW_IMAGE or"),
    ],
)
def test_a_view_without_the_images_a_rule_judges_is_refused_in_one_line_naming_the_rule(tmp_path, view, rules, message):
    with pytest.raises(TallyConfigurationError) as refused:
        own_stack(tmp_path, dynamodb.StreamViewType(view), rules)
    assert str(refused.value).startswith(f"events table Shop/Orders streams {view}: ")
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_deletion_rules_alone_are_counted_from_old_images(tmp_path):
    stack = own_stack(tmp_path, dynamodb.StreamViewType.OLD_IMAGE, [ENDED])
    assert len(resources(cdk.assertions.Template.from_stack(stack).to_json(), "AWS::DynamoDB::Table")) == 2


def test_new_and_old_images_are_enough(tmp_path):
    stack = own_stack(tmp_path, dynamodb.StreamViewType.NEW_AND_OLD_IMAGES)
    assert len(resources(cdk.assertions.Template.from_stack(stack).to_json(), "AWS::DynamoDB::Table")) == 2


def readme_example() -> str:
    return code_block("### Your own CDK app", "python")


def test_the_readme_example_of_a_users_own_stack_synthesizes_and_passes_the_checks(tmp_path):
    namespace: dict[str, Any] = {}
    exec(compile(readme_example(), "README.md", "exec"), namespace)
    app = cdk.App(outdir=str(tmp_path))
    namespace["ShopStack"](app, "Shop")
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))

    synthesis = synthesize(app, tmp_path, ["Shop"])

    assert synthesis.validation_error is None
    template = synthesis.templates["Shop"]
    assert len(resources(template, "AWS::DynamoDB::Table")) == 1  # the counts table; orders is imported
    _, mapping = only(template, "AWS::Lambda::EventSourceMapping")
    assert mapping["Properties"]["EventSourceArn"].startswith("arn:aws:dynamodb:")
    _, function = only(counting_part(template), "AWS::Lambda::Function")
    assert function["Properties"]["Environment"]["Variables"]["TALLY_COUNTER_ATTRIBUTE"] == "status"
    assert len(readme_example().strip().splitlines()) <= 20


def test_a_bad_context_value_stops_the_synth_with_one_line(tmp_path, capsys):
    import app

    assert app.main(outdir=str(tmp_path), context={"eventsTableName": "orders"}) == 1
    assert capsys.readouterr().err == (
        "tally: context eventsTableName and eventsStreamArn go together: give both or neither "
        "(set it in cdk.json or with -c key=value)\n"
    )
