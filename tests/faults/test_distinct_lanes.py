"""Distinct counts written by several shards into lanes of their own, drained through faults, read as one.

Each shard merges the values it saw into its own lane's sketch of a bucket;
a read must take the union of every lane's sketch, so a value seen by two
shards counts once and a value seen by one shard is never lost to another
lane's sketch.
"""

from __future__ import annotations

import dataclasses
import json
import random

from freezegun import freeze_time
from moto import mock_aws
from tally import Reader
from tally.core.commit import Writer
from tally.core.rules import parse_rules
from tally.core.units import MINUTE_MS
from tally.core.windows import Window

from .streams import STREAM_ARN, Expected, Stream, StreamSpec, _record
from .test_exact_counts import COUNTS_TABLE, SETTINGS, Deployment
from .test_read_surfaces import MIDNIGHT_MS, drained, iso

RULES = parse_rules(json.dumps([{"name": "visitors", "counter": "visitors/{page}", "distinct": "user"}]))
SHARDS = [f"shardId-lanes-{i:08x}" for i in range(4)]


def visits_stream(rng: random.Random, visits: int) -> Stream:
    """Visits of two pages by 30 users over 40 minutes, dealt to the shards at random (a user on several)."""
    expected = Expected(last_arrival_ms=0)
    records: dict[str, list] = {shard: [] for shard in SHARDS}
    for index in range(visits):
        event_ms = MIDNIGHT_MS - 30 * MINUTE_MS + rng.randrange(40 * MINUTE_MS)
        arrival_ms = (event_ms + 10_000) // 1000 * 1000
        page, user = rng.choice(["home", "shop"]), f"u{rng.randrange(30)}"
        image = {"id": {"S": f"v{index}"}, "page": {"S": page}, "user": {"S": user}, "ts": {"N": str(event_ms)}}
        sequence = 10**20 + index
        records[rng.choice(SHARDS)].append(_record("INSERT", f"v{index}", sequence, arrival_ms, image))
        expected.events.append((f"visitors/{page}", event_ms, arrival_ms))
        expected.distinct.append((f"visitors/{page}", event_ms, user, arrival_ms))
        expected.intents[str(sequence)] = [f"counter:visitors/{page}"]
        expected.last_arrival_ms = max(expected.last_arrival_ms, arrival_ms)
    for shard in SHARDS:  # each shard's records in sequence order, as a stream shard holds them
        records[shard].sort(key=lambda record: int(record["dynamodb"]["SequenceNumber"]))
    return Stream(StreamSpec(0, visits, 2, 0, 0, 0, 0, 0, 0, len(SHARDS)), records, expected)


def test_distinct_values_of_every_lane_are_read_as_their_union():
    settings = dataclasses.replace(SETTINGS, rules=RULES, bucket_lanes=4)
    assert len({Writer.of_shard(STREAM_ARN, shard).lane(4) for shard in SHARDS}) > 1, "the shards share one lane"
    stream = visits_stream(random.Random(9), 160)
    deployment = Deployment(batch_size=8, window_seconds=60, fault_seed=9, fault_rate=0.2, fault_budget=20, query_seed=1)
    with mock_aws():
        client, context = drained(stream, deployment, settings)
        end = stream.expected.last_arrival_ms + MINUTE_MS
        with freeze_time(iso(end)):
            reader = Reader(COUNTS_TABLE, client=client, settings=settings)
            for length in (15, 45, 90):
                for page in ("visitors/home", "visitors/shop"):
                    result = reader.count(page, window=f"{length}m", at=iso(end - 7 * MINUTE_MS))
                    window: Window = result.window
                    users = {u for name, at, u, _ in stream.expected.distinct if name == page and window.covers(at)}
                    assert result.distinct == len(users), f"{page} over {window}: {result.distinct}, {len(users)}; {context}"
