"""Find a deployed tally's tables and queue from its CloudFormation stack outputs.

The stack generates its table names, so scripts given `--stack NAME` and
`tally.Reader.from_stack` look them up here instead of guessing. The output keys are a contract with
`stacks/tally_stack.py`.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

STACK_OUTPUT_KEYS = ("EventsTableName", "CountsTableName", "EventsStreamArn", "FailureQueueUrl")
STATE_MACHINE_OUTPUT = "BackfillStateMachineArn"  # only where the stack has the backfill in the account
AUDIT_STATE_MACHINE_OUTPUT = "AuditStateMachineArn"  # ... and the audit's Scan beside it
EXPORTS_OUTPUT = "BackfillExports"  # s3://BUCKET/PREFIX: where exports go, and both state machines' work
CLOSE_STATE_MACHINE_OUTPUT = "CloseStateMachineArn"  # only where counters keep days and months (calendarPrefixes)


class StackOutputsError(LookupError):
    """The stack does not exist or lacks an output tally needs."""


def table_names_from_stack(stack_name: str, cloudformation_client: Any) -> dict[str, str]:
    """Map each of STACK_OUTPUT_KEYS to its value in the stack's outputs."""
    outputs = stack_outputs(stack_name, cloudformation_client)
    return {key: outputs[key] for key in STACK_OUTPUT_KEYS}


def stack_outputs(stack_name: str, cloudformation_client: Any) -> dict[str, str]:
    """Every output of a tally stack (which has at least STACK_OUTPUT_KEYS), by key."""
    try:
        response = cloudformation_client.describe_stacks(StackName=stack_name)
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") == "ValidationError":
            raise StackOutputsError(_not_found(stack_name, cloudformation_client)) from error
        raise
    stacks = response.get("Stacks", [])
    if not stacks:
        raise StackOutputsError(_not_found(stack_name, cloudformation_client))
    outputs = {item["OutputKey"]: item["OutputValue"] for item in stacks[0].get("Outputs", [])}
    missing = [key for key in STACK_OUTPUT_KEYS if key not in outputs]
    if missing:
        raise StackOutputsError(
            f"stack {stack_name!r} lacks the outputs {', '.join(missing)}: is it a tally stack, "
            "and has its last deployment finished?"
        )
    return outputs


def _not_found(stack_name: str, cloudformation_client: Any) -> str:
    """Where the stack was looked for, and the fix that fits there."""
    endpoint, region = cloudformation_client.meta.endpoint_url, cloudformation_client.meta.region_name
    if ".amazonaws.com" in endpoint:
        return f"stack {stack_name!r} not found in {region} (deploy it with `make deploy`, or check AWS_REGION)"
    return (
        f"stack {stack_name!r} not found at {endpoint}: --stack reads a deployed tally stack's outputs, and a local "
        "server holds none; name the tables instead (--table/--counts-table, or EVENTS_TABLE/COUNTS_TABLE as the "
        "export line of `local_pipeline.py --keep-running` sets them)"
    )
