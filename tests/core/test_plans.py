"""Plans against a brute-force count, at every minute offset of the hour."""

import random
from collections import Counter

import pytest
from hypothesis import given, settings as hypothesis_settings, strategies as st

from tally.core.buckets import buckets_of
from tally.core.plans import PlanKind, WindowUnavailable, make_plan
from tally.core.sketches import Sketch, hash_of
from tally.core.settings import Settings
from tally.core.units import DAY_MS, HOUR_MS, MINUTE_MS
from tally.core.sums import sum_plan
from tally.core.windows import Window, parse_instant

SETTINGS = Settings()
NO_SKEW = Settings(max_clock_skew_ms=0)
HOUR0 = parse_instant("2024-03-28T13:00:00Z")
YEAR_END = parse_instant("2023-12-31T23:00:00Z")
LEAP_DAY_END = parse_instant("2028-02-29T23:00:00Z")
SECONDS_IN = 30_000


def bucket_store(events):
    """What the handler would have written: every event in its minute and its hour."""
    store = Counter()
    for ms in events:
        for bucket in buckets_of(ms):
            store[bucket.sort_key] += 1
    return store


def brute_force(events, window):
    return sum(1 for ms in events if window.covers(ms))


def random_events(rng, around_ms, spread_ms, n):
    return [around_ms - rng.randrange(spread_ms) for _ in range(n)]


@pytest.mark.parametrize("allow_transient", [False, True], ids=["isolated", "transient"])
@pytest.mark.parametrize("base", [HOUR0, YEAR_END, LEAP_DAY_END], ids=["mid-year", "year-end", "leap-day"])
@pytest.mark.parametrize("offset", range(60))
def test_both_plans_equal_brute_force_at_every_minute_offset(base, offset, allow_transient):
    rng = random.Random(offset)
    at = base + offset * MINUTE_MS + rng.randrange(MINUTE_MS)
    events = random_events(rng, at + HOUR_MS, 27 * HOUR_MS, 3000)
    events = [ms for ms in events if ms <= at + SETTINGS.max_clock_skew_ms]  # nothing beyond the skew exists yet
    store = bucket_store(events)
    window = Window.ending(at)
    for now in (at, at + 3 * HOUR_MS):  # ending now, and in the past
        for kind in PlanKind:
            plan = make_plan(window, now, SETTINGS, kind, allow_transient=allow_transient)
            assert sum_plan(plan, store).count == brute_force(events, window), (kind, now - at)


@pytest.mark.parametrize("offset", range(60))
def test_an_isolated_24h_window_is_at_most_83_keys_that_only_add_wherever_it_ends(offset):
    at = HOUR0 + offset * MINUTE_MS + SECONDS_IN  # "now" lies inside a minute
    window = Window.ending(at)
    for now, settings in ((at + 2 * HOUR_MS, SETTINGS), (at, NO_SKEW), (at, SETTINGS)):
        plan = make_plan(window, now, settings)
        assert plan.disjoint and len(plan.terms) <= 83
        assert len(make_plan(window, now, settings, PlanKind.RANGE).runs()) <= 3


@pytest.mark.parametrize("offset", range(60))
def test_the_transient_fast_path_reads_fewer_keys_for_a_24h_window(offset):
    at = HOUR0 + offset * MINUTE_MS + SECONDS_IN  # "now" lies inside a minute (on a boundary: one key more, below)
    window = Window.ending(at)
    past = make_plan(window, at + 2 * HOUR_MS, SETTINGS, allow_transient=True)
    now_no_skew = make_plan(window, at, NO_SKEW, allow_transient=True)
    now_default = make_plan(window, at, SETTINGS, allow_transient=True)
    assert len(past.terms) <= 83
    assert len(now_no_skew.terms) <= 54
    # Minutes an event stamped up to the skew ahead could already be in are subtracted, not assumed empty.
    assert len(now_default.terms) <= 54 + SETTINGS.max_clock_skew_ms // MINUTE_MS
    for now in (at, at + 2 * HOUR_MS):
        assert len(make_plan(window, now, SETTINGS, PlanKind.RANGE, allow_transient=True).runs()) <= 3


def test_worst_cases_are_reached():
    ends = [HOUR0 + m * MINUTE_MS + SECONDS_IN for m in range(60)]
    for now_after in (0, 2 * HOUR_MS):
        assert max(len(make_plan(Window.ending(at), at + now_after, SETTINGS).terms) for at in ends) == 83
    assert max(len(make_plan(Window.ending(at), at + 2 * HOUR_MS, SETTINGS, allow_transient=True).terms) for at in ends) == 83
    assert max(len(make_plan(Window.ending(at), at, NO_SKEW, allow_transient=True).terms) for at in ends) == 54


