"""Adoption on moto's server: history counted from an export, the rest by the stream, each event once."""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections import Counter

import pytest
from script_support import load_script
from sweeps import sweep

from tally.core.buckets import buckets_of, iso_second
from tally.core.plans import PlanKind
from tally.core.records import Reason
from tally.core.segments import rejected_counter
from tally.core.settings import Settings
from tally.core.units import HOUR_MS, MINUTE_MS
from tally.core.windows import Window, now_ms
from tally.dynamo.counts_table import CountsTable
from tally import exports
from tally.local.aws import LocalContext, client, local_handler, stream_arn_of, write_items
from tally.local.delivery import DeliveryConfig
from tally.local.stream_reader import StreamReader
from tally.local import state_machine
from tally.local.workload import BAD_KINDS, Workload, bad_items, brute_force_counts
from tally.parallel_backfill import summary_from_json
from tally.query import count_windows

pytestmark = [pytest.mark.server, pytest.mark.usefixtures("fresh_handler_cache")]

backfill = load_script("backfill")

COUNTERS = ["orders", "refunds"]


class Interrupted(Exception):
    """Stands for Ctrl-C or a lost connection in the middle of a backfill."""


class FailingAfter:
    """A DynamoDB client whose bucket updates stop going through after ``allowed`` of them."""

    def __init__(self, wrapped, allowed: int) -> None:
        self._wrapped = wrapped
        self.allowed = allowed

    def update_item(self, **kwargs):
        if self.allowed == 0:
            raise Interrupted("connection lost")
        self.allowed -= 1
        return self._wrapped.update_item(**kwargs)

    def __getattr__(self, name):
        return getattr(self._wrapped, name)


def wait_for(instant_ms: int) -> None:
    while now_ms() < instant_ms:
        time.sleep(0.05)


def every_bucket(dynamodb, counts_table: str, counters: list[str]) -> dict[tuple[str, str], int]:
    found = {}
    for counter in counters:
        for page in dynamodb.get_paginator("query").paginate(
            TableName=counts_table,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": counter}},
            ConsistentRead=True,
        ):
            found.update({(counter, item["sk"]["S"]): int(item["count"]["N"]) for item in page["Items"]})
    return found


