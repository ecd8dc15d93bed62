"""What the repair recounts of a day or month a close marked, in which order, and what it records of it."""

from __future__ import annotations

import pytest

from tally.core.instants import parse_instant
from tally.core.repair import Lane, bound_of, bucket_minutes, children_named, period_record, repair_rank, waiting_on
from tally.core.units import MINUTE_MS

HOUR_MARK = "close H#2026-11-01T05: ~abc 1..9 <=3"
DAY_MARK = "close D#UTC@2026-11-01: close H#2026-11-01T05: ~abc 1..9 <=3"


def minute(instant: str) -> int:
    return parse_instant(instant) // MINUTE_MS


@pytest.mark.parametrize(
    ("sort_key", "first", "end"),
    [
        ("H#2026-11-01T05", "2026-11-01T05:00Z", "2026-11-01T06:00Z"),
        ("M#2026-11-01T05:17", "2026-11-01T05:17Z", "2026-11-01T05:18Z"),
        ("D#UTC@2026-11-01", "2026-11-01T00:00Z", "2026-11-02T00:00Z"),
        ("D#America/New_York@2026-11-01", "2026-11-01T04:00Z", "2026-11-02T05:00Z"),  # 25 hours: clocks go back
        ("D#America/New_York@2026-03-08", "2026-03-08T05:00Z", "2026-03-09T04:00Z"),  # 23 hours: clocks go forward
        ("MO#America/New_York@2026-11", "2026-11-01T04:00Z", "2026-12-01T05:00Z"),
        ("MO#UTC@2028-02", "2028-02-01T00:00Z", "2028-03-01T00:00Z"),  # 29 days
    ],
)
def test_a_bucket_is_recounted_over_its_own_minutes_a_period_over_its_zones_midnights(sort_key, first, end):
    assert bucket_minutes(sort_key) == (minute(first), minute(end) - 1)


def test_hours_are_repaired_before_the_days_closed_from_them_and_days_before_their_months():
    keys = ["MO#UTC@2026-11", "D#America/New_York@2026-11-01", "H#2026-11-01T05", "M#2026-11-01T05:17"]
    assert sorted(keys, key=repair_rank) == ["H#2026-11-01T05", "M#2026-11-01T05:17", "D#America/New_York@2026-11-01",
                                             "MO#UTC@2026-11"]


def test_a_period_waits_for_the_children_its_close_marks_name():
    day = [Lane("D#UTC@2026-11-01", 40, None, {}, frozenset({HOUR_MARK, "~def 3..4 <=1"}))]
    assert children_named([HOUR_MARK, DAY_MARK, "~def 3..4 <=1"]) == {"H#2026-11-01T05", "D#UTC@2026-11-01"}
    assert waiting_on(day, set()) is None
    assert waiting_on(day, {"H#2026-11-01T06"}) is None  # another hour of the day: not one it was closed from
    assert "closed from H#2026-11-01T05, left unresolved" in waiting_on(day, {"H#2026-11-01T05"})
    month = [Lane("MO#UTC@2026-11", 90, None, {}, frozenset({DAY_MARK}))]
    assert "closed from D#UTC@2026-11-01" in waiting_on(month, {"D#UTC@2026-11-01"})
    assert bound_of([DAY_MARK]) == 3  # a mark carried up twice bounds what it bounded


def test_a_period_is_recorded_once_whatever_its_marks():
    first = period_record("orders", "D#UTC@2026-11-01", [HOUR_MARK], 1_900_000_000)
    again = period_record("orders", "D#UTC@2026-11-01", [HOUR_MARK, "close H#2026-11-01T06: ~x 1..2 <=2"], None)
    assert first["pk"] == {"S": "#unresolved"} and first["sk"] == again["sk"]
    assert first["sk"] != period_record("orders", "D#America/New_York@2026-11-01", [HOUR_MARK], None)["sk"]
    assert (first["counter"], first["bucket"]) == ({"S": "orders"}, {"S": "D#UTC@2026-11-01"})
    assert first["missing_at_most"] == {"S": "3"} and again["missing_at_most"] == {"S": "5"}
    assert first["ttl"] == {"N": "1900000000"} and "ttl" not in again
