"""Alerts under faults: retries, redeliveries, racing shards, lost answers and crashes around the put.

Several shards count events of a few counters, all in one minute, so every
evaluation of a counter judges the same window and brute force says for each
whether it crossed. Lambda's deliveries come from ``LambdaShard`` (retries,
re-cut batches, redelivered windows and invocations); the DynamoDB client
throttles, conflicts, refuses conditions and loses answers; the event bus
crashes the invocation before a put or after it. Whatever happens:

- every crossing a state item records was delivered, under its own id
  (never a crossing without an event);
- no crossing was delivered twice, except by an invocation that crashed after
  its put (then the repeat carries the same id);
- a counter is in ALARM exactly when brute force over its window passes the
  threshold, and the scheduled evaluation after the window clears each alarm
  once, under the same faults.

Then episodes over several minutes (a 3-minute window): several shards writing
one counter, records a tumbling window late, and one shard's backlog replayed
long after, whose events must be exactly the brute-force episodes, in order.
"""

from __future__ import annotations

import json
import random
from collections import Counter

import boto3
import pytest
from moto import mock_aws

from factories import image, stream_record
from moto_tables import COUNTS, EVENTS
from tally.alerting import AlertStates, EventBus, Watcher
from tally.core.alerts import ABOVE, ALARM, OK, Alert
from tally.core.buckets import iso_minute
from tally.core.rules import parse_rules
from tally.core.settings import Settings
from tally.core.units import MINUTE_MS
from tally.core.windows import now_ms
from tally.dynamo.counts_table import CountsTable
from tally.dynamo.tables import create_tables
from tally.local.delivery import DeliveryConfig
from tally.invocation import process

from .harness import (
    FaultKind,
    FaultSchedule,
    FaultyClient,
    InjectedCrash,
    LambdaShard,
    interleave,
    quick_backoff,
)

THRESHOLD, CLEAR = 5, 2
RULES = json.dumps(
    [{"name": "hits", "counter": "hits/{k}", "alerts": [{"name": "hot", "window": "10m", "above": THRESHOLD, "clear": CLEAR}]}]
)
STREAM_ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/tally-events/stream/alerts"
CLIENT_FAULTS = {
    FaultKind.CONFLICT: 0.05,
    FaultKind.THROTTLED: 0.05,
    FaultKind.PROVISIONED: 0.03,
    FaultKind.RESPONSE_LOST: 0.08,
    FaultKind.TIMEOUT_MID_SEGMENT: 0.02,
    FaultKind.UNPROCESSED_KEYS: 0.1,
    FaultKind.READ_THROTTLED: 0.05,
    FaultKind.QUERY_PAGED: 0.2,
}
DELIVERY_FAULTS = {
    FaultKind.CRASH_BEFORE_COMMIT: 0.05,
    FaultKind.CRASH_BETWEEN_COMMITS: 0.05,
    FaultKind.TIMEOUT_AFTER_COMMIT: 0.1,
    FaultKind.TIMEOUT_AFTER_RETURN: 0.05,
    FaultKind.RETRY_RECUT: 0.3,
    FaultKind.WINDOW_REDELIVERED: 0.1,
    FaultKind.INVOCATION_REDELIVERED: 0.1,
}
# Crashes around the event's put, by the bus: these two kinds stand for them in the schedule.
BEFORE_PUT, AFTER_PUT = FaultKind.CRASH_BEFORE_COMMIT, FaultKind.TIMEOUT_AFTER_RETURN


class RecordingBus(EventBus):
    """Keeps the events it is given, crashing the invocation before or after a put as the schedule says."""

    def __init__(self, schedule: FaultSchedule, delivered: list[dict], crashes: Counter) -> None:
        super().__init__(client=None)
        self.schedule, self.delivered, self.crashes = schedule, delivered, crashes

    def put(self, crossings):
        if self.schedule.fires(BEFORE_PUT):
            self.crashes["before"] += 1
            raise InjectedCrash("crashed before the put")
        self.delivered.extend(crossing.detail() for crossing in crossings)
        if self.schedule.fires(AFTER_PUT):
            self.crashes["after"] += len(crossings)
            raise InjectedCrash("crashed after the put")
        return []


