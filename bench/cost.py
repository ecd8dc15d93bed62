"""DynamoDB's capacity rules, and a client that meters writes by them.

Sizes follow DynamoDB's item-size rules: an attribute costs its name's UTF-8
length plus its value (strings: UTF-8 bytes; numbers: about one byte per two
significant digits, plus one; binary: its bytes). Writes cost one unit per
started KB (two for an item written inside a transaction); an UpdateItem is
charged for the larger of the item before and after, and a conditional write
whose condition fails for the item as it is (at least one unit). Reads cost one unit per started 4 KB (strongly
consistent; half that eventually consistent): per item in a BatchGetItem or a
GetItem, per request for the summed items of a Query (whole items, whatever it
projects). A read of a missing item still costs the minimum unit. Storage is
billed by the same item sizes plus 100 bytes of indexing overhead per item.
"""

from __future__ import annotations

import bisect
import itertools
import math
import re
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from botocore.exceptions import ClientError

from tally.core.lanes import LaneHistory
from tally.core.ranking import RANK_PREFIX
from tally.core.settings import Settings
from tally.dynamo.counts_table import CountsTable

WRITE_UNIT_BYTES = 1024
READ_UNIT_BYTES = 4096
# DynamoDB's ceiling for one partition, hence for one item: 1,000 write units per second.
PARTITION_WRITE_UNITS_PER_SECOND = 1000
# A Query returns at most 1 MB of items a request; the rest comes in further pages.
QUERY_PAGE_BYTES = 1024 * 1024
# Storage at rest, standard table class (us-east-1, on-demand and provisioned alike): per GB-month, a GB being
# 2^30 bytes, each item billed at its size plus 100 bytes of indexing overhead.
STORAGE_PRICE_PER_GB_MONTH = 0.25
STORAGE_GB_BYTES = 2**30
STORAGE_ITEM_OVERHEAD_BYTES = 100


def number_size(value: Decimal | int | str) -> int:
    """Bytes DynamoDB stores for a number: leading and trailing zeros are not significant."""
    text = str(value).lstrip("+-")
    if text.isdigit():  # the common case, without Decimal's cost
        significant = len(text.strip("0")) or 1
    else:
        digits = "".join(map(str, Decimal(text).normalize().as_tuple().digits))
        significant = len(digits.strip("0")) or 1
    return math.ceil(significant / 2) + 1


def value_size(attribute_value: Mapping[str, Any]) -> int:
    """Size of one value in DynamoDB JSON ({"S": ...}, {"N": ...}, {"B": ...}; a boolean is 1 byte)."""
    [(kind, value)] = attribute_value.items()
    if kind == "S":
        return len(value.encode("utf-8"))
    if kind == "N":
        return number_size(value)
    if kind == "B":
        return len(value)
    if kind == "BOOL":
        return 1
    raise ValueError(f"the cost model only sizes strings, numbers, binary and boolean values, not {kind}")


def item_size(item: Mapping[str, Mapping[str, Any]]) -> int:
    """Bytes of an item in DynamoDB JSON: attribute names plus values."""
    return sum(len(name.encode("utf-8")) + value_size(value) for name, value in item.items())


def write_units(size: int, *, transactional: bool = False) -> int:
    """One unit per started KB; a transactional write costs two."""
    return max(1, math.ceil(size / WRITE_UNIT_BYTES)) * (2 if transactional else 1)


def batch_get_read_units(item_sizes: Iterable[int], *, consistent: bool) -> float:
    """BatchGetItem: every requested key is its own read, rounded up to 4 KB (missing items: size 0)."""
    units = sum(max(1, math.ceil(size / READ_UNIT_BYTES)) for size in item_sizes)
    return units if consistent else units / 2


def query_read_units(item_sizes: Iterable[int], *, consistent: bool) -> float:
    """Query: the summed size of the items read, rounded up to 4 KB, for one request."""
    units = max(1, math.ceil(sum(item_sizes) / READ_UNIT_BYTES))
    return units if consistent else units / 2


