"""Across releases: the previous release's window state and bucket items are taken over exactly, an
unreadable state never blocks the shard, and the previous release refuses this one's state loudly."""

import json
from pathlib import Path

import pytest

from factories import counter_record, records_again, window_event
from moto_tables import COUNTS, read_counts
from tally.core.buckets import lane_sort_key
from tally.core.commit import Writer, legacy_marker_key, legacy_parts
from tally.core.segments import Segment, SegmentFolder, UnreadableState
from tally.core.units import HOUR_MS, MINUTE_MS
from tally.invocation import outcomes_of, process, writer_of

T0 = 1_795_000_000_000 - 1_795_000_000_000 % HOUR_MS
# A window state exactly as the released handler returns it to Lambda (format version 1), frozen:
# a release that can no longer read it would lose the open window of every shard on deploy.
RELEASED_STATE = json.loads((Path(__file__).parent / "events" / "window_state_v1.json").read_text())


def test_the_released_state_format_reads_back_unchanged():
    segment = Segment.from_state(RELEASED_STATE["segment"])
    assert (segment.first_sequence, segment.last_sequence, segment.records) == (
        "100000000000000000001",
        "100000000000000000011",
        6,
    )
    assert segment.to_state() == {**RELEASED_STATE["segment"], "v": 3}  # carried on as this release's version


def test_a_window_opened_by_the_released_handler_is_finished_by_this_one(counts_table, dynamodb, settings):
    later = counter_record("page-views", T0 + 7 * MINUTE_MS + 5_000, arrival_s=(T0 + 11 * MINUTE_MS) / 1000)
    response, summary = process(window_event([later], state=RELEASED_STATE, final=True), counts_table.commit, settings)
    assert response == {"state": {}}
    assert summary.discarded_states == 0
    assert read_counts(dynamodb, "page-views") == {
        "M#2026-11-18T11:01": 2,
        "M#2026-11-18T11:02": 1,
        "M#2026-11-18T11:07": 2,
        "H#2026-11-18T11": 5,
    }
    assert read_counts(dynamodb, "sign-ups") == {"M#2026-11-18T10:10": 1, "H#2026-11-18T10": 1}
    assert read_counts(dynamodb, "#rejected#invalid_counter") == {"M#2026-11-18T11:10": 1, "H#2026-11-18T11": 1}


UNREADABLE = {
    "not a mapping": {"segment": "x"},
    "another version": {"segment": {**RELEASED_STATE["segment"], "v": 99}},
    "a field missing": {"segment": {key: v for key, v in RELEASED_STATE["segment"].items() if key != "deltas"}},
    "a bad sort key": {"segment": {**RELEASED_STATE["segment"], "deltas": [["c", "X#never", 1]]}},
    "a bad delta": {"segment": {**RELEASED_STATE["segment"], "deltas": [["c", "H#2026-11-18T11", "many"]]}},
}


@pytest.mark.parametrize("state", UNREADABLE.values(), ids=UNREADABLE.keys())
def test_from_state_refuses_what_it_cannot_read_with_one_error_type(state):
    with pytest.raises(UnreadableState):
        Segment.from_state(state["segment"])


@pytest.mark.parametrize("state", UNREADABLE.values(), ids=UNREADABLE.keys())
def test_an_unreadable_state_is_discarded_and_the_window_goes_on(state, counts_table, dynamodb, settings):
    records = [counter_record("c", T0 + MINUTE_MS), counter_record("c", T0 + 2 * MINUTE_MS)]
    response, summary = process(window_event(records, state=state, final=True), counts_table.commit, settings)
    assert summary.discarded_states == 1
    assert summary.discarded_state_detail  # logged, with what the state said about its records
    assert response == {"state": {}}
    # This invocation's own records still count; the discarded state's do not.
    assert read_counts(dynamodb, "c") == {"M#2026-11-18T11:01": 1, "M#2026-11-18T11:02": 1, "H#2026-11-18T11": 2}
    assert read_counts(dynamodb, "page-views") == {}


