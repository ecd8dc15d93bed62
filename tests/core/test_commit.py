import random
from decimal import Decimal

import pytest

from factories import image, stream_record

from tally.core.buckets import Bucket, lane_sort_key
from tally.core.commit import (
    LEGACY_MARKER_PREFIX,
    LEGACY_PART_ITEMS,
    SIZED_UPDATE_CONDITION,
    Anchor,
    PutAnchor,
    ReadAnchor,
    anchor_key,
    anchor_of,
    THROUGH,
    WATERMARK_PREFIX,
    Answer,
    Outcome,
    Pause,
    Put,
    ReadMarkers,
    ReadRecords,
    RetriesExhausted,
    Send,
    Watermark,
    Writer,
    bucket_update,
    commit_steps,
    condition_failed,
    lane_of,
    legacy_marker_key,
    legacy_parts,
    order_preserving,
    segment_updates,
    source_id,
    untaken,
    Unsplit,
)
from tally.core.overlaps import RecordsAgain
from tally.core.tables import ANCHOR_PARTITION, UNRESOLVED_ATTRIBUTE, UNRESOLVED_PARTITION
from tally.core.histograms import bin_of
from tally.core.overlaps import held_records
from tally.core.retry import Backoff
from tally.core.rules import parse_rules
from tally.core.ladder import Ladder
from tally.core.records import parse_record
from tally.core.segments import MAX_ITEM_BINS, HeldRecords, Segment, SegmentFolder
from tally.core.settings import Settings
from tally.core.units import HOUR_MS, MINUTE_MS

