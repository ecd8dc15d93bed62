"""Late arrivals end to end against moto: invocation, commit, then windows by both plans.

moto does not expire TTL items, so ``expire`` plays DynamoDB's TTL deletion:
any item whose TTL has passed may be deleted at any moment.
"""

from __future__ import annotations

from typing import Any

import pytest

from factories import counter_record, one_invocation_window, window_event
from moto_tables import COUNTS, read_counts
from tally.core.buckets import Bucket
from tally.core.plans import PlanKind, WindowUnavailable
from tally.core.records import Reason
from tally.core.units import DAY_MS, HOUR_MS, MINUTE_MS
from tally.core.windows import Window, parse_instant
from tally.invocation import process
from tally.query import count_windows

NOW = parse_instant("2026-11-22T15:07:31Z")


class RecordingClient:
    """Passes every call through; keeps the request of each UpdateItem."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.updates: list[dict[str, Any]] = []

    def update_item(self, **kwargs: Any) -> Any:
        self.updates.append(kwargs)
        return self._client.update_item(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def bucket_writes(self) -> list[str]:
        return [update["Key"]["sk"]["S"] for update in self.updates]


def expire(client: Any, now_ms: int) -> int:
    """Delete every item whose TTL has passed at ``now_ms``, as DynamoDB eventually does."""
    deleted = 0
    for page in client.get_paginator("scan").paginate(TableName=COUNTS):
        for item in page["Items"]:
            if int(item["ttl"]["N"]) * 1000 <= now_ms:
                client.delete_item(TableName=COUNTS, Key={"pk": item["pk"], "sk": item["sk"]})
                deleted += 1
    return deleted


def arrive_now(counter: str, event_ms: int, arrival_ms: int = NOW) -> dict[str, Any]:
    return counter_record(counter, event_ms, arrival_s=arrival_ms // 1000)


def totals(counts_table, length_ms: int, at_ms: int | None, now: int) -> dict[PlanKind, int]:
    return {
        plan: count_windows(counts_table, ["c"], length_ms=length_ms, at_ms=at_ms, plan=plan, now=now)[0].total
        for plan in PlanKind
    }


def last_whole_hour_end(ms: int) -> int:
    return ms - ms % HOUR_MS - 1


def test_an_event_23_and_a_half_hours_late_is_in_the_24h_window_ending_now(counts_table, settings):
    records = [
        arrive_now("c", NOW - 23 * HOUR_MS - 30 * MINUTE_MS),
        arrive_now("c", NOW - 24 * HOUR_MS - 2 * MINUTE_MS),  # before the window
        arrive_now("c", NOW - 5_000),
    ]
    summary = process(one_invocation_window(records), counts_table.commit, settings)[1]
    assert (summary.counted, summary.rejected_total) == (3, 0)
    assert totals(counts_table, DAY_MS, None, NOW + 1_000) == {PlanKind.BATCH: 2, PlanKind.RANGE: 2}


def test_an_event_3_days_late_is_in_its_hour_and_a_7_day_window_for_one_bucket_write(
    counts_table, dynamodb, settings
):
    recording = RecordingClient(dynamodb)
    counts_table.client = recording
    event = NOW - 3 * DAY_MS
    summary = process(one_invocation_window([arrive_now("c", event)]), counts_table.commit, settings)[1]

    hour = Bucket.of_hour(event // HOUR_MS).sort_key
    assert (summary.counted, summary.bucket_updates) == (1, 1)
    assert recording.bucket_writes() == [hour]
    assert read_counts(dynamodb, "c") == {hour: 1}
    seven_days_to_the_hour = last_whole_hour_end(NOW)
    assert totals(counts_table, 7 * DAY_MS, seven_days_to_the_hour, NOW) == {PlanKind.BATCH: 1, PlanKind.RANGE: 1}
    assert totals(counts_table, HOUR_MS, last_whole_hour_end(event + HOUR_MS), NOW)[PlanKind.RANGE] == 1
    for plan in PlanKind:  # a minute-precision start three days back has no minutes to read
        with pytest.raises(WindowUnavailable, match="past the minute retention"):
            count_windows(counts_table, ["c"], length_ms=7 * DAY_MS, plan=plan, now=NOW)


def test_an_event_past_the_hour_retention_is_rejected_as_late_with_a_reason(counts_table, dynamodb, settings):
    summary = process(one_invocation_window([arrive_now("c", NOW - 91 * DAY_MS)]), counts_table.commit, settings)[1]
    assert summary.counted == 0
    assert summary.rejected == {Reason.LATE_EVENT: 1}
    [rejection] = summary.rejections
    assert "past the hour retention" in rejection.detail
    assert read_counts(dynamodb, "c") == {}
    arrival = Bucket.of_minute(NOW // MINUTE_MS).sort_key
    assert read_counts(dynamodb, "#rejected#late_event")[arrival] == 1


def test_a_retry_committing_after_the_minutes_ttl_leaves_every_readable_window_exact(
    counts_table, dynamodb, settings
):
    """Three events of one minute two days back: counted on time; retried after the minute's TTL; hour alone."""
    minute_start = NOW - NOW % HOUR_MS - 2 * DAY_MS + 10 * MINUTE_MS
    minute = Bucket.of_minute(minute_start // MINUTE_MS)
    ttl_ms = minute.ttl_seconds(settings) * 1000
    on_time = one_invocation_window([arrive_now("c", minute_start + 1_000, minute_start + 2_000)])
    retried = one_invocation_window([arrive_now("c", minute_start + 5_000, ttl_ms - 1_000)])  # minute alive at arrival
    # From another shard: this one's later records wait until its failed batch succeeds.
    at_ttl = window_event([arrive_now("c", minute_start + 9_000, ttl_ms)], final=True, shard_id="shardId-2")  # hour alone
    event_times = [minute_start + 1_000, minute_start + 5_000, minute_start + 9_000]

    process(on_time, counts_table.commit, settings)

    def crash_before_commit(segment, writer):
        raise TimeoutError("the invocation timed out before its commit")

    with pytest.raises(TimeoutError):
        process(retried, crash_before_commit, settings)
    process(at_ttl, counts_table.commit, settings)
    expire(dynamodb, ttl_ms + 5 * MINUTE_MS)  # the minute goes, with the on-time event (and its watermark) in it
    assert minute.sort_key not in read_counts(dynamodb, "c")
    summary = process(retried, counts_table.commit, settings)[1]  # Lambda's retry, after the TTL
    assert summary.bucket_updates == 2  # the hour, and the minute an expired item again

    hour = Bucket.of_hour(minute_start // HOUR_MS)
    assert read_counts(dynamodb, "c") == {hour.sort_key: 3, minute.sort_key: 1}  # re-created, under its old TTL
    ttl_item = dynamodb.get_item(TableName=COUNTS, Key={"pk": {"S": "c"}, "sk": {"S": minute.sort_key}})
    assert int(ttl_item["Item"]["ttl"]["N"]) * 1000 == ttl_ms

    now = ttl_ms + 5 * MINUTE_MS  # minutes :16 and later of that hour are still readable
    answered = refused = 0
    for end in range(hour.start_ms - HOUR_MS, hour.end_ms + HOUR_MS, 7 * MINUTE_MS):
        for length in (1, 30, 55, 60, 61, 90, 24 * 60, 7 * 24 * 60):
            window = Window.ending(end, length * MINUTE_MS)
            truth = sum(window.covers(at) for at in event_times)
            for plan in PlanKind:
                try:
                    [result] = count_windows(counts_table, ["c"], length_ms=length * MINUTE_MS, at_ms=end, plan=plan, now=now)
                except WindowUnavailable:
                    refused += 1
                    continue
                assert result.total == truth, (str(window), plan)
                answered += 1
    assert answered > 80 and refused > 10
    # The hour's first 46 minutes, its minutes :00-:15 expired: the fast path reads the hour minus minutes :46-:59;
    # the isolated default reads only covered minutes, and refuses, naming the whole-hour end that works.
    head = dict(length_ms=46 * MINUTE_MS, at_ms=hour.start_ms + 46 * MINUTE_MS, now=now)
    assert count_windows(counts_table, ["c"], allow_transient=True, **head)[0].total == 3
    with pytest.raises(WindowUnavailable, match="minute retention"):
        count_windows(counts_table, ["c"], **head)
