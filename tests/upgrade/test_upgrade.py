"""The previous release counts a stream and stops with state in flight; this release takes over the same tables.

The previous release (releases.PREVIOUS_RELEASE) is installed from its commit into a venv of its own and
runs its own handler. It counts a first window whole, the first batch of a second window (its state carried
by the event source mapping) and fails partway through the second batch, some of its commits landed and the
rest not; among the records are late ones, counted in their hour alone. Then the deploy: this release's
handler gets the failed batch again with the state the old one wrote, finishes that window and counts a third.
Every count, distinct count, listing and top list must then equal brute force, with nothing unresolved.
Then the event source mapping is created again and reads the shard from its start with other cuts: the
shard's anchor (the first segment this release committed over the previous release's watermarks, which went
on reading the shard) places every item's watermark of the previous release, and every answer stays exact.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tally.core.units import DAY_MS

from .pipeline import PAGES, Pipeline, differences_from_truth, iso_date, iso_instant, ms_of, windows_at
from .releases import ROOT, current_release
from .scenarios import (
    CALENDAR,
    CASES,
    NEW_SETTINGS,
    count_until_deploy,
    fresh_pipeline,
    read_again_with_other_cuts,
    upgrade_with_state_in_flight,
)

pytestmark = pytest.mark.sweep


@pytest.mark.parametrize("backend, seed", CASES)
def test_upgrade_with_state_in_flight_ends_exact(backend, seed, local_server, previous_release):
    rng, pipeline = fresh_pipeline(local_server, "upgrade", seed)
    now = current_release()
    at_ms, _cuts = upgrade_with_state_in_flight(pipeline, previous_release, now, rng)

    assert differences_from_truth(pipeline, pipeline.read(now, windows_at(at_ms), **NEW_SETTINGS)) == []


def close_until_caught_up(pipeline: Pipeline) -> None:
    """``scripts/close_periods.py`` until it has caught up: a zone's first close takes a month of days a run,
    from about 89 days back."""
    for _run in range(5):
        closed = subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "close_periods.py")],
            capture_output=True, text=True, env=pipeline.env(**NEW_SETTINGS, **CALENDAR), timeout=300,
        )
        assert closed.returncode == 0, closed.stdout + closed.stderr


def days_differing_from_truth(pipeline: Pipeline, at_ms: int) -> list[str]:
    """The last five UTC days before ``at_ms`` of every counter as this release reads them (count and distinct
    users), each that differs from brute force; and the windows' differences."""
    first_day = at_ms // DAY_MS * DAY_MS - 4 * DAY_MS
    days = {"start": iso_date(first_day), "end": iso_date(first_day + 5 * DAY_MS)}
    read = pipeline.read_all(current_release(), windows_at(at_ms), days, **NEW_SETTINGS, **CALENDAR)
    wrong = differences_from_truth(pipeline, read["answers"])
    assert len(read["days"]) == PAGES
    for counter, points in read["days"].items():
        for start, count, distinct in points:
            day_ms = ms_of(start)
            truth = pipeline.truth(iso_instant(day_ms), iso_instant(day_ms + DAY_MS)).get(counter, (0, 0))
            if (count, distinct if count else 0) != truth:
                wrong.append(f"{counter} {start[:10]}: {count} counted, {distinct} distinct; truth {truth}")
    return wrong


@pytest.mark.parametrize("backend, seed", CASES)
def test_days_kept_after_the_upgrade_hold_what_the_previous_release_counted(backend, seed, local_server,
                                                                            previous_release):
    """calendarPrefixes set once the upgraded pipeline has caught up: the first close takes the days from the
    hours kept, those the previous release wrote (its late records in their hours alone) among them, and each
    UTC day of the last five equals brute force, count and distinct users."""
    rng, pipeline = fresh_pipeline(local_server, "days", seed)
    now = current_release()
    at_ms, _cuts = upgrade_with_state_in_flight(pipeline, previous_release, now, rng)
    assert pipeline.invoke(now, [], **NEW_SETTINGS, **CALENDAR).failed is None  # a function starts with days kept
    close_until_caught_up(pipeline)
    assert days_differing_from_truth(pipeline, at_ms) == []


