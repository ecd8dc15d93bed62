"""The read API and the dashboard on this machine, live, until Ctrl-C (`make serve`).

    .venv/bin/python scripts/serve.py                      # API and dashboard on http://127.0.0.1:8321
    .venv/bin/python scripts/serve.py --port 0 --shape blog --rate 5

moto's server (or DynamoDB Local, TALLY_LOCAL_BACKEND=dynamodb-local) plays DynamoDB and
DynamoDB Streams, and both tables are created
from the descriptions the stack uses. The demo's workload (--hours of history
ending now) is written and counted, then a gentle workload keeps writing
events stamped now (--rate per second) while the stream runner follows the
stream, committing each tumbling window (--window-seconds) as it closes. The
read API's own handler answers on a loopback port behind the local adapter
(`tally.local.http_adapter`): the routes the stack deploys, and the dashboard
at /. It prints

    API: http://127.0.0.1:PORT
    Dashboard: http://127.0.0.1:PORT/?counter=…

and an `export …` line that points the other scripts (query_window.py, …) at
the same tables. Settings come from the environment as for `make demo`
(TALLY_RULES, retentions, lanes, ...); --shape counts a blog's page views or
the origin's jobs by counter rules instead. Locally the API answers unsigned
requests; a SigV4-signed one is verified against the printed credentials.
Alerts of the rules (TALLY_RULES with "alerts") are delivered to a local
sink: moto's EventBridge, with a rule that sends tally's events to an SQS
queue, which serve drains and prints as they come (`alert: ALARM …`); the
scheduled evaluation (clearing, below alerts) runs once a minute. DynamoDB
Local plays no EventBridge: there serve says so and alerts stay pending.
--signed refuses unsigned requests to the signed routes, as API Gateway does.
Ctrl-C (or SIGTERM) stops the writer, commits the runner's open windows,
closes the API and the server and exits 0; a second Ctrl-C stops at once.
"""

from __future__ import annotations

import argparse
import errno
import os
import random
import shlex
import signal
import sys
import threading
import time
import uuid
from typing import Any
from urllib.parse import urlencode

from botocore.credentials import Credentials

from tally.core.api_access import ENV_DASHBOARD
from tally.core.rules import ENV_RULES
from tally.core.settings import ENV_TIME_ATTRIBUTE, Settings
from tally.core.windows import now_ms
from tally.dynamo.tables import create_tables
from tally.local.alert_sink import AlertSink
from tally.local.aws import (
    DUMMY_CREDENTIALS,
    ArgumentParser,
    LocalContext,
    MotoServer,
    local_server,
    client,
    local_handler,
    stream_arn_of,
    write_items,
)
from tally.local.cli import ScriptError, entry_point
from tally.local.delivery import DeliveryConfig
from tally.local.dynamodb_local import LoopbackBackend
from tally.local.http_adapter import LocalApi
from tally.local.stream_reader import StreamReader
from tally.local.workload import DEFAULT_COUNTERS, DEFAULT_RATE, SHAPES, Event, Shape, Workload

EVENTS_TABLE = "tally-events"
COUNTS_TABLE = "tally-counts"
DEFAULT_PORT = 8321
DEFAULT_HOURS = 24
DEFAULT_LIVE_RATE = 2.0  # events per second, over all counters
ALERT_POLL_SECONDS = 1.0
SCHEDULE_SECONDS = 60.0  # the scheduled alert evaluation's period, as the stack's schedule
SHAPE_TOTALS = {"blog": "views/all", "origin": "jobs/all"}  # the counter a shape's rules write for every item


def parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"loopback port (default {DEFAULT_PORT}; 0: any free one)")
    parser.add_argument("--hours", type=int, default=DEFAULT_HOURS, help=f"hours of history written first (default {DEFAULT_HOURS}; 0: none)")
    parser.add_argument("--rate", type=float, default=DEFAULT_LIVE_RATE, help="live events per second (default 2; 0: none)")
    parser.add_argument("--counters", nargs="+", help="counter names (with --shape: providers or pages)")
    parser.add_argument("--shape", choices=sorted(SHAPES), help="write the origin's jobs or a blog's page views, counted by rules")
    parser.add_argument("--seed", type=int, default=2019, help="workload seed (default 2019)")
    parser.add_argument("--window-seconds", type=int, default=10, help="tumbling window of the runner (default 10)")
    parser.add_argument("--signed", action="store_true", help="refuse unsigned requests to the signed routes (403), as API Gateway does")
    parser.add_argument("--batch-size", type=int, default=1000, help="records per invocation (default 1000)")
    return parser


