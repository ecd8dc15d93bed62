"""Window -> plan -> fetch -> sum: the bucket items a plan names, read from the counts table.

``core/plans.py`` says which buckets a window needs; this module reads them (exact keys in
BatchGetItem requests, runs of buckets in Queries), every lane of each, and ``core/sums.py``
adds up what it returns (``Fetched``). Also a counter's every item, for deleting it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from tally.core.amounts import stored_units
from tally.core.buckets import bucket_item_keys, last_lane_bound, sketch_partitions, stored_bucket
from tally.core.commit import RetriesExhausted
from tally.core.histograms import is_bin, is_late_bin
from tally.core.sketches import Sketch
from tally.core.tables import (
    COUNT_ATTRIBUTE,
    COUNTS_TABLE,
    LATE_COUNT_ATTRIBUTE,
    LATE_SUM_ATTRIBUTE,
    SKETCH_ATTRIBUTE,
    SUM_ATTRIBUTE,
    UNRESOLVED_ATTRIBUTE,
)
from tally.dynamo.calls import BATCH_GET_LIMIT, Key, TableAccess, key_of, retried_while_throttled


@dataclass
class Fetched:
    """Counts (and the sums of summing counters' buckets, in units, the bins of histogram counters'
    buckets and the sketches of distinct counters') read for some keys, and what that cost."""

    counts: dict[Key, int] = field(default_factory=dict)
    sums: dict[Key, int] = field(default_factory=dict)
    bins: dict[Key, dict[str, int]] = field(default_factory=dict)
    sketches: dict[Key, Sketch] = field(default_factory=dict)
    # Buckets one of whose items an overlap left unresolved (core/commit.py): what their marks say.
    unresolved: dict[Key, set[str]] = field(default_factory=dict)
    # What late records added to hours and days (core/ladder.py): only a close reads them.
    late_counts: dict[Key, int] = field(default_factory=dict)
    late_sums: dict[Key, int] = field(default_factory=dict)
    late_bins: dict[Key, dict[str, int]] = field(default_factory=dict)
    requests: int = 0
    items: int = 0

    def add(self, key: Key, item: dict[str, Any]) -> None:
        """One item read: a bucket, one lane of it (lanes add up, sums and bins as counts), or one lane of its
        sketch (lanes merge)."""
        if COUNT_ATTRIBUTE in item:
            self.counts[key] = self.counts.get(key, 0) + int(item[COUNT_ATTRIBUTE]["N"])
        if SUM_ATTRIBUTE in item:
            self.sums[key] = self.sums.get(key, 0) + stored_units(item[SUM_ATTRIBUTE]["N"])
        for name, value in item.items():
            if is_bin(name):
                bins = self.bins.setdefault(key, {})
                bins[name] = bins.get(name, 0) + int(value["N"])
            elif is_late_bin(name):
                bins = self.late_bins.setdefault(key, {})
                bins[name[1:]] = bins.get(name[1:], 0) + int(value["N"])
        if LATE_COUNT_ATTRIBUTE in item:
            self.late_counts[key] = self.late_counts.get(key, 0) + int(item[LATE_COUNT_ATTRIBUTE]["N"])
        if LATE_SUM_ATTRIBUTE in item:
            self.late_sums[key] = self.late_sums.get(key, 0) + stored_units(item[LATE_SUM_ATTRIBUTE]["N"])
        if UNRESOLVED_ATTRIBUTE in item:
            self.unresolved.setdefault(key, set()).update(item[UNRESOLVED_ATTRIBUTE]["SS"])
        if SKETCH_ATTRIBUTE in item:
            sketch = Sketch.from_bytes(item[SKETCH_ATTRIBUTE]["B"])
            if key in self.sketches:
                self.sketches[key].merge(sketch)  # lanes of one bucket: the union of their values
            else:
                self.sketches[key] = sketch
        self.items += 1

    def update(self, other: Fetched) -> None:
        """Take in what another request read (other keys; a request reads all lanes of its keys)."""
        self.counts.update(other.counts)
        self.sums.update(other.sums)
        self.bins.update(other.bins)
        self.sketches.update(other.sketches)
        self.unresolved.update(other.unresolved)
        self.late_counts.update(other.late_counts)
        self.late_sums.update(other.late_sums)
        self.late_bins.update(other.late_bins)
        self.requests += other.requests
        self.items += other.items


class Fetches(TableAccess):
    """The read path of ``CountsTable``: exact bucket keys, ranges of them, and a counter's every item."""

    def batch_get(self, keys: Iterable[Key], consistent: bool = False, distinct: Collection[str] = ()) -> Fetched:
        """Counts of exact bucket keys, 100 keys a request, unprocessed keys retried until none are left.

        With bucket lanes, every lane of every bucket is read and a bucket's count is the sum of its lanes.
        For the counters in ``distinct``, every lane of each bucket's sketch is read too, from the lane's
        partition and from where 0.2.0 kept it (``bucket_item_keys``), and merged.
        Reads take whole items: a projection cannot name histogram bins it does not know, and DynamoDB
        charges a read by the whole item anyway.
        """
        fetched = Fetched()
        lanes = self.settings.bucket_lanes
        unique = list(
            dict.fromkeys(stored for pk, sk in keys for stored in bucket_item_keys(pk, sk, lanes, pk in distinct))
        )
        for start in range(0, len(unique), BATCH_GET_LIMIT):
            pending = [key_of(pk, sk) for pk, sk in unique[start : start + BATCH_GET_LIMIT]]
            for _ in self.backoff().pauses():
                request = {self.table_name: {"Keys": pending, "ConsistentRead": consistent}}
                response = retried_while_throttled(self.backoff, self.client.batch_get_item, RequestItems=request)
                fetched.requests += 1
                for item in response.get("Responses", {}).get(self.table_name, []):
                    fetched.add(stored_bucket(item["pk"]["S"], item["sk"]["S"]), item)
                pending = response.get("UnprocessedKeys", {}).get(self.table_name, {}).get("Keys", [])
                if not pending:
                    break
            else:
                raise RetriesExhausted(f"{len(pending)} keys still unprocessed after every retry")
        return fetched

    def query(
        self, counter: str, first_sk: str, last_sk: str, consistent: bool = False, distinct: bool = False
    ) -> Fetched:
        """Counts of every bucket of ``counter`` with first_sk <= sk <= last_sk, all pages (lanes summed);
        with ``distinct``, their sketches too (lanes merged).

        Whole items, as ``batch_get`` reads them. A distinct counter's range is one Query more per lane: the
        same range of sort keys in each lane's sketch partition (``sketch_partitions``), while 0.2.0's sketch
        items come with the counter's own Query (they sort among its buckets' lanes). A Query per lane, not a
        BatchGetItem of the range's exact sketch keys, because DynamoDB charges a Query by the summed size of
        the items it returns, rounded up to 4 KB once per request, and a BatchGetItem by every key it asks
        for, each rounded up to 4 KB and a missing item as one: sketch items are under 4 KB, and a lane
        holds sketches only of the buckets its shards wrote. So a lane's Query costs one read unit
        (strongly consistent) per 4 KB of sketches actually there, at least one, where the exact keys would
        cost one per bucket of the range, found or not: for a run of 60 minute buckets, from 1 unit (small
        sketches) to 28 (60 full HyperLogLogs of 1.9 KB) against 60. The price is requests:
        ``1 + bucket_lanes`` per run instead of one.
        """
        fetched = Fetched()
        lanes = self.settings.bucket_lanes
        ranges = [(counter, last_lane_bound(last_sk) if lanes > 1 or distinct else last_sk)]
        if distinct:
            ranges += [(partition, last_sk) for partition in sketch_partitions(counter, lanes)]
        for partition, last in ranges:
            for item in self._range(partition, first_sk, last, consistent, fetched):
                fetched.add(stored_bucket(partition, item["sk"]["S"]), item)
        return fetched

    def _range(self, partition: str, first_sk: str, last_sk: str, consistent: bool, fetched: Fetched) -> Iterator[dict[str, Any]]:
        """Every item of ``partition`` with first_sk <= sk <= last_sk, all pages, each Query counted in ``fetched``."""
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "KeyConditionExpression": "#pk = :pk AND #sk BETWEEN :first AND :last",
            "ExpressionAttributeNames": {"#pk": COUNTS_TABLE.partition_key, "#sk": COUNTS_TABLE.sort_key},
            "ExpressionAttributeValues": {":pk": {"S": partition}, ":first": {"S": first_sk}, ":last": {"S": last_sk}},
            "ConsistentRead": consistent,
        }
        while True:
            response = retried_while_throttled(self.backoff, self.client.query, **request)
            fetched.requests += 1
            yield from response.get("Items", [])
            if "LastEvaluatedKey" not in response:
                return
            request["ExclusiveStartKey"] = response["LastEvaluatedKey"]

    def counter_items(self, counter: str) -> list[dict[str, Any]]:
        """Every stored item of ``counter`` (all buckets, all lanes, and the sketches of a distinct counter in
        their lane partitions) as {pk, sk, count}, all pages, strongly consistent."""
        items: list[dict[str, Any]] = []
        for partition in (counter, *sketch_partitions(counter, self.settings.bucket_lanes)):
            request: dict[str, Any] = {
                "TableName": self.table_name,
                "KeyConditionExpression": "#pk = :pk",
                "ProjectionExpression": "#pk, #sk, #count",
                "ExpressionAttributeNames": {
                    "#pk": COUNTS_TABLE.partition_key, "#sk": COUNTS_TABLE.sort_key, "#count": COUNT_ATTRIBUTE
                },
                "ExpressionAttributeValues": {":pk": {"S": partition}},
                "ConsistentRead": True,
            }
            while True:
                response = retried_while_throttled(self.backoff, self.client.query, **request)
                items.extend(
                    {"pk": item["pk"]["S"], "sk": item["sk"]["S"], "count": int(item.get(COUNT_ATTRIBUTE, {}).get("N", 0))}
                    for item in response.get("Items", [])
                )
                if "LastEvaluatedKey" not in response:
                    break
                request["ExclusiveStartKey"] = response["LastEvaluatedKey"]
        return items

    def has_counter(self, counter: str) -> bool:
        """Whether any bucket of ``counter`` exists, at any time: one Query of at most one key."""
        response = retried_while_throttled(
            self.backoff,
            self.client.query,
            TableName=self.table_name,
            KeyConditionExpression="#pk = :pk",
            ProjectionExpression="#pk",
            ExpressionAttributeNames={"#pk": COUNTS_TABLE.partition_key},
            ExpressionAttributeValues={":pk": {"S": counter}},
            Limit=1,
        )
        return bool(response.get("Items"))
