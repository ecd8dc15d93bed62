"""The states in flight the upgrade and rollback tests stop a release with, and the cases they run."""

from __future__ import annotations

import json
import random
import time
import uuid
from dataclasses import dataclass

import pytest

from .pipeline import PREFIX, Invocation, Pipeline
from .releases import Release

SEEDS = (1, 2, 3)
BACKEND_MARKS = {"moto": (), "dynamodb-local": (pytest.mark.dynamodb_local,)}
CASES = [
    pytest.param(backend, seed, marks=marks, id=f"{backend}-seed{seed}")
    for backend, marks in BACKEND_MARKS.items()
    for seed in SEEDS
]
# This release's settings for the same stack: what it ranks (0.2.0 has no such setting and ignores it).
NEW_SETTINGS = {"TALLY_RANKED_PREFIXES": json.dumps([PREFIX])}
# Days and months kept for the prefix, in UTC alone (this release's calendarPrefixes and calendarZones).
CALENDAR = {"TALLY_CALENDAR_PREFIXES": json.dumps([PREFIX]), "TALLY_CALENDAR_ZONES": "[]"}
EVENTS, LATE_EVENTS = 420, 24


@dataclass(frozen=True)
class Cuts:
    """Where the shard was cut: the previous release counted [0, first_window) whole and [first_window, failed)
    as the first batch of the second window (its state carried), and failed partway through the window's final
    batch [failed, second_window_end), committing part of the window; this release goes on from there."""

    first_window: int
    failed: int
    second_window_end: int


def cut(rng: random.Random, start: int, end: int, *, windows: tuple[int, ...], batch: tuple[int, int]) -> list[Invocation]:
    """Records [start, end) as len(windows) consecutive windows of batches of ``batch`` sizes, at random cuts."""
    edges = sorted(rng.sample(range(start + 1, end), len(windows) - 1)) if len(windows) > 1 else []
    invocations = []
    for window, (low, high) in zip(windows, zip([start, *edges], [*edges, end], strict=True), strict=True):
        position = low
        while position < high:
            stop = min(high, position + rng.randint(*batch))
            invocations.append(Invocation(position, stop, stop == high, window))
            position = stop
    return invocations


def count_until_deploy(pipeline: Pipeline, before: Release, rng: random.Random, **settings: str) -> tuple[int, Cuts, dict]:
    """Tables made by ``before``, events written, and ``before`` (with ``settings``) stopped with state in flight;
    returns the instant readers ask about, the cuts and the state the failed invocation was given."""
    before.agent("create-tables", {"events": pipeline.events_table, "counts": pipeline.counts_table}, pipeline.env())
    now_ms = int(time.time() * 1000)
    pipeline.write_events(rng, now_ms, EVENTS, LATE_EVENTS)
    pipeline.read_stream()
    total = len(pipeline.records)
    first_window = rng.randrange(total // 4, total // 3)
    failed = first_window + rng.randrange(40, 80)
    cuts = Cuts(first_window, failed, failed + rng.randrange(150, 220))
    # The first window whole and the second window's first batch: its state is carried.
    first = cut(rng, 0, first_window, windows=(0,), batch=(40, 90)) + [Invocation(first_window, failed, False, 1)]
    counted = pipeline.invoke(before, first, **settings)
    assert counted.failed is None, counted.failed
    assert counted.state, "the second window's first batch returned no state to carry"
    # The window's final batch fails after some of its commit's writes landed: due for a retry with the same event.
    stopped = pipeline.invoke(before, [Invocation(failed, cuts.second_window_end, True, 1)], state=counted.state,
                              crash_after_writes=rng.randint(5, 60), **settings)
    assert stopped.failed is not None and "InjectedCrash" in stopped.failed, (
        f"the batch meant to fail partway did not: {stopped.failed}")
    at_ms = (now_ms // 60_000 + 1) * 60_000
    return at_ms, cuts, counted.state


def take_over(pipeline: Pipeline, after: Release, rng: random.Random, cuts: Cuts, state: dict, **settings: str) -> None:
    """``after`` (with ``settings``) retries the failed batch with the state the release before wrote (finishing
    the second window) and counts the rest of the shard in a third."""
    retried = pipeline.invoke(after, [Invocation(cuts.failed, cuts.second_window_end, True, 1)], state=state, **settings)
    assert retried.failed is None, retried.failed
    rest = cut(rng, cuts.second_window_end, len(pipeline.records), windows=(2,), batch=(50, 100))
    finished = pipeline.invoke(after, rest, **settings)
    assert finished.failed is None, finished.failed


def upgrade_with_state_in_flight(pipeline: Pipeline, previous: Release, current: Release, rng: random.Random,
                                 **settings: str):
    """The previous release stopped with state in flight (``count_until_deploy``), this release taking over
    with NEW_SETTINGS and ``settings``."""
    at_ms, cuts, state = count_until_deploy(pipeline, previous, rng)
    take_over(pipeline, current, rng, cuts, state, **NEW_SETTINGS, **settings)
    return at_ms, cuts


def read_again_with_other_cuts(pipeline: Pipeline, current: Release, rng: random.Random, cuts: Cuts) -> None:
    """The event source mapping created again (TRIM_HORIZON): ``current`` reads the shard again from its start,
    the re-read's first window ending inside the first window the release before counted."""
    inside = rng.randrange(cuts.first_window // 4, cuts.first_window * 3 // 4)
    reread = cut(rng, 0, inside, windows=(10,), batch=(37, 120))
    reread += cut(rng, inside, len(pipeline.records), windows=(11, 12), batch=(37, 120))
    assert pipeline.invoke(current, reread, **NEW_SETTINGS).failed is None


def fresh_pipeline(server, kind: str, seed: int) -> tuple[random.Random, Pipeline]:
    """The seed's random source and a pipeline of tables of its own on ``server`` (which outlives the test)."""
    return random.Random(seed), Pipeline(server.environment(), f"{kind}-{seed}-{uuid.uuid4().hex[:8]}")
