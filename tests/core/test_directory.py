"""The counter directory's entries: one per counter and UTC day, never for tally's own counters."""

from tally.core.buckets import Bucket
from tally.core.directory import day_partition, days_between, entries_of, entry_item
from tally.core.settings import DAY_MS, HOUR_MS, MINUTE_MS, Settings
from tally.core.windows import parse_instant

MIDNIGHT = parse_instant("2026-11-23T00:00:00Z")
DAY = MIDNIGHT // DAY_MS


def test_a_day_partition_names_its_utc_date():
    assert day_partition(DAY) == "#counters#2026-11-23"
    assert day_partition(0) == "#counters#1970-01-01"


def test_entries_are_per_counter_and_day_of_the_bucket_and_skip_reserved_counters():
    items = [
        ("a", Bucket.of_minute(MIDNIGHT // MINUTE_MS - 1)),  # 23:59 the day before
        ("a", Bucket.of_hour(MIDNIGHT // HOUR_MS)),
        ("a", Bucket.of_minute(MIDNIGHT // MINUTE_MS + 5)),
        ("b", Bucket.of_hour(MIDNIGHT // HOUR_MS + 23)),
        ("#rejected#late_event", Bucket.of_hour(MIDNIGHT // HOUR_MS)),
    ]
    assert entries_of(items) == {(DAY - 1, "a"), (DAY, "a"), (DAY, "b")}


def test_an_entry_lives_as_long_as_the_last_hour_of_its_day():
    settings = Settings(hour_retention_ms=10 * DAY_MS)
    item = entry_item((DAY, "views/home"), settings)
    assert item == {
        "pk": {"S": "#counters#2026-11-23"},
        "sk": {"S": "views/home"},
        "ttl": {"N": str((MIDNIGHT + DAY_MS + 10 * DAY_MS) // 1000)},
    }
    last_hour = Bucket.of_hour(MIDNIGHT // HOUR_MS + 23)
    assert int(item["ttl"]["N"]) == last_hour.ttl_seconds(settings)


def test_the_days_of_a_window_hold_each_of_its_instants():
    assert days_between(MIDNIGHT - HOUR_MS, MIDNIGHT) == range(DAY - 1, DAY)  # the end is exclusive
    assert days_between(MIDNIGHT - HOUR_MS, MIDNIGHT + 1) == range(DAY - 1, DAY + 1)
    assert len(days_between(MIDNIGHT + 5 * MINUTE_MS, MIDNIGHT + 7 * DAY_MS + 5 * MINUTE_MS)) == 8
