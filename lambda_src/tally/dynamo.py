"""All DynamoDB I/O of the counts table: commits, batch gets, range queries, table setup.

Everything here retries what DynamoDB asks to be retried (conflicts,
throttling, unprocessed keys) with jittered exponential backoff, and raises
everything else: a lost write must surface as a failed invocation, never as a
silently low count.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from tally.core.commit import Outcome, classify_cancellation, transact_items
from tally.core.retry import Backoff
from tally.core.segments import Item, Segment
from tally.core.settings import Settings
from tally.core.tables import COUNT_ATTRIBUTE, COUNTS_TABLE, EVENTS_TABLE, TTL_ATTRIBUTE, TableDescription

logger = logging.getLogger(__name__)

BATCH_GET_LIMIT = 100
_THROTTLING_CODES = frozenset(
    {
        "ThrottlingException",
        "ProvisionedThroughputExceededException",
        "RequestLimitExceeded",
        "TransactionInProgressException",
        "InternalServerError",
    }
)

Key = tuple[str, str]  # (pk, sk)


class CommitFailed(RuntimeError):
    """A segment could not be committed; the invocation must fail so Lambda retries it."""


class RetriesExhausted(RuntimeError):
    """DynamoDB kept pushing back after every retry."""


class BackfillClaimed(RuntimeError):
    """The table's history at this instant is being, or was, counted from another export."""


BACKFILL_PREFIX = "#backfill#"


@dataclass(frozen=True)
class CommitResult:
    transactions: int  # parts of the segment committed now
    duplicates: int  # parts found committed before (a retry)
    retries: int  # conflicted or throttled attempts


@dataclass
class Fetched:
    """Counts read for some keys, and what reading them cost in requests and items."""

    counts: dict[Key, int] = field(default_factory=dict)
    requests: int = 0
    items: int = 0


