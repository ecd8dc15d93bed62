"""The scale model's DynamoDB: conflicts, limits and write units by DynamoDB's rules, and its simulation."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.cost import item_size, write_units
from bench.scale import (
    TABLE,
    CommitConfig,
    CounterMix,
    Latency,
    Limits,
    Scenario,
    Simulation,
    SimulatedTable,
    after,
    measure,
    percentile,
)
from tally.core.buckets import Bucket
from tally.core.commit import Outcome, classify_cancellation, transact_items
from tally.core.retry import Backoff, commit_backoff
from tally.core.segments import Segment
from tally.core.settings import HOUR_MS, MINUTE_MS, Settings

T0 = 1_795_428_000_000
MINUTE = Bucket.of_minute(T0 // MINUTE_MS)
HOUR = Bucket.of_hour(T0 // HOUR_MS)
HOT_ONLY = CounterMix("one counter", hot_share=1.0, tail=1)
FIXED = Latency(lock_median_seconds=0.010, lock_seconds_per_item=0.0, lock_sigma=0.0, cancel_median_seconds=0.001)


def items(first: str, counters: list[str], delta: int = 1, source: str = "src", settings: Settings = Settings()) -> list:
    """tally's own TransactItems for one part: a marker (unique per ``first``) and a minute per counter."""
    segment = Segment(first, T0, first, delta, {(counter, MINUTE): delta for counter in counters})
    [part] = segment.parts()
    return transact_items(segment, 0, part, TABLE, source, settings)


@given(
    first=st.sets(st.sampled_from("abcdef"), min_size=1),
    second=st.sets(st.sampled_from("abcdef"), min_size=1),
    start=st.floats(min_value=0.0, max_value=0.03),
)
def test_a_conflict_happens_exactly_when_two_transactions_overlap_on_an_item(first, second, start):
    table = SimulatedTable(FIXED)
    answered, codes = table.transact(0.0, items("1", sorted(first)))
    assert codes is None and answered == pytest.approx(0.010)
    _, codes = table.transact(start, items("2", sorted(second)))
    overlapping = start < 0.010 and bool(first & second)
    assert (codes is not None) == overlapping
    if overlapping:
        # marker first, then the buckets in order: exactly the shared ones are named
        assert codes == ["None"] + ["TransactionConflict" if c in first else "None" for c in sorted(second)]
        assert classify_cancellation([{"Code": code} for code in codes]) is Outcome.RETRY
        assert table.stats.conflicts == 1 and table.stats.transactions == 1


def test_a_cancelled_transaction_locks_and_writes_nothing():
    table = SimulatedTable(FIXED)
    table.transact(0.0, items("1", ["a"]))
    table.transact(0.005, items("2", ["a", "b"]))  # conflicts on a
    assert table.transact(0.006, items("3", ["b"]))[1] is None  # b was never locked
    assert table.count(("a", MINUTE.sort_key)) == 1 and table.count(("b", MINUTE.sort_key)) == 1


def test_an_item_takes_at_most_its_write_units_per_second_and_refills():
    instant = Latency(lock_median_seconds=1e-7, lock_seconds_per_item=0.0, lock_sigma=0.0)
    table = SimulatedTable(instant, Limits(item_write_units_per_second=1000, partition_write_units_per_second=10**9))
    # each transaction: its own marker (2 units) and the same bucket (2 units); a second's burst is 1,000 units
    for n in range(500):
        assert table.transact(n * 1e-6, items(str(n), ["hot"]))[1] is None
    _, codes = table.transact(0.001, items("500", ["hot"]))
    assert codes == ["None", "ThrottlingError"]
    assert classify_cancellation([{"Code": code} for code in codes]) is Outcome.RETRY
    assert table.transact(0.003, items("500", ["hot"]))[1] is None  # 2 ms refill 2 units
    assert table.stats.throttled == 1 and table.stats.transactions == 501


