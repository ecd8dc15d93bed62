"""Write cost of a workload under the origin design, the deduplicating design, tally, and at the floor.

Every design runs its real code path over the same stream records: tally's
``invocation.process`` and ``CountsTable.commit``, fed by ``ShardDelivery``
as Lambda's event source mapping would (batches, tumbling windows, state);
the origin's handler and the deduplicating one (``bench.dedup``), batch by
batch. Their writes go through a ``MeteredClient``, which charges them by
DynamoDB's rules and, when given a moto client, also stores them there.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

import boto3
from moto import mock_aws

from bench import origin
from bench.cost import PARTITION_WRITE_UNITS_PER_SECOND, MeteredClient
from bench.dedup import DedupHandler
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
DEDUP_TABLE = "dedup-counts"


def run_tally(workload: Workload, settings: Settings, config: DeliveryConfig, forward_to: Any = None) -> MeteredClient:
    """Deliver the workload to tally; each write is tagged with its tumbling window (or invocation)."""
    client = MeteredClient(("pk", "sk"), forward_to)
    if workload.rules:
        settings = dataclasses.replace(settings, time_attribute=workload.time_attribute, rules=parse_rules(workload.rules))
    # One update at a time into the meter (it keeps one image of the table), and the steady
    # state: no segment here can predate this release, so no markers of the previous one are read.
    table = CountsTable(client, settings.counts_table, settings, workers=1, previous_release_until_ms=0)
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


def run_dedup(workload: Workload, batch_size: int, forward_to: Any = None) -> MeteredClient:
    client = MeteredClient((origin.KEY_ATTRIBUTE,), forward_to)
    time_attribute = workload.time_attribute if workload.rules else "ts"
    handler = DedupHandler(
        client, DEDUP_TABLE, time_attribute=time_attribute, counters=workload.counters, counted=workload.origin_counted
    )
    for batch in workload.chunks(batch_size):
        handler({"Records": batch})
    return client


def per_thousand(units: float, events: int) -> float:
    return round(units * 1000 / events, 2)


def measure(workload: Workload, settings: Settings, config: DeliveryConfig) -> dict[str, Any]:
    """Requests, items written and write units of every design and of the floor, for one workload."""
    events = workload.total
    tally = run_tally(workload, settings, config).meter
    origin_run = run_origin(workload, config.batch_size).meter
    dedup = run_dedup(workload, config.batch_size).meter
    floor = floor_writes(workload.counted_arrivals(), config.window_seconds, settings)
    origin_peak = busiest_item_per_second(workload.counted())
    bucket_writes = tally.item_writes - tally.batch_item_writes  # one UpdateItem per bucket item per segment
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
        "dedup": {
            "transactions": dedup.requests,
            "item_writes": dedup.item_writes,
            "write_units": dedup.units,
            "write_units_per_1000_events": per_thousand(dedup.units, events),
        },
        "tally": {
            "updates": tally.requests,
            "bucket_writes": bucket_writes,
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
            "dedup_units_over_tally_units": round(dedup.units / tally.units, 2),
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
        client.create_table(**origin.create_table_request(DEDUP_TABLE))
        tally = run_tally(workload, settings, config, forward_to=client)
        origin_run = run_origin(workload, config.batch_size, forward_to=client)
        dedup = run_dedup(workload, config.batch_size, forward_to=client)
        return {
            "workload": f"{workload.name}: {workload.description}",
            "tally_matches_moto": _stored(client, settings.counts_table, ("pk", "sk")) == tally.items,
            "origin_matches_moto": _stored(client, ORIGIN_TABLE, (origin.KEY_ATTRIBUTE,)) == origin_run.items,
            "dedup_matches_moto": _stored(client, DEDUP_TABLE, (origin.KEY_ATTRIBUTE,)) == dedup.items,
        }


def _stored(client: Any, table: str, key_attributes: tuple[str, ...]) -> dict[tuple[str, ...], dict]:
    items = {}
    for page in client.get_paginator("scan").paginate(TableName=table, ConsistentRead=True):
        for item in page["Items"]:
            items[tuple(item[name]["S"] for name in key_attributes)] = item
    return items


