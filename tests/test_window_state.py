"""The tumbling-window state across releases: today's format stays readable, an unreadable one never blocks the shard."""

import json
from pathlib import Path

import pytest

from factories import counter_record, window_event
from moto_tables import read_counts
from tally.core.segments import Segment, UnreadableState
from tally.core.settings import HOUR_MS, MINUTE_MS
from tally.invocation import process

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
