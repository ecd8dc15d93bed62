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
    Ladder,
    TopBudget,
    UnrankedPrefix,
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
from tally.core.settings import Settings
from tally.core.units import DAY_MS, HOUR_MS
from tally.core.windows import parse_instant

MIDNIGHT = parse_instant("2026-11-23T00:00:00Z")
DAY = MIDNIGHT // DAY_MS
H0 = MIDNIGHT // HOUR_MS


def test_the_ladder_grows_by_half_and_records_every_fifth_level_from_202_then_every_level_from_11623():
    assert [level_floor(level) for level in range(9)] == [8, 12, 18, 27, 40, 60, 90, 135, 202]
    assert level_floor(1) * 2 == 3 * RANK_FLOOR
    assert level_of(201) is None and level_of(0) is None
    assert [level_of(c) for c in (202, 1530, 1531, 11622, 11623, 17433, 17434)] == [8, 8, 13, 13, 18, 18, 19]
    for level in (8, 13):
        assert level_of(level_floor(level)) == level == level_of(level_cap(level))
        assert level_cap(level) + 1 == level_floor(level + 5) and level_cap(level) < 8 * level_floor(level)  # 7.6-fold
    for level in range(18, 200):
        assert level_of(level_floor(level)) == level == level_of(level_cap(level))
        assert level_cap(level) + 1 == level_floor(level + 1) and 2 * level_cap(level) < 3 * level_floor(level)
    assert level_of(10**38 - 1) < 1000  # three digits in the sort key hold every level of a DynamoDB number


def test_a_record_of_any_level_0_2_wrote_is_capped_by_the_next_recorded_floor():
    """0.2.x recorded every level from 8: an item whose highest record is of level 10 counts below 1,531 (it
    would have a record of 13 otherwise), and one of level 3 below 202."""
    assert [level_cap(level) for level in (0, 3, 7, 8, 10, 12, 13, 16, 18, 19)] == [
        201, 201, 201, 1530, 1530, 1530, 11622, 11622, 17433, 26150
    ]
    assert all(level_floor(level) <= level_cap(level) for level in range(100))


@pytest.mark.parametrize(
    ("after", "added", "level"),
    [(201, 201, None), (202, 202, 8), (202, 1, 8), (203, 1, None), (1531, 1, 13), (1531, 1400, 13), (1600, 50, None),
     (20_000, 20_000, 19), (20_000, 19_000, 19), (30_000, 13_000, 20), (30_000, 3_000, None)],
)
def test_an_update_records_the_highest_level_it_carried_its_item_into_once(after, added, level):
    assert crossed_level(after, added) == level


def test_an_item_growing_60_fold_in_its_hour_gets_a_record_per_recorded_level_it_reaches_not_per_commit():
    counts = [minute * 200 for minute in range(1, 61)]  # 200 events a minute: 202 in the second, 12,000 in the last
    records = [crossed_level(after, 200) for after in counts]
    assert [level for level in records if level is not None] == [8, 13, 18]


def test_a_coarser_ladder_records_fewer_levels_and_bounds_looser():
    fine, coarse = Ladder(every=2), Ladder(every=5, fine_every=5)
    counts = range(100, 20_000, 100)
    assert sum(fine.crossed(c, 100) is not None for c in counts) > sum(coarse.crossed(c, 100) is not None for c in counts)
    assert fine.cap(8) < coarse.cap(8) and fine.cap(20) < coarse.cap(20) and lowest_level(fine) == lowest_level(coarse) == 8
    with pytest.raises(ValueError, match="fine_from must be lowest plus a whole number of steps"):
        Ladder(every=3)


