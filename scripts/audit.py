"""Recount a window straight from the events table and compare it with tally's answer.

    python scripts/audit.py orders refunds --window 24h --at 2026-11-23T09:00Z
    python scripts/audit.py orders --index by-counter          # Query a GSI keyed by the counter attribute

The operator's independent proof: the recount shares none of tally's parsing,
bucketing or window code. The rule it applies, stated once:

  An item counts for counter C when its counter attribute is the string C and
  its time attribute is a number of epoch milliseconds (a fraction is dropped)
  or an ISO-8601 string with a UTC offset, not before the epoch, and the minute holding that time is
  one of the window's minutes: a window of length L ending at --at covers the
  L / 1 min whole minutes whose last contains --at.

tally also refuses, by design, events stamped more than the late limit before
or the clock skew after their arrival, and (after adoption) records that
arrived before count-from unless the backfill counted them; events the stream
has not committed yet (an open tumbling window) are not counted either. Audit
a window that ended a few minutes ago (--at) so that only real discrepancies
remain.

Without --index it Scans the whole table in parallel segments (--segments),
filtered to the counters and the window's times (the filter trims what is sent,
not what is read: a Scan reads, and bills, the whole table). Exit status 0
when every counter agrees, 1 on any difference, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from decimal import ROUND_FLOOR, Decimal, InvalidOperation
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from rich.console import Console
from rich.table import Table

from tally.core.settings import Settings, SettingsError
from tally.dynamo import CountsTable
from tally.local.aws import ArgumentParser, add_table_arguments, client, resolve_tables
from tally.local.stack_outputs import StackOutputsError
from tally.query import count_windows

MINUTE_MS = 60_000
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
DEFAULT_SEGMENTS = 4
MAX_FILTER_VALUES = 100  # DynamoDB's limit on the operands of IN
_LENGTH = re.compile(r"^(\d+)([mhd])$")
_LENGTH_MINUTES = {"m": 1, "h": 60, "d": 1440}


class UsageError(Exception):
    """Reported in one line, exit status 2."""


def parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("counters", nargs="+", metavar="COUNTER", help="counter names")
    parser.add_argument("--window", default="24h", help="window length: 90m, 24h, 7d (default 24h)")
    parser.add_argument("--at", help="ISO-8601 end of the window, with an offset (default now)")
    parser.add_argument("--segments", type=int, default=DEFAULT_SEGMENTS, help="parallel Scan segments (default 4)")
    parser.add_argument("--index", help="Query this index (partition key: the counter attribute) instead of a Scan")
    parser.add_argument("--json", action="store_true", help="one JSON object per counter and line")
    add_table_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    argument_parser = parser()
    args = argument_parser.parse_args(argv)
    try:
        rows = audit(args)
    except UsageError as error:
        print(f"{argument_parser.prog}: error: {error}", file=sys.stderr)
        return 2
    show(rows, args.json)
    return 0 if all(row["difference"] == 0 for row in rows) else 1


def audit(args: argparse.Namespace) -> list[dict[str, Any]]:
    counters = list(dict.fromkeys(args.counters))
    if len(counters) > MAX_FILTER_VALUES:
        raise UsageError(f"at most {MAX_FILTER_VALUES} counters at a time")
    if args.segments < 1:
        raise UsageError("--segments must be at least 1")
    minutes = window_minutes(args.window)
    at_ms = instant_ms(args.at) if args.at else int(datetime.now(UTC).timestamp() * 1000)
    last_minute = at_ms // MINUTE_MS
    first_minute = last_minute - minutes + 1
    try:
        settings = Settings.from_env()
        tables = resolve_tables(args)
        dynamodb = client("dynamodb")
        answers = count_windows(
            CountsTable(dynamodb, tables.counts, settings), counters, length_ms=minutes * MINUTE_MS, at_ms=at_ms,
            consistent=True,
        )
        attributes = (settings.counter_attribute, settings.time_attribute)
        if args.index:
            items = query_index(dynamodb, tables.events, args.index, counters, attributes, first_minute, last_minute)
        else:
            items = parallel_scan(dynamodb, tables.events, args.segments, counters, attributes, first_minute, last_minute)
        recount = recount_items(items, counters, attributes, first_minute, last_minute)
    except (SettingsError, StackOutputsError, ValueError) as error:
        raise UsageError(str(error)) from None
    except ClientError as error:
        detail = error.response.get("Error", {})
        raise UsageError(f"{error.operation_name}: {detail.get('Code')}: {detail.get('Message')}") from None
    except BotoCoreError as error:
        raise UsageError(str(error)) from None
    start, end = _iso(first_minute * MINUTE_MS), _iso((last_minute + 1) * MINUTE_MS)
    return [
        {
            "counter": answer.counter,
            "start": start,
            "end": end,
            "tally": answer.total,
            "recount": recount[answer.counter],
            "difference": answer.total - recount[answer.counter],
        }
        for answer in answers
    ]


def window_minutes(text: str) -> int:
    match = _LENGTH.match(text.strip())
    if not match or int(match.group(1)) == 0:
        raise UsageError(f"--window must look like 90m, 24h or 7d, got {text!r}")
    return int(match.group(1)) * _LENGTH_MINUTES[match.group(2)]


def instant_ms(text: str) -> int:
    moment = _iso_instant(text)
    if moment is None:
        raise UsageError(f"--at must be ISO-8601 with a UTC offset, got {text!r}")
    return moment


def event_minute(value: Any) -> int | None:
    """The rule's reading of a time attribute (plain boto3 value): its minute since the epoch, or None."""
    if isinstance(value, str):
        ms = _iso_instant(value)
    elif isinstance(value, Decimal) and value.is_finite():
        ms = int(value.to_integral_value(rounding=ROUND_FLOOR))
    else:
        return None
    return None if ms is None or ms < 0 else ms // MINUTE_MS


