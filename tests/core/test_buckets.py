from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest

from hypothesis import given
from hypothesis import strategies as st

from tally.core.buckets import (
    Bucket,
    Granularity,
    InvalidTime,
    bucket_sort_key,
    buckets_of,
    last_lane_bound,
    lane_sort_key,
    legacy_sketch_sort_key,
    parse_event_time,
    sketch_counter,
    sketch_partition,
    stored_bucket,
)
from tally.core.settings import MAX_BUCKET_LANES
from tally.core.settings import Settings
from tally.core.units import DAY_MS, HOUR_MS
from tally.core.windows import parse_instant


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp() * 1000)


@pytest.mark.parametrize("minute", range(60))
def test_every_minute_of_an_hour_has_its_own_key_in_the_same_hour(minute):
    event = ms(f"2024-03-28T13:{minute:02d}:59.999+00:00")
    minute_bucket, hour_bucket = buckets_of(event)
    assert minute_bucket.sort_key == f"M#2024-03-28T13:{minute:02d}"
    assert hour_bucket.sort_key == "H#2024-03-28T13"
    assert minute_bucket.hour_index == hour_bucket.index
    assert minute_bucket.start_ms <= event < minute_bucket.end_ms


@pytest.mark.parametrize(
    ("instant", "minute_key", "hour_key"),
    [
        ("2024-03-28T23:59:59.999+00:00", "M#2024-03-28T23:59", "H#2024-03-28T23"),
        ("2024-03-29T00:00:00.000+00:00", "M#2024-03-29T00:00", "H#2024-03-29T00"),
        ("2024-02-29T23:59:30+00:00", "M#2024-02-29T23:59", "H#2024-02-29T23"),  # leap day
        ("2024-03-01T00:00:00+00:00", "M#2024-03-01T00:00", "H#2024-03-01T00"),
        ("2023-12-31T23:59:59.999+00:00", "M#2023-12-31T23:59", "H#2023-12-31T23"),
        ("2024-01-01T00:00:00+00:00", "M#2024-01-01T00:00", "H#2024-01-01T00"),
        ("2024-01-01T01:30:00+02:00", "M#2023-12-31T23:30", "H#2023-12-31T23"),  # offset crosses the year
    ],
)
def test_keys_across_day_month_and_year_boundaries_are_utc(instant, minute_key, hour_key):
    minute_bucket, hour_bucket = buckets_of(parse_event_time(instant))
    assert (minute_bucket.sort_key, hour_bucket.sort_key) == (minute_key, hour_key)


def test_sort_keys_order_like_time_within_a_granularity():
    start = ms("2023-12-31T22:00:00+00:00")
    minutes = [Bucket.of_minute(start // 60_000 + i) for i in range(0, 3 * 24 * 60, 7)]
    assert sorted(minutes, key=lambda b: b.sort_key) == minutes
    hours = [Bucket.of_hour(start // HOUR_MS + i) for i in range(0, 500, 5)]
    assert sorted(hours, key=lambda b: b.sort_key) == hours


@pytest.mark.parametrize("sort_key", ["M#2024-03-28T13:17", "H#2024-03-28T13", "M#1970-01-01T00:00", "H#9999-12-31T23"])
def test_sort_keys_parse_back_to_their_bucket(sort_key):
    assert Bucket.from_sort_key(sort_key).sort_key == sort_key


@pytest.mark.parametrize("sort_key", ["X#2024", "M#2024-03-28T13", "H#2024-03-28T13:17", "M#2024-13-28T13:17", ""])
def test_other_strings_are_not_sort_keys(sort_key):
    with pytest.raises(ValueError):
        Bucket.from_sort_key(sort_key)


def test_ttl_is_bucket_end_plus_the_retention_of_its_granularity():
    settings = Settings()
    minute_bucket, hour_bucket = buckets_of(ms("2024-03-28T13:17:05+00:00"))
    assert minute_bucket.ttl_seconds(settings) == (ms("2024-03-28T13:18:00+00:00") + 48 * HOUR_MS) // 1000
    assert hour_bucket.ttl_seconds(settings) == (ms("2024-03-28T14:00:00+00:00") + 90 * DAY_MS) // 1000
    assert Granularity.MINUTE.length_ms * 60 == Granularity.HOUR.length_ms


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (Decimal("1711631825123"), 1711631825123),
        (Decimal("1711631825123.9"), 1711631825123),  # fractions floor, like the bucket math
        (1711631825123, 1711631825123),
        ("2024-03-28T13:17:05.123Z", 1711631825123),
        ("2024-03-28T15:17:05.123+02:00", 1711631825123),
        ("2024-03-28T08:17:05.123-05:00", 1711631825123),
        (" 2024-03-28T13:17:05.123+00:00 ", 1711631825123),
        (Decimal(0), 0),
    ],
)
def test_event_times_in_milliseconds_or_iso_with_offset(value, expected):
    assert parse_event_time(value) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("2024-03-28T13:17:05", "without a UTC offset"),
        ("yesterday", "not an ISO-8601 time"),
        (Decimal("NaN"), "not a finite number"),
        (Decimal("Infinity"), "not a finite number"),
        (float("nan"), "not a finite number"),
        (Decimal("-1"), "before the epoch"),
        (Decimal("1e30"), "after the year 9999"),
        (True, "boolean"),
        ([1], "unsupported type"),
        (None, "unsupported type"),
        ("9999-12-31T23:59:59+00:00", None),
    ],
)
def test_unusable_times_are_refused_with_a_reason(value, message):
    if message is None:  # the last representable instant still parses
        assert parse_event_time(value) > 0
        return
    with pytest.raises(InvalidTime, match=message):
        parse_event_time(value)


