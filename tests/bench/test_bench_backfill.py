"""The backfill workload: a month of history reaching the stream at once, metered for both designs."""

from __future__ import annotations

from bench import workloads, writes
from tally.core.settings import Settings
from tally.core.units import DAY_MS
from tally.local.delivery import DeliveryConfig

SETTINGS = Settings()
CONFIG = DeliveryConfig(batch_size=1000, window_seconds=60)


def test_backfill_records_arrive_at_once_after_the_history_they_carry():
    workload = workloads.backfill(counters=2, days=30, total=300, per_second=100)
    arrivals = list(workload.counted_arrivals())
    assert len(arrivals) == workload.total == 300
    first_arrival = arrivals[0][2]
    assert all(event_ms < first_arrival for _, event_ms, _ in arrivals)
    assert arrivals[-1][2] - first_arrival < 3_000  # 300 records at 100 a second
    assert first_arrival - min(ms for _, ms, _ in arrivals) > 29 * DAY_MS


def test_backfill_writes_each_old_event_into_its_hour_alone_and_matches_the_floor():
    workload = workloads.backfill(counters=2, days=30, total=400, per_second=100)
    result = writes.measure(workload, SETTINGS, CONFIG)
    # 28 of the 30 days are past the 48 h minute retention when they arrive.
    assert 0.85 * 400 < result["events_in_hour_only"] < 400
    assert result["tally"]["bucket_writes"] == result["floor"]["writes"]
    assert result["origin"]["item_writes"] == 2 * 400
    counting_units = result["tally"]["write_units"] - result["tally"]["directory_write_units"]
    assert result["origin"]["write_units"] > counting_units
    # The directory: one entry per counter and day of history (2 x 31 here: sparse history pays most for it).
    days = {(name, ms // DAY_MS) for name, ms, _ in workload.counted_arrivals()}
    assert result["tally"]["directory_writes"] == len(days)
