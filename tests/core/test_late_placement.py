"""Late events: which buckets an event counts in at its arrival, and why every readable window stays exact.

The store here is a model of the counts table that DynamoDB's own semantics
would give (``ADD count``, ``SET ttl = if_not_exists(ttl, ...)``, and TTL
deletion of any item whose TTL has passed, at any moment), so commits can land
long after their records arrived, after the TTL of the minutes they write.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest
from freezegun import freeze_time
from hypothesis import given, settings as hypothesis_settings, strategies as st

from factories import counter_record, parse_one
from tally.core.buckets import Bucket, counted_buckets
from tally.core.plans import PlanKind, WindowUnavailable, make_plan
from tally.core.records import CounterEvent, Reason, Rejection, parse_record
from tally.core.segments import contribution
from tally.core.settings import STREAM_RETENTION_MS, Settings
from tally.core.units import DAY_MS, HOUR_MS, MINUTE_MS
from tally.core.sums import sum_plan
from tally.core.windows import Window, parse_instant

SETTINGS = Settings()  # minutes kept 48 h, hours 90 days
SHORT = Settings(minute_retention_ms=DAY_MS, hour_retention_ms=3 * DAY_MS)
NOW = parse_instant("2026-11-22T15:07:31Z")


def minute_ttl_ms(event_ms: int, settings: Settings) -> int:
    """Stated independently of Bucket: a minute lives until its end plus the minute retention."""
    return (event_ms // MINUTE_MS + 1) * MINUTE_MS + settings.minute_retention_ms


def hour_ttl_ms(event_ms: int, settings: Settings) -> int:
    return (event_ms // HOUR_MS + 1) * HOUR_MS + settings.hour_retention_ms


def test_an_event_within_the_minute_retention_counts_in_its_minute_and_its_hour():
    event = NOW - 23 * HOUR_MS - 30 * MINUTE_MS
    assert counted_buckets(event, NOW, SETTINGS) == (Bucket.of_minute(event // MINUTE_MS), Bucket.of_hour(event // HOUR_MS))


@pytest.mark.parametrize("settings", [SETTINGS, SHORT], ids=["default", "short"])
def test_the_minute_is_dropped_exactly_when_its_ttl_is_reached_at_arrival(settings):
    event = NOW - 3 * DAY_MS // 2
    ttl = minute_ttl_ms(event, settings)
    minute, hour = Bucket.of_minute(event // MINUTE_MS), Bucket.of_hour(event // HOUR_MS)
    assert counted_buckets(event, ttl - 1, settings) == (minute, hour)
    assert counted_buckets(event, ttl, settings) == (hour,)
    assert minute.ttl_seconds(settings) * 1000 == ttl


@pytest.mark.parametrize("settings", [SETTINGS, SHORT], ids=["default", "short"])
def test_an_event_is_late_exactly_when_its_hour_is_past_the_hour_retention_at_arrival(settings):
    event = NOW - 10 * DAY_MS
    ttl = hour_ttl_ms(event, settings)
    assert counted_buckets(event, ttl - 1, settings) == (Bucket.of_hour(event // HOUR_MS),)
    assert counted_buckets(event, ttl, settings) == ()


def test_an_event_23_and_a_half_hours_late_is_parsed_into_its_minute_and_hour():
    event = NOW - 23 * HOUR_MS - 30 * MINUTE_MS
    outcome = parse_one(counter_record("c", event, arrival_s=NOW // 1000), SETTINGS)
    assert isinstance(outcome, CounterEvent) and not outcome.hour_only
    minute, hour = Bucket.of_minute(event // MINUTE_MS), Bucket.of_hour(event // HOUR_MS)
    assert contribution(outcome) == (("c", minute), ("c", hour), None, None, None)


def test_an_event_3_days_late_is_parsed_into_its_hour_alone():
    event = NOW - 3 * DAY_MS
    outcome = parse_one(counter_record("c", event, arrival_s=NOW // 1000), SETTINGS)
    assert isinstance(outcome, CounterEvent) and outcome.hour_only
    assert contribution(outcome) == (None, ("c", Bucket.of_hour(event // HOUR_MS)), None, None, None)


def test_an_event_past_the_hour_retention_is_rejected_as_late_with_its_reason():
    outcome = parse_one(counter_record("c", NOW - 91 * DAY_MS, arrival_s=NOW // 1000, sequence="55"), SETTINGS)
    assert isinstance(outcome, Rejection)
    assert outcome.reason is Reason.LATE_EVENT
    assert "past the hour retention (90 d)" in outcome.detail
    assert (outcome.sequence, outcome.arrival_ms) == ("55", NOW // 1000 * 1000)


@pytest.mark.parametrize("clock", ["2026-11-22T15:08:00Z", "2026-11-23T15:00:00Z", "2027-03-01T00:00:00Z"])
def test_placement_depends_on_the_record_alone_never_on_the_clock(clock):
    """A retry a day later, or a replay months later, rebuilds the very same buckets."""
    records = [counter_record("c", NOW - age, arrival_s=NOW // 1000, sequence=str(10**20 + age)) for age in AGES_MS]
    expected = [parse_record(record, SETTINGS) for record in records]
    with freeze_time(clock):
        assert [parse_record(record, SETTINGS) for record in records] == expected


AGES_MS = [0, 23 * HOUR_MS + 30 * MINUTE_MS, 48 * HOUR_MS, 3 * DAY_MS, 89 * DAY_MS, 91 * DAY_MS]


# --- a model of the counts table, with commits after TTLs and TTL deletion ---------------


@dataclass
class StoredItem:
    count: int
    ttl_s: int


class ModelTable:
    """DynamoDB's semantics for tally's bucket updates, TTL deletion included."""

    def __init__(self, settings: Settings, rng: random.Random) -> None:
        self.items: dict[str, StoredItem] = {}
        self.settings = settings
        self.rng = rng

    def expire(self, now_ms: int, everything: bool = False) -> None:
        """DynamoDB may delete any item whose TTL has passed, at any moment: some of them, or all."""
        for key in [key for key, item in self.items.items() if item.ttl_s * 1000 <= now_ms]:
            if everything or self.rng.random() < 0.5:
                del self.items[key]

    def add(self, bucket: Bucket) -> None:
        item = self.items.setdefault(bucket.sort_key, StoredItem(0, bucket.ttl_seconds(self.settings)))
        item.count += 1  # if_not_exists(ttl): a re-created item takes the bucket's TTL again

    def counts(self) -> dict[str, int]:
        return {key: item.count for key, item in self.items.items()}


@dataclass(frozen=True)
class Arrival:
    event_ms: int
    arrival_ms: int
    commit_ms: int  # when the (last) attempt that commits it lands: up to the stream retention later


def brute_force(arrivals: list[Arrival], window: Window, settings: Settings) -> int:
    """Events in the window's minutes whose hour was within the hour retention at arrival."""
    return sum(
        1
        for arrival in arrivals
        if window.covers(arrival.event_ms) and hour_ttl_ms(arrival.event_ms, settings) > arrival.arrival_ms
    )


