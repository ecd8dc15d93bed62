"""Property: for random items and random rule sets, every window's count, sum and average, by both
plans, equals brute force over the raw items (rules restated independently below)."""

from __future__ import annotations

import json
from decimal import Decimal

import boto3
from hypothesis import HealthCheck, given, settings as hypothesis_settings
from hypothesis import strategies as st
from moto import mock_aws

from factories import image, one_invocation_window, stream_record
from moto_tables import COUNTS, EVENTS, no_sleep_backoff
from tally.core.amounts import average_of
from tally.core.plans import PlanKind
from tally.core.rules import parse_rules
from tally.core.settings import Settings
from tally.core.units import HOUR_MS, MINUTE_MS
from tally.core.windows import Window
from tally.dynamo.counts_table import CountsTable
from tally.dynamo.tables import create_tables
from tally.invocation import process
from tally.query import count_windows

NOW_MS = 1_795_000_000_000 - 1_795_000_000_000 % HOUR_MS + 17 * MINUTE_MS + 5_000
KINDS = ["a", "b", "ü", 7]
STATUSES = ["paid", "open", "void"]
LENGTHS_MIN = [1, 30, 59, 60, 61, 119, 180, 24 * 60]

rule_sets = st.lists(
    st.fixed_dictionaries(
        {
            "prefix": st.sampled_from(["k/", "all", "s-"]),
            "by_kind": st.booleans(),
            "status": st.one_of(st.none(), st.lists(st.sampled_from(STATUSES), min_size=1, max_size=2, unique=True)),
            "sums": st.booleans(),
        }
    ),
    min_size=1,
    max_size=4,
)
items = st.lists(
    st.fixed_dictionaries(
        {
            "ago_ms": st.integers(0, 5 * HOUR_MS),
            "kind": st.one_of(st.none(), st.sampled_from(KINDS)),
            "status": st.sampled_from(STATUSES),
            "cents": st.one_of(st.none(), st.integers(-10**6, 10**9)),
        }
    ),
    max_size=40,
)


def as_rules(specs: list[dict]) -> list[dict]:
    """The specs as TALLY_RULES; each rule's counter is unique to it, so sums never mix."""
    rules = []
    for index, spec in enumerate(specs):
        rule = {"name": f"r{index}", "counter": f"{spec['prefix']}{index}" + ("/{kind}" if spec["by_kind"] else "")}
        if spec["status"]:
            rule["when"] = {"status": {"oneOf": spec["status"]}}
        if spec["sums"]:
            rule["sum"] = "amount"
        rules.append(rule)
    return rules


def brute_force(specs: list[dict], raw: list[dict]) -> dict[str, list[tuple[int, Decimal | None]]]:
    """counter -> (event ms, amount) of every event a rule counts, straight from the raw items."""
    events: dict[str, list[tuple[int, Decimal | None]]] = {}
    for item in raw:
        for index, spec in enumerate(specs):
            if spec["status"] and item["status"] not in spec["status"]:
                continue
            if spec["by_kind"] and item["kind"] is None:
                continue  # refused: no attribute to name the counter
            if spec["sums"] and item["cents"] is None:
                continue  # refused: nothing to sum
            name = f"{spec['prefix']}{index}" + (f"/{item['kind']}" if spec["by_kind"] else "")
            amount = Decimal(item["cents"]) / 100 if spec["sums"] else None
            events.setdefault(name, []).append((NOW_MS - item["ago_ms"], amount))
    return events


@hypothesis_settings(
    max_examples=25, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(specs=rule_sets, raw=items, seed=st.randoms(use_true_random=False))
def test_every_window_by_both_plans_equals_brute_force(specs, raw, seed):
    settings = Settings(counts_table=COUNTS, events_table=EVENTS, rules=parse_rules(json.dumps(as_rules(specs))))
    records = []
    for number, item in enumerate(raw):
        attributes = {"id": str(number), "ts": NOW_MS - item["ago_ms"], "status": item["status"]}
        if item["kind"] is not None:
            attributes["kind"] = item["kind"]
        if item["cents"] is not None:
            attributes["amount"] = Decimal(item["cents"]) / 100
        records.append(stream_record(image(**attributes), arrival_s=NOW_MS // 1000))
    truth = brute_force(specs, raw)

    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_tables(client, EVENTS, COUNTS)
        table = CountsTable(client, COUNTS, settings, backoff=no_sleep_backoff)
        summary = process(one_invocation_window(records), table.commit, settings)[1]
        assert summary.counted == sum(len(events) for events in truth.values())
        counters = sorted(truth) + ["k/9"]
        for _ in range(3):
            length_ms = seed.choice(LENGTHS_MIN) * MINUTE_MS
            at_ms = NOW_MS - seed.randint(0, 6 * HOUR_MS) if seed.random() < 0.5 else None
            window = Window.ending(NOW_MS if at_ms is None else at_ms, length_ms)
            for plan in PlanKind:
                results = count_windows(table, counters, length_ms=length_ms, at_ms=at_ms, plan=plan, now=NOW_MS)
                for result in results:
                    inside = [amount for at, amount in truth.get(result.counter, []) if window.covers(at)]
                    where = (result.counter, plan, window)
                    assert result.total == len(inside), where
                    summing = any(amount is not None for _, amount in truth.get(result.counter, []))
                    if summing:
                        expected_sum = sum(inside, Decimal(0))
                        assert result.sum == expected_sum, where
                        assert result.average == average_of(expected_sum, len(inside)), where
                        assert sum(result.sum_by_hour.values(), Decimal(0)) == expected_sum, where
                    elif not settings.counter_rules.sums(result.counter):
                        assert result.sum is None and result.average is None, where
