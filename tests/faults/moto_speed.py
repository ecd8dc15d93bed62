"""Keep moto's TransactWriteItems linear in the transaction, not in the table times the transaction.

moto 5.2.5 backs up a whole table once per *item* of a TransactWriteItems
(``copy.deepcopy`` in a loop over the items) before applying any of them, so a
99-item commit deep-copies the counts table 99 times. All those copies are
taken before the first write, so they are identical: this patch hands out the
first one again. Rollback (which the duplicate-segment path relies on) is
unchanged.
"""

from __future__ import annotations

import contextlib
import copy
import threading
from collections.abc import Iterator
from typing import Any

import moto.dynamodb.models as dynamodb_models
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.table import Table


class _OneCopyPerTransaction:
    """Stands in for the ``copy`` module inside moto's DynamoDB backend."""

    def __init__(self) -> None:
        self.local = threading.local()

    def __getattr__(self, name: str) -> Any:
        return getattr(copy, name)

    def deepcopy(self, value: Any, memo: dict[int, Any] | None = None) -> Any:
        backups = getattr(self.local, "backups", None)
        if backups is None or not isinstance(value, Table):
            return copy.deepcopy(value, memo)
        if id(value) not in backups:
            backups[id(value)] = copy.deepcopy(value, memo)
        return backups[id(value)]


@contextlib.contextmanager
def one_backup_per_transaction() -> Iterator[None]:
    shim = _OneCopyPerTransaction()
    original = DynamoDBBackend.transact_write_items

    def transact_write_items(self: DynamoDBBackend, transact_items: list[dict[str, Any]]) -> None:
        shim.local.backups = {}
        try:
            return original(self, transact_items)
        finally:
            shim.local.backups = None

    dynamodb_models.copy = shim
    DynamoDBBackend.transact_write_items = transact_write_items
    try:
        yield
    finally:
        DynamoDBBackend.transact_write_items = original
        dynamodb_models.copy = copy
