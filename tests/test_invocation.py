"""invocation.process against moto: windows, replays, crashes mid-segment and after commits, rejections."""

import pytest

from moto_tables import read_counts
from factories import counter_record, image, one_invocation_window, stream_record, window_event
from tally.invocation import WindowRequired, process
from tally.core.records import Reason
from tally.core.units import DAY_MS, HOUR_MS, MINUTE_MS

T0 = 1_795_000_000_000 - 1_795_000_000_000 % HOUR_MS
HOUR_KEY = "H#2026-11-18T11"


def records_for(counter, minutes):
    return [counter_record(counter, T0 + m * MINUTE_MS + 1_000) for m in minutes]


def expected(counter_minutes):
    counts = {}
    for minute in counter_minutes:
        key = f"M#2026-11-18T11:{minute:02d}"
        counts[key] = counts.get(key, 0) + 1
    counts[HOUR_KEY] = len(counter_minutes)
    return counts


def test_a_one_invocation_window_commits_its_records(counts_table, dynamodb, settings):
    response, summary = process(one_invocation_window(records_for("c", [0, 0, 5])), counts_table.commit, settings)
    assert response == {"state": {}}
    assert (summary.records, summary.counted, summary.bucket_updates) == (3, 3, 3)
    assert read_counts(dynamodb, "c") == expected([0, 0, 5])


def test_an_event_without_a_window_is_refused_before_anything_is_written(counts_table, dynamodb, settings):
    """Only a windowed event names its shard, and every write is keyed on it (README, Guarantees)."""
    event = {"Records": records_for("c", [0])}
    with pytest.raises(WindowRequired, match="TumblingWindowInSeconds between 1 and 900"):
        process(event, counts_table.commit, settings)
    with pytest.raises(WindowRequired):
        process({**window_event(records_for("c", [0]), final=True), "shardId": None}, counts_table.commit, settings)
    assert read_counts(dynamodb, "c") == {}


def test_a_replayed_invocation_counts_nothing_twice(counts_table, dynamodb, settings):
    event = one_invocation_window(records_for("c", range(60)) + records_for("d", range(60)))  # 122 buckets
    first = process(event, counts_table.commit, settings)[1]
    replay = process(event, counts_table.commit, settings)[1]
    assert first.bucket_updates == 122
    assert (replay.bucket_updates, replay.updates_already_applied) == (0, 122)
    assert read_counts(dynamodb, "c") == expected(list(range(60)))
    assert read_counts(dynamodb, "d") == expected(list(range(60)))


def test_a_segment_half_applied_when_the_invocation_died_is_completed_by_the_retry(counts_table, dynamodb, settings):
    event = one_invocation_window(records_for("c", range(60)) + records_for("d", range(60)))
    client, sent = counts_table.client, []

    class DiesMidSegment:
        def __getattr__(self, name):
            return getattr(client, name)

        def update_item(self, **request):
            if len(sent) == 50:
                raise TimeoutError("the invocation timed out with 50 of 122 updates applied")
            sent.append(request)
            return client.update_item(**request)

    counts_table.client, counts_table.workers = DiesMidSegment(), 1
    with pytest.raises(TimeoutError):
        process(event, counts_table.commit, settings)
    counts_table.client = client
    summary = process(event, counts_table.commit, settings)[1]  # Lambda retries the same batch
    assert (summary.updates_already_applied, summary.bucket_updates) == (50, 72)
    assert read_counts(dynamodb, "c") == expected(list(range(60)))
    assert read_counts(dynamodb, "d") == expected(list(range(60)))


def test_a_crash_between_two_segments_is_retried_without_double_counting(counts_table, dynamodb, settings, monkeypatch):
    monkeypatch.setattr("tally.core.segments.MAX_SEGMENT_ITEMS", 61)  # c's 61 buckets, then d's
    event = one_invocation_window(records_for("c", range(60)) + records_for("d", range(60)))
    commits = []

    def commit_then_crash(segment, writer):
        commits.append(counts_table.commit(segment, writer))
        if len(commits) == 1:
            raise TimeoutError("invocation timed out after its first commit")
        return commits[-1]

    with pytest.raises(TimeoutError):
        process(event, commit_then_crash, settings)
    summary = process(event, commit_then_crash, settings)[1]  # Lambda retries the same batch
    assert (summary.updates_already_applied, summary.bucket_updates) == (61, 61)
    assert read_counts(dynamodb, "c") == expected(list(range(60)))
    assert read_counts(dynamodb, "d") == expected(list(range(60)))


