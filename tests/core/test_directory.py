"""The counter directory's entries: one per counter and UTC day, never for tally's own counters."""

from tally.core.buckets import Bucket
import pytest

from tally.core.directory import (
    DIRECTORY_PARTITIONS,
    InvalidCursor,
    after_cursor,
    cursor_of,
    day_partitions,
    days_between,
    entries_of,
    entry_item,
    legacy_partition,
    partition_of,
)
from tally.core.settings import Settings
from tally.core.units import DAY_MS, HOUR_MS, MINUTE_MS
from tally.core.windows import parse_instant

MIDNIGHT = parse_instant("2026-11-23T00:00:00Z")
DAY = MIDNIGHT // DAY_MS


def test_a_day_partition_names_its_utc_date_and_a_suffix_by_the_names_hash():
    assert legacy_partition(DAY) == "#counters#2026-11-23" and legacy_partition(0) == "#counters#1970-01-01"
    assert partition_of(DAY, "views/home") == partition_of(DAY, "views/home")  # stable: not Python's hash()
    assert partition_of(DAY, "views/home").startswith("#counters#2026-11-23#")
    spread = {partition_of(DAY, f"views/p{n}") for n in range(1000)}
    assert spread == set(day_partitions(DAY)[:DIRECTORY_PARTITIONS])  # every partition takes its share
    assert day_partitions(DAY)[-1] == legacy_partition(DAY)  # listings read the previous release's too


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
        "pk": {"S": partition_of(DAY, "views/home")},
        "sk": {"S": "views/home"},
        "ttl": {"N": str((MIDNIGHT + DAY_MS + 10 * DAY_MS) // 1000)},
    }
    last_hour = Bucket.of_hour(MIDNIGHT // HOUR_MS + 23)
    assert int(item["ttl"]["N"]) == last_hour.ttl_seconds(settings)


def test_the_days_of_a_window_hold_each_of_its_instants():
    assert days_between(MIDNIGHT - HOUR_MS, MIDNIGHT) == range(DAY - 1, DAY)  # the end is exclusive
    assert days_between(MIDNIGHT - HOUR_MS, MIDNIGHT + 1) == range(DAY - 1, DAY + 1)
    assert len(days_between(MIDNIGHT + 5 * MINUTE_MS, MIDNIGHT + 7 * DAY_MS + 5 * MINUTE_MS)) == 8


@pytest.mark.parametrize("name", ["views/home", "a", "ünïcødé/🙂", "with spaces, commas & = signs", "x" * 255])
def test_a_cursor_gives_back_the_name_its_page_ended_at(name):
    cursor = cursor_of(name)
    assert after_cursor(cursor) == name and cursor.isascii() and "=" not in cursor


@pytest.mark.parametrize("cursor", ["!!", "a", "@@@@", cursor_of("name") + "=", "gA", "_w"])
def test_a_cursor_no_listing_handed_out_is_refused_naming_the_parameter(cursor):
    with pytest.raises(InvalidCursor, match="not one a listing handed out") as refused:
        after_cursor(cursor)
    assert refused.value.parameter == "cursor"
