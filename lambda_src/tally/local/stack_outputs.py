"""Find a deployed tally's tables and queue from its CloudFormation stack outputs.

The stack generates its table names, so scripts given `--stack NAME` look them
up here instead of guessing. The output keys are a contract with
`stacks/tally_stack.py`.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

STACK_OUTPUT_KEYS = ("EventsTableName", "CountsTableName", "EventsStreamArn", "FailureQueueUrl")


class StackOutputsError(LookupError):
    """The stack does not exist or lacks an output tally needs."""


def table_names_from_stack(stack_name: str, cloudformation_client: Any) -> dict[str, str]:
    """Map each of STACK_OUTPUT_KEYS to its value in the stack's outputs."""
    try:
        response = cloudformation_client.describe_stacks(StackName=stack_name)
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") == "ValidationError":
            raise StackOutputsError(
                f"stack {stack_name!r} not found (deploy it with `make deploy`, or check the region)"
            ) from error
        raise
    stacks = response.get("Stacks", [])
    if not stacks:
        raise StackOutputsError(f"stack {stack_name!r} not found")
    outputs = {item["OutputKey"]: item["OutputValue"] for item in stacks[0].get("Outputs", [])}
    missing = [key for key in STACK_OUTPUT_KEYS if key not in outputs]
    if missing:
        raise StackOutputsError(
            f"stack {stack_name!r} lacks the outputs {', '.join(missing)}: is it a tally stack, "
            "and has its last deployment finished?"
        )
    return {key: outputs[key] for key in STACK_OUTPUT_KEYS}
