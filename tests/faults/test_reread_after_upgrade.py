"""Re-reads over bucket items whose watermark the previous release (0.2.0) wrote, with this release alone: fast.

0.2.0's watermark names the first record of the last segment an item took, not its last (this release's
watermark is that last record followed by THROUGH, one byte longer). Both releases cut the same segments, so
what 0.2.0 leaves is what this release leaves with each watermark rewritten to the first record of the segment
that wrote it: that is how the tests below plant it (``as_previous_release``), then let this release go on.

- Going on from where 0.2.0 stopped (the event source mapping kept over the deploy), with other windows: exact,
  nothing unresolved. A segment starting after an item's 0.2.0 watermark is then the successor of that segment.
- Reading the shard again from the trim horizon with other cuts (a mapping created again): a segment may start
  after an item's 0.2.0 watermark and still inside the segment 0.2.0 took, so the item must not take the segment
  whole. A shard's update fails on a 0.2.0 watermark (it is one byte shorter), and the first segment of this
  release to meet one puts the shard's anchor (core/commit.py, ``Anchor``):
  - created again after this release went on for a while (the harness's case, tests/upgrade/test_upgrade.py): the
    anchor went on from 0.2.0's reading, so each such item took exactly its records before the anchor: exact.
  - created again in the deploy itself (CloudFormation replaces a mapping before it deletes the old one): the
    re-read's first segment puts the anchor, at the shard's first counted record, not trusted. Such items take
    nothing more from the shard, marked (low, never high) and keep their watermark; ``audit.py --repair``
    makes them exact.
"""

from __future__ import annotations

import time
import uuid
from contextlib import contextmanager

import boto3
import pytest
from moto import mock_aws
from sweeps import sweep

from tally.core.buckets import stored_bucket
from tally.core.commit import WATERMARK_PREFIX, Anchor, Watermark, order_preserving
from tally.core.tables import ANCHOR_PARTITION, UNRESOLVED_ATTRIBUTE
from tally.dynamo.counts_table import CountsTable
from tally.dynamo.tables import create_tables
from tally.local.delivery import DeliveryConfig

from .checks import check_table, scanned, table_contents
from .streams import after_now, build_stream, settings_for
from .test_exact_counts import COUNTS_TABLE, EVENTS_TABLE, SETTINGS
from .test_reread import WIDE, Reader

# 0.2.0's windows, and this release's: other cuts, the re-read's windows ending inside 0.2.0's segments.
PREVIOUS = DeliveryConfig(1000, 60)
OTHER_CUTS = DeliveryConfig(1000, 10)


class Recording:
    """A counts table that remembers the first record of every segment committed through it, by its last."""

    def __init__(self, table: CountsTable) -> None:
        self.table = table
        self.first_of: dict[int, int] = {}

    def commit(self, segment, writer):
        self.first_of[int(segment.last_sequence)] = int(segment.first_sequence)
        return self.table.commit(segment, writer)


def as_previous_release(client, counts: str, first_of: dict[int, int]) -> int:
    """Rewrite every watermark as 0.2.0 wrote it (the bare position of the first record of the segment it names);
    the number rewritten."""
    rewritten = 0
    for item in scanned(client, counts):
        for name, value in item.items():
            if not name.startswith(WATERMARK_PREFIX):
                continue
            watermark = Watermark.decode(bytes(value["B"]))
            assert watermark.through, f"already a 0.2.0 watermark: {item}"
            client.update_item(
                TableName=counts,
                Key={"pk": item["pk"], "sk": item["sk"]},
                UpdateExpression="SET #w = :old",
                ExpressionAttributeNames={"#w": name},
                ExpressionAttributeValues={":old": {"B": order_preserving(first_of[watermark.position])}},
            )
            rewritten += 1
    return rewritten


