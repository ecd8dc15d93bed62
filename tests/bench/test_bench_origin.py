"""The origin re-implementation behaves as the origin did, defects included."""

from __future__ import annotations

import pytest

from bench import origin
from bench.cost import MeteredClient
from bench.workloads import stream_record
from tally.core.units import DAY_MS, HOUR_MS, MINUTE_MS
from tally.core.windows import Window

HOUR = 498_611  # an hour index: 2026-11-18T11:00Z
T0_MS = HOUR * HOUR_MS


def records(*times_ms: int, counter: str = "page") -> list[dict]:
    return [stream_record(counter, ms, sequence) for sequence, ms in enumerate(times_ms)]


def test_every_record_costs_two_update_items_one_per_bucket_key():
    client = MeteredClient(("id",))
    origin.OriginHandler(client, "counts")({"Records": records(T0_MS + 1_000, T0_MS + 2_000, T0_MS + 61_000)})
    assert client.meter.requests == 6
    seconds = T0_MS // 1000
    assert client.count_of((f"page_hour_{seconds // 3600}",)) == 3
    assert client.count_of((f"page_minute_{seconds // 60}",)) == 2
    assert client.count_of((f"page_minute_{seconds // 60 + 1}",)) == 1


def test_a_modify_is_counted_again_because_next_does_not_skip_it():
    client = MeteredClient(("id",))
    [modify] = records(T0_MS)
    modify["eventName"] = "MODIFY"
    origin.OriginHandler(client, "counts")({"Records": records(T0_MS) + [modify]})
    assert client.count_of((f"page_hour_{T0_MS // 1000 // 3600}",)) == 2


def test_a_remove_fails_the_whole_batch_with_key_error():
    client = MeteredClient(("id",))
    [remove] = records(T0_MS)
    remove["eventName"] = "REMOVE"
    del remove["dynamodb"]["NewImage"]
    with pytest.raises(KeyError):
        origin.OriginHandler(client, "counts")({"Records": records(T0_MS) + [remove] + records(T0_MS)})
    assert client.meter.requests == 2  # the record before it was counted; a retry counts it again


def test_query_reads_24_hours_then_walks_minutes_backwards_from_the_window_start():
    now_ms = T0_MS + 30_000  # minute offset 0
    keys = origin.query_keys("page", now_ms)
    assert len(keys) == 83
    assert keys[:24] == [f"page_hour_{HOUR - i}" for i in range(24)]
    start_minute = (now_ms - DAY_MS) // MINUTE_MS
    assert keys[24:] == [f"page_minute_{start_minute - i}" for i in range(1, 60)]
    window = Window.ending(now_ms)
    meant = {f"page_minute_{m}" for m in range(window.first_minute, (HOUR - 23) * 60)}
    assert len(meant) == 59 and meant.isdisjoint(keys)


def test_query_at_the_last_minute_of_an_hour_reads_only_hour_keys():
    assert len(origin.query_keys("page", T0_MS + 59 * MINUTE_MS)) == 24


def test_query_miscounts_the_window_start():
    now_ms = T0_MS + 30 * MINUTE_MS
    inside = now_ms - DAY_MS + 10 * MINUTE_MS  # in the window's first, partial hour
    outside = now_ms - DAY_MS - 10 * MINUTE_MS  # before the window
    counts = {}
    for event_ms in (inside, outside):
        seconds = event_ms // 1000
        for key in (origin.hour_key("page", seconds), origin.minute_key("page", seconds)):
            counts[key] = counts.get(key, 0) + 1
    events = [("page", inside), ("page", outside)]
    window = Window.ending(now_ms)
    assert origin.brute_force(events, "page", window.first_minute, window.last_minute, now_ms) == 1
    assert origin.sum_keys(counts, "page", now_ms) == 1 - 1 + 1  # misses the event inside, counts the one outside


def test_query_against_moto_sums_one_batch_get(dynamodb):
    dynamodb.create_table(**origin.create_table_request("origin-counts"))
    now_ms = T0_MS + 30 * MINUTE_MS
    origin.OriginHandler(dynamodb, "origin-counts")({"Records": records(now_ms - HOUR_MS, now_ms - 60_000)})
    assert origin.query(dynamodb, "origin-counts", "page", now_ms) == 2
