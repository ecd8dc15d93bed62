"""The in-account backfill's stages on moto: files folded in any order, ranges committed once, reruns add nothing."""

from __future__ import annotations

import dataclasses
import json
import random
from datetime import UTC, datetime

import boto3
import pytest
from factories import image
from moto import mock_aws
from export_support import BUCKET, PREFIX, TABLE_ARN, ExportsOf, put_export
from moto_tables import COUNTS, EVENTS

from tally import parallel_backfill
from tally.backfill import BackfillSummary, HistoryScope, ScopeRefused, WriteRateLimit, backfill_export
from tally.core.ladder import Progress, adopted_days
from tally.core.records import Reason
from tally.core.rules import parse_rules
from tally.core.settings import Settings
from tally.core.units import HOUR_MS
from tally.core.tables import COUNTS_TABLE
from tally.dynamo.backfill import BackfillClaimed
from tally.dynamo.closing import ProgressItems
from tally.dynamo.counts_table import CountsTable
from tally.dynamo.directory import CounterDirectory
from tally.parallel_backfill import (
    Backfill,
    BackfillConfig,
    PlanRefused,
    commit_chunks,
    counter_range,
    fold_images,
    merge,
)

COUNT_FROM = 1_795_000_000_000
EXPORT_ARN = f"{TABLE_ARN}/export/01795000000000-abcdef"
RULES = parse_rules(
    '[{"name": "orders", "counter": "orders/{shop}", "sum": "amount"},'
    ' {"name": "buyers", "counter": "buyers/{shop}", "distinct": "buyer"}]'
)
SETTINGS = Settings(counts_table=COUNTS, events_table=EVENTS, count_from_ms=COUNT_FROM, rules=RULES)


def history(items: int, seed: int = 7) -> list[dict]:
    chooser = random.Random(seed)
    images = []
    for n in range(items):
        images.append(
            image(
                id=str(n),
                shop=f"s{chooser.randrange(3)}",
                amount=chooser.randrange(1, 9999),
                buyer=f"b{chooser.randrange(30)}",
                ts=COUNT_FROM - chooser.randrange(2 * HOUR_MS),
            )
        )
    images.append(image(id="bad", shop="s1", ts=COUNT_FROM))  # no amount, no buyer: rejections count too
    return images


@pytest.fixture
def aws(monkeypatch):
    monkeypatch.setattr(parallel_backfill, "now_ms", lambda: COUNT_FROM + HOUR_MS)  # an hour into the day allowed
    with mock_aws():
        dynamodb = boto3.client("dynamodb", region_name="us-east-1")
        s3 = boto3.client("s3", region_name="us-east-1")
        for name in (COUNTS, "counts-here"):  # moto's tables are active at once: no waiter (a second's sleep)
            dynamodb.create_table(**COUNTS_TABLE.create_table_request(name))
        s3.create_bucket(Bucket=BUCKET)
        yield dynamodb, s3


def run_stages(backfill: Backfill, order_seed: int = 0, rules: str = "") -> dict:
    """The state machine's stages, maps run in a shuffled order (Step Functions promises none)."""
    planned = backfill.plan(EXPORT_ARN, rules)
    assert planned["rules"] == rules
    files = json.loads(backfill.s3.get_object(Bucket=planned["bucket"], Key=planned["filesKey"])["Body"].read())
    random.Random(order_seed).shuffle(files)
    for file in files:
        backfill.fold_file(planned["work"], file["key"], file["index"], planned["rules"])
    ranges = list(planned["ranges"])
    random.Random(order_seed + 1).shuffle(ranges)
    for number in ranges:
        backfill.commit_range(planned["work"], planned["exportArn"], number, planned["rules"])
    return backfill.summarize(planned["work"], planned["rules"])


def table_contents(dynamodb, table: str) -> dict[tuple[str, str], dict]:
    """Every item but the claim, without watermarks, TTLs aside: what a reader sees."""
    found = {}
    for page in dynamodb.get_paginator("scan").paginate(TableName=table, ConsistentRead=True):
        for item in page["Items"]:
            if item["pk"]["S"].startswith("#backfill#"):
                continue
            found[(item["pk"]["S"], item["sk"]["S"])] = {name: value for name, value in item.items() if not name.startswith("~")}
    return found