class AlertingHandler:
    """A Lambda handler whose commits are watched (as tally.functions.stream_handler wires them), crashing where told."""

    def __init__(self, table: CountsTable, settings: Settings, schedule: FaultSchedule, bus: EventBus) -> None:
        self.settings, self.schedule = settings, schedule
        self.watcher = Watcher(table, bus, clock=now_ms, sleep=lambda _s: None)
        self.commit = self.watcher.watching(self._commit(table))
        self.last_summary = None

    def _commit(self, table):
        def commit(segment, writer):
            if self.schedule.fires(FaultKind.CRASH_BETWEEN_COMMITS):
                raise InjectedCrash("crashed before a commit")
            result = table.commit(segment, writer)
            if self.schedule.fires(FaultKind.TIMEOUT_AFTER_COMMIT):
                raise InjectedCrash("timed out after a commit")
            return result

        return commit

    def __call__(self, event, context=None):
        response, self.last_summary = process(event, self.commit, self.settings)
        return response


def shard_records(rng: random.Random, minute: int, counts: dict[str, int], shards: int) -> list[list[dict]]:
    """Each key's events (counter hits/<key>), all in ``minute``, dealt at random to the shards."""
    dealt: list[list[dict]] = [[] for _ in range(shards)]
    arrival = (minute + 1) * MINUTE_MS / 1000
    for key, n in counts.items():
        for index in range(n):
            item = image(id=f"{key}-{index}", k=key, ts=minute * MINUTE_MS + rng.randrange(MINUTE_MS))
            dealt[rng.randrange(shards)].append(stream_record(item, arrival_s=arrival))
    for records in dealt:
        rng.shuffle(records)
        for offset, record in enumerate(records):
            record["dynamodb"]["SequenceNumber"] = str(10**20 + offset)
    return dealt


@pytest.mark.parametrize("seed", range(8))
def test_every_crossing_is_delivered_once_under_retries_races_and_lost_answers(seed):
    rng = random.Random(seed)
    now = now_ms()
    minute = now // MINUTE_MS - 1
    counts = {f"{k}": rng.randrange(0, 3 * THRESHOLD) for k in "abcdef"}
    delivered: list[dict] = []
    crashes: Counter = Counter()
    with mock_aws():
        raw = boto3.client("dynamodb", region_name="us-east-1")
        create_tables(raw, EVENTS, COUNTS)
        settings = Settings(counts_table=COUNTS, events_table=EVENTS, rules=parse_rules(RULES))
        schedule = FaultSchedule(seed, {**CLIENT_FAULTS, **DELIVERY_FAULTS}, budget=120)
        client = FaultyClient(raw, schedule)
        table = CountsTable(client, COUNTS, settings, backoff=quick_backoff(seed))
        bus = RecordingBus(schedule, delivered, crashes)
        deliver_alerting(shard_records(rng, minute, counts, 3), table, settings, schedule, bus, rng)

        states = AlertStates(raw, COUNTS).listing("hot")
        for k, n in counts.items():
            counter = f"hits/{k}"
            crossed = n > THRESHOLD
            assert (counter in states and states[counter].state == ALARM) == crossed, (counter, n, schedule)
            if crossed:
                assert states[counter].transitions == 1 and not states[counter].pending
        check_deliveries(delivered, states, crashes, schedule)

        # After the window: the scheduled evaluation clears every alarm, retried with its own id until it succeeds.
        watcher = Watcher(table, bus, clock=lambda: (minute + 11) * MINUTE_MS + 1, sleep=lambda _s: None)
        for _ in range(200):
            try:
                watcher.scheduled("schedule:after")
                break
            except InjectedCrash:
                continue
        else:
            raise AssertionError(f"the scheduled evaluation never succeeded; {schedule!r}")
        states = AlertStates(raw, COUNTS).listing("hot")
        assert {counter: state.state for counter, state in states.items()} == {
            f"hits/{k}": OK for k, n in counts.items() if n > THRESHOLD
        }
        check_deliveries(delivered, states, crashes, schedule)


def check_deliveries(delivered: list[dict], states: dict, crashes: Counter, schedule: FaultSchedule) -> None:
    """One event per crossing the states record (ALARM first, OK second), repeats only after a crash after a put."""
    by_id = Counter(detail["id"] for detail in delivered)
    distinct = {detail["id"]: detail for detail in delivered}
    crossings = Counter(detail["counter"] for detail in distinct.values())
    assert crossings == Counter({counter: state.transitions for counter, state in states.items()}), schedule
    for counter, state in states.items():
        mine = [d["state"] for d in distinct.values() if d["counter"] == counter]
        assert sorted(mine) == sorted([ALARM, OK][: state.transitions]), (counter, mine, schedule)
    repeats = sum(n - 1 for n in by_id.values())
    assert repeats <= crashes["after"], (repeats, crashes, schedule)
    for detail in distinct.values():
        side = detail["total"] > THRESHOLD if detail["state"] == ALARM else detail["total"] <= CLEAR
        assert side, (detail, schedule)


