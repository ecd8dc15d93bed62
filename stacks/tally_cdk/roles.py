"""A Lambda function's own role and log group, shared by every function of tally; and cdk-nag's wildcard findings
on a construct's policies, acknowledged one by one."""

from __future__ import annotations

import json
from typing import Any

from aws_cdk import Acknowledgment, Duration, RemovalPolicy, Stack, Validations
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

LOG_RETENTION = logs.RetentionDays.ONE_MONTH


def role_with_own_logs(scope: Construct, name: str, description: str) -> tuple[iam.Role, logs.LogGroup]:
    """``<name>Role`` that may write ``<name>Logs`` (30 days) and nothing else yet.

    An explicit role with no managed policies: AWSLambdaBasicExecutionRole
    would allow writing to every log group in the account.
    """
    log_group = logs.LogGroup(scope, f"{name}Logs", retention=LOG_RETENTION, removal_policy=RemovalPolicy.DESTROY)
    role = iam.Role(scope, f"{name}Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"), description=description)
    log_group.grant_write(role)
    return role, log_group


def stage_function(
    scope: Construct,
    name: str,
    *,
    description: str,
    role_description: str,
    statements: list[iam.PolicyStatement],
    handler: str,
    memory_size: int,
    timeout: Duration,
    code: lambda_.Code,
    runtime: lambda_.Runtime,
    layers: list[lambda_.ILayerVersion],
    environment: dict[str, str],
) -> lambda_.Function:
    """One function of a state machine (the backfill's, the close's): arm64, its own role (``statements`` and
    nothing else) and logs, the counting function's runtime and Powertools layer, whose pinning cdk-nag is told
    of once here."""
    role, log_group = role_with_own_logs(scope, name, role_description)
    for statement in statements:
        role.add_to_policy(statement)
    function = lambda_.Function(
        scope,
        name,
        description=description,
        code=code,
        handler=handler,
        runtime=runtime,
        architecture=lambda_.Architecture.ARM_64,
        memory_size=memory_size,
        timeout=timeout,
        role=role,
        log_group=log_group,
        layers=layers,
        environment=environment,
    )
    Validations.of(function).acknowledge(
        Acknowledgment(
            id="AwsSolutions::AwsSolutions-L1",
            reason="The runtime is pinned to python3.13 together with the matching Powertools "
            "layer flavour (python313), as for the counting function; moving both is a reviewed upgrade.",
        )
    )
    return function


def nag_text(value: Any) -> str:
    """A resolved resource as cdk-nag names it in a finding: references in <>, joins joined, the rest as JSON."""
    if isinstance(value, str):
        return value
    if "Ref" in value:
        return f"<{value['Ref']}>"
    if "Fn::GetAtt" in value:
        return "<{}.{}>".format(*value["Fn::GetAtt"])
    if "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return separator.join(map(nag_text, parts))
    return json.dumps(value, separators=(",", ":"))


def acknowledge_wildcards(scope: Construct, reason: str) -> None:
    """Acknowledge, on each policy under ``scope``, the wildcard resources it holds, each by its own finding id
    (``AwsSolutions-IAM5[Resource::<resource>]``), for ``reason``: a new wildcard is a new finding, which fails
    the synth until someone reviews it and says why here."""
    stack = Stack.of(scope)
    for policy in scope.node.find_all():
        if not isinstance(policy, iam.CfnPolicy):
            continue
        document = stack.resolve(policy.policy_document)
        for statement in document["Statement"]:
            resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
            for resource in map(nag_text, resources):
                if "*" in resource:
                    Validations.of(policy).acknowledge(
                        Acknowledgment(id=f"AwsSolutions::AwsSolutions-IAM5[Resource::{resource}]", reason=reason)
                    )
