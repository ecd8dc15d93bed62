"""The read API on loopback: requests/s and p50/p99 latency of a 24 h count, beside the library's own latency.

One process holds moto's server with a day of buckets for 20 counters,
another the read API's handler behind the local adapter (what `make serve`
runs), reading from it as the read function reads DynamoDB. This process
plays the clients: 1, then 50 at once, each on its own keep-alive
connection, asking a 24 h count of 1 counter and of 20 counters for 10 s per
case (at most MAX_REQUESTS). Beside them, the library's latency for the same
read (``Reader.count_many``, same window, same moto server), one call at a
time from this process. Every address is on loopback and every loop stops by
itself. moto is not DynamoDB, and both processes share this machine's cores:
only the ratio of API to library and the shape across cases mean anything.

``python -m bench.read_api --moto`` and ``--api ENDPOINT`` are the two server processes.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlencode, urlsplit

import boto3

from bench.latency import PER_MINUTE, stored_buckets
from tally.core.settings import Settings
from tally.core.units import MINUTE_MS
from tally.local.aws import OFFLINE_ENVIRONMENT, MotoServer

COUNTS_TABLE = "bench-read-api-counts"
COUNTERS = [f"api-counter-{index:02d}" for index in range(20)]
CASES = [(1, 1), (20, 1), (1, 50), (20, 50)]  # (counters, concurrent clients)
SECONDS = 10.0
MAX_REQUESTS = 20_000
REQUEST_TIMEOUT = 60  # seconds a request may take: a case ends at most this long after its time is up
LIBRARY_SECONDS = 5.0
LIBRARY_MAX_CALLS = 2_000
EXPECTED_TOTAL = PER_MINUTE * 24 * 60


def serve_moto() -> None:
    """moto's server with a day of buckets; prints its endpoint and the window's end, then runs until stdin closes."""
    from tally.dynamo.tables import create_tables

    with MotoServer() as server:
        os.environ.update(server.environment())
        client = boto3.client("dynamodb")
        create_tables(client, "bench-read-api-events", COUNTS_TABLE)
        now = time.time_ns() // 1_000_000
        at = now - now % MINUTE_MS  # the window ends where this minute begins: every bucket of it is written below
        populate(client, Settings(counts_table=COUNTS_TABLE), at - 1)
        print(json.dumps({"endpoint": server.endpoint_url, "at_ms": at}), flush=True)
        sys.stdin.read()  # until the bench closes it


def serve_api(endpoint: str) -> None:
    """The read API's handler behind the local adapter, reading from moto at ``endpoint``, until stdin closes."""
    from botocore.credentials import Credentials

    from tally.local.http_adapter import LocalApi

    os.environ.update({"AWS_ENDPOINT_URL": endpoint, "COUNTS_TABLE": COUNTS_TABLE})
    with LocalApi(credentials=Credentials("testing", "testing")) as api:
        print(json.dumps({"api": api.url}), flush=True)
        sys.stdin.read()


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
        connection = http.client.HTTPConnection(host, port, timeout=REQUEST_TIMEOUT)
        try:
            while time.perf_counter() < deadline:
                with lock:
                    if len(latencies) >= max_requests:
                        return
                started = time.perf_counter()
                try:
                    connection.request("GET", path)
                    response = connection.getresponse()
                    response.read()
                except OSError:  # a timeout or a dropped connection: an error, and this client stops
                    with lock:
                        errors += 1
                    return
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
        thread.join(timeout=seconds + REQUEST_TIMEOUT + 5)
    took = time.perf_counter() - began
    if not latencies:
        raise AssertionError(f"no request of {clients} clients completed in {took:.0f} s ({errors} errors)")
    return {
        "clients": clients,
        "requests": len(latencies),
        "errors": errors,
        "seconds": round(took, 2),
        "requests_per_second": round(len(latencies) / took, 1),
        "p50_ms": round(percentile(latencies, 0.5) * 1000, 1),
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 1),
    }


def library_latency(endpoint: str, counters: list[str], at: str, seconds: float = LIBRARY_SECONDS) -> dict[str, Any]:
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
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline and len(samples) < LIBRARY_MAX_CALLS:
        started = time.perf_counter()
        results = reader.count_many(counters, window="24h", at=at)
        samples.append(time.perf_counter() - started)
        if any(result.total != EXPECTED_TOTAL for result in results):
            raise AssertionError(f"the library read {[r.total for r in results]}, not {EXPECTED_TOTAL} each")
    return {"calls": len(samples), "p50_ms": round(percentile(samples, 0.5) * 1000, 1),
            "p99_ms": round(percentile(samples, 0.99) * 1000, 1)}


def measure(cases: list[tuple[int, int]] = CASES, seconds: float = SECONDS) -> dict[str, Any]:
    with server_process("--moto") as moto:
        where = json.loads(moto.stdout.readline())
        at = time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime(where["at_ms"] / 1000))
        library_seconds = min(LIBRARY_SECONDS, seconds)
        libraries = {
            count: library_latency(where["endpoint"], COUNTERS[:count], at, library_seconds)
            for count in sorted({c for c, _ in cases})
        }
        with server_process("--api", where["endpoint"]) as adapter:
            api = json.loads(adapter.stdout.readline())["api"]
            results = []
            for count, clients in cases:
                path = "/counts?" + urlencode([*(("counter", name) for name in COUNTERS[:count]), ("window", "24h"), ("at", at)])
                check(api, path, count)
                figures = load(api, path, clients, seconds)
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


@contextmanager
def server_process(*args: str) -> Iterator[subprocess.Popen]:
    """``python -m bench.read_api ARGS`` with moto's dummy credentials; ends when its stdin closes."""
    environment = {**os.environ, **OFFLINE_ENVIRONMENT}
    environment.pop("AWS_ENDPOINT_URL", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.read_api", *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=environment
    )
    try:
        yield process
    finally:
        process.stdin.close()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


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
    if sys.argv[1:2] == ["--moto"]:
        serve_moto()
    elif sys.argv[1:2] == ["--api"]:
        serve_api(sys.argv[2])
    else:
        print(json.dumps(measure(), indent=2))
