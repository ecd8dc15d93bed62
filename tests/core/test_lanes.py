"""Lanes over time: a segment takes the lanes in force when its first record arrived."""

import pytest

from tally.core.lanes import LANES_LEAD_MS, LaneHistory


def test_a_segment_takes_the_lanes_in_force_at_its_first_arrival():
    history = LaneHistory(((0, 1), (1_000, 4), (5_000, 8)))
    assert [history.lanes_at(ms) for ms in (0, 999, 1_000, 4_999, 5_000, 10**13)] == [1, 1, 4, 4, 8, 8]
    assert history.latest == 8


def test_new_lanes_count_from_a_lead_after_the_function_that_adopts_them_starts():
    history = LaneHistory.always(1)
    assert history.adopting(1, 10_000) is None  # already in force: nothing to write
    raised = history.adopting(4, 10_000)
    assert raised == LaneHistory(((0, 1), (10_000 + LANES_LEAD_MS, 4)))
    assert raised.lanes_at(10_000 + LANES_LEAD_MS - 1) == 1  # every try of a batch that arrived before keeps 1
    assert raised.adopting(4, 20_000) is None  # to be in force: the same
    # A change adopted again before the last one took effect starts after it, never before.
    again = raised.adopting(8, 9_000)
    assert again.changes[-1] == (10_000 + LANES_LEAD_MS + 1, 8)


@pytest.mark.parametrize("changes", [(), ((5, 1),), ((0, 1), (0, 2)), ((0, 2), (7, 0)), ((0, 1), (9, 2), (3, 4))])
def test_a_history_starts_at_zero_goes_forward_and_keeps_a_lane(changes):
    with pytest.raises(ValueError):
        LaneHistory(changes)