def test_a_retried_invocation_with_the_same_unreadable_state_counts_once(counts_table, dynamodb, settings):
    event = window_event([counter_record("c", T0 + MINUTE_MS)], state=UNREADABLE["another version"], final=True)
    process(event, counts_table.commit, settings)
    summary = process(event, counts_table.commit, settings)[1]
    assert (summary.discarded_states, summary.updates_already_applied) == (1, 2)
    assert read_counts(dynamodb, "c") == {"M#2026-11-18T11:01": 1, "H#2026-11-18T11": 1}


def test_the_discard_detail_names_the_lost_records_when_the_state_says_which(settings):
    event = window_event([], state=UNREADABLE["another version"], final=True)
    summary = process(event, lambda segment, source: pytest.fail("nothing to commit"), settings)[1]
    assert "100000000000000000001" in summary.discarded_state_detail
    assert "100000000000000000011" in summary.discarded_state_detail
    assert "6 records" in summary.discarded_state_detail


# What the previous release reads (its READABLE_STATE_VERSIONS), frozen: it discards any other
# state with its WindowStatesDiscarded metric and alarm, never takes it over.
PREVIOUS_RELEASE_READS = (1, 2)


def previous_release_commit(client, segment: Segment, writer: Writer, settings, parts: list[int]) -> None:
    """The previous release's commit of some parts of ``segment``, request for request, frozen here:
    per part, one TransactWriteItems of its marker (conditional Put) and one unconditional ADD per bucket."""
    for part in parts:
        items = legacy_parts(segment)[part]
        marker = {name: {"S": value} for name, value in legacy_marker_key(segment, writer.legacy_source, part).items()}
        marker |= {"records": {"N": str(segment.records)}, "last": {"S": segment.last_sequence}, "ttl": {"N": "1"}}
        transaction = [
            {
                "Put": {
                    "TableName": COUNTS,
                    "Item": marker,
                    "ConditionExpression": "attribute_not_exists(#pk)",
                    "ExpressionAttributeNames": {"#pk": "pk"},
                }
            }
        ]
        for counter, bucket in items:
            key = {"pk": {"S": counter}, "sk": {"S": lane_sort_key(bucket.sort_key, writer.lane(settings.bucket_lanes))}}
            transaction.append(
                {
                    "Update": {
                        "TableName": COUNTS,
                        "Key": key,
                        "UpdateExpression": "ADD #count :delta SET #ttl = if_not_exists(#ttl, :ttl)",
                        "ExpressionAttributeNames": {"#count": "count", "#ttl": "ttl"},
                        "ExpressionAttributeValues": {
                            ":delta": {"N": str(segment.deltas[(counter, bucket)])},
                            ":ttl": {"N": str(bucket.ttl_seconds(settings))},
                        },
                    }
                }
            )
        client.transact_write_items(TransactItems=transaction)


def wide_window(counters: int, first_minute: int) -> dict:
    """A one-invocation window whose records touch ``counters`` x (minute, hour) bucket items."""
    records = [counter_record(f"c{i:03d}", T0 + (first_minute + i % 3) * MINUTE_MS) for i in range(counters)]
    return window_event(records, final=True)


def folded(event: dict, settings) -> Segment:
    """The window's one segment, as both releases fold it (the same records close it at the same place)."""
    folder = SegmentFolder()
    assert list(folder.fold(outcomes_of(event["Records"], settings))) == []
    return folder.close()


def test_a_segment_the_previous_release_committed_in_part_is_completed_exactly_after_the_upgrade(
    counts_table, dynamodb, settings
):
    earlier, window = wide_window(120, 0), wide_window(120, 0)
    writer = writer_of(window)
    # Before the upgrade the previous release committed a whole segment (its buckets carry no watermark)...
    previous_release_commit(dynamodb, folded(earlier, settings), writer, settings, parts=[0, 1, 2])
    # ... and two of the three transactions of the next one, then its invocation died.
    segment = folded(window, settings)
    assert [len(part) for part in legacy_parts(segment)] == [99, 99, 42]
    previous_release_commit(dynamodb, segment, writer, settings, parts=[0, 1])

    # Lambda retries the invocation on this release: it skips the two parts and completes the third.
    summary = process(window, counts_table.commit, settings)[1]
    assert (summary.updates_already_applied, summary.bucket_updates) == (198, 42)
    for i in range(120):
        minute = f"M#2026-11-18T11:{i % 3:02d}"
        assert read_counts(dynamodb, f"c{i:03d}") == {minute: 2, "H#2026-11-18T11": 2}, i
    # A retry of that retry finds every watermark, and later segments take the items over as their own.
    assert process(window, counts_table.commit, settings)[1].updates_already_applied == 240


