"""Names and helpers for the tables the tests create on moto."""

from __future__ import annotations

from tally.core.retry import Backoff

EVENTS = "tally-events"
COUNTS = "tally-counts"


def no_sleep_backoff(attempts: int = 8) -> Backoff:
    return Backoff(attempts=attempts, sleep=lambda _seconds: None)


def read_counts(client, counter: str) -> dict[str, int]:
    """Every bucket of one counter, straight from the table."""
    items = client.query(
        TableName=COUNTS,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": counter}},
        ConsistentRead=True,
    )["Items"]
    return {item["sk"]["S"]: int(item["count"]["N"]) for item in items if "count" in item}  # not sketch items
