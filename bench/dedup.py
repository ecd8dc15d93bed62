"""The exact design users copy today, as the second baseline beside the origin.

"Accurate counters" on DynamoDB, as the articles tally's design cites build
them: per stream record, one TransactWriteItems holding a conditional Put of a
deduplication item keyed by the record (it must not exist yet) and the
counter updates (here the origin's minute and hour items of every counter the
record counts in). A retried record finds its deduplication item and the whole
transaction is cancelled; that cancellation is told apart from conflicts and
throttling by its CancellationReasons, as those articles forget to. It is
exact, and costs a transactional write per item per event.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from botocore.exceptions import ClientError

from bench import origin

DEDUP_PREFIX = "dedup_"
# A deduplication item must outlive every retry of its record: the stream keeps records 24 hours.
DEDUP_RETENTION_SECONDS = 2 * 86_400


class DedupHandler:
    """Counts each INSERT once: its deduplication item and its counter updates in one transaction."""

    def __init__(
        self,
        client: Any,
        table_name: str,
        time_attribute: str = "ts",
        counters: Callable[[Mapping[str, Any]], list[tuple[str, str | None]]] | None = None,
        counted: Callable[[Mapping[str, Any]], list[tuple[str, int, str | None]]] | None = None,
    ) -> None:
        """``counters`` and ``counted`` as the origin's handler takes them (``bench/origin.py``)."""
        self.client = client
        self.counted = counted
        self.table_name = table_name
        self.time_attribute = time_attribute
        self.counters = counters or (lambda image: [(image["counter"]["S"], None)])
        self.duplicates = 0

    def __call__(self, event: Mapping[str, Any], context: Any = None) -> dict[str, Any]:
        for record in event["Records"]:
            counted = self._counted(record)
            if not counted:
                continue
            seconds = min(at for _, at, _ in counted)
            items: list[dict[str, Any]] = [
                {
                    "Put": {
                        "TableName": self.table_name,
                        "Item": {
                            origin.KEY_ATTRIBUTE: {"S": DEDUP_PREFIX + record["eventID"]},
                            origin.TTL_ATTRIBUTE: {"N": str(seconds + DEDUP_RETENTION_SECONDS)},
                        },
                        "ConditionExpression": "attribute_not_exists(#id)",
                        "ExpressionAttributeNames": {"#id": origin.KEY_ATTRIBUTE},
                    }
                }
            ]
            for prefix, at, amount in counted:
                for key in (origin.hour_key(prefix, at), origin.minute_key(prefix, at)):
                    items.append({"Update": origin.update_request(self.table_name, key, at, amount)})
            self._commit(items)
        return {}

    def _counted(self, record: Mapping[str, Any]) -> list[tuple[str, int, str | None]]:
        """(counter prefix, epoch seconds, amount or None) of everything the record counts in."""
        if self.counted is not None:
            return self.counted(record)
        if record["eventName"] != "INSERT":
            return []
        image = record["dynamodb"]["NewImage"]
        seconds = int(image[self.time_attribute]["N"]) // 1000
        return [(prefix, seconds, amount) for prefix, amount in self.counters(image)]

    def _commit(self, items: list[dict[str, Any]]) -> None:
        try:
            self.client.transact_write_items(TransactItems=items)
        except ClientError as error:
            codes = [reason.get("Code") for reason in error.response.get("CancellationReasons", [])]
            if codes[:1] == ["ConditionalCheckFailed"] and all(code == "None" for code in codes[1:]):
                self.duplicates += 1  # counted before: the record was retried
                return
            raise
