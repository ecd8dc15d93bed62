"""The events and counts tables created as the stack creates them (``core/tables.py`` describes them): locally and in tests."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from tally.core.tables import COUNTS_TABLE, EVENTS_TABLE, TableDescription
from tally.dynamo.calls import error_code


def create_tables(
    client: Any, events_table: str, counts_table: str, events: TableDescription = EVENTS_TABLE
) -> None:
    """Create both tables as the stack does (used locally and in tests), and wait for them.

    Point-in-time recovery is on for both, as in the stack. ``events`` describes
    the events table: ``tables.events_table_for(rules)`` streams the images the rules need.
    """
    for description, name in ((events, events_table), (COUNTS_TABLE, counts_table)):
        create_table(client, description, name)


def create_table(client: Any, description: TableDescription, name: str) -> None:
    """Create one table from its description as the stack does (TTL and point-in-time recovery), and wait for it."""
    client.create_table(**description.create_table_request(name))
    client.get_waiter("table_exists").wait(TableName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 60})
    ttl = description.ttl_request(name)
    if ttl:
        client.update_time_to_live(**ttl)
    # As the stack does; a point-in-time export (the backfill's source) needs it. DynamoDB Local has
    # neither backups nor exports, and answers UnknownOperationException.
    try:
        client.update_continuous_backups(
            TableName=name, PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True}
        )
    except ClientError as error:
        if error_code(error) != "UnknownOperationException":
            raise
