"""Calendar periods in a zone: DST days of 23 and 25 hours, months and 29 February, weeks, cut ranges, refusals."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tally.core.calendar import (
    CalendarError,
    Period,
    day_of,
    month_start,
    spans,
    start_of_day,
    weekday_of,
    zone_of,
)
from tally.core.units import HOUR_MS

NEW_YORK = ZoneInfo("America/New_York")


def hours(span) -> float:
    return (span.end_ms - span.start_ms) / HOUR_MS


def local(ms: int, zone: ZoneInfo) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC).astimezone(zone)


def test_new_yorks_days_around_its_dst_changes_have_23_and_25_hours():
    march = spans(Period.DAY, date(2026, 3, 7), date(2026, 3, 10), NEW_YORK)
    november = spans(Period.DAY, date(2026, 10, 31), date(2026, 11, 3), NEW_YORK)
    assert [hours(span) for span in march] == [24, 23, 24]
    assert [hours(span) for span in november] == [24, 25, 24]
    assert all(local(span.start_ms, NEW_YORK).time().hour == 0 for span in march + november)


def test_months_end_where_the_next_begins_and_february_of_a_leap_year_has_29_days():
    months = spans(Period.MONTH, date(2028, 1, 1), date(2028, 4, 1), ZoneInfo("UTC"))
    assert [span.first_day for span in months] == [date(2028, 1, 1), date(2028, 2, 1), date(2028, 3, 1)]
    assert hours(months[1]) == 29 * 24
    assert all(a.end_ms == b.start_ms for a, b in zip(months, months[1:]))


def test_the_first_and_last_periods_are_cut_to_the_range_asked():
    months = spans(Period.MONTH, date(2026, 1, 15), date(2026, 3, 10), NEW_YORK)
    assert [(span.first_day, local(span.end_ms, NEW_YORK).date()) for span in months] == [
        (date(2026, 1, 15), date(2026, 2, 1)),
        (date(2026, 2, 1), date(2026, 3, 1)),
        (date(2026, 3, 1), date(2026, 3, 10)),
    ]


def test_weeks_begin_on_the_day_asked():
    weeks = spans(Period.WEEK, date(2026, 11, 4), date(2026, 11, 20), NEW_YORK, weekday_of("sunday"))
    assert [span.first_day for span in weeks] == [date(2026, 11, 4), date(2026, 11, 8), date(2026, 11, 15)]
    assert [span.first_day.weekday() for span in weeks[1:]] == [6, 6]


def test_a_midnight_skipped_by_dst_begins_its_day_when_the_clocks_jump():
    santiago = ZoneInfo("America/Santiago")  # 2026-09-06: 00:00 becomes 01:00
    day = spans(Period.DAY, date(2026, 9, 6), date(2026, 9, 7), santiago)[0]
    assert local(day.start_ms, santiago).time().hour == 1 and hours(day) == 23
    assert start_of_day(date(2026, 9, 6), santiago) == spans(Period.DAY, date(2026, 9, 5), date(2026, 9, 6), santiago)[0].end_ms


def test_a_zone_whose_days_do_not_begin_on_whole_hours_is_refused_in_one_line():
    with pytest.raises(CalendarError) as refused:
        spans(Period.DAY, date(2026, 11, 1), date(2026, 11, 2), ZoneInfo("Asia/Kolkata"))
    assert str(refused.value).startswith("time zone Asia/Kolkata (UTC+05:30): its days begin at 18:30 UTC")
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: zone_of("Mars/Olympus"), "unknown time zone 'Mars/Olympus'"),
        (lambda: zone_of("../etc/passwd"), "unknown time zone"),
        (lambda: day_of("2026-02-30", "--from"), "--from must be a date, YYYY-MM-DD, got '2026-02-30'"),
        (lambda: weekday_of("someday"), "a week starts on a day of the week"),
        (lambda: spans(Period.DAY, date(2026, 11, 2), date(2026, 11, 2), NEW_YORK), "to (2026-11-02) must be after from"),
        (lambda: spans(Period.DAY, date(2000, 1, 1), date(2026, 1, 1), NEW_YORK), "a series lists at most 3660 periods"),
    ],
)
def test_bad_calendar_input_is_one_line_naming_the_fix(call, message):
    with pytest.raises(CalendarError) as refused:
        call()
    assert str(refused.value).startswith(message) and "\n" not in str(refused.value)


def test_the_month_begins_at_its_first_local_midnight():
    instant = int(datetime(2026, 11, 1, 3, 30, tzinfo=UTC).timestamp() * 1000)  # still October in New York
    assert local(month_start(instant, NEW_YORK), NEW_YORK) == datetime(2026, 10, 1, tzinfo=NEW_YORK)
    assert local(month_start(instant, ZoneInfo("UTC")), ZoneInfo("UTC")) == datetime(2026, 11, 1, tzinfo=UTC)


ZONES = ["UTC", "America/New_York", "Europe/Berlin", "Australia/Sydney", "America/Santiago", "Pacific/Auckland"]


@given(
    zone=st.sampled_from(ZONES),
    kind=st.sampled_from(list(Period)),
    start=st.dates(date(2024, 1, 1), date(2030, 12, 31)),
    days=st.integers(1, 400),
    week_start=st.integers(0, 6),
)
def test_periods_tile_the_range_each_beginning_at_a_local_midnight(zone, kind, start, days, week_start):
    place = ZoneInfo(zone)
    end = start + timedelta(days=days)
    found = spans(kind, start, end, place, week_start)
    assert found[0].start_ms == start_of_day(start, place) and found[-1].end_ms == start_of_day(end, place)
    assert all(a.end_ms == b.start_ms for a, b in zip(found, found[1:]))
    for span in found:
        first = local(span.start_ms, place)
        assert first.date() == span.first_day and (first.time().hour, first.minute) in ((0, 0), (1, 0))
        if kind is Period.DAY:
            assert 23 <= hours(span) <= 25
        if kind is Period.WEEK and span is not found[0]:
            assert span.first_day.weekday() == week_start
        if kind is Period.MONTH and span is not found[0]:
            assert span.first_day.day == 1


def test_29_february_is_a_day_of_its_month_in_a_zone_that_is_not_utc():
    berlin = ZoneInfo("Europe/Berlin")
    days = spans(Period.DAY, date(2028, 2, 28), date(2028, 3, 2), berlin)
    assert [span.first_day for span in days] == [date(2028, 2, 28), date(2028, 2, 29), date(2028, 3, 1)]
    assert [local(span.start_ms, berlin).hour for span in days] == [0, 0, 0] and all(hours(span) == 24 for span in days)
    [february] = spans(Period.MONTH, date(2028, 2, 1), date(2028, 3, 1), NEW_YORK)
    assert hours(february) == 29 * 24 and local(february.end_ms, NEW_YORK) == datetime(2028, 3, 1, tzinfo=NEW_YORK)
