import base64
import gc
import json
from decimal import Decimal

import pytest
from hypothesis import given, settings as hypothesis_settings, strategies as st

from factories import counter_record, stream_record
from tally.core.buckets import Bucket
from tally.core.records import MAX_COUNTER_LENGTH, CounterEvent, Reason, Rejection, parse_record
from tally.core.histograms import bin_of
from tally.core.sketches import SPARSE_LIMIT, Sketch, hash_of
from tally.core.segments import (
    MAX_ITEM_BINS,
    STATE_BUDGET_BYTES,
    HeldRecords,
    Segment,
    SegmentFolder,
    UnreadableState,
    contribution,
)
from tally.core.settings import Settings
from tally.core.units import HOUR_MS, MINUTE_MS

T0 = 1_795_000_000_000 - 1_795_000_000_000 % HOUR_MS  # an hour boundary


def event(counter, ms, seq, units=None):
    return CounterEvent(counter, ms, str(seq), ms, units)


def one_each(events):
    """Each event as the only outcome of its own record."""
    return [[e] for e in events]


def test_an_event_adds_one_to_its_minute_and_its_hour():
    assert contribution(event("c", T0 + 61_000, 1)) == (
        ("c", Bucket.of_minute((T0 + 61_000) // MINUTE_MS)),
        ("c", Bucket.of_hour(T0 // HOUR_MS)),
        None,
        None,
        None,
    )


def test_a_rejection_counts_under_its_reserved_counter_by_arrival_time():
    rejection = Rejection(Reason.LATE_EVENT, "old", "9", T0 + 5)
    minute, hour, units, bin, hashed = contribution(rejection)
    assert [minute[0], hour[0], units, bin, hashed] == ["#rejected#late_event"] * 2 + [None, None, None]
    assert contribution(rejection)[0][1] == Bucket.of_minute(T0 // MINUTE_MS)


def test_skips_and_unreadable_records_add_nothing():
    assert contribution(Rejection(Reason.NOT_INSERT, "REMOVE", "9", T0)) is None
    assert contribution(Rejection(Reason.MALFORMED_RECORD, "junk")) is None


def test_folding_sums_deltas_per_bucket_in_one_segment():
    folder = SegmentFolder()
    closed = list(folder.fold(one_each([event("a", T0, 1), event("a", T0 + 1, 2), event("b", T0 + MINUTE_MS, 3)])))
    assert closed == []
    segment = folder.close()
    assert (segment.first_sequence, segment.last_sequence, segment.records) == ("1", "3", 3)
    assert segment.deltas == {
        ("a", Bucket.of_minute(T0 // MINUTE_MS)): 2,
        ("a", Bucket.of_hour(T0 // HOUR_MS)): 2,
        ("b", Bucket.of_minute(T0 // MINUTE_MS + 1)): 1,
        ("b", Bucket.of_hour(T0 // HOUR_MS)): 1,
    }
    assert folder.close() is None


def test_a_segment_grows_to_many_items_and_lists_them_in_key_order():
    events = [event(f"c{i % 150}", T0 + (i % 7) * MINUTE_MS, i) for i in range(3000)]
    folder = SegmentFolder()
    assert list(folder.fold(one_each(events))) == []  # nothing closes early: one segment for all of them
    segment = folder.close()
    assert len(segment.deltas) == 150 * 8  # 7 minutes and the hour of each counter
    deltas = segment.ordered_deltas()
    assert sum(delta for _, delta, *_ in deltas) == 2 * len(events)
    keys = [(counter, bucket.sort_key) for (counter, bucket), *_ in deltas]
    assert keys == sorted(keys)  # a retry rebuilds the same updates


def test_each_bucket_is_written_once_per_segment_however_many_events_hit_it():
    events = [event("hot", T0 + i, i) for i in range(10_000)]
    folder = SegmentFolder()
    list(folder.fold(one_each(events)))
    hour, minute = ("hot", Bucket.of_hour(T0 // HOUR_MS)), ("hot", Bucket.of_minute(T0 // MINUTE_MS))
    assert folder.close().ordered_deltas() == [(hour, 10_000, None, None, None), (minute, 10_000, None, None, None)]


def test_a_segment_closes_early_at_its_item_limit(monkeypatch):
    monkeypatch.setattr("tally.core.segments.MAX_SEGMENT_ITEMS", 5)
    folder = SegmentFolder()
    closed = list(folder.fold(one_each([event("a", T0, 1), event("b", T0, 2), event("c", T0, 3), event("a", T0, 4)])))
    assert [(s.first_sequence, s.last_sequence, len(s.deltas)) for s in closed] == [("1", "2", 4)]
    assert (folder.open.first_sequence, folder.open.records, len(folder.open.deltas)) == ("3", 2, 4)


def test_a_folder_may_set_limits_of_its_own():
    events = one_each([event(f"c{i}", T0, i + 1) for i in range(10)])
    assert list(SegmentFolder().fold(events)) == []
    small = SegmentFolder(max_items=6)
    assert [len(s.deltas) for s in small.fold(events)] == [6, 6, 6]
    assert len(small.close().deltas) == 2

    tight = SegmentFolder(state_budget=1)
    assert len(list(tight.fold(events))) == 9  # every new counter outgrows a one-byte budget


def test_a_segment_closes_early_before_its_state_outgrows_the_budget():
    folder = SegmentFolder()
    name = "x" * (MAX_COUNTER_LENGTH - 6)
    events = [event(f"{name}{i:06d}", T0, i) for i in range(2000)]
    closed = list(folder.fold(one_each(events)))
    assert closed, "2,000 long counters cannot travel in one window state"
    for segment in [*closed, folder.open]:
        assert len(json.dumps(segment.to_state())) <= STATE_BUDGET_BYTES
    assert sum(s.records for s in [*closed, folder.open]) == 2000


def test_events_of_known_buckets_never_close_a_segment(monkeypatch):
    monkeypatch.setattr("tally.core.segments.MAX_SEGMENT_ITEMS", 4)
    folder = SegmentFolder()
    assert list(folder.fold(one_each([event("a", T0, 1), event("b", T0, 2)] + [event("a", T0, 3)] * 10))) == []
    assert folder.open.records == 12


def test_state_round_trips_through_json():
    folder = SegmentFolder()
    list(folder.fold(one_each([event("a", T0, 1), event("ü", T0 + HOUR_MS, 2)])))
    state = json.loads(json.dumps(folder.open.to_state()))
    assert Segment.from_state(state) == folder.open
    assert Segment.from_state(state).state_bytes == folder.open.state_bytes


def test_folding_is_deterministic_for_the_same_records():
    settings = Settings()
    records = [counter_record(f"c{i % 70}", T0 + i * 7_000, arrival_s=(T0 + i * 7_000) / 1000) for i in range(500)]
    records.append(stream_record(None, event_name="REMOVE"))

    def segments():
        folder = SegmentFolder()
        out = list(folder.fold(parse_record(r, settings) for r in records))
        return [*out, folder.close()]

    assert segments() == segments()


def test_one_record_counted_by_several_rules_adds_to_each_counter_once_and_sums_where_asked():
    folder = SegmentFolder()
    record = [event("jobs/p1", T0, 1), event("jobs/all", T0, 1, units=150_000_000), event("done", T0, 1)]
    list(folder.fold([record, [event("jobs/all", T0 + 5, 2, units=-50_000_000)]]))
    segment = folder.close()
    assert segment.records == 2
    minute = Bucket.of_minute(T0 // MINUTE_MS)
    assert segment.deltas[("jobs/all", minute)] == 2
    assert segment.sums == {("jobs/all", minute): 100_000_000, ("jobs/all", Bucket.of_hour(T0 // HOUR_MS)): 100_000_000}
    entries = [(c, b, d, u) for (c, b), d, u, *_ in segment.ordered_deltas()]
    assert ("jobs/all", minute, 2, 100_000_000) in entries
    assert ("jobs/p1", minute, 1, None) in entries


def test_all_outcomes_of_one_record_land_in_the_same_segment(monkeypatch):
    monkeypatch.setattr("tally.core.segments.MAX_SEGMENT_ITEMS", 5)
    folder = SegmentFolder()
    closed = list(folder.fold([[event("a", T0, 1)], [event("b", T0, 2), event("c", T0, 2), event("d", T0, 2)]]))
    assert [(s.first_sequence, len(s.deltas)) for s in closed] == [("1", 2)]
    assert (folder.open.first_sequence, len(folder.open.deltas)) == ("2", 6)  # a record never splits


def test_sums_survive_the_window_state_exactly():
    folder = SegmentFolder()
    big = 10**26 - 1  # the largest amount: 18 integer digits, 8 fraction digits
    list(folder.fold([[event("rev", T0, 1, units=big)], [event("rev", T0, 2, units=big)], [event("n", T0, 3)]]))
    state = json.loads(json.dumps(folder.open.to_state()))
    assert state["v"] == 3  # every segment this release carries (tests/test_window_state.py)
    restored = Segment.from_state(state)
    assert restored == folder.open
    assert restored.sums[("rev", Bucket.of_minute(T0 // MINUTE_MS))] == 2 * big
    assert restored.state_bytes == folder.open.state_bytes


def test_a_version_1_window_state_is_still_read():
    state = {"v": 1, "first": "5", "arrival": T0, "last": "9", "records": 3, "deltas": [["a", "M#2026-11-18T11:00", 3]]}
    segment = Segment.from_state(state)
    assert segment.deltas == {("a", Bucket.from_sort_key("M#2026-11-18T11:00")): 3}
    assert segment.sums == {}


def test_summing_entries_count_against_the_state_budget():
    plain, summing = SegmentFolder(), SegmentFolder()
    list(plain.fold([[event("c", T0, 1)]]))
    list(summing.fold([[event("c", T0, 1, units=10**25)]]))
    assert summing.open.state_bytes - plain.open.state_bytes >= len(json.dumps(str(10**25))) * 2


def binned(counter, ms, seq, value):
    return CounterEvent(counter, ms, str(seq), ms, bin=bin_of(Decimal(value)))


def test_histogram_bins_fold_per_item_like_counts():
    folder = SegmentFolder()
    list(folder.fold(one_each([binned("load", T0, 1, 120), binned("load", T0 + 1, 2, "120.5"), binned("load", T0, 3, 900)])))
    segment = folder.close()
    minute, hour = ("load", Bucket.of_minute(T0 // MINUTE_MS)), ("load", Bucket.of_hour(T0 // HOUR_MS))
    expected = {bin_of(Decimal(120)): 2, bin_of(Decimal(900)): 1}  # 120 and 120.5 share a bin 2 % wide
    assert segment.bins == {minute: expected, hour: expected}
    assert [(item, count, bins) for item, count, _, bins, _ in segment.ordered_deltas()] == [
        (hour, 3, expected),
        (minute, 3, expected),
    ]


def test_a_segment_closes_before_an_item_takes_more_bins_than_one_update_can_name():
    # Values 3 % apart: every one its own bin.
    events = [binned("wide", T0, i, 1.03**i) for i in range(MAX_ITEM_BINS + 10)]
    folder = SegmentFolder()
    closed = list(folder.fold(one_each(events)))
    assert [len(s.bins[("wide", Bucket.of_hour(T0 // HOUR_MS))]) for s in closed] == [MAX_ITEM_BINS]
    assert len(folder.open.bins[("wide", Bucket.of_hour(T0 // HOUR_MS))]) == 10
    assert closed[0].records + folder.open.records == len(events)
    # Values in bins it holds already never close it.
    assert list(folder.fold(one_each([binned("wide", T0, 999, 1.03**300)] * 50))) == []


def test_bins_survive_the_window_state_and_count_against_its_budget():
    folder = SegmentFolder()
    list(folder.fold(one_each([binned("load", T0, 1, 5), binned("load", T0, 2, -5), binned("load", T0, 3, 0)])))
    list(folder.fold([[event("load", T0, 4, units=5), binned("load", T0, 4, 7)]]))
    list(folder.fold([[binned("spread", T0, 5, "0.5")]]))  # bins without a sum
    state = json.loads(json.dumps(folder.open.to_state()))
    bins_only = ["spread", Bucket.of_minute(T0 // MINUTE_MS).sort_key, 1, None, {"bins": {bin_of(Decimal("0.5")): 1}}]
    assert bins_only in state["deltas"]
    assert Segment.from_state(state) == folder.open
    assert Segment.from_state(state).state_bytes == folder.open.state_bytes
    assert folder.open.state_bytes >= len(json.dumps(state["deltas"]))

    wide = SegmentFolder()
    list(wide.fold(one_each([binned(f"c{i % 3}", T0, i, 1.03**i) for i in range(600)])))
    assert wide.open.state_bytes >= len(json.dumps(wide.open.to_state()))


@pytest.mark.parametrize(
    "aggregates",
    [{}, [1], {"bins": {}}, {"bins": {"+x": 1}}, {"bins": {"count": 2}}, {"bins": {"+Ab": 0}}, {"bins": {"+Ab": "1"}},
     {"bins": {"+Ab": 1}, "later": 1}],
)
def test_a_state_with_aggregates_it_cannot_read_is_unreadable(aggregates):
    state = Segment("1", T0, "1", 1, {("c", Bucket.of_hour(T0 // HOUR_MS)): 1}).to_state()
    state["deltas"][0] += [None, aggregates]
    with pytest.raises(UnreadableState):
        Segment.from_state(state)


def visited(counter, ms, seq, client):
    return CounterEvent(counter, ms, str(seq), ms, hashed=hash_of(client))


def test_distinct_values_fold_into_each_items_sketch():
    folder = SegmentFolder()
    clients = ["a", "b", "a", "c", "b"]
    list(folder.fold(one_each(visited("views", T0 + n, n, c) for n, c in enumerate(clients))))
    segment = folder.close()
    minute, hour = ("views", Bucket.of_minute(T0 // MINUTE_MS)), ("views", Bucket.of_hour(T0 // HOUR_MS))
    assert segment.sketches[minute] == segment.sketches[hour] == Sketch(map(hash_of, "abc"))
    assert segment.deltas[minute] == 5  # the count counts events, the sketch values
    [(*_, sketch)] = [delta for delta in segment.ordered_deltas() if delta[0] == hour]
    assert sketch.count() == 3


@pytest.mark.parametrize("clients", [40, SPARSE_LIMIT + 1, 20_000])
def test_sketches_survive_the_window_state_and_count_against_its_budget(clients):
    folder = SegmentFolder()
    list(folder.fold(one_each(visited(f"v{n % 3}", T0 + n, n, f"client-{n}") for n in range(clients))))
    state = json.loads(json.dumps(folder.open.to_state()))
    assert Segment.from_state(state) == folder.open
    assert Segment.from_state(state).state_bytes == folder.open.state_bytes
    assert folder.open.state_bytes >= len(json.dumps(state["deltas"]))


def test_a_segment_closes_before_its_sketches_outgrow_the_state_budget():
    folder = SegmentFolder(state_budget=60_000)
    events = [visited(f"page-{n % 40}", T0 + (n % 7) * MINUTE_MS, n, f"client-{n}") for n in range(40_000)]
    closed = list(folder.fold(one_each(events)))
    assert closed
    for segment in [*closed, folder.open]:
        assert len(json.dumps(segment.to_state())) <= 60_000
    assert sum(s.records for s in [*closed, folder.open]) == len(events)


def test_a_dense_sketch_weighs_on_the_budget_by_the_registers_its_values_use_not_the_most_it_could():
    # 100 pages with 150 visitors each a minute: 200 dense sketches, about 0.4 KB each in the state,
    # charged about 1.9 KB each (a bound for any registers), not the 2.6 KB a full sketch may take
    events = [visited(f"page-{n % 100}", T0 + n % 60_000, n, f"client-{n}") for n in range(15_000)]
    folder = SegmentFolder()
    assert not list(folder.fold(one_each(events)))  # one segment, as without sketches
    segment = folder.open
    assert len(segment.sketches) == 200 and not any(sketch.exact for sketch in segment.sketches.values())
    stored = len(json.dumps(segment.to_state()))
    assert stored <= segment.state_bytes <= 5 * stored
    assert segment.state_bytes < 200 * 2_000 < STATE_BUDGET_BYTES


@pytest.mark.parametrize("sketch", ["", "not base64!", base64.b64encode(b"\x02junk").decode()])
def test_a_state_with_a_sketch_it_cannot_read_is_unreadable(sketch):
    state = Segment("1", T0, "1", 1, {("c", Bucket.of_hour(T0 // HOUR_MS)): 1}).to_state()
    state["deltas"][0] += [None, {"sketch": sketch}]
    with pytest.raises(UnreadableState):
        Segment.from_state(state)


def test_a_window_state_carries_days_months_and_late_marks():
    """A late record's days, months and marks travel in the tumbling window's state like its minute and hour."""
    from tally.core.ladder import Ladder  # noqa: PLC0415

    kept = Settings(calendar_prefixes=("c",), calendar_zones=("Europe/Berlin",))
    event = 1_795_000_000_000
    folder = SegmentFolder(ladder=Ladder(kept))
    list(folder.fold([parse_record(counter_record("c", event, arrival_s=event / 1000 + 5 * 86_400), kept)]))
    segment = folder.close()
    kinds = sorted({(counter[:6], bucket.kind, bucket.zone) for counter, bucket in segment.deltas})
    assert kinds == [("#late#", "D", "Europe/Berlin"), ("#late#", "D", "UTC"), ("#late#", "H", ""), ("c", "D", "Europe/Berlin"),
                     ("c", "D", "UTC"), ("c", "H", ""), ("c", "MO", "Europe/Berlin"), ("c", "MO", "UTC")]
    assert Segment.from_state(json.loads(json.dumps(segment.to_state()))).deltas == segment.deltas


def _tracked_objects_under(root):
    """The garbage collector's tracked objects reachable from ``root`` (itself included), classes aside."""
    seen, stack = {}, [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or not gc.is_tracked(obj) or isinstance(obj, type):
            continue
        seen[id(obj)] = obj
        stack.extend(gc.get_referents(obj))
    return seen


def test_held_records_keep_no_tracked_object_per_record():
    """The records a window holds cost the garbage collector per item they touch, never per record."""
    events = [event(f"c{n % 3}", T0 + (n % 7) * MINUTE_MS, 1000 + n, units=n) for n in range(6000)]
    folder = SegmentFolder()
    assert not list(folder.fold(one_each(events)))
    held = folder.open.held
    assert len(held) == 6000
    items = len(folder.open.deltas)  # 3 counters x (7 minutes + 1 hour)
    assert len(_tracked_objects_under(held)) < 10 * items


_CONTRIBUTION = st.tuples(
    st.sampled_from(["a", "b"]),  # counter
    st.integers(0, 2),  # minute of the hour, or hour alone (2)
    st.one_of(st.none(), st.integers(-(10**20), 10**20)),  # units
    st.one_of(st.none(), st.sampled_from(["+Aa", "+Ab", "0"])),  # bin
)


@hypothesis_settings(max_examples=60, deadline=None)
@given(records=st.lists(st.lists(_CONTRIBUTION, min_size=1, max_size=3), min_size=1, max_size=12),
       cut=st.integers(0, 12))
def test_held_records_give_each_items_records_as_they_were_added(records, cut):
    """What an overlap reads of held records (each item's positions, units and bins, in stream order), also
    across records held in two parts, read back and held again, equals the records as folded."""
    hour = Bucket.of_hour(T0 // HOUR_MS)
    folded = []
    for offset, contributions in enumerate(records):
        made = [
            (None if minute == 2 else (counter, Bucket.of_minute(T0 // MINUTE_MS + minute)), (counter, hour), units, bin, None)
            for counter, minute, units, bin in contributions
        ]
        folded.append((500 + offset, made))
    whole = HeldRecords.of(folded)
    joined = HeldRecords.of([*HeldRecords.of(folded[:cut]).records(), *HeldRecords.of(folded[cut:]).records()])
    for held in (whole, joined):
        assert held == whole and len(held) == len(records)
        for item in held.items:
            expected = [(position, units, bin) for position, made in folded
                        for minute, hour_item, units, bin, _ in made for touched in (minute, hour_item) if touched == item]
            assert list(held.of_item(item)) == expected
