"""Stale evaluators: an alert's evaluation that read a state another evaluation has since changed and delivered.

Shards count a burst through faults as in test_alert_faults; after the window,
two scheduled evaluations clear the alarms, one of them stale: it read every
state, then stalls before its first state change while the other clears and
delivers everything. Its changes come from transition counts that have moved
on, with no event pending: each must be refused, and every crossing is
delivered once.
"""

from __future__ import annotations

import random
from collections import Counter

import boto3
import pytest
from moto import mock_aws

from moto_tables import COUNTS, EVENTS
from tally.alerting import AlertStates, Watcher
from tally.core.alerts import ALARM, OK
from tally.core.rules import parse_rules
from tally.core.settings import Settings
from tally.core.units import MINUTE_MS
from tally.core.windows import now_ms
from tally.dynamo.counts_table import CountsTable
from tally.dynamo.tables import create_tables

from .harness import FaultKind, FaultSchedule, FaultyClient, quick_backoff
from .test_alert_faults import RULES, THRESHOLD, RecordingBus, check_deliveries, deliver_alerting, shard_records

FAULTS = {FaultKind.CONFLICT: 0.05, FaultKind.RESPONSE_LOST: 0.08, FaultKind.TIMEOUT_AFTER_COMMIT: 0.1, FaultKind.RETRY_RECUT: 0.3}


class StallsBeforeItsFirstChange:
    """A client whose first write to an alert's state waits until ``meanwhile`` (another evaluation) has run."""

    def __init__(self, client, meanwhile) -> None:
        self.client, self.meanwhile, self.stalled = client, meanwhile, False

    def __getattr__(self, name):
        return getattr(self.client, name)

    def update_item(self, **kwargs):
        if not self.stalled and kwargs["Key"]["pk"]["S"].startswith("#alerts#"):
            self.stalled = True
            self.meanwhile()
        return self.client.update_item(**kwargs)


@pytest.mark.parametrize("seed", range(3))
def test_a_stale_evaluation_changes_no_state_another_has_moved_on(seed):
    rng = random.Random(seed)
    minute = now_ms() // MINUTE_MS - 1
    counts = {k: rng.randrange(THRESHOLD + 1, 3 * THRESHOLD) for k in "abc"}  # every counter crosses
    delivered: list[dict] = []
    crashes: Counter = Counter()
    with mock_aws():
        raw = boto3.client("dynamodb", region_name="us-east-1")
        create_tables(raw, EVENTS, COUNTS)
        settings = Settings(counts_table=COUNTS, events_table=EVENTS, rules=parse_rules(RULES))
        schedule = FaultSchedule(seed, FAULTS, budget=30)
        table = CountsTable(FaultyClient(raw, schedule), COUNTS, settings, backoff=quick_backoff(seed))
        bus = RecordingBus(FaultSchedule.quiet(), delivered, crashes)
        deliver_alerting(shard_records(rng, minute, counts, 3), table, settings, schedule, bus, rng)
        raised = AlertStates(raw, COUNTS).listing("hot")
        assert {c: (s.state, s.transitions) for c, s in raised.items()} == {f"hits/{k}": (ALARM, 1) for k in counts}

        after = (minute + 11) * MINUTE_MS + 1  # the window of every burst has passed: each alarm clears
        fresh = Watcher(CountsTable(raw, COUNTS, settings), bus, clock=lambda: after, sleep=lambda _s: None)
        stale_client = StallsBeforeItsFirstChange(raw, lambda: fresh.scheduled("schedule:fresh"))
        stale_table = CountsTable(stale_client, COUNTS, settings)
        stale = Watcher(stale_table, bus, clock=lambda: after + rng.randrange(1, MINUTE_MS), sleep=lambda _s: None)
        stale.scheduled("schedule:stale")

        assert stale_client.stalled, "the stale evaluation never tried to change a state"
        states = AlertStates(raw, COUNTS).listing("hot")
        assert {c: (s.state, s.transitions, s.pending) for c, s in states.items()} == {
            f"hits/{k}": (OK, 2, False) for k in counts
        }, schedule
        check_deliveries(delivered, states, crashes, schedule)
        assert Counter(d["state"] for d in delivered) == {ALARM: len(counts), OK: len(counts)}, delivered
