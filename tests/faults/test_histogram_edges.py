"""Histogram values on their bins' edges, drained through faults: each lands in the bin whose edges hold it.

A bin of positive values holds (γ^(i-1), γ^i], a negative one [-γ^i, -γ^(i-1));
a value exactly on an edge belongs to the bin it closes. Brute force here
reads the edges each bin reports, not the function that placed the values, so
a value put in its neighbour bin shows as a bin holding more than its edges
allow.
"""

from __future__ import annotations

import dataclasses
import json
from decimal import Context, Decimal

import boto3
from freezegun import freeze_time
from moto import mock_aws
from tally import Reader
from tally.core.histograms import GAMMA, _edges
from tally.core.rules import parse_rules
from tally.core.units import MINUTE_MS

from .streams import Expected, Stream, StreamSpec, _record, hash_shard
from .test_exact_counts import COUNTS_TABLE, SETTINGS, Deployment
from .test_read_surfaces import MIDNIGHT_MS, drained, iso

RULES = parse_rules(json.dumps([{"name": "latency", "counter": "lat/{k}", "histogram": "ms"}]))
EXACT = Context(prec=60)


def edge_values() -> list[Decimal]:
    """γ^k exactly (at most 38 digits), a hair either side of it, both signs, and zero."""
    values = [Decimal(0)]
    for k in range(-6, 19, 3):
        edge = EXACT.power(Decimal(str(GAMMA)), k) if k >= 0 else EXACT.divide(1, EXACT.power(Decimal(str(GAMMA)), -k))
        edge = Context(prec=38).plus(edge) if k < 0 else edge  # 1/γ^k has no end: its 38 digits are a value
        for value in (edge, edge + Decimal("1e-9"), edge - Decimal("1e-9")):
            values += [value, -value]
    return values


def histogram_stream(values: list[Decimal], shards: int) -> Stream:
    expected = Expected(last_arrival_ms=0)
    shard_ids = [f"shardId-edges-{i:08x}" for i in range(shards)]
    records: dict[str, list] = {shard: [] for shard in shard_ids}
    for index, value in enumerate(values):
        event_ms = MIDNIGHT_MS - 20 * MINUTE_MS + index * 7_000
        arrival_ms = (event_ms + 15_000) // 1000 * 1000
        item_id, counter = f"v{index}", f"lat/{index % 2}"
        image = {"id": {"S": item_id}, "k": {"S": str(index % 2)}, "ms": {"N": str(value)}, "ts": {"N": str(event_ms)}}
        sequence = 10**20 + 3 * index
        records[shard_ids[hash_shard(item_id, shards)]].append(_record("INSERT", item_id, sequence, arrival_ms, image))
        expected.events.append((counter, event_ms, arrival_ms))
        expected.values.append((counter, event_ms, value, arrival_ms))
        expected.intents[str(sequence)] = [f"counter:{counter}"]
        expected.last_arrival_ms = max(expected.last_arrival_ms, arrival_ms)
    return Stream(StreamSpec(0, len(values), 2, 0, 0, 0, 0, 0, 0, shards), records, expected)


def holds(name: str, value: Decimal) -> bool:
    low, high = _edges(name)
    if name == "0":
        return value == 0
    return low < value <= high if name.startswith("+") else low <= value < high


def test_values_on_bin_edges_land_in_the_bin_that_closes_at_them():
    settings = dataclasses.replace(SETTINGS, rules=RULES)
    values = edge_values()
    stream = histogram_stream(values, shards=2)
    deployment = Deployment(batch_size=6, window_seconds=60, fault_seed=3, fault_rate=0.3, fault_budget=20, query_seed=1)
    with mock_aws():
        client, context = drained(stream, deployment, settings)
        with freeze_time(iso(stream.expected.last_arrival_ms + MINUTE_MS)):
            reader = Reader(COUNTS_TABLE, client=client, settings=settings)
            for counter in ("lat/0", "lat/1"):
                result = reader.count(counter, window="1h", at=iso(stream.expected.last_arrival_ms + MINUTE_MS))
                mine = [v for name, _, v, _ in stream.expected.values if name == counter]
                bins = {name: n for name, n in result.histogram.bins.items() if n}
                assert sum(bins.values()) == len(mine), f"{counter}: {bins}; {context}"
                for name, count in bins.items():
                    inside = [v for v in mine if holds(name, v)]
                    assert count == len(inside), f"{counter} bin {name} {_edges(name)}: {count}, holds {inside}; {context}"