@entry_point
def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not 0 <= args.port <= 65535:
        parser().error(f"--port must be between 0 and 65535, got {args.port}")
    if args.hours < 0 or args.rate < 0:
        parser().error("--hours and --rate must not be negative")
    try:
        config = DeliveryConfig(batch_size=args.batch_size, window_seconds=args.window_seconds)
    except ValueError as error:
        parser().error(str(error))
    shape = SHAPES[args.shape] if args.shape else None
    if shape:
        os.environ.update({ENV_RULES: shape.rules_json, ENV_TIME_ATTRIBUTE: shape.time_attribute})
    settings = Settings.from_env()  # as the handler and the read API read them
    counters = args.counters or list(shape.keys if shape else DEFAULT_COUNTERS)

    stop = threading.Event()
    stop_on_signals(stop)
    os.environ[ENV_DASHBOARD] = "true"
    api = local_api(args.port, args.signed)  # the port first: a taken one is refused before anything starts
    server = local_server()
    try:
        server.start().reset()
        os.environ.update({**server.environment(), "EVENTS_TABLE": EVENTS_TABLE, "COUNTS_TABLE": COUNTS_TABLE})
        dynamodb = client("dynamodb")
        create_tables(dynamodb, EVENTS_TABLE, COUNTS_TABLE)
        api.start()
        say(f"tables: {server.name} at {server.endpoint_url}")
        say(f"API: {api.url}")
        say(f"Dashboard: {api.url}/?{dashboard_query(counters, shape)}")
        say("export " + " ".join(f"{name}={shlex.quote(value)}" for name, value in exported(server, shape).items()))
        alerts = alert_printer(server, settings, stop)
        try:
            return run(args, config, settings, counters, shape, dynamodb, stop)
        finally:
            if alerts is not None:
                alerts.join(timeout=10)
    finally:
        api.stop()
        server.stop()


def run(
    args: argparse.Namespace,
    config: DeliveryConfig,
    settings: Settings,
    counters: list[str],
    shape: Shape | None,
    dynamodb: Any,
    stop: threading.Event,
) -> int:
    """History, then the live writer and the following runner until ``stop``; both end before this returns."""
    runner = StreamReader(
        client("dynamodbstreams"),
        stream_arn_of(dynamodb, EVENTS_TABLE),
        local_handler(COUNTS_TABLE, log_level="ERROR"),
        config=config,
        context=LocalContext(),
    )
    runner.stop = stop  # Ctrl-C ends the runner after its current invocation, open windows committed
    if args.hours:
        items = history(counters, args.hours, args.seed, shape, settings)
        write_items(dynamodb, EVENTS_TABLE, items)
        runner.run(until_idle=True, idle_polls=2, poll_interval=0.2, commit_open_windows=True)
        if not stop.is_set():
            say(f"history: {len(items):,} events of {args.hours} h written and counted ({runner.invocations} invocations)")
    writer = LiveWriter(dynamodb, counters, args.rate, args.seed, shape, settings, stop)
    writer_thread = threading.Thread(target=writer.run, name="tally-live-writer", daemon=True)
    writer_thread.start()
    if not stop.is_set():
        say(f"live: about {args.rate:g} events/s stamped now, counted every {config.window_seconds or 1} s. Ctrl-C to stop")
    runner.run(until_idle=False, poll_interval=0.5)
    writer_thread.join(timeout=10)
    say(f"stopped: {writer.written:,} live events written, {runner.stats.records:,} stream records counted in all")
    return 0


def alert_printer(server: LoopbackBackend, settings: Settings, stop: threading.Event) -> threading.Thread | None:
    """When the rules have alerts: a sink on moto's EventBridge, drained and printed, and the scheduled
    evaluation once a minute, in a thread that ends with ``stop``."""
    if not any(rule.alerts for rule in settings.counter_rules.rules):
        return None
    if not isinstance(server, MotoServer):
        say("alerts: DynamoDB Local plays no EventBridge, so alert events are not delivered here (use moto)")
        return None
    sink = AlertSink(client("events"), client("sqs"))
    say("alerts: delivered to moto's EventBridge and printed here as they come")
    thread = threading.Thread(target=print_alerts, args=(sink, stop), name="tally-alerts", daemon=True)
    thread.start()
    return thread


