"""The modeled table of the top N bench: what moto stores after the real commit path, and what a top reads."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import boto3
import pytest
from freezegun import freeze_time
from moto import mock_aws
from sweeps import sweep

from bench import top
from bench.cost import READ_UNIT_BYTES
from tally.core.buckets import Bucket
from tally.core.directory import entry_item
from tally.core.ranking import rank_item
from tally.core.segments import Segment
from tally.core.settings import Settings
from tally.core.units import HOUR_MS, MINUTE_MS
from tally.core.windows import Window, now_ms
from tally.dynamo.counts_table import CountsTable
from tally.dynamo.directory import CounterDirectory
from tally.dynamo.tables import create_tables
from tally.reader import Reader

SETTINGS = Settings(counts_table="bench-top-counts", events_table="bench-top-events", ranked_prefixes=(top.PREFIX,))


def utc(ms: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)


def a_recent_instant(minute_of_hour: int) -> int:
    """An instant of the last hour, at a given minute (and some seconds) of it: relative to the clock."""
    return (now_ms() // HOUR_MS - 1) * HOUR_MS + minute_of_hour * MINUTE_MS + 12_345


def brute_force(model: top.TrafficModel, window: Window) -> dict[str, int]:
    """Every counter's total over the window: the minutes of its partly covered hours, and its whole hours."""
    totals = {}
    whole = [h for h in range(window.first_minute // 60, window.last_minute // 60 + 1)
             if window.first_minute <= h * 60 and h * 60 + 59 <= window.last_minute]
    minutes = [m for m in range(window.first_minute, window.last_minute + 1) if m // 60 not in whole]
    for rank in range(model.counters):
        total = sum(model.hour_count(rank, hour) for hour in whole) + sum(model.minute_count(rank, m) for m in minutes)
        if total:
            totals[model.name(rank)] = total
    return totals


def ranked(totals: dict[str, int], n: int) -> list[tuple[str, int]]:
    return sorted(totals.items(), key=lambda entry: (-entry[1], entry[0]))[:n]


def model_items(model: top.TrafficModel) -> dict[tuple[str, str], dict]:
    """Every item the model says the write path stored: buckets, rank records, directory entries."""
    items = {}
    hours = range(model.start_hour, model.last_minute // 60 + 1)
    for rank in range(model.counters):
        name = model.name(rank)
        buckets = [Bucket.of_hour(hour) for hour in hours]
        buckets += [Bucket.of_minute(minute) for minute in range(model.start_hour * 60, model.last_minute + 1)]
        for bucket in buckets:
            item = model.bucket_item(name, bucket.sort_key)
            if item is not None:
                items[(name, bucket.sort_key)] = item
        for hour in hours:
            for level in model.levels(rank, hour):
                item = rank_item(name, Bucket.of_hour(hour), 0, level, model.settings)
                items[(item["pk"]["S"], item["sk"]["S"])] = item
        for day in model.days(rank):
            item = entry_item((day, name), model.settings)
            items[(item["pk"]["S"], item["sk"]["S"])] = item
    return items


def commit_model(client, model: top.TrafficModel) -> None:
    """The model's events through the real commit path: one segment a minute, one writer, with the directory."""
    table = CountsTable(client, SETTINGS.counts_table, SETTINGS, workers=1, previous_release_until_ms=0)
    directory = CounterDirectory(client, SETTINGS.counts_table, SETTINGS)
    commit = directory.recording(table.commit)
    for minute in range(model.start_hour * 60, model.last_minute + 1):
        deltas = {}
        for rank in range(model.counters):
            count = model.minute_count(rank, minute)
            if count:
                deltas[(model.name(rank), Bucket.of_minute(minute))] = count
                deltas[(model.name(rank), Bucket.of_hour(minute // 60))] = count
        if deltas:
            sequence = top.segment_sequence(minute)
            commit(Segment(sequence, minute * MINUTE_MS, sequence, sum(deltas.values()) // 2, deltas), top.WRITER)


def stored(client) -> dict[tuple[str, str], dict]:
    items = {}
    for page in client.get_paginator("scan").paginate(TableName=SETTINGS.counts_table, ConsistentRead=True):
        for item in page["Items"]:
            items[(item["pk"]["S"], item["sk"]["S"])] = item
    return items


def test_moto_stores_what_the_model_says_and_a_top_reads_the_same_answer_at_the_same_cost_from_both():
    now = a_recent_instant(37)
    # Busy enough that hour items pass 202 events (the top one 11,623, where every level is recorded).
    model = top.TrafficModel(6, "zipf", now, SETTINGS, events_per_second=20, first_hour=now // HOUR_MS - 3)
    with freeze_time(utc(now)), mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_tables(client, SETTINGS.events_table, SETTINGS.counts_table)
        commit_model(client, model)
        assert stored(client) == model_items(model)
        answers = {}
        for name, backend in (("moto", client), ("model", top.ModelClient(model, SETTINGS.counts_table))):
            for n, window in ((3, "24h"), (5, "90m"), (12, "24h")):
                meter = top.ReadMeter(backend)
                answer = Reader(SETTINGS.counts_table, client=meter, settings=SETTINGS).top(top.PREFIX, n, window=window)
                answers[(name, n, window)] = (answer.as_json(), answer.requests, meter.requests, meter.read_units)
                truth = ranked(brute_force(model, answer.window), n)
                if answer.exact:
                    assert [(e.counter, e.total) for e in answer.entries] == truth
    for n, window in ((3, "24h"), (5, "90m"), (12, "24h")):
        assert answers[("moto", n, window)] == answers[("model", n, window)]
    assert answers[("model", 3, "24h")][0]["exact"] is True
    assert {level for (pk, sk) in model_items(model) if pk.startswith("#ranks#") for level in [int(sk[:3])]} >= {8, 13, 18, 19}


@pytest.mark.parametrize("distribution", sweep(top.DISTRIBUTIONS))
def test_a_top_over_ten_thousand_modeled_counters_is_brute_force_when_exact_and_above_its_bound_when_not(distribution):
    now = a_recent_instant(23)
    model = top.TrafficModel(10_000, distribution, now, SETTINGS)
    meter = top.ReadMeter(top.ModelClient(model, SETTINGS.counts_table))
    with freeze_time(utc(now)):
        answer = Reader(SETTINGS.counts_table, client=meter, settings=SETTINGS).top(top.PREFIX, 10, window="24h")
    totals = brute_force(model, answer.window)
    listed = [(entry.counter, entry.total) for entry in answer.entries]
    assert all(totals[name] == total for name, total in listed)  # every total listed is exact
    if answer.exact:
        assert listed == ranked(totals, 10)
    else:
        assert {name for name, total in totals.items() if total > answer.bound} <= {name for name, _ in listed}
    assert distribution == "flat" or answer.exact
    assert meter.requests == answer.requests


def test_the_meter_charges_a_query_for_whole_items_and_a_batch_get_per_key_by_dynamodbs_rules():
    now = a_recent_instant(30)
    model = top.TrafficModel(100, "zipf", now, SETTINGS)
    meter = top.ReadMeter(top.ModelClient(model, SETTINGS.counts_table))
    partition = rank_item(model.name(0), Bucket.of_hour(now // HOUR_MS - 1), 0, 0, SETTINGS)["pk"]["S"]
    request = {
        "TableName": SETTINGS.counts_table, "KeyConditionExpression": "#pk = :pk", "ProjectionExpression": "#sk",
        "ExpressionAttributeNames": {"#pk": "pk", "#sk": "sk"}, "ExpressionAttributeValues": {":pk": {"S": partition}},
        "ScanIndexForward": False, "Limit": 200,
    }
    page = meter.query(**request)
    assert set(page["Items"][0]) == {"sk"} and len(page["Items"]) == 200
    whole = sum(len(f"pk{partition}sk{item['sk']['S']}ttl") + 6 for item in page["Items"])  # a TTL's 10 digits: 6 bytes
    assert meter.read_units == -(-whole // READ_UNIT_BYTES) / 2  # eventually consistent: half
    keys = [{"pk": {"S": model.name(0)}, "sk": {"S": Bucket.of_hour(now // HOUR_MS - 2).sort_key}},
            {"pk": {"S": "views/none"}, "sk": {"S": Bucket.of_hour(now // HOUR_MS - 2).sort_key}}]
    meter.batch_get_item(RequestItems={SETTINGS.counts_table: {"Keys": keys, "ConsistentRead": True}})
    assert (meter.requests, meter.read_units) == (2, -(-whole // READ_UNIT_BYTES) / 2 + 2)  # a missing key costs one too