def get_read_units(size: int, *, consistent: bool) -> float:
    """GetItem: the item's size rounded up to 4 KB (a missing item: the minimum unit)."""
    units = max(1, math.ceil(size / READ_UNIT_BYTES))
    return units if consistent else units / 2


def stored_bytes(size: int) -> int:
    """What DynamoDB bills an item's storage by: its size plus the per-item overhead."""
    return size + STORAGE_ITEM_OVERHEAD_BYTES


@dataclass
class WriteMeter:
    """Writes and write units, with how often each item was written in each time slot."""

    requests: int = 0  # API calls, BatchWriteItem apart
    item_writes: int = 0  # items written (a transaction writes several)
    units: int = 0
    failed_conditions: int = 0  # conditional writes refused (charged, not written)
    batch_requests: int = 0  # BatchWriteItem calls: the counter directory's and the rank records' puts
    batch_item_writes: int = 0  # items they put (also in item_writes)
    batch_units: int = 0  # their write units (also in units)
    rank_requests: int = 0  # of those, the calls putting rank records (a commit's; the rest are the directory's)
    rank_item_writes: int = 0
    rank_units: int = 0
    sketch_writes: int = 0  # conditional writes of merged sketches (also in requests and item_writes)
    sketch_units: int = 0  # their write units (also in units)
    read_requests: int = 0  # BatchGetItem calls: the sketches a merge starts from
    read_units: float = 0  # their read units (strongly consistent)
    query_requests: int = 0  # Query calls (a close's listings and children; a reader's ranges), pages each
    query_read_units: float = 0  # their read units, each as consistent as it asked
    get_requests: int = 0  # GetItem calls (a close's progress)
    get_read_units: float = 0
    writes_per_item_slot: Counter[tuple[Hashable, int]] = field(default_factory=Counter)
    # Writes and their units by the kind of item (``MeteredClient.kind_of``; empty where none is given).
    writes_by_kind: Counter[str] = field(default_factory=Counter)
    units_by_kind: Counter[str] = field(default_factory=Counter)

    def figures(self) -> Counter[str]:
        """Every count above but the per-item ones, as a Counter: what a phase of a run adds is a difference."""
        totals: Counter[str] = Counter({name: getattr(self, name) for name in _SUMMED})
        totals.update({f"writes:{kind}": n for kind, n in self.writes_by_kind.items()})
        totals.update({f"units:{kind}": n for kind, n in self.units_by_kind.items()})
        return totals

    def busiest_item_writes(self) -> int:
        """Most writes any one item took within one slot."""
        return max(self.writes_per_item_slot.values(), default=0)


_SUMMED = tuple(name for name, kind in WriteMeter.__annotations__.items() if kind in ("int", "float"))


# tally's bucket update (tally.core.commit.bucket_update): ADD terms (count, sum, histogram bins),
# the TTL once, the writer's watermark.
TALLY_UPDATE = re.compile(r"ADD (?P<adds>#\w+ :\w+(?:, #\w+ :\w+)*) SET #ttl = if_not_exists\(#ttl, :ttl\), #w = :to")
# A segment's update, and the rest of one an item took in part (tally.core.commit.untaken).
TALLY_CONDITIONS = ("attribute_not_exists(#w) OR #w < :w", "#w = :seen",
                    "attribute_not_exists(#w) OR (#w < :w AND size(#w) > :n)")
