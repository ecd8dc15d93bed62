"""The two tables, described once.

The CDK stack and the local pipeline both build their tables from these
descriptions, so a key name or the TTL attribute cannot drift between the
deployed system and the one the tests run.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from tally.core.rules import Rules


@dataclass(frozen=True)
class TableDescription:
    """Key schema (string keys only), TTL attribute and stream view of one table."""

    partition_key: str
    sort_key: str | None = None
    ttl_attribute: str | None = None
    stream_view: str | None = None

    def create_table_request(self, table_name: str) -> dict[str, Any]:
        """Keyword arguments for DynamoDB's CreateTable (on-demand billing)."""
        keys = [(self.partition_key, "HASH")]
        if self.sort_key:
            keys.append((self.sort_key, "RANGE"))
        request: dict[str, Any] = {
            "TableName": table_name,
            "BillingMode": "PAY_PER_REQUEST",
            "KeySchema": [{"AttributeName": name, "KeyType": kind} for name, kind in keys],
            "AttributeDefinitions": [{"AttributeName": name, "AttributeType": "S"} for name, _ in keys],
        }
        if self.stream_view:
            request["StreamSpecification"] = {"StreamEnabled": True, "StreamViewType": self.stream_view}
        return request

    def ttl_request(self, table_name: str) -> dict[str, Any] | None:
        """Keyword arguments for UpdateTimeToLive, or None when the table has no TTL."""
        if not self.ttl_attribute:
            return None
        return {
            "TableName": table_name,
            "TimeToLiveSpecification": {"Enabled": True, "AttributeName": self.ttl_attribute},
        }


# Raw events: written by producers, read only through the stream (INSERTs count).
EVENTS_TABLE = TableDescription(partition_key="id", stream_view="NEW_IMAGE")


def events_table_for(rules: Rules) -> TableDescription:
    """The events table with the stream view the rules need: NEW_AND_OLD_IMAGES once a rule judges old images."""
    return replace(EVENTS_TABLE, stream_view=rules.stream_view)

# Buckets: pk = counter name, sk = "H#YYYY-MM-DDTHH" or "M#YYYY-MM-DDTHH:MM".
COUNTS_TABLE = TableDescription(partition_key="pk", sort_key="sk", ttl_attribute="ttl")

# Attribute names inside counts items.
COUNT_ATTRIBUTE = "count"
SUM_ATTRIBUTE = "sum"  # only in the buckets of summing counters
SKETCH_ATTRIBUTE = "hll"  # only in the buckets of distinct counters: a sketch of their values (core/sketches.py)
TTL_ATTRIBUTE = "ttl"
# Only on the hour and day items of counters that keep days (core/ladder.py): what late records added to the
# item's count and sum (its bins' share: histograms.late_bin), which a close subtracts.
LATE_COUNT_ATTRIBUTE = "late"
LATE_SUM_ATTRIBUTE = "late_sum"
# Only on a bucket item an overlap left unresolved (core/commit.py): a string set of what it may lack; reads
# show the counters whose items carry it as not exact until the repair (scripts/audit.py --repair) clears it.
UNRESOLVED_ATTRIBUTE = "unresolved"
# The partition of the unresolved records, one per unresolved item and range, that the repair lists.
UNRESOLVED_PARTITION = "#unresolved"
# The partition of the shards' anchors (core/commit.py): where this release began to meet a shard's items that hold
# the previous release's watermarks, one item per such shard, kept for days.
ANCHOR_PARTITION = "#anchors"
