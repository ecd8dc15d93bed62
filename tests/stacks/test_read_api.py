"""The read API in the template: IAM on every route unless public read is configured, and the read function's limits."""

from __future__ import annotations

import json
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template
from cdk_synthesis import IMPORTED_STACK_NAME, OVERRIDDEN_STACK_NAME, STACK_NAME, Synthesis, counting_part
from test_tally_stack import as_list, render, resources, table_id

from stacks import TallyStack
from tally.core.api_access import ApiSettings
from tally.core.settings import Settings
from tally.core.tables import COUNTS_TABLE
from tally_cdk import read_api
from tally_cdk.context import DEFAULT_CONTEXT, StackSettings
from tally_cdk.read_api import ReadApiSettings, ReadApiSettingsError

pytestmark = pytest.mark.cdk

SIGNED = {"GET /counts", "GET /counters", "GET /top", "GET /calendar", "GET /alerts", "GET /openapi.json"}  # the description is signed like the data
PUBLIC = {"GET /public/counts", "GET /public/counters", "GET /public/top", "GET /public/calendar", "GET /"}
READ_ACTIONS = {"dynamodb:BatchGetItem", "dynamodb:GetItem", "dynamodb:Query"}


def routes(template: dict[str, Any]) -> dict[str, str]:
    """Route key -> authorization type."""
    return {
        body["Properties"]["RouteKey"]: body["Properties"]["AuthorizationType"]
        for body in resources(template, "AWS::ApiGatewayV2::Route").values()
    }