SKETCH_UPDATE = "SET #sketch = :sketch, #ttl = if_not_exists(#ttl, :ttl)"
ORIGIN_UPDATE = "SET #count = if_not_exists(#count, :zero) + :one, #ttl = if_not_exists(#ttl, :ttl)"
# A close's progress (tally.dynamo.closing.ProgressItems.advance): attributes and their since set together, only
# forward (judged by the first of them).
PROGRESS_UPDATE = re.compile(r"SET #p0 = :p, #s0 = if_not_exists\(#s0, :since\)(, #p\d+ = :p, #s\d+ = if_not_exists\(#s\d+, :since\))*")
PROGRESS_CONDITION = "attribute_not_exists(#p0) OR #p0 < :p"
# The progress item's record of the days a backfill made complete (``ProgressItems.adopt``).
ADOPT_UPDATE = "SET #a = :a"
ADOPT_CONDITION = "attribute_not_exists(#a) OR #a < :a"
# The Query key conditions tally makes: a whole partition, its names under a prefix, a run of sort keys.
QUERY_CONDITIONS = {
    "#pk = :pk": lambda sk, values: True,
    "#pk = :pk AND begins_with(#sk, :prefix)": lambda sk, values: sk.startswith(values[":prefix"]["S"]),
    "#pk = :pk AND #sk BETWEEN :first AND :last": lambda sk, values: values[":first"]["S"] <= sk <= values[":last"]["S"],
}
ORIGIN_SUM_UPDATE = (
    "SET #count = if_not_exists(#count, :zero) + :one, #sum = if_not_exists(#sum, :zero) + :amount, "
    "#ttl = if_not_exists(#ttl, :ttl)"
)


