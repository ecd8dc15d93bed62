"""The long rungs: which records climb to their days and months, what they mark, what a close sums, when it runs."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, date, datetime
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings as hypothesis_settings, strategies as st

from factories import counter_record
from tally.core.buckets import DAY, MONTH, Bucket
from tally.core.ladder import (
    CLOSE_AFTER_MS,
    LATE_AFTER_MS,
    HistoryLadder,
    Ladder,
    children,
    closed_value,
    closes_at,
    due_days,
    first_closable_day,
    first_whole_month,
    history_days,
    is_late,
    late_partition,
    long_items,
)
from tally.core.records import CounterEvent, parse_record
from tally.core.segments import SegmentFolder, contribution
from tally.core.settings import Settings
from tally.core.units import DAY_MS, HOUR_MS, MINUTE_MS
from tally.core.windows import parse_instant

NEW_YORK = "America/New_York"
KEPT = Settings(calendar_prefixes=("orders/",), calendar_zones=(NEW_YORK,))
HOUR = parse_instant("2026-11-01T05:00:00Z") // HOUR_MS  # 01:00 EDT: the first of New York's repeated hours


def test_a_record_is_late_from_a_day_after_its_hour_ended():
    end = (HOUR + 1) * HOUR_MS
    assert not is_late(HOUR, end + LATE_AFTER_MS - 1)
    assert is_late(HOUR, end + LATE_AFTER_MS)
    assert CLOSE_AFTER_MS > LATE_AFTER_MS + DAY_MS  # a close waits until no on-time record can still be committed


def test_a_late_record_adds_to_its_day_and_month_in_every_kept_zone_and_marks_its_hour_and_days():
    items = long_items("orders/acme", HOUR, ("UTC", NEW_YORK))
    assert [(counter, bucket.sort_key) for counter, bucket in items.direct] == [
        ("orders/acme", "D#UTC@2026-11-01"), ("orders/acme", "MO#UTC@2026-11"),
        ("orders/acme", "D#America/New_York@2026-11-01"), ("orders/acme", "MO#America/New_York@2026-11"),
    ]
    assert [(counter, bucket.sort_key) for counter, bucket in items.marks] == [
        ("#late#orders/acme", "H#2026-11-01T05"), ("#late#orders/acme", "D#UTC@2026-11-01"),
        ("#late#orders/acme", "D#America/New_York@2026-11-01"),
    ]
    # 03:00 UTC on 1 November is still 31 October in New York, and October's month
    early = long_items("orders/acme", HOUR - 2, (NEW_YORK,))
    assert [bucket.sort_key for _, bucket in early.direct] == ["D#America/New_York@2026-10-31", "MO#America/New_York@2026-10"]


def outcomes(arrival_ms: int, event_ms: int, counter: str = "orders/acme"):
    return parse_record(counter_record(counter, event_ms, arrival_s=arrival_ms // 1000), KEPT)


def test_on_time_records_and_counters_outside_the_prefixes_write_minutes_and_hours_only():
    event = HOUR * HOUR_MS + 5 * MINUTE_MS
    ladder = Ladder(KEPT)
    [on_time] = outcomes(event + MINUTE_MS, event)
    folder = SegmentFolder(ladder=ladder)
    list(folder.fold([[on_time]]))
    assert {bucket.kind for _, bucket in folder.open.deltas} == {"M", "H"}
    [other] = outcomes(event + 3 * DAY_MS, event, counter="views/home")  # late, but not kept
    assert Ladder.of(Settings()) is None
    folder = SegmentFolder(ladder=ladder)
    list(folder.fold([[other]]))
    assert {bucket.kind for _, bucket in folder.open.deltas} == {"H"}


def test_an_exports_records_all_climb_and_an_event_past_the_hour_retention_counts_in_its_days_alone():
    event = HOUR * HOUR_MS
    [on_time] = outcomes(event + MINUTE_MS, event)
    folder = SegmentFolder(ladder=Ladder(KEPT, every_late=True))
    list(folder.fold([[on_time]]))
    assert {bucket.kind for _, bucket in folder.open.deltas} == {"M", "H", DAY, MONTH}
    [old] = outcomes(event + 100 * DAY_MS, event)
    assert old.long_only and contribution(old) is None
    folder = SegmentFolder(ladder=Ladder(KEPT))
    list(folder.fold([[old]]))
    assert sorted((counter, bucket.sort_key) for counter, bucket in folder.open.deltas) == [
        ("#late#orders/acme", "D#America/New_York@2026-11-01"), ("#late#orders/acme", "D#UTC@2026-11-01"),
        ("orders/acme", "D#America/New_York@2026-11-01"), ("orders/acme", "D#UTC@2026-11-01"),
        ("orders/acme", "MO#America/New_York@2026-11"), ("orders/acme", "MO#UTC@2026-11"),
    ]
    [too_old] = outcomes(event + 500 * DAY_MS, event)  # past the day retention too: refused as late
    assert too_old.reason.value == "late_event"
    [not_kept] = outcomes(event + 100 * DAY_MS, event, counter="views/home")
    assert not_kept.reason.value == "late_event"


@hypothesis_settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40 * 24 - 1), st.sampled_from(
    [0, MINUTE_MS, 5 * HOUR_MS, LATE_AFTER_MS - 1, LATE_AFTER_MS + HOUR_MS, 9 * DAY_MS, 30 * DAY_MS, 95 * DAY_MS])),
    min_size=1, max_size=40))
def test_hours_less_their_marks_plus_what_climbed_is_every_event_of_each_day_and_month(events):
    """The invariant a close rests on, in memory: for every day, its hours' counts less their late marks plus
    what late records added to the day directly equal the day's events; likewise months from days."""
    start = parse_instant("2028-01-20T00:00:00Z")
    parsed = [outcomes(start + hour * HOUR_MS + 17 * MINUTE_MS + late, start + hour * HOUR_MS + 17 * MINUTE_MS)
              for hour, late in sorted(events, key=lambda e: e[0] * HOUR_MS + e[1])]
    folder = SegmentFolder(ladder=Ladder(KEPT), max_items=10**6, state_budget=10**9)
    list(folder.fold(parsed))
    deltas = folder.open.deltas
    for zone in ("UTC", NEW_YORK):
        truth_days, truth_months = Counter(), Counter()
        for [outcome] in parsed:
            if outcome.__class__.__name__ == "CounterEvent":
                local = datetime.fromtimestamp(outcome.event_ms / 1000, UTC).astimezone(ZoneInfo(zone)).date()
                truth_days[Bucket.of_day(local, zone)] += 1
                truth_months[Bucket.of_month(local, zone)] += 1
        for day, expected in truth_days.items():
            first, last = children(day)
            hours = sum(deltas.get(("orders/acme", Bucket.of_hour(h)), 0) for h in range(first.index, last.index + 1))
            marks = sum(deltas.get((late_partition("orders/acme"), Bucket.of_hour(h)), 0)
                        for h in range(first.index, last.index + 1))
            assert hours - marks + deltas.get(("orders/acme", day), 0) == expected
        for month, expected in truth_months.items():
            first, last = children(month)
            days = sum(truth_days[Bucket(DAY, d, zone)] for d in range(first.index, last.index + 1))
            day_marks = sum(deltas.get((late_partition("orders/acme"), Bucket(DAY, d, zone)), 0)
                            for d in range(first.index, last.index + 1))
            assert days - day_marks + deltas.get(("orders/acme", month), 0) == expected


