"""The audit recounts windows from raw events on moto's server and flags any difference."""

from __future__ import annotations

import contextlib
import io
import json
import time
from decimal import Decimal

import pytest
from rich.console import Console
from script_support import load_script

from tally.core.units import HOUR_MS, MINUTE_MS
from tally.core.windows import now_ms
from tally.local.aws import LocalContext, client, local_handler, stream_arn_of, write_items
from tally.local.delivery import DeliveryConfig
from tally.local.stream_reader import StreamReader
from tally.local.workload import Workload

pytestmark = [pytest.mark.server, pytest.mark.usefixtures("fresh_handler_cache")]

audit = load_script("audit")

COUNTERS = ["orders", "refunds"]
T = 1_795_000_040_000  # 20 s into a minute


def run_stream(tables) -> None:
    reader = StreamReader(
        client("dynamodbstreams"),
        stream_arn_of(client("dynamodb"), tables.events),
        local_handler(tables.counts, log_level="ERROR"),
        config=DeliveryConfig(batch_size=200, window_seconds=60),
        context=LocalContext(),
    )
    reader.run(until_idle=True, idle_polls=1, poll_interval=0, commit_open_windows=True)


def audit_json(capsys, *args: str) -> tuple[int, dict[str, dict]]:
    status = audit.main([*COUNTERS, "--json", *args])
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    return status, {row["counter"]: row for row in rows}