class CountsTable:
    """The counts table as tally uses it, over a low-level boto3 DynamoDB client."""

    def __init__(
        self,
        client: Any,
        table_name: str,
        settings: Settings,
        backoff: Callable[[], Backoff] = Backoff,
    ) -> None:
        self.client = client
        self.table_name = table_name
        self.settings = settings
        self.backoff = backoff

    def commit(self, segment: Segment, source: str) -> CommitResult:
        """Commit every part of a segment exactly once, in order."""
        transactions = duplicates = retries = 0
        for part, deltas in enumerate(segment.parts()):
            duplicate, part_retries = self._commit_part(segment, part, deltas, source)
            duplicates += duplicate
            transactions += not duplicate
            retries += part_retries
        return CommitResult(transactions, duplicates, retries)

    def _commit_part(self, segment: Segment, part: int, deltas: list[tuple[Item, int]], source: str) -> tuple[bool, int]:
        """One TransactWriteItems, retried on conflict or throttling; (was it a duplicate, retries)."""
        items = transact_items(segment, part, deltas, self.table_name, source, self.settings)
        name = f"{segment.first_sequence}#{part}"
        retries = 0
        for _ in self.backoff().pauses():
            try:
                self.client.transact_write_items(TransactItems=items)
                return False, retries
            except ClientError as error:
                outcome = _commit_outcome(error)
                if outcome is Outcome.DUPLICATE:
                    return True, retries
                if outcome is Outcome.FAIL:
                    raise CommitFailed(f"segment part {name}: {_describe(error)}") from error
                retries += 1
                logger.warning("commit of segment part %s retried: %s", name, _describe(error))
        raise RetriesExhausted(f"segment part {name} still conflicted or throttled after {retries} tries")

    def claim_backfill(self, table_arn: str, count_from_iso: str, export_arn: str, expires_s: int) -> None:
        """Tie a table's count-from instant to one export, or raise BackfillClaimed naming the other one.

        Markers are keyed by export, so counting a second export of the same
        instant would add every item again; the claim makes that impossible.
        Claiming again with the same export (a resumed run) succeeds.
        """
        key = {COUNTS_TABLE.partition_key: {"S": BACKFILL_PREFIX + table_arn}, COUNTS_TABLE.sort_key: {"S": count_from_iso}}
        try:
            self.client.put_item(
                TableName=self.table_name,
                Item={**key, "export": {"S": export_arn}, TTL_ATTRIBUTE: {"N": str(expires_s)}},
                ConditionExpression="attribute_not_exists(#pk) OR #export = :export",
                ExpressionAttributeNames={"#pk": COUNTS_TABLE.partition_key, "#export": "export"},
                ExpressionAttributeValues={":export": {"S": export_arn}},
            )
        except ClientError as error:
            if _code(error) != "ConditionalCheckFailedException":
                raise
            claimed = self.client.get_item(TableName=self.table_name, Key=key, ConsistentRead=True).get("Item", {})
            other = claimed.get("export", {}).get("S", "?")
            raise BackfillClaimed(
                f"the history of {table_arn} at {count_from_iso} is counted from export {other}; "
                f"counting {export_arn} too would count its items twice"
            ) from None

    def batch_get(self, keys: Iterable[Key], consistent: bool = False) -> Fetched:
        """Counts of exact bucket keys, 100 keys a request, unprocessed keys retried until none are left."""
        fetched = Fetched()
        unique = list(dict.fromkeys(keys))
        for start in range(0, len(unique), BATCH_GET_LIMIT):
            pending = [_key(pk, sk) for pk, sk in unique[start : start + BATCH_GET_LIMIT]]
            for _ in self.backoff().pauses():
                request = {
                    self.table_name: {
                        "Keys": pending,
                        "ConsistentRead": consistent,
                        "ProjectionExpression": "#pk, #sk, #count",
                        "ExpressionAttributeNames": {
                            "#pk": COUNTS_TABLE.partition_key,
                            "#sk": COUNTS_TABLE.sort_key,
                            "#count": COUNT_ATTRIBUTE,
                        },
                    }
                }
                response = self._call(self.client.batch_get_item, RequestItems=request)
                fetched.requests += 1
                for item in response.get("Responses", {}).get(self.table_name, []):
                    fetched.counts[(item["pk"]["S"], item["sk"]["S"])] = int(item[COUNT_ATTRIBUTE]["N"])
                    fetched.items += 1
                pending = response.get("UnprocessedKeys", {}).get(self.table_name, {}).get("Keys", [])
                if not pending:
                    break
            else:
                raise RetriesExhausted(f"{len(pending)} keys still unprocessed after every retry")
        return fetched

    def query(self, counter: str, first_sk: str, last_sk: str, consistent: bool = False) -> Fetched:
        """Counts of every bucket of ``counter`` with first_sk <= sk <= last_sk, all pages."""
        fetched = Fetched()
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "KeyConditionExpression": "#pk = :pk AND #sk BETWEEN :first AND :last",
            "ProjectionExpression": "#sk, #count",
            "ExpressionAttributeNames": {
                "#pk": COUNTS_TABLE.partition_key,
                "#sk": COUNTS_TABLE.sort_key,
                "#count": COUNT_ATTRIBUTE,
            },
            "ExpressionAttributeValues": {":pk": {"S": counter}, ":first": {"S": first_sk}, ":last": {"S": last_sk}},
            "ConsistentRead": consistent,
        }
        while True:
            response = self._call(self.client.query, **request)
            fetched.requests += 1
            for item in response.get("Items", []):
                fetched.counts[(counter, item["sk"]["S"])] = int(item[COUNT_ATTRIBUTE]["N"])
                fetched.items += 1
            if "LastEvaluatedKey" not in response:
                return fetched
            request["ExclusiveStartKey"] = response["LastEvaluatedKey"]

    def _call(self, operation: Callable[..., dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
        """One read request, retried while DynamoDB throttles it."""
        for attempt in self.backoff().pauses():
            try:
                return operation(**kwargs)
            except ClientError as error:
                if _code(error) not in _THROTTLING_CODES:
                    raise
                logger.warning("read throttled (attempt %d): %s", attempt + 1, _describe(error))
        raise RetriesExhausted("reads still throttled after every retry")


def create_tables(client: Any, events_table: str, counts_table: str) -> None:
    """Create both tables as the stack does (used locally and in tests), and wait for them.

    Point-in-time recovery is on for both, as in the stack.
    """
    for description, name in ((EVENTS_TABLE, events_table), (COUNTS_TABLE, counts_table)):
        _create_table(client, description, name)


def _create_table(client: Any, description: TableDescription, name: str) -> None:
    client.create_table(**description.create_table_request(name))
    client.get_waiter("table_exists").wait(TableName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 60})
    ttl = description.ttl_request(name)
    if ttl:
        client.update_time_to_live(**ttl)
    # As the stack does; a point-in-time export (the backfill's source) needs it.
    client.update_continuous_backups(
        TableName=name, PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True}
    )


def _commit_outcome(error: ClientError) -> Outcome:
    code = _code(error)
    if code == "TransactionCanceledException":
        return classify_cancellation(error.response.get("CancellationReasons", []))
    if code in _THROTTLING_CODES or code == "TransactionConflictException":
        return Outcome.RETRY
    return Outcome.FAIL


def _code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def _describe(error: ClientError) -> str:
    reasons = error.response.get("CancellationReasons")
    detail = f" reasons={[r.get('Code') for r in reasons]}" if reasons else ""
    return f"{_code(error)}: {error.response.get('Error', {}).get('Message', '')}{detail}"


def _key(pk: str, sk: str) -> dict[str, dict[str, str]]:
    return {COUNTS_TABLE.partition_key: {"S": pk}, COUNTS_TABLE.sort_key: {"S": sk}}