def test_history_from_an_export_and_the_live_stream_count_every_event_once(tables, monkeypatch):
    dynamodb, s3 = client("dynamodb"), client("s3")
    bucket = f"exports-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)

    # History: 20 hours of events (inside the late limit at the cutoff under any acceptance rule), some bad items.
    started = now_ms()
    history = Workload(counters=COUNTERS, hours=20, rate=(15, 30), seed=3).events(started - 2 * MINUTE_MS)
    bad = bad_items(6, started, seed=3)
    write_items(dynamodb, tables.events, [event.item() for event in history] + bad)

    # moto exports the table as it is when asked (it ignores ExportTime): ask at the cutoff, before live writes.
    count_from = (now_ms() // 1000 + 1) * 1000
    table_arn = dynamodb.describe_table(TableName=tables.events)["Table"]["TableArn"]
    export = exports.start_export(dynamodb, table_arn, bucket, "orders-backfill", count_from)
    exports.wait_until_done(dynamodb, export.arn, poll_seconds=0.05)
    wait_for(count_from)

    # Live: events of the last hour written after the cutoff; the stream counts these and skips the history.
    live = Workload(counters=COUNTERS, hours=1, rate=(20, 40), seed=4).events(now_ms())
    write_items(dynamodb, tables.events, [event.item() for event in live])
    monkeypatch.setenv("TALLY_COUNT_FROM", str(count_from // 1000))
    reader = StreamReader(
        client("dynamodbstreams"),
        stream_arn_of(dynamodb, tables.events),
        local_handler(tables.counts, log_level="ERROR"),
        config=DeliveryConfig(batch_size=100, window_seconds=60),
        context=LocalContext(),
    )
    reader.run(until_idle=True, idle_polls=1, poll_interval=0, commit_open_windows=True)
    assert reader.stats.records == len(history) + len(bad) + len(live)

    # The backfill, cut off in the middle of its second segment, then run again to the end.
    monkeypatch.setattr("tally.backfill.CHUNK_ITEMS", 250)
    monkeypatch.setattr("tally.backfill.BACKFILL_SEGMENT_ITEMS", 300)  # several segments
    settings = Settings(count_from_ms=count_from)
    cut_short = CountsTable(FailingAfter(dynamodb, allowed=450), tables.counts, settings, workers=1)
    with pytest.raises(Interrupted):
        backfill.count_export(s3, exports.describe(dynamodb, export.arn), cut_short, settings, backfill.WriteRateLimit(1e9), backfill.HistoryScope(count_from))
    assert sum(every_bucket(dynamodb, tables.counts, COUNTERS).values()) > 0  # something had landed

    adopted = []  # the days the export made complete, recorded once the whole commit has finished
    monkeypatch.setattr(backfill, "record_adoption", lambda _client, table, _settings, at: adopted.append((table, at)))
    resumed = backfill.run(backfill.parser().parse_args(["--export-arn", export.arn, "--count-from", str(count_from // 1000), "--max-wcu", "1000000"]))
    assert adopted == [(tables.counts, count_from)]

    assert resumed.updates_already_applied == 450
    assert resumed.items == len(history) + len(bad)
    assert resumed.counted == Counter(event.counter for event in history)
    assert resumed.rejected == Counter(BAD_KINDS.values())

    # Every bucket equals brute force over all events, history and live alike.
    expected: Counter[tuple[str, str]] = Counter()
    for event in history + live:
        for bucket_ in buckets_of(event.ts_ms):
            expected[(event.counter, bucket_.sort_key)] += 1
    assert every_bucket(dynamodb, tables.counts, COUNTERS) == dict(expected)

    # And so does every window, by both plans.
    counts = CountsTable(dynamodb, tables.counts, Settings())
    items = [event.item() for event in history + live]
    now = now_ms()
    for at_ms in range(now, now - 22 * HOUR_MS, -127 * MINUTE_MS):  # buckets equal: windows are spot checks
        for length_ms in (24 * HOUR_MS, 90 * MINUTE_MS):
            want = brute_force_counts(items, COUNTERS, Window.ending(at_ms, length_ms))
            for plan in PlanKind:
                got = count_windows(counts, COUNTERS, length_ms=length_ms, at_ms=at_ms, plan=plan, consistent=True, now=now)
                assert {r.counter: r.total for r in got} == {c: want[c]["expected"] for c in COUNTERS}

    # Bad history is rejected once, at the cutoff, like a bad stream record arriving then.
    (rejected,) = count_windows(counts, [rejected_counter(Reason.LATE_EVENT)], consistent=True, now=now)
    assert rejected.total == 1


def test_another_export_of_the_same_instant_is_refused(tables, capsys):
    dynamodb, s3 = client("dynamodb"), client("s3")
    bucket = f"exports-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    write_items(dynamodb, tables.events, [event.item() for event in Workload(counters=COUNTERS, hours=1, seed=5).events(now_ms())])
    count_from = str(now_ms() // 1000)
    table_arn = dynamodb.describe_table(TableName=tables.events)["Table"]["TableArn"]
    arns = [exports.start_export(dynamodb, table_arn, bucket, f"p{n}", int(count_from) * 1000).arn for n in (1, 2)]

    assert backfill.main(["--export-arn", arns[0], "--count-from", count_from, "--poll-seconds", "0.05"]) == 0
    assert backfill.main(["--export-arn", arns[0], "--count-from", count_from, "--poll-seconds", "0.05"]) == 0
    capsys.readouterr()
    assert backfill.main(["--export-arn", arns[1], "--count-from", count_from, "--poll-seconds", "0.05"]) == 2

    error = capsys.readouterr().err
    assert error.count("\n") == 1 and arns[0] in error and "twice" in error

    # A new export of that history is refused before it is started (and billed), naming the one to resume.
    assert backfill.main(["--export-to", f"s3://{bucket}/p3", "--count-from", count_from, "--poll-seconds", "0.05"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "no new export is started" in error and f"--export-arn {arns[0]}" in error
    assert len(dynamodb.list_exports(TableArn=table_arn)["ExportSummaries"]) == 2


def test_the_table_counted_at_one_instant_is_not_counted_again_at_a_later_one(tables, capsys):
    """A redeploy with a new countFrom, or the table adopted again into the same counts table: an export at the
    later instant holds every item counted already (by the first backfill, and by the stream since)."""
    dynamodb, s3 = client("dynamodb"), client("s3")
    bucket = f"exports-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    write_items(dynamodb, tables.events, [event.item() for event in Workload(counters=COUNTERS, hours=1, seed=6).events(now_ms())])
    table_arn = dynamodb.describe_table(TableName=tables.events)["Table"]["TableArn"]
    first = now_ms() // 1000 - 60
    adopted = exports.start_export(dynamodb, table_arn, bucket, "first", first * 1000).arn
    assert backfill.main(["--export-arn", adopted, "--count-from", str(first), "--poll-seconds", "0.05"]) == 0
    counted = every_bucket(dynamodb, tables.counts, COUNTERS)
    later = exports.start_export(dynamodb, table_arn, bucket, "later", (first + 30) * 1000).arn
    capsys.readouterr()

    assert backfill.main(["--export-arn", later, "--count-from", str(first + 30), "--poll-seconds", "0.05"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and f"counted already, at {iso_second(first * 1000)} from export {adopted}" in error
    assert every_bucket(dynamodb, tables.counts, COUNTERS) == counted
    # --export-to refuses before it starts (and bills) an export; so does an instant before the first.
    for instant in (first + 40, first - 30):
        assert backfill.main(["--export-to", f"s3://{bucket}/again", "--count-from", str(instant), "--poll-seconds", "0.05"]) == 2
        error = capsys.readouterr().err
        assert error.count("\n") == 1 and "would count those items twice; no new export is started" in error
    assert len(dynamodb.list_exports(TableArn=table_arn)["ExportSummaries"]) == 2
    # The first backfill, run again, still finds its own claim: nothing is added.
    assert backfill.main(["--export-arn", adopted, "--count-from", str(first), "--poll-seconds", "0.05"]) == 0
    assert every_bucket(dynamodb, tables.counts, COUNTERS) == counted


def test_a_prefix_holding_two_exports_without_a_manifest_is_refused(tables, capsys):
    dynamodb, s3 = client("dynamodb"), client("s3")
    bucket = f"exports-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    table_arn = dynamodb.describe_table(TableName=tables.events)["Table"]["TableArn"]
    count_from = now_ms() // 1000 * 1000
    arns = [exports.start_export(dynamodb, table_arn, bucket, "shared", count_from).arn for _ in range(2)]
    for arn in arns:
        exports.wait_until_done(dynamodb, arn, poll_seconds=0.05)

    assert backfill.main(["--export-arn", arns[0], "--count-from", str(count_from // 1000)]) == 2
    assert "prefix of its own" in capsys.readouterr().err


def test_the_count_from_instant_is_required_and_checked(tables, capsys, monkeypatch):
    monkeypatch.delenv("TALLY_COUNT_FROM", raising=False)
    assert backfill.main(["--export-arn", "arn:aws:dynamodb:us-east-1:123456789012:table/x/export/1"]) == 2
    assert "--count-from" in capsys.readouterr().err
    assert backfill.main(["--export-to", "s3://b/p", "--count-from", "2026-11-23T10:00:00.5Z"]) == 2
    assert "whole second" in capsys.readouterr().err
    two_days_ago = str(now_ms() // 1000 - 2 * 86_400)
    assert backfill.main(["--export-to", "s3://b/p", "--count-from", two_days_ago]) == 2
    missed = capsys.readouterr().err
    assert "within a day" in missed
    # The stream has counted since count-from: a new countFrom is exact only into a new counts table.
    assert "new counts table" in missed and missed.count("\n") == 1


def test_backfilled_history_follows_the_counter_rules(tables, monkeypatch, capsys):
    """The backfill parses items through the handler's rules: fan-out, conditions and refusals alike."""
    audit = load_script("audit")
    rules = [
        {"name": "jobs", "counter": "jobs/{providerId}"},
        {"name": "all", "counter": "jobs/all", "when": {"status": {"oneOf": ["done", "failed"]}}},
    ]
    monkeypatch.setenv("TALLY_RULES", json.dumps(rules))
    dynamodb, s3 = client("dynamodb"), client("s3")
    bucket = f"exports-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    end = now_ms() - 2 * MINUTE_MS
    items = [
        {"id": str(n), "ts": end - n * 71_000, "providerId": f"p{n % 4}", "status": ["done", "failed", "open"][n % 3]}
        for n in range(300)
    ] + [{"id": "nameless", "ts": end, "status": "done"}]  # jobs refuses it (missing_counter), all counts it
    write_items(dynamodb, tables.events, items)
    count_from = now_ms() // 1000 + 1
    table_arn = dynamodb.describe_table(TableName=tables.events)["Table"]["TableArn"]
    export = exports.start_export(dynamodb, table_arn, bucket, "rules", count_from * 1000)
    wait_for(count_from * 1000)

    summary = backfill.run(backfill.parser().parse_args(["--export-arn", export.arn, "--count-from", str(count_from)]))

    assert summary.items == 301
    assert summary.counted == {**{f"jobs/p{k}": 75 for k in range(4)}, "jobs/all": 201}
    assert summary.rejected_by_rule == {"jobs": 1}
    at = iso_second(end + MINUTE_MS)
    counters = [f"jobs/p{k}" for k in range(4)] + ["jobs/all"]
    assert audit.main([*counters, "--window", "8h", "--at", at, "--json"]) == 0
    assert all(json.loads(line)["tally"] > 0 for line in capsys.readouterr().out.splitlines())


def test_the_history_of_a_rule_added_later_is_counted_once_and_no_other_counter_is_written(tables, monkeypatch, capsys):
    """backfill.py --rules on moto's server: an export at the rule's own countFrom, that rule alone, run twice."""
    dynamodb, s3 = client("dynamodb"), client("s3")
    bucket = f"exports-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    old = [{"name": "orders", "counter": "orders/{shop}"}]
    monkeypatch.setenv("TALLY_RULES", json.dumps(old))
    items = [{"id": f"i{n}", "shop": f"s{n % 3}", "kind": "refund" if n % 4 == 0 else "order", "ts": now_ms() - n * MINUTE_MS}
             for n in range(120)]
    write_items(dynamodb, tables.events, items)
    reader = StreamReader(client("dynamodbstreams"), stream_arn_of(dynamodb, tables.events),
                          local_handler(tables.counts, log_level="ERROR"), config=DeliveryConfig(batch_size=50, window_seconds=60),
                          context=LocalContext())
    reader.run(until_idle=True, idle_polls=1, poll_interval=0, commit_open_windows=True)
    before = every_bucket(dynamodb, tables.counts, [f"orders/s{n}" for n in range(3)])

    added = (now_ms() // 1000 + 1) * 1000
    monkeypatch.setenv("TALLY_RULES", json.dumps([*old, {"name": "refunds", "counter": "refunds/{shop}",
                                                         "when": {"kind": {"equals": "refund"}}, "countFrom": str(added // 1000)}]))
    wait_for(added)
    table_arn = dynamodb.describe_table(TableName=tables.events)["Table"]["TableArn"]
    export = exports.start_export(dynamodb, table_arn, bucket, "refunds", added)

    adopted = []
    monkeypatch.setattr(backfill, "record_adoption", lambda *arguments: adopted.append(arguments))
    for _ in range(2):  # the second run finds every watermark
        assert backfill.main(["--rules", "refunds", "--export-arn", export.arn, "--poll-seconds", "0.05"]) == 0
    assert adopted == []  # a rule's history makes no counter's days complete
    shown = capsys.readouterr().out
    assert "refunds" in shown and "30" in shown

    refunds = every_bucket(dynamodb, tables.counts, [f"refunds/s{n}" for n in range(3)])
    assert sum(count for (_, sk), count in refunds.items() if sk.startswith("H#")) == 30
    assert every_bucket(dynamodb, tables.counts, [f"orders/s{n}" for n in range(3)]) == before

    # The rule's history is counted once: another export of it is refused, in one line.
    refuses_another_export(dynamodb, capsys, bucket, table_arn, added, export.arn, ["--rules", "refunds"])


def refuses_another_export(dynamodb, capsys, bucket: str, table_arn: str, at_ms: int, export_arn: str, scope: list[str]) -> None:
    """A second export of a history counted from ``export_arn`` (taken at ``at_ms``) is refused in one line; so is a
    new one, before it is started, naming the command that resumes the first."""
    other = exports.start_export(dynamodb, table_arn, bucket, "again", at_ms)
    assert backfill.main([*scope, "--export-arn", other.arn, "--poll-seconds", "0.05"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "count it twice" in error and export_arn in error
    exported = len(dynamodb.list_exports(TableArn=table_arn)["ExportSummaries"])
    assert backfill.main([*scope, "--export-to", f"s3://{bucket}/third", "--poll-seconds", "0.05"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and f"run with {' '.join(scope)} --export-arn {export_arn}" in error
    assert len(dynamodb.list_exports(TableArn=table_arn)["ExportSummaries"]) == exported  # none started


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--rules", "orders"], "rule 'orders' has no countFrom of its own"),
        (["--rules", "nope"], "--rules: no rule named 'nope'"),
        (["--rules"], "expected at least one argument"),
        (["--calendar", "nope/"], "--calendar: 'nope/' is not a calendar prefix (calendarPrefixes: 'views/', 'orders/')"),
        (["--calendar", "views/"], "calendar prefix 'views/' has no countFrom of its own"),
        (["--calendar", "orders/", "--rules", "orders"], "--calendar and --rules"),
        (["--calendar", "orders/", "--count-from", "2020-01-01T00:00:00Z"], "is not the countFrom of the calendar prefixes named"),
        (["--calendar", "orders/"], "cannot be counted before"),  # its countFrom an hour ahead
    ],
)
def test_bad_rules_or_prefixes_to_backfill_are_one_line_and_exit_2(tables, monkeypatch, capsys, arguments, message):
    monkeypatch.setenv("TALLY_RULES", json.dumps([{"name": "orders", "counter": "orders/{shop}"}]))
    monkeypatch.setenv("TALLY_CALENDAR_PREFIXES", '["views/", "orders/"]')
    monkeypatch.setenv("TALLY_CALENDAR_COUNT_FROM", json.dumps({"orders/": now_ms() // 1000 + 3600}))
    with pytest.raises(SystemExit) if arguments == ["--rules"] else contextlib.nullcontext():
        code = backfill.main([*arguments, "--export-arn", "arn:aws:dynamodb:us-east-1:123456789012:table/x/export/1"])
        assert code == 2
    error = capsys.readouterr().err
    assert message in error and error.strip().count("\n") <= 1


def test_a_rule_whose_count_from_has_not_come_is_not_backfilled_yet(tables, monkeypatch, capsys):
    ahead = now_ms() // 1000 + 3600
    monkeypatch.setenv("TALLY_RULES", json.dumps([{"name": "refunds", "counter": "refunds/{shop}", "countFrom": str(ahead)}]))
    assert backfill.main(["--rules", "refunds", "--export-to", "s3://b/p"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and f"run the backfill after {iso_second(ahead * 1000)}" in error


@pytest.mark.parametrize("where", sweep(["here", "in the account"]))
def test_a_calendar_prefix_declared_later_gets_its_older_days_once_and_the_audit_finds_no_difference(
    tables, monkeypatch, capsys, where
):
    """backfill.py --calendar on moto's server: the export at the prefix's own countFrom, after its first close (the
    progress as that close left it), counted into days alone, here or by the stack's state machine (its stages run
    here as the account runs them, each child a process); an audit of those days finds no difference; a second
    export, or a new one, is refused in one line."""
    from datetime import UTC, datetime, timedelta

    from tally.core.buckets import Bucket
    from tally.dynamo.closing import ProgressItems

    audit = load_script("audit")
    dynamodb, s3 = client("dynamodb"), client("s3")
    bucket = f"exports-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    today = datetime.fromtimestamp(now_ms() / 1000, UTC).date()
    since = today - timedelta(days=3)  # the first day the prefix's first close closed
    start = datetime(since.year, since.month, since.day, tzinfo=UTC).timestamp() * 1000
    items = [{"id": f"o{n}", "counter": f"orders/s{n % 2}", "ts": int(start - (n * 37 + 5) * 3_600_000)} for n in range(40)]
    items += [{"id": f"v{n}", "counter": "views/home", "ts": int(start - n * 3_600_000)} for n in range(10)]
    write_items(dynamodb, tables.events, items)
    added = (now_ms() // 1000 + 1) * 1000
    monkeypatch.setenv("TALLY_CALENDAR_PREFIXES", '["views/", "orders/"]')
    monkeypatch.setenv("TALLY_CALENDAR_ZONES", '["America/New_York"]')
    monkeypatch.setenv("TALLY_CALENDAR_COUNT_FROM", json.dumps({"orders/": added // 1000}))
    wait_for(added)
    table_arn = dynamodb.describe_table(TableName=tables.events)["Table"]["TableArn"]
    export = exports.start_export(dynamodb, table_arn, bucket, "calendar", added)
    arguments = ["--calendar", "orders/", "--export-arn", export.arn, "--poll-seconds", "0.05"]

    assert backfill.main(arguments) == 2  # no close has said where the prefix's closed days begin
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "no close has closed the days of calendar prefix 'orders/'" in error
    for zone in ("UTC", "America/New_York"):
        ProgressItems(dynamodb, tables.counts).advance(zone, Bucket.of_day(today - timedelta(days=2), zone), None,
                                                       Bucket.of_day(since, zone), ("views/", "orders/"))
    for _ in range(2):  # the second run finds every watermark
        if where == "here":
            assert backfill.main(arguments) == 0
        else:
            environment = state_machine.backfill_environment(bucket, "calendar", 3)
            final = state_machine.run_backfill(export.arn, "calendar:orders/", s3=s3, workers=2, environment=environment,
                                               say=print)
            backfill.show(summary_from_json(final["summary"]))
    assert "orders/s0" in capsys.readouterr().out
    assert "adopted:orders/" in ProgressItems(dynamodb, tables.counts).client.get_item(
        TableName=tables.counts, Key={"pk": {"S": "#calendar"}, "sk": {"S": "America/New_York"}})["Item"]

    written = every_bucket(dynamodb, tables.counts, ["orders/s0", "orders/s1", "views/home"])
    assert written and {sk.split("#")[0] for _, sk in written} == {"D", "MO"} and {c for c, _ in written} == {"orders/s0", "orders/s1"}
    for zone in ("UTC", "America/New_York"):
        span = ["--tz", zone, "--from", (since - timedelta(days=70)).isoformat(), "--to", (since - timedelta(days=1)).isoformat()]
        assert audit.main(["orders/s0", "orders/s1", "--series", "day", *span]) == 0
        assert capsys.readouterr().out.splitlines()[-1] == "VERDICT: NO DIFFERENCE"

    refuses_another_export(dynamodb, capsys, bucket, table_arn, added, export.arn, ["--calendar", "orders/"])