# Episodes over several minutes: a short window, so that bursts rise and fall within the run.
EPISODE_ABOVE, EPISODE_CLEAR, EPISODE_MINUTES = 8, 3, 3
EPISODE_RULES = json.dumps(
    [{"name": "hits", "counter": "hits/{k}",
      "alerts": [{"name": "hot", "window": f"{EPISODE_MINUTES}m", "above": EPISODE_ABOVE, "clear": EPISODE_CLEAR}]}]
)
EPISODE_ALERT = Alert("hot", "hits", f"{EPISODE_MINUTES}m", EPISODE_MINUTES * MINUTE_MS, ABOVE, EPISODE_ABOVE,
                      EPISODE_CLEAR)


def timed_records(rng: random.Random, counts: dict[tuple[str, int], int], shards: int,
                  late: float = 0.0) -> list[list[dict]]:
    """Each (key, minute)'s events dealt at random to the shards, arriving just after their minute (a share
    ``late`` of them a minute later: in the next tumbling window), each shard's records in arrival order."""
    dealt: list[list[tuple[float, dict]]] = [[] for _ in range(shards)]
    for (key, minute), n in counts.items():
        for index in range(n):
            arrival = (minute + 1 + (rng.random() < late)) * MINUTE_MS / 1000 + rng.random()
            item = image(id=f"{key}-{minute}-{index}", k=key, ts=minute * MINUTE_MS + rng.randrange(MINUTE_MS))
            dealt[rng.randrange(shards)].append((arrival, stream_record(item, arrival_s=arrival)))
    ordered = []
    for records in dealt:
        records.sort(key=lambda pair: pair[0])
        for offset, (_arrival, record) in enumerate(records):
            record["dynamodb"]["SequenceNumber"] = str(10**20 + offset)
        ordered.append([record for _arrival, record in records])
    return ordered


def deliver_alerting(shards, table, settings, schedule, bus, rng: random.Random) -> None:
    """Each shard's records through Lambda's cuts (one random batch size, 60 s windows) into the alerting
    handler, the shards' invocations interleaved at random."""
    config = DeliveryConfig(batch_size=rng.randint(1, 6), window_seconds=60)
    lambda_shards = [
        LambdaShard(
            records,
            shard_id=f"shardId-{index}",
            stream_arn=STREAM_ARN,
            config=config,
            handler=AlertingHandler(table, settings, schedule, bus),
            schedule=schedule,
        )
        for index, records in enumerate(shards)
    ]
    interleave(lambda_shards, rng)


def run_episodes(seed: int, counts: dict[tuple[str, int], int], shards: int, late: float = 0.0):
    """Deliver the records through faulty shards and a faulty client; the events put (in order, repeats
    included), the crashes around puts, the final states and the schedule."""
    rng = random.Random(seed)
    delivered: list[dict] = []
    crashes: Counter = Counter()
    with mock_aws():
        raw = boto3.client("dynamodb", region_name="us-east-1")
        create_tables(raw, EVENTS, COUNTS)
        settings = Settings(counts_table=COUNTS, events_table=EVENTS, rules=parse_rules(EPISODE_RULES))
        schedule = FaultSchedule(seed, {**CLIENT_FAULTS, **DELIVERY_FAULTS}, budget=120)
        table = CountsTable(FaultyClient(raw, schedule), COUNTS, settings, backoff=quick_backoff(seed))
        bus = RecordingBus(schedule, delivered, crashes)
        deliver_alerting(timed_records(rng, counts, shards, late), table, settings, schedule, bus, rng)
        states = AlertStates(raw, COUNTS).listing("hot")
    return delivered, crashes, states, schedule


