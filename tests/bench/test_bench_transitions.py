"""The transitions workload: jobs that change, as a NEW_AND_OLD_IMAGES stream delivers them, metered for both designs."""

from __future__ import annotations

from collections import Counter

import boto3
from moto import mock_aws

from bench import workloads, writes
from tally.core.records import CounterEvent, parse_record
from tally.core.rules import parse_rules
from tally.core.settings import Settings
from tally.local.delivery import DeliveryConfig

CONFIG = DeliveryConfig(batch_size=100, window_seconds=60)
SMALL = {"providers": 4, "per_second": 2, "seconds": 120, "ttl_minutes": 15}


def test_records_carry_every_kind_of_change_in_each_jobs_order_and_tallys_rules_count_what_the_truth_says():
    workload = workloads.transitions(**SMALL)
    settings = Settings(time_attribute=workload.time_attribute, rules=parse_rules(workload.rules))
    records = [record for chunk in workload.chunks(50) for record in chunk]
    assert len(records) == workload.total
    kinds = Counter((record["eventName"], "userIdentity" in record) for record in records)
    assert set(kinds) == {("INSERT", False), ("MODIFY", False), ("REMOVE", False), ("REMOVE", True)}
    arrivals = [int(record["dynamodb"]["ApproximateCreationDateTime"]) for record in records]
    assert arrivals == sorted(arrivals)
    for record in records:
        change, arrival = workloads.change_of(record)
        counted = sorted((o.counter, o.event_ms) for o in parse_record(record, settings) if isinstance(o, CounterEvent))
        assert counted == sorted((counter, ms) for counter, ms, _ in workloads.job_truth(change, arrival)), record


def test_the_transitions_workload_costs_what_moto_stores_and_writes_each_bucket_once_per_window():
    workload = workloads.transitions(**SMALL)
    # tally's and the origin's writes, the two designs this workload compares (the deduplicating one's would check
    # nothing here, and its transactions are most of what moto takes).
    with mock_aws():
        checked = writes.verify_stored(
            workload, Settings(), CONFIG, boto3.client("dynamodb", region_name="us-east-1"), designs=("tally", "origin")
        )
    assert checked["tally"]["stored_matches_meter"] and checked["origin"]["stored_matches_meter"]
    assert set(checked) == {"workload", "tally", "origin"}
    measured = writes.measure(workload, Settings(), CONFIG)
    assert measured["events"] == workload.total
    assert measured["origin"]["item_writes"] == 2 * measured["counter_events"]
    assert measured["tally"]["bucket_writes"] == measured["floor"]["writes"]
    assert measured["ratios"]["origin_units_over_tally_units"] > 1