def test_parallel_stages_count_what_one_process_counts_and_a_rerun_adds_nothing(aws, monkeypatch):
    monkeypatch.setattr(parallel_backfill, "COMMIT_CHUNK_ITEMS", 20)
    dynamodb, s3 = aws
    images = history(60)
    described = ExportsOf(dynamodb, put_export(s3, images, files=6, at_ms=COUNT_FROM))
    backfill = Backfill(described, s3, SETTINGS, BackfillConfig(BUCKET, PREFIX, ranges=5))

    summary = run_stages(backfill)

    here = Settings(counts_table="counts-here", events_table="events-2", count_from_ms=COUNT_FROM, rules=RULES)
    counts_here = CountsTable(dynamodb, "counts-here", here, previous_release_until_ms=0)
    one_process = BackfillSummary()
    backfill_export(
        EXPORT_ARN,
        [(f"f{n}", images[n::6]) for n in range(6)],
        scope=HistoryScope(COUNT_FROM),
        settings=here,
        commit=CounterDirectory(dynamodb, "counts-here", here).recording(counts_here.commit),
        limit=WriteRateLimit(1e9),
        summary=one_process,
    )
    parallel = table_contents(dynamodb, COUNTS)
    assert parallel == table_contents(dynamodb, "counts-here")
    assert any(pk.startswith("#counters#") for pk, _ in parallel) and any(pk.startswith("#sketches#") for pk, _ in parallel)
    assert summary["items"] == 61 and summary["counted"] == dict(one_process.counted)
    assert summary["rejected"] == {Reason.MISSING_SUM.value: 1, Reason.MISSING_DISTINCT.value: 1}
    # Each bucket item written once, by the one range its counter hashes to: the floor.
    bucket_items = [key for key in parallel if not key[0].startswith("#") or key[0].startswith("#rejected#")]
    assert summary["bucket_updates"] == len(bucket_items)

    # The state machine again, other ranges, other orders: the one watermark stops every update.
    again = Backfill(described, s3, SETTINGS, BackfillConfig(BUCKET, PREFIX, ranges=3))
    rerun = run_stages(again, order_seed=5)
    assert table_contents(dynamodb, COUNTS) == parallel
    assert rerun["bucket_updates"] == 0 and rerun["updates_already_applied"] == len(bucket_items)


def test_with_days_kept_each_late_mark_is_written_with_its_item_in_whatever_range_or_chunk(aws, monkeypatch):
    """An exported record adds to its days directly and marks them (the close subtracts the marks): the stages
    commit a counter's marks with its items, as one process does, however the ranges and chunks fall."""
    monkeypatch.setattr(parallel_backfill, "COMMIT_CHUNK_ITEMS", 3)
    dynamodb, s3 = aws
    kept = dataclasses.replace(SETTINGS, calendar_prefixes=("orders/",), calendar_zones=("America/New_York",))
    images = history(60)
    backfill = Backfill(ExportsOf(dynamodb, put_export(s3, images, files=2, at_ms=COUNT_FROM)), s3, kept,
                        BackfillConfig(BUCKET, PREFIX, ranges=5))
    run_stages(backfill)
    here = dataclasses.replace(kept, counts_table="counts-here")
    counts_here = CountsTable(dynamodb, "counts-here", here, previous_release_until_ms=0)
    backfill_export(EXPORT_ARN, [(f"f{n}", images[n::2]) for n in range(2)], scope=HistoryScope(COUNT_FROM), settings=here,
                    commit=CounterDirectory(dynamodb, "counts-here", here).recording(counts_here.commit),
                    limit=WriteRateLimit(1e9), summary=BackfillSummary())
    parallel = {key: item for key, item in table_contents(dynamodb, COUNTS).items() if key[0] != "#calendar"}
    assert any("late" in item for (pk, sk), item in parallel.items() if sk.startswith("D#"))
    assert parallel == table_contents(dynamodb, "counts-here")  # the summary recorded the adoption: not compared


class Interrupted(Exception):
    """A committer's Lambda timing out in the middle of its range."""


class FailingAfter:
    def __init__(self, wrapped, allowed: int) -> None:
        self._wrapped, self.allowed, self.updates = wrapped, allowed, 0

    def update_item(self, **kwargs):
        """Bucket updates are counted and cut off; a distinct counter's sketch merges go through."""
        if kwargs["Key"]["pk"]["S"].startswith("#sketches#"):
            return self._wrapped.update_item(**kwargs)
        if self.allowed == 0:
            raise Interrupted("timed out")
        self.allowed -= 1
        self.updates += 1
        return self._wrapped.update_item(**kwargs)

    def __getattr__(self, name):
        return getattr(self._wrapped, name)