def test_a_partition_takes_at_most_its_write_units_per_second_over_all_its_items():
    instant = Latency(lock_median_seconds=1e-7, lock_seconds_per_item=0.0, lock_sigma=0.0)
    table = SimulatedTable(instant, Limits(item_write_units_per_second=10**9, partition_write_units_per_second=1000))
    # minute and hour of one counter: one partition key, 4 units a transaction
    for n in range(250):
        segment = Segment(str(n), T0, str(n), 1, {("hot", MINUTE): 1, ("hot", HOUR): 1})
        assert table.transact(n * 1e-6, transact_items(segment, 0, segment.parts()[0], TABLE, "src", Settings()))[1] is None
    segment = Segment("x", T0, "x", 1, {("hot", MINUTE): 1, ("hot", HOUR): 1})
    _, codes = table.transact(0.001, transact_items(segment, 0, segment.parts()[0], TABLE, "src", Settings()))
    assert codes == ["None", "ThrottlingError", "ThrottlingError"]
    assert table.transact(0.001, items("y", ["cold"]))[1] is None  # other partitions are not affected


def test_write_units_follow_dynamodbs_rules_for_transactions():
    table = SimulatedTable(FIXED)
    first = items("1", ["a", "b"])
    table.transact(0.0, first)
    marker = first[0]["Put"]["Item"]
    assert table.stats.write_units == 3 * write_units(1, transactional=True) == 6  # 2 units per item under 1 KB
    assert table.sizes[("a", MINUTE.sort_key)] == item_size(
        {"pk": {"S": "a"}, "sk": {"S": MINUTE.sort_key}, "count": {"N": "1"}, "ttl": first[1]["Update"]["ExpressionAttributeValues"][":ttl"]}
    )
    assert table.sizes[(marker["pk"]["S"], marker["sk"]["S"])] == item_size(marker)
    # a marker over 1 KB costs 2 units per started KB
    big = items("2", ["a"])
    big[0]["Put"]["Item"]["last"] = {"S": "9" * 1500}
    table.transact(1.0, big)
    assert table.stats.write_units == 6 + 2 * 2 + 2
    # an update is charged for the larger of the item before and after; a cancelled attempt costs nothing
    table.transact(2.0, items("3", ["a"], delta=10**9))
    table.transact(2.001, items("4", ["a"]))
    assert table.stats.write_units == 6 + 6 + 4
    assert table.count(("a", MINUTE.sort_key)) == 2 + 10**9


def test_a_marker_that_exists_is_a_duplicate_and_changes_nothing():
    table = SimulatedTable(FIXED)
    table.transact(0.0, items("1", ["a"]))
    _, codes = table.transact(1.0, items("1", ["a"]))
    assert codes == ["ConditionalCheckFailed", "None"]
    assert classify_cancellation([{"Code": code} for code in codes]) is Outcome.DUPLICATE
    assert table.count(("a", MINUTE.sort_key)) == 1 and table.stats.duplicates == 1


def test_the_model_refuses_writes_tally_does_not_make():
    with pytest.raises(ValueError, match="only runs tally's own writes"):
        SimulatedTable().transact(0.0, [{"Delete": {"Key": {"pk": {"S": "a"}, "sk": {"S": "b"}}}}])


def test_shards_on_the_same_buckets_retry_through_tallys_policy_and_count_exactly():
    scenario = Scenario(shards=20, events_per_second=200, windows=2)
    table = SimulatedTable(Latency(), Limits(), random.Random(1))
    stats = Simulation(scenario, table, after(20)).run()  # raises if any event were lost or doubled
    assert stats.events > 20_000 and len(stats.commit_seconds) == 40
    assert table.stats.conflicts > 0 and stats.retries == table.stats.conflicts + table.stats.throttled
    assert stats.failed_retries_exhausted == stats.failed_timeout == 0


def test_a_commit_that_gives_up_fails_its_invocation_and_the_lambda_retry_completes_it():
    slow = Latency(lock_median_seconds=2.0, lock_seconds_per_item=0.0, lock_sigma=0.0)
    impatient = CommitConfig("one try", 1, lambda: Backoff(attempts=1))
    table = SimulatedTable(slow)
    stats = Simulation(Scenario(shards=4, events_per_second=40, windows=1, mix=HOT_ONLY), table, impatient).run()
    assert stats.failed_retries_exhausted >= 3  # three shards found the hot bucket locked
    assert max(stats.commit_seconds) > 3 * 2.0  # each waited for a Lambda retry
    assert table.stats.transactions == sum(1 for _ in stats.commit_seconds)  # one part each, committed once


