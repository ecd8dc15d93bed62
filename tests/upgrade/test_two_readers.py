"""During a deploy, a reader of the previous release and one of this release read the same table.

The CHANGELOG ("Upgrade from 0.2.0"): counts are exact either way, and a marked item's count is read as it
is by both (only this release's reader says it is marked); a reader still on 0.2.0 reads sketches at their old
keys only, so its distinct counts of buckets counted after the deploy are low, and lists counters from
0.2.0's directory partition only. Everywhere else the two answer the same.
"""

from __future__ import annotations


import pytest

from .pipeline import PREFIX, Pipeline, ms_of, windows_at
from .releases import current_release
from .scenarios import (
    CASES,
    NEW_SETTINGS,
    count_until_deploy,
    fresh_pipeline,
    read_again_with_other_cuts,
    upgrade_with_state_in_flight,
)

pytestmark = pytest.mark.sweep


def users_by_counter(pipeline: Pipeline, records: slice, start: str, stop: str) -> dict[str, set[str]]:
    """Counter -> users of the shard's ``records`` whose minute lies in [start, stop)."""
    ids = {record["dynamodb"]["NewImage"]["id"]["S"] for record in pipeline.records[records]}
    users: dict[str, set[str]] = {}
    for event in pipeline.events:
        if event["id"] in ids and ms_of(start) <= event["ts"] // 60_000 * 60_000 < ms_of(stop):
            users.setdefault(PREFIX + event["page"], set()).add(event["user"])
    return users


@pytest.mark.parametrize("backend, seed", CASES)
def test_readers_of_both_releases_differ_only_where_the_changelog_says(backend, seed, local_server, previous_release):
    rng, pipeline = fresh_pipeline(local_server, "readers", seed)
    now = current_release()
    at_ms, cuts = upgrade_with_state_in_flight(pipeline, previous_release, now, rng)

    old = pipeline.read(previous_release, windows_at(at_ms))
    new = pipeline.read(now, windows_at(at_ms), **NEW_SETTINGS)
    differed = 0
    for old_answer, new_answer in zip(old, new, strict=True):
        start, stop = next(iter(new_answer["counts"].values()))["start"], next(iter(new_answer["counts"].values()))["end"]
        before = users_by_counter(pipeline, slice(0, cuts.first_window), start, stop)  # counted by 0.2.0 alone
        since = users_by_counter(pipeline, slice(cuts.first_window, None), start, stop)  # by this release, 0.2.0 in part
        for counter, got in new_answer["counts"].items():
            was = old_answer["counts"][counter]
            assert (was["start"], was["end"], was["total"]) == (got["start"], got["end"], got["total"]), counter
            if was["total"] == 0:
                continue
            # Users counted by 0.2.0 (the first window whole) are in its sketches; the others may be missing.
            assert len(before.get(counter, ())) <= was["distinct"] <= got["distinct"], (counter, was, got)
            if counter not in since:
                assert was["distinct"] == got["distinct"], counter
            differed += was["distinct"] != got["distinct"]
        assert set(before) <= set(old_answer["listed"]) <= set(new_answer["listed"])
        assert set(new_answer["listed"]) - set(old_answer["listed"]) <= set(since)
    assert differed, "no distinct count differed: the test would not see a reader of 0.2.0 reading new sketches"

    # Marked items (the event source mapping replaced in the deploy, its re-read with other cuts the first reader
    # of this release: tests/upgrade/test_upgrade.py): both readers read their counts as they are; only this
    # release's says so.
    rng, pipeline = fresh_pipeline(local_server, "readers-marked", seed)
    at_ms, cuts, _state = count_until_deploy(pipeline, previous_release, rng)
    read_again_with_other_cuts(pipeline, now, rng, cuts)
    old = pipeline.read(previous_release, windows_at(at_ms))
    new = pipeline.read(now, windows_at(at_ms), **NEW_SETTINGS)
    marked = 0
    for old_answer, new_answer in zip(old, new, strict=True):
        for counter, got in new_answer["counts"].items():
            was = old_answer["counts"][counter]
            assert was["total"] == got["total"] and was["unresolved"] == [], counter
            marked += bool(got["unresolved"])
    assert marked, "the re-read marked nothing: the test would not see how the readers tell marked items"