def test_a_committer_retried_after_a_timeout_resumes_after_its_last_finished_chunk(aws, monkeypatch):
    monkeypatch.setattr(parallel_backfill, "COMMIT_CHUNK_ITEMS", 10)
    dynamodb, s3 = aws
    described = ExportsOf(dynamodb, put_export(s3, history(60), files=2, at_ms=COUNT_FROM))
    config = BackfillConfig(BUCKET, PREFIX, ranges=1)
    planned = Backfill(described, s3, SETTINGS, config).plan(EXPORT_ARN)
    for index in range(2):
        Backfill(described, s3, SETTINGS, config).fold_file(planned["work"], f"{PREFIX}/AWSDynamoDB/01795000000000-abcdef/data/{index:03d}.json.gz", index)

    whole, _ = fold_images(history(60), 0, HistoryScope(COUNT_FROM), SETTINGS, ranges=1)
    first_chunk = len(next(commit_chunks(whole[0], 10)).deltas)
    failing = FailingAfter(described, allowed=first_chunk + 2)  # the timeout strikes inside the second chunk
    with pytest.raises(Interrupted):
        Backfill(failing, s3, SETTINGS, config).commit_range(planned["work"], EXPORT_ARN, 0)
    retrying = FailingAfter(described, allowed=-1)
    result = Backfill(retrying, s3, SETTINGS, config).commit_range(planned["work"], EXPORT_ARN, 0)

    summary = Backfill(described, s3, SETTINGS, config).summarize(planned["work"])
    bucket_items = [key for key in table_contents(dynamodb, COUNTS) if not key[0].startswith("#") or key[0].startswith("#rejected#")]
    assert summary["bucket_updates"] == result["bucket_updates"]
    assert summary["bucket_updates"] + summary["updates_already_applied"] == len(bucket_items)
    # The chunks finished before the timeout are not sent again; the one it broke off is (found applied in part).
    assert summary["updates_already_applied"] == 2
    assert retrying.updates == len(bucket_items) - first_chunk


def test_a_backfill_begun_by_one_process_cannot_be_finished_in_the_account_nor_the_other_way(aws):
    dynamodb, s3 = aws
    described = ExportsOf(dynamodb, put_export(s3, history(10), files=1, at_ms=COUNT_FROM))
    counts = CountsTable(dynamodb, COUNTS, SETTINGS, previous_release_until_ms=0)
    counts.claim_backfill(TABLE_ARN, "2026-11-18T11:06:40Z", EXPORT_ARN, 2_000_000_000)

    with pytest.raises(BackfillClaimed, match=r"begun by one process \(backfill.py --here\)"):
        Backfill(described, s3, SETTINGS, BackfillConfig(BUCKET, PREFIX)).plan(EXPORT_ARN)
    other_table = f"{TABLE_ARN}-2"  # another table's history, its export begun in the account
    counts.claim_backfill(other_table, "2026-11-18T11:06:41Z", f"{other_table}/export/01", 2_000_000_000, protocol="ranges")
    with pytest.raises(BackfillClaimed, match=r"begun in the account"):
        counts.claim_backfill(other_table, "2026-11-18T11:06:41Z", f"{other_table}/export/01", 2_000_000_000)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"ExportTime": datetime.fromtimestamp((COUNT_FROM - 1000) / 1000, UTC)}, "shows the table at"),
        ({"ExportStatus": "IN_PROGRESS"}, "is IN_PROGRESS, not COMPLETED"),
        ({"S3Prefix": "elsewhere"}, "reads s3://exports/orders only"),
        ({"S3Prefix": "orders/deeper"}, "reads s3://exports/orders only"),  # its files lie outside the workers' grant
    ],
)
def test_the_plan_refuses_an_export_it_must_not_count(aws, change, message):
    dynamodb, s3 = aws
    described = ExportsOf(dynamodb, {**put_export(s3, history(3), files=1, at_ms=COUNT_FROM), **change})
    with pytest.raises(PlanRefused, match=message):
        Backfill(described, s3, SETTINGS, BackfillConfig(BUCKET, PREFIX)).plan(EXPORT_ARN)
    assert not table_contents(dynamodb, COUNTS)