def test_items_without_records_are_bounded_by_the_floor_of_the_readers_lanes():
    """A partition read to its end bounds every unseen item by 201, in each of its lanes."""
    rng = random.Random(5)
    hours = list(range(H0, H0 + 4))
    world = World(rng, 400, hours, set(hours), 4, 50.0)
    for key in world.items:
        world.items[key] = 201  # the most an item counts without a record
    world.records = []
    world.total = {c: sum(v for (name, _, _), v in world.items.items() if name == c) for c in world.total}
    result = check(world, "", 5, False, TopBudget(directory_names=100))
    assert not result.exact and result.bound == len(hours) * 4 * (level_floor(lowest_level()) - 1) == 4 * 4 * 201


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
                    count = int(rng.expovariate(1 / (weight * rng.choice([25, 100, 500]))))
                    if count:
                        self.items[(name, hour, lane)] = count
                        # A partly covered hour adds only the share of its minutes in the window.
                        total += count if hour in full else rng.randint(0, count)
            self.total[name] = total
            self.previous[name] = int(rng.expovariate(1 / (weight * 30)))
        self.listings = 0  # ListNames steps driven
        self.records: list[RankRecord] = []
        for (name, hour, lane), count in self.items.items():
            level = level_of(count)
            if level is not None:  # the invariant: its own level, and some of the levels below, crossed earlier
                self.records += [RankRecord(name, hour, lane, lower) for lower in range(level) if rng.random() < 0.5]
                self.records.append(RankRecord(name, hour, lane, level))

    def drive(self, prefix: str, n: int, rising: bool, budget: TopBudget, ranked: bool = True):
        partitions: dict[str, list[RankRecord]] = {}
        for record in self.records:
            partitions.setdefault(rank_partition(record.hour * HOUR_MS // DAY_MS), []).append(record)
        for records in partitions.values():
            records.sort(key=lambda r: (r.level, r.hour % 24, r.lane, r.counter), reverse=True)  # DynamoDB's order
        steps = top_steps(
            prefix, n, hours=self.hours, full_hours=self.full, lanes=self.lanes, rising=rising, budget=budget, ranked=ranked
        )
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


def check(world: World, prefix: str, n: int, rising: bool, budget: TopBudget = TopBudget(), ranked: bool = True):
    result, counted = world.drive(prefix, n, rising, budget, ranked)
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


EVERY_LEVEL_FROM_8 = Ladder(lowest=0, every=1, fine_from=0)  # what commits recorded before this ladder


def upgraded(world: World, rng: random.Random) -> World:
    """Half the items counted partly before the upgrade: every level from 8 up to their count then (and
    records of no level above, as commits then put them), then this ladder's record if the rest of their
    count carried them into a higher recorded level."""
    ranked = sorted({(r.counter, r.hour, r.lane) for r in world.records})
    legacy = {key for key in ranked if rng.random() < 0.5}
    records = [r for r in world.records if (r.counter, r.hour, r.lane) not in legacy]
    for name, hour, lane in sorted(legacy):
        count = world.items[(name, hour, lane)]
        before = rng.randint(0, count)
        old = EVERY_LEVEL_FROM_8.level_of(before)
        if old is not None:
            records += [RankRecord(name, hour, lane, level) for level in range(old + 1)]
        crossed = crossed_level(count, count - before)
        if crossed is not None:
            records.append(RankRecord(name, hour, lane, crossed))
    world.records = records
    return world


@hypothesis_settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10**9),
    counters=st.integers(1, 60),
    n=st.integers(1, 12),
    lanes=st.sampled_from([1, 2]),
    skew=st.sampled_from([0.6, 1.0, 2.0]),
    rising=st.booleans(),
)
def test_records_of_every_level_written_before_this_ladder_are_read_with_its_own_and_stay_certified(
    seed, counters, n, lanes, skew, rising
):
    rng = random.Random(seed)
    hours = list(range(H0, H0 + 6))
    world = upgraded(World(rng, counters, hours, set(hours), lanes, skew), rng)
    check(world, "views/", n, rising, TopBudget(directory_names=0))


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
    assert not result.exact and result.bound == 4 * (level_floor(lowest_level()) - 1) == 4 * 201


def test_a_flat_prefix_reads_its_records_budget_counts_only_the_n_it_lists_and_lists_no_directory():
    rng = random.Random(11)
    hours = list(range(H0, H0 + 6))
    world = World(rng, 600, hours, set(hours), 1, 50.0)
    for key in world.items:
        world.items[key] = 300 + rng.randrange(100)  # every item on level 8 (202 to 1,530)
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


def test_a_prefix_that_is_not_ranked_is_counted_whole_when_few_and_reads_no_record():
    rng = random.Random(8)
    hours = list(range(H0, H0 + 3))
    world = World(rng, 40, hours, set(hours), 1, 1.0)
    assert world.records  # some items passed the floor: an unranked prefix still reads none of them
    result = check(world, "views/", 5, False, ranked=False)
    assert result.exact and result.rank_records == 0 and world.listings == 1


def test_a_prefix_that_is_not_ranked_and_names_too_many_counters_is_refused_saying_how_to_rank_it():
    rng = random.Random(9)
    hours = list(range(H0, H0 + 3))
    world = World(rng, 400, hours, set(hours), 1, 1.0)
    with pytest.raises(UnrankedPrefix, match=r"prefix '' is not ranked .* rankedPrefixes, TALLY_RANKED_PREFIXES") as refused:
        world.drive("", 5, False, TopBudget(directory_names=100), ranked=False)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("n", [0, MAX_TOP + 1])
def test_n_is_from_1_to_1000(n):
    with pytest.raises(ValueError, match="n must be from 1 to 1000"):
        next(top_steps("", n, hours=[H0], full_hours=[H0], lanes=1))


def test_a_counter_left_out_that_could_tie_the_nth_total_leaves_the_answer_uncertified():
    """Ties rank by name: a counter without a record that could equal the n-th total might list before it."""
    hours = [H0]
    world = World(random.Random(1), 0, hours, set(), 1, 1.0)  # the hour is covered in part
    cap = level_floor(lowest_level()) - 1  # the most an hour item without a record can hold
    world.items = {("b", H0, 0): cap + 1, ("a", H0, 0): cap}  # only b's item has a record
    world.records = [RankRecord("b", H0, 0, level_of(cap + 1))]
    world.total = {"b": cap, "a": cap}  # b's window share ties a's whole hour; a wins the tie by name
    world.previous = {"a": 0, "b": 0}
    uncertified = check(world, "", 1, False, TopBudget(directory_names=0))
    assert not uncertified.exact and uncertified.bound == cap
    counted_whole = check(world, "", 1, False)  # few names: the directory's are counted, and a is first
    assert counted_whole.exact and [(e.counter, e.total) for e in counted_whole.entries] == [("a", cap)]
