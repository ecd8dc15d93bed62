"""DynamoDB's capacity rules, and a client that meters writes by them.

Sizes follow DynamoDB's item-size rules: an attribute costs its name's UTF-8
length plus its value (strings: UTF-8 bytes; numbers: about one byte per two
significant digits, plus one; binary: its bytes). Writes cost one unit per
started KB (two for an item written inside a transaction); an UpdateItem is
charged for the larger of the item before and after, and a conditional write
whose condition fails for the item as it is (at least one unit). Reads cost one unit per started 4 KB (strongly
consistent; half that eventually consistent): per item in a BatchGetItem, per
request for the summed items of a Query. A read of a missing item still costs
the minimum unit.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Hashable, Iterable, Mapping
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
    writes_per_item_slot: Counter[tuple[Hashable, int]] = field(default_factory=Counter)

    def busiest_item_writes(self) -> int:
        """Most writes any one item took within one slot."""
        return max(self.writes_per_item_slot.values(), default=0)


# tally's bucket update (tally.core.commit.bucket_update): ADD terms (count, sum, histogram bins),
# the TTL once, the writer's watermark.
TALLY_UPDATE = re.compile(r"ADD (?P<adds>#\w+ :\w+(?:, #\w+ :\w+)*) SET #ttl = if_not_exists\(#ttl, :ttl\), #w = :to")
# A segment's update, and the rest of one an item took in part (tally.core.commit.untaken).
TALLY_CONDITIONS = ("attribute_not_exists(#w) OR #w < :w", "#w = :seen")
SKETCH_UPDATE = "SET #sketch = :sketch, #ttl = if_not_exists(#ttl, :ttl)"
ORIGIN_UPDATE = "SET #count = if_not_exists(#count, :zero) + :one, #ttl = if_not_exists(#ttl, :ttl)"
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
    the metered image can be checked against what DynamoDB stored.
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
        """Strongly consistent reads of sketch items, answered from the metered image, each key charged."""
        self.meter.read_requests += 1
        responses: dict[str, list[dict[str, Any]]] = {}
        for table, request in RequestItems.items():
            if not request.get("ConsistentRead"):
                raise ValueError("the meter only answers the strongly consistent reads of a sketch merge")
            identities = [tuple(key[name]["S"] for name in self.key_attributes) for key in request["Keys"]]
            self.meter.read_units += batch_get_read_units((self.sizes.get(i, 0) for i in identities), consistent=True)
            responses[table] = [self.items[i] for i in identities if i in self.items]
        return {"Responses": responses, "UnprocessedKeys": {}}

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
        before = self.sizes.get(identity, 0)
        self.items[identity], self.sizes[identity] = after, size
        self.meter.item_writes += 1
        self.meter.units += write_units(max(before, size), transactional=transactional)
        self.meter.writes_per_item_slot[(identity, self.slot)] += 1

    def _condition_holds(self, request: Mapping[str, Any]) -> bool:
        condition = request["ConditionExpression"]
        if condition not in TALLY_CONDITIONS:
            raise ValueError(f"unmetered condition {condition!r}")
        identity = tuple(request["Key"][name]["S"] for name in self.key_attributes)
        watermark = self.items.get(identity, {}).get(request["ExpressionAttributeNames"]["#w"])
        values = request["ExpressionAttributeValues"]
        if condition == TALLY_CONDITIONS[1]:
            return watermark is not None and bytes(watermark["B"]) == bytes(values[":seen"]["B"])
        return watermark is None or bytes(watermark["B"]) < bytes(values[":w"]["B"])

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
        else:
            raise ValueError(f"unmetered update expression {expression!r}")
        item.setdefault(names["#ttl"], values[":ttl"])
        return item


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
