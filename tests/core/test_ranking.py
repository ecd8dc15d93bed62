"""Rank levels and records, and the certified top N against brute force (the steps driven in memory)."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings as hypothesis_settings, strategies as st

from tally.core.buckets import Bucket
from tally.core.ranking import (
    MAX_TOP,
    RANK_FLOOR,
    CountExactly,
    ListNames,
    RankRecord,
    ReadRanks,
    TopBudget,
    crossed_level,
    level_cap,
    level_floor,
    level_of,
    lowest_level,
    rank_item,
    rank_partition,
    top_steps,
    window_hours,
)
from tally.core.settings import DAY_MS, HOUR_MS, Settings
from tally.core.windows import parse_instant

MIDNIGHT = parse_instant("2026-11-23T00:00:00Z")
DAY = MIDNIGHT // DAY_MS
H0 = MIDNIGHT // HOUR_MS


def test_levels_grow_by_half_from_the_floor_and_cover_every_count_once():
    assert level_of(RANK_FLOOR - 1) is None and level_of(0) is None
    assert [level_of(c) for c in (8, 11, 12, 17, 18, 26, 27)] == [0, 0, 1, 1, 2, 2, 3]
    for level in range(200):
        assert level_of(level_floor(level)) == level == level_of(level_cap(level))
        assert level_cap(level) + 1 == level_floor(level + 1) == level_floor(level) * 3 // 2
        assert 2 * level_cap(level) < 3 * level_floor(level)  # a record bounds its count within a factor of 1.5
    assert level_of(10**38 - 1) < 1000  # three digits in the sort key hold every level of a DynamoDB number


@pytest.mark.parametrize(
    ("after", "added", "level"),
    [(7, 7, None), (8, 8, 0), (8, 1, 0), (9, 1, None), (30, 10, 3), (100, 90, 6), (100, 5, None), (202, 1, 8), (203, 1, None)],
)
def test_an_update_records_the_level_it_carried_its_item_into_once(after, added, level):
    assert crossed_level(after, added) == level


def test_with_more_lanes_items_are_ranked_from_a_higher_level_of_the_same_levels():
    assert [lowest_level(lanes) for lanes in (1, 2, 3, 4, 8, 16, 32)] == [0, 0, 1, 2, 4, 6, 7]
    assert [level_floor(lowest_level(lanes)) for lanes in (1, 4, 8, 16, 32)] == [8, 18, 40, 90, 135]
    assert level_of(89, 16) is None and level_of(90, 16) == 6 == level_of(90) and level_of(89) == 5
    assert crossed_level(60, 60, 16) is None and crossed_level(95, 10, 16) == 6 and crossed_level(95, 4, 16) is None
    assert crossed_level(140, 50, 16) == 7  # past the lowest level, each level is crossed as with one lane


def test_items_without_records_are_bounded_by_the_floor_of_the_readers_lanes():
    """Four lanes rank from 18: a partition read to its end bounds every unseen item by 17, in each lane."""
    rng = random.Random(5)
    hours = list(range(H0, H0 + 4))
    world = World(rng, 400, hours, set(hours), 4, 50.0)
    for key in world.items:
        world.items[key] = 17  # the most an item of four lanes counts without a record
    world.records = []
    world.total = {c: sum(v for (name, _, _), v in world.items.items() if name == c) for c in world.total}
    result = check(world, "", 5, False, TopBudget(directory_names=100))
    assert not result.exact and result.bound == len(hours) * 4 * (level_floor(lowest_level(4)) - 1) == 4 * 4 * 17


def test_a_rank_record_names_its_day_level_hour_lane_and_counter_and_lives_as_long_as_the_hour():
    settings = Settings()
    hour = Bucket.of_hour(H0 + 13)
    item = rank_item("views/p#1", hour, 3, 4, settings)
    assert item == {
        "pk": {"S": "#ranks#2026-11-23"},
        "sk": {"S": "004#13#03#views/p#1"},
        "ttl": {"N": str(hour.ttl_seconds(settings))},
    }
    assert rank_partition(DAY) == "#ranks#2026-11-23"
    assert RankRecord.parse(item["pk"]["S"], item["sk"]["S"]) == RankRecord("views/p#1", H0 + 13, 3, 4)


def test_the_hours_of_a_window_are_those_that_can_hold_data_and_whole_ones_are_told_apart():
    settings = Settings(max_clock_skew_ms=0)
    first, last = (MIDNIGHT - 30 * 60_000) // 60_000, (MIDNIGHT + 90 * 60_000) // 60_000 - 1  # 23:30 to 01:29
    hours, full = window_hours(first, last, MIDNIGHT + 2 * HOUR_MS, settings)
    assert hours == [H0 - 1, H0, H0 + 1] and full == {H0}
    hours, _ = window_hours(first, last, MIDNIGHT + 10 * 60_000, settings)
    assert hours == [H0 - 1, H0]  # 01:00 cannot hold data yet


class World:
    """Counters' counts per (hour, lane) item, their records as commits leave them, and the window's true totals."""

    def __init__(self, rng: random.Random, counters: int, hours: list[int], full: set[int], lanes: int, skew: float):
        self.hours, self.full, self.lanes = hours, full, lanes
        self.items: dict[tuple[str, int, int], int] = {}
        self.total: dict[str, int] = {}
        self.previous: dict[str, int] = {}
        for index in range(counters):
            name = f"{rng.choice(['views/', 'views/x', 'jobs/'])}{index:04d}"
            weight = rng.paretovariate(skew)
            total = 0
            for hour in hours:
                for lane in range(lanes):
                    if rng.random() < 0.3:
                        continue
                    count = int(rng.expovariate(1 / (weight * rng.choice([1, 4, 20]))))
                    if count:
                        self.items[(name, hour, lane)] = count
                        # A partly covered hour adds only the share of its minutes in the window.
                        total += count if hour in full else rng.randint(0, count)
            self.total[name] = total
            self.previous[name] = int(rng.expovariate(1 / (weight * 30)))
        self.listings = 0  # ListNames steps driven
        self.records: list[RankRecord] = []
        for (name, hour, lane), count in self.items.items():
            level = level_of(count, lanes)
            if level is not None:  # the invariant: its own level, and some of the levels below, crossed earlier
                self.records += [RankRecord(name, hour, lane, lower) for lower in range(level) if rng.random() < 0.5]
                self.records.append(RankRecord(name, hour, lane, level))

    def drive(self, prefix: str, n: int, rising: bool, budget: TopBudget):
        partitions: dict[str, list[RankRecord]] = {}
        for record in self.records:
            partitions.setdefault(rank_partition(record.hour * HOUR_MS // DAY_MS), []).append(record)
        for records in partitions.values():
            records.sort(key=lambda r: (r.level, r.hour % 24, r.lane, r.counter), reverse=True)  # DynamoDB's order
        steps = top_steps(prefix, n, hours=self.hours, full_hours=self.full, lanes=self.lanes, rising=rising, budget=budget)
        reply, counted = None, []
        try:
            while True:
                step = steps.send(reply)
                if isinstance(step, ReadRanks):
                    records = partitions.get(step.partition, [])
                    start = 0 if step.start_key is None else int(step.start_key)
                    page = records[start : start + step.limit]
                    reply = (page, str(start + step.limit) if start + step.limit < len(records) else None)
                elif isinstance(step, CountExactly):
                    counted += step.counters
                    reply = {c: (self.total[c], self.previous[c]) if rising else self.total[c] for c in step.counters}
                else:
                    assert isinstance(step, ListNames)
                    self.listings += 1
                    names = sorted({name for (name, _, _) in self.items if name.startswith(prefix)})
                    reply = (names[: step.limit], len(names) > step.limit)
        except StopIteration as done:
            return done.value, counted


def brute_force(world: World, prefix: str, n: int, rising: bool) -> list[tuple[str, int]]:
    value = {c: world.total[c] - (world.previous[c] if rising else 0) for c in world.total if c.startswith(prefix)}
    return sorted(((c, v) for c, v in value.items() if v > 0), key=lambda e: (-e[1], e[0]))


def check(world: World, prefix: str, n: int, rising: bool, budget: TopBudget = TopBudget()):
    result, counted = world.drive(prefix, n, rising, budget)
    truth = brute_force(world, prefix, n, rising)
    listed = [(e.counter, e.value) for e in result.entries]
    assert all(e.total == world.total[e.counter] for e in result.entries)  # every total exact
    assert len(set(counted)) == len(counted)  # nobody counted twice
    if result.exact:
        assert result.bound is None and listed == truth[:n]
    else:
        assert result.bound is not None and result.bound >= 0
        left_out = [v for c, v in truth if c not in {e.counter for e in result.entries}]
        assert all(v <= result.bound for v in left_out), (result.bound, left_out[:5])
        assert [e for e in truth if e[1] > result.bound] == [e for e in listed if e[1] > result.bound]
        assert listed == sorted(listed, key=lambda e: (-e[1], e[0])) and len(listed) <= n
    return result


@hypothesis_settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10**9),
    counters=st.integers(0, 60),
    n=st.integers(1, 12),
    lanes=st.sampled_from([1, 1, 2, 4]),
    start_hour=st.integers(-30, 30),
    hours=st.integers(1, 30),
    partial=st.booleans(),
    skew=st.sampled_from([0.6, 1.0, 2.0, 8.0]),
    prefix=st.sampled_from(["", "views/", "views/x", "jobs/", "nothing/"]),
    rising=st.booleans(),
    budget=st.sampled_from(
        [
            TopBudget(),
            TopBudget(rank_pages=1, first_page=4, counted=3, directory_names=5),
            TopBudget(rank_records=10, first_page=3, counted=0, directory_names=0),
        ]
    ),
)
def test_an_exact_top_is_brute_force_and_an_inexact_one_keeps_every_counter_above_its_bound(
    seed, counters, n, lanes, start_hour, hours, partial, skew, prefix, rising, budget
):
    rng = random.Random(seed)
    window = list(range(H0 + start_hour, H0 + start_hour + hours))
    full = set(window[1:-1] if partial else window)
    world = World(rng, counters, window, full, lanes, skew)
    check(world, prefix, n, rising, budget)


def test_a_skewed_prefix_is_exact_from_its_records_alone_counting_little_more_than_n():
    rng = random.Random(7)
    hours = list(range(H0, H0 + 24))
    world = World(rng, 3000, hours, set(hours), 1, 0.9)
    result = check(world, "views/", 10, False, TopBudget(directory_names=5))
    assert result.exact and result.counted <= 30 and result.rank_records < len(world.records)


def test_a_flat_prefix_of_many_counters_below_the_floor_is_inexact_with_the_floor_as_its_bound():
    rng = random.Random(3)
    hours = list(range(H0, H0 + 4))
    world = World(rng, 400, hours, set(hours), 1, 50.0)  # every item counts a few: nothing reaches the floor
    for key in world.items:
        world.items[key] = 1
    world.records = []
    world.total = {c: sum(1 for (name, _, _) in world.items if name == c) for c in world.total}
    result = check(world, "", 5, False, TopBudget(directory_names=100))
    assert not result.exact and result.bound == 4 * (RANK_FLOOR - 1)


def test_a_flat_prefix_reads_its_records_budget_counts_only_the_n_it_lists_and_lists_no_directory():
    rng = random.Random(11)
    hours = list(range(H0, H0 + 6))
    world = World(rng, 600, hours, set(hours), 1, 50.0)
    for key in world.items:
        world.items[key] = 100 + rng.randrange(30)  # every item on level 6 (90 to 134)
    world.records = [RankRecord(name, hour, lane, level_of(count)) for (name, hour, lane), count in world.items.items()]
    world.total = {c: sum(v for (name, _, _), v in world.items.items() if name == c) for c in world.total}
    budget = TopBudget(rank_records=700, directory_names=250)
    result = check(world, "", 10, False, budget)
    # More contenders than the room left to count: only the 10 listed are counted; more names than a
    # prefix counted whole has were seen in the records, so no directory listing either.
    assert not result.exact and result.rank_records == 700 and result.counted == 10 and world.listings == 0


def test_a_prefix_with_few_counters_is_counted_whole_and_exact_even_below_the_floor():
    rng = random.Random(5)
    hours = list(range(H0, H0 + 3))
    world = World(rng, 12, hours, set(hours), 2, 50.0)
    world.records = []  # nobody reached the floor
    result = check(world, "", 20, False)
    assert result.exact and len(result.entries) == sum(1 for v in world.total.values() if v > 0)


@pytest.mark.parametrize("n", [0, MAX_TOP + 1])
def test_n_is_from_1_to_1000(n):
    with pytest.raises(ValueError, match="n must be from 1 to 1000"):
        next(top_steps("", n, hours=[H0], full_hours=[H0], lanes=1))


def test_a_counter_left_out_that_could_tie_the_nth_total_leaves_the_answer_uncertified():
    """Ties rank by name: a counter without a record that could equal the n-th total might list before it."""
    hours = [H0]
    world = World(random.Random(1), 0, hours, set(), 1, 1.0)  # the hour is covered in part
    cap = level_floor(lowest_level(1)) - 1  # the most an hour item without a record can hold
    world.items = {("b", H0, 0): cap + 1, ("a", H0, 0): cap}  # only b's item has a record
    world.records = [RankRecord("b", H0, 0, level_of(cap + 1))]
    world.total = {"b": cap, "a": cap}  # b's window share ties a's whole hour; a wins the tie by name
    world.previous = {"a": 0, "b": 0}
    uncertified = check(world, "", 1, False, TopBudget(directory_names=0))
    assert not uncertified.exact and uncertified.bound == cap
    counted_whole = check(world, "", 1, False)  # few names: the directory's are counted, and a is first
    assert counted_whole.exact and [(e.counter, e.total) for e in counted_whole.entries] == [("a", cap)]