def test_every_counter_falls_in_one_range_and_partials_hold_disjoint_items():
    assert {counter_range(f"c{n}", 7) for n in range(500)} == set(range(7))
    assert counter_range("orders/s1", 1) == 0
    partials, summary = fold_images(history(200), 3, HistoryScope(COUNT_FROM), SETTINGS, ranges=4)
    seen = [set(segment.deltas) for segment in partials.values()]
    assert sum(map(len, seen)) == len(set().union(*seen))
    for number, segment in partials.items():
        assert {counter_range(counter, 4) for counter, _ in segment.deltas} == {number}
    assert summary.items == 201


def test_merged_partials_are_the_sum_of_their_files_and_chunk_by_whole_counters():
    whole, _ = fold_images(history(300), 0, HistoryScope(COUNT_FROM), SETTINGS, ranges=1)
    halves = [fold_images(history(300)[n::2], n, HistoryScope(COUNT_FROM), SETTINGS, ranges=1)[0][0] for n in range(2)]
    merged = merge(halves)
    assert merged.deltas == whole[0].deltas and merged.sums == whole[0].sums
    assert {item: sketch.count() for item, sketch in merged.sketches.items()} == {
        item: sketch.count() for item, sketch in whole[0].sketches.items()
    }
    parts = list(commit_chunks(merged, max_items=30))
    assert sum(len(part.deltas) for part in parts) == len(merged.deltas)
    counters = [{counter for counter, _ in part.deltas} for part in parts]
    assert all(not a & b for n, a in enumerate(counters) for b in counters[n + 1 :])
    assert {part.first_sequence for part in parts} == {parallel_backfill.EXPORT_POSITION}


def test_settings_from_the_environment_and_their_refusals():
    config = BackfillConfig.from_env({"TALLY_BACKFILL_BUCKET": "b", "TALLY_BACKFILL_PREFIX": "/p/", "TALLY_BACKFILL_RANGES": "8",
                                      "TALLY_BACKFILL_MAX_WCU": "4000", "TALLY_BACKFILL_COMMITTERS": "4"})
    assert (config.prefix, config.committer_wcu) == ("p", 1000.0)
    assert config.work_prefix(EXPORT_ARN) == "p/tally-backfill/01795000000000-abcdef/8-ranges"
    with pytest.raises(PlanRefused, match="TALLY_BACKFILL_BUCKET is not set"):
        BackfillConfig.from_env({})
    with pytest.raises(PlanRefused, match="ranges must be 1-10000"):
        BackfillConfig.from_env({"TALLY_BACKFILL_BUCKET": "b", "TALLY_BACKFILL_RANGES": "0"})


# --- one rule's history, added later ---------------------------------------------------------------------

ADDED_RULES = parse_rules(
    '[{"name": "orders", "counter": "orders/{shop}", "sum": "amount"},'
    ' {"name": "buyers", "counter": "buyers/{shop}", "distinct": "buyer"},'
    f' {{"name": "big", "counter": "big/{{shop}}", "when": {{"size": {{"equals": "big"}}}}, "countFrom": {COUNT_FROM // 1000}}}]'
)
ADDED = Settings(counts_table=COUNTS, events_table=EVENTS, count_from_ms=COUNT_FROM - HOUR_MS, rules=ADDED_RULES)


def test_a_rule_added_later_gets_its_history_in_the_account_and_only_its_own_counters_are_written(aws):
    dynamodb, s3 = aws
    images = [dict(item, size={"S": "big" if n % 3 == 0 else "small"}) for n, item in enumerate(history(120))]
    described = ExportsOf(dynamodb, put_export(s3, images, files=3, at_ms=COUNT_FROM))
    backfill = Backfill(described, s3, ADDED, BackfillConfig(BUCKET, PREFIX, ranges=4))

    summary = run_stages(backfill, rules="big")

    written = table_contents(dynamodb, COUNTS)
    counters = {pk for pk, _ in written if not pk.startswith("#")}
    assert counters == {f"big/s{n}" for n in range(3)}  # not orders/…, buyers/…, nor #rejected#…
    big = [item for n, item in enumerate(images) if n % 3 == 0]
    assert sum(summary["counted"].values()) == len(big) and summary["rejected"] == {}
    hours = sum(int(item["count"]["N"]) for (pk, sk), item in written.items() if pk.startswith("big/") and sk.startswith("H#"))
    assert hours == len(big)

    again = run_stages(backfill, rules="big")  # a redrive, or the command run twice
    assert again["bucket_updates"] == summary["bucket_updates"] and table_contents(dynamodb, COUNTS) == written
    claims = CountsTable(dynamodb, COUNTS, ADDED, previous_release_until_ms=0)
    at = "2026-11-18T11:06:40Z"
    with pytest.raises(BackfillClaimed, match=r"^rule 'big' is counted from .* together with rules big: run the backfill again with --rules big$"):
        claims.claim_backfill(TABLE_ARN, at, EXPORT_ARN, 2_000_000_000, protocol="ranges", rules=("big", "small"))
    with pytest.raises(BackfillClaimed, match=r"^the history of rule 'big' is counted from export .*abcdef \(at 2026-11-18T11:06:40Z\); counting .*other too"):
        claims.claim_backfill(TABLE_ARN, at, f"{TABLE_ARN}/export/other", 2_000_000_000, protocol="ranges", rules=("big",))
    with pytest.raises(BackfillClaimed, match=r"rule 'big' from .* was begun in the account"):
        claims.claim_backfill(TABLE_ARN, at, EXPORT_ARN, 2_000_000_000, rules=("big",))


