"""Query latency over HTTP against moto's server: tally's batch and range plans against the origin's query.

moto is not DynamoDB, so only the ratios between designs, measured in the same
run against the same server, mean anything, and one of them means little:
moto answers every Query by scanning all items of the table, where DynamoDB
reads one item collection, so the range plan's latency here grows with the
table and says nothing about DynamoDB's. Both tables hold the same buckets for
every counter (every hour of the last 26, every minute of the hours the
queries read in part), consistent with each other as of ``now``.
"""

from __future__ import annotations

import logging
import socket
import statistics
import time
from collections.abc import Callable
from typing import Any

import boto3
from moto.server import ThreadedMotoServer

from bench import origin
from bench.workloads import START_MS
from tally.core.buckets import Bucket, Granularity
from tally.local.aws import OFFLINE_ENVIRONMENT
from tally.dynamo.counts_table import CountsTable
from tally.dynamo.tables import create_tables
from tally.core.plans import PlanKind
from tally.query import count_windows
from tally.core.settings import Settings
from tally.core.units import HOUR_MS, MINUTE_MS

NOW_MS = START_MS + 40 * HOUR_MS + 17 * MINUTE_MS + 30_000  # minute offset 17: a typical, not a best, case
PER_MINUTE = 2  # every stored minute holds this many events
HOURS = 26
COUNTERS = 100
# Median of this many calls per design. One 100-counter range read costs moto about a minute (see above).
REPEATS = {1: {"batch": 15, "range": 15, "origin": 15}, COUNTERS: {"batch": 3, "range": 1, "origin": 3}}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def counter_names(count: int) -> list[str]:
    return [f"latency-counter-{index:03d}" for index in range(count)]


def stored_buckets(*, with_origin_walk: bool, now: int = NOW_MS) -> list[tuple[Bucket, int]]:
    """Hours of the last HOURS hours, minutes of the window's first hour and the current one, up to now.

    The origin's backward walk also reads minutes of the hour before the window.
    """
    now_minute = now // MINUTE_MS
    now_hour = now // HOUR_MS
    buckets = []
    for hour in range(now_hour - HOURS + 1, now_hour + 1):
        minutes = [m for m in range(hour * 60, hour * 60 + 60) if m <= now_minute]
        buckets.append((Bucket.of_hour(hour), PER_MINUTE * len(minutes)))
        if hour in (now_hour - 24, now_hour) or (hour == now_hour - 25 and with_origin_walk):
            buckets.extend((Bucket.of_minute(m), PER_MINUTE) for m in minutes)
    return buckets


def populate(client: Any, settings: Settings, counters: list[str]) -> None:
    puts = []
    for counter in counters:
        for bucket, count in stored_buckets(with_origin_walk=False):
            item = {"pk": {"S": counter}, "sk": {"S": bucket.sort_key}, "count": {"N": str(count)}}
            puts.append((settings.counts_table, {**item, "ttl": {"N": str(bucket.ttl_seconds(settings))}}))
        for bucket, count in stored_buckets(with_origin_walk=True):
            seconds = bucket.start_ms // 1000
            hourly = bucket.granularity is Granularity.HOUR
            key = origin.hour_key(counter, seconds) if hourly else origin.minute_key(counter, seconds)
            ttl = {"N": str(seconds + origin.RETENTION_SECONDS)}
            puts.append((origin_table(settings), {"id": {"S": key}, "count": {"N": str(count)}, "ttl": ttl}))
    for start in range(0, len(puts), 25):
        request: dict[str, list] = {}
        for table, item in puts[start : start + 25]:
            request.setdefault(table, []).append({"PutRequest": {"Item": item}})
        client.batch_write_item(RequestItems=request)


def origin_table(settings: Settings) -> str:
    return f"{settings.counts_table}-origin"


def median_seconds(call: Callable[[], object], repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def measure(settings: Settings) -> list[dict[str, Any]]:
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one access-log line per request otherwise
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        client = boto3.client(
            "dynamodb",
            region_name=OFFLINE_ENVIRONMENT["AWS_REGION"],
            endpoint_url=f"http://127.0.0.1:{port}",
            aws_access_key_id=OFFLINE_ENVIRONMENT["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=OFFLINE_ENVIRONMENT["AWS_SECRET_ACCESS_KEY"],
        )
        create_tables(client, settings.events_table, settings.counts_table)
        client.create_table(**origin.create_table_request(origin_table(settings)))
        counters = counter_names(COUNTERS)
        populate(client, settings, counters)
        table = CountsTable(client, settings.counts_table, settings)
        expected = PER_MINUTE * 24 * 60
        results = []
        for count, repeats in REPEATS.items():
            chosen = counters[:count]

            def tally(plan: PlanKind) -> Callable[[], object]:
                def call() -> None:
                    answers = count_windows(table, chosen, plan=plan, now=NOW_MS)
                    assert all(a.total == expected for a in answers), "tally's plans must agree with the stored data"

                return call

            def origin_query() -> None:
                for counter in chosen:
                    origin.query(client, origin_table(settings), counter, NOW_MS)

            batch = median_seconds(tally(PlanKind.BATCH), repeats["batch"])
            ranged = median_seconds(tally(PlanKind.RANGE), repeats["range"])
            original = median_seconds(origin_query, repeats["origin"])
            results.append(
                {
                    "counters": count,
                    "repetitions": repeats,
                    "tally_batch_ms": round(batch * 1000, 1),
                    "tally_range_ms": round(ranged * 1000, 1),
                    "origin_ms": round(original * 1000, 1),
                    "origin_over_batch": round(original / batch, 2),
                    "origin_over_range": round(original / ranged, 2),
                    "batch_over_range": round(batch / ranged, 2),
                }
            )
        return results
    finally:
        server.stop()
