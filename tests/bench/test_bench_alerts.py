"""What alerts add to the write path, as the bench meters it."""

from __future__ import annotations

from bench import alerts
from bench.cost import value_size


def test_a_segment_without_crossings_reads_states_and_one_range_of_minutes_a_counter():
    one = alerts.measure(1, crossing=False)
    hundred = alerts.measure(100, crossing=False)
    # One consistent BatchGetItem of states per 100 counters, and one Query a counter of the minutes its
    # windows hold: one read unit for a few minutes' items.
    assert (one["read_requests_per_1000_events"], one["read_units_per_1000_events"]) == (2.0, 2.0)
    assert (hundred["read_requests_per_1000_events"], hundred["read_units_per_1000_events"]) == (101.0, 200.0)
    assert hundred["write_requests_per_1000_events"] == hundred["put_events_requests_per_1000_events"] == 0


def test_every_crossing_costs_a_conditional_write_a_put_and_the_write_that_clears_pending():
    crossing = alerts.measure(100, crossing=True)
    assert crossing["crossings"] == 100
    assert crossing["write_requests_per_1000_events"] == 200.0  # the change and the clearing of pending, per crossing
    assert crossing["put_events_requests_per_1000_events"] == 10.0  # PutEvents takes 10 events a request


def test_a_boolean_weighs_one_byte():
    assert value_size({"BOOL": True}) == 1


def test_the_meter_counts_every_read_of_queries_sent_at_once():
    """The watcher sends a commit's minute Queries from a pool of threads: the meter must lose none of them,
    however the threads interleave (switching as often as Python allows makes a lost update likely)."""
    import sys
    from concurrent.futures import ThreadPoolExecutor

    class Empty:
        def query(self, **request):
            return {"Items": []}

    meter = alerts.ReadMeter(Empty())
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda _: meter.query(TableName="t"), range(20_000)))
    finally:
        sys.setswitchinterval(interval)
    assert (meter.query_requests, meter.read_units) == (20_000, 20_000.0)  # an empty Query costs one unit
