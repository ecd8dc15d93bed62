"""Exact counts of transitions and deletions under retries, redeliveries and faults.

Streams of items that are inserted, changed, deleted by their owners and by
TTL, and inserted again; counted by rules on every record kind. After each
stream is drained through seeded faults, the counts table, every window by
either plan and every rejection must equal the truth from replaying each
item's history by hand.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tally.core.units import HOUR_MS

from . import profiles
from .harness import STATS, WRITE_FAULTS
from .histories import HistorySpec, build_history_stream, settings_for_histories
from .test_exact_counts import DAY_BOUNDARY_MS, SETTINGS, Deployment, check_stream, deployments

history_specs = st.builds(
    HistorySpec,
    seed=st.integers(0, 2**32),
    writes=st.integers(0, 150),
    providers=st.one_of(st.integers(1, 4), st.integers(30, 80)),
    start_ms=st.integers(DAY_BOUNDARY_MS - 2 * HOUR_MS, DAY_BOUNDARY_MS + HOUR_MS),
    max_gap_s=st.sampled_from([0, 1, 5, 30, 120]),
    jump_share=st.sampled_from([0.0, 0.02, 0.1]),
    odd_share=st.sampled_from([0.0, 0.1, 0.3]),
    change_share=st.sampled_from([0.3, 0.5, 0.7]),
    delete_share=st.sampled_from([0.1, 0.3]),
    image_loss_share=st.sampled_from([0.0, 0.0, 0.05]),
    shards=st.integers(1, 3),
)


def run_history(spec: HistorySpec, deployment: Deployment, write_faults=WRITE_FAULTS, instants: int = 4) -> None:
    settings = settings_for_histories(SETTINGS)
    stream = build_history_stream(spec, settings)
    kinds = [record["eventName"] for records in stream.shards.values() for record in records]
    STATS.add("streams_with_changes")
    STATS.add("change_records", kinds.count("MODIFY"))
    STATS.add("removal_records", kinds.count("REMOVE"))
    STATS.add(
        "ttl_removal_records",
        sum(1 for records in stream.shards.values() for record in records if "userIdentity" in record),
    )
    check_stream(stream, deployment, settings, write_faults, instants)


@profiles.for_test(weight=0.5)
@given(spec=history_specs, deployment=deployments)
def test_transitions_and_deletions_are_exact_after_faults_and_redeliveries(spec: HistorySpec, deployment: Deployment):
    run_history(spec, deployment)


def test_a_long_history_through_every_fault_kind_stays_exact():
    """One stream of many changes on few items, every write and delivery fault at a high rate."""
    spec = HistorySpec(
        seed=20,
        writes=140,
        providers=3,
        start_ms=DAY_BOUNDARY_MS + 30_000,
        max_gap_s=5,
        jump_share=0.02,
        odd_share=0.2,
        change_share=0.7,
        delete_share=0.2,
        image_loss_share=0.05,
        shards=2,
    )
    deployment = Deployment(
        batch_size=9,
        window_seconds=60,
        fault_seed=21,
        fault_rate=0.3,
        fault_budget=60,
        query_seed=22,
        segment_items=9,
    )
    before = sum(STATS.faults.values())
    run_history(spec, deployment)
    assert sum(STATS.faults.values()) > before