class MeteredClient:
    """A stand-in for the boto3 DynamoDB client's write calls, metering them by DynamoDB's rules.

    It keeps its own image of every item it writes, because an UpdateItem is
    charged for the larger of the item before and after. It understands
    exactly the writes the designs make (tally's conditional ``ADD`` update,
    its counter directory's batched puts, its sketches' conditional writes and
    the strongly consistent reads they start from, the origin's
    ``if_not_exists`` increment, a transaction of a deduplication Put and such
    increments) and refuses any other.
    When given a real client (moto), every call is also forwarded to it, so
    the metered image can be checked against what DynamoDB stored. It also
    answers and charges the reads a close and a reader make (``Query`` of a
    partition, of its names under a prefix or of a run of sort keys, in 1 MB
    pages; ``GetItem``; eventually consistent ``BatchGetItem``): from moto when
    forwarding, from its own image otherwise, charged by the whole items read.
    ``slot`` tags the writes with the time slot the caller is in (the tumbling
    window, or the second of the event), for the per-item write rate.
    """

    def __init__(self, key_attributes: tuple[str, ...], forward_to: Any = None) -> None:
        self.key_attributes = key_attributes
        self.forward_to = forward_to
        self.items: dict[tuple[str, ...], dict[str, dict[str, str]]] = {}
        self.sizes: dict[tuple[str, ...], int] = {}
        self.meter = WriteMeter()
        self.slot = 0
        # What kind of item a key is (a partition key and a sort key -> a name), for ``writes_by_kind``.
        self.kind_of: Callable[[tuple[str, ...]], str] | None = None
        # Each partition's sort keys in order, built at the first Query the image answers, then kept up.
        self._partitions: dict[str, list[str]] | None = None

    def transact_write_items(self, TransactItems: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:  # noqa: N803
        self.meter.requests += 1
        for action in TransactItems:
            [(kind, request)] = action.items()
            if kind == "Put":
                self._write(request["Item"], dict(request["Item"]), transactional=True)
            elif kind == "Update":
                self._write(request["Key"], self._updated(request), transactional=True)
            else:
                raise ValueError(f"unmetered transaction action {kind}")
        if self.forward_to is not None:
            return self.forward_to.transact_write_items(TransactItems=TransactItems, **kwargs)
        return {}

    def batch_write_item(self, RequestItems: dict[str, list[dict[str, Any]]], **kwargs: Any) -> dict[str, Any]:  # noqa: N803
        """Plain puts (the counter directory's entries, rank records), each charged as a write of its own."""
        self.meter.batch_requests += 1
        ranks = any(
            request.get("PutRequest", {}).get("Item", {}).get(self.key_attributes[0], {}).get("S", "").startswith(RANK_PREFIX)
            for requests in RequestItems.values()
            for request in requests
        )
        self.meter.rank_requests += ranks
        for requests in RequestItems.values():
            for request in requests:
                [(kind, body)] = request.items()
                if kind != "PutRequest":
                    raise ValueError(f"unmetered batch write {kind}")
                units = self.meter.units
                self._write(body["Item"], dict(body["Item"]), transactional=False)
                self.meter.batch_item_writes += 1
                self.meter.batch_units += self.meter.units - units
                if body["Item"][self.key_attributes[0]]["S"].startswith(RANK_PREFIX):
                    self.meter.rank_item_writes += 1
                    self.meter.rank_units += self.meter.units - units
        if self.forward_to is not None:
            return self.forward_to.batch_write_item(RequestItems=RequestItems, **kwargs)
        return {}

    def update_item(self, **request: Any) -> dict[str, Any]:
        self.meter.requests += 1
        if request["UpdateExpression"] == SKETCH_UPDATE:
            return self._write_sketch(request)
        if request.get("ConditionExpression") is not None and not self._condition_holds(request):
            identity = tuple(request["Key"][name]["S"] for name in self.key_attributes)
            self.meter.units += write_units(self.sizes.get(identity, 0))
            self.meter.failed_conditions += 1
            error = {"Error": {"Code": "ConditionalCheckFailedException", "Message": "The conditional request failed"}}
            raise ClientError({**error, "Item": dict(self.items[identity])}, "UpdateItem")
        updated = self._updated(request)
        units = self.meter.units
        self._write(request["Key"], updated, transactional=False)
        if self.forward_to is not None:
            return self.forward_to.update_item(**request)
        answer: dict[str, Any] = {}
        if request.get("ReturnValues") == "UPDATED_NEW":  # what tally's commit reads: whether it made the item
            named = set(request.get("ExpressionAttributeNames", {}).values())
            answer["Attributes"] = {name: value for name, value in updated.items() if name in named}
        if request.get("ReturnConsumedCapacity") == "TOTAL":  # and what the write cost: how large the item grew
            answer["ConsumedCapacity"] = {"TableName": request["TableName"], "CapacityUnits": self.meter.units - units}
        return answer

    def batch_get_item(self, RequestItems: dict[str, dict[str, Any]], **kwargs: Any) -> dict[str, Any]:  # noqa: N803
        """Reads of exact keys (a sketch merge's, strongly consistent; a reader's), answered from the metered
        image, each key charged."""
        self.meter.read_requests += 1
        responses: dict[str, list[dict[str, Any]]] = {}
        for table, request in RequestItems.items():
            identities = [tuple(key[name]["S"] for name in self.key_attributes) for key in request["Keys"]]
            consistent = bool(request.get("ConsistentRead"))
            self.meter.read_units += batch_get_read_units((self.sizes.get(i, 0) for i in identities), consistent=consistent)
            responses[table] = [self.items[i] for i in identities if i in self.items]
        return {"Responses": responses, "UnprocessedKeys": {}}

    def get_item(self, **request: Any) -> dict[str, Any]:
        """One item by its key, charged by its size (a missing one: the minimum unit)."""
        identity = tuple(request["Key"][name]["S"] for name in self.key_attributes)
        self.meter.get_requests += 1
        if self.forward_to is not None:
            answer = self.forward_to.get_item(**request)
            size = self.sizes.get(identity, item_size(answer["Item"]) if "Item" in answer else 0)
        else:
            item = self.items.get(identity)
            answer = {} if item is None else {"Item": _projected(item, request)}
            size = self.sizes.get(identity, 0)
        self.meter.get_read_units += get_read_units(size, consistent=bool(request.get("ConsistentRead")))
        return answer

    def query(self, **request: Any) -> dict[str, Any]:
        """One page of a Query, charged by the whole items it reads (a projection does not lower it)."""
        condition = request["KeyConditionExpression"]
        if condition not in QUERY_CONDITIONS or not request.get("ScanIndexForward", True):
            raise ValueError(f"unmetered query {condition!r}")
        values = request["ExpressionAttributeValues"]
        partition = values[":pk"]["S"]
        self.meter.query_requests += 1
        if self.forward_to is not None:
            answer = self.forward_to.query(**request)
            sizes = [
                self.sizes.get((partition, item["sk"]["S"]), item_size(item)) if "sk" in item else item_size(item)
                for item in answer.get("Items", [])
            ]
        else:
            answer, sizes = self._query_image(request, partition, values)
        self.meter.query_read_units += query_read_units(sizes, consistent=bool(request.get("ConsistentRead")))
        return answer

    def _query_image(self, request: Mapping[str, Any], partition: str, values: Mapping[str, Any]) -> tuple[dict, list[int]]:
        if self.key_attributes != ("pk", "sk"):
            raise ValueError("the meter answers queries of tally's counts table only")
        keys = self._sort_keys(partition)
        condition = request["KeyConditionExpression"]
        matches = QUERY_CONDITIONS[condition]
        low = values.get(":first", values.get(":prefix", {"S": ""}))["S"]
        start = bisect.bisect_left(keys, low)
        if "ExclusiveStartKey" in request:
            start = max(start, bisect.bisect_right(keys, request["ExclusiveStartKey"]["sk"]["S"]))
        limit = request.get("Limit")
        found: list[str] = []
        read = 0
        more = False
        for sort_key in itertools.islice(keys, start, None):
            if not matches(sort_key, values):
                break  # every condition holds on one run of sort keys from ``low``
            size = self.sizes[(partition, sort_key)]
            if (limit is not None and len(found) == limit) or (found and read + size > QUERY_PAGE_BYTES):
                more = True
                break
            found.append(sort_key)
            read += size
        answer: dict[str, Any] = {"Items": [_projected(self.items[(partition, k)], request) for k in found]}
        answer["Count"] = answer["ScannedCount"] = len(found)
        if more:
            answer["LastEvaluatedKey"] = {"pk": {"S": partition}, "sk": {"S": found[-1]}}
        return answer, [self.sizes[(partition, k)] for k in found]

    def _sort_keys(self, partition: str) -> list[str]:
        if self._partitions is None:
            self._partitions = {}
            for pk, sk in sorted(self.items):
                self._partitions.setdefault(pk, []).append(sk)
        return self._partitions.get(partition, [])

    def _write_sketch(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """A merged sketch written on condition that the item still holds what the merge read."""
        names, values, key = request["ExpressionAttributeNames"], request["ExpressionAttributeValues"], request["Key"]
        identity = tuple(key[name]["S"] for name in self.key_attributes)
        held = self.items.get(identity, {}).get(names["#sketch"])
        expected = values.get(":seen")
        units = self.meter.units
        if held != expected:  # attribute_not_exists(#sketch) when nothing was seen, #sketch = :seen otherwise
            self.meter.units += write_units(self.sizes.get(identity, 0))
            self.meter.sketch_units += self.meter.units - units
            raise ClientError(
                {"Error": {"Code": "ConditionalCheckFailedException", "Message": "The conditional request failed"},
                 "Item": self.items.get(identity, {})},
                "UpdateItem",
            )
        item = {**self.items.get(identity, {}), **key, names["#sketch"]: values[":sketch"]}
        item.setdefault(names["#ttl"], values[":ttl"])
        self._write(key, item, transactional=False)
        self.meter.sketch_writes += 1
        self.meter.sketch_units += self.meter.units - units
        if self.forward_to is not None:
            return self.forward_to.update_item(**request)
        return {}

    def count_of(self, key: tuple[str, ...]) -> int:
        item = self.items.get(key)
        return int(item["count"]["N"]) if item else 0

    def _write(self, key: Mapping[str, Any], after: dict[str, dict[str, str]], *, transactional: bool) -> None:
        identity = tuple(key[name]["S"] for name in self.key_attributes)
        size = item_size(after)
        before = self.sizes.get(identity)
        if before is None and self._partitions is not None:
            bisect.insort(self._partitions.setdefault(identity[0], []), identity[1])
        self.items[identity], self.sizes[identity] = after, size
        units = write_units(max(before or 0, size), transactional=transactional)
        self.meter.item_writes += 1
        self.meter.units += units
        self.meter.writes_per_item_slot[(identity, self.slot)] += 1
        if self.kind_of is not None:
            kind = self.kind_of(identity)
            self.meter.writes_by_kind[kind] += 1
            self.meter.units_by_kind[kind] += units

    def _condition_holds(self, request: Mapping[str, Any]) -> bool:
        condition = request["ConditionExpression"]
        identity = tuple(request["Key"][name]["S"] for name in self.key_attributes)
        if condition in (PROGRESS_CONDITION, ADOPT_CONDITION):
            name, value = ("#p0", ":p") if condition == PROGRESS_CONDITION else ("#a", ":a")
            held = self.items.get(identity, {}).get(request["ExpressionAttributeNames"][name])
            return held is None or held["S"] < request["ExpressionAttributeValues"][value]["S"]
        if condition not in TALLY_CONDITIONS:
            raise ValueError(f"unmetered condition {condition!r}")
        watermark = self.items.get(identity, {}).get(request["ExpressionAttributeNames"]["#w"])
        values = request["ExpressionAttributeValues"]
        if condition == TALLY_CONDITIONS[1]:
            return watermark is not None and bytes(watermark["B"]) == bytes(values[":seen"]["B"])
        if watermark is None:
            return True
        held = bytes(watermark["B"])
        sized = condition == TALLY_CONDITIONS[2]
        return held < bytes(values[":w"]["B"]) and (not sized or len(held) > int(values[":n"]["N"]))

    def _updated(self, request: Mapping[str, Any]) -> dict[str, dict[str, str]]:
        """The item after one of the update expressions the designs use."""
        names = request["ExpressionAttributeNames"]
        values = request["ExpressionAttributeValues"]
        key = request["Key"]
        identity = tuple(key[name]["S"] for name in self.key_attributes)
        item = {**self.items.get(identity, {}), **key}
        expression = request["UpdateExpression"]
        tally = TALLY_UPDATE.fullmatch(expression)
        if tally:  # count, and the sum and histogram bins of the counters that keep them
            for term in tally["adds"].split(", "):
                name, value = term.split(" ")
                _add(item, names[name], values[value]["N"])
            item[names["#w"]] = values[":to"]
        elif expression in (ORIGIN_UPDATE, ORIGIN_SUM_UPDATE):
            _add(item, names["#count"], values[":one"]["N"])
            if ":amount" in values:
                _add(item, names["#sum"], values[":amount"]["N"])
        elif expression == ADOPT_UPDATE:
            item[names["#a"]] = values[":a"]
            return item
        elif PROGRESS_UPDATE.fullmatch(expression):
            for placeholder, name in names.items():
                if placeholder.startswith("#p"):
                    item[name] = values[":p"]
                else:
                    item.setdefault(name, values[":since"])
            return item
        else:
            raise ValueError(f"unmetered update expression {expression!r}")
        item.setdefault(names["#ttl"], values[":ttl"])
        return item


def _projected(item: dict[str, Any], request: Mapping[str, Any]) -> dict[str, Any]:
    """The attributes of ``item`` a request's ProjectionExpression names (all of them without one)."""
    projection = request.get("ProjectionExpression")
    if projection is None:
        return dict(item)
    names = request.get("ExpressionAttributeNames", {})
    wanted = {names.get(part.strip(), part.strip()) for part in projection.split(",")}
    return {name: value for name, value in item.items() if name in wanted}


def _add(item: dict[str, dict[str, str]], attribute: str, amount: str) -> None:
    """ADD (or ``if_not_exists(a, 0) + n``) as DynamoDB stores the result: plain digits."""
    total = Decimal(item.get(attribute, {"N": "0"})["N"]) + Decimal(amount)
    item[attribute] = {"N": format(total, "f")}



def metered_counts(client: Any, settings: Settings) -> CountsTable:
    """tally's counts table over a ``MeteredClient`` as the bench commits: one update at a time (the meter's
    order), no previous release's markers to look for, and the lanes fixed for the run. A deployed function also
    reads the lanes' history once a minute (half a read unit, core/lanes.py); the write figures are writes."""
    lanes = LaneHistory.always(settings.bucket_lanes)
    return CountsTable(client, settings.counts_table, settings, workers=1, previous_release_until_ms=0, lanes=lanes)
