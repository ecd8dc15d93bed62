"""One release's own code, driven from outside: run by the Python of that release's environment.

    <release venv>/bin/python tests/upgrade/release_agent.py create-tables|invoke|read < job.json > answer.json

The upgrade tests play what does not change between releases (Lambda's event source mapping: the events it
cuts, the window state it carries, the retries it makes) and let each release do what it does: create the
tables, count (its stream handler, through ``tally.local.aws.local_handler``) and read (its ``Reader``). This
file imports only what every release since 0.2.0 has, so the same agent runs the previous release and this
one. The job comes as JSON on stdin, the answer goes as JSON to stdout; the server and the settings come
from the environment (AWS_ENDPOINT_URL, COUNTS_TABLE, TALLY_RULES, ...) as the release's function reads them.
"""

from __future__ import annotations

import json
import sys
import threading
from typing import Any


class InjectedCrash(RuntimeError):
    """The invocation ends here, as a function that timed out or ran out of memory would."""


def crash_after_writes(writes: int) -> dict[str, int]:
    """Let ``writes`` DynamoDB writes through, then fail every later call: an invocation stopped partway
    through its commits. Returns the running tally of writes let through."""
    import botocore.client

    seen = {"writes": 0}
    lock = threading.Lock()
    original = botocore.client.BaseClient._make_api_call
    write_operations = {"UpdateItem", "PutItem", "TransactWriteItems", "BatchWriteItem", "DeleteItem"}

    def call(self: Any, operation: str, params: dict[str, Any]) -> Any:
        if operation in write_operations:
            with lock:
                if seen["writes"] >= writes:
                    raise InjectedCrash(f"the invocation stopped after {writes} writes")
                seen["writes"] += 1
        return original(self, operation, params)

    botocore.client.BaseClient._make_api_call = call
    return seen


def create_tables(job: dict[str, Any]) -> dict[str, Any]:
    import boto3

    try:
        from tally.dynamo.tables import create_tables as create
    except ImportError:  # 0.2.0 kept its DynamoDB code in one module
        from tally.dynamo import create_tables as create
    create(boto3.client("dynamodb"), job["events"], job["counts"])
    return {"created": [job["events"], job["counts"]]}


def invoke(job: dict[str, Any]) -> dict[str, Any]:
    """Each event in turn through the release's handler, an event without state given the state the one
    before returned; the first that fails ends the job (Lambda retries it with the same event: the caller
    decides by whom)."""
    from tally.local.aws import LocalContext, local_handler

    handler = local_handler(job["counts"], "ERROR")
    seen = crash_after_writes(job["crash_after_writes"]) if job.get("crash_after_writes") is not None else None
    responses: list[Any] = []
    carried: dict[str, Any] = {}
    for event in job["events"]:
        if event["state"] is None:  # the state the invocation before returned, as Lambda carries it
            event = {**event, "state": carried}
        try:
            response = handler(event, LocalContext())
            responses.append(response)
            carried = {} if event["isFinalInvokeForWindow"] else dict((response or {}).get("state") or {})
        except Exception as error:  # noqa: BLE001 - the answer says what failed; the caller judges it
            return {"responses": responses, "failed": f"{type(error).__name__}: {error}",
                    "writes": None if seen is None else seen["writes"]}
    return {"responses": responses, "failed": None, "writes": None if seen is None else seen["writes"]}


def read(job: dict[str, Any]) -> dict[str, Any]:
    """The release's Reader: each counter over each window asked, the listing of each window, where the
    release has top lists the top of the prefix, and where it has calendar series the UTC days asked."""
    from tally.reader import Reader

    reader = Reader(job["counts"])
    answers = []
    for window in job["windows"]:
        options = {"window": window["length"], "at": window["at"], "align": window.get("align"), "consistent": True}
        options = {name: value for name, value in options.items() if value is not None}
        counted = reader.count_many(job["counters"], **options)
        listed = reader.list_counters(job.get("prefix", ""), **options)
        answer: dict[str, Any] = {
            "window": window,
            "counts": {
                result.counter: {
                    "start": result.start.isoformat(),
                    "end": result.end.isoformat(),
                    "total": result.total,
                    "distinct": result.distinct,
                    "unresolved": list(getattr(result, "unresolved", ())),
                }
                for result in counted
            },
            "listed": sorted(result.counter for result in listed),
        }
        if hasattr(reader, "top") and window.get("top"):
            top = reader.top(job.get("prefix", ""), window["top"], **options)
            answer["top"] = {
                "entries": [[entry.counter, entry.value] for entry in top.entries],
                "exact": top.exact,
                "start": top.start.isoformat(),
                "end": top.end.isoformat(),
            }
        answers.append(answer)
    days = job.get("days")
    if days and hasattr(reader, "calendar"):  # releases with calendar series: each counter's UTC days
        series = reader.calendar(job["counters"], "day", tz="UTC", start=days["start"], end=days["end"], consistent=True)
        return {"answers": answers, "days": {
            found.counter: [[point.start.isoformat(), point.count, point.distinct] for point in found.points]
            for found in series
        }}
    return {"answers": answers}


COMMANDS = {"create-tables": create_tables, "invoke": invoke, "read": read}


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[1] not in COMMANDS:
        print(f"usage: {argv[0]} {'|'.join(COMMANDS)} < job.json", file=sys.stderr)
        return 2
    job = json.load(sys.stdin)
    json.dump(COMMANDS[argv[1]](job), sys.stdout, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