def must_be_answered(window: Window, now_ms: int, settings: Settings) -> bool:
    """Every partly covered hour still has all its minutes, and every hour is within the hour retention."""
    for hour in range(window.first_minute // 60, window.last_minute // 60 + 1):
        if hour_ttl_ms(hour * HOUR_MS, settings) <= now_ms:
            return False
        whole = window.first_minute <= hour * 60 and (hour + 1) * 60 - 1 <= window.last_minute
        if not whole and minute_ttl_ms(hour * HOUR_MS, settings) <= now_ms:
            return False
    return True


def must_be_refused(window: Window, now_ms: int, settings: Settings) -> bool:
    """A minute-precision start past the minute retention, or an hour past the hour retention."""
    start = window.first_minute * MINUTE_MS
    if start % HOUR_MS and minute_ttl_ms(start, settings) <= now_ms:
        return True
    return hour_ttl_ms(start, settings) <= now_ms


ages = st.one_of(
    st.integers(0, 2 * HOUR_MS),
    st.integers(0, 100 * DAY_MS),
    st.integers(-2 * MINUTE_MS, 2 * MINUTE_MS).map(lambda d: SETTINGS.minute_retention_ms + d),
    st.integers(-2 * HOUR_MS, 2 * HOUR_MS).map(lambda d: SETTINGS.hour_retention_ms + d),
)
arrival_lists = st.lists(
    st.tuples(st.integers(0, 4 * DAY_MS), ages, st.sampled_from([0, 1000, MINUTE_MS, HOUR_MS, STREAM_RETENTION_MS])),
    max_size=40,
)


@hypothesis_settings(max_examples=150, deadline=None, database=None)
@given(raw=arrival_lists, seed=st.integers(0, 2**32), settings=st.sampled_from([SETTINGS, SHORT]))
def test_every_readable_window_is_exact_when_commits_land_after_minute_ttls(raw, seed, settings):
    """Events late by any amount, committed up to a day after arrival with TTL deletion in between."""
    rng = random.Random(seed)
    start = NOW - 4 * DAY_MS
    arrivals = []
    for offset, age, delay in raw:
        arrival = (start + offset) // 1000 * 1000  # arrival in whole seconds, as Lambda reports it
        arrivals.append(Arrival(arrival - age, arrival, arrival + rng.randint(0, delay)))
    table = ModelTable(settings, rng)
    for arrival in sorted(arrivals, key=lambda a: a.commit_ms):
        table.expire(arrival.commit_ms)
        for bucket in counted_buckets(arrival.event_ms, arrival.arrival_ms, settings):
            table.add(bucket)

    last_commit = max((a.commit_ms for a in arrivals), default=start)
    for now in sorted(last_commit + rng.choice([0, 1000, HOUR_MS, 3 * DAY_MS]) for _ in range(3)):
        table.expire(now, everything=rng.random() < 0.5)
        for _ in range(12):
            window = random_window(rng, now)
            for kind in PlanKind:
                try:
                    plan = make_plan(window, now, settings, kind)
                except WindowUnavailable:
                    assert not must_be_answered(window, now, settings), (window, now, kind)
                    continue
                assert not must_be_refused(window, now, settings), (window, now, kind)
                assert sum_plan(plan, table.counts()).count == brute_force(arrivals, window, settings), (window, now)


def random_window(rng: random.Random, now_ms: int) -> Window:
    length = rng.choice([1, 59, 61, 90, 24 * 60, 47 * 60 + 30, 72 * 60, 7 * 24 * 60, 30 * 24 * 60])
    length = length if rng.random() < 0.7 else rng.randint(1, 31 * 24 * 60)
    end = now_ms - rng.choice([0, rng.randint(0, 6 * DAY_MS)])
    if rng.random() < 0.5:
        end = end - end % HOUR_MS - 1  # ends with a whole hour
        length = max(1, length // 60) * 60  # and starts with one
    return Window.ending(end, length * MINUTE_MS)


def test_a_retry_after_the_minute_ttl_writes_only_what_no_plan_reads():
    """The worked case: three events of one minute; the last commit lands after the minute's TTL."""
    settings = SETTINGS
    minute_start = NOW - NOW % HOUR_MS - 2 * DAY_MS + 10 * MINUTE_MS  # minute :10 of an hour two days ago
    ttl = minute_ttl_ms(minute_start, settings)
    early = Arrival(minute_start + 1_000, minute_start + 2_000, minute_start + 3_000)
    retried = Arrival(minute_start + 5_000, ttl - 1_000, ttl + HOUR_MS)  # arrived in time, committed after the TTL
    hour_only = Arrival(minute_start + 9_000, ttl, ttl + 1_000)  # arrived at the TTL: its hour alone
    table = ModelTable(settings, random.Random(0))
    for arrival in (early, hour_only, retried):  # commit order
        table.expire(arrival.commit_ms, everything=True)
        for bucket in counted_buckets(arrival.event_ms, arrival.arrival_ms, settings):
            table.add(bucket)
    minute = Bucket.of_minute(minute_start // MINUTE_MS)
    hour = Bucket.of_hour(minute_start // HOUR_MS)
    # The early count was deleted with the minute; the retry re-created it under the same, past TTL.
    assert table.items[minute.sort_key] == StoredItem(1, ttl // 1000)
    assert table.counts()[hour.sort_key] == 3

    now = retried.commit_ms
    arrivals = [early, retried, hour_only]
    answered = 0
    for end in range(hour.start_ms - HOUR_MS, hour.end_ms + HOUR_MS, MINUTE_MS):
        for length in (1, 5, 30, 50, 60, 61, 90, 120, 24 * 60, 7 * 24 * 60):
            window = Window.ending(end, length * MINUTE_MS)
            for kind in PlanKind:
                try:
                    plan = make_plan(window, now, settings, kind)
                except WindowUnavailable:
                    continue
                assert minute not in plan.buckets
                assert sum_plan(plan, table.counts()).count == brute_force(arrivals, window, settings)
                answered += 1
    assert answered > 100