def print_alerts(sink: AlertSink, stop: threading.Event) -> None:
    from tally.functions import alert_schedule

    alert_schedule.scheduled_table.cache_clear()
    next_schedule = time.monotonic() + SCHEDULE_SECONDS
    while not stop.wait(ALERT_POLL_SECONDS):
        if time.monotonic() >= next_schedule:
            alert_schedule.scheduled({"id": f"serve-{now_ms() // 60_000}"}, LocalContext())
            next_schedule += SCHEDULE_SECONDS
        for detail in sink.drain():
            say(
                f"alert: {detail['state']} {detail['alert']} {detail['counter']}: {detail['total']} in "
                f"[{detail['start']}, {detail['end']}) (threshold {detail['threshold']})"
            )


class LiveWriter:
    """Writes one event stamped now at random intervals averaging 1/rate seconds, until ``stop``."""

    def __init__(
        self,
        dynamodb: Any,
        counters: list[str],
        rate: float,
        seed: int,
        shape: Shape | None,
        settings: Settings,
        stop: threading.Event,
    ) -> None:
        self.dynamodb, self.counters, self.rate, self.shape = dynamodb, counters, rate, shape
        self.settings, self.stop = settings, stop
        self.rng = random.Random(f"live-{seed}")
        self.written = 0

    def run(self) -> None:
        if self.rate <= 0:
            return
        while not self.stop.wait(min(self.rng.expovariate(self.rate), 5.0)):
            event = Event(str(uuid.UUID(int=self.rng.getrandbits(128), version=4)), self.rng.choice(self.counters), now_ms())
            item = self.shape.item(event, self.rng) if self.shape else event.item(self.settings)
            write_items(self.dynamodb, EVENTS_TABLE, [item])
            self.written += 1


def history(counters: list[str], hours: int, seed: int, shape: Shape | None, settings: Settings) -> list[dict[str, Any]]:
    workload = Workload(counters=counters, hours=hours, rate=DEFAULT_RATE, seed=seed)
    end = now_ms()
    return shape.items(workload, end) if shape else [event.item(settings) for event in workload.events(end)]


def local_api(port: int, signed: bool) -> LocalApi:
    credentials = Credentials(DUMMY_CREDENTIALS["AWS_ACCESS_KEY_ID"], DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"])
    try:
        return LocalApi(credentials=credentials, port=port, require_signature=signed)
    except OSError as error:
        if error.errno == errno.EADDRINUSE:
            raise ScriptError(f"port {port} on 127.0.0.1 is in use: choose another with --port (0: any free one)") from None
        raise


def dashboard_query(counters: list[str], shape: Shape | None) -> str:
    """The dashboard's address preselects what the workload writes: its counters, or a shape's totals."""
    chosen = [SHAPE_TOTALS[shape.name]] if shape else counters
    return urlencode([*(("counter", name) for name in chosen), ("window", "24h"), ("series", "hour")])


def exported(server: LoopbackBackend, shape: Shape | None) -> dict[str, str]:
    """What the other scripts need to read the same tables (the rules too: they say which counters sum)."""
    environment = {**server.environment(), "EVENTS_TABLE": EVENTS_TABLE, "COUNTS_TABLE": COUNTS_TABLE}
    if shape:
        environment.update({ENV_RULES: shape.rules_json, ENV_TIME_ATTRIBUTE: shape.time_attribute})
    return environment


def stop_on_signals(stop: threading.Event) -> None:
    """Ctrl-C or SIGTERM: stop gently (set ``stop``). A second Ctrl-C: stop at once."""

    def stopping(signum: int, frame: object) -> None:
        if not stop.is_set():
            say("stopping: committing open windows, closing the API and the server")
        stop.set()
        signal.signal(signal.SIGINT, signal.default_int_handler)

    signal.signal(signal.SIGINT, stopping)
    signal.signal(signal.SIGTERM, stopping)


def say(line: str) -> None:
    print(line, flush=True)


if __name__ == "__main__":
    sys.exit(main())
