"""audit.py --repair reaches the days and months a close wrote from hours an overlap left unresolved: each is
recounted over its zone's local midnights after its hours, brought to brute force and unmarked, once; one the
recount does not explain stays marked, with the reason, and is found again by the next run."""

from __future__ import annotations

import json
import time
from collections import Counter
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from script_support import load_script

from tally.closing import Closer
from tally.core.buckets import Bucket
from tally.core.directory import DIRECTORY_PARTITIONS
from tally.core.repair import bound_of
from tally.core.settings import Settings
from tally.core.tables import UNRESOLVED_ATTRIBUTE, UNRESOLVED_PARTITION
from tally.core.units import DAY_MS, HOUR_MS, MINUTE_MS
from tally.core.windows import now_ms
from tally.dynamo.closing import ProgressItems
from tally.dynamo.counts_table import CountsTable
from tally.local.aws import LocalContext, client, local_handler, stream_arn_of, write_items
from tally.local.delivery import DeliveryConfig
from tally.local.stream_reader import StreamReader
from tally.local.workload import Event, Workload
from tally.reader import Reader

pytestmark = [pytest.mark.server, pytest.mark.usefixtures("fresh_handler_cache")]

audit = load_script("audit")

COUNTERS = ["orders", "refunds"]
ZONE = "America/New_York"
ZONES = ("UTC", ZONE)
WINDOW_SECONDS = 900  # the second reader's tumbling window, Lambda's longest


def local(ms: int, zone: str) -> date:
    return datetime.fromtimestamp(ms / 1000, UTC).astimezone(ZoneInfo(zone)).date()


def brute_force(events, zone: str) -> Counter[tuple[str, str]]:
    """(counter, sort key) -> events, for every day and month of ``zone`` holding some."""
    found: Counter[tuple[str, str]] = Counter()
    for event in events:
        day = local(event.ts_ms, zone)
        found[(event.counter, Bucket.of_day(day, zone).sort_key)] += 1
        found[(event.counter, Bucket.of_month(day, zone).sort_key)] += 1
    return found


def periods(dynamodb, counts: str) -> dict[tuple[str, str], dict]:
    """Every day and month item of the counters (one lane each here)."""
    found = {}
    for page in dynamodb.get_paginator("scan").paginate(TableName=counts, ConsistentRead=True):
        for item in page["Items"]:
            if item["pk"]["S"] in COUNTERS and item["sk"]["S"].startswith(("D#", "MO#")):
                found[(item["pk"]["S"], item["sk"]["S"])] = item
    return found