T0 = 1_795_000_000_000 - 1_795_000_000_000 % HOUR_MS
HOUR, MINUTE = Bucket.of_hour(T0 // HOUR_MS), Bucket.of_minute(T0 // MINUTE_MS)
WRITER = Writer.of_shard("arn:aws:dynamodb:us-east-1:1:table/e/stream/x", "shardId-1")
SEQUENCE = "100000000000000000180"
LAST = "100000000000000000260"
HOD = f"{HOUR.index % 24:02d}"  # the hour of day in rank records


def segment(first: str = SEQUENCE, items: int = 0) -> Segment:
    deltas = {("b", HOUR): 5, ("a", MINUTE): 76, ("a", HOUR): 76}
    deltas.update({(f"c{i:04d}", MINUTE): 1 for i in range(items)})
    last = LAST if first == SEQUENCE else first
    return Segment(first_sequence=first, first_arrival_ms=T0, last_sequence=last, records=81, deltas=deltas)


def taken(count=None, seg=None):
    """The answer of an item that already took the whole segment (a retry finds its own watermark)."""
    return Answer(Outcome.TAKEN, count, WRITER.watermark(seg or segment()))


def test_one_update_per_bucket_item_conditioned_on_the_writers_watermark():
    hours, minutes = segment_updates(segment(), WRITER, "counts", Settings())
    assert [(u.item[0], u.item[1].kind) for u in hours] == [("a", "H"), ("b", "H")]  # hours first, in key order
    assert [(u.item[0], u.item[1].kind) for u in minutes] == [("a", "M")]
    request = minutes[0].request
    assert request["TableName"] == "counts"
    assert request["Key"] == {"pk": {"S": "a"}, "sk": {"S": MINUTE.sort_key}}
    assert request["UpdateExpression"] == "ADD #a0 :a0 SET #ttl = if_not_exists(#ttl, :ttl), #w = :to"
    # a shard's update also fails on a previous release's watermark, one byte shorter than this release's
    assert request["ConditionExpression"] == "attribute_not_exists(#w) OR (#w < :w AND size(#w) > :n)"
    assert request["ReturnValuesOnConditionCheckFailure"] == "ALL_OLD"
    assert request["ReturnValues"] == "UPDATED_NEW"  # the count after it: whether it created the item
    assert request["ExpressionAttributeNames"] == {"#ttl": "ttl", "#w": WRITER.tag, "#a0": "count"}
    values = request["ExpressionAttributeValues"]
    assert values[":a0"] == {"N": "76"}
    assert values[":w"] == {"B": order_preserving(int(SEQUENCE))}  # the segment's first record
    assert values[":n"] == {"N": str(len(order_preserving(int(SEQUENCE))))}  # and its size
    assert values[":to"] == {"B": order_preserving(int(LAST)) + THROUGH}  # its last
    assert values[":ttl"] == {"N": str((T0 + MINUTE_MS + 48 * HOUR_MS) // 1000)}
    assert hours[1].request["ExpressionAttributeValues"][":ttl"] == {"N": str((T0 + HOUR_MS + 90 * 86_400_000) // 1000)}


def test_every_aggregate_is_one_more_add_term_of_the_same_update():
    request = bucket_update(
        "counts",
        {"pk": "c", "sk": "H#x"},
        {"count": 3, "sum": Decimal("-0.00000001"), "b12": 2},
        99,
        "~tag",
        b"\x01\x05",
        b"\x01\x07\x01",
    )
    assert request["UpdateExpression"] == "ADD #a0 :a0, #a1 :a1, #a2 :a2 SET #ttl = if_not_exists(#ttl, :ttl), #w = :to"
    assert [request["ExpressionAttributeNames"][f"#a{i}"] for i in range(3)] == ["count", "sum", "b12"]
    assert [request["ExpressionAttributeValues"][f":a{i}"] for i in range(3)] == [
        {"N": "3"},
        {"N": "-0.00000001"},  # plain digits, never "1E-8"
        {"N": "2"},
    ]


def test_a_summing_bucket_adds_its_sum_beside_its_count():
    summed = segment()
    summed.sums[("a", MINUTE)] = 150_000_000
    [minute] = segment_updates(summed, WRITER, "counts", Settings())[1]
    assert minute.request["ExpressionAttributeNames"]["#a1"] == "sum"
    assert minute.request["ExpressionAttributeValues"][":a1"] == {"N": "1.5"}


@pytest.mark.parametrize("digits", [21, 22, 30, 38, 39, 40])
def test_positions_order_as_sequence_numbers_of_21_to_40_digits_do(digits):
    rng = random.Random(digits)
    numbers = [10 ** (digits - 1), 10**digits - 1, 2**72 - 1, 2**72, 2**128 - 1, 2**128]
    numbers += [rng.randrange(10 ** (digits - 1), 10**digits) for _ in range(200)]
    numbers = [n for n in numbers if 21 <= len(str(n)) <= 40]
    encoded = {n: order_preserving(n) for n in numbers}
    assert sorted(numbers) == sorted(numbers, key=encoded.get)  # DynamoDB compares binary values bytewise, unsigned
    assert len(order_preserving(10**20)) == 10 and len(order_preserving(10**40 - 1)) == 18


def test_a_whole_export_is_one_writer():
    writer = Writer.of_export("arn:export/1")
    assert writer == Writer.of_export("arn:export/1") and writer.tag != Writer.of_export("arn:export/2").tag
    assert writer.position(segment("0")) < writer.position(segment(str(2**40)))


def test_tags_are_short_stable_and_tell_shards_and_streams_apart():
    assert WRITER.tag == Writer.of_shard("arn:aws:dynamodb:us-east-1:1:table/e/stream/x", "shardId-1").tag
    assert WRITER.tag.startswith(WATERMARK_PREFIX) and len(WRITER.tag) == 9
    tags = {Writer.of_shard(f"arn{s}", f"shardId-{n}").tag for s in range(3) for n in range(3000)}
    assert len(tags) == 9000
    assert source_id("arn1", None) != source_id("arn2", None)


@pytest.mark.parametrize(
    ("old", "outcome"),
    [
        ({WRITER.tag: {"B": order_preserving(int(SEQUENCE))}}, Outcome.TAKEN),  # this very segment (0.2.x)
        ({WRITER.tag: {"B": order_preserving(int(SEQUENCE)) + THROUGH}}, Outcome.TAKEN),  # through its first record
        ({WRITER.tag: {"B": order_preserving(int(SEQUENCE) + 1)}}, Outcome.TAKEN),  # a later one
        # an earlier one of the previous release: the sized condition fails on it, to be judged (by the anchor)
        ({WRITER.tag: {"B": order_preserving(int(SEQUENCE) - 1)}}, Outcome.TAKEN),
        ({WRITER.tag: {"B": order_preserving(int(SEQUENCE) - 1) + THROUGH}}, Outcome.FAIL),  # earlier: not the watermark
        ({WRITER.tag: {"B": order_preserving(255) + THROUGH}}, Outcome.TAKEN),  # earlier but shorter: judged too
        ({"~other": {"B": order_preserving(int(SEQUENCE))}}, Outcome.FAIL),  # another writer's
        ({"count": {"N": "3"}}, Outcome.FAIL),
        ({}, Outcome.FAIL),
        (None, Outcome.FAIL),
    ],
)
def test_a_failed_condition_is_judged_on_the_writers_watermark_only(old, outcome):
    answer = condition_failed(old, WRITER.tag, order_preserving(int(SEQUENCE)))
    assert answer.outcome is outcome
    if outcome is Outcome.TAKEN:
        assert answer.watermark == old[WRITER.tag]["B"]


def test_one_lane_writes_the_buckets_own_items_and_lanes_are_fixed_per_writer():
    keys = [u.request["Key"]["sk"]["S"] for phase in segment_updates(segment(), WRITER, "t", Settings()) for u in phase]
    assert keys == [HOUR.sort_key, HOUR.sort_key, MINUTE.sort_key]
    writers = [Writer.of_shard("arn", f"shardId-{n}") for n in range(200)]
    assert {lane_of(w.source, 8) for w in writers} == set(range(8))  # shards spread over every lane
    for writer in writers[:20]:
        phases = segment_updates(segment(), writer, "t", Settings(bucket_lanes=8))
        keys = [u.request["Key"]["sk"]["S"] for phase in phases for u in phase]
        assert keys == [lane_sort_key(b.sort_key, writer.lane(8)) for b in (HOUR, HOUR, MINUTE)]


def run(steps, answer, put=lambda step: []):
    """Drive commit_steps: ``answer(step)`` replies to each ReadMarkers and Send, ``put`` to each Put (by default:
    every item put); pauses are recorded."""
    log, reply = [], None
    try:
        while True:
            step = steps.send(reply)
            log.append(step)
            reply = None if isinstance(step, Pause) else put(step) if isinstance(step, Put) else answer(step)
    except StopIteration as done:
        return done.value, log


def steps_of(seg, after_previous_release=False, attempts=8, lanes=1, ranked=("",)):
    backoff = lambda: Backoff(attempts=attempts, rng=random.Random(0))  # noqa: E731
    settings = Settings(bucket_lanes=lanes, ranked_prefixes=ranked)
    return commit_steps(seg, WRITER, "t", settings, backoff, after_previous_release=after_previous_release)


def test_hours_are_sent_before_minutes_and_throttled_updates_again_after_a_pause():
    throttled = {("b", HOUR)}

    def answer(step):
        outcomes = [Answer(Outcome.RETRY) if u.item in throttled else Answer(Outcome.APPLIED, u.added) for u in step.updates]
        throttled.clear()
        return outcomes

    result, log = run(steps_of(segment()), answer)
    sends = [[u.item for u in step.updates] for step in log if isinstance(step, Send)]
    assert sends == [[("a", HOUR), ("b", HOUR)], [("b", HOUR)], [("a", MINUTE)]]
    assert isinstance(log[1], Pause)
    assert (result.applied, result.already_applied, result.retries) == (3, 0, 1)


def test_hour_items_an_update_created_are_born_and_so_are_those_a_retry_finds_applied():
    """A count equal to what the update added: the item is new. Found applied: its lost first try may have
    created it. Minute items are never born: every event counts in its hour, which says the day."""

    def answer(step):
        counts = {("a", HOUR): 76, ("b", HOUR): 5 + 12, ("a", MINUTE): 76}
        return [Answer(Outcome.APPLIED, counts[u.item]) for u in step.updates]

    result, _ = run(steps_of(segment()), answer)
    assert result.born == (("a", HOUR),)
    result, _ = run(steps_of(segment()), lambda step: [taken(99) for _ in step.updates])
    assert result.born == (("a", HOUR), ("b", HOUR))
    result, _ = run(steps_of(segment()), lambda step: [Answer(Outcome.APPLIED) for _ in step.updates])
    assert result.born == ()  # nothing came back: nothing known to be new


def test_an_hour_item_sent_the_rest_of_a_segment_is_born_too():
    """It took part of the segment from this writer already: a try whose invocation failed (its directory entry
    with it), the previous release's among them, may have created it."""
    seg = holding(100, 129)
    answer, _ = taken_at(109)
    result, _ = run(overlap_steps(seg), answer)
    assert result.born == (("a", HOUR), ("b", HOUR))


def test_a_retried_segment_counts_what_it_finds_applied():
    result, _ = run(steps_of(segment()), lambda step: [taken() for _ in step.updates])
    assert (result.applied, result.already_applied) == (0, 3)


def test_updates_throttled_on_every_try_exhaust_the_retries():
    with pytest.raises(RetriesExhausted, match="still throttled"):
        run(steps_of(segment(), attempts=3), lambda step: [Answer(Outcome.RETRY) for _ in step.updates])


def test_an_answer_that_is_not_an_outcome_is_refused():
    with pytest.raises(ValueError, match="outcome"):
        run(steps_of(segment()), lambda step: [Answer(Outcome.FAIL) for _ in step.updates])


def test_markers_of_the_previous_release_are_read_only_for_segments_that_may_predate_this_one():
    _, log = run(steps_of(segment()), lambda step: [Answer(Outcome.APPLIED) for _ in step.updates])
    assert not any(isinstance(step, ReadMarkers) for step in log)
    _, log = run(steps_of(segment(), after_previous_release=True), answer_none_found)
    assert [step.keys for step in log if isinstance(step, ReadMarkers)] == [[legacy_marker_key(segment(), WRITER.legacy_source, 0)]]


def answer_none_found(step):
    return [False] * len(step.keys) if isinstance(step, ReadMarkers) else [Answer(Outcome.APPLIED)] * len(step.updates)


def test_items_of_the_previous_releases_committed_transactions_are_skipped():
    big = segment(items=2 * LEGACY_PART_ITEMS)  # 201 items: three transactions of the previous release
    parts = legacy_parts(big)
    assert [len(part) for part in parts] == [99, 99, 3]
    assert legacy_marker_key(big, WRITER.legacy_source, 1) == {
        "pk": LEGACY_MARKER_PREFIX + SEQUENCE,
        "sk": f"{WRITER.legacy_source}#1",
    }
    sent = []

    def answer(step):
        if isinstance(step, ReadMarkers):
            return [True] + [False] * (len(step.keys) - 1) if len(step.keys) == 1 else [True, True, False]
        sent.extend(u.item for u in step.updates)
        return [Answer(Outcome.APPLIED)] * len(step.updates)

    result, log = run(steps_of(big, after_previous_release=True), answer)
    assert [len(step.keys) for step in log if isinstance(step, ReadMarkers)] == [1, 3]
    assert sorted(sent) == sorted(parts[2])
    assert (result.applied, result.already_applied) == (3, 198)


def test_histogram_bins_are_added_beside_the_count_in_the_same_update():
    item = ("load", MINUTE)
    bins = {bin_of(Decimal(5)): 2, bin_of(Decimal(-5)): 1, bin_of(0): 2}
    with_bins = Segment("100", T0, "102", 3, deltas={item: 5}, sums={item: 0}, bins={item: bins})
    [[], [update]] = segment_updates(with_bins, WRITER, "counts", Settings())
    request = update.request
    expression = request["UpdateExpression"]
    assert expression.startswith("ADD #a0 :a0, #a1 :a1, ") and expression.endswith(" SET #ttl = if_not_exists(#ttl, :ttl), #w = :to")
    assert request["ConditionExpression"] == SIZED_UPDATE_CONDITION  # bins share the item's watermark
    names, values = request["ExpressionAttributeNames"], request["ExpressionAttributeValues"]
    added = dict(term.split(" ") for term in expression[len("ADD ") : expression.index(" SET")].split(", "))
    assert {names[name]: int(values[value]["N"]) for name, value in added.items() if name not in ("#a0", "#a1")} == bins
    assert len([name for name in values if name.startswith(":b")]) == 2  # one value per distinct count


def test_an_update_naming_the_most_bins_a_segment_allows_fits_in_dynamodbs_expression_limit():
    item = ("x" * 255, MINUTE)
    # The widest placeholders: every bin a distinct count.
    bins = {bin_of(-Decimal(1.03**k)): 10**6 + k for k in range(MAX_ITEM_BINS)}
    wide = Segment("100", T0, "100", 1, deltas={item: 1}, sums={item: 10**20}, bins={item: bins})
    [[], [update]] = segment_updates(wide, WRITER, "counts", Settings())
    assert len(bins) == MAX_ITEM_BINS
    assert len(update.request["UpdateExpression"].encode()) <= 4096 - 512  # room to spare for other terms


def test_hour_items_carried_into_a_higher_level_get_one_record_of_it_before_the_minutes_are_sent():
    def answer(step):  # a: 76 added to 1,524 -> 1,600 (level 8 -> 13); b: 5 added to 200 -> 205 (none -> 8)
        counts = {("a", HOUR): 1600, ("b", HOUR): 205, ("a", MINUTE): 76}
        return [Answer(Outcome.APPLIED, counts[u.item]) for u in step.updates]

    result, log = run(steps_of(segment()), answer)
    kinds = [type(step).__name__ for step in log]
    assert kinds == ["Send", "Put", "Send"]  # hours, their rank records, minutes
    assert [item["sk"]["S"] for item in log[1].items] == [f"013#{HOD}#00#a", f"008#{HOD}#00#b"]
    assert result.ranked == 2


def test_only_counters_under_a_ranked_prefix_get_records_and_a_table_ranking_nothing_puts_none():
    def answer(step):
        counts = {("a", HOUR): 11_650, ("b", HOUR): 11_625, ("a", MINUTE): 76}  # each carried into level 18
        return [Answer(Outcome.APPLIED, counts[u.item]) for u in step.updates]

    result, log = run(steps_of(segment(), lanes=16, ranked=("b", "x/")), answer)
    [put] = [step for step in log if isinstance(step, Put)]
    lane = f"{WRITER.lane(16):02d}"
    assert [item["sk"]["S"] for item in put.items] == [f"018#{HOD}#{lane}#b"] and result.ranked == 1
    result, log = run(steps_of(segment(), ranked=()), answer)
    assert result.ranked == 0 and [type(step).__name__ for step in log] == ["Send", "Send"]


def test_an_update_within_its_level_puts_no_record_and_one_found_applied_puts_its_items_level_again():
    result, log = run(steps_of(segment()), lambda step: [Answer(Outcome.APPLIED, 460 + u.added) for u in step.updates])
    assert not any(isinstance(step, Put) for step in log) and result.ranked == 0  # 460 -> 536 and 465: level 8 still
    result, log = run(steps_of(segment()), lambda step: [taken(300) for _ in step.updates])
    [put] = [step for step in log if isinstance(step, Put)]
    assert [item["sk"]["S"] for item in put.items] == [f"008#{HOD}#00#a", f"008#{HOD}#00#b"]  # its lost try may have


def test_reserved_counters_are_never_ranked():
    rejected = Segment(SEQUENCE, T0, SEQUENCE, 9, {("#rejected#late_event", HOUR): 9})
    result, log = run(steps_of(rejected), lambda step: [Answer(Outcome.APPLIED, 9) for _ in step.updates])
    assert result.ranked == 0 and not any(isinstance(step, Put) for step in log)


def test_rank_records_left_unprocessed_are_put_again_after_a_pause_until_every_try_is_spent():
    answer = lambda step: [Answer(Outcome.APPLIED, 200 + u.added) for u in step.updates]  # noqa: E731
    left = [1]

    def put(step):
        left[0] -= 1
        return step.items[:1] if left[0] >= 0 else []

    result, log = run(steps_of(segment()), answer, put)
    kinds = [type(step).__name__ for step in log]
    assert kinds == ["Send", "Put", "Pause", "Put", "Send"] and len(log[3].items) == 1 and result.ranked == 2
    with pytest.raises(RetriesExhausted, match="rank records of segment"):
        run(steps_of(segment(), attempts=3), answer, lambda step: step.items)


def folded(first: int, last: int, *, carried_through: int | None = None, counter: str = "a") -> Segment:
    """A segment of one record per position from ``first`` to ``last``, each adding 1 to the counter's minute and
    hour (even positions also to "b"'s hour); those up to ``carried_through`` came in the window state."""
    seg = Segment(str(first), T0, str(first))
    records = []
    for position in range(first, last + 1):
        contributions = [((counter, MINUTE), (counter, HOUR), None, None, None)]
        if position % 2 == 0:
            contributions.append((None, ("b", HOUR), None, None, None))
        seg.add(str(position), contributions)
        records.append((position, contributions))
    if carried_through is not None:
        seg.held = HeldRecords.of((p, c) for p, c in records if p > carried_through)
        seg.carried_last = str(carried_through)
    return seg


def through(position: int) -> Watermark:
    return Watermark.decode(order_preserving(position) + THROUGH)


def test_a_watermark_names_the_last_record_taken_and_tells_the_previous_releases_apart():
    seg = folded(100, 130)
    assert Watermark.decode(WRITER.watermark(seg)) == Watermark(130, through=True)
    assert Watermark.decode(order_preserving(100)) == Watermark(100, through=False)
    assert WRITER.position(seg) < WRITER.watermark(seg) < WRITER.position(folded(131, 140))  # DynamoDB's order
    climbed = WRITER.watermark(seg, climbed=True)  # an hour written with its counter's days kept
    assert Watermark.decode(climbed) == Watermark(130, through=True, climbed=True)
    assert WRITER.watermark(seg) < climbed < WRITER.position(folded(131, 140))
    with pytest.raises(ValueError, match="not a watermark"):
        Watermark.decode(order_preserving(100) + b"\x03")


def test_an_item_that_took_the_whole_segment_is_left_alone_and_one_that_took_a_part_gets_exactly_the_rest():
    seg = folded(100, 129)
    assert untaken(seg, ("a", HOUR), through(129), WRITER) is None
    assert untaken(seg, ("a", HOUR), through(500), WRITER) is None
    assert untaken(seg, ("a", HOUR), through(109), WRITER) == (("a", HOUR), 20, None, None, None)  # 110..129
    assert untaken(seg, ("b", HOUR), through(109), WRITER) == (("b", HOUR), 10, None, None, None)  # even of 110..129
    # "b" is not touched by 129: a watermark at 128 means it took every record of it in the segment.
    assert untaken(seg, ("b", HOUR), through(128), WRITER) is None
    assert untaken(folded(101, 129), ("b", HOUR), through(101), WRITER) == (("b", HOUR), 14, None, None, None)


def test_the_rest_of_an_item_keeps_its_sums_and_histogram_bins():
    seg = Segment("10", T0, "10")
    for position, units, bin in [(10, 5, "+A1"), (11, 7, "+A2"), (12, 11, "+A1")]:
        seg.add(str(position), [(("s", MINUTE), ("s", HOUR), units, bin, None)])
    assert untaken(seg, ("s", MINUTE), through(10), WRITER) == (("s", MINUTE), 2, 18, {"+A2": 1, "+A1": 1}, None)


def test_records_carried_in_the_window_state_are_split_only_where_the_watermark_lies_after_them():
    seg = folded(100, 129, carried_through=114)
    assert untaken(seg, ("a", HOUR), through(114), WRITER) == (("a", HOUR), 15, None, None, None)
    assert untaken(seg, ("a", HOUR), through(120), WRITER) == (("a", HOUR), 9, None, None, None)
    with pytest.raises(Unsplit, match="records 100..114 came in the window state as sums") as unsplit:
        untaken(seg, ("a", HOUR), through(107), WRITER)
    assert unsplit.value.carried  # the stream may still hold them


def test_a_watermark_of_the_previous_release_is_read_as_it_was_and_an_overlap_it_cannot_place_is_unsplit():
    seg = folded(100, 129)
    legacy = lambda position: Watermark.decode(order_preserving(position))  # noqa: E731
    assert untaken(seg, ("a", HOUR), legacy(100), WRITER) is None  # the same first record: the same segment
    assert untaken(seg, ("a", HOUR), legacy(129), WRITER) is None  # a segment from the last record on
    with pytest.raises(Unsplit, match="previous release") as unsplit:
        untaken(seg, ("a", HOUR), legacy(110), WRITER)
    assert not unsplit.value.carried  # no record read again tells where that segment ended


def holding(first: int, last: int) -> Segment:
    """``folded``, holding every record it counts (none came in a window state)."""
    seg = folded(first, last, carried_through=first - 1)
    seg.carried_last = None
    return seg


def test_an_anchor_places_a_previous_release_watermark_only_when_it_goes_on_reading_the_shard():
    anchor = Anchor(first=200, last=260, trusted=True)
    assert anchor.holds_through(200) == 260  # that release's segment retried: this very segment, whose end is known
    assert anchor.holds_through(150) == 199  # it took every record touching it before the anchor, none after
    assert anchor.holds_through(201) is None  # past the anchor: the anchor is not where that release stopped
    assert Anchor(200, 260, trusted=False).holds_through(150) is None
    seg = holding(100, 129)
    assert untaken(seg, ("a", HOUR), Watermark.decode(order_preserving(105)), WRITER, Anchor(120, 140, True)) == (
        ("a", HOUR), 10, None, None, None)  # 120..129: the records from the anchor on
    assert untaken(seg, ("a", HOUR), Watermark.decode(order_preserving(100)), WRITER, Anchor(100, 110, True)) == (
        ("a", HOUR), 19, None, None, None)  # the anchor's own segment, which ended at 110: 111..129 are new to it
    with pytest.raises(Unsplit, match="anchor at 90"):  # that release took a segment past the anchor: not placed
        untaken(seg, ("a", HOUR), Watermark.decode(order_preserving(100)), WRITER, Anchor(90, 95, True))
    with pytest.raises(Unsplit, match="anchor at 90 cannot tell: read again"):
        # the same first record no longer means the same segment where the shard may be read again with other cuts
        untaken(seg, ("a", HOUR), Watermark.decode(order_preserving(100)), WRITER, Anchor(90, 95, False, "read again"))


def test_an_anchor_is_trusted_only_after_a_counted_record_of_the_shard():
    seg = holding(100, 129)
    assert anchor_of(seg, RecordsAgain(records_of(90, 99)), OVERLAP_SETTINGS).trusted
    assert not anchor_of(seg, RecordsAgain([]), OVERLAP_SETTINGS).trusted  # it starts the shard
    uncounted = [{**r, "eventName": "REMOVE"} for r in records_of(90, 99)]
    assert not anchor_of(seg, RecordsAgain(uncounted), OVERLAP_SETTINGS).trusted  # nothing counted before it
    assert not anchor_of(seg, RecordsAgain(None, "TrimmedDataAccessException"), OVERLAP_SETTINGS).trusted


def legacy_answers(old: int, stream: list[dict], held: dict | None = None):
    """Answers in which every item first shows the previous release's watermark at ``old``, then applies; the
    anchor is ``held`` (None: none yet), the shard's first records ``stream``."""
    seen = order_preserving(old)

    def answer(step):
        if isinstance(step, ReadAnchor):
            return held
        if isinstance(step, ReadRecords):
            return RecordsAgain([r for r in stream if int(r["dynamodb"]["SequenceNumber"]) <= int(step.through)])
        if isinstance(step, PutAnchor):
            return step.item
        return [Answer(Outcome.APPLIED, 1) if u.resumes else Answer(Outcome.TAKEN, 5, seen) for u in step.updates]

    return answer, seen


def test_a_segment_meeting_a_previous_release_watermark_puts_the_shards_anchor_once_then_sends_what_it_lacks():
    seg = holding(100, 129)
    answer, seen = legacy_answers(95, records_of(60, 129))
    result, log = run(overlap_steps(seg), answer)
    kinds = [type(step).__name__ for step in log]
    assert kinds[:4] == ["Send", "ReadAnchor", "ReadRecords", "PutAnchor"]  # before any item is judged
    assert kinds.count("PutAnchor") == 1
    [read] = [step for step in log if isinstance(step, ReadRecords)]
    assert (read.first, read.through) == (None, "99")  # the shard's first records, before the segment
    [put] = [step.item for step in log if isinstance(step, PutAnchor)]
    assert Anchor.of_item(put) == Anchor(100, 129, True, put["why"]["S"])
    assert put["pk"] == {"S": ANCHOR_PARTITION} and put["sk"] == {"S": WRITER.source}
    resent = [u for step in log if isinstance(step, Send) for u in step.updates if u.resumes]
    assert sorted(u.added for u in resent) == [15, 30, 30]  # all of it: it goes on past that release's reading
    assert all(u.request["ExpressionAttributeValues"][":seen"] == {"B": seen} for u in resent)
    assert result.unresolved == ()


def test_a_segment_that_starts_the_shard_leaves_previous_release_items_unresolved_on_their_watermark():
    """The shard read again from its trim horizon: where that release's segments ended is unknown, so the items
    take nothing of it, are marked, and keep their watermark, which every later segment is judged against too."""
    seg = holding(100, 129)
    answer, seen = legacy_answers(110, records_of(100, 129))
    result, log = run(overlap_steps(seg), answer)
    [put] = [step.item for step in log if isinstance(step, PutAnchor)]
    assert put["trusted"] == {"BOOL": False}
    marked = [u for step in log if isinstance(step, Send) for u in step.updates if u.unresolved]
    assert sorted(u.item for u in marked) == sorted([("a", HOUR), ("a", MINUTE), ("b", HOUR)])
    for update in marked:
        assert update.added == 0
        assert update.request["ExpressionAttributeValues"][":to"] == {"B": seen}  # the watermark stays
        # what it may lack of 111..129: 100..110 are surely taken
        assert update.unresolved.missing_at_most == (19 if update.item[0] == "a" else 9)
    assert len(result.unresolved) == 3


def test_an_anchor_the_shard_has_is_read_not_put_and_an_export_never_looks_for_one():
    seg = holding(100, 129)
    held = Anchor(120, 140, True).item(anchor_key(WRITER), 0)
    answer, _ = legacy_answers(95, [], held)
    result, log = run(overlap_steps(seg), answer)
    assert not any(isinstance(step, (PutAnchor, ReadRecords)) for step in log)
    assert sorted(u.added for step in log if isinstance(step, Send) for u in step.updates if u.resumes) == [5, 10, 10]
    export = Writer.of_export("arn:aws:dynamodb:us-east-1:1:table/e/export/01")
    backoff = lambda: Backoff(attempts=8, rng=random.Random(0))  # noqa: E731
    hours, _ = segment_updates(seg, export, "t", Settings())
    assert hours[0].request["ConditionExpression"] == "attribute_not_exists(#w) OR #w < :w"  # no previous release's
    answer, _ = legacy_answers(95, [])
    _, log = run(commit_steps(seg, export, "t", OVERLAP_SETTINGS, backoff), answer)
    assert not any(isinstance(step, (ReadAnchor, PutAnchor)) for step in log)


def test_a_taken_answer_inside_the_segment_sends_the_rest_on_the_watermark_it_showed():
    seg = folded(100, 129)
    seen = order_preserving(109) + THROUGH

    def answer(step):
        return [
            Answer(Outcome.TAKEN, 10, seen) if u.item == ("a", HOUR) and not u.resumes else Answer(Outcome.APPLIED, 30)
            for u in step.updates
        ]

    result, log = run(steps_of(seg), answer)
    sends = [step.updates for step in log if isinstance(step, Send)]
    [resent] = [u for updates in sends for u in updates if u.resumes]
    assert resent.item == ("a", HOUR) and resent.added == 20
    request = resent.request
    assert request["ConditionExpression"] == "#w = :seen"
    assert request["ExpressionAttributeValues"][":seen"] == {"B": seen}
    assert request["ExpressionAttributeValues"][":to"] == {"B": WRITER.watermark(seg)}
    assert request["ExpressionAttributeValues"][":a0"] == {"N": "20"}
    assert ":w" not in request["ExpressionAttributeValues"]  # DynamoDB refuses a value no expression uses
    assert (result.applied, result.already_applied, result.resumed, result.retries) == (3, 0, 1, 0)


def test_a_watermark_that_keeps_moving_under_a_resumed_update_gives_up():
    seg = folded(100, 129)
    seen = order_preserving(109) + THROUGH
    with pytest.raises(RetriesExhausted, match="kept moving"):
        run(steps_of(seg, attempts=30), lambda step: [Answer(Outcome.TAKEN, 10, seen) for _ in step.updates])


def records_of(first: int, last: int) -> list[dict]:
    """Records from ``first`` to ``last`` as a stream gives them back, in the shape parse_record reads: one event
    of counter "a" at T0 each."""
    return [
        {
            "eventName": "INSERT",
            "dynamodb": {
                "ApproximateCreationDateTime": T0 / 1000,
                "SequenceNumber": str(position),
                "NewImage": {"id": {"S": str(position)}, "counter": {"S": "a"}, "ts": {"N": str(T0)}},
            },
        }
        for position in range(first, last + 1)
    ]


# The rule that counts ``records_of``: each record in its counter's minute and hour.
OVERLAP_SETTINGS = Settings(rules=parse_rules('[{"name": "a", "counter": "{counter}"}]'))


def carried(first: int, last: int, carried_through: int) -> Segment:
    """A segment of ``records_of`` from first to last, those up to ``carried_through`` carried as sums."""
    seg = Segment(str(first), T0, str(first))
    records = held_records(records_of(first, last), OVERLAP_SETTINGS)
    for position, contributions in records:
        seg.add(str(position), contributions)
    seg.held = HeldRecords.of((p, c) for p, c in records if p > carried_through)
    seg.carried_last = str(carried_through)
    return seg


def overlap_steps(seg):
    backoff = lambda: Backoff(attempts=8, rng=random.Random(0))  # noqa: E731
    return commit_steps(seg, WRITER, "t", OVERLAP_SETTINGS, backoff)


def taken_at(position: int):
    """Answers in which every item first shows a watermark at ``position`` (another reader's cut), then applies."""
    seen = order_preserving(position) + THROUGH

    def answer(step):
        if isinstance(step, ReadRecords):
            return answer.stream(step)
        return [Answer(Outcome.APPLIED, 1) if u.resumes else Answer(Outcome.TAKEN, 5, seen) for u in step.updates]

    return answer, seen


def test_an_overlap_among_carried_records_is_split_on_the_records_read_again_from_the_stream():
    seg = carried(100, 129, carried_through=114)
    answer, seen = taken_at(107)
    answer.stream = lambda step: RecordsAgain(records_of(int(step.first), int(step.through)), requests=2)
    result, log = run(overlap_steps(seg), answer)
    [read] = [step for step in log if isinstance(step, ReadRecords)]  # once for the segment, not once an item
    assert (read.first, read.through, read.writer) == ("100", "114", WRITER)
    resent = [u for step in log if isinstance(step, Send) for u in step.updates if u.resumes]
    assert sorted(u.added for u in resent) == [22, 22]  # 108..129 in the minute and in the hour
    assert all(u.request["ExpressionAttributeValues"][":seen"] == {"B": seen} for u in resent)
    assert all(UNRESOLVED_ATTRIBUTE not in str(u.request) for u in resent)
    assert not any(isinstance(step, Put) for step in log)
    assert (result.resumed, result.overlaps_read, result.stream_requests, result.unresolved) == (2, 1, 2, ())


@pytest.mark.parametrize(
    "stream, why",
    [
        (lambda seg, step: RecordsAgain(None, "TrimmedDataAccessException: trimmed", 1), "trimmed"),
        # A rule changed since: the records read again count elsewhere than the window state did.
        (lambda seg, step: RecordsAgain([{**r, "dynamodb": {**r["dynamodb"], "NewImage": {
            **r["dynamodb"]["NewImage"], "counter": {"S": "z"}}}} for r in records_of(100, 114)]), "differ"),
        (lambda seg, step: RecordsAgain(records_of(101, 114)), "differ"),  # the first record missing
    ],
    ids=["trimmed", "rule-changed", "gap"],
)
def test_an_overlap_the_stream_cannot_split_leaves_the_item_unresolved_and_commits_the_rest(stream, why):
    seg = carried(100, 129, carried_through=114)
    answer, seen = taken_at(107)
    answer.stream = lambda step: stream(seg, step)
    result, log = run(overlap_steps(seg), answer)
    kinds = [type(step).__name__ for step in log]
    # The records are put before the updates that mark the items: a crash between them loses no record.
    assert kinds.index("Put") < max(i for i, step in enumerate(log) if isinstance(step, Send) and step.updates[0].resumes)
    assert kinds.count("ReadRecords") == 1
    marked = [u for step in log if isinstance(step, Send) for u in step.updates if u.unresolved]
    assert sorted(u.item for u in marked) == sorted([("a", HOUR), ("a", MINUTE)])
    for update in marked:
        request = update.request
        assert update.added == 15  # 115..129, held: surely not taken; 100..114 unknown
        assert request["ConditionExpression"] == "#w = :seen"
        assert request["ExpressionAttributeValues"][":u"] == {"SS": [update.unresolved.mark]}
        assert request["ExpressionAttributeValues"][":to"] == {"B": WRITER.watermark(seg)}  # the shard moves on
        assert update.unresolved.missing_at_most == 15 and why in update.unresolved.why
    put = [item for step in log if isinstance(step, Put) for item in step.items]  # the hours', then the minutes'
    assert {item["pk"]["S"] for item in put} == {UNRESOLVED_PARTITION}
    assert sorted(item["bucket"]["S"] for item in put) == sorted([HOUR.sort_key, MINUTE.sort_key])
    assert all(item["records"]["S"] == "100..129" for item in put)
    assert len(result.unresolved) == 2


def test_an_export_segment_is_never_read_again_and_its_unsplit_items_are_left_unresolved():
    export = Writer.of_export("arn:aws:dynamodb:us-east-1:1:table/e/export/01")
    seg = folded(100, 129)
    seg.held = None  # a backfill's segments hold no records
    seen = order_preserving(110) + THROUGH
    backoff = lambda: Backoff(attempts=8, rng=random.Random(0))  # noqa: E731
    steps = commit_steps(seg, export, "t", Settings(ranked_prefixes=("",)), backoff)
    result, log = run(steps, lambda step: [Answer(Outcome.APPLIED, 1) if u.resumes else Answer(Outcome.TAKEN, 5, seen) for u in step.updates])
    assert not any(isinstance(step, ReadRecords) for step in log)
    assert {u.item for u in result.unresolved} == {("a", HOUR), ("a", MINUTE), ("b", HOUR)}
    assert all("not held" in u.why for u in result.unresolved)


def test_a_late_records_marks_ride_in_the_same_update_as_its_hour_and_day():
    """A close reads an hour and its late marks at one instant: they are one item, written by one update, so no
    close can see the record in the hour without its mark (or the reverse)."""
    rules = parse_rules('[{"name": "lat", "counter": "lat/{page}", "histogram": "ms"}]')
    kept = Settings(calendar_prefixes=("lat/",), rules=rules)
    event = 1_795_000_000_000
    record = stream_record(image(id="x", page="a", ms=250, ts=event), arrival_s=event / 1000 + 3 * 86_400, sequence="7")
    folder = SegmentFolder(ladder=Ladder(kept))
    list(folder.fold([parse_record(record, kept)]))
    hours, rest = segment_updates(folder.close(), Writer.of_shard("arn", "s"), "t", kept)
    [hour] = hours
    names = hour.request["ExpressionAttributeNames"]
    assert sorted(names[n] for n in names if not n.startswith("#w") and n != "#ttl") == sorted(
        ["count", "late", bin_of(250), "L" + bin_of(250)])
    by_key = {u.request["Key"]["sk"]["S"][:2]: u for u in rest}
    assert "late" in by_key["D#"].request["ExpressionAttributeNames"].values()
    assert "late" not in by_key["MO"].request["ExpressionAttributeNames"].values()
    assert all(not u.request["Key"]["pk"]["S"].startswith("#late#") for u in hours + rest)
