"""The whole pipeline on this machine, checked against brute force (`make demo`).

moto's server on a loopback port (or Amazon's DynamoDB Local, with
TALLY_LOCAL_BACKEND=dynamodb-local) plays DynamoDB and DynamoDB Streams. Both
tables are created from the descriptions the stack uses; the origin's workload
(3 counters, 37 hours ending now, 20-100 events per hour each) plus a few bad
records is written; the stream runner feeds the stream to the Lambda handler
until idle; the rolling 24 h window, and an hour-aligned window longer than
the minute retention, are queried with both plans and compared with a count
of the raw events. Exit status 1 on any mismatch.

All events are written now, so each arrives (ApproximateCreationDateTime) now,
however old its own time. tally counts every one of them: an event counts in
its minute and hour while its minute is within the minute retention at
arrival, in its hour alone after that, and is rejected as late only once its
hour is past the hour retention (docs/design.md, "The late-arrival rule").
The brute force applies that stated rule, with each record's arrival as the
stream reports it; the one late record is an injected bad record, 100 days old.

The handler, the generator and the brute force read the same settings from
the environment (TALLY_MINUTE_RETENTION_HOURS, TALLY_COUNTER_ATTRIBUTE, ...),
so the demo checks whatever configuration it is given.

--shape origin|blog counts another table's items with counter rules instead:
the origin's jobs ({id, insertUtcTime, counterKeyPrefix, providerId, status,
amount}) or a blog's page views ({id, url, time, clientId, status, loadMs}),
three rules per item, one of them summing. Counts, sums and averages of every
counter the rules name are checked against brute force over the raw items.

--shape jobs counts a table whose items change: a dispatch system's jobs are
placed, then done or cancelled minutes later (a few reopened and done again),
some cancelled ones deleted by their owner, and jobs a day old expire by TTL
(moto has no TTL process: the demo plays it, signing each deletion as DynamoDB
does; DynamoDB Local's TTL process streams its deletions without the REMOVE event
name and the identity DynamoDB signs them with, so there TTL stays off and no
job expires). The events table streams NEW_AND_OLD_IMAGES, as the stack gives it for
such rules. Rules count placements, transitions to done (with amounts) and to
cancelled at their own times, and deletions by owners and by TTL at their
arrival; brute force replays every job's history.

--shape logins shows an alert: failed logins per IP address ({id, ip, at,
outcome}), counted by a rule whose alert fires above 20 failed logins in 10
minutes and clears at 5. A few addresses fail steadily (never 20 in 10
minutes); one fails 45 times within 4 minutes, half an hour ago. The items are
written and streamed in three phases (before, during and after the burst);
the commit of the burst raises the alarm and the scheduled evaluation that
follows (the once-a-minute function) clears it, over the 10 minutes ending
now. moto's EventBridge sends the events to an SQS queue the demo drains and
prints; each one's total is checked against brute force over its window, and
brute force over every 10-minute window says which addresses crossed.

--keep-running leaves the server and a following runner up and prints the
environment the other scripts need to use them.

--stack NAME runs the same demo on a deployed tally stack's tables instead,
found through its outputs at AWS_ENDPOINT_URL: a local server, such as the one
`make deploy-local` deploys the stack into (the handler runs in this process,
which in AWS would count beside the stack's own function).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit

from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from tally.core.amounts import text_of
from tally.core.buckets import iso_minute
from tally.local.delivery import DeliveryConfig
from tally.core.histograms import RELATIVE_ACCURACY, percentile_label
from tally.core.sketches import SPARSE_LIMIT, STANDARD_ERROR
from tally.dynamo.tables import create_tables
from tally.local.aws import (
    ArgumentParser,
    LocalContext,
    MotoServer,
    Tables,
    local_server,
    client,
    local_handler,
    region,
    scan_items,
    stream_arn_of,
    write_histories,
    write_items,
)
from tally.local.moto_fixes import expire_items
from tally.local.cli import console as make_console
from tally.local.cli import DUMMY_CREDENTIALS, ScriptError, entry_point
from tally.local.dynamodb_local import LoopbackBackend
from tally.stack_outputs import StackOutputsError, table_names_from_stack
from tally.core.plans import PlanKind
from tally.query import WindowCount
from tally.reader import Reader
from tally.core.records import Reason
from tally.core.segments import rejected_counter
from tally.core.rules import ENV_RULES, parse_rules
from tally.core.tables import events_table_for
from tally.core.settings import ENV_TIME_ATTRIBUTE, Settings
from tally.core.units import DAY_MS, HOUR_MS
from tally.local.stream_reader import StreamReader
from tally.core.windows import Window, now_ms, utc_of
from tally.local.workload import (
    DEFAULT_COUNTERS,
    DEFAULT_HOURS,
    DEMO_WINDOW_SECONDS,
    DEFAULT_RATE,
    HISTORY_SHAPES,
    LOGINS,
    SHAPES,
    Change,
    LoginsShape,
    HistoryShape,
    Shape,
    ShapedTruth,
    Workload,
    bad_items,
    brute_force_counts,
    expected_rejections,
    history_truth,
    is_late,
    shaped_truth,
)

EVENTS_TABLE = "tally-events"
COUNTS_TABLE = "tally-counts"
LOOPBACK = {"127.0.0.1", "localhost", "::1"}
REJECTION_REASONS = [reason for reason in Reason if reason.is_rejection]

console = make_console()


def parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=2019, help="workload seed (default 2019)")
    parser.add_argument("--counters", nargs="+", help="counter names (with --shape: providers or pages)")
    parser.add_argument(
        "--shape",
        choices=sorted({**SHAPES, **HISTORY_SHAPES, LOGINS.name: LOGINS}),
        help="count the origin's jobs or a blog's page views by rules, jobs that change (transitions, deletions), "
        "or failed logins watched by an alert",
    )
    parser.add_argument("--hours", type=int, default=DEFAULT_HOURS, help=f"hours of events (default {DEFAULT_HOURS})")
    parser.add_argument("--rate", nargs=2, type=int, default=list(DEFAULT_RATE), metavar=("LOW", "HIGH"))
    parser.add_argument("--bad", type=int, default=6, help="bad records to inject (default 6: one of each kind)")
    parser.add_argument("--batch-size", type=int, default=1000, help="records per invocation (default 1000)")
    parser.add_argument(
        "--window-seconds",
        type=int,
        default=DEMO_WINDOW_SECONDS,
        help=f"tumbling window, 1-900 s (default {DEMO_WINDOW_SECONDS}; the last one is waited for, as Lambda does)",
    )
    parser.add_argument("--keep-running", action="store_true", help="keep the server and a runner up afterwards")
    parser.add_argument("--stack", help="use this deployed tally stack's tables on the local server at AWS_ENDPOINT_URL")
    return parser



def say_waiting(seconds: float) -> None:
    console.print(f"   waiting {seconds:.0f} s for the last tumbling window to end: Lambda commits it then, not before")

def quiet_handler(counts_table: str) -> Callable[[dict, Any], Any]:
    """The handler with its per-record warnings off: the rejections are tallied below instead."""
    return local_handler(counts_table, log_level="ERROR")


@entry_point
def main(
    argv: list[str] | None = None,
    *,
    handler_factory: Callable[[str], Any] = quiet_handler,
    server: LoopbackBackend | None = None,
) -> int:
    """``server``: one already running (tests share one), reset and left running; else TALLY_LOCAL_BACKEND's, started."""
    args = parser().parse_args(argv)
    settings = Settings.from_env()  # as the handler reads them, so generator and brute force agree with it
    shape = {**SHAPES, **HISTORY_SHAPES, LOGINS.name: LOGINS}[args.shape] if args.shape else None
    counters = args.counters or list(shape.keys if shape else DEFAULT_COUNTERS)
    workload = Workload(counters=counters, hours=args.hours, rate=tuple(args.rate), seed=args.seed)
    config = DeliveryConfig(batch_size=args.batch_size, window_seconds=args.window_seconds)
    started = time.monotonic()
    saved_environment = dict(os.environ)
    started_here = server is None and not args.stack
    if server is None and not args.stack:
        server = local_server().start()
    try:
        if isinstance(shape, LoginsShape) and args.stack:
            raise ScriptError("--shape logins runs on the demo's own moto server, whose EventBridge it reads: drop --stack")
        if isinstance(shape, LoginsShape) and not isinstance(server, MotoServer):
            raise ScriptError(
                "--shape logins delivers alerts through moto's EventBridge, which DynamoDB Local does not play: "
                "run it on moto (unset TALLY_LOCAL_BACKEND)"
            )
        if server is not None:
            server.reset()
            os.environ.update(server.environment())
        if shape:
            os.environ.update({ENV_RULES: shape.rules_json, ENV_TIME_ATTRIBUTE: shape.time_attribute})
        if args.stack:
            tables = deployed_tables(args.stack, shape)
            dynamodb = client("dynamodb")
            console.print(f"[bold]tally local pipeline[/] — stack {args.stack} at {os.environ['AWS_ENDPOINT_URL']}")
            console.print(f"1. found {tables.events} (its stream) and {tables.counts} in the stack's outputs")
        else:
            tables = Tables(EVENTS_TABLE, COUNTS_TABLE)
            dynamodb = client("dynamodb")
            console.print(f"[bold]tally local pipeline[/] — {server.name} at {server.endpoint_url}")
            events = events_table_for(parse_rules(shape.rules_json) if shape else settings.counter_rules)
            create_tables(dynamodb, tables.events, tables.counts, events)
            console.print(
                f"1. created {tables.events} (stream {events.stream_view}) and {tables.counts} (TTL), as the stack does"
            )

        end_ms = now_ms()
        histories: list[list[Change]] = []
        if isinstance(shape, LoginsShape):
            matched = run_logins(dynamodb, tables, shape, end_ms, args.seed, handler_factory, config)
            console.print(f"finished in {time.monotonic() - started:.1f} s")
            return 0 if matched else 1
        if isinstance(shape, HistoryShape):
            histories = write_and_expire(
                dynamodb, tables, shape, shape.histories(workload, end_ms), end_ms, ttl=isinstance(server, MotoServer)
            )
            console.print(f"   counted by {len(shape.rules)} rules:")
            for rule in shape.rules:
                console.print(f"   {escape(json.dumps(rule))}")
        elif shape:
            items = shape.items(workload, end_ms)
            times = [event.ts_ms for event in workload.events(end_ms)]
            write(dynamodb, tables, items)
            console.print(
                f"2. wrote {len(items):,} {shape.name} items ({len(counters)} {shape.name} keys, {workload.hours} h "
                f"ending {iso_minute(end_ms)}, seed {workload.seed}), counted by {len(shape.rules)} rules:"
            )
            for rule in shape.rules:
                console.print(f"   {escape(json.dumps(rule))}")
        else:
            events = workload.events(end_ms)
            items = [event.item(settings) for event in events] + bad_items(args.bad, end_ms, args.seed, settings)
            write(dynamodb, tables, items)
            console.print(
                f"2. wrote {len(items) - args.bad:,} events ({len(workload.counters)} counters, {workload.hours} h "
                f"ending {iso_minute(end_ms)}, seed {workload.seed}) and {args.bad} bad records"
            )

        arrivals: dict[int, tuple[str, int]] = {}
        reader = StreamReader(
            client("dynamodbstreams"),
            tables.stream_arn or stream_arn_of(dynamodb, tables.events),
            recording_arrivals(handler_factory(tables.counts), arrivals),
            config=config,
            context=LocalContext(),
        )
        stream_started = time.monotonic()
        reader.run(until_idle=True, idle_polls=2, poll_interval=0.2, on_wait=say_waiting)
        console.print(
            f"3. stream runner: {reader.stats.records:,} records in {reader.invocations} invocations "
            f"(batch {config.batch_size}, window {config.window_seconds} s, "
            f"{reader.attempts - reader.invocations} retried) in {time.monotonic() - stream_started:.1f} s"
        )

        if isinstance(shape, HistoryShape):
            matched = verify_histories(dynamodb, tables, shape, histories, arrivals_by_item(arrivals))
        elif shape:
            matched = verify_shaped(dynamodb, tables, shape, list(zip(times, items, strict=True)), first_arrivals(arrivals))
        else:
            matched = verify(dynamodb, tables, workload.counters, first_arrivals(arrivals), settings, workload.hours)
        console.print(f"finished in {time.monotonic() - started:.1f} s")
        if args.keep_running:
            keep_running(tables, reader, shape)
        return 0 if matched else 1
    finally:
        if started_here:
            server.stop()
        os.environ.clear()
        os.environ.update(saved_environment)