def test_a_backfill_of_rules_refuses_what_it_cannot_count_exactly_once(aws):
    dynamodb, s3 = aws
    backfill = Backfill(ExportsOf(dynamodb, put_export(s3, history(5), files=1, at_ms=COUNT_FROM)), s3, ADDED, BackfillConfig(BUCKET, PREFIX))
    with pytest.raises(ScopeRefused, match=r"rule 'orders' has no countFrom of its own"):
        backfill.plan(EXPORT_ARN, "orders")
    with pytest.raises(ScopeRefused, match=r"no rule named 'refunds'"):
        backfill.plan(EXPORT_ARN, "refunds")


def test_the_plan_refuses_a_rule_whose_count_from_has_not_come(aws, monkeypatch):
    dynamodb, s3 = aws
    monkeypatch.setattr(parallel_backfill, "now_ms", lambda: COUNT_FROM - 1000)
    backfill = Backfill(ExportsOf(dynamodb, put_export(s3, history(5), files=1, at_ms=COUNT_FROM)), s3, ADDED, BackfillConfig(BUCKET, PREFIX))
    with pytest.raises(PlanRefused, match=r"^the history of rule big at 2026-11-18T11:06:40Z cannot be counted before"):
        backfill.plan(EXPORT_ARN, "big")


def test_the_summary_records_the_days_the_whole_table_made_complete_and_a_rule_backfill_none(aws):
    """Days kept: the commits leave the progress untouched (a stopped or redriven execution makes nothing read
    from items early); the summary, run after every range committed, records the adopted days in each zone,
    and again the same."""
    dynamodb, s3 = aws
    calendar = Settings(counts_table=COUNTS, events_table=EVENTS, count_from_ms=COUNT_FROM, rules=RULES,
                        calendar_prefixes=("orders/",), calendar_zones=("America/New_York",))
    described = ExportsOf(dynamodb, put_export(s3, history(30), files=2, at_ms=COUNT_FROM))
    backfill = Backfill(described, s3, calendar, BackfillConfig(BUCKET, PREFIX, ranges=2))
    progress = ProgressItems(dynamodb, COUNTS)
    planned = backfill.plan(EXPORT_ARN)
    for file in json.loads(s3.get_object(Bucket=BUCKET, Key=planned["filesKey"])["Body"].read()):
        backfill.fold_file(planned["work"], file["key"], file["index"])
    for number in planned["ranges"]:
        backfill.commit_range(planned["work"], EXPORT_ARN, number)
    assert [progress.read(zone) for zone in calendar.kept_zones] == [Progress(), Progress()]

    backfill.summarize(planned["work"], planned["rules"])
    backfill.summarize(planned["work"], planned["rules"])
    for zone in calendar.kept_zones:
        assert progress.read(zone).adopted == (("orders/", *adopted_days(COUNT_FROM, zone, calendar)),)
    ProgressItems(dynamodb, COUNTS).client.delete_item(TableName=COUNTS, Key={"pk": {"S": "#calendar"}, "sk": {"S": "UTC"}})
    added = dataclasses.replace(ADDED, calendar_prefixes=("big/",), counts_table=COUNTS)
    Backfill(described, s3, added, BackfillConfig(BUCKET, PREFIX, ranges=2)).summarize(planned["work"], "big")
    assert progress.read("UTC") == Progress()