def test_now_exactly_on_a_minute_boundary_may_read_one_key_more():
    """The window ends before the current minute, which may already hold an event stamped now: it is subtracted."""
    at = HOUR0 + 29 * MINUTE_MS
    plan = make_plan(Window.ending(at), at, NO_SKEW, allow_transient=True)
    assert len(plan.terms) == 55
    assert plan.terms[-1].bucket.sort_key == "M#2024-03-28T13:29" and plan.terms[-1].sign == -1
    events = [at - 1, at]  # the last millisecond of the window, and the first after it
    assert sum_plan(plan, bucket_store(events)).count == 1


@pytest.mark.parametrize("allow_transient", [False, True], ids=["isolated", "transient"])
def test_a_window_ending_now_excludes_events_stamped_in_the_future_of_the_current_hour(allow_transient):
    at = HOUR0 + 20 * MINUTE_MS + SECONDS_IN
    events = [at - MINUTE_MS, at, at + 2 * MINUTE_MS, at + 4 * MINUTE_MS]  # two are ahead, within the skew
    plan = make_plan(Window.ending(at), at, SETTINGS, allow_transient=allow_transient)
    assert sum_plan(plan, bucket_store(events)).count == 2


def test_the_fast_path_reads_the_current_hour_whole_when_no_later_minute_can_hold_data():
    at = HOUR0 + 40 * MINUTE_MS + SECONDS_IN
    plan = make_plan(Window.ending(at), at, NO_SKEW, allow_transient=True)
    current = [t for t in plan.terms if t.bucket.hour_index == HOUR0 // HOUR_MS]
    assert [(t.bucket.sort_key, t.sign) for t in current] == [("H#2024-03-28T13", 1)]


def test_an_isolated_plan_reads_an_hour_whole_only_when_the_window_holds_all_its_minutes():
    at = HOUR0 + 40 * MINUTE_MS + SECONDS_IN
    plan = make_plan(Window.ending(at), at, NO_SKEW)  # ending now: later minutes hold nothing, yet may any moment
    current = [t.bucket.sort_key for t in plan.terms if t.bucket.hour_index == HOUR0 // HOUR_MS]
    assert current == [f"M#2024-03-28T13:{m:02d}" for m in range(41)]
    ahead = make_plan(Window.ending(HOUR0 + HOUR_MS), at, NO_SKEW)  # holds all of 13:00-13:59, ending in the future
    assert [t.bucket.sort_key for t in ahead.terms][-1] == "H#2024-03-28T13"


def test_the_fast_path_reads_a_partial_hour_over_30_minutes_as_hour_minus_the_rest():
    at = HOUR0 + 41 * MINUTE_MS  # exclusive: the window's last minute is 13:40
    plan = make_plan(Window.ending(at), at + DAY_MS, SETTINGS, allow_transient=True)
    current = [t for t in plan.terms if t.bucket.hour_index == HOUR0 // HOUR_MS]
    assert current[0].bucket.sort_key == "H#2024-03-28T13" and current[0].sign == 1
    assert [t.bucket.sort_key for t in current[1:]] == [f"M#2024-03-28T13:{m}" for m in range(41, 60)]
    assert all(t.sign == -1 for t in current[1:])
    isolated = make_plan(Window.ending(at), at + DAY_MS, SETTINGS)
    assert [t.bucket.sort_key for t in isolated.terms if t.bucket.hour_index == HOUR0 // HOUR_MS] == [
        f"M#2024-03-28T13:{m:02d}" for m in range(41)
    ]


def test_range_plan_prefers_one_run_inside_a_single_hour():
    at = HOUR0 + 55 * MINUTE_MS
    window = Window.ending(at, 50 * MINUTE_MS)  # minutes 05..54: hour minus 10 minutes in two runs, or one run
    batch = make_plan(window, at + DAY_MS, SETTINGS, PlanKind.BATCH, allow_transient=True)
    ranged = make_plan(window, at + DAY_MS, SETTINGS, PlanKind.RANGE, allow_transient=True)
    assert len(batch.terms) == 11
    assert len(ranged.runs()) == 1
    assert len(make_plan(window, at + DAY_MS, SETTINGS, PlanKind.RANGE).runs()) == 1


@pytest.mark.parametrize("allow_transient", [False, True], ids=["isolated", "transient"])
def test_windows_reaching_past_minute_retention_must_be_hour_aligned_there(allow_transient):
    now = HOUR0 + 17 * MINUTE_MS
    with pytest.raises(WindowUnavailable, match=r"minute retention.* at 2024-03-28T13:00Z\) .*align"):
        make_plan(Window.ending(now, 7 * DAY_MS), now, SETTINGS, allow_transient=allow_transient)
    aligned = Window.ending(HOUR0, 7 * DAY_MS)  # an end on the hour is exclusive: the window is whole hours
    plan = make_plan(aligned, now, SETTINGS, allow_transient=allow_transient)
    assert all(t.bucket.granularity.value == "H" for t in plan.terms)
    assert len(plan.terms) == 7 * 24


def test_windows_reaching_past_hour_retention_are_refused():
    now = HOUR0
    with pytest.raises(WindowUnavailable, match="hour retention"):
        make_plan(Window.ending(HOUR0, 100 * DAY_MS), now, SETTINGS)


def test_minutes_that_cannot_hold_data_yet_are_not_read():
    at = HOUR0 + 3 * HOUR_MS  # a window ending three hours from now
    for allow_transient in (False, True):
        plan = make_plan(Window.ending(at), HOUR0, NO_SKEW, allow_transient=allow_transient)
        assert max(t.bucket.start_ms for t in plan.terms) <= HOUR0


@hypothesis_settings(max_examples=150, deadline=None)
@given(
    offsets=st.lists(st.integers(0, 3 * DAY_MS), max_size=200),
    length_minutes=st.integers(1, 48 * 60),
    at_offset=st.integers(0, 3 * DAY_MS),
    age=st.integers(0, 30 * HOUR_MS),
    skew_minutes=st.integers(0, 10),
    kind=st.sampled_from(PlanKind),
    allow_transient=st.booleans(),
)
def test_any_window_any_events_equal_brute_force(offsets, length_minutes, at_offset, age, skew_minutes, kind, allow_transient):
    settings = Settings(max_clock_skew_ms=skew_minutes * MINUTE_MS, minute_retention_ms=72 * HOUR_MS)
    base = parse_instant("2023-12-30T00:00:00Z")
    at = base + at_offset
    now = at + age
    events = [base + o for o in offsets if base + o <= now + settings.max_clock_skew_ms]
    window = Window.ending(at, length_minutes * MINUTE_MS)
    try:
        plan = make_plan(window, now, settings, kind, allow_transient=allow_transient)
    except WindowUnavailable:
        assert window.start_ms + settings.minute_retention_ms < now + HOUR_MS
        return
    assert sum_plan(plan, bucket_store(events)).count == brute_force(events, window)


def sketch_store(events):
    """Every event's (distinct) time as a value, in its minute's and its hour's sketch."""
    store: dict[str, Sketch] = {}
    for ms in events:
        for bucket in buckets_of(ms):
            store.setdefault(bucket.sort_key, Sketch()).add(hash_of(ms))
    return store


@pytest.mark.parametrize("offset", range(0, 60, 7))
def test_an_isolated_plan_covers_the_window_with_disjoint_buckets_and_counts_distinct_values_exactly(offset):
    rng = random.Random(offset)
    at = HOUR0 + offset * MINUTE_MS + rng.randrange(MINUTE_MS)
    events = [ms for ms in random_events(rng, at + HOUR_MS, 27 * HOUR_MS, 80) if ms <= at]
    window = Window.ending(at)
    for now in (at, at + 3 * HOUR_MS):
        for kind in PlanKind:
            plan = make_plan(window, now, SETTINGS, kind)
            assert plan.disjoint and len(plan.terms) <= 23 + 60
            if kind is PlanKind.RANGE:
                assert len(plan.runs()) <= 3
            minutes = [m for t in plan.terms for m in range(t.bucket.start_ms // MINUTE_MS, t.bucket.end_ms // MINUTE_MS)]
            assert len(minutes) == len(set(minutes))  # no minute read twice
            totals = sum_plan(plan, bucket_store(events), sketches=sketch_store(events))
            assert totals.sketch.exact and totals.sketch.count() == brute_force(events, window)
            assert totals.count == brute_force(events, window)


def test_an_isolated_plan_of_24_hours_reads_at_most_23_hours_and_60_edge_minutes():
    # Its two partial hours hold 60 minutes between them: 83 keys, ending now or in the past.
    for now_after in (0, 3 * HOUR_MS):
        sizes = [
            len(make_plan(Window.ending(HOUR0 + m * MINUTE_MS + 1), HOUR0 + m * MINUTE_MS + 1 + now_after, SETTINGS).terms)
            for m in range(60)
        ]
        assert max(sizes) == 23 + 60
        assert min(sizes) == 24  # a window of whole hours


def test_a_plan_that_subtracts_cannot_sum_sketches():
    at = HOUR0 + 40 * MINUTE_MS
    plan = make_plan(Window.ending(at), at + DAY_MS, SETTINGS, allow_transient=True)
    assert not plan.disjoint
    with pytest.raises(ValueError, match="union plan"):
        sum_plan(plan, {}, sketches={})


def test_an_isolated_plan_keeps_the_retention_rule():
    now = HOUR0 + 17 * MINUTE_MS
    with pytest.raises(WindowUnavailable, match="minute retention"):
        make_plan(Window.ending(now, 7 * DAY_MS), now, SETTINGS)
    assert len(make_plan(Window.ending(HOUR0 - 1, 7 * DAY_MS), now, SETTINGS).terms) == 7 * 24
