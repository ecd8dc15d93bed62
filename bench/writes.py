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

from bench import calendar_buckets, origin
from bench.cost import PARTITION_WRITE_UNITS_PER_SECOND, MeteredClient, metered_counts
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
from tally.dynamo.directory import CounterDirectory
from tally.core.tables import COUNTS_TABLE
from tally.invocation import process
from tally.core.rules import parse_rules
from tally.core.settings import Settings

ORIGIN_TABLE = "origin-counts"
DEDUP_TABLE = "dedup-counts"


def run_tally(workload: Workload, settings: Settings, config: DeliveryConfig, forward_to: Any = None) -> MeteredClient:
    """Deliver the workload to tally; each write is tagged with its tumbling window (or invocation)."""
    client = MeteredClient(("pk", "sk"), forward_to)
    delivery = tally_delivery(client, tally_settings(workload, settings), config)
    for chunk in workload.chunks():
        delivery.deliver(chunk)
    delivery.close()
    return client


def tally_settings(workload: Workload, settings: Settings) -> Settings:
    """The settings tally counts ``workload`` with: ``settings`` with the workload's rules, if it has any."""
    if workload.rules:
        return dataclasses.replace(settings, time_attribute=workload.time_attribute, rules=parse_rules(workload.rules))
    return settings


def tally_delivery(client: MeteredClient, settings: Settings, config: DeliveryConfig) -> ShardDelivery:
    """One shard's event source mapping, invoking tally's handler path over ``client`` (one container)."""
    # One update at a time into the meter (it keeps one image of the table), and the steady
    # state: no segment here can predate this release, so no markers of the previous one are read.
    table = metered_counts(client, settings)
    directory = CounterDirectory(client, settings.counts_table, settings)  # one container: this shard's

    def handler(event: dict, context: Any) -> dict:
        if "window" in event:
            client.slot = int(datetime.fromisoformat(event["window"]["start"]).timestamp())
        else:
            client.slot += 1
        response, _summary = process(event, directory.recording(table.commit), settings)
        return response

    return ShardDelivery(handler, shard_id=SHARD_ID, stream_arn=STREAM_ARN, config=config)


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


def ranking_everything(settings: Settings) -> Settings:
    """The same settings with every counter ranked: what a table pays that asks top lists of all its counters."""
    return dataclasses.replace(settings, ranked_prefixes=("",))


def tally_figures(meter: Any, config: DeliveryConfig, events: int) -> dict[str, Any]:
    """One tally run's writes: bucket updates, the directory's puts and the rank records', all charged."""
    peak = meter.busiest_item_writes()
    return {
        "updates": meter.requests,
        "bucket_writes": meter.item_writes - meter.batch_item_writes,  # one UpdateItem per bucket item per segment
        "write_units": meter.units,
        "write_units_per_1000_events": per_thousand(meter.units, events),
        "directory_writes": meter.batch_item_writes - meter.rank_item_writes,
        "directory_requests": meter.batch_requests - meter.rank_requests,
        "directory_write_units": meter.batch_units - meter.rank_units,
        "rank_writes": meter.rank_item_writes,
        "rank_requests": meter.rank_requests,
        "rank_write_units": meter.rank_units,
        "busiest_item_writes_per_window": peak,
        "busiest_item_writes_per_second": round(peak / config.window_seconds, 4),
    }


def measure(workload: Workload, settings: Settings, config: DeliveryConfig) -> dict[str, Any]:
    """Requests, items written and write units of every design and of the floor, for one workload.

    ``tally`` runs with ``settings`` (the deployment's: no ranked prefix by
    default), ``tally_ranked`` with every counter ranked, ``tally_calendar``
    with every counter keeping days and months in UTC and New York, closed
    (``bench.calendar_buckets``); every ratio counts all of a run's write
    units, directory and rank records included (and the close's, against a
    floor with one write per counter-day and counter-month).
    """
    events = workload.total
    with_days = calendar_buckets.closed_figures(workload, settings, config)
    tally = tally_figures(run_tally(workload, settings, config).meter, config, events)
    ranked = tally_figures(run_tally(workload, ranking_everything(settings), config).meter, config, events)
    origin_run = run_origin(workload, config.batch_size).meter
    dedup = run_dedup(workload, config.batch_size).meter
    floor = floor_writes(workload.counted_arrivals(), config.window_seconds, settings)
    origin_peak = busiest_item_per_second(workload.counted())
    counting_units = tally["write_units"] - tally["directory_write_units"] - tally["rank_write_units"]
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
        "tally": tally,
        "tally_ranked": ranked,
        "tally_calendar": with_days,
        "floor": {
            "writes": floor,
            "write_units": floor,  # every bucket item is far under 1 KB: one unit per plain write
            "write_units_per_1000_events": per_thousand(floor, events),
        },
        "ratios": {
            "origin_units_over_tally_units": round(origin_run.units / tally["write_units"], 2),
            "origin_units_over_tally_ranked_units": round(origin_run.units / ranked["write_units"], 2),
            "dedup_units_over_tally_units": round(dedup.units / tally["write_units"], 2),
            "tally_bucket_writes_over_floor": round(tally["bucket_writes"] / floor, 3),
            "tally_units_over_floor_units": round(tally["write_units"] / floor, 3),
            "tally_ranked_units_over_floor_units": round(ranked["write_units"] / floor, 3),
            "tally_calendar_units_over_floor_units": with_days["units_over_floor_units"],
            "directory_units_over_counting_units": round(tally["directory_write_units"] / counting_units, 4),
            "directory_units_over_floor_units": round(tally["directory_write_units"] / floor, 4),
            "rank_units_over_floor_units": round(ranked["rank_write_units"] / floor, 4),
        },
    }