def recount_items(
    items: Iterable[dict[str, Any]],
    counters: list[str],
    attributes: tuple[str, str],
    first_minute: int,
    last_minute: int,
) -> Counter[str]:
    """Apply the rule to raw items (DynamoDB JSON): how many count for each counter."""
    counter_attribute, time_attribute = attributes
    wanted = set(counters)
    found: Counter[str] = Counter({counter: 0 for counter in counters})
    for item in items:
        name = item.get(counter_attribute, {}).get("S")
        if name not in wanted:
            continue
        raw_time = item.get(time_attribute, {})
        try:
            value = Decimal(raw_time["N"]) if "N" in raw_time else raw_time.get("S")
        except InvalidOperation:
            continue
        minute = event_minute(value)
        if minute is not None and first_minute <= minute <= last_minute:
            found[name] += 1
    return found


def _filter(counters: list[str], attributes: tuple[str, str], first_minute: int, last_minute: int) -> dict[str, Any]:
    """Only items of these counters whose time is a number in the window or any string (checked client-side)."""
    names = {"#c": attributes[0], "#t": attributes[1]}
    values: dict[str, Any] = {f":c{index}": {"S": counter} for index, counter in enumerate(counters)}
    values.update(
        {
            ":lo": {"N": str(first_minute * MINUTE_MS)},
            ":end": {"N": str((last_minute + 1) * MINUTE_MS)},
            ":n": {"S": "N"},
            ":s": {"S": "S"},
        }
    )
    expression = (
        f"#c IN ({', '.join(f':c{index}' for index in range(len(counters)))}) AND "
        "((attribute_type(#t, :n) AND #t >= :lo AND #t < :end) OR attribute_type(#t, :s))"
    )
    return {
        "FilterExpression": expression,
        "ProjectionExpression": "#c, #t",
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
    }


def parallel_scan(
    dynamodb: Any, table: str, segments: int, counters: list[str], attributes: tuple[str, str], first: int, last: int
) -> list[dict[str, Any]]:
    request = {"TableName": table, "TotalSegments": segments, "ConsistentRead": True}
    request.update(_filter(counters, attributes, first, last))

    def segment(number: int) -> list[dict[str, Any]]:
        return list(_pages(dynamodb.scan, {**request, "Segment": number}))

    with ThreadPoolExecutor(max_workers=segments) as pool:
        return [item for items in pool.map(segment, range(segments)) for item in items]


def query_index(
    dynamodb: Any, table: str, index: str, counters: list[str], attributes: tuple[str, str], first: int, last: int
) -> list[dict[str, Any]]:
    """Query an index whose partition key is the counter attribute; its sort key narrows the times if numeric."""
    description = dynamodb.describe_table(TableName=table)["Table"]
    indexes = description.get("GlobalSecondaryIndexes", []) + description.get("LocalSecondaryIndexes", [])
    schema = next((entry["KeySchema"] for entry in indexes if entry["IndexName"] == index), None)
    if schema is None:
        raise UsageError(f"table {table!r} has no index {index!r}")
    keys = {key["KeyType"]: key["AttributeName"] for key in schema}
    if keys.get("HASH") != attributes[0]:
        raise UsageError(f"index {index!r} must have the counter attribute {attributes[0]!r} as its partition key")
    types = {entry["AttributeName"]: entry["AttributeType"] for entry in description["AttributeDefinitions"]}
    numeric_sort = keys.get("RANGE") == attributes[1] and types.get(attributes[1]) == "N"
    items = []
    for counter in counters:
        request: dict[str, Any] = {
            "TableName": table,
            "IndexName": index,
            "ProjectionExpression": "#c, #t",
            "ExpressionAttributeNames": {"#c": attributes[0], "#t": attributes[1]},
            "ExpressionAttributeValues": {":c": {"S": counter}},
            "KeyConditionExpression": "#c = :c",
        }
        if numeric_sort:
            request["KeyConditionExpression"] += " AND #t BETWEEN :lo AND :hi"
            request["ExpressionAttributeValues"].update(
                {":lo": {"N": str(first * MINUTE_MS)}, ":hi": {"N": str((last + 1) * MINUTE_MS - 0.001)}}
            )
        items.extend(_pages(dynamodb.query, request))
    return items


def _pages(operation: Any, request: dict[str, Any]) -> Iterator[dict[str, Any]]:
    request = dict(request)
    while True:
        response = operation(**request)
        yield from response.get("Items", [])
        if "LastEvaluatedKey" not in response:
            return
        request["ExclusiveStartKey"] = response["LastEvaluatedKey"]


def show(rows: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        for row in rows:
            print(json.dumps(row))
        return
    table = Table(title=f"audit of [{rows[0]['start']}, {rows[0]['end']})")
    for column in ("counter", "tally", "recount", "difference", ""):
        table.add_column(column, justify="left" if column == "counter" else "right")
    for row in rows:
        verdict = "[green]EQUAL" if row["difference"] == 0 else "[red]DIFFERENT"
        table.add_row(row["counter"], f"{row['tally']:,}", f"{row['recount']:,}", f"{row['difference']:+,}", verdict)
    Console().print(table)


def _iso_instant(text: str) -> int | None:
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    if moment.utcoffset() is None:
        return None
    return (moment - EPOCH) // timedelta(milliseconds=1)


def _iso(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%MZ")


if __name__ == "__main__":
    sys.exit(main())
