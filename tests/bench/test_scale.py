"""The scale model's DynamoDB: limits, watermarks and write units by DynamoDB's rules, and its simulation."""

from __future__ import annotations

import random

import pytest

from bench.cost import item_size, number_size, write_units
from bench.scale import (
    SECONDS_FOLLOWED_AFTER_LAST_WINDOW,
    SHARDS_PER_LANE,
    SPREAD_DIRECTORY,
    START_MS,
    TABLE,
    WINDOW_SECONDS,
    CounterMix,
    Latency,
    Limits,
    Scenario,
    Simulation,
    SimulatedTable,
    folded,
    lanes_for,
    measure,
    percentile,
)
from tally.core.buckets import Bucket
from tally.core.item_growth import ITEM_GROWTH_KB
from tally.core.commit import Outcome, Writer, segment_updates
from tally.core.retry import Backoff
from tally.core.segments import Segment
from tally.core.sketch_writes import sketch_key
from tally.core.settings import Settings
from tally.core.units import DAY_MS, HOUR_MS, MINUTE_MS

T0 = 1_795_428_000_000
MINUTE = Bucket.of_minute(T0 // MINUTE_MS)
HOUR = Bucket.of_hour(T0 // HOUR_MS)
HOT_ONLY = CounterMix("one counter", hot_share=1.0, tail=1)
FIXED = Latency(update_median_seconds=0.005, sigma=0.0)


def updates(first: str, counters: list[str], *, delta: int = 1, shard: str = "shardId-1", hour: bool = False):
    """tally's own updates of one segment: a minute (and the hour) per counter, from one shard."""
    deltas = {(counter, MINUTE): delta for counter in counters}
    if hour:
        deltas.update({(counter, HOUR): delta for counter in counters})
    segment = Segment(first, T0, first, delta, deltas)
    hours, minutes = segment_updates(segment, Writer.of_shard("arn", shard), TABLE, Settings())
    return hours + minutes


def test_an_item_takes_at_most_its_write_units_per_second_and_refills():
    table = SimulatedTable(FIXED, Limits(item_write_units_per_second=1000, partition_write_units_per_second=10**9))
    for n in range(1000):  # a second's burst: 1,000 updates of 1 unit
        assert table.update(n * 1e-6, updates(str(n + 1), ["hot"])[0])[1].outcome is Outcome.APPLIED
    assert table.update(0.001, updates("1001", ["hot"])[0])[1].outcome is Outcome.RETRY
    assert table.update(0.003, updates("1002", ["hot"])[0])[1].outcome is Outcome.APPLIED  # 2 ms refill 2 units
    assert table.stats.throttled == 1 and table.stats.applied == 1001
    assert table.count(("hot", MINUTE.sort_key)) == 1001


def test_a_partition_takes_at_most_its_write_units_per_second_over_all_its_items():
    table = SimulatedTable(FIXED, Limits(item_write_units_per_second=10**9, partition_write_units_per_second=1000))
    for n in range(500):  # the minute and the hour of one counter: one partition key
        for update in updates(str(n + 1), ["hot"], hour=True):
            assert table.update(n * 1e-6, update)[1].outcome is Outcome.APPLIED
    assert [table.update(0.001, u)[1].outcome for u in updates("501", ["hot"], hour=True)] == [Outcome.RETRY] * 2
    assert table.update(0.001, updates("502", ["cold"])[0])[1].outcome is Outcome.APPLIED  # other partitions are not affected


def test_items_grow_with_a_watermark_per_shard_and_cost_the_larger_of_before_and_after():
    table = SimulatedTable(FIXED)
    [first] = updates("100000000000000000001", ["a"])
    table.update(0.0, first)
    created = {
        "pk": {"S": "a"},
        "sk": {"S": MINUTE.sort_key},
        "count": {"N": "1"},
        "ttl": first.request["ExpressionAttributeValues"][":ttl"],
        first.tag: {"B": first.request["ExpressionAttributeValues"][":to"]["B"]},
    }
    assert table.sizes[("a", MINUTE.sort_key)] == item_size(created)
    assert table.stats.write_units == 1
    for shard in range(100):  # a hundred shards write the item: one watermark each
        table.update(1.0, updates("100000000000000000002", ["a"], shard=f"shardId-{shard + 2}")[0])
    size = table.sizes[("a", MINUTE.sort_key)]
    watermarks = 100 * (len(first.tag) + len(first.request["ExpressionAttributeValues"][":to"]["B"]))
    assert size == item_size(created) - number_size(1) + number_size(101) + watermarks
    assert size > 1024 and table.stats.largest_item_bytes == size
    units = table.stats.write_units
    table.update(2.0, updates("100000000000000000003", ["a"])[0])  # the first shard again: a larger item
    assert table.stats.write_units == units + write_units(size)


def test_an_update_its_watermark_shows_applied_changes_nothing_and_costs_the_item():
    table = SimulatedTable(FIXED)
    table.update(0.0, updates("100000000000000000200", ["a"])[0])
    assert table.update(1.0, updates("100000000000000000200", ["a"])[0])[1].outcome is Outcome.TAKEN
    assert table.update(1.0, updates("100000000000000000100", ["a"])[0])[1].outcome is Outcome.TAKEN
    assert table.count(("a", MINUTE.sort_key)) == 1
    assert (table.stats.already_applied, table.stats.write_units) == (2, 3)


def test_the_model_refuses_writes_tally_does_not_make():
    [update] = updates("1", ["a"])
    update.request["ExpressionAttributeNames"]["#a1"] = "sum"
    with pytest.raises(ValueError, match="only runs tally's count updates"):
        SimulatedTable().update(0.0, update)


def test_shards_on_the_same_buckets_are_throttled_retry_through_tallys_policy_and_count_exactly():
    scenario = Scenario(shards=20, events_per_second=200, windows=2, mix=HOT_ONLY)
    table = SimulatedTable(Latency(), Limits(partition_write_units_per_second=10), random.Random(1))
    stats = Simulation(scenario, table, lanes=2).run()  # raises if any event were lost or doubled
    assert stats.events > 20_000 and len(stats.commit_seconds) == 40
    assert table.stats.throttled > 0 and stats.retries == table.stats.throttled
    assert stats.failed_retries_exhausted == stats.failed_timeout == 0


def test_a_commit_that_gives_up_fails_its_invocation_and_the_lambda_retry_completes_it():
    # Eight units a second for sixteen updates: some shards must wait for a Lambda retry. A retry
    # pays again for what it applied before (a refused condition is charged), and still gets through.
    table = SimulatedTable(FIXED, Limits(partition_write_units_per_second=8, burst_seconds=1.0))
    one_try = lambda: Backoff(attempts=1)  # noqa: E731
    simulation = Simulation(Scenario(shards=4, events_per_second=40, windows=1, mix=HOT_ONLY), table, 1, schedule=one_try)
    stats = simulation.run()
    assert stats.failed_retries_exhausted >= 2
    assert table.stats.already_applied > 0  # the retries found their hours applied
    assert max(stats.commit_seconds) > 1.0
    assert table.stats.throttled > 0 and len(stats.commit_seconds) == 4


def test_an_invocation_past_the_function_timeout_fails_and_is_retried():
    slow = Latency(update_median_seconds=19.0, sigma=0.3)  # three round trips of about 19 s each: hours, rank records, minutes
    patient = lambda: Backoff(attempts=10_000, cap_seconds=1.0)  # noqa: E731
    simulation = Simulation(Scenario(shards=4, events_per_second=40, windows=1, mix=HOT_ONLY), SimulatedTable(slow), 1, schedule=patient)
    stats = simulation.run()
    assert stats.failed_timeout >= 1 and stats.failed_retries_exhausted == 0
    assert len(stats.commit_seconds) == 4


def test_a_run_that_does_not_keep_up_stops_after_its_last_window_counting_what_it_left_uncommitted():
    # Two units a second for a hot counter's items: each window needs more than the run is followed for.
    table = SimulatedTable(FIXED, Limits(item_write_units_per_second=2, partition_write_units_per_second=2))
    scenario = Scenario(shards=40, events_per_second=400, windows=2, mix=HOT_ONLY)
    stats = Simulation(scenario, table, 1).run()  # raises if any event were doubled
    assert stats.stopped_at_seconds == 2 * WINDOW_SECONDS + SECONDS_FOLLOWED_AFTER_LAST_WINDOW
    assert 0 < stats.uncommitted_shard_windows < 80
    assert len(stats.commit_seconds) == 80 - stats.uncommitted_shard_windows
    stored = sum(count for (_, sk), count in table.counts.items() if sk.startswith("M#"))
    assert 0 < stored < stats.events  # applied in part, none twice


def test_a_stopped_runs_figures_say_never_where_a_shard_window_had_not_committed():
    slow = Limits(item_write_units_per_second=2, partition_write_units_per_second=2)
    figures = measure(Scenario(shards=40, events_per_second=400, windows=2, mix=HOT_ONLY), 1, latency=FIXED, limits=slow,
                      directory=SPREAD_DIRECTORY)
    assert figures["uncommitted_shard_windows"] > 0 and figures["stopped_at_seconds"] is not None
    assert figures["all_shards_committed_seconds"] is None and figures["p99_commit_seconds"] is None
    assert figures["exact"] is None
    # Each window's p99 counts its uncommitted shard windows too, not only those that committed.
    assert None in figures["p99_commit_seconds_by_window"]
    whole = measure(Scenario(shards=4, events_per_second=40, windows=2, mix=HOT_ONLY), 1, latency=FIXED)
    assert whole["uncommitted_shard_windows"] == 0 and whole["stopped_at_seconds"] is None and whole["exact"] is True


def test_write_units_count_the_windows_after_the_first():
    scenario = Scenario(shards=10, events_per_second=500, windows=2)
    every_window, steady = measure(scenario, 1), measure(scenario, 1, counted_from_window=1)
    assert every_window["write_units"] == steady["write_units"]  # the same run, counted differently
    assert steady["write_units_per_1000_events"] != every_window["write_units_per_1000_events"]


def test_figures_per_shard_count_name_what_the_bench_reports():
    figures = measure(Scenario(shards=10, events_per_second=50, windows=1), lanes_for(10))
    assert {"shards", "failed_invocations", "p99_commit_seconds", "write_units_per_1000_events", "largest_item_bytes"} <= figures.keys()
    assert figures["p50_commit_seconds"] <= figures["p99_commit_seconds"] <= figures["all_shards_committed_seconds"]
    assert figures["exact"] is True


def test_the_recommended_lanes_bound_the_shards_per_lane():
    assert lanes_for(1) == 1 and lanes_for(SHARDS_PER_LANE) == 1 and lanes_for(SHARDS_PER_LANE + 1) == 2
    assert lanes_for(1000) == min(32, -(-1000 // SHARDS_PER_LANE))


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
    key = sketch_key(("jobs/all", MINUTE), 0)
    _, stored = table.read_sketches(0.0, [key])
    assert stored == {key: None}
    _, first = table.write_sketches(0.01, [sketch_write(key, b"\x01" + b"a" * 8, None)])
    _, second = table.write_sketches(0.01, [sketch_write(key, b"\x01" + b"b" * 8, None)])  # read before the first
    assert first == [(SketchOutcome.WRITTEN, None)] and second == [(SketchOutcome.CONFLICT, b"\x01" + b"a" * 8)]
    assert table.stats.sketch_write_units == 2  # a failed condition costs its unit too
    assert table.stats.updates == 0 and table.sketches[key] == b"\x01" + b"a" * 8


def test_a_sketch_write_past_the_partitions_units_is_throttled_and_writes_nothing():
    from tally.core.sketch_writes import SketchOutcome

    table = SimulatedTable(FIXED, Limits(item_write_units_per_second=1, partition_write_units_per_second=1))
    keys = [sketch_key(("jobs/all", Bucket.of_minute(MINUTE.index + n)), 0) for n in range(3)]  # one lane's partition
    _, answers = table.write_sketches(0.0, [sketch_write(key, b"\x01" + b"a" * 8, None) for key in keys])
    assert [outcome for outcome, _ in answers] == [SketchOutcome.WRITTEN, SketchOutcome.RETRY, SketchOutcome.RETRY]
    assert table.stats.sketch_throttled == 2 and list(table.sketches) == keys[:1]


def test_each_lanes_sketch_writes_charge_the_lanes_partition_not_the_counters():
    from tally.core.sketch_writes import SketchOutcome

    table = SimulatedTable(FIXED, Limits(item_write_units_per_second=10**9, partition_write_units_per_second=1))
    _, answer = table.update(0.0, updates("1", ["jobs/all"])[0])  # the counter's partition: its one unit taken
    assert answer.outcome is Outcome.APPLIED
    keys = [sketch_key(("jobs/all", MINUTE), lane) for lane in range(3)]
    _, answers = table.write_sketches(0.0, [sketch_write(key, b"\x01" + b"a" * 8, None) for key in keys])
    assert [outcome for outcome, _ in answers] == [SketchOutcome.WRITTEN] * 3  # three lanes, three partitions
    assert set(table.partition_capacity) == {"jobs/all", *(pk for pk, _ in keys)}


def test_shards_merging_one_hot_distinct_counter_keep_every_value_once_however_they_race():
    scenario = Scenario(shards=20, events_per_second=400, windows=2, mix=HOT_ONLY, distinct=True)
    table = SimulatedTable(Latency(), Limits(), random.Random(3))
    simulation = Simulation(scenario, table, lanes_for(20))
    stats = simulation.run()  # raises unless every bucket's sketch is the sketch of the values generated in it
    assert table.stats.sketch_conflicts > 0 and table.stats.sketch_writes > 40
    assert len(simulation.expected_sketches) >= 4 and all(not s.exact for s in simulation.expected_sketches.values())
    assert stats.failed_retries_exhausted == stats.failed_timeout == 0
    figures = measure(Scenario(shards=5, events_per_second=25, windows=1, distinct=True), lanes_for(5))
    assert figures["sketch_writes"] > 0 and figures["sketch_write_units"] >= figures["sketch_writes"]


# --- the directory across midnight, and alerts ---------------------------------------------------


def midnight_scenario(shards: int, mix: CounterMix, per_second: float = 50.0):
    midnight = (START_MS // DAY_MS + 1) * DAY_MS
    return Scenario(shards=shards, events_per_second=per_second, windows=4, mix=mix, start_ms=midnight - 120_000,
                    warm=True), midnight // DAY_MS


def counters_written(simulation, day: int) -> set[str]:
    """The counters whose minutes of ``day`` the run stored."""
    return {
        counter
        for shard_window in folded(simulation.scenario).windows
        for segment in shard_window[2]
        for counter, bucket in segment.deltas
        if bucket.kind == "M" and bucket.start_ms // DAY_MS == day
    }


def test_across_midnight_the_directory_gets_an_entry_per_new_day_counter_only_from_the_new_day():
    from tally.core.directory import partition_of

    scenario, new_day = midnight_scenario(8, CounterMix("tail of 300", hot_share=0.3, tail=300))
    table = SimulatedTable(Latency(), Limits(), random.Random(5))
    simulation = Simulation(scenario, table, lanes=2, directory=SPREAD_DIRECTORY)
    stats = simulation.run()
    assert stats.directory_puts_by_window[0] == stats.directory_puts_by_window[1] == 0  # the day's hours exist
    listed = {sk for (pk, sk) in table.stored if pk.startswith("#counters#")}
    assert listed == counters_written(simulation, new_day) and len(listed) > 100
    assert all(pk == partition_of(new_day, sk) for (pk, sk) in table.stored if pk.startswith("#counters#"))
    # an entry per hour item created at most: one lane's creator each, never one per shard
    assert sum(stats.directory_puts_by_window.values()) <= 2 * len(listed)


def test_the_previous_directory_puts_every_counter_from_every_function_into_one_partition():
    from bench.scale import LEGACY_DIRECTORY
    from tally.core.directory import legacy_partition

    scenario, new_day = midnight_scenario(8, CounterMix("tail of 300", hot_share=0.3, tail=300))
    table = SimulatedTable(Latency(), Limits(), random.Random(5))
    simulation = Simulation(scenario, table, lanes=2, directory=LEGACY_DIRECTORY)
    stats = simulation.run()
    partitions = {pk for (pk, _sk) in table.stored if pk.startswith("#counters#")}
    assert partitions == {legacy_partition(new_day)}
    seen: dict[int, set[str]] = {}  # each function's counters of the new day
    for shard, _window, segments in folded(scenario).windows:
        for segment in segments:
            seen.setdefault(shard, set()).update(c for c, bucket in segment.deltas if bucket.start_ms // DAY_MS == new_day)
    assert sum(stats.directory_puts_by_window.values()) == sum(len(counters) for counters in seen.values())
    listed = {sk for (pk, sk) in table.stored if pk.startswith("#counters#")}
    assert listed == counters_written(simulation, new_day)
    assert table.stats.puts["directory"] > 2 * len(listed)  # the same entries, put by function after function


def test_a_throttled_directory_partition_fails_invocations_whose_retries_still_write_every_entry():
    from bench.scale import LEGACY_DIRECTORY

    scenario, new_day = midnight_scenario(8, CounterMix("tail of 300", hot_share=0.3, tail=300))
    table = SimulatedTable(Latency(), Limits(partition_write_units_per_second=40), random.Random(5))
    simulation = Simulation(scenario, table, lanes=2, directory=LEGACY_DIRECTORY)
    stats = simulation.run()  # raises if a count were lost or doubled by the retries
    assert stats.failed_retries_exhausted > 0 and table.stats.put_throttled["directory"] > 0
    assert {sk for (pk, sk) in table.stored if pk.startswith("#counters#")} == counters_written(simulation, new_day)


def test_this_releases_directory_entries_wait_out_throttling_the_previous_release_gave_up_on():
    """A function puts entries left unprocessed again on directory_backoff (30 tries): 20 throttled puts in a
    row still end written, where the previous release's plain backoff (8 tries) failed its invocation."""
    from bench.scale import LEGACY_DIRECTORY, SPREAD_DIRECTORY, directory_schedule
    from tally.core.commit import Put, RetriesExhausted, put_steps

    def put_through(schedule, throttled_puts: int) -> int:
        steps, reply, puts = put_steps([{"pk": {"S": "#counters#x"}}], schedule, "directory entries"), None, 0
        try:
            while True:
                step = steps.send(reply)
                puts += isinstance(step, Put)
                reply = (step.items if puts <= throttled_puts else []) if isinstance(step, Put) else None
        except StopIteration as done:
            return done.value

    assert put_through(directory_schedule(SPREAD_DIRECTORY), 20) == 1
    assert put_through(directory_schedule(LEGACY_DIRECTORY), 7) == 1
    with pytest.raises(RetriesExhausted, match="directory entries"):
        put_through(directory_schedule(LEGACY_DIRECTORY), 8)


def test_expected_directory_puts_a_day_by_design():
    from bench.scale import LEGACY_DIRECTORY, SPREAD_DIRECTORY, directory_puts_per_day

    hot = CounterMix("one", hot_share=1.0, tail=1)  # the tail's one counter takes no events
    for design in (LEGACY_DIRECTORY, SPREAD_DIRECTORY):
        assert directory_puts_per_day(hot, 1, 100.0, 1, design) == pytest.approx(1.0)
    assert directory_puts_per_day(hot, 64, 1000.0, 1, LEGACY_DIRECTORY) == pytest.approx(64)  # every function
    # one lane of 64 shards: a creator a hour among 64, 24 hours: about 20 distinct functions put it
    assert directory_puts_per_day(hot, 64, 1000.0, 1, SPREAD_DIRECTORY) == pytest.approx(64 * (1 - (63 / 64) ** 24))
    quiet = CounterMix("quiet", hot_share=0.0, tail=10)
    assert directory_puts_per_day(quiet, 10, 1e-9, 1, SPREAD_DIRECTORY) < 1e-3  # a counter without events: none


def test_a_million_counters_are_named_by_rank_and_share_every_event():
    from bench.scale import MILLION_MIX

    assert sum(MILLION_MIX.shares()) == pytest.approx(1.0) and len(MILLION_MIX.shares()) == 1_000_001
    names = MILLION_MIX.chooser()(random.Random(1), 1000)
    assert "jobs/all" in names and all(n == "jobs/all" or len(n) == len("counter-0000001") for n in names)


def test_alerts_at_many_shards_fire_once_per_crossing_counter_and_never_before_the_crossing_arrived():
    scenario = Scenario(shards=20, events_per_second=400, windows=3, alert_above=200)
    table = SimulatedTable(Latency(), Limits(), random.Random(3))
    simulation = Simulation(scenario, table, lanes_for(20))
    stats = simulation.run()  # raises unless every counter past the threshold got its alert
    assert 3 <= len(stats.alert_seconds) < len(simulation.alert[1])  # some of the alerted counters stay below
    assert all(0 < s < 3 * 60 for s in stats.alert_seconds)
    assert simulation.alert_writes == 2 * len(stats.alert_seconds)  # one change and one clearing each: no repeats
    figures = measure(scenario, lanes_for(20))
    assert figures["alerts_put"] == len(stats.alert_seconds)
    assert 0 < figures["p50_arrival_to_alert_seconds"] <= figures["p99_arrival_to_alert_seconds"]


def test_a_lane_of_300_shards_warns_naming_one_lane_per_64_shards_and_the_lanes_it_names_warn_no_more():
    """What the functions would measure (ReturnConsumedCapacity, as the model charges) and log: at 300 shards on
    one lane the hot items hold 300 watermarks, past ITEM_GROWTH_KB, and most warnings name lanes_for(300)."""
    scenario = Scenario(shards=300, events_per_second=1500, windows=2, mix=HOT_ONLY)
    one_lane = measure(scenario, 1)
    assert one_lane["largest_item_kb"] == write_units(one_lane["largest_item_bytes"]) > ITEM_GROWTH_KB
    assert one_lane["warned_invocations"] > 300 and one_lane["recommended_bucket_lanes"] == lanes_for(300) == 5
    lanes = measure(scenario, lanes_for(300))
    assert lanes["largest_item_kb"] <= ITEM_GROWTH_KB
    assert (lanes["warned_invocations"], lanes["recommended_bucket_lanes"]) == (0, None)