def verify_against_moto(workload: Workload, settings: Settings, config: DeliveryConfig) -> dict[str, Any]:
    """Run both designs into moto as well, and check that the metered image is what DynamoDB stored.

    moto copies the table for every transaction, so keep the workload small.
    """
    with mock_aws():
        checked = verify_stored(workload, settings, config, boto3.client("dynamodb", region_name="us-east-1"))
    return {
        "workload": checked["workload"],
        **{f"{design}_matches_moto": checked[design]["stored_matches_meter"] for design in DESIGNS},
    }


DESIGNS = ("tally", "origin", "dedup")


def verify_stored(
    workload: Workload, settings: Settings, config: DeliveryConfig, client: Any, designs: tuple[str, ...] = DESIGNS
) -> dict[str, Any]:
    """Every design's writes (or those of ``designs``), metered and forwarded to a real DynamoDB API (moto,
    DynamoDB Local): per design, whether the items stored are the metered image, the items written and the
    write units the meter counts, and the write units the server says the writes consumed
    (ReturnConsumedCapacity).

    The tables go without TTL: the workloads are dated in the past, and a TTL process (DynamoDB Local
    has one) would delete their buckets while they are checked.
    """
    tables = {"tally": settings.counts_table, "origin": ORIGIN_TABLE, "dedup": DEDUP_TABLE}
    tables = {design: table for design, table in tables.items() if design in designs}
    for design, table in tables.items():
        description = COUNTS_TABLE.create_table_request(table) if design == "tally" else origin.create_table_request(table)
        client.create_table(**description)
    for table in tables.values():
        client.get_waiter("table_exists").wait(TableName=table, WaiterConfig={"Delay": 1, "MaxAttempts": 60})
    consumed = {design: ConsumedWrites(client) for design in tables}
    running = {
        "tally": lambda: run_tally(workload, settings, config, forward_to=consumed["tally"]),
        "origin": lambda: run_origin(workload, config.batch_size, forward_to=consumed["origin"]),
        "dedup": lambda: run_dedup(workload, config.batch_size, forward_to=consumed["dedup"]),
    }
    runs = {design: running[design]() for design in tables}
    keys = {"tally": ("pk", "sk"), "origin": (origin.KEY_ATTRIBUTE,), "dedup": (origin.KEY_ATTRIBUTE,)}
    checked: dict[str, Any] = {"workload": f"{workload.name}: {workload.description}"}
    for design, run in runs.items():
        stored = _stored(client, tables[design], keys[design])
        checked[design] = {
            "stored_matches_meter": stored == run.items,
            "items_stored": len(stored),
            "item_writes": run.meter.item_writes,
            "failed_conditions": run.meter.failed_conditions,
            "write_units": run.meter.units,
            "consumed_write_units": consumed[design].units,
        }
    return checked


class ConsumedWrites:
    """A boto3 client whose writes ask for the capacity they consumed (ReturnConsumedCapacity=TOTAL), summed."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.units = 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    def update_item(self, **request: Any) -> dict[str, Any]:
        return self._summed(self.client.update_item(**{**request, "ReturnConsumedCapacity": "TOTAL"}))

    def batch_write_item(self, **request: Any) -> dict[str, Any]:
        return self._summed(self.client.batch_write_item(**{**request, "ReturnConsumedCapacity": "TOTAL"}))

    def transact_write_items(self, **request: Any) -> dict[str, Any]:
        return self._summed(self.client.transact_write_items(**{**request, "ReturnConsumedCapacity": "TOTAL"}))

    def _summed(self, response: dict[str, Any]) -> dict[str, Any]:
        consumed = response.get("ConsumedCapacity") or []
        for entry in consumed if isinstance(consumed, list) else [consumed]:
            self.units += entry.get("CapacityUnits", 0)
        return response


def _stored(client: Any, table: str, key_attributes: tuple[str, ...]) -> dict[tuple[str, ...], dict]:
    items = {}
    for page in client.get_paginator("scan").paginate(TableName=table, ConsistentRead=True):
        for item in page["Items"]:
            items[tuple(item[name]["S"] for name in key_attributes)] = item
    return items