def test_an_honest_table_audits_equal_and_a_lost_event_shows_as_a_difference(tables, capsys):
    end = now_ms() - 5 * MINUTE_MS
    events = Workload(counters=COUNTERS, hours=6, rate=(20, 40), seed=8).events(end)
    write_items(client("dynamodb"), tables.events, [event.item() for event in events])
    run_stream(tables)
    at_iso = audit._iso(end).replace("Z", ":00Z")

    status, rows = audit_json(capsys, "--window", "3h", "--at", at_iso)
    assert status == 0
    assert all(row["tally"] == row["recount"] > 0 for row in rows.values())
    assert audit_json(capsys, "--window", "3h", "--at", str(end // MINUTE_MS * 60)) == (status, rows)  # epoch seconds
    assert audit.main([*COUNTERS, "--window", "3h", "--at", at_iso]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "VERDICT: NO DIFFERENCE"  # the table's last line

    # An event the stream never saw (as if the stream had been off): tally cannot know of it, the audit can.
    stamped = end - HOUR_MS
    client("dynamodb").put_item(
        TableName=tables.events,
        Item={"id": {"S": "unseen"}, "counter": {"S": "orders"}, "ts": {"S": audit._iso(stamped).replace("Z", ":00+00:00")}},
    )
    status, rows = audit_json(capsys, "--window", "3h", "--at", at_iso, "--segments", "3")
    assert status == 1
    assert rows["orders"]["recount"] == rows["orders"]["tally"] + 1 and rows["orders"]["difference"] == -1
    assert rows["refunds"]["difference"] == 0
    for json_lines in ([], ["--json"]):  # with --json the verdict ends stderr: stdout is one object a line
        assert audit.main([*COUNTERS, "--window", "3h", "--at", at_iso, *json_lines]) == 1
        output = capsys.readouterr()
        shown = output.err if json_lines else output.out
        assert shown.splitlines()[-1] == "VERDICT: DIFFERENCE: 1 counter differs in 1 period"


def test_a_query_on_an_index_recounts_the_same(server_env, capsys, monkeypatch):
    import uuid

    from tally.core.tables import COUNTS_TABLE
    from tally.dynamo.tables import create_table

    dynamodb = client("dynamodb")
    events, counts = f"ev-{uuid.uuid4().hex[:8]}", f"co-{uuid.uuid4().hex[:8]}"
    dynamodb.create_table(
        TableName=events,
        BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[
            {"AttributeName": "id", "AttributeType": "S"},
            {"AttributeName": "counter", "AttributeType": "S"},
            {"AttributeName": "ts", "AttributeType": "N"},
        ],
        GlobalSecondaryIndexes=[
            {
                "IndexName": "by-counter",
                "KeySchema": [{"AttributeName": "counter", "KeyType": "HASH"}, {"AttributeName": "ts", "KeyType": "RANGE"}],
                "Projection": {"ProjectionType": "KEYS_ONLY"},
            },
            {
                "IndexName": "by-id",
                "KeySchema": [{"AttributeName": "id", "KeyType": "HASH"}],
                "Projection": {"ProjectionType": "KEYS_ONLY"},
            },
        ],
    )
    create_table(dynamodb, COUNTS_TABLE, counts)
    monkeypatch.setenv("EVENTS_TABLE", events)
    monkeypatch.setenv("COUNTS_TABLE", counts)
    end = now_ms() - 10 * MINUTE_MS
    write_items(dynamodb, events, [e.item() for e in Workload(counters=COUNTERS, hours=3, seed=9).events(end)])
    at_iso = audit._iso(end).replace("Z", ":00Z")

    _, scanned = audit_json(capsys, "--window", "2h", "--at", at_iso)
    _, queried = audit_json(capsys, "--window", "2h", "--at", at_iso, "--index", "by-counter")
    assert {c: r["recount"] for c, r in queried.items()} == {c: r["recount"] for c, r in scanned.items()}
    assert all(r["recount"] > 0 and r["tally"] == 0 for r in queried.values())  # nothing streamed here

    assert audit.main(["orders", "--index", "by-id"]) == 2
    assert "partition key" in capsys.readouterr().err
    assert audit.main(["orders", "--index", "nope"]) == 2


@pytest.mark.parametrize(
    ("value", "minute"),
    [
        (Decimal(T), T // MINUTE_MS),
        (Decimal("1795000079999.9"), 1_795_000_079_999 // MINUTE_MS),
        ("2026-11-18T11:07:00Z", 1_795_000_020_000 // MINUTE_MS),
        ("2026-11-18T12:07:59.999+01:00", 1_795_000_020_000 // MINUTE_MS),
        ("2026-11-18T11:07:00", None),  # no offset
        ("soon", None),
        (Decimal(-1), None),
        (Decimal("NaN"), None),
        (True, None),
    ],
)
def test_the_rule_reads_times_on_its_own(value, minute):
    assert audit.event_minute(value) == minute


def test_the_rule_counts_only_the_named_counter_as_a_string_inside_the_window():
    minute = T // MINUTE_MS
    items = [
        {"counter": {"S": "orders"}, "ts": {"N": str(T)}},
        {"counter": {"S": "orders"}, "ts": {"N": str(T - 20_001)}},  # the minute before the window
        {"counter": {"S": "orders"}, "ts": {"N": str(T + 40_000)}},  # the minute after
        {"counter": {"N": "1"}, "ts": {"N": str(T)}},
        {"counter": {"S": "refunds"}},
        {"ts": {"N": str(T)}},
    ]
    assert audit.recount_items(items, ["orders", "refunds"], [audit.classic_rule("counter")], "ts", minute, minute) == {
        "orders": 1,
        "refunds": 0,
    }


def test_bad_arguments_are_one_line(capsys):
    assert audit.main(["orders", "--at", "yesterday"]) == 2
    assert audit.main(["orders", "--segments", "0"]) == 2
    assert audit.main(["orders", "--window", "0m"]) == 2
    errors = capsys.readouterr().err
    assert errors.count("\n") == 3 and "--at must be epoch seconds or ISO-8601" in errors
    assert "--window: window length must be at least a minute, got '0m'" in errors


RULES = json.dumps(
    [
        {"name": "jobs", "counter": "jobs/{providerId}"},
        {"name": "paid", "counter": "revenue/{shop}", "when": {"status": {"equals": "paid"}}, "sum": "amount"},
        {"name": "all", "counter": "{{all}}", "when": {"kind": {"oneOf": ["a", 2]}, "test": {"exists": False}}},
        {"name": "load", "counter": "load/{page}", "histogram": "ms"},
        {"name": "visitors", "counter": "visitors/{page}", "distinct": "client"},
    ]
)
# Visitors as a distinct rule takes them (strings, numbers) or refuses them (empty, not a string or number, missing).
CLIENTS = ["c-1", Decimal(7), "", True, None]
# Load times as a histogram rule takes them (0, negative, tiny) or refuses them (too large or small, not a number).
LOAD_TIMES = [Decimal(250), Decimal(0), Decimal(-3), Decimal("1E-9"), Decimal("1E18"), Decimal("1E-10"), "fast"]


def item(**values):
    from boto3.dynamodb.types import TypeSerializer

    return {name: TypeSerializer().serialize(value) for name, value in {"ts": Decimal(T), **values}.items()}


def test_rules_name_counters_from_templates_conditions_and_sums_on_their_own():
    rules = audit.read_rules(RULES)
    minute = T // MINUTE_MS
    items = [
        item(providerId="acme"),  # jobs/acme
        item(providerId=Decimal("7.50")),  # jobs/7.5
        item(providerId=""),  # an empty string names nothing
        item(providerId=True),  # nor does a boolean
        item(shop="s1", status="paid", amount=Decimal("12.34")),  # revenue/s1
        item(shop="s1", status="open", amount=Decimal("1")),  # condition fails
        item(shop="s1", status="paid", amount=Decimal("0.000000001")),  # 9 digits after the point: refused
        item(shop="s1", status="paid"),  # nothing to sum: refused
        item(kind="a"),  # {all}
        item(kind=Decimal(2), providerId="acme"),  # {all} and jobs/acme
        item(kind="2"),  # a string is not the number 2
        item(kind="a", test="x"),  # must not exist
        *(item(page="home", ms=ms) for ms in LOAD_TIMES),  # the first four count
        *(item(page="blog", **({} if client is None else {"client": client})) for client in CLIENTS),  # two count
    ]
    counters = ["jobs/acme", "jobs/7.5", "revenue/s1", "{all}", "load/home", "visitors/blog"]
    assert audit.recount_items(items, counters, rules, "ts", minute, minute) == {
        "jobs/acme": 2,
        "jobs/7.5": 1,
        "revenue/s1": 1,
        "{all}": 2,
        "load/home": 4,
        "visitors/blog": 2,
    }


def test_the_scan_filter_asks_for_every_attribute_some_rule_needs():
    rules = audit.read_rules(RULES)
    request = audit.scan_filter(["jobs/acme"], rules, False, "ts", 10, 20)
    names = request["ExpressionAttributeNames"]
    assert set(names.values()) == {"ts", "providerId", "shop", "status", "amount", "kind", "test", "page", "ms", "client"}
    assert request["FilterExpression"].count("attribute_exists") == 1 + 3 + 1 + 2 + 2  # "test" must be absent
    constant = audit.read_rules(json.dumps([{"counter": "views/all"}]))
    assert "attribute_exists" not in audit.scan_filter(["views/all"], constant, False, "ts", 10, 20)["FilterExpression"]


def test_rules_the_audit_cannot_read_are_one_line(monkeypatch, capsys, server_env):
    monkeypatch.setenv("TALLY_RULES", "[1, 2]")
    assert audit.main(["orders"]) == 2
    assert "TALLY_RULES" in capsys.readouterr().err
    monkeypatch.setenv("TALLY_RULES", RULES)
    assert audit.main(["orders", "--index", "by-counter"]) == 2
    assert "--index" in capsys.readouterr().err


def test_rule_named_counters_audit_equal_to_what_tally_counted(tables, capsys, monkeypatch):
    """tally's rules and the audit's own reading of them agree on every kind of item."""
    monkeypatch.setenv("TALLY_RULES", RULES)
    end = now_ms() - 5 * MINUTE_MS
    items = []
    for n in range(60):
        ts = end - n * 97_000
        items += [
            {"id": f"j{n}", "ts": ts, "providerId": ["acme", "zeta", Decimal("7.50")][n % 3]},
            {"id": f"p{n}", "ts": ts, "shop": "s1", "status": ["paid", "open"][n % 2], "amount": Decimal("12.34")},
            {"id": f"b{n}", "ts": ts, "shop": "s1", "status": "paid", "amount": Decimal("0.000000001")},  # refused
            {"id": f"k{n}", "ts": ts, "kind": ["a", Decimal(2), "2"][n % 3], **({"test": "x"} if n % 5 == 0 else {})},
            {"id": f"l{n}", "ts": ts, "page": "home", "ms": LOAD_TIMES[n % len(LOAD_TIMES)]},
            {"id": f"v{n}", "ts": ts, "page": "blog", **({} if n % 5 == 4 else {"client": CLIENTS[n % 5]})},
        ]
    write_items(client("dynamodb"), tables.events, items)
    run_stream(tables)
    at_iso = audit._iso(end + MINUTE_MS).replace("Z", ":00Z")  # the boundary after end's minute: end is inside

    counters = ["jobs/acme", "jobs/7.5", "revenue/s1", "{all}", "load/home", "visitors/blog"]
    status = audit.main([*counters, "--json", "--window", "3h", "--at", at_iso])

    rows = {row["counter"]: row for row in map(json.loads, capsys.readouterr().out.splitlines())}
    assert status == 0, rows
    assert {counter: row["recount"] for counter, row in rows.items()} == {
        "jobs/acme": 20,
        "jobs/7.5": 20,
        "revenue/s1": 30,
        "{all}": sum(1 for n in range(60) if n % 3 != 2 and n % 5 != 0),
        "load/home": sum(1 for n in range(60) if n % len(LOAD_TIMES) < 4),
        "visitors/blog": sum(1 for n in range(60) if n % 5 < 2),
    }


TRANSITION_RULES = json.dumps(
    [
        {"name": "placed", "counter": "placed/{p}"},
        {"name": "done", "counter": "done/{p}", "becomes": {"status": {"equals": "done"}}, "time": "doneAt"},
        {"name": "gone", "counter": "gone/{status}", "on": "REMOVE", "time": "@arrival"},
        {"name": "edits", "counter": "edits", "on": "MODIFY"},
        {"name": "done-now", "counter": "done-now", "becomes": {"status": {"equals": "done"}}, "time": "@arrival"},
    ]
)


def test_a_transition_rule_is_recounted_from_the_state_items_are_in_now_at_its_own_time():
    rules = audit.read_rules(TRANSITION_RULES)
    placed, done, gone, edits, done_now = rules
    minute = T // MINUTE_MS
    assert done.names({"p": "a", "status": "done"}) == "done/a" and done.names({"p": "a", "status": "placed"}) is None
    at_done = [item(p="a", status="done", doneAt=Decimal(T), ts=Decimal(0))]
    assert audit.recount_items(at_done, ["done/a", "placed/a"], [placed, done], "ts", minute, minute) == {
        "done/a": 1,
        "placed/a": 0,  # placed long before: its own time is outside the window
    }
    assert [rule.unrecountable is None for rule in rules] == [True, True, False, False, False]
    assert "deletions" in gone.unrecountable and "every change" in edits.unrecountable
    assert "arrival" in done_now.unrecountable
    assert gone.could_name("gone/done") and not gone.could_name("done/a") and done_now.could_name("done-now")
    request = audit.scan_filter(["done/a"], [placed, done], False, "ts", 10, 20)
    assert set(request["ExpressionAttributeNames"].values()) == {"ts", "doneAt", "p", "status"}
    assert request["FilterExpression"].count(" >= :lo") == 2  # each rule's time, with its own attributes


def test_transitions_audit_equal_until_an_item_goes_back_and_deletions_are_not_recountable(
    server_env, capsys, monkeypatch
):
    from tally.core.rules import parse_rules
    from tally.core.tables import events_table_for
    from tally.dynamo.tables import create_tables
    from tally.local.aws import Tables

    monkeypatch.setenv("TALLY_RULES", TRANSITION_RULES)
    tables = Tables(events=f"jobs-{T}", counts=f"jobs-counts-{T}")
    dynamodb = client("dynamodb")
    create_tables(dynamodb, tables.events, tables.counts, events_table_for(parse_rules(TRANSITION_RULES)))
    monkeypatch.setenv("EVENTS_TABLE", tables.events)
    monkeypatch.setenv("COUNTS_TABLE", tables.counts)
    end = now_ms() - 5 * MINUTE_MS
    jobs = [{"id": f"j{n}", "p": "ab"[n % 2], "status": "placed", "ts": end - HOUR_MS + n * 1000} for n in range(8)]
    done = [{**job, "status": "done", "doneAt": job["ts"] + 60_000} for job in jobs[:6]]
    write_items(dynamodb, tables.events, jobs)
    write_items(dynamodb, tables.events, done)
    # j1 (provider b) goes back to placed and is done again: two transitions, one item done now.
    write_items(dynamodb, tables.events, [{**jobs[1], "status": "placed"}])
    write_items(dynamodb, tables.events, [{**done[1], "doneAt": done[1]["doneAt"] + 60_000}])
    dynamodb.delete_item(TableName=tables.events, Key={"id": {"S": "j7"}})
    run_stream(tables)
    at_iso = audit._iso(now_ms() + MINUTE_MS).replace("Z", ":00Z")  # the deletion counts at its arrival, now

    status = audit.main(["done/a", "done/b", "placed/b", "gone/placed", "--json", "--window", "3h", "--at", at_iso])

    rows = {row["counter"]: row for row in map(json.loads, capsys.readouterr().out.splitlines())}
    assert status == 1
    assert (rows["done/a"]["tally"], rows["done/a"]["recount"]) == (3, 3)
    assert (rows["done/b"]["tally"], rows["done/b"]["recount"], rows["done/b"]["difference"]) == (4, 3, 1)
    # A deleted item was counted by tally and is gone from the table: the audit recounts what is left.
    assert (rows["placed/b"]["tally"], rows["placed/b"]["recount"]) == (4, 3)
    assert rows["gone/placed"]["tally"] == 1 and rows["gone/placed"]["recount"] is None
    assert "rule 'gone' counts deletions" in rows["gone/placed"]["not_recountable"]

    assert audit.main(["gone/placed", "edits", "--at", at_iso]) == 2
    assert "nothing to recount: rule 'gone' counts deletions" in capsys.readouterr().err


def test_one_rule_alone_is_recounted_by_a_filter_dynamodb_accepts(tables, capsys, monkeypatch):
    # DynamoDB refuses an expression with redundant parentheses, such as ((attribute_exists(#a0))).
    monkeypatch.setenv("TALLY_RULES", '[{"name": "jobs", "counter": "jobs/{providerId}"}]')
    end = now_ms() - 5 * MINUTE_MS
    write_items(client("dynamodb"), tables.events, [{"id": f"j{n}", "ts": end - n * 60_000, "providerId": "a"} for n in range(5)])
    run_stream(tables)
    at_iso = audit._iso(end + MINUTE_MS).replace("Z", ":00Z")  # the boundary after end's minute: end is inside
    assert audit.main(["jobs/a", "--json", "--window", "1h", "--at", at_iso]) == 0
    [row] = map(json.loads, capsys.readouterr().out.splitlines())
    assert row["tally"] == row["recount"] == 5


def test_a_scan_shows_its_progress_on_stderr(tables, monkeypatch, capsys):
    end = now_ms() - 5 * MINUTE_MS
    items = [event.item() for event in Workload(counters=COUNTERS, hours=2, rate=(30, 30), seed=2).events(end)]
    write_items(client("dynamodb"), tables.events, items)
    shown = io.StringIO()
    monkeypatch.setattr(audit, "stderr", Console(file=shown, force_terminal=True, width=120))
    audit.main([*COUNTERS, "--json", "--segments", "3"])
    output = shown.getvalue()
    assert f"scanning {tables.events}" in output and "━" in output  # the bar, drawn while the segments read
    assert f"scanned {len(items):,} items of {tables.events} in 3 segments" in output


def test_buckets_an_overlap_left_unresolved_are_repaired_once_from_the_events_table(tables, capsys, monkeypatch):
    """A first reader commits 60 s windows (closed early); a second reads the whole stream again in batches of 3
    in a 900 s window, whose state carries what the first took, and the stream answers that those records are
    trimmed. The shard moves on, reads say which counters are not exact, and the repair makes them exact, once."""
    from tally.core.overlaps import RecordsAgain
    from tally.dynamo.stream import ShardRecords
    from tally.reader import Reader

    # Lambda's windows begin at whole multiples of their length (by arrival): the second reader's one window must
    # hold the whole stream, so the writes must not straddle a quarter hour (else it could find every overlap
    # already applied at a window's end, and nothing to repair).
    to_quarter_hour_s = (900_000 - now_ms() % 900_000) / 1000
    if to_quarter_hour_s < 30:
        time.sleep(to_quarter_hour_s + 1)
    end = now_ms() - 5 * MINUTE_MS
    events = Workload(counters=COUNTERS, hours=2, rate=(20, 40), seed=9).events(end)
    dynamodb = client("dynamodb")
    write_items(dynamodb, tables.events, [event.item() for event in events[: len(events) // 2]])
    run_stream(tables)
    write_items(dynamodb, tables.events, [event.item() for event in events[len(events) // 2 :]])
    trimmed = RecordsAgain(None, "TrimmedDataAccessException: the records were trimmed", 1)
    monkeypatch.setattr(ShardRecords, "read", lambda self, step: trimmed)
    StreamReader(
        client("dynamodbstreams"),
        stream_arn_of(dynamodb, tables.events),
        local_handler(tables.counts, log_level="CRITICAL"),
        config=DeliveryConfig(batch_size=3, window_seconds=900),
        context=LocalContext(),
    ).run(until_idle=True, idle_polls=1, poll_interval=0, commit_open_windows=True)

    window = ["--window", "3h", "--at", audit._iso(end + 5 * MINUTE_MS).replace("Z", ":00Z")]
    status, rows = audit_json(capsys, *window)
    assert status == 1 and all(row["difference"] <= 0 for row in rows.values())  # low, never high
    reader = Reader(tables.counts, client=dynamodb)
    answers = reader.count_many(COUNTERS, window="3h")
    assert any(not answer.exact for answer in answers)
    assert all(answer.exact == (rows[answer.counter]["difference"] == 0) or not answer.exact for answer in answers)
    assert any("is not exact" in note and "--repair" in note for note in reader.notes(answers))

    assert audit.main(["--repair", "--json"]) == 0
    repaired = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert repaired and all(row["verdict"] == "repaired" for row in repaired)
    assert sum(row["added"] for row in repaired if row["bucket"].startswith("H#")) == -sum(r["difference"] for r in rows.values())
    status, rows = audit_json(capsys, *window)
    assert status == 0, rows
    assert all(answer.exact for answer in reader.count_many(COUNTERS, window="3h"))
    # Run again: nothing is left to repair, and nothing is added twice.
    assert audit.main(["--repair", "--json"]) == 0
    assert capsys.readouterr().out == ""
    assert audit_json(capsys, *window)[0] == 0


SHARING_RULES = json.dumps(
    [
        {"name": "jobs", "counter": "jobs/{providerId}"},
        {"name": "all", "counter": "jobs/all", "when": {"providerId": {"exists": True}}},  # shares jobs/all with jobs
        {"name": "paid", "counter": "revenue/{shop}", "when": {"status": {"equals": "paid"}}, "sum": "amount"},
    ]
)


def streamed_jobs_and_payments(tables, monkeypatch) -> tuple[int, str]:
    """40 jobs (providers acme, zeta and one called "all") and 40 payments, half paid, streamed; their window."""
    monkeypatch.setenv("TALLY_RULES", SHARING_RULES)
    end = now_ms() - 5 * MINUTE_MS
    items = []
    for n in range(40):
        ts = end - n * 97_000
        items += [
            {"id": f"j{n}", "ts": ts, "providerId": ["acme", "zeta", "all"][n % 3]},
            {"id": f"p{n}", "ts": ts, "shop": "s1", "status": ["paid", "open"][n % 2], "amount": Decimal("12.34")},
        ]
    write_items(client("dynamodb"), tables.events, items)
    run_stream(tables)
    return end, audit._iso(end + MINUTE_MS).replace("Z", ":00Z")  # the boundary after end's minute: end is inside


def rules_audit(capsys, *args: str) -> tuple[int, dict[str, dict], str]:
    status = audit.main([*args, "--json", "--window", "2h"])
    output = capsys.readouterr()
    return status, {row["counter"]: row for row in map(json.loads, output.out.splitlines())}, output.err


def test_rules_recount_only_the_counters_they_write_and_find_them_equal(tables, capsys, monkeypatch):
    _, at_iso = streamed_jobs_and_payments(tables, monkeypatch)

    status, rows, errors = rules_audit(capsys, "--rules", "jobs", "--at", at_iso)

    assert status == 0, rows
    # Found by the recount and listed by tally's directory (jobs/all, which "jobs" can write too); no revenue/s1.
    assert {counter: (row["tally"], row["recount"]) for counter, row in rows.items()} == {
        "jobs/acme": (14, 14),
        "jobs/zeta": (13, 13),
        "jobs/all": (40 + 13, 40 + 13),  # every job by rule "all", and the provider named "all" by rule "jobs"
    }
    assert rows["jobs/all"]["shared_with"] == ["all"] and rows["jobs/acme"]["shared_with"] == []
    assert errors.splitlines()[-2:] == [
        "jobs/all: also written by 'all': tally keeps one total, recounted with every rule that writes it",
        "VERDICT: NO DIFFERENCE",
    ]
    status, rows, _ = rules_audit(capsys, "--rules", "paid", "--at", at_iso)
    assert status == 0 and {counter: row["recount"] for counter, row in rows.items()} == {"revenue/s1": 20}


def test_a_shared_counter_is_recounted_with_every_rule_that_writes_it(tables, capsys, monkeypatch):
    _, at_iso = streamed_jobs_and_payments(tables, monkeypatch)

    for rule, other in (("all", "jobs"), ("jobs", "all")):
        status, rows, errors = rules_audit(capsys, "jobs/all", "--rules", rule, "--at", at_iso)
        assert status == 0, rows
        assert (rows["jobs/all"]["tally"], rows["jobs/all"]["recount"]) == (53, 53)
        assert rows["jobs/all"]["shared_with"] == [other] and f"also written by {other!r}" in errors
    # Named alone, "all" has one counter: found by the recount, written by "jobs" too.
    status, rows, _ = rules_audit(capsys, "--rules", "all", "--at", at_iso)
    assert status == 0 and list(rows) == ["jobs/all"] and rows["jobs/all"]["recount"] == 53


def test_only_the_named_rules_differences_are_shown(tables, capsys, monkeypatch):
    end, at_iso = streamed_jobs_and_payments(tables, monkeypatch)
    dynamodb = client("dynamodb")
    # Events the stream never saw: tally cannot know of them, the audit can.
    unseen_payment = {"id": "unseen-p", "ts": end, "shop": "s1", "status": "paid", "amount": Decimal(5)}
    write_items(dynamodb, tables.events, [unseen_payment])

    status, rows, _ = rules_audit(capsys, "--rules", "jobs", "--at", at_iso)
    assert status == 0 and "revenue/s1" not in rows  # the payment rule's difference is not this audit's
    status, rows, _ = rules_audit(capsys, "--rules", "paid", "--at", at_iso)
    assert status == 1 and rows["revenue/s1"]["difference"] == -1

    write_items(dynamodb, tables.events, [{"id": "unseen-j", "ts": end, "providerId": "zeta"}])
    status, rows, _ = rules_audit(capsys, "--rules", "jobs", "--at", at_iso)
    assert status == 1
    assert {counter: row["difference"] for counter, row in rows.items()} == {"jobs/acme": 0, "jobs/zeta": -1, "jobs/all": -1}
    status, rows, _ = rules_audit(capsys, "jobs/acme", "--rules", "jobs", "--at", at_iso)
    assert status == 0 and list(rows) == ["jobs/acme"]


def one_line(capsys) -> str:
    errors = capsys.readouterr().err
    assert errors.count("\n") == 1, errors
    return errors.rstrip("\n")


def test_rules_the_audit_cannot_take_are_one_line(server_env, capsys, monkeypatch):
    monkeypatch.delenv("TALLY_RULES", raising=False)
    assert audit.main(["--rules", "jobs"]) == 2
    assert one_line(capsys).endswith(": --rules names rules of TALLY_RULES, which is not set (the classic rule has no name)")

    monkeypatch.setenv("TALLY_RULES", SHARING_RULES)
    assert audit.main(["--rules", "jobs", "refunds"]) == 2
    assert one_line(capsys).endswith(": --rules: no rule named 'refunds'; the rules are 'jobs', 'all', 'paid'")
    assert audit.main(["revenue/s1", "--rules", "jobs", "all"]) == 2
    assert one_line(capsys).endswith(": counter 'revenue/s1' is written by none of 'jobs', 'all'")
    assert audit.main(["revenue/s1", "--repair", "--rules", "paid"]) == 2
    assert "--repair" in one_line(capsys)
    # A rule without a name is named as tally names it: its template when that is a name, else by its place.
    rules = audit.read_rules(json.dumps([{"counter": "views/all"}, {"counter": "jobs/{p}"}, {"name": "x", "counter": "x"}]))
    assert [rule.name for rule in rules] == ["views/all", "rule-2", "x"]


def test_a_window_past_a_retired_rules_retirement_is_refused(tables, capsys, monkeypatch):
    retiring = json.loads(SHARING_RULES)
    retiring[0]["retiredAt"] = "2026-12-01T00:00:30Z"
    monkeypatch.setenv("TALLY_RULES", json.dumps(retiring))
    # An item after the retirement: "all" finds jobs/all in the window, a counter the retired "jobs" writes too.
    write_items(client("dynamodb"), tables.events, [{"id": "late", "ts": 1_796_085_000_000, "providerId": "acme"}])

    for args in (["--rules", "jobs"], ["--rules", "all"], ["jobs/acme"], ["jobs/all", "--rules", "all"]):
        assert audit.main([*args, "--at", "2026-12-01T01:00Z"]) == 2, args
        assert capsys.readouterr().err.splitlines()[-1].endswith(  # after the Scan's line when "all" found jobs/all
            ": rule 'jobs' was retired at 2026-12-01T00:00:30Z and the window ends after it, when tally counted none "
            "of its events: audit a window ending at or before it (--at 2026-12-01T00:00Z)"
        )
    # The payments are no retired rule's; the window the line suggests is not refused (and holds nothing here).
    assert audit.main(["--rules", "paid", "--at", "2026-12-01T01:00Z", "--json"]) == 0
    assert audit.main(["--rules", "jobs", "--at", "2026-12-01T00:00Z", "--json"]) == 0
    assert "no counter of 'jobs' in [2026-11-30T00:00Z, 2026-12-01T00:00Z): nothing to compare" in capsys.readouterr().err


def test_in_the_account_the_workers_ship_only_what_the_named_rules_need(tables, capsys, monkeypatch):
    import uuid

    from tally.local.aws import Tables
    from tally.parallel_audit import scan_to_s3

    _, at_iso = streamed_jobs_and_payments(tables, monkeypatch)
    bucket = f"exports-{uuid.uuid4().hex[:8]}"
    client("s3").create_bucket(Bucket=bucket)

    class WorkersHere:
        """The stack's audit state machine, its segments' workers run here with the request the script sends."""

        shipped = 0

        def start_execution(self, stateMachineArn, name, input):
            execution = json.loads(input)
            for segment in execution["segments"]:
                work = (bucket, execution["work"], execution["request"], segment, execution["total"])
                WorkersHere.shipped += scan_to_s3(client("dynamodb"), client("s3"), tables.events, *work)["items"]
            return {"executionArn": f"{stateMachineArn}:{name}"}

        def describe_execution(self, executionArn):
            return {"status": "SUCCEEDED"}

        def list_map_runs(self, executionArn):
            return {"mapRuns": []}

    machine = ("arn:aws:states:us-east-1:123456789012:stateMachine:TallyAudit", f"s3://{bucket}/tally")
    monkeypatch.setattr(audit, "_audit_state_machine", lambda stack: machine)
    monkeypatch.setattr(audit, "resolve_tables", lambda args: Tables(tables.events, tables.counts))
    monkeypatch.setattr(audit, "client", lambda name: WorkersHere() if name == "stepfunctions" else client(name))
    in_account = ["--stack", "Tally", "--segments", "3", "--at", at_iso]

    shipped = []
    for args in (["revenue/s1"], ["--rules", "paid"], ["--rules", "jobs"]):
        WorkersHere.shipped = 0
        status, rows, _ = rules_audit(capsys, *args, *in_account)
        shipped.append(WorkersHere.shipped)
        assert status == 0 and all(row["tally"] == row["recount"] > 0 for row in rows.values()), rows
    assert rows["jobs/all"]["recount"] == 53
    # Every rule's attributes without --rules (the payments and the jobs of the window); a rule's own with it.
    assert shipped == [80, 40, 40]


def test_rules_that_might_write_one_counter_are_told_from_those_that_cannot():
    rules = audit.read_rules(
        json.dumps(
            [
                {"name": "jobs", "counter": "jobs/{p}"},
                {"name": "all", "counter": "jobs/all"},
                {"name": "revenue", "counter": "revenue/{shop}"},
                {"name": "any", "counter": "{kind}/x"},  # jobs/x, revenue/x
                {"name": "braces", "counter": "x{{y}}{z}!"},
            ]
        )
    )
    sharing = {rule.name: [other.name for other in rules if rule.may_share_with(other)] for rule in rules}
    assert sharing == {
        "jobs": ["jobs", "all", "any"],
        "all": ["jobs", "all"],
        "revenue": ["revenue", "any"],
        "any": ["jobs", "revenue", "any"],
        "braces": ["braces"],
    }
    assert [rule.prefix for rule in rules] == ["jobs/", "jobs/all", "revenue/", "", "x{y}"]


def test_a_series_of_days_and_months_is_recounted_period_by_period_in_its_zone(tables, capsys):
    """--series: each New York day (and month) against the events whose time lies between its local midnights;
    an event the stream never saw shows as one period of one counter that differs."""
    from datetime import UTC, datetime, timedelta
    from zoneinfo import ZoneInfo

    york = ZoneInfo("America/New_York")
    end = now_ms() - 5 * MINUTE_MS
    events = Workload(counters=COUNTERS, hours=60, rate=(4, 8), seed=11).events(end)
    write_items(client("dynamodb"), tables.events, [event.item() for event in events])
    run_stream(tables)
    today = datetime.fromtimestamp(end / 1000, UTC).astimezone(york).date()
    first, last = today - timedelta(days=3), today + timedelta(days=1)
    span = ["--tz", "America/New_York", "--from", first.isoformat(), "--to", last.isoformat()]

    assert audit.main([*COUNTERS, "--series", "day", *span, "--json"]) == 0
    output = capsys.readouterr()
    rows = [json.loads(line) for line in output.out.splitlines()]
    assert output.err.splitlines()[-1] == "VERDICT: NO DIFFERENCE"
    assert [row["start"][:10] for row in rows if row["counter"] == "orders"] == [
        (first + timedelta(days=n)).isoformat() for n in range(4)
    ]
    local = [datetime.fromtimestamp(event.ts_ms / 1000, UTC).astimezone(york).date() for event in events]
    for row in rows:
        day = datetime.fromisoformat(row["start"]).date()
        wanted = sum(1 for event, on in zip(events, local) if event.counter == row["counter"] and on == day)
        assert row["tally"] == row["recount"] == wanted
    assert sum(row["recount"] for row in rows) == len(events) > 200

    assert audit.main([*COUNTERS, "--series", "month", *span]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "VERDICT: NO DIFFERENCE"

    # An event the stream never saw, at 23:30 in New York two days ago: one period of one counter differs.
    unseen = datetime.combine(today - timedelta(days=2), datetime.min.time(), tzinfo=york) + timedelta(hours=23, minutes=30)
    client("dynamodb").put_item(TableName=tables.events, Item={
        "id": {"S": "unseen"}, "counter": {"S": "refunds"}, "ts": {"N": str(int(unseen.timestamp() * 1000))}})
    assert audit.main([*COUNTERS, "--series", "day", *span]) == 1
    output = capsys.readouterr()
    assert output.out.splitlines()[-1] == "VERDICT: DIFFERENCE: 1 counter differs in 1 period"
    assert "periods that differ" in output.out and f"{(today - timedelta(days=2)).isoformat()}T00:00:00" in output.out


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["orders", "--series", "day", "--from", "2026-11-01"], "a calendar read needs its first day and the day after"),
        (["orders", "--series", "day", "--from", "2026-11-01", "--to", "2026-11-03", "--window", "1h"], "give no --window"),
        (["orders", "--tz", "UTC"], "--tz, --from and --to go with --series"),
        (["orders", "--series", "day", "--tz", "Asia/Kolkata", "--from", "2026-11-01", "--to", "2026-11-03"], "not on a whole hour"),
        (["orders", "--series", "week", "--from", "2026-11-01", "--to", "2026-11-03"], "invalid choice: 'week'"),
    ],
)
def test_a_bad_series_audit_is_one_line_and_exit_2(tables, capsys, arguments, message):
    with pytest.raises(SystemExit) if "week" in arguments else contextlib.nullcontext():
        assert audit.main(arguments) == 2
    error = capsys.readouterr().err
    assert message in error and error.count("\n") == 1, error
