"""Alerts against moto: state items, events through EventBridge to a queue, and the evaluations that drive them."""

import json
import threading
from datetime import UTC, datetime

import boto3
import pytest
from freezegun import freeze_time
from moto import mock_aws

from moto_tables import COUNTS, EVENTS, no_sleep_backoff
from tally.alerting import AlertStates, EventBus, Watcher, state_partition
from tally.core.alerts import ALARM, DELIVERY_LEASE_MS, OK, SETTLE_MS, AlertState, crossing_of
from tally.core.buckets import Bucket
from tally.core.commit import Writer
from tally.core.rules import parse_rules
from tally.core.segments import Segment
from tally.core.settings import Settings
from tally.core.units import HOUR_MS, MINUTE_MS
from tally.core.windows import now_ms
from tally.dynamo.counts_table import CountsTable
from tally.dynamo.directory import CounterDirectory
from tally.dynamo.tables import create_tables
from tally.local.alert_sink import AlertSink
from tally.query import count_windows

# The minute now, minus an hour: windows in the past the clock of the test run has reached.
START = now_ms() // MINUTE_MS * MINUTE_MS - HOUR_MS
RULES = [
    {
        "name": "logins",
        "counter": "logins/{ip}",
        "alerts": [
            {"name": "burst", "window": "10m", "above": 5, "clear": 2},
            {"name": "silence", "window": "5m", "below": 1},
        ],
    },
    {"name": "views", "counter": "views/{page}"},
]
SHARD = Writer.of_shard("arn:aws:dynamodb:us-east-1:1:table/e/stream/x", "shardId-1")
OTHER_SHARD = Writer.of_shard("arn:aws:dynamodb:us-east-1:1:table/e/stream/x", "shardId-2")


class Clock:
    def __init__(self, at):
        self.at = at

    def __call__(self):
        return self.at


class Counting:
    """A boto3 client that counts its calls by operation."""

    def __init__(self, client):
        self.client = client
        self.calls = {}

    def __getattr__(self, name):
        real = getattr(self.client, name)
        if not callable(real) or name.startswith("_") or name in ("exceptions", "meta"):
            return real

        def call(**kwargs):
            self.calls[name] = self.calls.get(name, 0) + 1
            return real(**kwargs)

        return call


@pytest.fixture
def aws():
    with mock_aws():
        dynamodb = boto3.client("dynamodb", region_name="us-east-1")
        create_tables(dynamodb, EVENTS, COUNTS)
        events = boto3.client("events", region_name="us-east-1")
        sink = AlertSink(events, boto3.client("sqs", region_name="us-east-1"))
        yield Counting(dynamodb), events, sink


def watcher(aws, clock, **kwargs):
    dynamodb, events, _sink = aws
    settings = Settings(counts_table=COUNTS, events_table=EVENTS, rules=parse_rules(json.dumps(RULES)))
    table = CountsTable(dynamodb, COUNTS, settings, backoff=no_sleep_backoff)
    return table, Watcher(table, EventBus(events, backoff=no_sleep_backoff), clock=clock, sleep=lambda _s: None, **kwargs)


