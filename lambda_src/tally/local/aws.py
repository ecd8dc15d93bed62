"""Plumbing shared by the scripts: AWS clients, table names, moto's server, the in-process handler.

Configuration follows boto3's own conventions, so the scripts point at moto or
at a real account the same way: ``AWS_ENDPOINT_URL`` for the endpoint,
``AWS_REGION``/``AWS_DEFAULT_REGION`` for the region, the usual credential chain.
Table names come from flags, else ``EVENTS_TABLE``/``COUNTS_TABLE``, else a
deployed stack's outputs (``--stack``), else the defaults in tally.core.settings.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import urllib.request
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import boto3
from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.config import Config

from tally.local import moto_fixes
from tally.local.dynamodb_local import BACKENDS, ENV_BACKEND, DynamoDBLocalServer, LoopbackBackend
from tally.local.cli import DEFAULT_REGION, DUMMY_CREDENTIALS, ScriptError, preflight, region, require_table
from tally.core.retry import Backoff
from tally.dynamo.calls import batch_write
from tally.core.settings import ENV_COUNTS_TABLE, ENV_EVENTS_TABLE, Settings

# Everything an in-process moto run needs from the environment (tests, benchmarks):
# Streams clients answer DescribeStream only with account-id endpoints off.
OFFLINE_ENVIRONMENT = {
    **DUMMY_CREDENTIALS,
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": DEFAULT_REGION,
    "AWS_REGION": DEFAULT_REGION,
    "AWS_ACCOUNT_ID_ENDPOINT_MODE": "disabled",
}

_serializer = TypeSerializer()
_deserializer = TypeDeserializer()


class ArgumentParser(argparse.ArgumentParser):
    """argparse for the scripts, but a bad argument is one line on stderr (and exit status 2).

    argparse prints the whole usage before its error; ``--help`` still shows it.
    """

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def client(service: str, endpoint_url: str | None = None, connections: int = 10) -> Any:
    """A boto3 client with standard retries; the endpoint defaults to AWS_ENDPOINT_URL (boto3 reads it).

    S3 addresses buckets by path, which a loopback endpoint (moto's server) needs and AWS accepts.
    ``connections``: requests in flight at once (boto3's default pool of 10; more for a caller's threads).
    Refuses (tally.local.cli.ScriptError) when nothing answers at the endpoint or
    no credentials exist for AWS, rather than let boto3 retry for a minute.
    """
    preflight(endpoint_url)
    return boto3.client(
        service,
        region_name=region(),
        endpoint_url=endpoint_url,
        config=Config(
            retries={"mode": "standard", "max_attempts": 8}, s3={"addressing_style": "path"}, max_pool_connections=connections
        ),
    )


@dataclass(frozen=True)
class Tables:
    events: str
    counts: str
    stream_arn: str | None = None  # known from a stack's outputs; else read from the events table


def add_table_arguments(parser: argparse.ArgumentParser, *, events: bool = True, counts: bool = True) -> None:
    group = parser.add_argument_group("tables (default: flags, then EVENTS_TABLE/COUNTS_TABLE, then tally-*)")
    if events:
        group.add_argument("--table", "--events-table", dest="events_table", help="events table name")
    if counts:
        group.add_argument("--counts-table", help="counts table name")
    group.add_argument("--stack", help="read the table names from this deployed tally stack's outputs")


def resolve_tables(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> Tables:
    """Table names from the command line, the environment, or a stack's outputs."""
    env = os.environ if env is None else env
    defaults = Settings()
    if getattr(args, "stack", None):
        from tally.stack_outputs import table_names_from_stack

        outputs = table_names_from_stack(args.stack, client("cloudformation"))
        return Tables(outputs["EventsTableName"], outputs["CountsTableName"], outputs["EventsStreamArn"])
    return Tables(
        events=getattr(args, "events_table", None) or env.get(ENV_EVENTS_TABLE) or defaults.events_table,
        counts=getattr(args, "counts_table", None) or env.get(ENV_COUNTS_TABLE) or defaults.counts_table,
    )


def stream_arn_of(dynamodb_client: Any, events_table: str) -> str:
    arn = require_table(dynamodb_client, events_table, "--table or EVENTS_TABLE").get("LatestStreamArn")
    if not arn:
        raise ScriptError(f"table {events_table!r} has no stream (tally needs a NEW_IMAGE stream)")
    return arn


def write_items(
    dynamodb_client: Any,
    table: str,
    items: Sequence[Mapping[str, Any]],
    *,
    backoff: Callable[[], Backoff] = Backoff,
    on_written: Callable[[int], None] | None = None,
) -> int:
    """Put items with BatchWriteItem (``dynamo.calls.batch_write``): unprocessed items are retried with backoff, never dropped."""
    requests = [{"PutRequest": {"Item": serialize(item)}} for item in items]
    return batch_write(dynamodb_client, table, requests, backoff=backoff, on_written=on_written)


def delete_items(
    dynamodb_client: Any,
    table: str,
    keys: Sequence[Mapping[str, Any]],
    *,
    backoff: Callable[[], Backoff] = Backoff,
    on_written: Callable[[int], None] | None = None,
) -> int:
    """Delete items by their keys (plain values), batched and retried as ``write_items`` does."""
    requests = [{"DeleteRequest": {"Key": serialize(key)}} for key in keys]
    return batch_write(dynamodb_client, table, requests, backoff=backoff, on_written=on_written)


def write_histories(
    dynamodb_client: Any,
    table: str,
    histories: Sequence[Sequence[Any]],
    *,
    on_written: Callable[[int], None] | None = None,
) -> int:
    """The producers' changes of each item (``workload.Change``), in order: every item's k-th change goes
    in the k-th round of batches, a put of its new image or the deletion of its key. Deletions by TTL
    are DynamoDB's to make, and left out."""
    by_producer = [[change for change in history if not change.by_ttl] for history in histories]
    written = 0
    for index in range(max(map(len, by_producer), default=0)):
        changes = [history[index] for history in by_producer if len(history) > index]
        puts = [change.new for change in changes if change.new is not None]
        written += write_items(dynamodb_client, table, puts, on_written=on_written)
        deletions = [change.key for change in changes if change.new is None]
        written += delete_items(dynamodb_client, table, deletions, on_written=on_written)
    return written


def scan_items(dynamodb_client: Any, table: str) -> list[dict[str, Any]]:
    """Every item of a table as plain values (numbers as Decimal), all pages, strongly consistent."""
    items = []
    for page in dynamodb_client.get_paginator("scan").paginate(TableName=table, ConsistentRead=True):
        items.extend({name: _deserializer.deserialize(value) for name, value in item.items()} for item in page["Items"])
    return items


def serialize(item: Mapping[str, Any]) -> dict[str, Any]:
    return {name: _serializer.serialize(value) for name, value in item.items()}


class _CurrentStderr:
    """sys.stderr as it is at each write: a redirection made later still receives the handler's logs."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


class LocalContext:
    """The attributes Powertools reads from Lambda's context object, for in-process invocations."""

    function_name = "tally-local-runner"
    function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:local:000000000000:function:tally-local-runner"
    memory_limit_in_mb = 1024
    aws_request_id = "local"
    log_group_name = "local"
    log_stream_name = "local"

    @staticmethod
    def get_remaining_time_in_millis() -> int:
        return 900_000


def local_handler(counts_table: str, log_level: str = "WARNING") -> Callable[[dict, Any], dict]:
    """The stream function's handler (``tally.functions.stream_handler``), run in this process against ``counts_table``.

    The handler reads its table from the environment once and caches its
    client, so the environment is set first and the cache cleared (the
    endpoint may have changed since); its cold start, which publishes the
    settings it counts with, happens here. Metrics are off: they are CloudWatch's.
    Its log lines go to stderr, leaving stdout to what the script reports.
    """
    os.environ[ENV_COUNTS_TABLE] = counts_table
    os.environ.setdefault("AWS_DEFAULT_REGION", region())  # the handler's client relies on boto3's own lookup
    os.environ["POWERTOOLS_METRICS_DISABLED"] = "true"
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", log_level)
    warnings.filterwarnings("ignore", message="No application metrics to publish", category=UserWarning)
    import tally.functions.stream_handler as stream_handler

    stream_handler.logger.setLevel(log_level)
    stream_handler.logger.registered_handler.setStream(_CurrentStderr())
    stream_handler.counts_table.cache_clear()
    stream_handler.counts_table()  # a cold start: publishes the settings before the first record, as runners start

    def handler(event: dict, context: Any) -> dict:
        """The handler, its metric values dropped after each invocation: with metrics off Powertools keeps them,
        and prints them all to stdout once a metric holds 100 values."""
        try:
            return stream_handler.handler(event, context)
        finally:
            stream_handler.metrics.clear_metrics()

    return handler


class MotoServer(LoopbackBackend):
    """moto's DynamoDB and DynamoDB Streams on a loopback port (0: a free one), in a background thread."""

    name = "moto's server"

    def __init__(self, port: int = 0) -> None:
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one access-log line per request otherwise
        moto_fixes.install()
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        self.endpoint_url = ""

    def start(self) -> MotoServer:
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint_url = f"http://{host}:{port}"
        return self

    def stop(self) -> None:
        self._server.stop()

    def reset(self) -> None:
        """Forget every table: moto keeps its state per process, not per server."""
        request = urllib.request.Request(f"{self.endpoint_url}/moto-api/reset", method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()



def local_server() -> LoopbackBackend:
    """The local backend ``TALLY_LOCAL_BACKEND`` names: moto's server (``moto``, the default) or Amazon's
    DynamoDB Local (``dynamodb-local``), not started yet."""
    backend = os.environ.get(ENV_BACKEND, "") or "moto"
    if backend == "moto":
        return MotoServer()
    if backend == "dynamodb-local":
        return DynamoDBLocalServer()
    raise ScriptError(f"{ENV_BACKEND}={backend}: expected one of {', '.join(BACKENDS)}")