def test_the_previous_release_refuses_this_ones_window_state_loudly(counts_table, settings):
    """A segment this release may have applied in part must never be taken over by a release that would add it again."""
    open_window = {**wide_window(3, 0), "isFinalInvokeForWindow": False}
    response = process(open_window, counts_table.commit, settings)[0]
    assert response["state"]["segment"]["v"] not in PREVIOUS_RELEASE_READS


def test_after_a_rollback_the_previous_release_adds_exactly_to_watermarked_items_and_a_roll_forward_goes_on(
    counts_table, dynamodb, settings
):
    first, second, third = wide_window(120, 0), wide_window(120, 0), wide_window(120, 0)
    writer = writer_of(first)
    process(first, counts_table.commit, settings)  # this release: the items now carry the shard's watermark
    # Rolled back: the previous release commits the next segment its own way, markers and transactions.
    previous_release_commit(dynamodb, folded(second, settings), writer, settings, parts=[0, 1, 2])
    # Rolled forward again: the next segment lies after the watermark, and is applied whole.
    summary = process(third, counts_table.commit, settings)[1]
    assert (summary.bucket_updates, summary.updates_already_applied) == (240, 0)
    for i in range(120):
        assert read_counts(dynamodb, f"c{i:03d}") == {f"M#2026-11-18T11:{i % 3:02d}": 3, "H#2026-11-18T11": 3}, i


def stream_of(records: list[dict]):
    """What reads the shard's records again: ``records``, as the Streams API would give a range of them."""
    calls = []

    def read_again(step):
        calls.append(step)
        return records_again(records, step)

    return read_again, calls


@pytest.mark.parametrize("damage", ["another version", "a bad delta"])
def test_an_unreadable_state_is_rebuilt_from_its_records_read_again(damage, counts_table, dynamodb, settings):
    """The window's first invocation carried three records; its state comes back unreadable (another release's, or
    damaged) but still names them: they are read again and counted with this invocation's, once however retried."""
    earlier = [counter_record("c", T0 + MINUTE_MS + n) for n in range(3)]
    state = process(window_event(earlier), counts_table.commit, settings)[0]["state"]
    damaged = {"segment": {**state["segment"], **UNREADABLE[damage]["segment"], "first": state["segment"]["first"],
                           "last": state["segment"]["last"]}}
    with pytest.raises(UnreadableState):
        Segment.from_state(damaged["segment"])
    read_again, calls = stream_of(earlier)
    final = window_event([counter_record("c", T0 + 2 * MINUTE_MS)], state=damaged, final=True)
    for attempt in range(2):  # Lambda's retry of the same event
        response, summary = process(final, counts_table.commit, settings, read_again)
        assert response == {"state": {}}
        assert (summary.rebuilt_states, summary.discarded_states, summary.stream_requests) == (1, 0, 2)
        assert read_counts(dynamodb, "c") == {"M#2026-11-18T11:01": 3, "M#2026-11-18T11:02": 1, "H#2026-11-18T11": 4}
    assert [(step.first, step.through) for step in calls] == [(state["segment"]["first"], state["segment"]["last"])] * 2


def test_an_unreadable_state_whose_records_left_the_stream_is_discarded_and_says_why(counts_table, dynamodb, settings):
    read_again, _ = stream_of([])
    state = UNREADABLE["another version"]
    event = window_event([counter_record("c", T0 + MINUTE_MS)], state=state, final=True)
    summary = process(event, counts_table.commit, settings, read_again)[1]
    assert (summary.rebuilt_states, summary.discarded_states) == (0, 1)
    assert "6 records" in summary.discarded_state_detail and "TrimmedDataAccessException" in summary.discarded_state_detail
    assert read_counts(dynamodb, "c") == {"M#2026-11-18T11:01": 1, "H#2026-11-18T11": 1}
