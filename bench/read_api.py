"""The read API on loopback: requests/s and p50/p99 latency of a 24 h count, beside the library's own latency.

A server process holds moto's server with a day of buckets for 20 counters and
the read API's handler behind the local adapter (what `make serve` runs). This
process plays the clients: 1, then 50 at once, each on its own keep-alive
connection, asking a 24 h count of 1 counter and of 20 counters for 10 s per
case (at most MAX_REQUESTS). Beside them, the library's latency for the same
read (``Reader.count_many``, same window, same moto server), one call at a
time from this process. Every address is on loopback and every loop stops by
itself. moto is not DynamoDB, and both processes share this machine's cores:
only the ratio of API to library and the shape across cases mean anything.

``python -m bench.read_api --serve`` is the server process.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import threading
import time
from typing import Any
from urllib.parse import urlencode, urlsplit

import boto3

from bench.latency import PER_MINUTE, stored_buckets
from tally.core.settings import MINUTE_MS, Settings
from tally.local.aws import OFFLINE_ENVIRONMENT, MotoServer

COUNTS_TABLE = "bench-read-api-counts"
COUNTERS = [f"api-counter-{index:02d}" for index in range(20)]
CASES = [(1, 1), (20, 1), (1, 50), (20, 50)]  # (counters, concurrent clients)
SECONDS = 10.0
MAX_REQUESTS = 20_000
LIBRARY_SECONDS = 5.0
LIBRARY_MAX_CALLS = 2_000
EXPECTED_TOTAL = PER_MINUTE * 24 * 60


def serve() -> None:
    """The server process: buckets on moto, the read API on loopback; prints where, then runs until stdin closes."""
    from botocore.credentials import Credentials

    from tally.dynamo import create_tables
    from tally.local.http_adapter import LocalApi

    with MotoServer() as server:
        os.environ.update({**server.environment(), "COUNTS_TABLE": COUNTS_TABLE})
        client = boto3.client("dynamodb")
        create_tables(client, "bench-read-api-events", COUNTS_TABLE)
        now = time.time_ns() // 1_000_000
        at = now - now % MINUTE_MS  # the window ends where this minute begins: every bucket of it is written below
        populate(client, Settings(counts_table=COUNTS_TABLE), at - 1)
        with LocalApi(credentials=Credentials("testing", "testing")) as api:
            print(json.dumps({"api": api.url, "endpoint": server.endpoint_url, "at_ms": at}), flush=True)
            sys.stdin.read()  # until the bench closes it


def populate(client: Any, settings: Settings, now: int) -> None:
    puts = [
        {"PutRequest": {"Item": {
            "pk": {"S": counter}, "sk": {"S": bucket.sort_key}, "count": {"N": str(count)},
            "ttl": {"N": str(bucket.ttl_seconds(settings))},
        }}}
        for counter in COUNTERS
        for bucket, count in stored_buckets(with_origin_walk=False, now=now)
    ]
    for start in range(0, len(puts), 25):
        client.batch_write_item(RequestItems={COUNTS_TABLE: puts[start : start + 25]})


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def load(api: str, path: str, clients: int, seconds: float = SECONDS, max_requests: int = MAX_REQUESTS) -> dict[str, Any]:
    """``clients`` threads, each on its own keep-alive connection, asking ``path`` until the time or count runs out."""
    host, port = urlsplit(api).hostname, urlsplit(api).port
    latencies: list[float] = []
    errors = 0
    lock = threading.Lock()
    deadline = time.perf_counter() + seconds

    def client() -> None:
        nonlocal errors
        connection = http.client.HTTPConnection(host, port, timeout=30)
        try:
            while time.perf_counter() < deadline:
                with lock:
                    if len(latencies) >= max_requests:
                        return
                started = time.perf_counter()
                connection.request("GET", path)
                response = connection.getresponse()
                response.read()
                elapsed = time.perf_counter() - started
                with lock:
                    latencies.append(elapsed)
                    errors += response.status != 200
        finally:
            connection.close()

    threads = [threading.Thread(target=client, name=f"bench-client-{n}") for n in range(clients)]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=seconds + 60)
    took = time.perf_counter() - began
    return {
        "clients": clients,
        "requests": len(latencies),
        "errors": errors,
        "seconds": round(took, 2),
        "requests_per_second": round(len(latencies) / took, 1),
        "p50_ms": round(percentile(latencies, 0.5) * 1000, 1),
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 1),
    }


def library_latency(endpoint: str, counters: list[str], at: str) -> dict[str, Any]:
    """The same read through the library, one call after another, from this process."""
    from tally.reader import Reader

    client = boto3.client(
        "dynamodb",
        endpoint_url=endpoint,
        region_name=OFFLINE_ENVIRONMENT["AWS_REGION"],
        aws_access_key_id=OFFLINE_ENVIRONMENT["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=OFFLINE_ENVIRONMENT["AWS_SECRET_ACCESS_KEY"],
    )
    reader = Reader(COUNTS_TABLE, client=client, settings=Settings(counts_table=COUNTS_TABLE))
    samples: list[float] = []
    deadline = time.perf_counter() + LIBRARY_SECONDS
    while time.perf_counter() < deadline and len(samples) < LIBRARY_MAX_CALLS:
        started = time.perf_counter()
        results = reader.count_many(counters, window="24h", at=at)
        samples.append(time.perf_counter() - started)
        if any(result.total != EXPECTED_TOTAL for result in results):
            raise AssertionError(f"the library read {[r.total for r in results]}, not {EXPECTED_TOTAL} each")
    return {"calls": len(samples), "p50_ms": round(percentile(samples, 0.5) * 1000, 1),
            "p99_ms": round(percentile(samples, 0.99) * 1000, 1)}


def measure(cases: list[tuple[int, int]] = CASES, seconds: float = SECONDS) -> dict[str, Any]:
    environment = {**os.environ, **OFFLINE_ENVIRONMENT}
    environment.pop("AWS_ENDPOINT_URL", None)
    server = subprocess.Popen(
        [sys.executable, "-m", "bench.read_api", "--serve"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=environment,
    )
    try:
        where = json.loads(server.stdout.readline())
        at = time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime(where["at_ms"] / 1000))
        results = []
        libraries = {count: library_latency(where["endpoint"], COUNTERS[:count], at) for count in sorted({c for c, _ in cases})}
        for count, clients in cases:
            path = "/counts?" + urlencode([*(("counter", name) for name in COUNTERS[:count]), ("window", "24h"), ("at", at)])
            check(where["api"], path, count)
            figures = load(where["api"], path, clients, seconds)
            library = libraries[count]
            results.append({
                "counters": count, **figures,
                "library_p50_ms": library["p50_ms"], "library_p99_ms": library["p99_ms"],
                "api_over_library_p50": round(figures["p50_ms"] / library["p50_ms"], 2),
            })
        return {
            "window": "24 h ending " + at,
            "seconds_per_case": seconds,
            "max_requests_per_case": MAX_REQUESTS,
            "cases": results,
            "library": [{"counters": count, **figures} for count, figures in libraries.items()],
        }
    finally:
        server.stdin.close()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)


def check(api: str, path: str, counters: int) -> None:
    """The API answers the stored totals before it is timed."""
    parts = urlsplit(api)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        body = json.loads(response.read())
    finally:
        connection.close()
    totals = [count["total"] for count in body.get("counts", [])]
    if response.status != 200 or totals != [EXPECTED_TOTAL] * counters:
        raise AssertionError(f"the API answered {response.status} {body}, not {EXPECTED_TOTAL} per counter")


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        serve()
    else:
        print(json.dumps(measure(), indent=2))
