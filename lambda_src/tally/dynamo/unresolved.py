"""The unresolved records of the counts table, the days and months a close marked, and the transaction that repairs
one bucket (core/repair.py)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from botocore.exceptions import ClientError

from tally.core.amounts import decimal_of, text_of
from tally.core.buckets import DAY, MONTH, ZONE_SEPARATOR, bucket_sort_key, lane_sort_keys
from tally.core.commit import Anchor
from tally.core.repair import Correction, Lane
from tally.core.tables import ANCHOR_PARTITION, COUNT_ATTRIBUTE, COUNTS_TABLE, SUM_ATTRIBUTE, TTL_ATTRIBUTE, UNRESOLVED_ATTRIBUTE, UNRESOLVED_PARTITION
from tally.dynamo.calls import TableAccess, error_code, key_of, retried_while_throttled

# The attribute a repaired item keeps: the marks the repair cleared, so that the item says what was done to it.
REPAIRED_ATTRIBUTE = "repaired"


class UnresolvedItems(TableAccess):
    """The repair's side of ``CountsTable``."""

    def unresolved_records(self, counters: Collection[str] = ()) -> list[dict[str, Any]]:
        """Every unresolved record (strongly consistent, all pages), those of ``counters`` only when given."""
        return [r for r in self._partition(UNRESOLVED_PARTITION) if not counters or r["counter"]["S"] in counters]

    def anchors(self) -> list[tuple[str, Anchor, int]]:
        """Every shard's anchor (core/commit.py), strongly consistent: the shard's writer source, the anchor, and
        when it expires (epoch seconds)."""
        return [(item[COUNTS_TABLE.sort_key]["S"], Anchor.of_item(item), int(item[TTL_ATTRIBUTE]["N"]))
                for item in self._partition(ANCHOR_PARTITION)]

    def _partition(self, partition: str) -> list[dict[str, Any]]:
        """Every item of a bookkeeping partition, strongly consistent, all pages."""
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "KeyConditionExpression": "#pk = :pk",
            "ExpressionAttributeNames": {"#pk": COUNTS_TABLE.partition_key},
            "ExpressionAttributeValues": {":pk": {"S": partition}},
            "ConsistentRead": True,
        }
        items = []
        while True:
            response = retried_while_throttled(self.backoff, self.client.query, **request)
            items += response.get("Items", [])
            if "LastEvaluatedKey" not in response:
                return items
            request["ExclusiveStartKey"] = response["LastEvaluatedKey"]

    def marked_periods(self, counter: str) -> dict[str, tuple[set[str], int | None]]:
        """``counter``'s day and month items, every zone, that carry unresolved marks (a close wrote them from
        marked children, or an overlap left a late record's update unresolved): by period sort key, the marks of
        its lanes and its TTL. A Query of its days and one of its months, strongly consistent, marked items only."""
        found: dict[str, tuple[set[str], int | None]] = {}
        for kind in (DAY, MONTH):
            request: dict[str, Any] = {
                "TableName": self.table_name,
                "KeyConditionExpression": "#pk = :pk AND #sk BETWEEN :low AND :high",
                "FilterExpression": "attribute_exists(#u)",
                "ExpressionAttributeNames": {
                    "#pk": COUNTS_TABLE.partition_key, "#sk": COUNTS_TABLE.sort_key, "#u": UNRESOLVED_ATTRIBUTE,
                },
                "ExpressionAttributeValues": {
                    ":pk": {"S": counter}, ":low": {"S": f"{kind}#"}, ":high": {"S": f"{kind}#~"},
                },
                "ConsistentRead": True,
            }
            while True:
                response = retried_while_throttled(self.backoff, self.client.query, **request)
                for item in response.get("Items", []):
                    sort_key = item[COUNTS_TABLE.sort_key]["S"]
                    if ZONE_SEPARATOR not in sort_key:  # not a period (no such item is written under D# or MO#)
                        continue
                    period = bucket_sort_key(sort_key)
                    marks, ttl = found.get(period, (set(), None))
                    ttl = int(item[TTL_ATTRIBUTE]["N"]) if TTL_ATTRIBUTE in item else ttl
                    found[period] = (marks | set(item[UNRESOLVED_ATTRIBUTE]["SS"]), ttl)
                if "LastEvaluatedKey" not in response:
                    break
                request["ExclusiveStartKey"] = response["LastEvaluatedKey"]
        return found

    def put_records(self, records: list[dict[str, Any]]) -> None:
        """Put unresolved records (``repair.period_record``), one request each: a few a run."""
        for record in records:
            retried_while_throttled(self.backoff, self.client.put_item, TableName=self.table_name, Item=record)

    def bucket_lanes(self, counter: str, sort_key: str) -> list[Lane]:
        """Every stored lane of one bucket, read strongly consistent (a repair must start from the latest)."""
        keys = [key_of(counter, sk) for sk in lane_sort_keys(sort_key, self.settings.bucket_lanes)]
        response = retried_while_throttled(
            self.backoff, self.client.batch_get_item,
            RequestItems={self.table_name: {"Keys": keys, "ConsistentRead": True}},
        )
        if response.get("UnprocessedKeys"):
            raise RuntimeError(f"lanes of {counter} {sort_key} left unprocessed: try the repair again")
        return sorted((Lane.of(item) for item in response.get("Responses", {}).get(self.table_name, [])),
                      key=lambda lane: lane.sort_key)

    def repair_bucket(
        self, counter: str, bucket: str, lanes: list[Lane], fix: Correction, records: list[dict[str, Any]], repair_id: str
    ) -> bool:
        """Add ``fix`` to its lane, clear every mark of the bucket and delete its records, in one transaction,
        if every lane still holds what was read; False when one changed meanwhile (judge it again)."""
        pk, sk = COUNTS_TABLE.partition_key, COUNTS_TABLE.sort_key
        actions: list[dict[str, Any]] = []
        read = {lane.sort_key for lane in lanes}
        for missing in lane_sort_keys(bucket, self.settings.bucket_lanes):
            if missing not in read:  # a lane created meanwhile would change what the recount is compared with
                actions.append({"ConditionCheck": {
                    "TableName": self.table_name, "Key": {pk: {"S": counter}, sk: {"S": missing}},
                    "ConditionExpression": "attribute_not_exists(#count)",
                    "ExpressionAttributeNames": {"#count": COUNT_ATTRIBUTE},
                }})
        for lane in lanes:
            names = {"#count": COUNT_ATTRIBUTE, "#u": UNRESOLVED_ATTRIBUTE}
            values: dict[str, Any] = {":count": {"N": str(lane.count)}}
            if lane.marks:  # the same marks: contains each, and no more
                values[":n"] = {"N": str(len(lane.marks))}
                held = [f"contains(#u, :m{index})" for index in range(len(lane.marks))]
                values.update({f":m{index}": {"S": mark} for index, mark in enumerate(sorted(lane.marks))})
                condition = " AND ".join(["#count = :count", "size(#u) = :n", *held])
            else:
                condition = "#count = :count AND attribute_not_exists(#u)"
            key = {pk: {"S": counter}, sk: {"S": lane.sort_key}}
            if lane.sort_key == fix.sort_key:
                adds = ["#count :add"]
                values[":add"] = {"N": str(fix.count)}
                if fix.units:
                    names["#sum"] = SUM_ATTRIBUTE
                    values[":units"] = {"N": text_of(decimal_of(fix.units))}
                    adds.append("#sum :units")
                for index, (name, lacking) in enumerate(sorted(fix.bins.items())):
                    names[f"#b{index}"], values[f":b{index}"] = name, {"N": str(lacking)}
                    adds.append(f"#b{index} :b{index}")
                names["#r"] = REPAIRED_ATTRIBUTE
                values[":r"] = {"SS": [f"{repair_id} +{fix.count}: {mark}" for mark in sorted(lane.marks)]}
                update = f"ADD {', '.join(adds)}, #r :r REMOVE #u"
            elif lane.marks:
                names["#r"] = REPAIRED_ATTRIBUTE
                values[":r"] = {"SS": [f"{repair_id} +0: {mark}" for mark in sorted(lane.marks)]}
                update = "ADD #r :r REMOVE #u"
            else:
                actions.append({"ConditionCheck": {
                    "TableName": self.table_name, "Key": key, "ConditionExpression": condition,
                    "ExpressionAttributeNames": names, "ExpressionAttributeValues": values,
                }})
                continue
            actions.append({"Update": {
                "TableName": self.table_name, "Key": key, "UpdateExpression": update, "ConditionExpression": condition,
                "ExpressionAttributeNames": names, "ExpressionAttributeValues": values,
            }})
        for record in records:
            actions.append({"Delete": {"TableName": self.table_name, "Key": {pk: record[pk], sk: record[sk]}}})
        try:
            self.client.transact_write_items(TransactItems=actions)
        except ClientError as error:
            if error_code(error) == "TransactionCanceledException":
                reasons = error.response.get("CancellationReasons", [])
                if any(reason.get("Code") == "ConditionalCheckFailed" for reason in reasons):
                    return False
            raise
        return True
