"""Recount a window straight from the events table and compare it with tally's answer.

    .venv/bin/python scripts/audit.py orders refunds --window 24h --at 2026-11-23T09:00Z
    .venv/bin/python scripts/audit.py orders --index by-counter          # Query a GSI keyed by the counter attribute
    .venv/bin/python scripts/audit.py --rules refunds --window 7d        # every counter of one rule of TALLY_RULES
    .venv/bin/python scripts/audit.py orders --series day --tz America/New_York --from 2026-01-01 --to 2026-11-01

The operator's independent proof: the recount shares none of tally's parsing
of items, bucketing or window code (only the reading of --window and --at,
which tally is asked with too, and of a rule's retiredAt, an instant read like
--at). The rule it applies, stated once:

  An item counts for counter C once per rule that names C for it, when its
  time attribute is a number of epoch milliseconds (a fraction is dropped) or
  an ISO-8601 string with a UTC offset, not before the epoch, and the minute
  holding that time is one of the window's minutes: a window of length L
  ending at --at covers the L / 1 min whole minutes whose last contains the
  millisecond before --at (an --at on a minute boundary is exclusive).
  Without TALLY_RULES the one rule is: the counter attribute is the string C.
  With TALLY_RULES (JSON), a rule names C when every "when" condition holds
  (equals / oneOf: strings to strings, numbers to numbers, booleans to
  booleans; exists: the attribute is there or not), its counter template with
  each {attribute} replaced by the item's string (non-empty) or number (in
  plain notation, 5.0 as 5) spells C, for a summing rule, its "sum"
  attribute is a number with at most 18 digits before the point and 8 after,
  for a histogram rule, its "histogram" attribute is 0 or a number whose
  magnitude is at least 1E-9 and below 1E18, and, for a distinct rule, its
  "distinct" attribute is a non-empty string or a finite number.
  A rule with "becomes" names C when those conditions hold too; a rule with
  its own "time" attribute reads the time there.

What the audit can recount: the table holds each item as it is now, not its
history. A rule counting transitions ("becomes") is recounted from the items
that are in that state now, by the rule's time (say items now "done" with
"doneAt" in the window): that equals tally's count when items do not leave
the state again, are not deleted, and (for a rule that does not see INSERTs)
were not inserted in it. Rules counting deletions ("on": "REMOVE"), every
change ("on": "MODIFY" without "becomes") or at the record's arrival
("time": "@arrival") cannot be recounted from the table: a counter one of
them may write is shown as not recountable, with the rule's name, and left out
of the exit status (when no counter asked for can be recounted, the audit says
so and exits 2).

--rules NAME... recounts only those rules (named as tally names them: a rule's
"name", else its template when that is a name, else rule-N for the Nth; the
Scan's filter asks only for their attributes) and compares the counters they
write: the counters named before --rules, each of which one of them must be
able to write, or, with none, every counter their recount finds in the window
and every counter tally's counter directory lists on the window's days that
their templates can render. tally keeps one total per counter: a counter
another rule may write too is recounted with every rule that may write it, and
the output says so. A rule with its own countFrom counts its history only once
a backfill of that rule alone counted it (scripts/backfill.py --rules NAME):
the audit assumes it did. The audit sees an item's event time, not its
arrival: a window ending after the retiredAt of a rule that may write a
counter it covers is refused (with or without --rules); audit with --at at or
before it.

tally also refuses, by design, events whose hour was past the hour retention
at their arrival or stamped more than the clock skew after it, and (after adoption) records that
arrived before count-from unless the backfill counted them; events the stream
has not committed yet (an open tumbling window) are not counted either. Audit
a window that ended a few minutes ago (--at) so that only real discrepancies
remain.

Without --index it Scans the whole table in parallel segments (--segments),
filtered to the counters and the window's times (the filter trims what is sent,
not what is read: a Scan reads, and bills, the whole table). With --stack
naming a stack deployed with backfillExports, the segments are Scanned in the
account, one Lambda worker each (the stack's audit state machine), which write
the items the filter lets through to S3; this command reads those and
recounts them here (--here Scans from this machine instead). Give a large
table many segments there (--segments 200). Exit status 0
when every counter agrees, 1 on any difference, 2 on bad input; the last
line says which: VERDICT: NO DIFFERENCE, or VERDICT: DIFFERENCE: N counters
differ in M periods (on stderr with --json, whose stdout is one object a line).

--series day|month recounts, instead of one window, each day or month of
--tz (an IANA zone, default UTC) from --from to --to (YYYY-MM-DD, the end
excluded; the first and last periods cut to them, as tally's calendar cuts
them): the items whose time lies between that zone's local midnights,
against tally's calendar series of the same periods (Reader.calendar: closed
days and months where kept, hours elsewhere), one row per counter and period.
The table shows each counter's periods, totals and how many differ, then the
periods that differ; --json prints every period. A range tally's calendar
refuses (a zone off the whole hour, a range before what it keeps, missing
days) is refused the same way, before any Scan.

--repair recounts, instead of a window, each bucket that an overlap left
unresolved (its records had left the stream: the function's log, the
ItemsUnresolved alarm and every read that touches it say so), of the named
counters or of all, and adds what it lacks in one transaction that clears
its marks, if every lane still holds what was read. A bucket lacking more
than its marks allow, or less than nothing, is left as it is, with the
reason: run it once the stream has caught up. Then, the same way, each day
and month (every zone) a close wrote from such buckets, which reads say may
be low: recounted between its zone's local midnights, after the hours it
was closed from (a month after its days); one closed from a bucket left
unresolved waits for it. Each such day and month found is recorded, so a
later run finds it again (one closed from an hour whose repair came first
is found when its counter is named). Run again, it repairs nothing twice.
Exit status 0 when nothing is left unresolved, 1 otherwise.
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import json
import os
import re
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_FLOOR, Context, Decimal, InvalidOperation
from typing import Any
from zoneinfo import ZoneInfo

from boto3.dynamodb.types import TypeDeserializer
from botocore.exceptions import ClientError
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tally.core.amounts import units_of
from tally.core.directory import days_between
from tally.core.histograms import bin_of
from tally.core.instants import FORMS as INSTANT_FORMS
from tally.core.instants import InvalidInstant, parse_instant
from tally.core.repair import Recount, bucket_minutes, correction, period_record, repair_rank, waiting_on
from tally.core.settings import Settings, SettingsError
from tally.core.windows import InvalidWindow, parse_length
from tally.local.aws import ArgumentParser, add_table_arguments, client, resolve_tables
from tally.local.cli import ScriptError, entry_point, explain
from tally.local.cli import console as cli_console
from tally.parallel_audit import audit_work_prefix, gathered_items
from tally.parallel_backfill import BackfillConfig
from tally.stack_outputs import AUDIT_STATE_MACHINE_OUTPUT, EXPORTS_OUTPUT, StackOutputsError, stack_outputs
from tally.dynamo.counts_table import CountsTable
from tally.reader import Reader

stderr = cli_console(stderr=True)

MINUTE_MS = 60_000
MAX_COUNTER_LENGTH = 255
RULES_VARIABLE = "TALLY_RULES"
_TEMPLATE_TOKEN = re.compile(r"\{\{|\}\}|\{([^{}]+)\}|[^{}]+")
_RULE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/-]*")  # what tally accepts as a rule's name
MAX_RULE_NAME_LENGTH = 64
_deserializer = TypeDeserializer()
_WIDE = Context(prec=100)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
DEFAULT_SEGMENTS = 4
MAX_FILTER_VALUES = 100  # DynamoDB's limit on the operands of IN
SHOWN_PERIODS = 40  # periods that differ listed in the table (--json: all)


def parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("counters", nargs="*", metavar="COUNTER", help="counter names (with --repair: all when none)")
    parser.add_argument("--window", help="window length: 90m, 24h, 7d, 1d12h (default 24h)")
    parser.add_argument(
        "--at",
        help="end of the window: ISO-8601 with an offset, or epoch seconds; exclusive on a minute boundary (default now)",
    )
    parser.add_argument("--segments", type=int, default=DEFAULT_SEGMENTS, help="parallel Scan segments (default 4)")
    parser.add_argument(
        "--here", action="store_true", help="Scan from this machine even when --stack has the audit's Scan in the account"
    )
    parser.add_argument(
        "--rules",
        nargs="+",
        metavar="NAME",
        help="recount only these rules of TALLY_RULES: their counters (those named before --rules, or all they write)",
    )
    parser.add_argument(
        "--series", choices=("day", "month"),
        help="recount each day or month of --tz from --from to --to instead of one window, against tally's calendar",
    )
    parser.add_argument("--tz", help="with --series: the IANA time zone of its days and months (default UTC)")
    parser.add_argument("--from", dest="start", metavar="DATE", help="with --series: the first day, YYYY-MM-DD")
    parser.add_argument("--to", dest="end", metavar="DATE", help="with --series: the day after the last, YYYY-MM-DD")
    parser.add_argument("--index", help="Query this index (partition key: the counter attribute) instead of a Scan")
    parser.add_argument("--json", action="store_true", help="one JSON object per counter (bucket with --repair) and line")
    parser.add_argument(
        "--repair", action="store_true",
        help="recount and repair the buckets an overlap left unresolved and the days and months closed from them, then exit",
    )
    add_table_arguments(parser)
    return parser


@entry_point
def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.repair and args.rules:
        raise ScriptError("--repair recounts the unresolved buckets of counters; name counters, not --rules")
    if args.repair:
        repaired = repair(args)
        show_repairs(repaired, args.json)
        return 0 if all(row["verdict"] == "repaired" for row in repaired) else 1
    if args.series is None and (args.tz or args.start or args.end):
        raise ScriptError("--tz, --from and --to go with --series day|month")
    if args.series is not None:
        if args.window or args.at or args.rules:
            raise ScriptError("--series audits the periods --from --to of the counters named: give no --window, --at or --rules")
        if not args.counters:
            raise ScriptError("name at least one counter to audit by --series")
        rows = audit_series(args)
        show_series(rows, args.json)
        print(verdict(rows), file=sys.stderr if args.json else sys.stdout)
        return 0 if all(row["difference"] in (0, None) for row in rows) else 1
    if not args.counters and not args.rules:
        raise ScriptError("name at least one counter to audit (or --rules, or --repair)")
    rows = audit(args)
    show(rows, args.json)
    # The last line, on stdout (stderr with --json, whose stdout is one object a line).
    print(verdict(rows), file=sys.stderr if args.json else sys.stdout)
    return 0 if all(row["difference"] in (0, None) for row in rows) else 1


def verdict(rows: list[dict[str, Any]]) -> str:
    """The audit in one line: ``VERDICT: NO DIFFERENCE``, or how many counters differ, in how many periods (a window
    is one period; a series, one per period)."""
    differing = [row for row in rows if row["difference"] not in (0, None)]
    if not differing:
        return "VERDICT: NO DIFFERENCE"
    counters, periods = len({row["counter"] for row in differing}), len(differing)
    return (
        f"VERDICT: DIFFERENCE: {counters} counter{'s' if counters != 1 else ''} "
        f"differ{'s' if counters == 1 else ''} in {periods} period{'s' if periods != 1 else ''}"
    )


def audit(args: argparse.Namespace) -> list[dict[str, Any]]:
    counters = list(dict.fromkeys(args.counters))
    if len(counters) > MAX_FILTER_VALUES:
        raise ScriptError(f"at most {MAX_FILTER_VALUES} counters at a time")
    if args.segments < 1:
        raise ScriptError("--segments must be at least 1")
    minutes = window_minutes(args.window or "24h")
    at_ms = instant_ms(args.at) if args.at else int(datetime.now(UTC).timestamp() * 1000)
    last_minute = (at_ms - 1) // MINUTE_MS
    first_minute = last_minute - minutes + 1
    end_ms = (last_minute + 1) * MINUTE_MS
    try:
        settings = Settings.from_env()
        rules_text = os.environ.get(RULES_VARIABLE, "").strip()
        if args.rules and not rules_text:
            raise ScriptError(f"--rules names rules of {RULES_VARIABLE}, which is not set (the classic rule has no name)")
        rules = read_rules(rules_text) if rules_text else [classic_rule(settings.counter_attribute)]
        if args.index and rules_text:
            raise ScriptError(f"--index reads the classic counter attribute; with {RULES_VARIABLE} audit by Scan")
        named = named_rules(rules, args.rules) if args.rules else None
        if named is not None:
            _written_by(counters, named)
        tables = resolve_tables(args)
        dynamodb = client("dynamodb")
        reader = Reader(tables.counts, client=dynamodb, settings=settings)
        if named is not None and not counters:
            refuse_retired(named, end_ms)
            recounting = [rule for rule in rules if any(rule.may_share_with(other) for other in named)]
        else:  # a counter named by a rule of --rules and another is recounted with both: tally keeps one total
            writers = [rule for rule in rules if any(rule.could_name(counter) for counter in counters)]
            refuse_retired(writers, end_ms)
            recounting = writers if named is not None else rules

        def tally_answers(names: list[str]) -> list[Any]:
            at = EPOCH + timedelta(milliseconds=at_ms)
            return reader.count_many(names, window=timedelta(minutes=minutes), at=at, consistent=True, align=False)

        answers = tally_answers(counters) if counters else []
        blocked = {counter: _blocked(counter, rules) for counter in counters}
        if counters and all(blocked.values()):
            raise ScriptError(f"nothing to recount: {blocked[counters[0]]}")
        recounting = [rule for rule in recounting if not rule.unrecountable]
        attributes = (settings.counter_attribute, settings.time_attribute)
        if args.index:
            items = query_index(dynamodb, tables.events, args.index, counters, attributes, first_minute, last_minute)
        elif not recounting:  # only rules the table cannot recount: no item can tell anything
            items = []
        else:
            condition = scan_filter(counters, recounting, not rules_text, settings.time_attribute, first_minute, last_minute)
            in_account = _audit_state_machine(args.stack) if args.stack and not args.here else None
            if in_account:
                items = scan_in_account(client("stepfunctions"), client("s3"), *in_account, args.segments, condition)
            else:
                items = scan_with_progress(dynamodb, tables.events, args.segments, condition)
        if named is not None and not counters:
            found, recount = rule_counters(items, named, recounting, settings.time_attribute, first_minute, last_minute)
            listed = directory_counters(reader, named, first_minute * MINUTE_MS, end_ms)
            counters = sorted(set(found) | set(listed))
            if not counters:
                stderr.print(
                    f"no counter of {_listed(rule.name for rule in named)} in [{_iso(first_minute * MINUTE_MS)}, "
                    f"{_iso(end_ms)}): nothing to compare",
                    highlight=False,
                )
                return []
            refuse_retired([rule for rule in rules if any(rule.could_name(counter) for counter in counters)], end_ms)
            blocked = {counter: _blocked(counter, rules) for counter in counters}
            if all(blocked.values()):
                raise ScriptError(f"nothing to recount: {blocked[counters[0]]}")
            answers = tally_answers(counters)
        else:
            recount = recount_items(items, counters, recounting, settings.time_attribute, first_minute, last_minute)
    except (SettingsError, StackOutputsError, ValueError) as error:
        raise ScriptError(str(error)) from None
    except ClientError as error:
        if explain(error) is not None:  # a missing table, refused credentials: the shared edge says it
            raise
        detail = error.response.get("Error", {})
        raise ScriptError(f"{error.operation_name}: {detail.get('Code')}: {detail.get('Message')}") from None
    start, end = _iso(first_minute * MINUTE_MS), _iso(end_ms)
    rows = [
        {
            "counter": answer.counter,
            "start": start,
            "end": end,
            "tally": answer.total,
            "recount": None if blocked[answer.counter] else recount[answer.counter],
            "difference": None if blocked[answer.counter] else answer.total - recount[answer.counter],
            "not_recountable": blocked[answer.counter],
        }
        for answer in answers
    ]
    if named is not None:
        names = {rule.name for rule in named}
        for row in rows:  # tally keeps one total per counter, whichever rules wrote it
            row["shared_with"] = [
                rule.name for rule in rules if rule.name not in names and rule.could_name(row["counter"])
            ]
    return rows


def audit_series(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Each counter's periods (--series) of --tz from --from to --to: tally's calendar series, and the recount of
    each period from the items whose time lies in it, that zone's local midnights (the first and the last
    period cut to the range, as tally cuts them). One row per counter and period."""
    counters = list(dict.fromkeys(args.counters))
    if len(counters) > MAX_FILTER_VALUES:
        raise ScriptError(f"at most {MAX_FILTER_VALUES} counters at a time")
    if args.segments < 1:
        raise ScriptError("--segments must be at least 1")
    try:
        settings = Settings.from_env()
        rules_text = os.environ.get(RULES_VARIABLE, "").strip()
        rules = read_rules(rules_text) if rules_text else [classic_rule(settings.counter_attribute)]
        if args.index and rules_text:
            raise ScriptError(f"--index reads the classic counter attribute; with {RULES_VARIABLE} audit by Scan")
        tables = resolve_tables(args)
        dynamodb = client("dynamodb")
        reader = Reader(tables.counts, client=dynamodb, settings=settings)
        # tally's answer first: it checks the zone and the dates (one line, exit status 2) before any Scan.
        answers = reader.calendar(counters, args.series, tz=args.tz, start=args.start, end=args.end, consistent=True)
        starts = period_starts(args.series, args.tz or "UTC", answers[0].points[0].start.date(), answers[0].points[-1].end.date())
        first_minute, last_minute = starts[0] // MINUTE_MS, starts[-1] // MINUTE_MS - 1
        refuse_retired([rule for rule in rules if any(rule.could_name(counter) for counter in counters)], starts[-1])
        blocked = {counter: _blocked(counter, rules) for counter in counters}
        if all(blocked.values()):
            raise ScriptError(f"nothing to recount: {blocked[counters[0]]}")
        recounting = [rule for rule in rules if not rule.unrecountable]
        attributes = (settings.counter_attribute, settings.time_attribute)
        if args.index:
            items = query_index(dynamodb, tables.events, args.index, counters, attributes, first_minute, last_minute)
        else:
            condition = scan_filter(counters, recounting, not rules_text, settings.time_attribute, first_minute, last_minute)
            in_account = _audit_state_machine(args.stack) if args.stack and not args.here else None
            if in_account:
                items = scan_in_account(client("stepfunctions"), client("s3"), *in_account, args.segments, condition)
            else:
                items = scan_with_progress(dynamodb, tables.events, args.segments, condition)
    except (SettingsError, StackOutputsError, ValueError) as error:
        raise ScriptError(str(error)) from None
    except ClientError as error:
        if explain(error) is not None:
            raise
        detail = error.response.get("Error", {})
        raise ScriptError(f"{error.operation_name}: {detail.get('Code')}: {detail.get('Message')}") from None
    minutes = [start // MINUTE_MS for start in starts]
    recount: Counter[tuple[str, int]] = Counter()
    wanted = set(counters)
    for name, rule, item in counted(items, recounting, settings.time_attribute, first_minute, last_minute):
        if name in wanted:
            minute = event_minute(item.get(rule.time or settings.time_attribute))
            recount[(name, bisect.bisect_right(minutes, minute) - 1)] += 1  # type: ignore[arg-type]
    rows = []
    for answer in answers:
        why = blocked[answer.counter]
        for index, point in enumerate(answer.points):
            again = recount[(answer.counter, index)]
            rows.append({
                "counter": answer.counter,
                "start": point.start.isoformat(),
                "end": point.end.isoformat(),
                "tally": point.count,
                "recount": None if why else again,
                "difference": None if why else point.count - again,
                "not_recountable": why,
            })
    return rows


def period_starts(series: str, zone_name: str, first: date, end: date) -> list[int]:
    """The first instant (epoch ms) of each day or month of ``zone_name`` from ``first`` to ``end`` (excluded), the
    first cut to ``first``, and last the instant ``end`` begins: the audit's own reading of local midnights (a
    midnight a DST change skips is read with the offset before the change, the instant the clocks jump)."""
    zone = ZoneInfo(zone_name)
    days = [first]
    while days[-1] < end:
        day = days[-1]
        following = day + timedelta(days=1) if series == "day" else date(day.year + day.month // 12, day.month % 12 + 1, 1)
        days.append(min(following, end))
    return [(datetime.combine(day, datetime.min.time(), tzinfo=zone) - EPOCH) // timedelta(milliseconds=1) for day in days]


def _blocked(counter: str, rules: list[CounterRule]) -> str | None:
    """Why ``counter`` cannot be recounted: the first rule that may write it and that the table cannot recount."""
    return next((rule.unrecountable for rule in rules if rule.unrecountable and rule.could_name(counter)), None)


def named_rules(rules: list[CounterRule], names: list[str]) -> list[CounterRule]:
    """The rules of these names, in the order of TALLY_RULES; a ValueError names the rules there are."""
    known = [rule.name for rule in rules]
    unknown = [name for name in dict.fromkeys(names) if name not in known]
    if unknown:
        raise ValueError(f"--rules: no rule named {unknown[0]!r}; the rules are {_listed(known)}")
    return [rule for rule in rules if rule.name in names]


def _written_by(counters: list[str], named: list[CounterRule]) -> None:
    """Refuse a counter none of the named rules can write."""
    for counter in counters:
        if not any(rule.could_name(counter) for rule in named):
            raise ValueError(f"counter {counter!r} is written by none of {_listed(rule.name for rule in named)}")


def refuse_retired(rules: Iterable[CounterRule], end_ms: int) -> None:
    """Refuse a window ending after a rule's retirement: the table still holds the events tally then left."""
    for rule in rules:
        if rule.retired_ms is not None and rule.retired_ms < end_ms:
            retired = datetime.fromtimestamp(rule.retired_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            minute = _iso(rule.retired_ms // MINUTE_MS * MINUTE_MS)  # --at on a minute boundary is exclusive
            raise ValueError(
                f"rule {rule.name!r} was retired at {retired} and the window ends after it, when tally counted none "
                f"of its events: audit a window ending at or before it (--at {minute})"
            )


def rule_counters(
    items: Iterable[dict[str, Any]],
    named: list[CounterRule],
    rules: list[CounterRule],
    time_attribute: str,
    first_minute: int,
    last_minute: int,
) -> tuple[set[str], Counter[str]]:
    """The counters the named rules name for some item in the window, and how many count for each counter any
    of ``rules`` names (the named ones among them)."""
    names = {rule.name for rule in named}
    found: set[str] = set()
    recount: Counter[str] = Counter()
    for counter, rule, _ in counted(items, rules, time_attribute, first_minute, last_minute):
        recount[counter] += 1
        if rule.name in names:
            found.add(counter)
    return found, recount


def directory_counters(reader: Reader, named: list[CounterRule], start_ms: int, end_ms: int) -> list[str]:
    """The counters tally's directory lists on the window's days that one of the named rules could name."""
    prefixes: list[str] = []
    for prefix in sorted({rule.prefix for rule in named}):
        if not any(prefix.startswith(shorter) for shorter in prefixes):
            prefixes.append(prefix)
    listed = {
        counter
        for prefix in prefixes
        for counter in reader.directory.counters(prefix, days_between(start_ms, end_ms), consistent=True)[0]
    }
    return sorted(
        counter for counter in listed if not counter.startswith("#") and any(rule.could_name(counter) for rule in named)
    )


def _listed(names: Iterable[str]) -> str:
    return ", ".join(repr(name) for name in names)


def repair(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Recount each unresolved bucket of the counters asked (all when none) and repair those the recount explains:
    minutes and hours first, then the days and months a close wrote from marked children (every zone), each after
    its children."""
    try:
        settings = Settings.from_env()
        rules_text = os.environ.get(RULES_VARIABLE, "").strip()
        rules = read_rules(rules_text) if rules_text else [classic_rule(settings.counter_attribute)]
        tables = resolve_tables(args)
        dynamodb = client("dynamodb")
        table = CountsTable(dynamodb, tables.counts, settings)
        records = table.unresolved_records(set(args.counters))
        records += marked_periods(table, set(args.counters), records)
        if not records:
            stderr.print("nothing to repair: no bucket is unresolved" + (" for those counters" if args.counters else ""))
            return []
        by_bucket: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for record in records:
            by_bucket.setdefault((record["counter"]["S"], record["bucket"]["S"]), []).append(record)
        spans = {key: bucket_minutes(key[1]) for key in by_bucket}
        counters = sorted({counter for counter, _ in by_bucket})
        first, last = min(span[0] for span in spans.values()), max(span[1] for span in spans.values())
        condition = scan_filter(counters, rules, not rules_text, settings.time_attribute, first, last)
        items = scan_with_progress(dynamodb, tables.events, max(1, args.segments), condition)
        repair_id = f"repair {datetime.now(UTC).isoformat(timespec='seconds')} {uuid.uuid4().hex[:8]}"
        rows = []
        left: dict[str, set[str]] = {}  # by counter, the buckets left unresolved so far: their periods wait
        for counter, bucket in sorted(by_bucket, key=lambda key: (repair_rank(key[1]), key)):
            truth = recount_bucket(items, counter, rules, settings.time_attribute, *spans[(counter, bucket)])
            row = _repair_one(table, counter, bucket, truth, by_bucket[(counter, bucket)], repair_id, left.get(counter, set()))
            if row["verdict"] != "repaired":
                left.setdefault(counter, set()).add(bucket)
            rows.append(row)
        return rows
    except (SettingsError, StackOutputsError, ValueError) as error:
        raise ScriptError(str(error)) from None
    except ClientError as error:
        if explain(error) is not None:
            raise
        detail = error.response.get("Error", {})
        raise ScriptError(f"{error.operation_name}: {detail.get('Code')}: {detail.get('Message')}") from None


def marked_periods(table: CountsTable, asked: set[str], records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records of the days and months a close marked (no close writes one), of the counters asked and those
    with unresolved records, put before anything is repaired: a run stopped, or a period left unresolved once
    the hours' records are gone, is found again by the next run."""
    recorded = {(record["counter"]["S"], record["bucket"]["S"]) for record in records}
    found = [
        period_record(counter, period, marks, ttl)
        for counter in sorted(asked | {counter for counter, _ in recorded})
        for period, (marks, ttl) in sorted(table.marked_periods(counter).items())
        if (counter, period) not in recorded
    ]
    table.put_records(found)
    return found


REPAIR_ATTEMPTS = 5  # a lane changed between the read and the transaction: read and judge again


def _repair_one(
    table: CountsTable,
    counter: str,
    bucket: str,
    truth: Recount,
    records: list[dict[str, Any]],
    repair_id: str,
    left: Collection[str] = (),
) -> dict[str, Any]:
    """Repair one bucket, unless it is a period closed from a child ``left`` unresolved by this run."""
    row: dict[str, Any] = {"counter": counter, "bucket": bucket, "recount": truth.count}
    for _ in range(REPAIR_ATTEMPTS):
        lanes = table.bucket_lanes(counter, bucket)
        fix = waiting_on(lanes, left) or correction(lanes, truth)
        row["stored"] = sum(lane.count for lane in lanes)
        if isinstance(fix, str):
            return {**row, "added": 0, "verdict": "left unresolved", "why": fix}
        if table.repair_bucket(counter, bucket, lanes, fix, records, repair_id):
            return {**row, "added": fix.count, "verdict": "repaired", "why": f"lacked {fix.count} of at most {fix.bound}"}
    return {**row, "added": 0, "verdict": "left unresolved", "why": f"its lanes kept changing over {REPAIR_ATTEMPTS} tries"}


def recount_bucket(
    items: Iterable[dict[str, Any]], counter: str, rules: list[CounterRule], time_attribute: str, first: int, last: int
) -> Recount:
    """A bucket's events, their sum and histogram bins, from raw items, by the audit's reading of the rules; the
    sums and bins in tally's units and bins (the repair adds them to tally's items)."""
    count, units, bins, summing = 0, 0, Counter[str](), False
    for name, rule, item in counted(items, rules, time_attribute, first, last):
        if name != counter:
            continue
        count += 1
        if rule.sum is not None:
            summing = True
            units += units_of(item[rule.sum])
        if rule.histogram is not None:
            bins[bin_of(item[rule.histogram])] += 1
    return Recount(count, units if summing else None, dict(bins))


def printed_as_json(rows: list[dict[str, Any]], as_json: bool) -> bool:
    """Print the rows one JSON object a line when asked (``--json``); whether it did."""
    if as_json:
        for row in rows:
            print(json.dumps(row))
    return as_json


def show_repairs(rows: list[dict[str, Any]], as_json: bool) -> None:
    if printed_as_json(rows, as_json) or not rows:
        return
    table = Table(title="repair of unresolved buckets")
    for column in ("counter", "bucket", "stored", "recount", "added", ""):
        table.add_column(column, justify="left" if column in ("counter", "bucket") else "right")
    for row in rows:
        verdict = "[green]REPAIRED" if row["verdict"] == "repaired" else "[red]LEFT UNRESOLVED"
        table.add_row(row["counter"], row["bucket"], f"{row['stored']:,}", f"{row['recount']:,}", f"{row['added']:+,}", verdict)
    cli_console().print(table)
    for row in rows:
        if row["verdict"] != "repaired":
            stderr.print(f"{row['counter']} {row['bucket']}: {row['why']}", highlight=False)


def window_minutes(text: str) -> int:
    try:
        return parse_length(text) // MINUTE_MS
    except InvalidWindow as error:
        raise ScriptError(f"--window: {error}") from None


def instant_ms(text: str) -> int:
    try:
        return parse_instant(text)
    except InvalidInstant as error:
        raise ScriptError(f"--at {error}") from None


def event_minute(value: Any) -> int | None:
    """The rule's reading of a time attribute (plain boto3 value): its minute since the epoch, or None."""
    if isinstance(value, str):
        ms = _iso_instant(value)
    elif isinstance(value, Decimal) and value.is_finite():
        ms = int(value.to_integral_value(rounding=ROUND_FLOOR))
    else:
        return None
    return None if ms is None or ms < 0 else ms // MINUTE_MS


@dataclass(frozen=True)
class CounterRule:
    """The audit's own reading of one counter rule: template pieces, conditions, summed and binned attributes, time.

    ``unrecountable`` says why the table cannot recount what the rule counts (None when it can).
    """

    pieces: tuple[tuple[str, str], ...]  # ("text", literal) or ("attribute", name)
    when: tuple[tuple[str, str, Any], ...] = ()  # (attribute, "equals" | "oneOf" | "exists", operand), becomes included
    sum: str | None = None
    strings_only: bool = False
    time: str | None = None  # its own time attribute; None: the table-wide one
    unrecountable: str | None = None
    histogram: str | None = None
    distinct: str | None = None
    name: str = ""  # as tally names it: its "name", else its template when that is a name, else rule-N
    retired_ms: int | None = None  # its "retiredAt": tally counts no record arriving then or later

    @property
    def attributes(self) -> list[str]:
        names = [name for kind, name in self.pieces if kind == "attribute"] + [name for name, _, _ in self.when]
        return list(dict.fromkeys(names + [name for name in (self.sum, self.histogram, self.distinct) if name]))

    def could_name(self, counter: str) -> bool:
        """Whether some item could make this rule name ``counter``."""
        pattern = "".join(re.escape(value) if kind == "text" else "(.+)" for kind, value in self.pieces)
        return re.fullmatch(pattern, counter, re.DOTALL) is not None

    def may_share_with(self, other: CounterRule) -> bool:
        """Whether this rule and ``other`` might both name one counter: False only when their templates' fixed
        beginnings or endings (whole texts when fixed) tell them apart."""
        mine, theirs = _fixed_text(self.pieces), _fixed_text(other.pieces)
        if mine is not None:
            return other.could_name(mine)
        if theirs is not None:
            return self.could_name(theirs)
        heads = _fixed_end(self.pieces), _fixed_end(other.pieces)
        tails = _fixed_end(self.pieces, last=True), _fixed_end(other.pieces, last=True)
        return (heads[0].startswith(heads[1]) or heads[1].startswith(heads[0])) and (
            tails[0].endswith(tails[1]) or tails[1].endswith(tails[0])
        )

    @property
    def prefix(self) -> str:
        """The text every counter it names starts with."""
        return _fixed_end(self.pieces)

    def names(self, item: dict[str, Any]) -> str | None:
        """The counter this rule names for a decoded item, or None when it names none."""
        for attribute, kind, operand in self.when:
            if kind == "exists":
                if (attribute in item) != operand:
                    return None
            elif attribute not in item or not any(_equal(item[attribute], wanted) for wanted in operand):
                return None
        text = []
        for kind, value in self.pieces:
            if kind == "text":
                text.append(value)
                continue
            rendered = _render(item.get(value), self.strings_only)
            if rendered is None:
                return None
            text.append(rendered)
        name = "".join(text)
        if not name or len(name) > MAX_COUNTER_LENGTH or name.startswith("#"):
            return None
        if self.sum is not None and not _summable(item.get(self.sum)):
            return None
        if self.histogram is not None and not _binnable(item.get(self.histogram)):
            return None
        if self.distinct is not None and _render(item.get(self.distinct), strings_only=False) is None:
            return None  # the same values a template can render
        return name


def _fixed_text(pieces: tuple[tuple[str, str], ...]) -> str | None:
    """The one counter a template without attributes names; None for a template with some."""
    if any(kind == "attribute" for kind, _ in pieces):
        return None
    return "".join(value for _, value in pieces)


def _fixed_end(pieces: tuple[tuple[str, str], ...], last: bool = False) -> str:
    """The text before a template's first attribute (after its last one with ``last``)."""
    ordered = pieces[::-1] if last else pieces
    texts = [value for _, value in itertools.takewhile(lambda piece: piece[0] == "text", ordered)]
    return "".join(texts[::-1] if last else texts)


def classic_rule(counter_attribute: str) -> CounterRule:
    return CounterRule((("attribute", counter_attribute),), strings_only=True)


def read_rules(text: str) -> list[CounterRule]:
    """TALLY_RULES as the audit reads it; a ValueError says what it cannot read."""
    try:
        return _read_rules(text)
    except (ValueError, AttributeError, TypeError) as error:
        message = str(error)
        raise ValueError(message if message.startswith(RULES_VARIABLE) else f"{RULES_VARIABLE}: {message}") from None


def _read_rules(text: str) -> list[CounterRule]:
    raw = json.loads(text, parse_float=Decimal, parse_int=Decimal)
    if not isinstance(raw, list) or not raw:
        raise ValueError("TALLY_RULES must be a non-empty JSON list")
    rules = []
    for index, entry in enumerate(raw, start=1):
        if not isinstance(entry, dict) or not isinstance(entry.get("counter"), str):
            raise ValueError(f"TALLY_RULES: a rule without a counter template: {str(entry)[:80]}")
        when = []
        for attribute, condition in [*(entry.get("when") or {}).items(), *(entry.get("becomes") or {}).items()]:
            ((kind, operand),) = condition.items()
            when.append((attribute, kind, operand if kind != "equals" else [operand]))
        rules.append(
            CounterRule(
                _pieces(entry["counter"]),
                tuple(when),
                entry.get("sum"),
                time=entry.get("time"),
                unrecountable=_unrecountable(entry),
                histogram=entry.get("histogram"),
                distinct=entry.get("distinct"),
                name=_rule_name(index, entry),
                retired_ms=_retired_ms(index, entry),
            )
        )
    return rules


def _rule_name(index: int, entry: dict[str, Any]) -> str:
    """The name tally gives a rule: its "name"; else its template, when that is a name; else rule-N."""
    name = entry.get("name", entry["counter"])
    if isinstance(name, str) and len(name) <= MAX_RULE_NAME_LENGTH and _RULE_NAME.fullmatch(name):
        return name
    return f"rule-{index}"


def _retired_ms(index: int, entry: dict[str, Any]) -> int | None:
    """A rule's "retiredAt" (an instant as --at reads them), in epoch milliseconds."""
    raw = entry.get("retiredAt")
    if raw is None:
        return None
    try:
        if isinstance(raw, bool) or not isinstance(raw, str | Decimal):
            raise InvalidInstant(f"must be {INSTANT_FORMS}")
        return parse_instant(str(raw))
    except InvalidInstant as error:
        raise ValueError(f"rule {_rule_name(index, entry)!r}: retiredAt {error}") from None


def _unrecountable(entry: dict[str, Any]) -> str | None:
    """Why the items of the table cannot recount what a rule counts, or None."""
    name = f"rule {entry.get('name') or entry['counter']!r}"
    kinds = entry.get("on") or []
    kinds = [kinds] if isinstance(kinds, str) else kinds
    if "REMOVE" in kinds:
        return f"{name} counts deletions: deleted items are no longer in the table"
    if "MODIFY" in kinds and not entry.get("becomes"):
        return f"{name} counts every change: the table keeps no history of changes"
    if entry.get("time") == "@arrival":
        return f"{name} counts at each record's arrival: the table does not keep it"
    return None


def _pieces(template: str) -> tuple[tuple[str, str], ...]:
    pieces: list[tuple[str, str]] = []
    for match in _TEMPLATE_TOKEN.finditer(template):
        token = match.group(0)
        if token in ("{{", "}}"):
            pieces.append(("text", token[0]))
        elif match.group(1) is not None:
            pieces.append(("attribute", match.group(1)))
        else:
            pieces.append(("text", token))
    if "".join(match.group(0) for match in _TEMPLATE_TOKEN.finditer(template)) != template:
        raise ValueError(f"TALLY_RULES: unreadable counter template {template!r}")
    return tuple(pieces)


def _render(value: Any, strings_only: bool) -> str | None:
    if isinstance(value, str):
        return value or None
    if strings_only or isinstance(value, bool) or not isinstance(value, Decimal | int) or not Decimal(value).is_finite():
        return None
    number = Decimal(value)
    return str(int(number)) if number == int(number) else format(number.normalize(), "f")


def _equal(value: Any, wanted: Any) -> bool:
    for kind in (bool, str):
        if isinstance(wanted, kind) or isinstance(value, kind):
            return isinstance(value, kind) and isinstance(wanted, kind) and value == wanted
    return isinstance(value, Decimal | int) and isinstance(wanted, Decimal | int) and value == wanted


def _summable(value: Any) -> bool:
    """At most 18 digits before the point and 8 after."""
    if isinstance(value, bool) or not isinstance(value, Decimal | int):
        return False
    number = Decimal(value)
    if not number.is_finite() or abs(number) >= Decimal(10) ** 18:
        return False
    exponent = number.normalize(_WIDE).as_tuple().exponent
    return isinstance(exponent, int) and exponent >= -8


def _binnable(value: Any) -> bool:
    """0, or a magnitude from 1E-9 up to (not including) 1E18."""
    if isinstance(value, bool) or not isinstance(value, Decimal | int):
        return False
    magnitude = Decimal(value).copy_abs()
    return magnitude == 0 or (magnitude.is_finite() and Decimal("1E-9") <= magnitude < Decimal("1E18"))


def recount_items(
    items: Iterable[dict[str, Any]],
    counters: list[str],
    rules: list[CounterRule],
    time_attribute: str,
    first_minute: int,
    last_minute: int,
) -> Counter[str]:
    """Apply the rule to raw items (DynamoDB JSON): how many count for each counter."""
    wanted = set(counters)
    found: Counter[str] = Counter({counter: 0 for counter in counters})
    for name, _, _ in counted(items, rules, time_attribute, first_minute, last_minute):
        if name in wanted:
            found[name] += 1
    return found


def counted(
    items: Iterable[dict[str, Any]], rules: list[CounterRule], time_attribute: str, first_minute: int, last_minute: int
) -> Iterator[tuple[str, CounterRule, dict[str, Any]]]:
    """Each (counter, rule, decoded item) a rule counts once, for the raw items (DynamoDB JSON) whose time under
    that rule falls in the minutes from ``first_minute`` to ``last_minute``."""
    for raw in items:
        try:
            item = {name: _deserializer.deserialize(value) for name, value in raw.items()}
        except (TypeError, ValueError, InvalidOperation):
            continue
        for rule in rules:
            minute = event_minute(item.get(rule.time or time_attribute))
            if minute is None or not first_minute <= minute <= last_minute:
                continue
            name = rule.names(item)
            if name is not None:
                yield name, rule, item


def scan_filter(
    counters: list[str], rules: list[CounterRule], classic: bool, time_attribute: str, first: int, last: int
) -> dict[str, Any]:
    """Only items that might count: a numeric time in the window or a string time (read client-side), and
    the counter attribute among the counters (classic) or every attribute some rule needs present; for
    rules with their own time attribute, each rule's time and attributes together."""
    values: dict[str, Any] = {
        ":lo": {"N": str(first * MINUTE_MS)},
        ":end": {"N": str((last + 1) * MINUTE_MS)},
        ":n": {"S": "N"},
        ":s": {"S": "S"},
    }
    times = list(dict.fromkeys([time_attribute] + [rule.time for rule in rules if rule.time]))
    time_alias = {name: "#t" if index == 0 else f"#t{index}" for index, name in enumerate(times)}
    attributes = [
        name for name in dict.fromkeys(name for rule in rules for name in rule.attributes) if name not in time_alias
    ]
    alias = {name: f"#a{index}" for index, name in enumerate(attributes)}
    names = {**{code: name for name, code in time_alias.items()}, **{code: name for name, code in alias.items()}}
    alias.update(time_alias)

    def in_window(code: str) -> str:
        return f"((attribute_type({code}, :n) AND {code} >= :lo AND {code} < :end) OR attribute_type({code}, :s))"

    if classic:
        values.update({f":c{index}": {"S": counter} for index, counter in enumerate(counters)})
        listed = ", ".join(f":c{index}" for index in range(len(counters)))
        expression = f"{in_window('#t')} AND ({alias[attributes[0]]} IN ({listed}))"
    else:
        clauses = []
        for time in times:
            group = [rule for rule in rules if (rule.time or time_attribute) == time]
            if not group:
                continue
            required = [" AND ".join(f"attribute_exists({alias[name]})" for name in _required(rule)) for rule in group]
            time_filter = in_window(time_alias[time])
            if not all(required):  # a rule that needs no attribute (a constant counter) may count any item
                clauses.append(time_filter)
            elif len(set(required)) == 1:  # DynamoDB refuses parentheses it finds redundant
                clauses.append(f"{time_filter} AND {required[0]}")
            else:
                either = " OR ".join(f"({needs})" if " AND " in needs else needs for needs in dict.fromkeys(required))
                clauses.append(f"{time_filter} AND ({either})")
        if not clauses:  # no rule the audit can recount: items in the window, none of which will count
            expression = in_window("#t")
        else:  # AND binds tighter than OR; DynamoDB refuses parentheses it finds redundant
            expression = " OR ".join(clauses)
    return {
        "FilterExpression": expression,
        "ProjectionExpression": ", ".join(names),
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
    }


def _required(rule: CounterRule) -> list[str]:
    """Attributes an item must have for the rule to name a counter (exists: false asks for absence)."""
    absent = {name for name, kind, operand in rule.when if kind == "exists" and not operand}
    return [name for name in rule.attributes if name not in absent]


def parallel_scan(
    dynamodb: Any,
    table: str,
    segments: int,
    scan_filter: dict[str, Any],
    on_scanned: Callable[[int], None] = lambda n: None,
) -> list[dict[str, Any]]:
    """The items the filter lets through; ``on_scanned`` hears how many items each page read (the filter aside)."""
    request = {"TableName": table, "TotalSegments": segments, "ConsistentRead": True, **scan_filter}

    def segment(number: int) -> list[dict[str, Any]]:
        return list(_pages(dynamodb.scan, {**request, "Segment": number}, on_scanned))

    with ThreadPoolExecutor(max_workers=segments) as pool:
        return [item for items in pool.map(segment, range(segments)) for item in items]


def scan_with_progress(dynamodb: Any, table: str, segments: int, scan_filter: dict[str, Any]) -> list[dict[str, Any]]:
    """A parallel Scan with a progress bar on stderr, sized by the table's ItemCount (DynamoDB updates it about every six hours)."""
    estimate = dynamodb.describe_table(TableName=table)["Table"].get("ItemCount") or None
    columns = (TextColumn(f"scanning {table}"), BarColumn(), MofNCompleteColumn(), TextColumn("items"), TimeElapsedColumn())
    with Progress(*columns, console=stderr, transient=True) as progress:
        task = progress.add_task("scan", total=estimate)
        items = parallel_scan(dynamodb, table, segments, scan_filter, lambda n: progress.advance(task, n))
        scanned = int(progress.tasks[0].completed)
    stderr.print(f"scanned {scanned:,} items of {table} in {segments} segments", highlight=False)
    return items


def _audit_state_machine(stack_name: str) -> tuple[str, str] | None:
    """The stack's audit Scan in the account and where its work goes, if it was deployed with backfillExports."""
    outputs = stack_outputs(stack_name, client("cloudformation"))
    if AUDIT_STATE_MACHINE_OUTPUT not in outputs:
        return None
    return outputs[AUDIT_STATE_MACHINE_OUTPUT], outputs[EXPORTS_OUTPUT]


def scan_in_account(
    sfn: Any,
    s3: Any,
    state_machine_arn: str,
    exports_uri: str,
    segments: int,
    condition: dict[str, Any],
    audit_id: str | None = None,
    poll_seconds: float = 2.0,
    sleep: Callable[[float], None] = time.sleep,
) -> list[dict[str, Any]]:
    """The parallel Scan run by the stack's Lambda workers, one per segment; the items they found, from S3."""
    bucket, _, prefix = exports_uri.removeprefix("s3://").partition("/")
    audit_id = audit_id or uuid.uuid4().hex
    work = audit_work_prefix(BackfillConfig(bucket, prefix.strip("/")), audit_id)
    execution_input = {"work": work, "request": condition, "total": segments, "segments": list(range(segments))}
    execution = sfn.start_execution(
        stateMachineArn=state_machine_arn, name=f"audit-{audit_id}", input=json.dumps(execution_input)
    )["executionArn"]
    columns = (TextColumn("scanning in the account"), BarColumn(), MofNCompleteColumn(), TextColumn("segments"), TimeElapsedColumn())
    with Progress(*columns, console=stderr, transient=True) as progress:
        task = progress.add_task("scan", total=segments)
        while True:
            described = sfn.describe_execution(executionArn=execution)
            runs = sfn.list_map_runs(executionArn=execution)["mapRuns"]
            if runs:
                counts = sfn.describe_map_run(mapRunArn=runs[0]["mapRunArn"])["itemCounts"]
                progress.update(task, completed=counts.get("succeeded", 0))
            if described["status"] == "SUCCEEDED":
                break
            if described["status"] in ("FAILED", "TIMED_OUT", "ABORTED"):
                cause = f"{described.get('error', '')} {described.get('cause', '')}".strip()
                raise ScriptError(f"the audit's Scan in the account {described['status']}: {cause}"[:300])
            sleep(poll_seconds)
    items = list(gathered_items(s3, bucket, work, segments))
    stderr.print(f"scanned in {segments} segments in the account: {len(items):,} items in the window", highlight=False)
    return items


def query_index(
    dynamodb: Any, table: str, index: str, counters: list[str], attributes: tuple[str, str], first: int, last: int
) -> list[dict[str, Any]]:
    """Query an index whose partition key is the counter attribute; its sort key narrows the times if numeric."""
    description = dynamodb.describe_table(TableName=table)["Table"]
    indexes = description.get("GlobalSecondaryIndexes", []) + description.get("LocalSecondaryIndexes", [])
    schema = next((entry["KeySchema"] for entry in indexes if entry["IndexName"] == index), None)
    if schema is None:
        raise ScriptError(f"table {table!r} has no index {index!r}")
    keys = {key["KeyType"]: key["AttributeName"] for key in schema}
    if keys.get("HASH") != attributes[0]:
        raise ScriptError(f"index {index!r} must have the counter attribute {attributes[0]!r} as its partition key")
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


def _pages(
    operation: Any, request: dict[str, Any], on_scanned: Callable[[int], None] = lambda n: None
) -> Iterator[dict[str, Any]]:
    request = dict(request)
    while True:
        response = operation(**request)
        on_scanned(response.get("ScannedCount", len(response.get("Items", []))))
        yield from response.get("Items", [])
        if "LastEvaluatedKey" not in response:
            return
        request["ExclusiveStartKey"] = response["LastEvaluatedKey"]


def show(rows: list[dict[str, Any]], as_json: bool) -> None:
    for row in rows:
        if row.get("shared_with"):
            stderr.print(
                f"{row['counter']}: also written by {_listed(row['shared_with'])}: tally keeps one total, "
                "recounted with every rule that writes it",
                highlight=False,
            )
    if printed_as_json(rows, as_json) or not rows:
        return
    table = Table(title=f"audit of [{rows[0]['start']}, {rows[0]['end']})")
    for column in ("counter", "tally", "recount", "difference", ""):
        table.add_column(column, justify="left" if column == "counter" else "right")
    for row in rows:
        if row["not_recountable"]:
            table.add_row(row["counter"], f"{row['tally']:,}", "", "", "[yellow]NOT RECOUNTABLE")
            continue
        verdict = "[green]EQUAL" if row["difference"] == 0 else "[red]DIFFERENT"
        table.add_row(row["counter"], f"{row['tally']:,}", f"{row['recount']:,}", f"{row['difference']:+,}", verdict)
    cli_console().print(table)
    for row in rows:
        if row["not_recountable"]:
            cli_console(stderr=True).print(f"{row['counter']}: not recountable: {row['not_recountable']}")


def show_series(rows: list[dict[str, Any]], as_json: bool) -> None:
    """Each counter's periods: how many agree, how many differ, and the totals; then every period that differs."""
    if printed_as_json(rows, as_json) or not rows:
        return
    by_counter: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_counter.setdefault(row["counter"], []).append(row)
    table = Table(title=f"audit of the periods of [{rows[0]['start']}, {rows[-1]['end']})")
    for column in ("counter", "periods", "tally", "recount", "differing", ""):
        table.add_column(column, justify="left" if column == "counter" else "right")
    for counter, periods in by_counter.items():
        total = sum(row["tally"] for row in periods)
        if periods[0]["not_recountable"]:
            table.add_row(counter, f"{len(periods):,}", f"{total:,}", "", "", "[yellow]NOT RECOUNTABLE")
            continue
        differing = sum(1 for row in periods if row["difference"])
        verdict_cell = "[green]EQUAL" if not differing else "[red]DIFFERENT"
        table.add_row(counter, f"{len(periods):,}", f"{total:,}", f"{sum(row['recount'] for row in periods):,}",
                      f"{differing:,}", verdict_cell)
    cli_console().print(table)
    differing_rows = [row for row in rows if row["difference"]]
    if differing_rows:
        listing = Table(title="periods that differ")
        for column in ("counter", "period", "tally", "recount", "difference"):
            listing.add_column(column, justify="left" if column in ("counter", "period") else "right")
        for row in differing_rows[:SHOWN_PERIODS]:
            listing.add_row(row["counter"], f"{row['start']} .. {row['end']}", f"{row['tally']:,}", f"{row['recount']:,}",
                            f"{row['difference']:+,}")
        cli_console().print(listing)
        if len(differing_rows) > SHOWN_PERIODS:
            stderr.print(f"and {len(differing_rows) - SHOWN_PERIODS:,} more periods that differ (--json lists every period)")
    for counter, periods in by_counter.items():
        if periods[0]["not_recountable"]:
            stderr.print(f"{counter}: not recountable: {periods[0]['not_recountable']}", highlight=False)


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