def read_function(template: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    (found,) = [
        (name, body) for name, body in resources(template, "AWS::Lambda::Function").items()
        if body["Properties"]["Handler"] == "tally.functions.read_api.handler"
    ]
    return found


@pytest.fixture(scope="module")
def default(default_synthesis: Synthesis) -> dict[str, Any]:
    return default_synthesis.templates[STACK_NAME]


@pytest.fixture(scope="module")
def public(overridden_synthesis: Synthesis) -> dict[str, Any]:
    return overridden_synthesis.templates[OVERRIDDEN_STACK_NAME]


def test_by_default_every_route_is_signed_with_iam_and_none_is_public(default, imported_synthesis):
    assert routes(default) == {key: "AWS_IAM" for key in SIGNED}
    # Any other setting left alone (an imported events table here) keeps the API closed too.
    assert routes(imported_synthesis.templates[IMPORTED_STACK_NAME]) == {key: "AWS_IAM" for key in SIGNED}
    (stage,) = resources(default, "AWS::ApiGatewayV2::Stage").values()
    assert "RouteSettings" not in stage["Properties"]
    (api,) = resources(default, "AWS::ApiGatewayV2::Api").values()
    assert "CorsConfiguration" not in api["Properties"]


def test_public_routes_exist_only_as_configured_and_every_other_route_stays_signed(public):
    authorization = routes(public)

    assert {key for key, kind in authorization.items() if kind == "NONE"} == PUBLIC
    assert {key for key, kind in authorization.items() if kind != "NONE"} == SIGNED
    assert set(authorization.values()) == {"AWS_IAM", "NONE"}


def test_public_routes_are_throttled_and_the_stage_is_deployed_after_them(public):
    ((stage_id, stage),) = resources(public, "AWS::ApiGatewayV2::Stage").items()
    public_route_ids = {
        name for name, body in resources(public, "AWS::ApiGatewayV2::Route").items()
        if body["Properties"]["AuthorizationType"] == "NONE"
    }

    assert stage["Properties"]["RouteSettings"] == {
        key: {"ThrottlingRateLimit": 20, "ThrottlingBurstLimit": 40} for key in PUBLIC
    }
    assert public_route_ids <= set(stage.get("DependsOn", []))
    assert stage["Properties"]["StageName"] == "$default" and stage["Properties"]["AutoDeploy"] is True
    assert "$context.requestId" in stage["Properties"]["AccessLogSettings"]["Format"]


def test_cors_allows_the_configured_origins_and_the_headers_sigv4_sends(public):
    (api,) = resources(public, "AWS::ApiGatewayV2::Api").values()
    cors = api["Properties"]["CorsConfiguration"]

    assert cors["AllowOrigins"] == ["https://blog.example.com", "http://localhost:3000"]
    assert cors["AllowMethods"] == ["GET"]
    assert {"authorization", "x-amz-date", "x-amz-security-token", "x-amz-content-sha256"} <= set(cors["AllowHeaders"])


def test_the_read_function_runs_the_counting_package_from_the_same_asset_with_the_same_settings(default):
    (counting_name, counting), (_, reading) = (
        next(iter(resources(counting_part(default), "AWS::Lambda::Function").items())),
        read_function(default),
    )
    counting_env = counting["Properties"]["Environment"]["Variables"]
    reading_env = reading["Properties"]["Environment"]["Variables"]

    assert counting_name.startswith("CountingFunction")
    assert reading["Properties"]["Code"] == counting["Properties"]["Code"]
    assert (reading["Properties"]["Runtime"], reading["Properties"]["Architectures"]) == ("python3.13", ["arm64"])
    assert reading["Properties"]["Layers"] == counting["Properties"]["Layers"]
    assert {key: value for key, value in reading_env.items() if key in counting_env} == counting_env
    literal = {key: value for key, value in reading_env.items() if isinstance(value, str)}
    assert ApiSettings.from_env(literal) == ApiSettings()  # public read and the dashboard off
    assert Settings.from_env(literal) == Settings()


def test_the_read_function_is_told_what_is_public(public):
    _, reading = read_function(public)
    literal = {k: v for k, v in reading["Properties"]["Environment"]["Variables"].items() if isinstance(v, str)}

    assert ApiSettings.from_env(literal) == ApiSettings(("views/", "load/"), public_cache_seconds=30, dashboard=True)


def test_the_read_function_may_read_the_counts_table_and_write_its_logs_nothing_else(default):
    _, reading = read_function(default)
    role_id = reading["Properties"]["Role"]["Fn::GetAtt"][0]
    (policy,) = [
        body for body in resources(default, "AWS::IAM::Policy").values()
        if {"Ref": role_id} in body["Properties"]["Roles"]
    ]
    granted: dict[str, set[str]] = {}
    for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
        assert statement["Effect"] == "Allow"
        for resource in as_list(statement["Resource"]):
            granted.setdefault(render(resource), set()).update(as_list(statement["Action"]))
    log_group = reading["Properties"]["LoggingConfig"]["LogGroup"]["Ref"]

    assert granted == {
        "${%s.Arn}" % table_id(default, COUNTS_TABLE.partition_key): READ_ACTIONS,
        "${%s.Arn}" % log_group: {"logs:CreateLogStream", "logs:PutLogEvents"},
    }
    role = default["Resources"][role_id]["Properties"]
    assert "ManagedPolicyArns" not in role and "Policies" not in role


def test_only_api_gateway_may_invoke_the_read_function(default):
    read_name, _ = read_function(default)
    permissions = [
        body["Properties"] for body in resources(default, "AWS::Lambda::Permission").values()
        if body["Properties"]["FunctionName"] == {"Fn::GetAtt": [read_name, "Arn"]}
    ]

    assert permissions and {p["Principal"] for p in permissions} == {"apigateway.amazonaws.com"}
    assert {render(p["SourceArn"]).rsplit("/", 1)[-1] for p in permissions} == {"counts", "counters", "top", "calendar", "alerts", "openapi.json"}


def test_server_errors_and_latency_raise_alarms_shown_on_the_dashboard(default, public):
    def api_alarms(template):
        return {
            body["Properties"]["MetricName"]: body["Properties"]
            for body in resources(template, "AWS::CloudWatch::Alarm").values()
            if body["Properties"]["Namespace"] == "AWS/ApiGateway"
        }

    alarms = api_alarms(default)
    assert set(alarms) == {"5xx", "Latency"}
    assert (alarms["5xx"]["Statistic"], alarms["5xx"]["Threshold"]) == ("Sum", 0)
    assert (alarms["Latency"]["ExtendedStatistic"], alarms["Latency"]["Threshold"]) == ("p99", 1000)
    assert api_alarms(public)["Latency"]["Threshold"] == 800
    assert all(alarm["AlarmActions"] for alarm in api_alarms(public).values())  # the alarm topic, as for the others
    (dashboard,) = resources(default, "AWS::CloudWatch::Dashboard").values()
    body = json.loads(render(dashboard["Properties"]["DashboardBody"]))
    plotted = {m[1] for w in body["widgets"] for m in w["properties"].get("metrics", []) if m[0] == "AWS/ApiGateway"}
    assert {"Count", "4xx", "5xx", "Latency"} <= plotted


def test_the_stack_outputs_the_api_url(default):
    (api_id,) = resources(default, "AWS::ApiGatewayV2::Api")
    assert default["Outputs"]["ReadApiUrl"]["Value"] == {"Fn::GetAtt": [api_id, "ApiEndpoint"]}


def test_the_api_can_be_left_out(tmp_path):
    app = cdk.App(outdir=str(tmp_path))
    stack = TallyStack(app, "Closed", settings=StackSettings.from_context({**DEFAULT_CONTEXT, "readApi": "false"}.get))
    template = Template.from_stack(stack).to_json()

    assert not [body for body in template["Resources"].values() if body["Type"].startswith("AWS::ApiGatewayV2")]
    assert len(resources(template, "AWS::Lambda::Function")) == 1
    assert "ReadApiUrl" not in template["Outputs"]


def test_the_dashboard_needs_its_built_page(tmp_path, monkeypatch):
    monkeypatch.setattr(read_api, "DASHBOARD_PAGE", tmp_path / "missing.html")
    settings = StackSettings.from_context(
        {**DEFAULT_CONTEXT, "apiPublicPrefixes": ["views/"], "apiDashboard": True}.get
    )

    with pytest.raises(ReadApiSettingsError, match=r"ReadApiSettings.dashboard: .*run `make dashboard`"):
        TallyStack(cdk.App(outdir=str(tmp_path)), "NoPage", settings=settings)


@pytest.mark.parametrize(
    ("properties", "message"),
    [
        ({"public_prefixes": ("#rejected#",)}, "public_prefixes: public prefix '#rejected#' cannot begin a counter"),
        ({"public_prefixes": ("views/", "views/")}, "public_prefixes: public prefixes repeat"),
        ({"public_prefixes": "views/"}, "public_prefixes: public prefixes must be a list"),
        ({"cors_origins": ("https://blog.example.com/",)}, "cors_origins: 'https://blog.example.com/' is not an origin"),
        ({"dashboard": True}, "dashboard, ReadApiSettings.public_prefixes: the dashboard page reads anonymously"),
        ({"enabled": False, "public_prefixes": ("views/",)}, "enabled: the read API is off"),
        ({"public_rate_limit": 0}, "public_rate_limit: must be a whole number from 1 to 10000"),
        ({"latency_alarm_ms": 30_000}, "latency_alarm_ms: must be a whole number from 50 to 29000"),
        ({"enabled": "yes"}, "enabled: must be true or false"),
    ],
)
def test_construct_properties_are_refused_in_one_line_naming_the_property(properties, message):
    with pytest.raises(ReadApiSettingsError) as refused:
        ReadApiSettings(**properties)
    assert str(refused.value).startswith(f"ReadApiSettings.{message}")
    assert "\n" not in str(refused.value)