def run(client, counts: str, spec, steps: list[tuple[str, DeliveryConfig]], *, previous_release: bool = True):
    """0.2.0 counts the first half of every shard with its windows, then this release reads as ``steps`` say:
    ("continue", config) from where 0.2.0 stopped, ("reread", config) from the shard's start (the trim horizon).
    ``previous_release=False``: this release counts that first half too (the control)."""
    settings = settings_for(spec, SETTINGS)
    stream = build_stream(spec, settings)
    table = CountsTable(client, counts, settings, read_again=stream.read_again)
    previous = Recording(table)
    halves = {shard: len(records) // 2 for shard, records in stream.shards.items()}
    for shard, records in stream.shards.items():
        Reader(previous, stream, settings, shard, PREVIOUS).read(records[: halves[shard]])
    if previous_release:
        assert as_previous_release(client, counts, previous.first_of) > 0
    for shard, records in stream.shards.items():
        for where, config in steps:
            Reader(table, stream, settings, shard, config).read(records[halves[shard] if where == "continue" else 0 :])
    return stream, settings


@contextmanager
def counts_table(backend: str, request):
    """A fresh counts table on ``backend``: its client and name (moto's mock lasts as long as the block)."""
    if backend == "moto":
        with mock_aws():
            client = boto3.client("dynamodb", region_name="us-east-1")
            create_tables(client, EVENTS_TABLE, COUNTS_TABLE)
            yield client, COUNTS_TABLE
        return
    client = request.getfixturevalue("dynamodb_local").client("dynamodb")
    counts = f"{COUNTS_TABLE}-{uuid.uuid4().hex[:10]}"
    create_tables(client, f"{EVENTS_TABLE}-{counts[-10:]}", counts)
    yield client, counts


def spec_on(backend: str):
    """WIDE, moved after now on DynamoDB Local (its TTL process deletes buckets of the past)."""
    return WIDE if backend == "moto" else after_now(WIDE, int(time.time() * 1000))


def never_high(client, counts: str, stream, settings) -> None:
    items = scanned(client, counts)
    actual = table_contents(client, counts, items)[0]
    marked = {stored_bucket(item["pk"]["S"], item["sk"]["S"]) for item in items if UNRESOLVED_ATTRIBUTE in item}
    truth = stream.expected.buckets(settings)
    high = {key: (actual[key], truth.get(key, 0)) for key in actual if actual[key] > truth.get(key, 0)}
    low = {key: (actual.get(key, 0), n) for key, n in truth.items() if actual.get(key, 0) < n and key not in marked}
    assert high == {}, f"{len(high)} buckets counted twice (actual, truth), e.g. {dict(sorted(high.items())[:6])}"
    assert low == {}, f"{len(low)} buckets low without a mark, e.g. {dict(sorted(low.items())[:6])}"


@pytest.mark.parametrize("backend", sweep(["moto", "dynamodb-local"]))
def test_going_on_from_the_previous_releases_watermarks_with_other_windows_is_exact(backend, request):
    with counts_table(backend, request) as (client, counts):
        stream, settings = run(client, counts, spec_on(backend), [("continue", OTHER_CUTS)])
        check_table(client, counts, stream.expected, settings, "0.2.0, then this release", writers=stream.writer_tags())
        assert not [item for item in scanned(client, counts) if UNRESOLVED_ATTRIBUTE in item]


IN_THE_DEPLOY = [("reread", OTHER_CUTS)]
AFTER_THE_DEPLOY = [("continue", PREVIOUS), ("reread", OTHER_CUTS)]
REREADS = [
    pytest.param(IN_THE_DEPLOY, id="mapping-created-again-in-the-deploy"),
    pytest.param(AFTER_THE_DEPLOY, id="mapping-created-again-after-the-deploy", marks=pytest.mark.sweep),
]


@pytest.mark.parametrize("backend", sweep(["moto", "dynamodb-local"]))
@pytest.mark.parametrize("steps", REREADS)
def test_the_same_rereads_where_this_release_counted_throughout_are_exact(backend, steps, request):
    """The control: what the test below finds comes from 0.2.0's watermarks, not from the cuts."""
    with counts_table(backend, request) as (client, counts):
        stream, settings = run(client, counts, spec_on(backend), steps, previous_release=False)
        check_table(client, counts, stream.expected, settings, "this release throughout", writers=stream.writer_tags())
        assert not [item for item in scanned(client, counts) if UNRESOLVED_ATTRIBUTE in item]


def anchors(client, counts: str) -> list[Anchor]:
    return [Anchor.of_item(item) for item in scanned(client, counts) if item["pk"]["S"] == ANCHOR_PARTITION]


@pytest.mark.parametrize("backend", sweep(["moto", "dynamodb-local"]))
def test_a_reread_after_this_release_went_on_over_the_previous_releases_watermarks_is_exact(backend, request):
    with counts_table(backend, request) as (client, counts):
        stream, settings = run(client, counts, spec_on(backend), AFTER_THE_DEPLOY)
        check_table(client, counts, stream.expected, settings, "0.2.0, then a re-read", writers=stream.writer_tags())
        assert not [item for item in scanned(client, counts) if UNRESOLVED_ATTRIBUTE in item]
        placed = anchors(client, counts)
        assert len(placed) == len(stream.shards) and all(anchor.trusted for anchor in placed), placed


@pytest.mark.parametrize("backend", sweep(["moto", "dynamodb-local"]))
def test_a_reread_in_the_deploy_over_the_previous_releases_watermarks_is_never_high(backend, request):
    with counts_table(backend, request) as (client, counts):
        stream, settings = run(client, counts, spec_on(backend), IN_THE_DEPLOY)
        never_high(client, counts, stream, settings)
        placed = anchors(client, counts)
        assert len(placed) == len(stream.shards) and not any(anchor.trusted for anchor in placed), placed
        assert [item for item in scanned(client, counts) if UNRESOLVED_ATTRIBUTE in item]