def brute_force(counts: dict[tuple[str, int], int], key: str) -> list[tuple[str, str, str, int]]:
    """The documented episodes of ``key``'s final counts: every window from its first minute to the last
    holding its last minute, judged in time order from OK (windows after its last minute only raise)."""
    minutes = {minute: n for (k, minute), n in counts.items() if k == key and n}
    if not minutes:
        return []
    state, events = OK, []
    for last in range(min(minutes), max(minutes) + EPISODE_MINUTES):
        total = sum(minutes.get(m, 0) for m in range(last - EPISODE_MINUTES + 1, last + 1))
        new = EPISODE_ALERT.judge(state, total)
        if new != state and (new == ALARM or last <= max(minutes)):
            events.append((new, iso_minute((last - EPISODE_MINUTES + 1) * MINUTE_MS),
                           iso_minute((last + 1) * MINUTE_MS), total))
            state = new
    return events


def check_episodes(delivered, states, crashes, schedule, counts) -> None:
    """One event per crossing the states record, ALARM and OK alternating; repeats only after a crash after a
    put; every ALARM past the threshold, every OK at clear; a counter alarmed iff brute force finds a window
    over the threshold."""
    by_id = Counter(detail["id"] for detail in delivered)
    distinct = {detail["id"]: detail for detail in delivered}
    assert Counter(d["counter"] for d in distinct.values()) == Counter(
        {counter: state.transitions for counter, state in states.items()}
    ), schedule
    for counter in states:
        mine = [d["state"] for d in distinct.values() if d["counter"] == counter]
        assert mine == [ALARM, OK] * (len(mine) // 2) + [ALARM] * (len(mine) % 2), (counter, mine, schedule)
    assert sum(n - 1 for n in by_id.values()) <= crashes["after"], (crashes, schedule)
    for detail in distinct.values():
        side = detail["total"] > EPISODE_ABOVE if detail["state"] == ALARM else detail["total"] <= EPISODE_CLEAR
        assert side, (detail, schedule)
    for key in {k for k, _minute in counts}:
        alarmed = any(d["counter"] == f"hits/{key}" and d["state"] == ALARM for d in distinct.values())
        assert alarmed == any(e[0] == ALARM for e in brute_force(counts, key)), (key, schedule)


@pytest.mark.parametrize("seed", range(3))
def test_several_writers_of_one_counter_raise_each_crossing_once(seed):
    """Three shards write the same counters over eight minutes: whoever judges a window first, each crossing
    is made once and delivered once, and a counter alarms exactly when some window passed the threshold."""
    rng = random.Random(1000 + seed)
    base = now_ms() // MINUTE_MS - 30
    counts = {(key, base + m): rng.choice([0, 1, 2, 6]) for key in "ab" for m in range(8)}
    delivered, crashes, states, schedule = run_episodes(seed, counts, shards=3)
    check_episodes(delivered, states, crashes, schedule, counts)


@pytest.mark.parametrize("seed", range(3))
def test_stragglers_one_window_late_still_raise_the_windows_they_complete(seed):
    """A fifth of the records arrive a minute late, in the next tumbling window: the windows they complete
    are judged by the commit that writes them, so a counter alarms exactly when brute force says."""
    rng = random.Random(2000 + seed)
    base = now_ms() // MINUTE_MS - 30
    counts = {(key, base + m): rng.choice([0, 1, 2, 6]) for key in "ab" for m in range(8)}
    delivered, crashes, states, schedule = run_episodes(seed, counts, shards=2, late=0.2)
    check_episodes(delivered, states, crashes, schedule, counts)


@pytest.mark.parametrize("seed", range(3))
def test_a_backlog_replay_raises_each_episode_once_in_time_order_with_its_window(seed):
    """Twenty minutes of one shard's records replayed long after (every window has ended): its commits, one a
    tumbling window, raise and clear exactly the brute-force episodes, in time order, each with the window
    that crossed and its total, whatever retries, redeliveries and crashes happen."""
    rng = random.Random(3000 + seed)
    base = now_ms() // MINUTE_MS - 60
    bursts = "..BB....B.B....BBB.."  # bursts of 4 to 6 events a minute, one event in the others
    counts = {("a", base + m): rng.randint(4, 6) if c == "B" else 1 for m, c in enumerate(bursts)}
    delivered, crashes, states, schedule = run_episodes(seed, counts, shards=1)
    check_episodes(delivered, states, crashes, schedule, counts)
    first_seen = list({d["id"]: (d["state"], d["start"], d["end"], d["total"]) for d in delivered}.values())
    assert first_seen == brute_force(counts, "a"), schedule
    assert [e[0] for e in first_seen] == [ALARM, OK, ALARM, OK, ALARM]  # three episodes, the last still on
