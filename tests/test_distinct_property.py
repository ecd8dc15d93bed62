"""Property: for random visits and windows, every distinct count, by both plans and per hour, equals the exact
number of distinct values while the buckets' sketches are exact, and lies within 4 standard errors beyond."""

from __future__ import annotations

import contextlib
import json
from unittest import mock

import boto3
from hypothesis import HealthCheck, given, settings as hypothesis_settings
from hypothesis import strategies as st
from moto import mock_aws

from factories import STREAM_ARN, image, stream_record, window_event
from moto_tables import COUNTS, EVENTS, no_sleep_backoff
from tally.core import sketch_writes
from tally.core.buckets import legacy_sketch_sort_key
from tally.core.commit import lane_of, source_id
from tally.core.plans import PlanKind
from tally.core.rules import parse_rules
from tally.core.settings import Settings
from tally.core.units import HOUR_MS, MINUTE_MS
from tally.core.sketches import STANDARD_ERROR
from tally.core.windows import Window
from tally.dynamo.counts_table import CountsTable
from tally.dynamo.tables import create_tables
from tally.query import count_windows

NOW_MS = 1_795_000_000_000 - 1_795_000_000_000 % HOUR_MS + 23 * MINUTE_MS + 5_000
LENGTHS_MIN = [1, 7, 30, 59, 60, 61, 95, 180, 24 * 60]
RULES = [{"name": "visitors", "counter": "visitors/{page}", "distinct": "client"}]
SHARDS = ("shardId-0", next(f"shardId-{k}" for k in range(1, 99) if lane_of(source_id(STREAM_ARN, f"shardId-{k}"), 2) == 1))

visits = st.lists(
    st.fixed_dictionaries(
        {
            "ago_ms": st.integers(0, 4 * HOUR_MS),
            "page": st.sampled_from("ab"),
            "client": st.one_of(st.sampled_from(["c1", "c2", "c3", "ü"]), st.integers(0, 30), st.just("")),
        }
    ),
    max_size=50,
)
# A burst of many distinct clients in one minute: its buckets' sketches go past exact.
bursts = st.one_of(st.just(None), st.tuples(st.integers(0, 4 * HOUR_MS), st.integers(101, 700)))


@hypothesis_settings(
    max_examples=15, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    raw=visits, burst=bursts, lanes=st.sampled_from([1, 2]), upgraded=st.booleans(), seed=st.randoms(use_true_random=False)
)
def test_distinct_counts_of_every_window_by_both_plans_match_the_exact_count(raw, burst, lanes, upgraded, seed):
    """``upgraded``: the first shard's half was counted by release 0.2.0, whose sketch items live in the
    counter's partition (``<bucket>#d<lane>``), the second's by this release, in the lanes' partitions."""
    settings = Settings(counts_table=COUNTS, events_table=EVENTS, rules=parse_rules(json.dumps(RULES)), bucket_lanes=lanes)
    raw = list(raw)
    if burst:
        ago, size = burst
        raw += [{"ago_ms": ago, "page": "a", "client": f"burst-{n}"} for n in range(size)]
    records = [
        stream_record(image(id=str(n), ts=NOW_MS - v["ago_ms"], page=v["page"], client=v["client"]), arrival_s=NOW_MS // 1000)
        for n, v in enumerate(raw)
    ]
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_tables(client, EVENTS, COUNTS)
        table = CountsTable(client, COUNTS, settings, backoff=no_sleep_backoff)
        for shard, half, release in zip(SHARDS, (records[::2], records[1::2]), (upgraded, False), strict=True):
            with mock.patch.object(sketch_writes, "sketch_key", legacy_sketch_key) if release else contextlib.nullcontext():
                process_window(table, settings, half, shard)
        for _ in range(3):
            length_ms = seed.choice(LENGTHS_MIN) * MINUTE_MS
            at_ms = NOW_MS - seed.randint(0, 3 * HOUR_MS) if seed.random() < 0.5 else None
            window = Window.ending(NOW_MS if at_ms is None else at_ms, length_ms)
            for plan in PlanKind:
                results = count_windows(table, ["visitors/a", "visitors/b"], length_ms=length_ms, at_ms=at_ms, plan=plan, now=NOW_MS)
                for result in results:
                    seen = [v for v in raw if f"visitors/{v['page']}" == result.counter and v["client"] != ""]
                    inside = [v for v in seen if window.covers(NOW_MS - v["ago_ms"])]
                    where = (result.counter, plan, window)
                    assert result.total == len(inside), where
                    assert_distinct(result.sketch, {str(v["client"]) for v in inside}, where)
                    assert set(result.sketch_by_hour) == set(result.by_hour), where
                    for hour, sketch in result.sketch_by_hour.items():
                        index = int(hour.timestamp()) * 1000 // HOUR_MS  # keyed by the hour's start, as by_hour
                        in_hour = {str(v["client"]) for v in inside if (NOW_MS - v["ago_ms"]) // HOUR_MS == index}
                        assert_distinct(sketch, in_hour, (where, hour))


def legacy_sketch_key(item, lane):
    """Where 0.2.0 merged lane ``lane`` of a bucket's sketch: in the counter's own partition."""
    counter, bucket = item
    return counter, legacy_sketch_sort_key(bucket.sort_key, lane)


def process_window(table, settings, records, shard):
    from tally.invocation import process

    process(window_event(records, final=True, shard_id=shard), table.commit, settings)


def assert_distinct(sketch, exact, where):
    if sketch.exact:
        assert sketch.count() == len(exact), where
    else:
        assert len(exact) > 100, where  # only a set past the sparse limit is estimated
        assert abs(sketch.count() - len(exact)) <= 4 * STANDARD_ERROR * len(exact), (where, sketch.count(), len(exact))