def repair_json(capsys, *args: str) -> tuple[int, list[dict]]:
    status = audit.main(["--repair", "--json", *args])
    return status, [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def unresolved_hours(tables, events, monkeypatch) -> None:
    """Half the events counted; then the whole stream read again in batches of 3 while the stream answers that the
    records are trimmed: the overlap leaves hours (and minutes) unresolved, low by what their marks bound."""
    from tally.core.overlaps import RecordsAgain
    from tally.dynamo.stream import ShardRecords

    dynamodb = client("dynamodb")

    def read(batch: int, window: int, level: str) -> None:
        StreamReader(
            client("dynamodbstreams"), stream_arn_of(dynamodb, tables.events), local_handler(tables.counts, log_level=level),
            config=DeliveryConfig(batch_size=batch, window_seconds=window), context=LocalContext(),
        ).run(until_idle=True, idle_polls=1, poll_interval=0, commit_open_windows=True)

    # Both halves arrive within one of the second reader's windows: one holding the first half alone overlaps the
    # first reader's whole, and one holding the second alone does not overlap it at all, so nothing is lost.
    until_next = WINDOW_SECONDS - time.time() % WINDOW_SECONDS
    if until_next < 20:
        time.sleep(until_next + 0.5)
    write_items(dynamodb, tables.events, [event.item() for event in events[: len(events) // 2]])
    read(200, 60, "ERROR")
    write_items(dynamodb, tables.events, [event.item() for event in events[len(events) // 2 :]])
    trimmed = RecordsAgain(None, "TrimmedDataAccessException: the records were trimmed", 1)
    with monkeypatch.context() as patched:
        patched.setattr(ShardRecords, "read", lambda self, step: trimmed)
        read(3, WINDOW_SECONDS, "CRITICAL")


def close(table: CountsTable, events, at_ms: int) -> list[str]:
    """Close every day of the events in both zones, then their months (by hand: the months are not over yet);
    the periods the close marked."""
    progress = ProgressItems(table.client, table.table_name)
    for zone in ZONES:  # closes begin the day before the events, and the events' last month counts as reached
        before = Bucket.of_day(min(local(event.ts_ms, zone) for event in events) - timedelta(days=1), zone)
        last_month = Bucket.of_month(max(local(event.ts_ms, zone) for event in events), zone)
        progress.advance(zone, before, last_month, before)
    closer = Closer(table)
    marked = []
    while (summary := closer.close_due(at_ms)).periods:
        marked += summary.unresolved
    for zone in ZONES:
        for month in sorted({Bucket.of_month(local(event.ts_ms, zone), zone) for event in events}):
            for part in range(DIRECTORY_PARTITIONS):
                marked += closer.close_part([month], part).unresolved
    return marked


def room_for_one(table: CountsTable, events) -> tuple[str, int]:
    """A counter and an instant where one event more is still within what the marks allow: in a marked hour that
    lacks less than its bound, in a minute that no record names (so nothing but the hour, and the days and months
    with their wide bounds, recounts it)."""
    recorded = {(record["counter"]["S"], record["bucket"]["S"]) for record in table.unresolved_records()}
    for counter, sort_key in sorted(key for key in recorded if key[1].startswith("H#")):
        hour = Bucket.from_sort_key(sort_key)
        lanes = table.bucket_lanes(counter, sort_key)
        held = sum(1 for e in events if e.counter == counter and hour.start_ms <= e.ts_ms < hour.end_ms)
        if bound_of(mark for lane in lanes for mark in lane.marks) - (held - sum(lane.count for lane in lanes)) < 1:
            continue
        for start in range(hour.start_ms, hour.end_ms, MINUTE_MS):
            if (counter, Bucket.of_minute(start // MINUTE_MS).sort_key) not in recorded:
                return counter, start + 1_000
    raise AssertionError("no marked hour has room for one event more")


def test_a_day_closed_from_an_unresolved_hour_is_repaired_to_brute_force(tables, capsys, monkeypatch):
    settings = Settings(counts_table=tables.counts, calendar_prefixes=tuple(COUNTERS), calendar_zones=(ZONE,))
    for name, value in settings.counting_environment().items():
        monkeypatch.setenv(name, value)
    dynamodb = client("dynamodb")
    end = now_ms() - 5 * MINUTE_MS
    # 20 hours: they hold a UTC or a New York midnight (05:00Z), so the zones' days hold different events.
    events = Workload(counters=COUNTERS, hours=20, rate=(3, 5), seed=1).events(end)
    unresolved_hours(tables, events, monkeypatch)
    table = CountsTable(dynamodb, tables.counts, settings)
    assert any(record["bucket"]["S"].startswith("H#") for record in table.unresolved_records())

    marked = close(table, events, end + 3 * DAY_MS + 2 * HOUR_MS)
    for prefix in ("D#UTC@", f"D#{ZONE}@", "MO#UTC@", f"MO#{ZONE}@"):
        assert any(f" {prefix}" in period for period in marked), (prefix, marked)
    # A late record the repair's Scan finds in the table, which the stream commits to its New York day between the
    # repair's read of the day and its transaction: that cancels, and judged again the day is brought to its
    # recount, not past it.
    late = Event("late-during-the-repair", *room_for_one(table, events))
    write_items(dynamodb, tables.events, [late.item()])
    events.append(late)
    raced_day = (late.counter, Bucket.of_day(local(late.ts_ms, ZONE), ZONE).sort_key)
    raced: list[int] = []

    def racing(self, counter, bucket, lanes, fix, records, repair_id):
        if (counter, bucket) == raced_day and not raced:
            raced.append(fix.count)
            dynamodb.update_item(TableName=tables.counts, Key={"pk": {"S": counter}, "sk": {"S": lanes[0].sort_key}},
                                 UpdateExpression="ADD #c :one, #late :one",
                                 ExpressionAttributeNames={"#c": "count", "#late": "late"},
                                 ExpressionAttributeValues={":one": {"N": "1"}})
        return repair_bucket(self, counter, bucket, lanes, fix, records, repair_id)

    truth = {zone: brute_force(events, zone) for zone in ZONES}
    days = {zone: (min(local(e.ts_ms, zone) for e in events), max(local(e.ts_ms, zone) for e in events)) for zone in ZONES}
    reader = Reader(tables.counts, client=dynamodb, settings=settings)

    def read_days(zone: str) -> tuple[dict[tuple[str, str], int], list[str]]:
        first, last = days[zone]
        found = reader.calendar(COUNTERS, "day", tz=zone, start=first, end=last + timedelta(days=1), consistent=True)
        counts = {(series.counter, Bucket.of_day(point.start.date(), zone).sort_key): point.count
                  for series in found for point in series.points if point.count}
        return counts, reader.calendar_notes(found)

    for zone in ZONES:
        assert any("may be low" in note for note in read_days(zone)[1])

    # A UTC day that holds more than the events table (as if an event had been deleted): left marked, its month too.
    stored = periods(dynamodb, tables.counts)
    planted = next(key for key, item in sorted(stored.items()) if key[1].startswith("D#UTC@") and UNRESOLVED_ATTRIBUTE in item)
    planted_month = (planted[0], Bucket.of_month(date.fromisoformat(planted[1][-10:]), "UTC").sort_key)

    def add_to_planted(count: int) -> None:
        dynamodb.update_item(TableName=tables.counts, Key={"pk": {"S": planted[0]}, "sk": {"S": planted[1]}},
                             UpdateExpression="ADD #c :n", ExpressionAttributeNames={"#c": "count"},
                             ExpressionAttributeValues={":n": {"N": str(count)}})

    add_to_planted(5)
    repair_bucket = CountsTable.repair_bucket
    with monkeypatch.context() as patched:
        patched.setattr(CountsTable, "repair_bucket", racing)
        status, rows = repair_json(capsys)
    assert status == 1
    by_bucket = {(row["counter"], row["bucket"]): row for row in rows}
    assert {sort_key.split("#")[0] for _, sort_key in by_bucket} >= {"H", "D", "MO"}
    ranks = [0 if row["bucket"][:2] in ("M#", "H#") else 1 if row["bucket"].startswith("D#") else 2 for row in rows]
    assert ranks == sorted(ranks)  # hours, then days, then months
    left = {key: row for key, row in by_bucket.items() if row["verdict"] != "repaired"}
    assert set(left) == {planted, planted_month}, left
    assert "outside 0.." in left[planted]["why"] and left[planted]["recount"] == truth["UTC"][planted]
    assert f"closed from {planted[1]}" in left[planted_month]["why"]
    for (counter, sort_key), row in by_bucket.items():
        if sort_key.startswith(("D#", "MO#")) and (counter, sort_key) not in left:
            zone = sort_key.split("#", 1)[1].split("@")[0]
            assert row["recount"] == row["stored"] + row["added"] == truth[zone][(counter, sort_key)], row
    assert raced and by_bucket[raced_day]["added"] == raced[0] - 1 and by_bucket[raced_day]["verdict"] == "repaired"
    first_rows = rows

    # Put right, the next run finds the day and its month again though their hours' records are gone.
    add_to_planted(-5)
    assert not any(record["bucket"]["S"].startswith("H#") for record in table.unresolved_records())
    status, rows = repair_json(capsys)
    assert status == 0 and {(row["counter"], row["bucket"]) for row in rows} == {planted, planted_month}
    assert all(row["verdict"] == "repaired" and row["recount"] == truth["UTC"][(row["counter"], row["bucket"])] for row in rows)
    # The overlap lost events the close carried up: the two runs added each of them to its day and month in both
    # zones (the first run alone may hold the planted day's month back, the one that lost them all).
    lost = sum(row["added"] for row in first_rows if row["bucket"].startswith(("H#", "M#")))
    assert lost > 0
    for prefix in ("D#UTC@", f"D#{ZONE}@", "MO#UTC@", f"MO#{ZONE}@"):
        added = sum(row["added"] for row in first_rows + rows if row["bucket"].startswith(prefix) and "added" in row)
        assert added > 0, (prefix, first_rows, rows)
    assert repair_json(capsys) == (0, [])  # nothing is repaired twice

    stored = periods(dynamodb, tables.counts)
    for zone in ZONES:
        for key, count in truth[zone].items():
            assert int(stored[key]["count"]["N"]) == count, (key, stored[key])
        counts, notes = read_days(zone)
        assert counts == {key: count for key, count in truth[zone].items() if key[1].startswith("D#")}
        assert not any("may be low" in note for note in notes), notes
    assert not any(UNRESOLVED_ATTRIBUTE in item for item in stored.values())
    assert all("repaired" in stored[key] for key in stored if f"{key[0]} {key[1]}" in marked)  # what was done to it
    assert not dynamodb.query(TableName=tables.counts, KeyConditionExpression="pk = :pk",
                              ExpressionAttributeValues={":pk": {"S": UNRESOLVED_PARTITION}})["Items"]
