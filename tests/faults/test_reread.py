"""The same stream read again with other cuts, on moto and on DynamoDB Local: every case ends exact.

Earlier readers count part of each shard and stop: some close their last
window early (a window Lambda ended early, a runner told to commit its open
windows), some are killed with it open, some between a window's commit and
its checkpoint. A last reader, with other batches (1 to 10 records, or up to
40), another window length (1 s to 900 s) and another GetRecords page, reads
the shard again from the trim horizon (a checkpoint lost, an event source
mapping created again), from the last checkpoint or from a stale one, new
records included. Windows of many invocations carry what an earlier reader
took in part: the commit reads those records again from the stream and splits
there. No invocation gives up, and every bucket ends at brute force.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import boto3
import pytest
from hypothesis import given
from hypothesis import strategies as st
from moto import mock_aws
from backends import BACKENDS
from sweeps import sweep
from tally.core.settings import Settings
from tally.dynamo.counts_table import CountsTable
from tally.dynamo.tables import create_tables
from tally.invocation import process
from tally.local.delivery import DeliveryConfig, ShardDelivery

from . import profiles
from .checks import check_table
from .harness import STATS
from .streams import STREAM_ARN, Stream, StreamSpec, after_now, build_stream, settings_for
from .test_exact_counts import COUNTS_TABLE, EVENTS_TABLE, SETTINGS, stream_specs

RESUMES = ("trim_horizon", "checkpoint", "stale_checkpoint")


@dataclass(frozen=True)
class Run:
    """One reader of every shard: Lambda's cuts, records handed over ``page`` at a time (a GetRecords limit).

    It reads up to ``stop_share`` of each shard (1.0: to the end), starting where ``resume`` says: the trim
    horizon, the previous reader's last checkpoint, or the one before it (killed between a window's commit and
    its checkpoint). Stopped, it closes its last window early (``close``) or leaves it open (killed)."""

    config: DeliveryConfig
    page: int = 1000
    stop_share: float = 1.0
    resume: str = "trim_horizon"
    close: bool = True


configs = st.builds(
    DeliveryConfig,
    batch_size=st.one_of(st.integers(1, 10), st.integers(11, 40)),
    window_seconds=st.sampled_from([1, 10, 60, 300, 900]),
)
runs = st.builds(
    Run, config=configs, page=st.sampled_from([1, 3, 100, 1000]), stop_share=st.floats(0.1, 0.9),
    resume=st.sampled_from(RESUMES), close=st.booleans(),
)
rereads = st.tuples(st.lists(runs, min_size=1, max_size=3), configs, st.sampled_from(RESUMES))


class Reader:
    """One reader of a shard: Lambda's cuts (``ShardDelivery``) into the real handler code, no retries: an
    invocation that fails fails the test. It remembers its checkpoints, the last record of each final invocation."""

    def __init__(self, table: CountsTable, stream: Stream, settings: Settings, shard_id: str, config: DeliveryConfig) -> None:
        self.checkpoints = [0]  # records committed from the start of the shard, after each final invocation
        index = {record["dynamodb"]["SequenceNumber"]: n for n, record in enumerate(stream.shards[shard_id])}

        def handle(event, context):
            response, _ = process(event, table.commit, settings, stream.read_again)
            if event["isFinalInvokeForWindow"] and event["Records"]:
                self.checkpoints.append(index[event["Records"][-1]["dynamodb"]["SequenceNumber"]] + 1)
            return response

        self.delivery = ShardDelivery(
            handle, shard_id=shard_id, stream_arn=STREAM_ARN, config=dataclasses.replace(config, max_attempts=1)
        )

    def read(self, records: list[dict], *, page: int = 1000, close: bool = True) -> None:
        for start in range(0, len(records), page):
            self.delivery.deliver(records[start : start + page])
        if close:
            self.delivery.close()


def start_of(resume: str, checkpoints: list[int]) -> int:
    if resume == "checkpoint":
        return checkpoints[-1]
    if resume == "stale_checkpoint":
        return checkpoints[-2] if len(checkpoints) > 1 else 0
    return 0


def reread(client, counts_table: str, stream: Stream, plan: tuple, settings: Settings) -> None:
    """Every earlier run over every shard, then the last one to the end."""
    earlier, last, last_resume = plan
    table = CountsTable(client, counts_table, settings, read_again=stream.read_again)
    for shard_id, records in stream.shards.items():
        checkpoints = [0]
        for run in earlier:
            reader = Reader(table, stream, settings, shard_id, run.config)
            start = start_of(run.resume, checkpoints)
            stop = max(start, int(len(records) * run.stop_share))
            reader.read(records[start:stop], page=run.page, close=run.close)
            checkpoints = checkpoints + [c for c in reader.checkpoints if c > checkpoints[-1]]
        start = start_of(last_resume, checkpoints)
        Reader(table, stream, settings, shard_id, last).read(records[start:])


def check_reread(client, counts_table: str, stream: Stream, plan: tuple, settings: Settings) -> None:
    context = f"reproduce with {stream.spec!r}, {plan!r}"
    reread(client, counts_table, stream, plan, settings)
    STATS.add("rereads_exact")
    check_table(client, counts_table, stream.expected, settings, context, writers=stream.writer_tags())


@profiles.for_test(weight=0.3)
@given(spec=stream_specs, plan=rereads)
def test_a_stream_read_again_with_any_cuts_ends_exact(spec: StreamSpec, plan: tuple) -> None:
    settings = settings_for(spec, SETTINGS)
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_tables(client, EVENTS_TABLE, COUNTS_TABLE)
        check_reread(client, COUNTS_TABLE, build_stream(spec, settings), plan, settings)


WIDE = StreamSpec(
    seed=37, writes=120, counters=6, hot_share=0.5, start_ms=1_774_742_400_000, max_gap_s=5, jump_share=0.0,
    odd_share=0.1, rewrite_share=0.1, shards=2, rules=True, edge_share=0.05,
)
@profiles.for_test(weight=0.15)
@given(spec=stream_specs, plan=rereads)
def test_a_stream_read_again_with_any_cuts_ends_exact_on_dynamodb_local(dynamodb_local, spec: StreamSpec, plan: tuple) -> None:
    spec = after_now(spec, int(time.time() * 1000))  # DynamoDB Local's TTL process deletes buckets of the past
    settings = settings_for(spec, SETTINGS)
    client = dynamodb_local.client("dynamodb")
    counts = f"{COUNTS_TABLE}-{uuid.uuid4().hex[:10]}"
    create_tables(client, f"{EVENTS_TABLE}-{counts[-10:]}", counts)
    check_reread(client, counts, build_stream(spec, settings), plan, settings)


# Fixed cases: the same windows read again (exact, nothing read again), windows cut elsewhere with the records in
# hand, and windows of many invocations whose state carries what an earlier reader took in part (read again).
CASES = {
    "same-cuts-from-the-trim-horizon": ([Run(DeliveryConfig(1000, 60), stop_share=0.5)], DeliveryConfig(1000, 60), "trim_horizon"),
    "other-window-records-in-hand": ([Run(DeliveryConfig(1000, 10), stop_share=0.5)], DeliveryConfig(1000, 300), "trim_horizon"),
    "stale-checkpoint-other-batches": ([Run(DeliveryConfig(7, 60), stop_share=0.6)], DeliveryConfig(1000, 60), "stale_checkpoint"),
    "carried-state-split": ([Run(DeliveryConfig(1000, 10), stop_share=0.5)], DeliveryConfig(3, 300), "trim_horizon"),
    "killed-runs-small-batches": (
        [Run(DeliveryConfig(2, 900), page=3, stop_share=0.3, close=False), Run(DeliveryConfig(5, 1), stop_share=0.7)],
        DeliveryConfig(1, 60),
        "stale_checkpoint",
    ),
}
# The cases whose last reader must read records again from the stream: its windows carry part of what the first took.
READ_AGAIN = {"carried-state-split", "killed-runs-small-batches"}


@pytest.mark.parametrize("backend", ["moto", "dynamodb-local"])
@pytest.mark.parametrize("case", sweep(sorted(CASES, key=lambda name: name != "carried-state-split")))
def test_fixed_rereads_on_both_backends(case: str, backend: str, request) -> None:
    plan = CASES[case]
    if backend == "moto":
        with mock_aws():
            client = boto3.client("dynamodb", region_name="us-east-1")
            create_tables(client, EVENTS_TABLE, COUNTS_TABLE)
            stream = run_case(client, COUNTS_TABLE, WIDE, plan)
    else:
        server = request.getfixturevalue("dynamodb_local")
        client = server.client("dynamodb")
        suffix = uuid.uuid4().hex[:10]
        create_tables(client, f"{EVENTS_TABLE}-{suffix}", f"{COUNTS_TABLE}-{suffix}")
        stream = run_case(client, f"{COUNTS_TABLE}-{suffix}", after_now(WIDE, int(time.time() * 1000)), plan)
    assert (stream.reads_again > 0) == (case in READ_AGAIN)


def run_case(client, counts_table: str, spec: StreamSpec, plan: tuple) -> Stream:
    settings = settings_for(spec, SETTINGS)
    stream = build_stream(spec, settings)
    check_reread(client, counts_table, stream, plan, settings)
    return stream


# Two event source mappings on one stream at once (CloudFormation creates a mapping's replacement before it deletes
# it): both read every record, with other batches and windows, their commits racing item by item.
TWO_MAPPINGS = {
    1: (DeliveryConfig(1000, 10), DeliveryConfig(3, 300)),
    2: (DeliveryConfig(5, 60), DeliveryConfig(2, 900)),
    3: (DeliveryConfig(1, 1), DeliveryConfig(40, 60)),
}


@pytest.mark.server
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", sweep(sorted(TWO_MAPPINGS)))
def test_two_mappings_reading_one_shard_at_once_end_exact(seed, backend, local_server):
    spec = dataclasses.replace(WIDE, seed=seed, writes=200, shards=1)
    if backend == "dynamodb-local":
        spec = after_now(spec, int(time.time() * 1000))
    settings = settings_for(spec, SETTINGS)
    stream = build_stream(spec, settings)
    client = local_server.client("dynamodb")
    counts = f"{COUNTS_TABLE}-{uuid.uuid4().hex[:10]}"
    create_tables(client, f"{EVENTS_TABLE}-{counts[-10:]}", counts)
    table = CountsTable(client, counts, settings, read_again=stream.read_again)
    [(shard_id, records)] = stream.shards.items()
    start = threading.Barrier(2)

    def mapping(config: DeliveryConfig) -> None:
        reader = Reader(table, stream, settings, shard_id, config)
        start.wait()
        reader.read(records, page=100)

    with ThreadPoolExecutor(2) as pool:
        for done in [pool.submit(mapping, config) for config in TWO_MAPPINGS[seed]]:
            done.result()  # no invocation of either gave up
    check_table(client, counts, stream.expected, settings, f"reproduce with seed {seed}", writers=stream.writer_tags())
