"""A Lambda function's own role and log group, shared by the counting and the read function."""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_iam as iam
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