def test_a_window_carries_its_segment_in_state_until_the_final_invocation(counts_table, dynamodb, settings):
    first_batch, second_batch = records_for("c", [1, 2]), records_for("c", [2, 3])
    response, summary = process(window_event(first_batch), counts_table.commit, settings)
    assert summary.bucket_updates == 0
    assert read_counts(dynamodb, "c") == {}
    state = response["state"]
    assert state["segment"]["records"] == 2

    response, summary = process(window_event(second_batch, state=state, final=True), counts_table.commit, settings)
    assert response == {"state": {}}
    assert summary.bucket_updates == 4  # three minutes and the hour
    assert read_counts(dynamodb, "c") == expected([1, 2, 2, 3])


def test_a_replayed_final_window_invocation_counts_once(counts_table, dynamodb, settings):
    state = process(window_event(records_for("c", [1])), counts_table.commit, settings)[0]["state"]
    final = window_event(records_for("c", [4]), state=state, final=True)
    process(final, counts_table.commit, settings)
    summary = process(final, counts_table.commit, settings)[1]
    assert (summary.updates_already_applied, summary.bucket_updates) == (3, 0)
    assert read_counts(dynamodb, "c") == expected([1, 4])


def test_a_window_writes_each_bucket_once_however_many_invocations_feed_it(counts_table, dynamodb, settings):
    state = {}
    for _ in range(5):  # five batches of the same 100 counters in one window
        batch = [counter_record(f"c{i:02d}", T0 + 2 * MINUTE_MS) for i in range(100)]
        response, summary = process(window_event(batch, state=state), counts_table.commit, settings)
        assert summary.bucket_updates == 0
        state = response["state"]
    response, summary = process(window_event([], state=state, final=True), counts_table.commit, settings)
    assert summary.bucket_updates == 200  # one update per bucket item
    assert read_counts(dynamodb, "c42") == {"M#2026-11-18T11:02": 5, HOUR_KEY: 5}


def test_an_empty_final_invocation_with_no_state_commits_nothing(counts_table, settings):
    response, summary = process(window_event([], final=True), counts_table.commit, settings)
    assert response == {"state": {}}
    assert summary.bucket_updates == 0


def test_modify_remove_and_bad_records_are_counted_and_never_fail_the_batch(counts_table, dynamodb, settings):
    arrival_s = (T0 + 30 * MINUTE_MS) / 1000
    records = [
        counter_record("c", T0 + MINUTE_MS, arrival_s=arrival_s),
        stream_record(image(id="1", counter="c", ts=T0), event_name="MODIFY", arrival_s=arrival_s),
        stream_record(None, event_name="REMOVE", arrival_s=arrival_s),
        stream_record(image(id="2", ts=T0), arrival_s=arrival_s),
        stream_record(image(id="3", counter="#segment#x", ts=T0), arrival_s=arrival_s),
        stream_record(image(id="4", counter="c", ts="later"), arrival_s=arrival_s),
        stream_record(image(id="5", counter="c", ts=T0 + 40 * MINUTE_MS), arrival_s=arrival_s),
        stream_record(image(id="6", counter="c", ts=T0 - 91 * DAY_MS), arrival_s=arrival_s),
        {"eventName": "INSERT"},
    ]
    response, summary = process(one_invocation_window(records), counts_table.commit, settings)
    assert (summary.records, summary.counted, summary.skipped, summary.rejected_total) == (9, 1, 2, 6)
    assert summary.rejected == {
        Reason.MISSING_COUNTER: 1,
        Reason.INVALID_COUNTER: 1,
        Reason.INVALID_TIME: 1,
        Reason.FUTURE_TIME: 1,
        Reason.LATE_EVENT: 1,
        Reason.MALFORMED_RECORD: 1,
    }
    assert read_counts(dynamodb, "c") == {"M#2026-11-18T11:01": 1, HOUR_KEY: 1}
    # Rejections with a readable arrival are counted, by arrival minute, under reserved counters.
    assert read_counts(dynamodb, "#rejected#late_event") == {"M#2026-11-18T11:30": 1, HOUR_KEY: 1}
    assert read_counts(dynamodb, "#rejected#invalid_counter") == {"M#2026-11-18T11:30": 1, HOUR_KEY: 1}
    assert read_counts(dynamodb, "#rejected#not_insert") == {}
