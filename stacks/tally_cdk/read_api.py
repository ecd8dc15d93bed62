"""The HTTP read API: an API Gateway HTTP API in front of a read function that runs tally's own package.

    GET /counts?counter=A&counter=B&window=24h   (IAM, SigV4)
    GET /counters?prefix=views/                  (IAM, SigV4)
    GET /openapi.json                            (IAM, SigV4: this API described, OpenAPI 3)
    GET /public/counts, /public/counters         (anonymous, counters under the public prefixes; only when set)
    GET /                                        (the dashboard page; only when enabled, reads /public/...)

The read function is the counting function's asset with another handler
(`tally.functions.read_api.handler`), so the API answers through the same library as the
CLI. It may read the counts table and write its own log group, nothing else.
The HTTP API was chosen over a REST API: IAM authorization, CORS and route
throttling are all it needs, at less than a third of the price per request and
with lower latency. Routing inside the function is Powertools' event handler.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import jsii
from aws_cdk import Acknowledgment, Duration, RemovalPolicy, Stack, Validations
from aws_cdk import aws_apigateway as apigateway
from aws_cdk import aws_apigatewayv2 as apigwv2
from aws_cdk import aws_apigatewayv2_authorizers as authorizers
from aws_cdk import aws_apigatewayv2_integrations as integrations
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

import tally
from tally_cdk.roles import LOG_RETENTION, role_with_own_logs
from tally.core.api_access import DASHBOARD_PATH, PUBLIC_PATHS, SIGNED_PATHS, ApiSettings
from tally.core.settings import SettingsError

READ_HANDLER = "tally.functions.read_api.handler"
# Where `make dashboard` writes the page: inside the asset, so the function can serve it.
DASHBOARD_PAGE = Path(tally.__file__).resolve().parent / "dashboard.html"  # package data, built by `make dashboard`
# A 24 h minute series of 20 counters is about 1.3 MB of JSON to build: 512 MB gives the CPU for it
# (Lambda's CPU grows with memory) and keeps a cold start near a second.
READ_MEMORY_MB = 512
# BatchGetItem retries included, a read takes well under a second; API Gateway gives up after 30 s.
READ_TIMEOUT = Duration.seconds(10)
ALARM_PERIOD = Duration.minutes(5)
# What a browser sends with a SigV4-signed request (a page that signs with its own credentials).
SIGV4_HEADERS = ["authorization", "content-type", "x-amz-date", "x-amz-security-token", "x-amz-content-sha256"]

ORIGIN_PATTERN = re.compile(r"https?://[A-Za-z0-9.-]+(:\d{1,5})?")
MAX_CORS_ORIGINS = 20
# API Gateway's account-level defaults bound what one route may be given.
MAX_RATE_LIMIT = 10_000
MAX_BURST_LIMIT = 5_000
# The integration gives up after 30 s; an alarm must fire below that.
LATENCY_ALARM_RANGE_MS = (50, 29_000)


class ReadApiSettingsError(SettingsError):
    """A read API property the stack cannot be built with; ``fields`` names the properties at fault."""

    def __str__(self) -> str:
        return f"{', '.join(f'ReadApiSettings.{field}' for field in self.fields)}: {self.reason}"


@dataclass(frozen=True)
class ReadApiSettings:
    """The read API's properties (CDK context keys ``readApi``, ``api*``), validated when built.

    ``enabled``: the API exists (default on, IAM on every route).
    ``public_prefixes``: counters anonymous readers may read through ``/public/...``; empty keeps public read off.
    ``public_cache_seconds``: the ``Cache-Control: max-age`` of public answers.
    ``public_rate_limit``/``public_burst_limit``: API Gateway's throttle on each public route (requests/s).
    ``cors_origins``: browser origins allowed to call the API (``https://host[:port]`` or ``*``); empty: none.
    ``dashboard``: serve the dashboard page at ``/`` (needs public prefixes: the page reads anonymously).
    ``latency_alarm_ms``: the p99 latency above which the latency alarm fires.
    """

    enabled: bool = True
    public_prefixes: tuple[str, ...] = ()
    public_cache_seconds: int = 60
    public_rate_limit: int = 50
    public_burst_limit: int = 100
    cors_origins: tuple[str, ...] = ()
    dashboard: bool = False
    latency_alarm_ms: int = 1_000

    def __post_init__(self) -> None:
        for name in ("enabled", "dashboard"):
            if not isinstance(getattr(self, name), bool):
                raise ReadApiSettingsError(f"must be true or false, got {getattr(self, name)!r}", (name,))
        try:
            runtime = ApiSettings(self.public_prefixes, self.public_cache_seconds, self.dashboard)
        except SettingsError as error:
            raise ReadApiSettingsError(error.reason, error.fields) from None
        object.__setattr__(self, "public_prefixes", runtime.public_prefixes)
        _whole(self, "public_rate_limit", 1, MAX_RATE_LIMIT)
        _whole(self, "public_burst_limit", 1, MAX_BURST_LIMIT)
        _whole(self, "latency_alarm_ms", *LATENCY_ALARM_RANGE_MS)
        object.__setattr__(self, "cors_origins", _origins(self.cors_origins))
        if self.dashboard and not self.public_prefixes:
            raise ReadApiSettingsError(
                "the dashboard page reads anonymously through /public/counts: set public prefixes too",
                ("dashboard", "public_prefixes"),
            )
        if not self.enabled and (self.public_prefixes or self.dashboard or self.cors_origins):
            raise ReadApiSettingsError(
                "the read API is off, so public prefixes, CORS origins and the dashboard have nothing to apply to",
                ("enabled",),
            )

    @property
    def api_settings(self) -> ApiSettings:
        """The part the read function reads from its environment."""
        return ApiSettings(self.public_prefixes, self.public_cache_seconds, self.dashboard)


def _whole(settings: ReadApiSettings, name: str, minimum: int, maximum: int) -> None:
    value = getattr(settings, name)
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise ReadApiSettingsError(f"must be a whole number from {minimum} to {maximum}, got {value!r}", (name,))


def _origins(origins: object) -> tuple[str, ...]:
    if isinstance(origins, str) or not isinstance(origins, (list, tuple)):
        raise ReadApiSettingsError(f"must be a list of origins, got {origins!r}", ("cors_origins",))
    if len(origins) > MAX_CORS_ORIGINS:
        raise ReadApiSettingsError(f"at most {MAX_CORS_ORIGINS} origins, got {len(origins)}", ("cors_origins",))
    for origin in origins:
        if origin != "*" and not (isinstance(origin, str) and ORIGIN_PATTERN.fullmatch(origin)):
            raise ReadApiSettingsError(
                f"{origin!r} is not an origin: give scheme://host[:port] without a path, e.g. "
                "https://blog.example.com, or *",
                ("cors_origins",),
            )
    return tuple(origins)


@jsii.implements(apigwv2.IAccessLogSettings)
class _AccessLog:
    """One JSON line per request: who, which route, status, latency, and the integration's error if any."""

    def __init__(self, log_group: logs.ILogGroup) -> None:
        self._log_group = log_group

    @property
    def destination(self) -> apigwv2.IAccessLogDestination:
        return apigwv2.LogGroupLogDestination(self._log_group)

    @property
    def format(self) -> apigateway.AccessLogFormat:
        return apigateway.AccessLogFormat.custom(
            '{"requestId":"$context.requestId","ip":"$context.identity.sourceIp",'
            '"caller":"$context.identity.caller","requestTime":"$context.requestTime",'
            '"routeKey":"$context.routeKey","status":"$context.status",'
            '"responseLength":"$context.responseLength","latency":"$context.responseLatency",'
            '"integrationError":"$context.integrationErrorMessage"}'
        )


class ReadApi(Construct):
    """The HTTP API, its read function and what watches them; `Tally` builds it from `ReadApiSettings`."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: ReadApiSettings,
        counts_table: dynamodb.ITable,
        code: lambda_.Code,
        runtime: lambda_.Runtime,
        layers: list[lambda_.ILayerVersion],
        environment: Mapping[str, str],
    ) -> None:
        super().__init__(scope, construct_id)
        self.settings = settings
        if settings.dashboard and not DASHBOARD_PAGE.is_file():
            raise ReadApiSettingsError(
                f"the dashboard page {DASHBOARD_PAGE.name} is not built: run `make dashboard` before synth",
                ("dashboard",),
            )
        self.function = self._read_function(counts_table, code, runtime, layers, environment)
        self.http_api = self._http_api()
        self.url = self.http_api.api_endpoint

    def _read_function(
        self,
        counts_table: dynamodb.ITable,
        code: lambda_.Code,
        runtime: lambda_.Runtime,
        layers: list[lambda_.ILayerVersion],
        environment: Mapping[str, str],
    ) -> lambda_.Function:
        role, log_group = role_with_own_logs(self, "ReadFunction", "tally read API: read the counts table")
        # Exact keys (batch plan), ranges (range plan, listing), one item (a counter's existence).
        counts_table.grant(role, "dynamodb:BatchGetItem", "dynamodb:GetItem", "dynamodb:Query")
        function = lambda_.Function(
            self,
            "ReadFunction",
            description="Answers the HTTP read API from the counts table",
            code=code,
            handler=READ_HANDLER,
            runtime=runtime,
            architecture=lambda_.Architecture.ARM_64,
            memory_size=READ_MEMORY_MB,
            timeout=READ_TIMEOUT,
            role=role,
            log_group=log_group,
            layers=layers,
            environment={**environment, **self.settings.api_settings.environment()},
        )
        Validations.of(function).acknowledge(
            Acknowledgment(
                id="AwsSolutions::AwsSolutions-L1",
                reason="The read function runs the counting function's package on the same pinned runtime, "
                "python3.13, with the matching Powertools layer; both move together in a reviewed upgrade.",
            )
        )
        return function

    def _http_api(self) -> apigwv2.HttpApi:
        origins = list(self.settings.cors_origins)
        api = apigwv2.HttpApi(
            self,
            "HttpApi",
            api_name=f"{Stack.of(self).stack_name}-read",
            description="tally read API: counts and counters of the counts table",
            create_default_stage=False,
            cors_preflight=apigwv2.CorsPreflightOptions(
                allow_origins=origins,
                allow_methods=[apigwv2.CorsHttpMethod.GET],
                allow_headers=SIGV4_HEADERS,
                max_age=Duration.hours(1),
            )
            if origins
            else None,
        )
        access_logs = logs.LogGroup(self, "AccessLogs", retention=LOG_RETENTION, removal_policy=RemovalPolicy.DESTROY)
        stage = apigwv2.HttpStage(
            self,
            "DefaultStage",
            http_api=api,
            stage_name="$default",
            auto_deploy=True,
            access_log_settings=_AccessLog(access_logs),
        )
        integration = integrations.HttpLambdaIntegration("ReadIntegration", self.function)
        signed = authorizers.HttpIamAuthorizer()
        for path in SIGNED_PATHS:
            api.add_routes(path=path, methods=[apigwv2.HttpMethod.GET], integration=integration, authorizer=signed)
        anonymous = list(PUBLIC_PATHS) if self.settings.public_prefixes else []
        anonymous += [DASHBOARD_PATH] if self.settings.dashboard else []
        route_settings = {}
        for path in anonymous:
            (route,) = api.add_routes(path=path, methods=[apigwv2.HttpMethod.GET], integration=integration)
            Validations.of(route).acknowledge(
                Acknowledgment(
                    id="AwsSolutions::AwsSolutions-APIG4",
                    reason="Public read was configured for this route: it answers anonymous readers for the "
                    "counters under the configured public prefixes only (the function refuses any other), "
                    "throttled per route.",
                )
            )
            stage.node.add_dependency(route)  # route settings may only name routes that exist
            route_settings[f"GET {path}"] = {
                "ThrottlingRateLimit": self.settings.public_rate_limit,
                "ThrottlingBurstLimit": self.settings.public_burst_limit,
            }
        if route_settings:
            stage.node.default_child.add_property_override("RouteSettings", route_settings)
        return api

    def alarms(self) -> list[tuple[str, str, cloudwatch.IMetric, float]]:
        """(id, description, metric, threshold) of each alarm, raised by `Tally` beside its own."""
        return [
            (
                "ReadApiServerErrorsAlarm",
                "The read API answered with server errors (5xx): the read function failed or the counts table "
                "refused reads",
                self.http_api.metric_server_error(statistic="Sum", period=ALARM_PERIOD),
                0,
            ),
            (
                "ReadApiLatencyAlarm",
                f"The read API's p99 latency exceeds {self.settings.latency_alarm_ms} ms",
                self.http_api.metric_latency(statistic="p99", period=ALARM_PERIOD),
                self.settings.latency_alarm_ms,
            ),
        ]

    def widgets(self) -> list[cloudwatch.IWidget]:
        """The dashboard row of the read API."""
        return [
            cloudwatch.GraphWidget(
                title="Read API requests and errors",
                left=[self.http_api.metric_count(statistic="Sum", period=ALARM_PERIOD)],
                right=[
                    self.http_api.metric_client_error(statistic="Sum", period=ALARM_PERIOD),
                    self.http_api.metric_server_error(statistic="Sum", period=ALARM_PERIOD),
                ],
                width=8,
            ),
            cloudwatch.GraphWidget(
                title="Read API latency (p50, p99)",
                left=[
                    self.http_api.metric_latency(statistic="p50", period=ALARM_PERIOD),
                    self.http_api.metric_latency(statistic="p99", period=ALARM_PERIOD),
                ],
                width=8,
            ),
            cloudwatch.GraphWidget(
                title="Read function duration (p99) and errors",
                left=[self.function.metric_duration(statistic="p99", period=ALARM_PERIOD)],
                right=[self.function.metric_errors(statistic="Sum", period=ALARM_PERIOD)],
                width=8,
            ),
        ]
