"""Before rolling a deployed stack back to an earlier release: would the rollback lose anything?

    .venv/bin/python scripts/rollback_check.py --to 0.3.0 --stack Tally
    .venv/bin/python scripts/rollback_check.py --to 0.2.0 --stack Tally
    .venv/bin/python scripts/rollback_check.py --to 0.2.0 --counts-table tally-counts --json

Reads what the counting function published in the counts table (its settings
and rules) and the table's unresolved records, and judges them against what
the release rolled back to can read. Exit status 0: the rollback loses
nothing; what that release reads differently meanwhile is listed as notes.
Exit status 1: the rollback would lose counts, or stop the counting; each
line names what, and how to finish it first (then run the check again).
Exit status 2: the table or the settings cannot be read.

What neither 0.3.0 nor 0.2.0 can take over:
  - a shard whose anchor was not trusted (its event source mapping replaced
    in the deploy that upgraded from 0.2.0, its first reader a re-read): its
    items still holding 0.2.0 watermarks are left unresolved and judged by
    this release alone; the older release would add a later segment of that
    shard over them whole, counting records twice. Roll back once the
    shard can no longer be read (28 hours after its anchor was put), and
    repair first.
0.3.0 reads everything else this release writes, in the same formats.
What 0.2.0 cannot take over:
  - calendarPrefixes set: a window state holding a late record's day, month
    or mark is one 0.2.0 cannot read; it discards the whole state, and the
    records it carried go uncounted. Set calendarPrefixes to [] and deploy;
    roll back once a window (at most 15 minutes) has passed with no
    invocation failing (a failing batch is retried with its old state).
  - rules with `alerts`, `countFrom` or `retiredAt`: 0.2.0 refuses them at
    synth and at cold start, and its function counts nothing. Remove the
    alerts; drop a rule's countFrom (it then counts from the deploy, its
    backfilled history stays); remove a retired rule.
What it reads differently, losing nothing from the table (notes):
  - buckets an overlap left unresolved: 0.2.0 reads them as they are (low
    by at most their bound) without saying so; `scripts/audit.py --repair`
    before the rollback, or after upgrading again.
  - distinct values merged into the lane partitions, counters listed only in
    this release's directory partitions, rank records, days and months: 0.2.0
    does not read them; they stay, and upgrading again reads them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from tally.core.buckets import iso_second
from tally.core.commit import ANCHOR_TTL_MS
from tally.core.settings import ENV_CALENDAR_PREFIXES, ENV_RULES, Settings
from tally.dynamo.counts_table import CountsTable
from tally.local.aws import ArgumentParser, add_table_arguments, client, resolve_tables
from tally.local.cli import entry_point, require_table

@dataclass(frozen=True)
class Target:
    """A release this one can be rolled back to: the rule fields it refuses (unknown to it), and whether it reads
    what this release writes beside the buckets (window states with days, marks, lanes, directory, ranks, days)."""

    refused: tuple[str, ...]
    reads_this_release: bool


ROLLBACK_TARGETS = {"0.3.0": Target((), True), "0.2.0": Target(("alerts", "countFrom", "retiredAt"), False)}
# How long after its anchor was put a shard of the upgrade may still be read: a DynamoDB Streams shard is open
# for hours, and its records are kept a day after that.
ANCHOR_DANGER_HOURS = 28
MAX_WINDOW_MINUTES = 15  # Lambda's longest tumbling window: a state written before a deploy is gone after it


@dataclass
class Verdict:
    """What a rollback would lose (each with how to finish it first), and what the older release reads differently."""

    target: str
    lost: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {"to": self.target, "safe": not self.lost, "lost": self.lost, "notes": self.notes}


def parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--to", required=True, choices=sorted(ROLLBACK_TARGETS), help="the release to roll back to")
    parser.add_argument("--json", action="store_true", help="the verdict as one JSON object")
    add_table_arguments(parser, events=False)
    return parser


def judge(counts: CountsTable, target: str, now_ms: int | None = None) -> Verdict:
    """The verdict on rolling the pipeline counting into ``counts`` back to ``target`` at ``now_ms`` (now)."""
    verdict, release = Verdict(target), ROLLBACK_TARGETS[target]
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    for source, anchor, expires_s in counts.anchors():
        safe_from_ms = expires_s * 1000 - ANCHOR_TTL_MS + ANCHOR_DANGER_HOURS * 3_600_000
        if not anchor.trusted and now_ms < safe_from_ms:
            verdict.lost.append(
                f"shard {source} was read again from its trim horizon by this release's first reader (anchor at "
                f"record {anchor.first}): its items holding 0.2.0 watermarks are left unresolved, and {target} would "
                f"add a later segment of it over them whole, counting records twice; run scripts/audit.py --repair "
                f"and roll back after {iso_second(safe_from_ms)}, when the shard can no longer be read"
            )
    published = counts.published_settings()
    if published is None:
        verdict.notes.append(f"no counting function has published its settings in {counts.table_name}: nothing counted yet")
    else:
        since = f"published by {published.publisher} at {iso_second(published.published_ms)}"
        prefixes = json.loads(published.environment.get(ENV_CALENDAR_PREFIXES) or "[]")
        if prefixes and not release.reads_this_release:
            verdict.lost.append(
                f"window states holding late records' days, months or marks (calendarPrefixes {json.dumps(prefixes)}, "
                f"{since}): {target} discards such a state whole, its records uncounted; set calendarPrefixes to [] "
                f"and deploy, then roll back once {MAX_WINDOW_MINUTES} minutes have passed with no invocation failing"
            )
        for rule in json.loads(published.environment.get(ENV_RULES) or "[]"):
            refused = [name for name in release.refused if name in rule]
            if refused:
                verdict.lost.append(
                    f"rule {rule.get('name')!r} has {', '.join(refused)}, which {target} refuses at synth and at cold "
                    f"start (its function would count nothing): "
                    + "; ".join(FIXES[name] for name in refused)
                )
    if release.reads_this_release:
        return verdict
    unresolved = counts.unresolved_records()
    if unresolved:
        buckets = sorted({f"{record['counter']['S']} {record['bucket']['S']}" for record in unresolved if "bucket" in record})
        shown = ", ".join(buckets[:10]) + (f" and {len(buckets) - 10} more" if len(buckets) > 10 else "")
        verdict.notes.append(
            f"{len(buckets) or len(unresolved)} bucket(s) an overlap left unresolved ({shown}): {target} reads them "
            "low without saying so; run scripts/audit.py --repair before rolling back, or after upgrading again"
        )
    verdict.notes.append(
        f"{target} does not read what this release keeps beside the buckets (distinct values merged into the lane "
        "partitions, this release's directory partitions, rank records, days and months): its distinct counts of "
        "buckets counted since the upgrade and its listings of counters first counted since may be low until they "
        "leave the window; the items stay, and upgrading again reads them"
    )
    return verdict


FIXES = {
    "alerts": "remove its alerts",
    "countFrom": "drop its countFrom (it then counts from the deploy; its backfilled history stays)",
    "retiredAt": "remove the retired rule",
}


@entry_point
def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    tables = resolve_tables(args)
    dynamodb = client("dynamodb")
    require_table(dynamodb, tables.counts, "--counts-table, COUNTS_TABLE or --stack")
    verdict = judge(CountsTable(dynamodb, tables.counts, Settings(counts_table=tables.counts)), args.to)
    if args.json:
        print(json.dumps(verdict.as_json()))
    else:
        if verdict.lost:
            print(f"rolling {tables.counts} back to {args.to} would lose what these lines name; finish each first:")
            for line in verdict.lost:
                print(f"  LOST: {line}")
        else:
            print(f"rolling {tables.counts} back to {args.to} loses nothing")
        for line in verdict.notes:
            print(f"  note: {line}")
    return 1 if verdict.lost else 0


if __name__ == "__main__":
    sys.exit(main())