def run_logins(
    dynamodb: Any,
    tables: Tables,
    shape: LoginsShape,
    end_ms: int,
    seed: int,
    handler_factory: Callable[[str], Any],
    config: DeliveryConfig,
) -> bool:
    """The logins demo: three phases through the stream, alert events as they come, then brute force."""
    from tally.functions import alert_schedule
    from tally.alerting import EVENT_DETAIL_TYPE
    from tally.local.alert_sink import AlertSink

    sink = AlertSink(client("events"), client("sqs"))
    console.print(f"2. alerts go to moto's EventBridge (default bus), a rule sends '{EVENT_DETAIL_TYPE}' events to an SQS queue")
    console.print(f"   counted by 1 rule: {escape(json.dumps(shape.rules[0]))}")
    handler = handler_factory(tables.counts)
    reader = StreamReader(
        client("dynamodbstreams"), stream_arn_of(dynamodb, tables.events), handler, config=config, context=LocalContext()
    )
    phases = shape.phases(end_ms, seed)
    delivered: list[dict[str, Any]] = []
    for number, (name, items) in enumerate(zip(("before the burst", "the burst", "after the burst"), phases), start=3):
        write(dynamodb, tables, items)
        reader.run(until_idle=True, idle_polls=2, poll_interval=0.2, commit_open_windows=True)
        console.print(f"{number}. {name}: {len(items):,} logins written and counted")
        delivered += show_alerts(sink.drain())
    alert_schedule.scheduled_table.cache_clear()
    summary = alert_schedule.scheduled({"id": f"demo-{end_ms}"}, LocalContext())
    console.print(f"6. scheduled evaluation (the once-a-minute function): {summary['crossings']} crossing(s)")
    delivered += show_alerts(sink.drain())
    return verify_logins(shape, [item for phase in phases for item in phase], delivered, end_ms)


