"""Several shards committing to the same hot buckets at once, through moto's server and through DynamoDB Local.

Each shard sends the updates of a segment several at a time, so updates of
different shards to the same bucket item interleave. moto never throttles, so
conflicts with transactions are injected while the threads run; each must be
retried (and counted as a retry), never lost. With bucket lanes the shards
write apart, and the lanes must sum exactly.
"""

from __future__ import annotations

import random
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import boto3
import pytest
from backends import BACKENDS
from moto.server import ThreadedMotoServer
from sweeps import sweep
from tally.local.delivery import DeliveryConfig
from tally.dynamo.counts_table import CountsTable
from tally.dynamo.tables import create_tables
from tally.core.buckets import bucket_sort_key
from tally.core.retry import sketch_backoff
from tally.core.tables import SKETCH_ATTRIBUTE
from tally.core.settings import Settings

from .checks import check_directory, check_ranks, check_table, check_windows, scanned
from .harness import FaultKind, FaultSchedule, FaultyClient, FaultyHandler, LambdaShard, quick_backoff
from .streams import STREAM_ARN, StreamSpec, after_now, build_stream, settings_for

pytestmark = pytest.mark.server

DAY_BOUNDARY_MS = 1_774_742_400_000


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module", params=BACKENDS)
def served(request):
    """(endpoint, backend): moto's threaded server of this module, or the session's DynamoDB Local."""
    if request.param == "dynamodb-local":
        yield request.getfixturevalue("dynamodb_local").endpoint_url, request.param
        return
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}", request.param
    server.stop()


class OverlapMeter:
    """Wraps a client and records how many UpdateItems were in flight at once, at most."""

    def __init__(self, client, shared: dict) -> None:
        self.client = client
        self.shared = shared

    def __getattr__(self, name: str):
        return getattr(self.client, name)

    def update_item(self, **kwargs):
        with self.shared["lock"]:
            self.shared["now"] += 1
            self.shared["max"] = max(self.shared["max"], self.shared["now"])
        try:
            return self.client.update_item(**kwargs)
        finally:
            with self.shared["lock"]:
                self.shared["now"] -= 1


def server_client(endpoint: str):
    return boto3.client(
        "dynamodb",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


@pytest.mark.parametrize(("seed", "lanes"), sweep([(1, 1), (2, 1), (3, 4)]))
def test_shards_racing_on_hot_buckets_sum_exactly_and_retry_every_conflict(served: tuple[str, str], seed: int, lanes: int) -> None:
    endpoint, backend = served
    counts = f"hot-counts-{seed}"
    settings = Settings(counts_table=counts, events_table=f"hot-events-{seed}", bucket_lanes=lanes, ranked_prefixes=("",))
    spec_rules = seed % 2 == 0  # one race under the classic rule, one under fan-out rules with sums
    create_tables(server_client(endpoint), settings.events_table, counts)
    spec = StreamSpec(
        seed=seed,
        writes=700,  # the hot counter's hour items pass 202 events: racing shards carry them into a level
        counters=2,
        hot_share=0.8,
        start_ms=DAY_BOUNDARY_MS - 30_000,
        max_gap_s=0,
        jump_share=0.0,
        odd_share=0.1,
        rewrite_share=0.1,
        shards=4,
        rules=spec_rules,
    )
    if backend == "dynamodb-local":  # its TTL process would delete buckets dated in the past
        spec = after_now(spec, int(time.time() * 1000))
    settings = settings_for(spec, settings)
    stream = build_stream(spec, settings)
    conflicts = FaultSchedule(seed, {FaultKind.CONFLICT: 0.3}, budget=10**6)
    configs = [DeliveryConfig(batch_size=5, window_seconds=1), DeliveryConfig(batch_size=5, window_seconds=10)]
    shards, clients = [], []
    in_flight = {"lock": threading.Lock(), "now": 0, "max": 0}
    for number, (shard_id, records) in enumerate(stream.shards.items()):
        client = FaultyClient(OverlapMeter(server_client(endpoint), in_flight), conflicts)
        table = CountsTable(client, counts, settings, backoff=quick_backoff(seed + number), workers=4)
        # Sketch merges take their own, longer schedule, as deployed: 8 tries without pauses can all lose races.
        table.sketch_backoff = quick_backoff(seed + number, sketch_backoff)
        handler = FaultyHandler(table, settings, FaultSchedule.quiet())
        shards.append(
            LambdaShard(
                records,
                shard_id=shard_id,
                stream_arn=STREAM_ARN,
                config=configs[number % 2],
                handler=handler,
                schedule=FaultSchedule.quiet(),
            )
        )
        clients.append(client)
    random.Random(seed).shuffle(shards)

    with ThreadPoolExecutor(max_workers=len(shards)) as pool:
        for finished in [pool.submit(shard.run) for shard in shards]:
            finished.result()

    context = f"seed {seed}, {lanes} lanes, {conflicts!r}"
    stored = scanned(server_client(endpoint), counts)  # the drained table, read once for every check below
    check_table(server_client(endpoint), counts, stream.expected, settings, context, writers=stream.writer_tags(), items=stored)
    # Racing across a UTC midnight: each day's entry of each counter, put by whichever shard created an hour item.
    check_directory(server_client(endpoint), counts, stream.expected, context, stored)
    ranked = check_ranks(server_client(endpoint), counts, settings, context, stored)  # racing shards on hot hour items
    assert ranked > 0, context  # some hot hour items were carried into a recorded level by racing shards
    written_lanes = {item["sk"]["S"] for item in stored if not item["pk"]["S"].startswith("#") and SKETCH_ATTRIBUTE not in item}
    assert (len({bucket_sort_key(sk) for sk in written_lanes}) < len(written_lanes)) == (lanes > 1), context
    if spec_rules:  # several shards merged their distinct ids into the same sketch items, each value kept once
        sketch_items = sum(1 for item in stored if SKETCH_ATTRIBUTE in item)
        merges = sum(summary.sketches_written for shard in shards for summary in shard.summaries)
        assert 0 < sketch_items < merges, context
    check_windows(
        CountsTable(server_client(endpoint), counts, settings),
        server_client(endpoint),
        stream.expected,
        settings,
        random.Random(seed),
        2,
        context,
        items=stored,
    )
    retries = sum(summary.commit_retries + summary.sketch_conflicts for shard in shards for summary in shard.summaries)
    native = sum(client.native_retryable for client in clients)
    assert in_flight["max"] > 1, "the shards never committed at the same time"
    assert conflicts.injected[FaultKind.CONFLICT] > 0, context
    failed = [repr(error) for shard in shards for error in shard.failed]
    message = f"retries recorded {retries}, conflicts {conflicts.injected} + native {native}, failed {failed}; {context}"
    if failed:  # a failed invocation's summary, with the retries it made, is lost; Lambda retries it whole
        assert retries <= conflicts.injected[FaultKind.CONFLICT] + native, message
    else:
        assert retries == conflicts.injected[FaultKind.CONFLICT] + native, message