def test_a_day_sums_its_local_hours_and_a_month_its_days():
    fall_back = Bucket.of_day(date(2026, 11, 1), NEW_YORK)
    first, last = children(fall_back)
    assert last.index - first.index + 1 == 25
    spring = children(Bucket.of_day(date(2026, 3, 8), NEW_YORK))
    assert spring[1].index - spring[0].index + 1 == 23
    february = children(Bucket.of_month(date(2028, 2, 1), "UTC"))
    assert [b.sort_key for b in february] == ["D#UTC@2028-02-01", "D#UTC@2028-02-29"]
    with pytest.raises(ValueError):
        children(Bucket.of_hour(HOUR))


def test_a_close_subtracts_the_marks_and_refuses_a_damaged_table():
    closed = closed_value({"H#1": 5, "H#2": 3}, {"H#2": 2}, {"H#1": 100, "H#2": 7}, {"H#2": 4},
                          {"H#1": {"p1": 5}, "H#2": {"p1": 1, "p2": 2}}, {"H#2": {"p2": 2}})
    assert (closed.count, closed.units, closed.bins) == (6, 103, {"p1": 6})
    assert closed_value({"H#1": 1}, {}).units is None
    with pytest.raises(ValueError):
        closed_value({"H#1": 1}, {"H#1": 2})