def show_alerts(details: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for detail in details:
        colour = "red" if detail["state"] == "ALARM" else "green"
        console.print(
            f"   [bold {colour}]{detail['state']}[/] {escape(detail['alert'])} {escape(detail['counter'])}: "
            f"{detail['total']} in [{detail['start']}, {detail['end']}) (threshold {detail['threshold']})"
        )
    return details


def verify_logins(shape: LoginsShape, items: list[dict[str, Any]], delivered: list[dict[str, Any]], end_ms: int) -> bool:
    """Each event's total is brute force over its window, on the right side of its level; the addresses
    alerted are those brute force finds crossing in some 10-minute window, alarmed then cleared."""
    window_ms = shape.window_minutes * 60_000
    table = Table(title="7. alert events against brute force over their windows")
    for column in ("state", "counter", "window", "tally", "raw", "threshold", "verdict"):
        table.add_column(column)
    matched = True
    for detail in delivered:
        start, end = parse_minute(detail["start"]), parse_minute(detail["end"])
        raw = shape.failed_in(items, detail["counter"], start, end)
        side = raw > shape.threshold if detail["state"] == "ALARM" else raw <= shape.clear
        ok = raw == detail["total"] and side and end - start == window_ms
        matched &= ok
        table.add_row(
            detail["state"], escape(detail["counter"]), f"[{detail['start']}, {detail['end']})", str(detail["total"]),
            str(raw), str(detail["threshold"]), "[green]ok[/]" if ok else "[red]MISMATCH[/]",
        )
    console.print(table)
    last = end_ms // 60_000 * 60_000 + 60_000
    crossed = sorted(
        f"logins/{ip}"
        for ip in {item["ip"] for item in items}
        if any(
            shape.failed_in(items, f"logins/{ip}", end - window_ms, end) > shape.threshold
            for end in range(last - shape.minutes * 60_000, last + 1, 60_000)
        )
    )
    sequence = [(detail["counter"], detail["state"]) for detail in delivered]
    expected = [(counter, state) for counter in crossed for state in ("ALARM", "OK")]
    verdict = sorted(sequence) == sorted(expected) and len({detail["id"] for detail in delivered}) == len(delivered)
    console.print(
        f"   brute force: {', '.join(crossed) or 'no address'} crossed {shape.threshold} failed logins in "
        f"{shape.window_minutes} minutes; events: {len(delivered)} "
        + ("[green]one ALARM and one OK each[/]" if verdict else "[red]not one ALARM and one OK per crossing[/]")
    )
    return matched and verdict


def parse_minute(text: str) -> int:
    from tally.core.windows import parse_instant

    return parse_instant(text)


def deployed_tables(stack: str, shape: Shape | None) -> Tables:
    """The stack's tables, on a local server only: the demo's handler runs here, and in AWS the stack's own
    function would count the same records too."""
    endpoint = os.environ.get("AWS_ENDPOINT_URL", "")
    if urlsplit(endpoint).hostname not in LOOPBACK:
        raise ScriptError(
            f"--stack runs the demo's handler in this process: point AWS_ENDPOINT_URL at a local server holding "
            f"the stack (make deploy-local), not {endpoint or 'AWS'}"
        )
    if isinstance(shape, HistoryShape):
        raise ScriptError(f"--shape {shape.name} needs an events table streaming NEW_AND_OLD_IMAGES; the stack's streams NEW_IMAGE")
    try:
        outputs = table_names_from_stack(stack, client("cloudformation"))
    except StackOutputsError as error:
        raise ScriptError(str(error)) from None
    return Tables(outputs["EventsTableName"], outputs["CountsTableName"], outputs["EventsStreamArn"])


def write(dynamodb: Any, tables: Tables, items: list[dict[str, Any]]) -> None:
    columns = (TextColumn("   writing"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("write", total=len(items))
        write_items(dynamodb, tables.events, items, on_written=lambda n: progress.advance(task, n))


def write_and_expire(
    dynamodb: Any, tables: Tables, shape: HistoryShape, histories: list[list[Change]], end_ms: int, *, ttl: bool
) -> list[list[Change]]:
    """The producers' changes, each item's in order, then (``ttl``) DynamoDB's TTL process as of ``end_ms``,
    which must delete exactly the items the histories expire. Returns the histories as written: without
    ``ttl``, TTL stays off the events table and the histories' TTL deletions are left out."""
    if ttl:
        dynamodb.update_time_to_live(
            TableName=tables.events, TimeToLiveSpecification={"Enabled": True, "AttributeName": shape.ttl_attribute}
        )
    else:
        histories = [[change for change in history if not change.by_ttl] for history in histories]
    kinds = Counter((change.kind, change.by_ttl) for history in histories for change in history)
    columns = (TextColumn("   writing"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("write", total=sum(kinds.values()) - kinds["REMOVE", True])
        write_histories(dynamodb, tables.events, histories, on_written=lambda n: progress.advance(task, n))
    written = (
        f"2. wrote the histories of {len(histories):,} {shape.name} ({kinds['INSERT', False]:,} placed, "
        f"{kinds['MODIFY', False]:,} updates to done, cancelled or reopened, {kinds['REMOVE', False]:,} deleted "
        "by their owner)"
    )
    if not ttl:
        console.print(
            f"{written}; TTL is off: DynamoDB Local streams its TTL deletions without the REMOVE event name and "
            "the identity DynamoDB signs them with, so no job expires here"
        )
        return histories
    expired = expire_items(tables.events, end_ms / 1000, region())
    if len(expired) != kinds["REMOVE", True]:
        raise RuntimeError(f"the TTL process deleted {len(expired)} items, the histories expire {kinds['REMOVE', True]}")
    console.print(
        f"{written}; the TTL process deleted {len(expired):,} whose {shape.ttl_attribute} had passed at "
        f"{iso_minute(end_ms)}"
    )
    return histories


def recording_arrivals(
    handler: Callable[[dict, Any], Any], arrivals: dict[int, tuple[str, int]]
) -> Callable[[dict, Any], Any]:
    """The handler, noting when each stream record arrived (for the brute force's late rule and for rules
    that count at arrival), keyed by sequence number so that a retried invocation notes nothing twice."""

    def handle(event: dict, context: Any) -> Any:
        for record in event["Records"]:
            stream = record["dynamodb"]
            arrival = int(stream["ApproximateCreationDateTime"] * 1000)
            arrivals[int(stream["SequenceNumber"])] = (stream["Keys"]["id"]["S"], arrival)
        return handler(event, context)

    return handle


def arrivals_by_item(arrivals: dict[int, tuple[str, int]]) -> dict[str, list[int]]:
    """Item id -> the arrivals of its records in stream order (one item's records stay in order)."""
    by_item: dict[str, list[int]] = {}
    for _, (item_id, arrival) in sorted(arrivals.items()):
        by_item.setdefault(item_id, []).append(arrival)
    return by_item


def first_arrivals(arrivals: dict[int, tuple[str, int]]) -> dict[str, int]:
    """Item id -> the arrival of its insert, for workloads that write every item once."""
    return {item_id: times[0] for item_id, times in arrivals_by_item(arrivals).items()}


def verify(dynamodb: Any, tables: Tables, counters: list[str], arrivals: dict[str, int], settings: Settings, hours: int) -> bool:
    """Both plans against brute force: the 24 h window ending now, a long hour-aligned one, the rejections."""
    table = Reader(tables.counts, client=dynamodb, settings=settings)
    now = now_ms()
    items = scan_items(dynamodb, tables.events)
    matched = compare_window(table, items, counters, arrivals, now, Window.ending(now), "4. rolling 24 h window")

    # Whole hours, longer than the minute retention: read as hour buckets where the minutes have expired.
    length_h = max(settings.minute_retention_ms // HOUR_MS + 1, hours + 1)
    long_window = Window.ending(now - now % HOUR_MS, length_h * HOUR_MS)
    title = f"5. {length_h} h window to the last whole hour (minutes are kept {settings.minute_retention_ms // HOUR_MS} h)"
    matched &= compare_window(table, items, counters, arrivals, now, long_window, title)
    console.print(
        "   raw: events whose time is in the window (a scan of "
        f"{tables.events}); late: of those, events whose hour was past the hour retention "
        f"({settings.hour_retention_ms // DAY_MS} d) when their record reached the stream."
    )

    want = expected_rejections(items, arrivals, settings)
    got = {r.counter: r.total for r in table.count_many([rejected_counter(x) for x in REJECTION_REASONS], at=utc_of(now))}
    rejections = Table(title="6. rejections: tally's own #rejected#<reason> counters (by arrival) vs expected")
    for column in ("reason", "counted by tally", "expected", ""):
        rejections.add_column(column, justify="left" if column == "reason" else "right")
    for reason in REJECTION_REASONS:
        counted = got[rejected_counter(reason)]
        ok = counted == want[reason]
        matched &= ok
        if counted or want[reason]:
            verdict = "[green]MATCH" if ok else "[red]MISMATCH"
            rejections.add_row(reason.value, f"{counted:,}", f"{want[reason]:,}", verdict)
    console.print(rejections)
    workload = [item for item in items if "bad" not in item]
    late_events = expected_rejections(workload, arrivals, settings)[Reason.LATE_EVENT]
    console.print(
        f"   workload events rejected as late: {late_events:,}. All arrived now, up to {hours} h after their own time; "
        "each counts in its minute and hour, or in its hour alone once its minute is past the minute retention."
    )

    if matched:
        console.print("[bold green]VERDICT: MATCH[/] — both plans equal the brute-force count for every counter")
    else:
        console.print("[bold red]VERDICT: MISMATCH[/] — see the rows marked above")
    return matched


def compare_window(
    table: Reader,
    items: list[dict[str, Any]],
    counters: list[str],
    arrivals: dict[str, int],
    now: int,
    window: Window,
    title: str,
) -> bool:
    """One window, every counter, both plans against the brute-force count; prints a table."""
    brute = brute_force_counts(items, counters, window, arrivals_ms=arrivals, settings=table.settings)
    plans = by_plan(table, counters, window)
    counts = Table(title=escape(f"{title} {window}"))
    for column in ("counter", "raw in window", "late", "expected", "batch plan", "range plan", ""):
        counts.add_column(column, justify="left" if column == "counter" else "right")
    matched = True
    for counter in counters:
        expected = brute[counter]["expected"]
        batch, ranged = plans[PlanKind.BATCH][counter], plans[PlanKind.RANGE][counter]
        ok = batch.total == ranged.total == expected
        matched &= ok
        counts.add_row(
            counter,
            f"{brute[counter]['in_window']:,}",
            f"{brute[counter]['late']:,}",
            f"{expected:,}",
            f"{batch.total:,}",
            f"{ranged.total:,}",
            "[green]MATCH" if ok else "[red]MISMATCH",
        )
    console.print(counts)
    batch, ranged = plans[PlanKind.BATCH][counters[0]], plans[PlanKind.RANGE][counters[0]]
    console.print(
        f"   batch plan: {batch.keys} keys per counter, {batch.requests} BatchGetItem request(s) in all; "
        f"range plan: {ranged.requests} Query request(s) per counter."
    )
    return matched


def verify_shaped(dynamodb: Any, tables: Tables, shape: Shape, items: list[tuple[int, dict[str, Any]]], arrivals: dict[str, int]) -> bool:
    """Count, sum and average of every counter the shape's rules name, both plans against brute force."""
    settings = Settings.from_env()
    table = Reader(tables.counts, client=dynamodb, settings=settings)
    now = now_ms()
    window = Window.ending(now)
    truth = shaped_truth(shape, items, window, arrivals, settings)
    matched = compare_shaped(table, truth, window, now, "4. rolling 24 h window")
    late = sum(1 for ts, item in items if is_late(ts, arrivals.get(item["id"], ts), settings))
    counted = table.count(rejected_counter(Reason.LATE_EVENT), at=utc_of(now)).total
    ok = counted == late
    matched &= ok
    console.print(
        f"5. rejections: {counted:,} records counted as late by tally, {late:,} expected "
        f"(one per record, however many rules match it) {'[green]MATCH' if ok else '[red]MISMATCH'}"
    )
    if truth.distinct:  # and the last hour, whose pages have few enough visitors for the sketches to be exact
        hour = Window.ending(now, HOUR_MS)
        matched &= verify_distinct(table, shaped_truth(shape, items, hour, arrivals, settings), hour)
    quantiles = ", quantiles are within 1 % of it" if truth.values else ""
    distinct = ", distinct counts within 3 standard errors (exact where the sketches are)" if truth.distinct else ""
    return verdict(matched, f"counts, sums and averages equal brute force by both plans{quantiles}{distinct}")


def verify_histories(
    dynamodb: Any, tables: Tables, shape: HistoryShape, histories: list[list[Change]], arrivals: dict[str, list[int]]
) -> bool:
    """Every counter the jobs' rules name, in the 24 h window and in one of 49 whole hours, both plans
    against brute force over the replayed histories; and no record rejected."""
    settings = Settings.from_env()
    table = Reader(tables.counts, client=dynamodb, settings=settings)
    now = now_ms()
    window = Window.ending(now)
    matched = compare_shaped(
        table, history_truth(shape, histories, arrivals, window, settings), window, now, "4. rolling 24 h window"
    )
    long_window = Window.ending(now - now % HOUR_MS, 49 * HOUR_MS)
    matched &= compare_shaped(
        table,
        history_truth(shape, histories, arrivals, long_window, settings),
        long_window,
        now,
        "5. 49 h window to the last whole hour",
    )
    reasons = [rejected_counter(reason) for reason in REJECTION_REASONS]
    rejected = {r.counter: r.total for r in table.count_many(reasons, at=utc_of(now)) if r.total}
    ok = not rejected
    matched &= ok
    console.print(
        f"6. rejections: {sum(rejected.values()):,} records rejected, 0 expected "
        f"{'[green]MATCH' if ok else '[red]MISMATCH ' + escape(str(rejected))}"
    )
    transitions = sum(1 for history in histories for c in history if c.kind == "MODIFY")
    console.print(
        f"   {sum(map(len, histories)):,} records: done and cancelled count once per transition into the state "
        f"(a reopened job done again counts twice), not on its {transitions:,} updates; "
        "deletions count at their arrival."
    )
    return verdict(matched, "transitions and deletions equal brute force by both plans")


def by_plan(table: Reader, counters: list[str], window: Window) -> dict[PlanKind, dict[str, WindowCount]]:
    """Every counter's answer for one window by each plan, strongly consistent."""
    length, at = timedelta(minutes=window.minutes), utc_of(window.end_ms)
    return {
        plan: {r.counter: r for r in table.count_many(counters, window=length, at=at, plan=plan, consistent=True)}
        for plan in PlanKind
    }


def compare_shaped(table: Reader, truth: ShapedTruth, window: Window, now: int, title: str) -> bool:
    """Count, sum and average of every counter in ``truth``, both plans against it, for one window."""
    counters = sorted(truth.counters)
    plans = by_plan(table, counters, window)
    table_view = Table(title=escape(f"{title} {window}: counters named by the rules"))
    for column in ("counter", "raw in window", "late", "expected", "batch", "range", "sum", "average", ""):
        table_view.add_column(column, justify="left" if column == "counter" else "right")
    matched = True
    for counter in counters:
        batch, ranged = plans[PlanKind.BATCH][counter], plans[PlanKind.RANGE][counter]
        expected_sum = truth.sums.get(counter)
        ok = batch.total == ranged.total == truth.expected[counter]
        ok &= batch.sum == ranged.sum == expected_sum
        ok &= batch.average == ranged.average == truth.average(counter)
        matched &= ok
        table_view.add_row(
            escape(counter),
            f"{truth.in_window[counter]:,}",
            f"{truth.late[counter]:,}",
            f"{truth.expected[counter]:,}",
            f"{batch.total:,}",
            f"{ranged.total:,}",
            text_of(batch.sum) or "",
            f"{batch.average:.2f}" if batch.average is not None else "",
            "[green]MATCH" if ok else "[red]MISMATCH",
        )
    console.print(table_view)
    console.print(
        "   expected: events in the window that are not late, by the rules restated by hand; sum and average "
        "(exact decimals; the average shown to 2 places) for summing counters, checked in full for both plans."
    )
    if truth.values:
        matched &= verify_quantiles(truth, plans, window)
    if truth.distinct:
        matched &= verify_distinct(table, truth, window)
    return matched


def verify_distinct(table: Reader, truth: ShapedTruth, window: Window) -> bool:
    """Distinct values of every distinct counter in one window: both plans alike, exact while the sketches are,
    else within 3 standard errors of brute force."""
    counters = sorted(truth.distinct)
    plans = by_plan(table, counters, window)
    view = Table(title=escape(f"   distinct values in the window {window}: tally vs brute force"))
    for column in ("counter", "brute force", "batch", "range", "exact", "error", "in std errors", ""):
        view.add_column(column, justify="left" if column == "counter" else "right")
    matched = _distinct_rows(view, truth, plans)
    console.print(view)
    console.print(
        f"   tally counts a window of up to {SPARSE_LIMIT} distinct values exactly, estimates beyond by HyperLogLog "
        f"(4,096 registers, standard error {STANDARD_ERROR:.3%}); both plans read the same disjoint buckets."
    )
    return matched


def _distinct_rows(view: Table, truth: ShapedTruth, plans: dict[PlanKind, dict[str, WindowCount]]) -> bool:
    matched = True
    for counter in sorted(truth.distinct):
        batch, ranged = plans[PlanKind.BATCH][counter], plans[PlanKind.RANGE][counter]
        exact = len(truth.distinct[counter])
        answer = batch.distinct
        ok = answer is not None and answer == ranged.distinct
        error = (answer - exact) / exact if ok and exact else 0.0
        if ok and batch.sketch.exact:
            ok = answer == exact
        elif ok:
            ok = abs(error) <= 3 * STANDARD_ERROR
        matched &= ok
        view.add_row(
            escape(counter),
            f"{exact:,}",
            f"{answer:,}" if answer is not None else "—",
            f"{ranged.distinct:,}" if ranged.distinct is not None else "—",
            "yes" if batch.sketch is not None and batch.sketch.exact else "no",
            f"{error:+.2%}",
            f"{error / STANDARD_ERROR:+.2f}",
            "[green]MATCH" if ok else "[red]MISMATCH",
        )
    return matched


def verdict(matched: bool, what: str) -> bool:
    if matched:
        console.print(f"[bold green]VERDICT: MATCH[/] — {what}")
    else:
        console.print("[bold red]VERDICT: MISMATCH[/] — see the rows marked above")
    return matched


DEMO_QUANTILES = ("0.5", "0.9", "0.99")


def verify_quantiles(truth: ShapedTruth, plans: dict[PlanKind, dict[str, WindowCount]], window: Window) -> bool:
    """p50, p90 and p99 of every histogram counter: both plans alike, and within 1 % of brute force."""
    view = Table(title=escape(f"   quantiles in the window {window}: tally (both plans) vs brute force"))
    for column in ("counter", "values", *map(percentile_label, DEMO_QUANTILES), "largest error", ""):
        view.add_column(column, justify="left" if column == "counter" else "right")
    matched = True
    for counter in sorted(truth.values):
        batch, ranged = plans[PlanKind.BATCH][counter].histogram, plans[PlanKind.RANGE][counter].histogram
        ok = batch is not None and ranged is not None and batch.total == ranged.total == len(truth.values[counter])
        cells, worst = [], Decimal(0)
        for q in DEMO_QUANTILES:
            answer, exact = (batch.quantile(q) if batch else None), truth.quantile(counter, Decimal(q))
            ok &= ranged is not None and answer == ranged.quantile(q)
            if exact is None or answer is None:
                ok &= exact is None and answer is None
                cells.append("—")
                continue
            error = abs(answer - exact) / abs(exact) if exact else abs(answer)
            worst = max(worst, error)
            ok &= error <= RELATIVE_ACCURACY
            cells.append(f"{text_of(answer)} ({exact})")
        matched &= ok
        view.add_row(
            escape(counter),
            f"{len(truth.values[counter]):,}",
            *cells,
            f"{worst:.3%}",
            "[green]MATCH" if ok else "[red]MISMATCH",
        )
    console.print(view)
    console.print(
        "   each cell: tally's answer from the buckets' histogram bins (the same by both plans), and in brackets "
        "the value of rank ⌈q·n⌉ among the raw values; tally promises 1 %."
    )
    return matched


def keep_running(tables: Tables, reader: StreamReader, shape: Shape | None) -> None:
    """Print how to reach the server (and the shape's rules the runner counts with), then follow the stream until Ctrl-C."""
    names = (*DUMMY_CREDENTIALS, "AWS_ENDPOINT_URL", "AWS_REGION", "AWS_DEFAULT_REGION")
    server = {name: os.environ[name] for name in names if name in os.environ}
    environment = {**server, "EVENTS_TABLE": tables.events, "COUNTS_TABLE": tables.counts}
    if shape:
        environment |= {ENV_TIME_ATTRIBUTE: shape.time_attribute, ENV_RULES: shape.rules_json}
    console.print("\nServer and runner keep running. In another shell:")
    print("export " + " ".join(f"{name}={shlex.quote(value)}" for name, value in environment.items()), flush=True)
    example = f"--shape {shape.name} --hours 1" if shape else "--hours 1"
    # A shape's first constant counter (jobs/all, views/all) always holds its items.
    counter = next(rule["counter"] for rule in shape.rules if "{" not in rule["counter"]) if shape else "page-views"
    console.print(
        f"then e.g. [bold].venv/bin/python scripts/generate_events.py {example}[/] and "
        f"[bold].venv/bin/python scripts/query_window.py {counter}[/]. Ctrl-C to stop."
    )

    def interrupted(signum: int, frame: object) -> None:
        reader.stop.set()  # the current invocation finishes, open windows are committed
        signal.signal(signal.SIGINT, signal.default_int_handler)

    signal.signal(signal.SIGINT, interrupted)
    reader.run(until_idle=False, poll_interval=1.0)
    console.print(f"stopped: {reader.stats.records:,} records read in all")


if __name__ == "__main__":
    sys.exit(main())
