"""Write cost of a workload under the origin design, under tally, and at the floor.

Both designs run their real code paths over the same stream records: tally's
``invocation.process`` and ``CountsTable.commit``, fed by ``ShardDelivery``
as Lambda's event source mapping would (batches, tumbling windows, state);
the origin's handler, batch by batch. Their writes go through a
``MeteredClient``, which charges them by DynamoDB's rules and, when given a
moto client, also stores them there.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

import boto3
from moto import mock_aws

from bench import origin
from bench.cost import PARTITION_WRITE_UNITS_PER_SECOND, MeteredClient
from bench.workloads import (
    SHARD_ID,
    STREAM_ARN,
    Workload,
    busiest_item_per_second,
    floor_writes,
    hour_only_events,
)
from tally.local.delivery import DeliveryConfig, ShardDelivery
from tally.dynamo import CounterDirectory, CountsTable, create_tables
from tally.invocation import process
from tally.core.rules import parse_rules
from tally.core.settings import Settings

ORIGIN_TABLE = "origin-counts"


def run_tally(workload: Workload, settings: Settings, config: DeliveryConfig, forward_to: Any = None) -> MeteredClient:
    """Deliver the workload to tally; each write is tagged with its tumbling window (or invocation)."""
    client = MeteredClient(("pk", "sk"), forward_to)
    if workload.rules:
        settings = dataclasses.replace(settings, time_attribute=workload.time_attribute, rules=parse_rules(workload.rules))
    table = CountsTable(client, settings.counts_table, settings)
    directory = CounterDirectory(client, settings.counts_table, settings)  # one container: this shard's

    def handler(event: dict, context: Any) -> dict:
        if "window" in event:
            client.slot = int(datetime.fromisoformat(event["window"]["start"]).timestamp())
        else:
            client.slot += 1
        response, _summary = process(event, directory.recording(table.commit), settings)
        return response

    delivery = ShardDelivery(handler, shard_id=SHARD_ID, stream_arn=STREAM_ARN, config=config)
    for chunk in workload.chunks():
        delivery.deliver(chunk)
    delivery.close()
    return client


def run_origin(workload: Workload, batch_size: int, forward_to: Any = None) -> MeteredClient:
    client = MeteredClient((origin.KEY_ATTRIBUTE,), forward_to)
    time_attribute = workload.time_attribute if workload.rules else "ts"
    handler = origin.OriginHandler(
        client, ORIGIN_TABLE, time_attribute=time_attribute, counters=workload.counters, counted=workload.origin_counted
    )
    for batch in workload.chunks(batch_size):
        handler({"Records": batch})
    return client


def per_thousand(units: float, events: int) -> float:
    return round(units * 1000 / events, 2)


def measure(workload: Workload, settings: Settings, config: DeliveryConfig) -> dict[str, Any]:
    """Requests, items written and write units of both designs and of the floor, for one workload."""
    events = workload.total
    tally = run_tally(workload, settings, config).meter
    origin_run = run_origin(workload, config.batch_size).meter
    floor = floor_writes(workload.counted_arrivals(), config.window_seconds, settings)
    origin_peak = busiest_item_per_second(workload.counted())
    markers = tally.requests  # one marker per transaction (a segment commits in parts of 99 buckets)
    bucket_writes = tally.item_writes - markers - tally.batch_item_writes
    counting_units = tally.units - tally.batch_units
    tally_peak = tally.busiest_item_writes()
    return {
        "workload": workload.name,
        "description": workload.description,
        "events": events,
        "counter_events": sum(1 for _ in workload.counted()),
        "events_in_hour_only": hour_only_events(workload, settings),
        "origin": {
            "requests": origin_run.requests,
            "item_writes": origin_run.item_writes,
            "write_units": origin_run.units,
            "write_units_per_1000_events": per_thousand(origin_run.units, events),
            "busiest_item_writes_per_second": origin_peak,
            "busiest_item_share_of_partition_limit": round(origin_peak / PARTITION_WRITE_UNITS_PER_SECOND, 3),
        },
        "tally": {
            "transactions": tally.requests,
            "bucket_writes": bucket_writes,
            "marker_writes": markers,
            "write_units": tally.units,
            "write_units_per_1000_events": per_thousand(tally.units, events),
            "directory_writes": tally.batch_item_writes,
            "directory_requests": tally.batch_requests,
            "directory_write_units": tally.batch_units,
            "busiest_item_writes_per_window": tally_peak,
            "busiest_item_writes_per_second": round(tally_peak / config.window_seconds, 4),
        },
        "floor": {
            "writes": floor,
            "write_units": floor,  # every bucket item is far under 1 KB: one unit per plain write
            "write_units_per_1000_events": per_thousand(floor, events),
        },
        "ratios": {
            "origin_units_over_tally_units": round(origin_run.units / tally.units, 2),
            "tally_bucket_writes_over_floor": round(bucket_writes / floor, 3),
            "tally_units_over_floor_units": round(tally.units / floor, 2),
            "directory_units_over_counting_units": round(tally.batch_units / counting_units, 4),
            "directory_units_over_floor_units": round(tally.batch_units / floor, 4),
        },
    }


def verify_against_moto(workload: Workload, settings: Settings, config: DeliveryConfig) -> dict[str, Any]:
    """Run both designs into moto as well, and check that the metered image is what DynamoDB stored.

    moto copies the table for every transaction, so keep the workload small.
    """
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_tables(client, settings.events_table, settings.counts_table)
        client.create_table(**origin.create_table_request(ORIGIN_TABLE))
        tally = run_tally(workload, settings, config, forward_to=client)
        origin_run = run_origin(workload, config.batch_size, forward_to=client)
        return {
            "workload": f"{workload.name}: {workload.description}",
            "tally_matches_moto": _stored(client, settings.counts_table, ("pk", "sk")) == tally.items,
            "origin_matches_moto": _stored(client, ORIGIN_TABLE, (origin.KEY_ATTRIBUTE,)) == origin_run.items,
        }


def _stored(client: Any, table: str, key_attributes: tuple[str, ...]) -> dict[tuple[str, ...], dict]:
    items = {}
    for page in client.get_paginator("scan").paginate(TableName=table, ConsistentRead=True):
        for item in page["Items"]:
            items[tuple(item[name]["S"] for name in key_attributes)] = item
    return items


