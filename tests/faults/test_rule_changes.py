"""Rules changed on a live table, on moto's server and on DynamoDB Local: a rule added later, its history
backfilled while the stream keeps running (the backfill interrupted and run again), then a rule changed
and the old one retired mid-stream. Every counter, old and new, ends at brute force, and a rule's backfill
writes no item of any other rule."""

from __future__ import annotations

import json
import random
import time
import uuid
from collections import Counter
from typing import Any

import boto3
import pytest

from handler_state import handler_state_restored
from tally.backfill import BackfillSummary, HistoryScope, WriteRateLimit, backfill_export
from tally.core.buckets import buckets_of
from tally.core.settings import Settings
from tally.core.units import HOUR_MS
from tally.core.windows import now_ms
from tally.dynamo.counts_table import CountsTable
from tally.dynamo.directory import CounterDirectory
from tally.dynamo.tables import create_tables
from tally.local.aws import LocalContext, local_handler, stream_arn_of, write_items
from tally.local.delivery import DeliveryConfig
from tally.local.stream_reader import StreamReader

from .checks import scanned, table_contents

SHOPS = ["s1", "s2", "s3"]
ORDERS = {"name": "orders", "counter": "orders/{shop}", "when": {"kind": {"equals": "order"}}}
EVERYTHING = {"name": "all", "counter": "events/all"}


class Interrupted(Exception):
    """Stands for a lost connection in the middle of a backfill."""


class Recording:
    """A DynamoDB client that records the partition of every item it updates or puts, and may stop after
    ``allowed`` bucket updates."""

    def __init__(self, wrapped: Any, allowed: int | None = None) -> None:
        self._wrapped = wrapped
        self.allowed = allowed
        self.written: Counter[str] = Counter()

    def put_item(self, **kwargs: Any) -> Any:
        self.written[kwargs["Item"]["pk"]["S"]] += 1
        return self._wrapped.put_item(**kwargs)

    def update_item(self, **kwargs: Any) -> Any:
        if self.allowed is not None:
            if self.allowed == 0:
                raise Interrupted("connection lost")
            self.allowed -= 1
        self.written[kwargs["Key"]["pk"]["S"]] += 1
        return self._wrapped.update_item(**kwargs)

    def transact_write_items(self, **kwargs: Any) -> Any:
        for entry in kwargs["TransactItems"]:
            for action in entry.values():
                key = action.get("Key") or action.get("Item")
                self.written[key["pk"]["S"]] += 1
        return self._wrapped.transact_write_items(**kwargs)

    def batch_write_item(self, **kwargs: Any) -> Any:
        for requests in kwargs["RequestItems"].values():
            for request in requests:
                self.written[request["PutRequest"]["Item"]["pk"]["S"]] += 1
        return self._wrapped.batch_write_item(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._wrapped, name)