@pytest.mark.parametrize("backend, seed", CASES[:1])
def test_days_set_at_the_upgrade_with_a_failed_batch_in_flight_equal_brute_force(backend, seed, local_server,
                                                                                 previous_release):
    """calendarPrefixes set in the deploy that upgrades, while a batch the previous release failed partway
    (late records among its records) waits for its retry."""
    rng, pipeline = fresh_pipeline(local_server, "days-at-deploy", seed)
    at_ms, _cuts = upgrade_with_state_in_flight(pipeline, previous_release, current_release(), rng, **CALENDAR)
    close_until_caught_up(pipeline)
    assert days_differing_from_truth(pipeline, at_ms) == []


@pytest.mark.parametrize("backend, seed", CASES)
def test_reread_with_other_cuts_after_upgrade_ends_exact(backend, seed, local_server, previous_release):
    """The event source mapping created again after the deploy (TRIM_HORIZON): the shard read again from its
    start with other cuts, the first window of the re-read ending inside the previous release's first window.
    An item holding the previous release's watermark is placed by the shard's anchor: every answer is exact, with
    nothing unresolved (the counts' answers say which counters are not exact)."""
    rng, pipeline = fresh_pipeline(local_server, "reread", seed)
    now = current_release()
    at_ms, cuts = upgrade_with_state_in_flight(pipeline, previous_release, now, rng)
    read_again_with_other_cuts(pipeline, now, rng, cuts)
    answers = pipeline.read(now, windows_at(at_ms), **NEW_SETTINGS)
    assert differences_from_truth(pipeline, answers) == []
    assert [c for answer in answers for c, got in answer["counts"].items() if got["unresolved"]] == []


@pytest.mark.parametrize("backend, seed", CASES)
def test_mapping_replaced_in_the_deploy_is_never_high_and_the_repair_makes_it_exact(backend, seed, local_server,
                                                                                   previous_release):
    """The event source mapping replaced in the deploy itself (CloudFormation creates the new one, TRIM_HORIZON,
    before it deletes the old): the previous release's state in flight is dropped with the old mapping, and this
    release's first segment on the shard is already the re-read, with other cuts. Its anchor is not trusted: every
    item holding the previous release's watermark is left unresolved (low, never high, marked), and
    ``scripts/audit.py --repair`` makes every answer exact."""
    rng, pipeline = fresh_pipeline(local_server, "replaced", seed)
    now = current_release()
    at_ms, cuts, _state = count_until_deploy(pipeline, previous_release, rng)
    read_again_with_other_cuts(pipeline, now, rng, cuts)

    high, marked = [], 0
    for answer in pipeline.read(now, windows_at(at_ms), **NEW_SETTINGS):
        for counter, got in answer["counts"].items():
            truth = pipeline.truth(got["start"], got["end"]).get(counter, (0, 0))[0]
            marked += bool(got["unresolved"])
            if got["total"] > truth:
                high.append(f"{answer['window']['length']}: {counter} counted {got['total']} of {truth}")
            elif got["total"] < truth:
                assert got["unresolved"], f"{counter} counted {got['total']} of {truth}, low without a mark"
    assert high == [], f"counted twice after the re-read: {high}"
    if previous_release.version == "0.2.0":  # only its watermarks (the first record taken) cannot be placed
        assert marked, "no counter marked: the re-read met no watermark of the previous release"

    repair = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "audit.py"), "--repair", "--json"],
        capture_output=True, text=True, env=pipeline.env(**NEW_SETTINGS), timeout=300,
    )
    assert repair.returncode == 0, repair.stdout + repair.stderr
    assert differences_from_truth(pipeline, pipeline.read(now, windows_at(at_ms), **NEW_SETTINGS)) == []


@pytest.mark.parametrize("backend, seed", CASES[:1])
def test_reread_with_other_cuts_is_exact_where_this_release_counted_throughout(backend, seed, local_server):
    """The same stops and the same re-read with this release on both sides: exact, nothing unresolved, so what
    the test above finds comes from the previous release's watermarks, not from the harness."""
    rng, pipeline = fresh_pipeline(local_server, "same", seed)
    now = current_release()
    at_ms, cuts = upgrade_with_state_in_flight(pipeline, now, now, rng)
    read_again_with_other_cuts(pipeline, now, rng, cuts)
    assert differences_from_truth(pipeline, pipeline.read(now, windows_at(at_ms), **NEW_SETTINGS)) == []