def test_days_close_two_days_and_an_hour_after_they_end_in_their_own_zone():
    day = Bucket.of_day(date(2026, 11, 1), NEW_YORK)
    assert closes_at(day) == parse_instant("2026-11-04T06:00:00Z")
    assert due_days(NEW_YORK, None, date(2026, 11, 1), closes_at(day) - 1) == []
    assert due_days(NEW_YORK, None, date(2026, 11, 1), closes_at(day)) == [date(2026, 11, 1)]
    assert due_days(NEW_YORK, date(2026, 11, 1), date(2026, 10, 1), closes_at(day) + 2 * DAY_MS) == [
        date(2026, 11, 2), date(2026, 11, 3)]


def test_closes_begin_with_the_first_day_whose_hours_are_all_kept_and_months_with_the_first_whole_one():
    now = parse_instant("2026-11-28T12:00:00Z")
    assert first_closable_day("UTC", now, Settings()) == date(2026, 9, 1)  # 89 days and a day of slack: 31 Aug 12:00
    short = Settings(hour_retention_ms=30 * DAY_MS, minute_retention_ms=DAY_MS)
    assert first_closable_day("UTC", now, short) == date(2026, 10, 31)  # not 1 November: every day whole in hours
    assert first_closable_day(NEW_YORK, now, short) == date(2026, 10, 31)  # 30 Oct 12:00 UTC is 08:00 there
    assert first_closable_day(NEW_YORK, now - 9 * HOUR_MS, short) == date(2026, 10, 30)  # 30 Oct 03:00 UTC, 23:00 on the 29th
    assert first_whole_month(date(2026, 10, 31)) == date(2026, 11, 1) and first_whole_month(date(2026, 11, 1)) == date(2026, 11, 1)


# --- a calendar prefix's older days: HistoryLadder, history_days ------------------------------------------------

LATER = Settings(calendar_prefixes=("views/", "orders/"), calendar_zones=("America/New_York",),
                 calendar_count_from=(("orders/", 1_795_000_000_000),))


def test_a_calendar_backfill_adds_to_days_months_and_day_marks_alone_within_each_zones_run():
    """03:30 UTC on 2026-11-02 is New York's 1 November: inside New York's run, a day after UTC's."""
    runs = {"orders/": {"UTC": (date(2026, 10, 1), date(2026, 11, 1)), "America/New_York": (date(2026, 10, 1), date(2026, 11, 1))}}
    ladder = HistoryLadder(LATER, runs)
    ts = int(datetime(2026, 11, 2, 3, 30, tzinfo=UTC).timestamp() * 1000)
    added = ladder.climbed(contribution(CounterEvent("orders/a", ts, "1", ts)), "orders/a", ts, ts + 90 * 86_400_000)
    items = sorted(item[1][1].sort_key if item[1][0] == "orders/a" else "mark " + item[1][1].sort_key for item in added)
    assert items == ["D#America/New_York@2026-11-01", "MO#America/New_York@2026-11", "mark D#America/New_York@2026-11-01"]
    assert all(item[0] is None for item in added)  # no minute; and no hour: every item is a day's or a month's
    assert ladder.climbed(contribution(CounterEvent("views/a", ts, "1", ts)), "views/a", ts, ts) == []  # not the prefix's


def test_the_days_a_calendar_backfill_writes_end_before_the_prefix_first_closed_day_or_a_day_before_its_instant():
    instant = 1_795_000_000_000  # 2026-11-18T09:46:40Z
    first, _ = history_days(instant, "UTC", LATER, date(2026, 11, 1))
    assert history_days(instant, "UTC", LATER, date(2026, 11, 1)) == (first, date(2026, 10, 31))
    assert history_days(instant, "UTC", LATER, date(2026, 12, 1))[1] == date(2026, 11, 16)  # ended a day before it
    assert history_days(instant, "UTC", LATER, first) is None
    assert first == date(2025, 10, 14)  # the UTC day 400 days before the instant: its items are still kept
