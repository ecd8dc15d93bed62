"""One request to the counts table, retried while DynamoDB throttles it; batch writes; error codes.

What every part of ``tally.dynamo`` sends its requests through: throttling, lost answers and
unprocessed items are retried with jittered exponential backoff, and everything else is raised.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from tally.core.commit import RetriesExhausted
from tally.core.retry import Backoff
from tally.core.settings import Settings
from tally.core.tables import COUNTS_TABLE

logger = logging.getLogger(__name__)

BATCH_GET_LIMIT = 100
BATCH_WRITE_LIMIT = 25
# Worth another try: throttling, an answer lost (the write may have landed: its watermark
# tells), and a write that met a transaction on its item (another release's, or a backfill's).
RETRYABLE_CODES = frozenset(
    {
        "ThrottlingException",
        "ProvisionedThroughputExceededException",
        "RequestLimitExceeded",
        "TransactionInProgressException",
        "TransactionConflictException",
        "InternalServerError",
    }
)

Key = tuple[str, str]  # (pk, sk)


class TableAccess:
    """What each part of ``CountsTable`` works with: a low-level boto3 DynamoDB client, the counts table's name,
    the settings it is counted with, and the backoff that paces a retried request."""

    client: Any
    table_name: str
    settings: Settings
    backoff: Callable[[], Backoff]


def retried_while_throttled(backoff: Callable[[], Backoff], operation: Callable[..., dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
    """One request, retried while DynamoDB throttles it."""
    for attempt in backoff().pauses():
        try:
            return operation(**kwargs)
        except ClientError as error:
            if error_code(error) not in RETRYABLE_CODES:
                raise
            logger.warning("request throttled (attempt %d): %s", attempt + 1, describe(error))
    raise RetriesExhausted("requests still throttled after every retry")


def batch_write(
    client: Any,
    table: str,
    requests: list[dict[str, Any]],
    *,
    backoff: Callable[[], Backoff] = Backoff,
    on_written: Callable[[int], None] | None = None,
) -> int:
    """Put or delete requests in BatchWriteItem calls of 25; UnprocessedItems are retried with backoff, never dropped."""
    written = 0
    for start in range(0, len(requests), BATCH_WRITE_LIMIT):
        pending = requests[start : start + BATCH_WRITE_LIMIT]
        done = len(pending)
        for _ in backoff().pauses():
            response = retried_while_throttled(backoff, client.batch_write_item, RequestItems={table: pending})
            pending = response.get("UnprocessedItems", {}).get(table, [])
            if not pending:
                break
        else:
            raise RetriesExhausted(f"{len(pending)} items still unprocessed after every retry")
        written += done
        if on_written is not None:
            on_written(done)
    return written


def error_code(error: ClientError) -> str:
    """The error's code, as DynamoDB names it (``ConditionalCheckFailedException``, ``ThrottlingException``, ...)."""
    return str(error.response.get("Error", {}).get("Code", ""))


def describe(error: ClientError) -> str:
    """The error's code and message, and a cancelled transaction's reasons, for a log line or an exception."""
    reasons = error.response.get("CancellationReasons")
    detail = f" reasons={[r.get('Code') for r in reasons]}" if reasons else ""
    return f"{error_code(error)}: {error.response.get('Error', {}).get('Message', '')}{detail}"


def key_of(pk: str, sk: str) -> dict[str, dict[str, str]]:
    """A counts table key as DynamoDB's low-level API spells it."""
    return {COUNTS_TABLE.partition_key: {"S": pk}, COUNTS_TABLE.sort_key: {"S": sk}}
