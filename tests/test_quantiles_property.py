"""Property: for random values and windows, every quantile a histogram rule answers, by both plans and per
hour, lies within 1 % of the value of rank ⌈q·n⌉ among the window's raw values (brute force below)."""

from __future__ import annotations

import json
from decimal import ROUND_CEILING, Decimal

import boto3
from hypothesis import HealthCheck, given, settings as hypothesis_settings
from hypothesis import strategies as st
from moto import mock_aws

from factories import STREAM_ARN, image, stream_record, window_event
from moto_tables import COUNTS, EVENTS, no_sleep_backoff
from tally.core.commit import lane_of, source_id
from tally.core.histograms import MAX_MAGNITUDE, RELATIVE_ACCURACY
from tally.core.plans import PlanKind
from tally.core.rules import parse_rules
from tally.core.settings import Settings
from tally.core.units import HOUR_MS, MINUTE_MS
from tally.core.windows import Window
from tally.dynamo.counts_table import CountsTable
from tally.dynamo.tables import create_tables
from tally.invocation import process
from tally.query import count_windows

NOW_MS = 1_795_000_000_000 - 1_795_000_000_000 % HOUR_MS + 41 * MINUTE_MS + 5_000
LENGTHS_MIN = [1, 7, 30, 59, 60, 61, 95, 119, 180, 24 * 60]
QUANTILES = ["0", "0.01", "0.25", "0.5", "0.9", "0.99", "0.999", "1"]


def _lane(shard: str) -> int:
    return lane_of(source_id(STREAM_ARN, shard), 2)


# Two shards that add to different lanes when there are two.
SHARDS = ("shardId-0", next(f"shardId-{k}" for k in range(1, 99) if _lane(f"shardId-{k}") != _lane("shardId-0")))
RULES = [{"name": "load", "counter": "load/{page}", "histogram": "ms", "sum": "weight"}]

values = st.one_of(
    st.integers(1, 5_000).map(Decimal),  # latencies in ms
    st.decimals("0.000001", "1E12", places=6),
    st.decimals("-1000", "1000", places=3),  # zero and negative values
    st.sampled_from([Decimal("1E18"), Decimal("-1E-12"), "slow"]),  # refused: invalid_histogram
)
items = st.lists(
    st.fixed_dictionaries({"ago_ms": st.integers(0, 5 * HOUR_MS), "page": st.sampled_from("ab"), "ms": values}),
    min_size=1,
    max_size=60,
)


def accepted(value) -> bool:
    if not isinstance(value, Decimal):
        return False
    return value == 0 or Decimal("1E-9") <= value.copy_abs() < MAX_MAGNITUDE


def value_of_rank(ordered: list[Decimal], q: str) -> Decimal:
    rank = max(1, int((Decimal(q) * len(ordered)).to_integral_value(rounding=ROUND_CEILING)))
    return ordered[rank - 1]


def assert_within(answer, truth, where):
    if truth is None:
        assert answer is None, where
        return
    assert answer is not None and abs(answer - truth) <= RELATIVE_ACCURACY * abs(truth), (where, answer, truth)


@hypothesis_settings(
    max_examples=20, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(raw=items, lanes=st.sampled_from([1, 2]), seed=st.randoms(use_true_random=False))
def test_quantiles_of_every_window_by_both_plans_are_within_one_percent_of_brute_force(raw, lanes, seed):
    settings = Settings(
        counts_table=COUNTS, events_table=EVENTS, rules=parse_rules(json.dumps(RULES)), bucket_lanes=lanes
    )
    records = []
    for number, item in enumerate(raw):
        record = image(id=str(number), ts=NOW_MS - item["ago_ms"], page=item["page"], ms=item["ms"], weight=1)
        records.append(stream_record(record, arrival_s=NOW_MS // 1000))
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_tables(client, EVENTS, COUNTS)
        table = CountsTable(client, COUNTS, settings, backoff=no_sleep_backoff)
        # Two shards writing apart: with two lanes, a bucket's bins are the sum of both lanes'.
        counted = 0
        for shard, half in zip(SHARDS, (records[::2], records[1::2]), strict=True):
            counted += process(window_event(half, final=True, shard_id=shard), table.commit, settings)[1].counted
        assert counted == sum(accepted(item["ms"]) for item in raw)

        for _ in range(3):
            length_ms = seed.choice(LENGTHS_MIN) * MINUTE_MS
            at_ms = NOW_MS - seed.randint(0, 4 * HOUR_MS) if seed.random() < 0.5 else None
            window = Window.ending(NOW_MS if at_ms is None else at_ms, length_ms)
            inside = {
                page: sorted(
                    item["ms"]
                    for item in raw
                    if item["page"] == page and accepted(item["ms"]) and window.covers(NOW_MS - item["ago_ms"])
                )
                for page in "ab"
            }
            for plan in PlanKind:
                results = count_windows(
                    table, ["load/a", "load/b"], length_ms=length_ms, at_ms=at_ms, plan=plan, now=NOW_MS
                )
                for result in results:
                    ordered = inside[result.counter[-1]]
                    where = (result.counter, plan, window)
                    assert result.total == result.histogram.total == len(ordered), where
                    for q in QUANTILES:
                        assert_within(result.histogram.quantile(q), value_of_rank(ordered, q) if ordered else None, where)
                    if ordered:
                        assert result.histogram.low <= ordered[0] and result.histogram.high >= ordered[-1], where
                    for hour, histogram in result.histogram_by_hour.items():
                        hour_index = int(hour.timestamp()) * 1000 // HOUR_MS
                        in_hour = sorted(
                            item["ms"]
                            for item in raw
                            if item["page"] == result.counter[-1]
                            and accepted(item["ms"])
                            and window.covers(NOW_MS - item["ago_ms"])
                            and (NOW_MS - item["ago_ms"]) // HOUR_MS == hour_index
                        )
                        assert histogram.total == result.by_hour[hour] == len(in_hour), (where, hour)
                        assert_within(histogram.quantile("0.5"), value_of_rank(in_hour, "0.5") if in_hour else None, where)
