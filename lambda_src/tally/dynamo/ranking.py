"""The rank index (``core/ranking.py``) in the counts table: written by commits, read by top-N answers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tally.core.ranking import RankRecord
from tally.core.retry import Backoff
from tally.core.tables import COUNTS_TABLE
from tally.dynamo.calls import key_of, retried_while_throttled


class RankIndex:
    """The rank records (``core/ranking.py``) in the counts table: written by commits, read by top-N answers."""

    def __init__(self, client: Any, table_name: str, backoff: Callable[[], Backoff] | None = None) -> None:
        self.client = client
        self.table_name = table_name
        self.backoff = backoff or Backoff

    def page(
        self, partition: str, start_key: str | None, limit: int, consistent: bool = False
    ) -> tuple[list[RankRecord], str | None, int]:
        """Up to ``limit`` records of a day, highest level first, after ``start_key``: the records, the key to go
        on from (None at the partition's end) and the Queries made. A page is empty only at the end."""
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "KeyConditionExpression": "#pk = :pk",
            "ProjectionExpression": "#sk",
            "ExpressionAttributeNames": {"#pk": COUNTS_TABLE.partition_key, "#sk": COUNTS_TABLE.sort_key},
            "ExpressionAttributeValues": {":pk": {"S": partition}},
            "ScanIndexForward": False,
            "Limit": limit,
            "ConsistentRead": consistent,
        }
        if start_key is not None:
            request["ExclusiveStartKey"] = key_of(partition, start_key)
        requests = 0
        while True:
            response = retried_while_throttled(self.backoff, self.client.query, **request)
            requests += 1
            records = [RankRecord.parse(partition, item[COUNTS_TABLE.sort_key]["S"]) for item in response.get("Items", [])]
            last = response.get("LastEvaluatedKey")
            next_key = None if last is None else last[COUNTS_TABLE.sort_key]["S"]
            if records or next_key is None:
                return records, next_key, requests
            request["ExclusiveStartKey"] = last
