"""The same stream read again with other cuts, on moto and on DynamoDB Local.

A first reader counts part of each shard and closes its last window early (a
runner stopped before the window's end, a window Lambda ended early); a second
reader, with another batch size and window length, reads the shard again from
the trim horizon (a checkpoint lost, an event source mapping created again) or
from a checkpoint of the first (a stale one), new records included. Every case
ends exact, or at a loud refusal (``OverlapRefused``) that names the item and
the range, with no bucket ever above its true count: never a silent difference.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from dataclasses import dataclass

import boto3
import pytest
from hypothesis import given
from hypothesis import strategies as st
from moto import mock_aws
from sweeps import sweep
from tally.core.commit import OverlapRefused
from tally.core.settings import Settings
from tally.dynamo.counts_table import CountsTable
from tally.dynamo.tables import create_tables
from tally.invocation import process
from tally.local.delivery import DeliveryConfig, DeliveryFailed, ShardDelivery

from . import profiles
from .checks import check_table, table_buckets
from .harness import STATS
from .streams import STREAM_ARN, Stream, StreamSpec, after_now, build_stream, settings_for
from .test_exact_counts import COUNTS_TABLE, EVENTS_TABLE, SETTINGS, stream_specs


@dataclass(frozen=True)
class Reread:
    """Two readers of the same shards: the first stops early, the second reads again from ``resume``."""

    first: DeliveryConfig
    second: DeliveryConfig
    stop_share: float  # the share of each shard the first reader reads before it stops
    resume: str  # "trim_horizon" or "checkpoint": where the second reader starts


rereads = st.builds(
    Reread,
    first=st.builds(DeliveryConfig, batch_size=st.integers(1, 40), window_seconds=st.sampled_from([1, 10, 60, 300])),
    second=st.builds(DeliveryConfig, batch_size=st.integers(1, 40), window_seconds=st.sampled_from([1, 10, 60, 300])),
    stop_share=st.floats(0.1, 0.9),
    resume=st.sampled_from(["trim_horizon", "checkpoint"]),
)


class Reader:
    """One reader of a shard: Lambda's cuts (``ShardDelivery``) into the real handler code, no retries (a
    refusal would fail every retry alike); it remembers its checkpoint, the last record of a final invocation."""

    def __init__(self, table: CountsTable, settings: Settings, shard_id: str, config: DeliveryConfig) -> None:
        self.checkpoint = 0  # records committed from the start of the shard

        def handle(event, context):
            response, _ = process(event, table.commit, settings)
            if event["isFinalInvokeForWindow"]:
                self.checkpoint = self.offset + self.delivered
            return response

        self.delivery = ShardDelivery(
            handle, shard_id=shard_id, stream_arn=STREAM_ARN, config=dataclasses.replace(config, max_attempts=1)
        )
        self.offset = 0
        self.delivered = 0

    def read(self, records: list[dict], offset: int, *, close: bool = True) -> None:
        self.offset = offset
        for record in records:
            self.delivered += 1
            self.delivery.deliver([record])
        if close:
            self.delivery.close()


def reread(client, counts_table: str, stream: Stream, plan: Reread, settings: Settings) -> list[OverlapRefused]:
    """Both readers over every shard; the refusals the second met (one per shard at most: it stops there)."""
    table = CountsTable(client, counts_table, settings)
    refusals = []
    for shard_id, records in stream.shards.items():
        stop = int(len(records) * plan.stop_share)
        first = Reader(table, settings, shard_id, plan.first)
        first.read(records[:stop], 0)  # closes its last window before its end
        start = first.checkpoint if plan.resume == "checkpoint" else 0
        try:
            Reader(table, settings, shard_id, plan.second).read(records[start:], start)
        except DeliveryFailed as failed:
            assert isinstance(failed.__cause__, OverlapRefused), f"failed otherwise: {failed}"
            refusals.append(failed.__cause__)
    return refusals


def check_reread(client, counts_table: str, stream: Stream, plan: Reread, settings: Settings) -> str:
    """Exact, or refused loudly with no bucket above its true count: which of the two it was."""
    context = f"reproduce with {stream.spec!r}, {plan!r}"
    refusals = reread(client, counts_table, stream, plan, settings)
    if not refusals:
        STATS.add("rereads_exact")
        check_table(client, counts_table, stream.expected, settings, context, writers=stream.writer_tags())
        return "exact"
    STATS.add("rereads_refused")
    for refusal in refusals:
        message = str(refusal)
        assert "\n" not in message and "records " in message and "already took (through " in message, message
        assert "came in the window state" in message and "audit" in message, message
    truth = stream.expected.buckets(settings)
    above = {key: (count, truth.get(key, 0)) for key, count in table_buckets(client, counts_table).items() if count > truth.get(key, 0)}
    assert not above, f"refused, yet {len(above)} buckets hold more than their events, e.g. {sorted(above.items())[:4]}; {context}"
    return "refused"


@profiles.for_test(weight=0.3)
@given(spec=stream_specs, plan=rereads)
def test_a_stream_read_again_with_other_cuts_ends_exact_or_refused_loudly(spec: StreamSpec, plan: Reread) -> None:
    settings = settings_for(spec, SETTINGS)
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_tables(client, EVENTS_TABLE, COUNTS_TABLE)
        check_reread(client, COUNTS_TABLE, build_stream(spec, settings), plan, settings)


WIDE = StreamSpec(
    seed=37, writes=120, counters=6, hot_share=0.5, start_ms=1_774_742_400_000, max_gap_s=5, jump_share=0.0,
    odd_share=0.1, rewrite_share=0.1, shards=2, rules=True, edge_share=0.05,
)
# Fixed cases: the same windows read again in one invocation each (exact), windows cut elsewhere with the records in
# hand (exact), and a window of many invocations whose state carries what the first reader took in part (refused).
CASES = {
    "same-cuts-from-the-trim-horizon": Reread(DeliveryConfig(1000, 60), DeliveryConfig(1000, 60), 0.5, "trim_horizon"),
    "other-window-records-in-hand": Reread(DeliveryConfig(1000, 10), DeliveryConfig(1000, 300), 0.5, "trim_horizon"),
    "stale-checkpoint-other-batches": Reread(DeliveryConfig(7, 60), DeliveryConfig(1000, 60), 0.6, "checkpoint"),
    "carried-state-split": Reread(DeliveryConfig(1000, 10), DeliveryConfig(3, 300), 0.5, "trim_horizon"),
}


@pytest.mark.parametrize("backend", ["moto", "dynamodb-local"])
@pytest.mark.parametrize("case", sweep(sorted(CASES)))
def test_fixed_rereads_on_both_backends(case: str, backend: str, request) -> None:
    plan = CASES[case]
    if backend == "moto":
        with mock_aws():
            client = boto3.client("dynamodb", region_name="us-east-1")
            create_tables(client, EVENTS_TABLE, COUNTS_TABLE)
            outcome = run_case(client, COUNTS_TABLE, WIDE, plan)
    else:
        server = request.getfixturevalue("dynamodb_local")
        client = server.client("dynamodb")
        suffix = uuid.uuid4().hex[:10]
        create_tables(client, f"{EVENTS_TABLE}-{suffix}", f"{COUNTS_TABLE}-{suffix}")
        outcome = run_case(client, f"{COUNTS_TABLE}-{suffix}", after_now(WIDE, int(time.time() * 1000)), plan)
    assert outcome == ("refused" if case == "carried-state-split" else "exact")


def run_case(client, counts_table: str, spec: StreamSpec, plan: Reread) -> str:
    settings = settings_for(spec, SETTINGS)
    return check_reread(client, counts_table, build_stream(spec, settings), plan, settings)