def segment(first, counts):
    """A segment adding ``counts`` {(counter, minute offset from START): n} to minutes and their hours."""
    deltas = {}
    for (counter, minute), n in counts.items():
        at = START + minute * MINUTE_MS
        for bucket in (Bucket.of_minute(at // MINUTE_MS), Bucket.of_hour(at // HOUR_MS)):
            deltas[(counter, bucket)] = deltas.get((counter, bucket), 0) + n
    return Segment(str(first), START, str(first), sum(counts.values()), deltas)


def test_a_commit_past_the_threshold_puts_one_alarm_and_later_commits_none(aws):
    clock = Clock(START + 3 * MINUTE_MS)
    table, watch = watcher(aws, clock)
    commit = CounterDirectory(table.client, COUNTS, table.settings).recording(watch.watching(table.commit))
    commit(segment(100, {("logins/1.2.3.4", 0): 4, ("logins/5.6.7.8", 0): 1}), SHARD)
    assert aws[2].drain() == []
    commit(segment(200, {("logins/1.2.3.4", 2): 2}), SHARD)
    commit(segment(200, {("logins/1.2.3.4", 2): 2}), SHARD)  # a retry: already applied, judged again
    commit(segment(300, {("logins/1.2.3.4", 2): 3}), OTHER_SHARD)
    [event] = aws[2].drain()
    assert event == {
        "id": event["id"],
        "alert": "burst",
        "rule": "logins",
        "counter": "logins/1.2.3.4",
        "state": ALARM,
        "window": "10m",
        "start": _iso(START - 7 * MINUTE_MS),
        "end": _iso(START + 3 * MINUTE_MS),
        "total": 6,
        "threshold": 5,
    }
    states = AlertStates(table.client, COUNTS).listing("burst")
    assert list(states) == ["logins/1.2.3.4"] and states["logins/1.2.3.4"].state == ALARM
    assert not states["logins/1.2.3.4"].pending


def test_counters_without_alerts_cost_no_reads(aws):
    table, watch = watcher(aws, Clock(START + MINUTE_MS))
    before = dict(aws[0].calls)
    summary = watch.after_commit(segment(1, {("views/home", 0): 50}), SHARD)
    assert aws[0].calls == before
    assert (summary.reads, summary.writes, summary.evaluated) == (0, 0, 0)


def test_the_schedule_clears_an_alarm_once_the_window_ending_now_falls_back(aws):
    clock = Clock(START + MINUTE_MS)
    table, watch = watcher(aws, clock)
    commit = watch.watching(table.commit)
    commit(segment(1, {("logins/a", 0): 6}), SHARD)
    clock.at = START + 9 * MINUTE_MS  # the burst still in the 10 minutes ending now: kept
    watch.scheduled("schedule:9")
    assert [e["state"] for e in aws[2].drain()] == [ALARM]
    commit(segment(2, {("logins/a", 9): 2}), SHARD)
    clock.at = START + 10 * MINUTE_MS + 1  # the burst's minute left the window: 2 left, at clear
    watch.scheduled("schedule:10")
    [cleared] = aws[2].drain()
    assert (cleared["state"], cleared["total"], cleared["threshold"]) == (OK, 2, 2)
    assert (cleared["start"], cleared["end"]) == (_iso(START + MINUTE_MS), _iso(START + 11 * MINUTE_MS))
    commit(segment(3, {("logins/a", 10): 4}), SHARD)  # 6 again: a new crossing, a new id
    [again] = aws[2].drain()
    assert again["state"] == ALARM and again["id"] not in (cleared["id"],)


def test_below_alerts_fire_for_listed_counters_that_fell_silent_and_clear_when_they_count(aws):
    clock = Clock(START + MINUTE_MS)
    table, watch = watcher(aws, clock)
    commit = CounterDirectory(table.client, COUNTS, table.settings).recording(watch.watching(table.commit))
    commit(segment(1, {("logins/a", 0): 1, ("views/home", 0): 3}), SHARD)
    clock.at = START + 3 * MINUTE_MS + SETTLE_MS  # window [START-2m, START+3m) holds the event
    watch.scheduled("s1")
    assert aws[2].drain() == []
    clock.at = START + 6 * MINUTE_MS + SETTLE_MS  # [START+1m, START+6m): silent
    watch.scheduled("s2")
    [silent] = aws[2].drain()
    assert (silent["alert"], silent["counter"], silent["state"], silent["total"]) == ("silence", "logins/a", ALARM, 0)
    assert silent["end"] == _iso(START + 6 * MINUTE_MS)
    commit(segment(2, {("logins/a", 6): 1}), SHARD)
    clock.at = START + 7 * MINUTE_MS + SETTLE_MS
    watch.scheduled("s3")
    [back] = aws[2].drain()
    assert (back["state"], back["total"]) == (OK, 1)


def test_a_lost_answer_to_the_state_change_still_puts_exactly_one_event(aws):
    dynamodb = aws[0]
    table, watch = watcher(aws, Clock(START + MINUTE_MS))
    real = dynamodb.client.update_item
    lost = []

    def update_then_lose(**kwargs):
        answer = real(**kwargs)
        if kwargs["Key"]["pk"]["S"].startswith("#alerts#") and not lost:
            lost.append(kwargs)
            return real(**kwargs)  # the SDK's retry of a lost answer: the same request again
        return answer

    dynamodb.client.update_item = update_then_lose
    try:
        table.commit(segment(1, {("logins/a", 0): 6}), SHARD)
        summary = watch.after_commit(segment(1, {("logins/a", 0): 6}), SHARD)
    finally:
        dynamodb.client.update_item = real
    assert lost and summary.crossings == 1
    assert [e["state"] for e in aws[2].drain()] == [ALARM]


class FailingBus(EventBus):
    def put(self, crossings):
        return list(crossings)


def test_a_crossing_whose_put_failed_is_put_by_its_retry_at_once_or_by_anyone_after_the_lease(aws):
    dynamodb, events, sink = aws
    clock = Clock(START + MINUTE_MS)
    table, watch = watcher(aws, clock)
    failing = Watcher(table, FailingBus(events), clock=clock, sleep=lambda _s: None)
    table.commit(segment(1, {("logins/a", 0): 6}), SHARD)
    assert failing.after_commit(segment(1, {("logins/a", 0): 6}), SHARD).delivery_failures == 1
    assert sink.drain() == []
    assert AlertStates(dynamodb, COUNTS).listing("burst")["logins/a"].pending
    watch.after_commit(segment(9, {("logins/a", 0): 0}), OTHER_SHARD)  # another shard, within the lease: not its own
    watch.scheduled("s1")
    assert sink.drain() == []
    watch.after_commit(segment(1, {("logins/a", 0): 6}), SHARD)  # the retry: its own crossing, put now
    [first] = sink.drain()

    failing.after_commit(segment(1, {("logins/a", 0): 6}), SHARD)  # a crashed deliverer after the lease:
    table.commit(segment(2, {("logins/b", 0): 6}), SHARD)
    failing.after_commit(segment(2, {("logins/b", 0): 6}), SHARD)
    clock.at += DELIVERY_LEASE_MS
    watch.scheduled("s2")
    [late] = sink.drain()
    assert (first["counter"], late["counter"]) == ("logins/a", "logins/b")
    watch.scheduled("s3")
    assert sink.drain() == []


def test_racing_shards_make_one_crossing(aws):
    clock = Clock(START + MINUTE_MS)
    table, _ = watcher(aws, clock)
    table.commit(segment(1, {("logins/a", 0): 3}), SHARD)
    table.commit(segment(2, {("logins/a", 0): 3}), OTHER_SHARD)
    watchers = [watcher(aws, clock)[1] for _ in range(6)]
    barrier = threading.Barrier(len(watchers))

    def judge(index, watch):
        barrier.wait()
        watch.after_commit(segment(index, {("logins/a", 0): 3}), Writer.of_shard("s", f"shard-{index}"))

    threads = [threading.Thread(target=judge, args=(i, w)) for i, w in enumerate(watchers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [e["state"] for e in aws[2].drain()] == [ALARM]
    assert sum(w.summary.crossings for w in watchers) == 1


def test_state_items_sit_under_a_reserved_partition(aws):
    table, watch = watcher(aws, Clock(START + MINUTE_MS))
    table.commit(segment(1, {("logins/a", 0): 6}), SHARD)
    watch.after_commit(segment(1, {("logins/a", 0): 6}), SHARD)
    item = aws[0].get_item(TableName=COUNTS, Key={"pk": {"S": state_partition("burst")}, "sk": {"S": "logins/a"}})
    assert item["Item"]["state"] == {"S": ALARM} and item["Item"]["transitions"] == {"N": "1"}


def _iso(ms):
    from tally.core.buckets import iso_minute

    return iso_minute(ms)


# The three ways a crossing went unjudged: each event must carry the window that crossed, with the total the
# read API itself answers for it.
STRAGGLER_RULES = [
    {"name": "orders", "counter": "orders/{shop}", "alerts": [{"name": "orders-rush", "window": "1m", "above": 6}]},
    {"name": "failures", "counter": "failures/{svc}", "alerts": [{"name": "failing", "window": "5m", "above": 12}]},
]
# A fixed instant: minute boundaries in the past of the frozen clock.
FROZEN = datetime(2026, 11, 20, 12, 0, 30, tzinfo=UTC)
FROZEN_MINUTE = int(FROZEN.timestamp() * 1000) // MINUTE_MS


def frozen_watcher(aws):
    dynamodb, events, _sink = aws
    settings = Settings(counts_table=COUNTS, events_table=EVENTS, rules=parse_rules(json.dumps(STRAGGLER_RULES)))
    table = CountsTable(dynamodb, COUNTS, settings, backoff=no_sleep_backoff)
    return table, Watcher(table, EventBus(events, backoff=no_sleep_backoff), sleep=lambda _s: None)


def minutes_segment(first, counts):
    """A segment adding ``counts`` {(counter, minute since the epoch): n} to minutes and their hours."""
    deltas = {}
    for (counter, minute), n in counts.items():
        for bucket in (Bucket.of_minute(minute), Bucket.of_hour(minute * MINUTE_MS // HOUR_MS)):
            deltas[(counter, bucket)] = deltas.get((counter, bucket), 0) + n
    return Segment(str(first), minute * MINUTE_MS, str(first), sum(counts.values()), deltas)


def read_api_total(table, counter, event):
    """What the read API (query_window.py's engine) answers for the event's window, at the frozen clock."""
    start, end = (datetime.fromisoformat(event[edge].replace("Z", "+00:00")) for edge in ("start", "end"))
    [result] = count_windows(table, [counter], length_ms=int((end - start).total_seconds() * 1000),
                             at_ms=int(end.timestamp() * 1000), consistent=True)
    return result.total


def test_a_straggler_that_completes_the_window_before_raises_it(aws):
    """Alert 1m above 6: 6 orders in m-2, then one late order of m-2 with one of m-1: [m-2, m-1) holds 7."""
    m = FROZEN_MINUTE
    with freeze_time(FROZEN):
        table, watch = frozen_watcher(aws)
        commit = watch.watching(table.commit)
        commit(minutes_segment(1, {("orders/s", m - 2): 6}), SHARD)
        assert aws[2].drain() == []
        commit(minutes_segment(2, {("orders/s", m - 2): 1, ("orders/s", m - 1): 1}), SHARD)
        alarm, cleared = aws[2].drain()
        assert (alarm["state"], alarm["start"], alarm["end"], alarm["total"]) == (
            ALARM, _iso((m - 2) * MINUTE_MS), _iso((m - 1) * MINUTE_MS), 7
        )
        assert alarm["total"] == read_api_total(table, "orders/s", alarm)
        # [m-1, m) holds 1: the episode cleared, in order, in the same commit.
        assert (cleared["state"], cleared["end"], cleared["total"]) == (OK, _iso(m * MINUTE_MS), 1)
        commit(minutes_segment(2, {("orders/s", m - 2): 1, ("orders/s", m - 1): 1}), SHARD)  # a retry: nothing new
        assert aws[2].drain() == []


def test_late_events_that_complete_an_older_window_raise_it(aws):
    """Alert 5m above 12: 11 failures in minute a, then 2 late ones of a-2: [a-4, a+1) holds 13."""
    a = FROZEN_MINUTE - 1
    with freeze_time(FROZEN):
        table, watch = frozen_watcher(aws)
        commit = watch.watching(table.commit)
        commit(minutes_segment(1, {("failures/api", a): 11}), SHARD)
        commit(minutes_segment(2, {("failures/api", a - 2): 2}), OTHER_SHARD)
        [alarm] = aws[2].drain()
        assert (alarm["state"], alarm["start"], alarm["end"], alarm["total"]) == (
            ALARM, _iso((a - 4) * MINUTE_MS), _iso((a + 1) * MINUTE_MS), 13
        )
        assert alarm["total"] == read_api_total(table, "failures/api", alarm)


def test_one_commit_with_a_burst_and_a_later_event_raises_the_burst_and_clears_it(aws):
    """Alert 5m above 12: one commit writes 13 failures in minute a and one in a+6 (a backlog caught up)."""
    a = FROZEN_MINUTE - 10
    with freeze_time(FROZEN):
        table, watch = frozen_watcher(aws)
        watch.watching(table.commit)(minutes_segment(1, {("failures/api", a): 13, ("failures/api", a + 6): 1}), SHARD)
        alarm, cleared = aws[2].drain()
        assert (alarm["state"], alarm["start"], alarm["end"], alarm["total"]) == (
            ALARM, _iso((a - 4) * MINUTE_MS), _iso((a + 1) * MINUTE_MS), 13
        )
        assert alarm["total"] == read_api_total(table, "failures/api", alarm)
        # The burst's minute leaves the window ending a+6: 0, at clear.
        assert (cleared["state"], cleared["start"], cleared["end"], cleared["total"]) == (
            OK, _iso((a + 1) * MINUTE_MS), _iso((a + 6) * MINUTE_MS), 0
        )
        assert watch.summary.reads == 2  # the states, and one Query of the counter's minutes


def test_a_backlog_still_replaying_raises_its_next_episode_after_the_schedule_cleared_the_last(aws):
    """Commits of old minutes, one a tumbling window, while the schedule runs: its clear over the window
    ending now leaves the backlog's later burst to raise, in the first window the burst itself pushed over
    (those over the threshold without it belong to the episode the schedule cleared)."""
    a = FROZEN_MINUTE - 40
    with freeze_time(FROZEN):
        table, watch = frozen_watcher(aws)
        commit = watch.watching(table.commit)
        commit(minutes_segment(1, {("failures/api", a): 13}), SHARD)
        watch.scheduled("schedule:1")  # the window ending now holds nothing: cleared
        commit(minutes_segment(2, {("failures/api", a + 1): 1}), SHARD)
        commit(minutes_segment(3, {("failures/api", a + 2): 1}), SHARD)
        commit(minutes_segment(4, {("failures/api", a + 3): 20}), SHARD)
        events = aws[2].drain()
    assert [(e["state"], e["end"], e["total"]) for e in events] == [
        (ALARM, _iso((a + 1) * MINUTE_MS), 13),
        (OK, _iso((FROZEN_MINUTE + 1) * MINUTE_MS), 0),
        (ALARM, _iso((a + 6) * MINUTE_MS), 22),  # [a+1, a+6): 1 + 1 + 20; [a-1, a+4) held 15 before it
    ]


def test_a_stale_evaluator_cannot_make_a_crossing_again_once_the_state_moved_on(aws):
    """A crossing is made only from the transition count its maker read: one whose item has moved on since
    (a retry, a racing shard) is refused even with no event pending, so no change is announced twice."""
    states = AlertStates(aws[0], COUNTS, backoff=no_sleep_backoff)
    [burst] = [alert for rule in parse_rules(json.dumps(RULES)).rules for alert in rule.alerts if alert.name == "burst"]
    now = START + MINUTE_MS

    def make_and_deliver(crossing, read):
        assert states.change(crossing, read, "fresh", now) is None
        states.delivered(crossing)

    make_and_deliver(crossing_of(burst, "logins/a", AlertState(), 6, START, now), AlertState())
    stale = states.listing("burst")["logins/a"]
    back_to_ok = crossing_of(burst, "logins/a", stale, 0, START, now)
    make_and_deliver(back_to_ok, stale)
    moved_on = states.listing("burst")["logins/a"]
    assert (moved_on.state, moved_on.transitions, moved_on.pending) == (OK, 2, False)

    found = states.change(back_to_ok, stale, "stale", now)  # the same crossing, from the state read before

    assert found is not None and (found.transitions, found.by) == (2, "fresh")
    assert states.listing("burst")["logins/a"] == moved_on
