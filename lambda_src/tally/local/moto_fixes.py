"""Keeps moto's transactions linear in their size and its writes isolated, and plays DynamoDB's TTL process.

moto 5.2 backs a table up before a transaction (to roll back on failure) with
a deep copy of the whole table, once per item of the transaction: a 100-item
commit against a table of N items copies 100 N items, which makes a day of
buckets take minutes to write. ``install()`` replaces that backup with one
that copies the table's index structure and deep-copies only the items the
transaction touches, once: the rollback restores exactly the same state.

It also runs moto's writes (transactions and UpdateItem) one at a time.
DynamoDB applies the writes to one item one after the other, and isolates a
transaction from every other write to its items; moto's threaded server does
neither, so two shards adding to the same bucket at once could lose an update
(or a rollback could undo another thread's commit) in a way DynamoDB never would.

And it adds numbers as DynamoDB does: exactly, up to 38 significant digits,
refusing a result beyond that. moto adds them in Python's default 28-digit
context, which rounds a large sum silently, and cannot read the exponent form
("1E-8") DynamoDB accepts.

moto never deletes expired items. ``expire_items`` does what DynamoDB's TTL
process does for one table of the in-process moto (its threaded server
included): it deletes the items whose TTL attribute has passed and signs each
one's REMOVE stream record with the service identity DynamoDB gives TTL
deletions, so rules that tell them apart can be checked end to end.

The embedded pipeline and the tests use it; the Lambda function never imports it.
"""

from __future__ import annotations

import copy
import threading
from collections import defaultdict
from decimal import Context, Decimal, Inexact, Overflow, Rounded
from functools import wraps
from types import SimpleNamespace
from typing import Any

_active = threading.local()
_one_write_at_a_time = threading.RLock()  # a transaction's Updates go through update_item
_DYNAMODB_NUMBERS = Context(prec=38, Emax=125, Emin=-130, traps=[Inexact, Rounded, Overflow])
# As the Streams API spells the identity of a TTL deletion (Lambda spells it type / principalId).
TTL_DELETION_IDENTITY = {"PrincipalId": "dynamodb.amazonaws.com", "Type": "Service"}
# DynamoDB's TTL process leaves alone items whose expiry lies more than five years in the past.
TTL_IGNORED_AFTER_SECONDS = 5 * 365 * 86_400


def expire_items(table_name: str, now_s: float, region: str = "us-east-1") -> list[dict[str, Any]]:
    """Delete the expired items of a moto table as DynamoDB's TTL process would; return their keys (DynamoDB JSON).

    An item expires when its TTL attribute (the table's, once TTL is enabled)
    is a number of epoch seconds at or before ``now_s``, and not more than
    five years before it; other values are left alone, as DynamoDB leaves them.
    """
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.dynamodb.models import dynamodb_backends

    table = dynamodb_backends[DEFAULT_ACCOUNT_ID][region].get_table(table_name)
    if table.ttl.get("TimeToLiveStatus") != "ENABLED":
        return []
    attribute = table.ttl["AttributeName"]
    expired = []
    with _one_write_at_a_time:
        for item in list(table.all_items()):
            value = item.attrs.get(attribute)
            if value is None or value.type != "N":
                continue
            expiry = Decimal(value.value)
            if not now_s - TTL_IGNORED_AFTER_SECONDS <= expiry <= now_s:
                continue
            table.delete_item(item.hash_key, item.range_key)
            if table.stream_shard is not None:
                table.stream_shard.items[-1].record["userIdentity"] = dict(TTL_DELETION_IDENTITY)
            expired.append({name: value.to_json() for name, value in item.attrs.items() if name in _key_names(table)})
    return expired


def _key_names(table: Any) -> tuple[str, ...]:
    return tuple(name for name in (table.hash_key_attr, table.range_key_attr) if name)


def install() -> None:
    """Idempotent; safe with moto's threaded server."""
    from moto.dynamodb import models
    from moto.dynamodb.exceptions import MockValidationException
    from moto.dynamodb.models.dynamo_type import DynamoType
    from moto.dynamodb.models.table import Table

    if getattr(models.DynamoDBBackend.transact_write_items, "_tally_fixed", False):
        return

    def touched_keys(table: Table, transact_items: list[dict[str, Any]]) -> list[tuple[Any, Any]]:
        keys = []
        for item in transact_items:
            (_, operation), = item.items()
            if operation.get("TableName") != table.name:
                continue
            attributes = operation.get("Key") or operation.get("Item") or {}
            hash_value = DynamoType(attributes[table.hash_key_attr])
            range_value = DynamoType(attributes[table.range_key_attr]) if table.range_key_attr else None
            keys.append((hash_value, range_value))
        return keys

    def backup(table: Table) -> Table:
        saved = copy.copy(table)
        if table.range_key_attr:
            saved.items = defaultdict(dict, {h: dict(by_range) for h, by_range in table.items.items()})
        else:
            saved.items = defaultdict(dict, table.items)
        for hash_value, range_value in touched_keys(table, _active.transact_items):
            if range_value is None:
                if hash_value in table.items:
                    saved.items[hash_value] = copy.deepcopy(table.items[hash_value])
            elif range_value in table.items.get(hash_value, {}):
                saved.items[hash_value][range_value] = copy.deepcopy(table.items[hash_value][range_value])
        return saved

    def deepcopy(obj: Any, memo: dict[int, Any] | None = None) -> Any:
        backups = getattr(_active, "backups", None)
        if backups is None or not isinstance(obj, Table) or obj.stream_shard is not None:
            return copy.deepcopy(obj, memo)
        if id(obj) not in backups:
            backups[id(obj)] = backup(obj)
        return backups[id(obj)]

    original = models.DynamoDBBackend.transact_write_items

    @wraps(original)
    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        with _one_write_at_a_time:
            _active.backups, _active.transact_items = {}, transact_items
            try:
                return original(self, transact_items)
            finally:
                _active.backups, _active.transact_items = None, None

    original_update = models.DynamoDBBackend.update_item

    @wraps(original_update)
    def update_item(self: Any, *args: Any, **kwargs: Any) -> Any:
        with _one_write_at_a_time:
            return original_update(self, *args, **kwargs)

    original_add = DynamoType.__add__

    def add(self: DynamoType, other: DynamoType) -> DynamoType:
        if self.type != other.type or not self.is_number():
            return original_add(self, other)
        try:
            total = _DYNAMODB_NUMBERS.add(Decimal(self.value), Decimal(other.value))
        except (Inexact, Rounded, Overflow):
            raise MockValidationException(
                "Number overflow. Attempting to store a number with magnitude larger than supported range"
            ) from None
        return DynamoType({"N": format(total, "f")})

    DynamoType.__add__ = add  # type: ignore[method-assign]
    transact_write_items._tally_fixed = True  # type: ignore[attr-defined]
    models.copy = SimpleNamespace(deepcopy=deepcopy)  # type: ignore[assignment]
    models.DynamoDBBackend.transact_write_items = transact_write_items  # type: ignore[method-assign]
    models.DynamoDBBackend.update_item = update_item  # type: ignore[method-assign]
