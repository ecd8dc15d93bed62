import json

from factories import counter_record, stream_record
from tally.buckets import Bucket
from tally.records import MAX_COUNTER_LENGTH, CounterEvent, Reason, Rejection, parse_record
from tally.segments import MAX_SEGMENT_ITEMS, Segment, SegmentFolder, contribution
from tally.settings import HOUR_MS, MINUTE_MS, Settings

T0 = 1_795_000_000_000 - 1_795_000_000_000 % HOUR_MS  # an hour boundary


def event(counter, ms, seq):
    return CounterEvent(counter, ms, str(seq), ms)


def test_an_event_adds_one_to_its_minute_and_its_hour():
    assert contribution(event("c", T0 + 61_000, 1)) == (("c", Bucket.of_minute((T0 + 61_000) // MINUTE_MS)), ("c", Bucket.of_hour(T0 // HOUR_MS)))


def test_a_rejection_counts_under_its_reserved_counter_by_arrival_time():
    rejection = Rejection(Reason.LATE_EVENT, "old", "9", T0 + 5)
    assert [counter for counter, _ in contribution(rejection)] == ["#rejected#late_event"] * 2
    assert contribution(rejection)[0][1] == Bucket.of_minute(T0 // MINUTE_MS)


def test_skips_and_unreadable_records_add_nothing():
    assert contribution(Rejection(Reason.NOT_INSERT, "REMOVE", "9", T0)) == ()
    assert contribution(Rejection(Reason.MALFORMED_RECORD, "junk")) == ()


def test_folding_sums_deltas_per_bucket_in_one_segment():
    folder = SegmentFolder()
    closed = list(folder.fold([event("a", T0, 1), event("a", T0 + 1, 2), event("b", T0 + MINUTE_MS, 3)]))
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


def test_a_segment_closes_before_it_would_touch_more_than_99_items():
    # Each event of a new minute adds one minute item (the hour is shared): 98 minutes + 1 hour = 99.
    events = [event("c", T0 + i * MINUTE_MS, i) for i in range(1, 60)]
    events += [event("d", T0 + i * MINUTE_MS, 100 + i) for i in range(50)]
    folder = SegmentFolder()
    closed = list(folder.fold(events))
    last = folder.close()
    segments = [*closed, last]
    assert all(len(s.deltas) <= MAX_SEGMENT_ITEMS for s in segments)
    assert len(closed[0].deltas) == MAX_SEGMENT_ITEMS
    assert sum(s.records for s in segments) == len(events)
    assert sum(sum(s.deltas.values()) for s in segments) == 2 * len(events)
    # c: 59 minutes + 1 hour; d: its hour + minutes 0..37 reach 99 items; d's minute 38 opens a new segment.
    assert closed[0].last_sequence == "137"
    assert last.first_sequence == "138"


def test_events_of_a_full_segments_buckets_keep_folding_into_it():
    folder = SegmentFolder()
    events = [event(f"c{i}", T0, i) for i in range(49)]  # 98 items
    list(folder.fold(events))
    list(folder.fold([event("c0", T0, 100)] * 10))  # no new item: still one segment
    assert folder.open.records == 59
    assert len(folder.open.deltas) == 98


def test_state_round_trips_through_json():
    folder = SegmentFolder()
    list(folder.fold([event("a", T0, 1), event("ü", T0 + HOUR_MS, 2)]))
    state = json.loads(json.dumps(folder.open.to_state()))
    assert Segment.from_state(state) == folder.open


def test_the_largest_possible_state_is_far_below_lambdas_1_mb_limit():
    settings = Settings()
    folder = SegmentFolder()
    longest = "x" * MAX_COUNTER_LENGTH
    records = [counter_record(f"{longest[:-3]}{i:03d}", T0 + i, arrival_s=(T0 + i) / 1000) for i in range(49)]
    list(folder.fold(parse_record(r, settings) for r in records))
    size = len(json.dumps(folder.open.to_state()).encode())
    assert len(folder.open.deltas) == 98  # 49 counters x (minute, hour): the most that fit
    assert size < 100_000


def test_folding_is_deterministic_for_the_same_records():
    settings = Settings()
    records = [counter_record(f"c{i % 70}", T0 + i * 7_000, arrival_s=(T0 + i * 7_000) / 1000) for i in range(500)]
    records.append(stream_record(None, event_name="REMOVE"))

    def segments():
        folder = SegmentFolder()
        out = list(folder.fold(parse_record(r, settings) for r in records))
        return [*out, folder.close()]

    assert segments() == segments()