def test_iso_and_epoch_forms_land_in_the_same_buckets():
    moment = datetime(2024, 3, 28, 13, 17, 5, tzinfo=UTC)
    for offset_hours in range(-12, 15):
        zone_text = (moment + timedelta(hours=offset_hours)).replace(tzinfo=None).isoformat()
        sign = "+" if offset_hours >= 0 else "-"
        text = f"{zone_text}{sign}{abs(offset_hours):02d}:00"
        assert buckets_of(parse_event_time(text)) == buckets_of(int(moment.timestamp() * 1000))


@given(
    kind=st.sampled_from("MH"),
    index=st.integers(min_value=0, max_value=4_000_000),
    lane=st.integers(min_value=0, max_value=MAX_BUCKET_LANES - 1),
)
def test_a_lane_sorts_within_its_bucket_and_reads_back_as_it(kind, index, lane):
    bucket, following = Bucket(kind, index).sort_key, Bucket(kind, index + 1).sort_key
    key = lane_sort_key(bucket, lane)
    assert bucket_sort_key(key) == bucket
    assert bucket <= key <= last_lane_bound(bucket) < following
    assert (key == bucket) == (lane == 0)


@given(
    counter=st.text(min_size=1, max_size=40).filter(lambda name: not name.startswith("#")),
    lane=st.integers(min_value=0, max_value=MAX_BUCKET_LANES - 1),
    index=st.integers(min_value=0, max_value=4_000_000),
)
def test_a_sketch_lane_has_a_partition_of_its_own_that_names_its_counter(counter, lane, index):
    bucket = Bucket.of_minute(index).sort_key
    partition = sketch_partition(counter, lane)
    assert partition.startswith("#") and partition != counter
    assert sketch_counter(partition) == counter
    assert len({sketch_partition(counter, other) for other in range(MAX_BUCKET_LANES)}) == MAX_BUCKET_LANES
    assert stored_bucket(partition, bucket) == (counter, bucket)  # this release's sketch items
    assert stored_bucket(counter, legacy_sketch_sort_key(bucket, lane)) == (counter, bucket)  # 0.2.0's
    assert stored_bucket(counter, lane_sort_key(bucket, lane)) == (counter, bucket)  # count lanes


@pytest.mark.parametrize("partition", ["views", "#sketches#", "#sketches#3", "#sketches#3#", "#sketches#x#v", "#counters#2026-11-23#07"])
def test_other_partitions_are_no_sketch_lanes(partition):
    assert sketch_counter(partition) is None


def test_iso_second_floors_to_the_second_in_utc():
    from tally.core.buckets import iso_second

    assert iso_second(1_795_000_000_999) == "2026-11-18T11:06:40Z"
    assert iso_second(0) == "1970-01-01T00:00:00Z"


def test_days_and_months_are_kept_in_a_zone_with_sort_keys_in_time_order_that_read_back():
    new_york = "America/New_York"
    days = [Bucket.of_day(date(2028, 2, 27) + timedelta(days=n), new_york) for n in range(4)]
    assert [d.sort_key for d in days] == [f"D#{new_york}@2028-02-{n}" for n in (27, 28, 29)] + [f"D#{new_york}@2028-03-01"]
    assert sorted(d.sort_key for d in days) == [d.sort_key for d in days]
    assert all(Bucket.from_sort_key(d.sort_key) == d for d in days)
    november = Bucket.of_month(date(2026, 11, 17), new_york)
    assert november.sort_key == f"MO#{new_york}@2026-11" and Bucket.from_sort_key(november.sort_key) == november
    assert (november.start_ms, november.end_ms) == (parse_instant("2026-11-01T04:00:00Z"), parse_instant("2026-12-01T05:00:00Z"))
    fall_back = Bucket.of_day(date(2026, 11, 1), new_york)
    assert fall_back.end_ms - fall_back.start_ms == 25 * HOUR_MS
    for text in ("D#UTC@2026-13-01", "D#Nowhere/City@2026-11-01", "D#UTC@2026-11-1", "MO#UTC@2026-11-01", "D#@2026-11-01",
                 "D#UTC@2026-11-01#1"):
        with pytest.raises(ValueError):
            Bucket.from_sort_key(text)


def test_a_day_is_kept_its_retention_after_it_ends_and_a_month_so_many_months():
    settings = Settings(day_retention_ms=400 * DAY_MS, month_retention_months=84)
    day = Bucket.of_day(date(2026, 11, 28), "UTC")
    assert day.ttl_seconds(settings) * 1000 == day.end_ms + 400 * DAY_MS
    month = Bucket.of_month(date(2026, 11, 28), "Europe/Berlin")
    assert month.ttl_seconds(settings) * 1000 == parse_instant("2033-12-01T00:00:00+01:00")