class Table:
    """The events table and its stream, the handler deployed with one set of rules after another."""

    def __init__(self, server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        for variable, value in server.environment().items():
            monkeypatch.setenv(variable, value)
        suffix = uuid.uuid4().hex[:8]
        self.events, self.counts = f"rules-events-{suffix}", f"rules-counts-{suffix}"
        monkeypatch.setenv("EVENTS_TABLE", self.events)
        monkeypatch.setenv("COUNTS_TABLE", self.counts)
        monkeypatch.setenv("TALLY_TIME_ATTRIBUTE", "at")
        self.monkeypatch = monkeypatch
        self.client = boto3.client("dynamodb")
        create_tables(self.client, self.events, self.counts)
        self.stream = stream_arn_of(self.client, self.events)
        self.written: list[tuple[dict[str, Any], int]] = []  # each item and when its writing began
        self.random = random.Random(7)
        self.reader: StreamReader | None = None

    def deploy(self, rules: list[dict[str, Any]]) -> Settings:
        """The function takes new rules: a cold start, reading on from where the last one committed."""
        self.monkeypatch.setenv("TALLY_RULES", json.dumps(rules))
        checkpoints = self.reader.checkpoints if self.reader else None
        self.reader = StreamReader(
            boto3.client("dynamodbstreams"), self.stream, local_handler(self.counts, log_level="ERROR"),
            config=DeliveryConfig(batch_size=7, window_seconds=60), context=LocalContext(), checkpoints=checkpoints,
        )
        return Settings.from_env()

    def write(self, n: int) -> None:
        """``n`` items of the last 20 hours (late by minutes to hours), written now."""
        written_ms = now_ms()
        items = [
            {
                "id": f"e-{len(self.written) + i}",
                "shop": self.random.choice(SHOPS),
                "kind": self.random.choice(("order", "refund", "reorder")),
                "at": written_ms - self.random.randrange(20 * HOUR_MS),
            }
            for i in range(n)
        ]
        write_items(self.client, self.events, items)
        self.written.extend((item, written_ms) for item in items)

    def write_bad(self, n: int) -> None:
        """Refunds without a time: rejected, once, by whichever function reads them (no counter holds them)."""
        write_items(self.client, self.events, [{"id": f"bad-{i}", "shop": "s1", "kind": "refund"} for i in range(n)])

    def stream_on(self) -> None:
        assert self.reader is not None
        self.reader.run(until_idle=True, idle_polls=1, poll_interval=0, commit_open_windows=True)

    def export_at(self, instant_ms: int) -> list[dict[str, Any]]:
        """The table as it is at ``instant_ms``: what an export taken at it holds (its items in DynamoDB JSON)."""
        assert now_ms() >= instant_ms
        pages = self.client.get_paginator("scan").paginate(TableName=self.events, ConsistentRead=True)
        return [item for page in pages for item in page["Items"]]

    def backfill(self, rules: list[str], settings: Settings, images: list[dict[str, Any]], allowed: int | None = None):
        """The history of ``rules`` from ``images``, as backfill.py counts an export: what it wrote, per partition."""
        scope = HistoryScope.of(settings, rules)
        recording = Recording(self.client, allowed)
        scoped = scope.settings_for(settings)
        counts = CountsTable(recording, self.counts, scoped, previous_release_until_ms=0)
        summary = BackfillSummary()
        files = [(f"data/{n}.json.gz", images[n::3]) for n in range(3)]
        commit = CounterDirectory(recording, self.counts, scoped).recording(counts.commit)
        try:
            backfill_export(
                "arn:aws:dynamodb:us-east-1:1:table/e/export/" + "-".join(rules), files, scope=scope, settings=scoped,
                commit=commit, limit=WriteRateLimit(1e9), summary=summary,
            )
        except Interrupted:
            pass
        return recording.written, summary


def buckets(table: Table) -> dict[tuple[str, str], int]:
    """Every counter's buckets, lanes summed (the table's own partitions, settings and claims, left out)."""
    items = [item for item in scanned(table.client, table.counts) if not item["pk"]["S"].startswith("#")]
    return table_contents(table.client, table.counts, items)[0]


def until(instant_ms: int) -> None:
    while now_ms() < instant_ms:
        time.sleep(0.02)


def next_instant(precision_ms: int) -> int:
    """An instant a little ahead, on a whole ``precision_ms``: the stream's arrivals are that precise."""
    return (now_ms() // precision_ms + 1) * precision_ms + (precision_ms if precision_ms == 1000 else 0)


def expected_buckets(written, counts_in) -> Counter[tuple[str, str]]:
    """Brute force: every bucket of every counter, from each item and the rules that count it."""
    expected: Counter[tuple[str, str]] = Counter()
    for item, written_ms in written:
        for counter in counts_in(item, written_ms):
            for bucket in buckets_of(item["at"]):  # all within the minute retention: minute and hour
                expected[(counter, bucket.sort_key)] += 1
    return expected


# DynamoDB Local's arrivals are whole minutes (docs/design.md): rules change there on whole minutes, so its
# run waits up to two of them, and is a sweep.
BACKENDS = ["moto", pytest.param("dynamodb-local", marks=[pytest.mark.dynamodb_local, pytest.mark.sweep])]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_rule_added_and_a_rule_changed_on_a_live_table_count_every_event_once(backend, request, monkeypatch):
    server = request.getfixturevalue("dynamodb_local" if backend == "dynamodb-local" else "shared_moto_server")
    precision_ms = 60_000 if backend == "dynamodb-local" else 1000
    with handler_state_restored():
        table = Table(server, monkeypatch)
        table.deploy([ORDERS, EVERYTHING])
        table.write(60)
        table.write_bad(3)
        table.stream_on()

        # A refunds rule, deployed a little ahead of its countFrom; items keep coming before and after it.
        added = next_instant(precision_ms)
        refunds = {"name": "refunds", "counter": "refunds/{shop}", "when": {"kind": {"equals": "refund"}},
                   "countFrom": str(added // 1000)}
        settings = table.deploy([ORDERS, EVERYTHING, refunds])
        table.write(30)
        table.stream_on()
        until(added)
        exported = table.export_at(added)
        table.write(30)
        table.stream_on()

        # Its history, backfilled while the stream goes on: cut short, then run again to the end.
        first, _ = table.backfill(["refunds"], settings, exported, allowed=4)
        table.write(20)
        table.stream_on()
        before = buckets(table)
        second, summary = table.backfill(["refunds"], settings, exported)
        assert summary.updates_already_applied == 4 and summary.items == len(exported)
        assert sum(summary.rejected.values()) == 3  # shown, and left out of the rejection counters: counted already
        written = set(first) | set(second)
        assert written and all(pk.startswith(("refunds/", "#counters#")) for pk in written), written
        after = buckets(table)
        others = {key for key in before.keys() | after.keys() if not key[0].startswith("refunds/")}
        assert {key: after.get(key) for key in others} == {key: before.get(key) for key in others}  # theirs is the stream's

        # orders changed: a new rule (new counters, reorders too) from an instant, the old one retired at it.
        # Items written before the deploy arrive before that instant; the new function counts them still.
        table.write(30)
        changed = next_instant(precision_ms)
        orders2 = {"name": "orders-v2", "counter": "orders2/{shop}", "when": {"kind": {"oneOf": ["order", "reorder"]}},
                   "countFrom": str(changed // 1000)}
        retired = {**ORDERS, "retiredAt": str(changed // 1000)}
        settings = table.deploy([retired, EVERYTHING, refunds, orders2])
        table.stream_on()
        until(changed)
        exported = table.export_at(changed)
        table.write(40)
        table.stream_on()
        written, summary = table.backfill(["orders-v2"], settings, exported)
        assert set(written) and all(pk.startswith(("orders2/", "#counters#")) for pk in written), written
        table.write(20)
        table.stream_on()

    # Every counter at brute force: orders up to its retirement, its successor over all history, refunds whole.
    def counts_in(item, arrival_ms):
        counters = ["events/all"]
        if item["kind"] == "order" and arrival_ms < changed:
            counters.append(f"orders/{item['shop']}")
        if item["kind"] in ("order", "reorder"):
            counters.append(f"orders2/{item['shop']}")
        if item["kind"] == "refund":
            counters.append(f"refunds/{item['shop']}")
        return counters

    assert buckets(table) == dict(expected_buckets(table.written, counts_in))
