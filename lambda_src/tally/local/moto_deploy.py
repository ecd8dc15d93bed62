"""What moto lacks for `cdk bootstrap` and `cdk deploy` of tally's stack, and for counting on it (`make deploy-local`).

Each patch reproduces one behaviour of AWS (CloudFormation, or a service
behind a resource) that the real CDK CLI or the deployed stack relies on and
moto 5 does not model. They change moto in this process only, for the local
toolkit: the Lambda function never imports this module. ``install()`` applies
them all, once; `scripts/deploy_local.py` runs moto's server with them.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

_installed = False


def install() -> None:
    global _installed
    if _installed:
        return
    _installed = True
    _template_url_on_any_endpoint()
    _outputs_of_a_change_set()
    _resources_moto_does_not_model()
    _streams_keep_their_records()


def _template_url_on_any_endpoint() -> None:
    """AWS: CreateStack and CreateChangeSet read ``TemplateURL`` from the S3 object it names, path-style too.

    With ``AWS_ENDPOINT_URL`` set, the CDK CLI names the uploaded template
    ``http://127.0.0.1:PORT/BUCKET/KEY``; moto reads a path-style URL only from
    ``localhost`` and takes any other host's first label for the bucket.
    """
    from moto.cloudformation import responses, utils

    original = utils.get_stack_from_s3_url

    def get_stack_from_s3_url(template_url: str, account_id: str, partition: str) -> str:
        parts = urlparse(template_url)
        if not parts.netloc.endswith("amazonaws.com"):
            from moto.s3.models import s3_backends

            bucket, key = parts.path.lstrip("/").split("/", 1)
            return s3_backends[account_id][partition].get_object(bucket, key).value.decode("utf-8")
        return original(template_url, account_id, partition)

    responses.get_stack_from_s3_url = get_stack_from_s3_url  # type: ignore[assignment]
    utils.get_stack_from_s3_url = get_stack_from_s3_url  # type: ignore[assignment]



def _outputs_of_a_change_set() -> None:
    """AWS: a stack created or updated by executing a change set answers its template's ``Outputs``.

    The CDK CLI deploys every stack through a change set, bootstrap's too (and
    reads ``BootstrapVersion`` from the toolkit stack's outputs); moto begins a
    new stack with an empty template and resolves its outputs from that, so it
    answers none. They are resolved from the executed template.
    """
    from moto.cloudformation.models import CloudFormationBackend

    original = CloudFormationBackend.execute_change_set

    def execute_change_set(self: Any, change_set_name: str, stack_name: str | None = None) -> None:
        original(self, change_set_name, stack_name)
        change_set = self.change_sets.get(change_set_name) or next(
            found for found in self.change_sets.values() if found.change_set_name == change_set_name
        )
        stack = self.stacks[change_set.stack_id]
        stack.template_dict = change_set.template_dict  # a new stack's was the empty template moto began it with
        stack.output_map = stack._create_output_map()

    CloudFormationBackend.execute_change_set = execute_change_set  # type: ignore[method-assign]


def _resources_moto_does_not_model() -> None:
    """AWS: CloudFormation creates every resource of a template, and answers ``Ref`` and ``Fn::GetAtt`` of each.

    moto skips types it has no CloudFormation model for, and then fails the
    stack on the first ``Fn::GetAtt`` of one: tally's alarms (their ``Arn``,
    which the dashboard's alarm widgets name) and its HTTP API (``ApiEndpoint``,
    the ``ReadApiUrl`` output). These models create them in moto's own
    CloudWatch and API Gateway v2 backends, as CloudFormation would through
    the services' APIs, so `describe-alarms` and `get-apis` list them too.
    """
    from moto.cloudformation import parsing
    from moto.core.common_models import CloudFormationModel

    class Created:
        """One created resource: its physical id (what ``Ref`` answers) and its attributes (``Fn::GetAtt``).
        Each model below names CloudFormationModel among its own bases: moto lists its direct subclasses only."""

        attributes: tuple[str, ...] = ()

        def __init__(self, physical_id: str, **attributes: str) -> None:
            self.physical_id = physical_id
            self.values = attributes

        @property
        def physical_resource_id(self) -> str:
            return self.physical_id

        @classmethod
        def has_cfn_attr(cls, attr: str) -> bool:
            return attr in cls.attributes

        def get_cfn_attribute(self, attribute_name: str) -> str:
            from moto.cloudformation.exceptions import UnformattedGetAttTemplateException

            if attribute_name not in self.values:
                raise UnformattedGetAttTemplateException()
            return self.values[attribute_name]

        @staticmethod
        def cloudformation_name_type() -> str:
            return ""

    class Alarm(Created, CloudFormationModel):
        attributes = ("Arn",)

        @staticmethod
        def cloudformation_name_type() -> str:
            return "AlarmName"

        @staticmethod
        def cloudformation_type() -> str:
            return "AWS::CloudWatch::Alarm"

        @classmethod
        def create_from_cloudformation_json(  # type: ignore[misc]
            cls, resource_name: str, cloudformation_json: dict[str, Any], account_id: str, region_name: str, **kwargs: Any
        ) -> Alarm:
            from moto.cloudwatch.models import cloudwatch_backends

            properties = cloudformation_json["Properties"]
            alarm = cloudwatch_backends[account_id][region_name].put_metric_alarm(
                name=properties.get("AlarmName", resource_name),
                namespace=properties.get("Namespace"),
                metric_name=properties.get("MetricName"),
                comparison_operator=properties["ComparisonOperator"],
                evaluation_periods=int(properties["EvaluationPeriods"]),
                period=int(properties.get("Period", 60)),
                threshold=float(properties["Threshold"]),
                statistic=properties.get("Statistic"),
                extended_statistic=properties.get("ExtendedStatistic"),
                description=properties.get("AlarmDescription", ""),
                dimensions=properties.get("Dimensions", []),
                alarm_actions=properties.get("AlarmActions", []),
                ok_actions=properties.get("OKActions", []),
                treat_missing_data=properties.get("TreatMissingData"),
            )
            return cls(alarm.name, Arn=alarm.alarm_arn)

    class HttpApi(Created, CloudFormationModel):
        attributes = ("ApiEndpoint", "ApiId")

        @staticmethod
        def cloudformation_type() -> str:
            return "AWS::ApiGatewayV2::Api"

        @classmethod
        def create_from_cloudformation_json(  # type: ignore[misc]
            cls, resource_name: str, cloudformation_json: dict[str, Any], account_id: str, region_name: str, **kwargs: Any
        ) -> HttpApi:
            properties = cloudformation_json["Properties"]
            api = _apis(account_id, region_name).create_api(
                api_key_selection_expression=None, cors_configuration=properties.get("CorsConfiguration"),
                description=properties.get("Description"), disable_schema_validation=None,
                disable_execute_api_endpoint=properties.get("DisableExecuteApiEndpoint"),
                name=properties.get("Name", resource_name), protocol_type=properties.get("ProtocolType", "HTTP"),
                route_selection_expression=None, tags=properties.get("Tags") or {}, version=None,
            )
            return cls(api.api_id, ApiEndpoint=api.api_endpoint, ApiId=api.api_id)

    class Integration(Created, CloudFormationModel):
        @staticmethod
        def cloudformation_type() -> str:
            return "AWS::ApiGatewayV2::Integration"

        @classmethod
        def create_from_cloudformation_json(  # type: ignore[misc]
            cls, resource_name: str, cloudformation_json: dict[str, Any], account_id: str, region_name: str, **kwargs: Any
        ) -> Integration:
            properties = cloudformation_json["Properties"]
            integration = _apis(account_id, region_name).create_integration(
                api_id=properties["ApiId"], connection_id=None, connection_type=None, content_handling_strategy=None,
                credentials_arn=None, description=None, integration_method=properties.get("IntegrationMethod"),
                integration_subtype=None, integration_type=properties["IntegrationType"],
                integration_uri=properties.get("IntegrationUri"), passthrough_behavior=None,
                payload_format_version=properties.get("PayloadFormatVersion"), request_parameters=None,
                request_templates=None, response_parameters=None, template_selection_expression=None,
                timeout_in_millis=properties.get("TimeoutInMillis"), tls_config={},
            )
            return cls(integration.id)

    class Route(Created, CloudFormationModel):
        @staticmethod
        def cloudformation_type() -> str:
            return "AWS::ApiGatewayV2::Route"

        @classmethod
        def create_from_cloudformation_json(  # type: ignore[misc]
            cls, resource_name: str, cloudformation_json: dict[str, Any], account_id: str, region_name: str, **kwargs: Any
        ) -> Route:
            properties = cloudformation_json["Properties"]
            route = _apis(account_id, region_name).create_route(
                api_id=properties["ApiId"], api_key_required=False, authorization_scopes=[],
                authorization_type=properties.get("AuthorizationType", "NONE"), authorizer_id=None,
                model_selection_expression=None, operation_name=None, request_models=None, request_parameters=None,
                route_key=properties["RouteKey"], route_response_selection_expression=None, target=properties.get("Target"),
            )
            return cls(route.route_id)

    class Stage(Created, CloudFormationModel):
        @staticmethod
        def cloudformation_type() -> str:
            return "AWS::ApiGatewayV2::Stage"

        @classmethod
        def create_from_cloudformation_json(  # type: ignore[misc]
            cls, resource_name: str, cloudformation_json: dict[str, Any], account_id: str, region_name: str, **kwargs: Any
        ) -> Stage:
            properties = cloudformation_json["Properties"]
            config = {"stageName": properties["StageName"], "autoDeploy": properties.get("AutoDeploy")}
            stage = _apis(account_id, region_name).create_stage(properties["ApiId"], config)
            return cls(stage.name)

    for cached in (parsing.get_model_list, parsing.get_model_map, parsing.get_name_type_map):
        cached.cache_clear()  # moto lists CloudFormationModel's subclasses once: list them again with these


def _apis(account_id: str, region_name: str) -> Any:
    from moto.apigatewayv2.models import apigatewayv2_backends

    return apigatewayv2_backends[account_id][region_name]


def _streams_keep_their_records() -> None:
    """AWS: a DynamoDB stream keeps each record 24 hours for every reader, and Lambda's event source mapping
    reads it like any other.

    moto hands a table's stream records to each mapped function as they are
    written, by running the function in Docker, and then drops them from the
    shard when it answers, Docker or not. Locally the stream runner
    (`scripts/run_stream.py`, `tally.local.stream_reader`) plays the mapping
    through the Streams API, so the mapping the stack creates must leave the
    records where the runner reads them.
    """
    from moto.awslambda.models import LambdaBackend

    def send_dynamodb_items(self: Any, function_arn: str, items: list[Any], source: str) -> str:
        return ""  # delivered to nobody; moto keeps the records when the answer is empty

    LambdaBackend.send_dynamodb_items = send_dynamodb_items  # type: ignore[method-assign]
