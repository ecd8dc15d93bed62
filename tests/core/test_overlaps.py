"""A segment's carried records, read again from the stream: used only when they are exactly what the state carried."""

import dataclasses
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from factories import counter_record, image, stream_record
from tally.core.commit import THROUGH, Watermark, Writer, order_preserving, untaken
from tally.core.overlaps import Unmatched, held_records, with_carried_records
from tally.core.records import parse_record
from tally.core.rules import parse_rules
from tally.core.segments import HeldRecords, Segment, SegmentFolder
from tally.core.settings import Settings
from tally.core.units import HOUR_MS, MINUTE_MS

T0 = 1_795_000_000_000 - 1_795_000_000_000 % HOUR_MS
WRITER = Writer.of_shard("arn:aws:dynamodb:us-east-1:1:table/e/stream/x", "shardId-1")
RULES = Settings(
    rules=parse_rules(
        '[{"name": "n", "counter": "n/{counter}"},'
        ' {"name": "paid", "counter": "paid/{counter}", "when": {"status": {"equals": "paid"}}, "sum": "amount"},'
        ' {"name": "sizes", "counter": "sizes/{counter}", "histogram": "amount"}]'
    )
)


def stream(count: int, *, seed: int = 0) -> list[dict]:
    """Records of a few counters over a few minutes, some paid with an amount, one of them skipped (a MODIFY)."""
    records = []
    for n in range(count):
        item = image(id=f"e{n}", counter=f"c{(n * 7 + seed) % 3}", ts=T0 + ((n * 13 + seed) % 5) * MINUTE_MS,
                     status="paid" if (n + seed) % 2 else "open", amount=Decimal(n % 9) + Decimal("0.25"))
        records.append(stream_record(item, arrival_s=(T0 + 5 * MINUTE_MS) / 1000, event_name="MODIFY" if n == 3 else "INSERT"))
    return records


def window(records: list[dict], carried: int, settings: Settings = RULES) -> Segment:
    """The window's one segment as its final invocation holds it: the first ``carried`` records came in the state."""
    first = SegmentFolder()
    assert not list(first.fold(parse_record(r, settings) for r in records[:carried]))
    state = first.open.to_state()
    final = SegmentFolder(Segment.from_state(state))
    assert not list(final.fold(parse_record(r, settings) for r in records[carried:]))
    return final.open


def test_the_carried_records_read_again_give_the_segment_every_record_it_counts():
    records = stream(12)
    seg = window(records, carried=7)
    assert seg.carried_last == records[6]["dynamodb"]["SequenceNumber"]
    rebuilt = with_carried_records(seg, records[:7], RULES)
    assert rebuilt.carried_last is None and rebuilt.unheld_through is None
    assert rebuilt.held == HeldRecords.of(held_records(records, RULES))  # as if one invocation had folded them all
    assert (rebuilt.deltas, rebuilt.sums, rebuilt.bins, rebuilt.records) == (seg.deltas, seg.sums, seg.bins, seg.records)
    # Records past the carried ones (a reader that read on) are left out: they are held already.
    assert with_carried_records(seg, records, RULES).held == rebuilt.held


@given(size=st.integers(2, 30), carried=st.integers(1, 29), seen=st.integers(-1, 30), seed=st.integers(0, 5))
def test_the_rest_split_on_records_read_again_is_what_the_item_has_not_taken(size, carried, seen, seed):
    """Against brute force: an item whose watermark lies before, at or after any record gets exactly the events
    of the records after it."""
    records = stream(size, seed=seed)
    carried = min(carried, size - 1)
    seg = with_carried_records(window(records, carried), records, RULES)
    sequences = [int(r["dynamodb"]["SequenceNumber"]) for r in records]
    at = sequences[0] - 1 if seen < 0 else sequences[seen] if seen < size else sequences[-1] + 1
    watermark = Watermark.decode(order_preserving(at) + THROUGH)
    for item in seg.deltas:
        later = [c for position, contributions in held_records(records, RULES) if position > at
                 for c in contributions if item in (c[0], c[1])]
        rest = untaken(seg, item, watermark, WRITER)
        if at < int(seg.first_sequence):
            assert rest is not None and rest[1] == seg.deltas[item]
        elif not later:
            assert rest is None or rest[1] == 0
        else:
            assert rest[1] == len(later), item
            if item in seg.sums:
                assert rest[2] == sum(c[2] for c in later)


def test_records_that_left_the_stream_or_a_gap_are_unmatched():
    records = stream(12)
    seg = window(records, carried=7)
    with pytest.raises(Unmatched, match="the stream gave records .* where the window state carried"):
        with_carried_records(seg, records[1:7], RULES)  # the first one trimmed
    with pytest.raises(Unmatched, match="where the window state carried"):
        with_carried_records(seg, [], RULES)
    with pytest.raises(Unmatched, match="counted records"):
        with_carried_records(seg, records[:2] + records[3:7], RULES)  # one inside missing


def test_records_counted_otherwise_since_the_window_began_are_unmatched():
    """A rule changed between the window's invocations (a deploy): the records read again no longer add up."""
    records = stream(12)
    seg = window(records, carried=7)
    changed = dataclasses.replace(RULES, rules=parse_rules('[{"name": "n", "counter": "n/{counter}"}]'))
    with pytest.raises(Unmatched, match="a rule changed since"):
        with_carried_records(seg, records[:7], changed)
    renamed = [stream_record(image(id="x", counter="other", ts=T0), arrival_s=T0 / 1000, sequence=r["dynamodb"]["SequenceNumber"])
               if n == 2 else r for n, r in enumerate(records[:7])]
    with pytest.raises(Unmatched, match="other deltas"):
        with_carried_records(seg, renamed, RULES)


def test_a_segment_holding_every_record_is_left_as_it_is():
    records = [counter_record("c", T0 + n) for n in range(3)]
    folder = SegmentFolder()
    assert not list(folder.fold(parse_record(r, Settings()) for r in records))
    assert with_carried_records(folder.open, [], Settings()) is folder.open
