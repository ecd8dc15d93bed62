"""This release stops with state in flight and the previous release takes over again: loses nothing, or the
rollback is refused beforehand by ``scripts/rollback_check.py``, which names what it would lose.

The same stops as the upgrade test, the other way round: this release counts a first window, carries a second
window's state and fails partway through its final batch; then the check, then the previous release's handler
retries that batch with this release's state and counts the rest.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from .pipeline import RULES, Pipeline, differences_from_truth, windows_at
from .releases import PREVIOUS_RELEASE, ROOT, current_release
from .scenarios import CALENDAR, CASES, NEW_SETTINGS, count_until_deploy, fresh_pipeline, take_over

pytestmark = pytest.mark.sweep

def rollback_check(pipeline: Pipeline) -> tuple[int, dict]:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "rollback_check.py"), "--to", PREVIOUS_RELEASE, "--json"],
        capture_output=True, text=True, env=pipeline.env(), timeout=120,
    )
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)


@pytest.mark.parametrize("backend, seed", CASES)
def test_a_rollback_the_check_allows_loses_nothing(backend, seed, local_server, previous_release):
    rng, pipeline = fresh_pipeline(local_server, "rollback", seed)
    now = current_release()
    at_ms, cuts, state = count_until_deploy(pipeline, now, rng, **NEW_SETTINGS)

    status, verdict = rollback_check(pipeline)
    assert (status, verdict["safe"], verdict["lost"]) == (0, True, [])

    take_over(pipeline, previous_release, rng, cuts, state)
    # The previous release's reader: every count exact; distinct counts and listings never high (the CHANGELOG:
    # it reads neither the lane partitions' sketches nor this release's directory partitions).
    old = pipeline.read(previous_release, windows_at(at_ms))
    assert differences_from_truth(pipeline, old, distinct=False, listing=False, top=False) == []
    for answer in old:
        for counter, got in answer["counts"].items():
            truth = pipeline.truth(got["start"], got["end"]).get(counter, (0, 0))
            assert got["distinct"] is None or got["distinct"] <= truth[1], (counter, got, truth)
        assert set(answer["listed"]) <= set(pipeline.truth(got["start"], got["end"]))
    # Upgraded again: nothing was lost from the table.
    assert differences_from_truth(pipeline, pipeline.read(now, windows_at(at_ms), **NEW_SETTINGS)) == []


@pytest.mark.parametrize("backend, seed", CASES)
def test_a_rollback_that_would_lose_counts_is_refused_naming_them(backend, seed, local_server, previous_release):
    """Days kept (calendarPrefixes) put late records' days and marks in the window state, and a rule with
    countFrom is one the previous release refuses: the check names both and exits 1. Rolled back anyway (the
    rule's countFrom dropped, the days left on), the previous release discards the state the check named, and
    its records go uncounted in every item the failed try had not reached."""
    rng, pipeline = fresh_pipeline(local_server, "refused", seed)
    now = current_release()
    rules = json.dumps([*RULES, {"name": "all", "counter": "all/views", "countFrom": "2020-01-01T00:00:00Z"}])
    at_ms, cuts, state = count_until_deploy(pipeline, now, rng, **NEW_SETTINGS, **CALENDAR, TALLY_RULES=rules)
    assert any(delta[1].startswith("D#") for delta in state["segment"]["deltas"]), "no late record's day in the state"

    status, verdict = rollback_check(pipeline)
    assert (status, verdict["safe"]) == (1, False)
    assert len(verdict["lost"]) == 2, verdict["lost"]
    days, rule = verdict["lost"]
    assert 'calendarPrefixes ["views/"]' in days and "window states holding late records' days" in days
    assert "set calendarPrefixes to []" in days
    assert rule.startswith("rule 'all' has countFrom") and "drop its countFrom" in rule

    take_over(pipeline, previous_release, rng, cuts, state)
    lost = 0
    for answer in pipeline.read(now, windows_at(at_ms), **NEW_SETTINGS):
        if answer["window"]["length"] == "4d":
            for counter, got in answer["counts"].items():
                truth = pipeline.truth(got["start"], got["end"]).get(counter, (0, 0))[0]
                assert got["total"] <= truth
                lost += truth - got["total"]
    # What the state carried and no write of the failed try had taken yet: lost, as the check said.
    assert 0 < lost <= cuts.failed - cuts.first_window == state["segment"]["records"]
