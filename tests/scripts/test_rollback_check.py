"""scripts/rollback_check.py on moto: what it refuses and names, read from the published settings and the table."""

from __future__ import annotations

import json

import pytest
from moto_tables import COUNTS, no_sleep_backoff
from script_support import load_script

from tally.core.commit import ANCHOR_TTL_MS, Anchor, Writer, anchor_key
from tally.core.rules import parse_rules
from tally.core.settings import Settings
from tally.dynamo.counts_table import CountsTable

rollback_check = load_script("rollback_check")

RULES = [{"name": "views", "counter": "views/{page}", "distinct": "user"}]
PUBLISHED_MS = 1_795_000_000_000


def published(dynamodb, **settings) -> CountsTable:
    """The counts table after a function counting with ``settings`` started (its cold start publishes them)."""
    CountsTable(dynamodb, COUNTS, Settings(counts_table=COUNTS, **settings), backoff=no_sleep_backoff).publish_settings(
        "tally-count", PUBLISHED_MS
    )
    return CountsTable(dynamodb, COUNTS, Settings(counts_table=COUNTS), backoff=no_sleep_backoff)


def test_a_table_counted_without_days_or_new_rule_fields_may_be_rolled_back(dynamodb):
    verdict = rollback_check.judge(published(dynamodb, rules=parse_rules(json.dumps(RULES))), "0.2.0")
    assert verdict.lost == [] and verdict.as_json()["safe"]
    assert any("distinct values merged into the lane partitions" in note for note in verdict.notes)


def test_days_kept_and_rules_the_older_release_refuses_are_named_with_their_fix(dynamodb):
    rules = [*RULES, {"name": "refunds", "counter": "refunds/{shop}", "countFrom": "2026-11-23T10:00:00Z"},
             {"name": "orders", "counter": "orders/{shop}", "retiredAt": "2026-12-01T00:00:00Z"}]
    table = published(dynamodb, rules=parse_rules(json.dumps(rules)), calendar_prefixes=("views/",))
    days, refunds, orders = rollback_check.judge(table, "0.2.0").lost
    assert 'calendarPrefixes ["views/"], published by tally-count at 2026-11-18T' in days
    assert "0.2.0 discards such a state whole" in days and "set calendarPrefixes to [] and deploy" in days
    assert refunds.startswith("rule 'refunds' has countFrom") and "drop its countFrom" in refunds
    assert orders.startswith("rule 'orders' has retiredAt") and "remove the retired rule" in orders


def test_nothing_published_is_nothing_to_lose(dynamodb):
    verdict = rollback_check.judge(CountsTable(dynamodb, COUNTS, Settings(counts_table=COUNTS)), "0.2.0")
    assert verdict.lost == [] and "nothing counted yet" in verdict.notes[0]


@pytest.mark.parametrize(("settings", "status"), [({}, 0), ({"calendar_prefixes": ("views/",)}, 1)])
def test_the_exit_status_says_whether_the_rollback_loses_anything(dynamodb, monkeypatch, capsys, settings, status):
    published(dynamodb, **settings)
    monkeypatch.setattr(rollback_check, "client", lambda service: dynamodb)
    assert rollback_check.main(["--to", "0.2.0", "--counts-table", COUNTS]) == status
    out = capsys.readouterr().out
    assert ("loses nothing" in out) == (status == 0) and ("LOST: window states" in out) == (status == 1)


def test_unresolved_buckets_are_named_as_read_low_by_the_older_release(dynamodb):
    table = published(dynamodb, rules=parse_rules(json.dumps(RULES)))
    for bucket in ("H#2026-11-22T13", "M#2026-11-22T13:05"):
        dynamodb.put_item(TableName=COUNTS, Item={
            "pk": {"S": "#unresolved"}, "sk": {"S": f"views/p1#{bucket}"},
            "counter": {"S": "views/p1"}, "bucket": {"S": bucket},
        })
    verdict = rollback_check.judge(table, "0.2.0")
    assert verdict.lost == []
    assert verdict.notes[0].startswith("2 bucket(s) an overlap left unresolved (views/p1 H#2026-11-22T13, views/p1 M#")
    assert "scripts/audit.py --repair before rolling back" in verdict.notes[0]


def put_anchor(dynamodb, shard: str, trusted: bool, put_ms: int) -> None:
    item = Anchor(100, 200, trusted, "test").item(anchor_key(Writer.of_shard("arn:stream", shard)), put_ms + ANCHOR_TTL_MS)
    dynamodb.put_item(TableName=COUNTS, Item=item)


@pytest.mark.parametrize("target", ["0.3.0", "0.2.0"])
def test_a_shard_read_again_by_this_releases_first_reader_refuses_a_rollback_while_it_can_be_read(dynamodb, target):
    """Its items holding 0.2.0 watermarks are judged by this release alone: either older release would add a
    later segment of that shard over them whole."""
    table = published(dynamodb, rules=parse_rules(json.dumps(RULES)))
    put_anchor(dynamodb, "shardId-went-on", trusted=True, put_ms=PUBLISHED_MS)
    assert rollback_check.judge(table, target, now_ms=PUBLISHED_MS).lost == []  # a trusted anchor: exact either way
    put_anchor(dynamodb, "shardId-read-again", trusted=False, put_ms=PUBLISHED_MS)
    [lost] = rollback_check.judge(table, target, now_ms=PUBLISHED_MS + 27 * 3_600_000).lost
    assert "read again from its trim horizon" in lost and "counting records twice" in lost
    assert "scripts/audit.py --repair and roll back after 2026-11-19T" in lost
    assert rollback_check.judge(table, target, now_ms=PUBLISHED_MS + 28 * 3_600_000).lost == []


def test_a_rollback_to_0_3_0_keeps_days_marks_and_every_rule_field(dynamodb):
    rules = [*RULES, {"name": "refunds", "counter": "refunds/{shop}", "countFrom": "2026-11-23T10:00:00Z"}]
    table = published(dynamodb, rules=parse_rules(json.dumps(rules)), calendar_prefixes=("views/",))
    dynamodb.put_item(TableName=COUNTS, Item={
        "pk": {"S": "#unresolved"}, "sk": {"S": "views/p1#H"}, "counter": {"S": "views/p1"}, "bucket": {"S": "H#x"},
    })
    verdict = rollback_check.judge(table, "0.3.0")
    assert verdict.lost == [] and verdict.notes == []
    assert len(rollback_check.judge(table, "0.2.0").lost) == 2  # days kept, countFrom: what 0.2.0 cannot take
