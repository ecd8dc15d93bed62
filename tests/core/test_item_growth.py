"""What bucket updates cost (ReturnConsumedCapacity), summed by the commit, and the lanes it recommends."""

import pytest
from test_commit import HOUR, MINUTE, WRITER, run, segment, steps_of

from tally.core.commit import Answer, Outcome, Send, bucket_update, segment_updates
from tally.core.item_growth import (
    ITEM_GROWTH_KB,
    SHARDS_PER_LANE,
    item_growth,
    recommended_bucket_lanes,
    watermarks_in,
)
from tally.core.settings import MAX_BUCKET_LANES, Settings


def committed(answer):
    """The result of committing ``segment()``, each update answered by ``answer(update, try)``."""
    tries = []

    def answers(step):
        assert isinstance(step, Send)
        tries.append(step)
        return [answer(update, len(tries) - 1) for update in step.updates]

    return run(steps_of(segment()), answers)[0]


def test_every_bucket_update_asks_for_the_units_it_consumed():
    hours, minutes = segment_updates(segment(), WRITER, "t", Settings())
    assert [u.request["ReturnConsumedCapacity"] for u in hours + minutes] == ["TOTAL"] * 3
    request = bucket_update("t", {"pk": "a", "sk": "M"}, {"count": 1}, 60, WRITER.tag, b"\x01\x01", b"\x01\x02\x01")
    assert request["ReturnConsumedCapacity"] == "TOTAL"


def test_the_commit_sums_the_units_of_its_applied_updates_and_keeps_the_largest():
    units = {("a", HOUR): 17.0, ("b", HOUR): 3.0, ("a", MINUTE): 2.0}

    def answer(update, tries):
        if update.item == ("b", HOUR) and tries == 0:
            return Answer(Outcome.RETRY)  # throttled: consumed nothing, sent again
        return Answer(Outcome.APPLIED, update.added, units=units[update.item])

    result = committed(answer)
    assert (result.applied, result.retries) == (3, 1)
    assert (result.write_units, result.largest_write_units) == (22.0, 17.0)


def test_updates_found_applied_or_answered_without_units_add_none():
    def answer(update, tries):
        if update.item == ("a", HOUR):
            return Answer(Outcome.TAKEN, 76, WRITER.watermark(segment()))  # a retry finds its own watermark
        return Answer(Outcome.APPLIED, update.added)

    result = committed(answer)
    assert (result.applied, result.already_applied) == (2, 1)
    assert (result.write_units, result.largest_write_units) == (0.0, 0.0)


def test_a_watermark_adds_its_name_and_its_bytes():
    assert WRITER.watermark_bytes(segment()) == 9 + len(WRITER.watermark(segment())) == 9 + 1 + 9 + 1


@pytest.mark.parametrize(
    ("units", "watermark_bytes", "lanes", "watermarks", "recommended"),
    [
        (17, 17, 1, 1024, 16),  # the scale model's one lane at 1,000 shards: 17 KB, 17-byte watermarks
        (5, 20, 1, 256, 4),  # just past the threshold
        (5, 20, 8, 256, MAX_BUCKET_LANES),  # a lane of 8 holding 256 shards: about 2,048 shards, 32 at most
        (6, 20, 4, 308, 20),
    ],
)
def test_the_recommended_lanes_put_about_64_shards_in_a_lane(units, watermark_bytes, lanes, watermarks, recommended):
    growth = item_growth(units, watermark_bytes, lanes)
    assert growth is not None
    assert (growth.watermarks, growth.recommended_bucket_lanes) == (watermarks, recommended)
    assert growth.as_log_fields()["recommended_bucket_lanes"] == recommended
    assert growth.as_log_fields()["bucket_lanes_at_maximum"] is (recommended == MAX_BUCKET_LANES)


def test_the_recommendation_never_lowers_the_lanes():
    assert recommended_bucket_lanes(watermarks=10, bucket_lanes=8) == 8
    assert recommended_bucket_lanes(watermarks=SHARDS_PER_LANE, bucket_lanes=1) == 1
    assert recommended_bucket_lanes(watermarks=SHARDS_PER_LANE + 1, bucket_lanes=1) == 2


def test_items_within_the_threshold_or_unmeasured_are_no_growth():
    assert item_growth(ITEM_GROWTH_KB, 20, 1) is None  # 4 units: an item of at most 4 KB
    assert item_growth(ITEM_GROWTH_KB + 1, 20, 1) is not None
    assert item_growth(ITEM_GROWTH_KB + 1, 0, 1) is None  # no segment committed: nothing to estimate from
    assert item_growth(0.0, 20, 1) is None


def test_watermarks_round_up_from_whole_kb():
    assert watermarks_in(1, 20) == 52  # 1,024 / 20 = 51.2
    with pytest.raises(ValueError):
        watermarks_in(1, 0)
