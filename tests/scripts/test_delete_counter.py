"""Deleting a counter's buckets: a dry run, a confirmation, every lane, reserved items kept, writes during it reported."""

from __future__ import annotations

import io

import pytest
from script_support import load_script

from tally.dynamo.counts_table import CountsTable
from tally.dynamo.settings import SETTINGS_KEY
from tally.core.settings import Settings
from tally.local.aws import client

pytestmark = pytest.mark.server

delete_counter = load_script("delete_counter")

BUCKETS = ["H#2026-11-22T10", "M#2026-11-22T10:07", "M#2026-11-22T10:07#3", "H#2026-11-22T10#3"]
KEPT = [("jobs/b", "H#2026-11-22T10"), ("#segment#1001", "abc#0"), ("#backfill#arn", "2026-11-22T10:00:00Z")]


def put(pk: str, sk: str, count: int = 1) -> None:
    client("dynamodb").put_item(
        TableName=counts_table(), Item={"pk": {"S": pk}, "sk": {"S": sk}, "count": {"N": str(count)}, "ttl": {"N": "1"}}
    )


def counts_table() -> str:
    import os

    return os.environ["COUNTS_TABLE"]


def keys() -> set[tuple[str, str]]:
    items = client("dynamodb").scan(TableName=counts_table(), ConsistentRead=True)["Items"]
    return {(item["pk"]["S"], item["sk"]["S"]) for item in items}


@pytest.fixture
def counted(tables):
    """jobs/a in four items (two lanes), jobs/b, a rejection counter, a marker, a claim and the published settings."""
    for index, sk in enumerate(BUCKETS, start=1):
        put("jobs/a", sk, index)
    put("#rejected#missing_counter", "H#2026-11-22T10", 4)
    for pk, sk in KEPT:
        put(pk, sk)
    CountsTable(client("dynamodb"), tables.counts, Settings()).publish_settings("test", 0)
    return tables


class Terminal(io.StringIO):
    """A stdin that is a terminal, with the user's answers in it."""

    def isatty(self) -> bool:
        return True


def test_a_dry_run_shows_every_item_and_deletes_nothing(counted, capsys):
    before = keys()
    assert delete_counter.main(["jobs/a", "--dry-run"]) == 0
    captured = capsys.readouterr()
    row = next(line for line in captured.out.splitlines() if "jobs/a" in line)
    # 4 items: 1 minute and 1 hour bucket, 2 lanes each; the hour's lanes hold 1 + 4 events.
    assert [cell.strip() for cell in row.split("│")[2:8]] == ["4", "1", "1", "2026-11-22T10", "2026-11-22T10:07", "5"]
    assert "dry run: nothing deleted (4 items would be)" in captured.err
    assert keys() == before


def test_yes_deletes_every_lane_of_every_bucket_and_nothing_else(counted, capsys):
    assert delete_counter.main(["jobs/a", "--yes"]) == 0
    assert "deleted 4 items; the stream still counts these counters" in capsys.readouterr().err
    assert keys() == {*KEPT, ("#rejected#missing_counter", "H#2026-11-22T10"), SETTINGS_KEY}


def test_a_rejection_counter_may_be_reset(counted):
    assert delete_counter.main(["#rejected#missing_counter", "--yes"]) == 0
    assert ("#rejected#missing_counter", "H#2026-11-22T10") not in keys()


@pytest.mark.parametrize("answer", ["n\n", "\n"])
def test_anything_but_yes_at_the_prompt_deletes_nothing(answer, counted, monkeypatch, capsys):
    before = keys()
    monkeypatch.setattr("sys.stdin", Terminal(answer))
    assert delete_counter.main(["jobs/a"]) == 1
    captured = capsys.readouterr()
    assert "Delete 4 items of jobs/a" in captured.err and "The stream keeps counting" in captured.err
    assert keys() == before


def test_yes_at_the_prompt_deletes(counted, monkeypatch):
    monkeypatch.setattr("sys.stdin", Terminal("y\n"))
    assert delete_counter.main(["jobs/a"]) == 0
    assert not {key for key in keys() if key[0] == "jobs/a"}


def test_without_a_terminal_it_asks_for_yes(counted, monkeypatch, capsys):
    before = keys()
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))
    assert delete_counter.main(["jobs/a"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "pass --yes" in error
    assert keys() == before


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("#segment#1001", "markers, claims and settings are tally's bookkeeping"),
        ("#settings#", "markers, claims and settings are tally's bookkeeping"),
        ("#backfill#arn", "markers, claims and settings are tally's bookkeeping"),
        ("#rejected#bogus", "unknown rejection counter '#rejected#bogus'"),
        ("", "counter is empty"),
    ],
)
def test_bookkeeping_is_never_deleted(name, message, counted, capsys):
    before = keys()
    assert delete_counter.main([name, "--yes"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and message in error
    assert keys() == before


def test_buckets_written_while_deleting_are_reported(counted, monkeypatch, capsys):
    real = CountsTable.delete_items

    def while_the_stream_commits(self, keys, on_deleted=None):
        deleted = real(self, keys, on_deleted)
        put("jobs/a", "M#2026-11-22T10:08")  # a window committed meanwhile
        return deleted

    monkeypatch.setattr(CountsTable, "delete_items", while_the_stream_commits)
    assert delete_counter.main(["jobs/a", "--yes"]) == 1
    assert "items were written while deleting (jobs/a 1)" in capsys.readouterr().err


def test_a_missing_counts_table_is_one_line(tables, capsys):
    assert delete_counter.main(["jobs/a", "--counts-table", "nosuch", "--yes"]) == 2
    assert "no table 'nosuch'" in capsys.readouterr().err