def test_an_invocation_past_the_function_timeout_fails_and_is_retried():
    slow = Latency(lock_median_seconds=25.0, lock_seconds_per_item=0.0, lock_sigma=0.0)
    patient = CommitConfig("endless tries", 1, lambda: Backoff(attempts=10_000, cap_seconds=1.0))
    stats = Simulation(Scenario(shards=4, events_per_second=40, windows=1, mix=HOT_ONLY), SimulatedTable(slow), patient).run()
    assert stats.failed_timeout >= 1 and stats.failed_retries_exhausted == 0
    assert len(stats.commit_seconds) == 4


def test_figures_per_shard_count_name_what_the_bench_reports():
    figures = measure(Scenario(shards=10, events_per_second=50, windows=1), after(10))
    assert {"shards", "failed_invocations", "p99_commit_seconds", "write_units_per_1000_events"} <= figures.keys()
    assert figures["p50_commit_seconds"] <= figures["p99_commit_seconds"] <= figures["all_shards_committed_seconds"]
    assert figures["exact"] is True


def test_the_commit_schedule_the_model_runs_is_tallys():
    assert after(1000).schedule is commit_backoff and after(1000).bucket_lanes == 8
    assert after(1).bucket_lanes == 1


def test_nearest_rank_percentiles():
    assert percentile([3.0, 1.0, 2.0, 4.0], 0.5) == 2.0
    assert percentile(list(range(1, 101)), 0.99) == 99
    assert percentile([], 0.99) == 0.0


def sketch_write(key: tuple[str, str], merged: bytes, seen: bytes | None):
    from tally.core.sketch_writes import SketchWrite, sketch_update

    return SketchWrite(key, sketch_update(TABLE, key, merged, seen, 1))


def test_a_sketch_write_wins_only_over_what_it_read_and_a_loser_gets_the_item_as_it_is():
    from tally.core.sketch_writes import SketchOutcome

    table = SimulatedTable(FIXED)
    key = ("jobs/all", f"{MINUTE.sort_key}#d0")
    _, stored = table.read_sketches(0.0, [key])
    assert stored == {key: None}
    _, first = table.write_sketches(0.01, [sketch_write(key, b"\x01" + b"a" * 8, None)])
    _, second = table.write_sketches(0.01, [sketch_write(key, b"\x01" + b"b" * 8, None)])  # read before the first
    assert first == [(SketchOutcome.WRITTEN, None)] and second == [(SketchOutcome.CONFLICT, b"\x01" + b"a" * 8)]
    assert table.stats.sketch_write_units == 2  # a failed condition costs its unit too
    assert table.stats.transactions == 0 and table.sketches[key] == b"\x01" + b"a" * 8


def test_a_sketch_write_past_the_partitions_units_is_throttled_and_writes_nothing():
    from tally.core.sketch_writes import SketchOutcome

    table = SimulatedTable(FIXED, Limits(item_write_units_per_second=1, partition_write_units_per_second=1))
    keys = [("jobs/all", f"{MINUTE.sort_key}#d{lane}") for lane in range(3)]
    _, answers = table.write_sketches(0.0, [sketch_write(key, b"\x01" + b"a" * 8, None) for key in keys])
    assert [outcome for outcome, _ in answers] == [SketchOutcome.WRITTEN, SketchOutcome.RETRY, SketchOutcome.RETRY]
    assert table.stats.sketch_throttled == 2 and list(table.sketches) == keys[:1]


def test_shards_merging_one_hot_distinct_counter_keep_every_value_once_however_they_race():
    scenario = Scenario(shards=20, events_per_second=400, windows=2, mix=HOT_ONLY, distinct=True)
    table = SimulatedTable(Latency(), Limits(), random.Random(3))
    simulation = Simulation(scenario, table, after(20))
    stats = simulation.run()  # raises unless every bucket's sketch is the sketch of the values generated in it
    assert table.stats.sketch_conflicts > 0 and table.stats.sketch_writes > 40
    assert len(simulation.expected_sketches) >= 4 and all(not s.exact for s in simulation.expected_sketches.values())
    assert stats.failed_retries_exhausted == stats.failed_timeout == 0
    figures = measure(Scenario(shards=5, events_per_second=25, windows=1, distinct=True), after(5))
    assert figures["sketch_writes"] > 0 and figures["sketch_write_units"] >= figures["sketch_writes"]
