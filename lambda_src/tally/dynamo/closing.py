"""Each kept zone's close progress: the last day and month whose items are complete, for closes and readers.

One item per zone, ``#calendar`` / the zone's name: ``since`` (the first day
closed), ``days`` (the last day closed) and ``months`` (the first day of the
last month closed, or of the month a first close beginning within it passed
over), ISO dates, and ``missing`` (a string set of runs of days,
``2028-02-01..2028-02-20``, that closes stopped past the hour retention left
unclosable, skipped by ``close_periods.py --skip-missing``), and for each
calendar prefix ``since:<prefix>`` and ``days:<prefix>``, the first and the
last day a close closed its counters (a prefix declared later begins later:
readers take its counters' days before it from hours), and ``adopted:<prefix>``, the first and last day
(``2026-01-01..2026-11-27``) a whole-table backfill made complete for its counters, recorded once the
backfill's commit has finished (``record_adoption``). It only moves forward (a conditional update),
so a close run twice or two racing leave it where the furthest one got. A
reader takes a period from its day or month items only up to it, and from
the hours after it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import date
from typing import Any

from botocore.exceptions import ClientError

from tally.core.buckets import DAY, Bucket, day_date, month_first_day
from tally.core.ladder import Progress, Run, adopted_days, history_days
from tally.core.retry import Backoff
from tally.core.settings import Settings
from tally.core.tables import COUNTS_TABLE, TTL_ATTRIBUTE, UNRESOLVED_ATTRIBUTE
from tally.dynamo.calls import TableAccess, error_code, retried_while_throttled

PROGRESS_PARTITION = "#calendar"
# A calendar prefix's own since: the progress item's attribute ``since:orders/``.
PREFIX_SINCE = "since:"
PREFIX_DAYS = "days:"
# The days a whole-table backfill made complete for a prefix's counters: ``adopted:orders/``.
PREFIX_ADOPTED = "adopted:"
# How long a reader trusts a zone's progress it read. Progress only moves forward, and a read takes from hours
# whatever the progress it holds does not cover, so an older progress answers as exactly, only reading more.
PROGRESS_SECONDS = 60


class ProgressItems:
    """The progress items of the counts table ``table_name``, and the marks a close carries up to a period."""

    def __init__(self, client: Any, table_name: str, backoff: Callable[[], Backoff] = Backoff) -> None:
        self.client = client
        self.table_name = table_name
        self.backoff = backoff

    def read(self, zone: str, consistent: bool = True) -> Progress:
        response = retried_while_throttled(
            self.backoff, self.client.get_item, TableName=self.table_name, Key=_key(zone), ConsistentRead=consistent
        )
        item = response.get("Item") or {}

        def field(name: str) -> date | None:
            return date.fromisoformat(item[name]["S"]) if name in item else None

        missing = tuple(sorted(_run_of(text) for text in item.get("missing", {}).get("SS", [])))
        prefixes = tuple(sorted(
            (name[len(PREFIX_SINCE):], date.fromisoformat(value["S"]), date.fromisoformat(item[PREFIX_DAYS + name[len(PREFIX_SINCE):]]["S"]))
            for name, value in item.items() if name.startswith(PREFIX_SINCE) and PREFIX_DAYS + name[len(PREFIX_SINCE):] in item
        ))
        adopted = tuple(sorted(
            (name[len(PREFIX_ADOPTED):], *_run_of(value["S"])) for name, value in item.items() if name.startswith(PREFIX_ADOPTED)
        ))
        return Progress(field("since"), field("days"), field("months"), missing, prefixes, adopted)

    def adopt(self, zone: str, prefixes: tuple[str, ...], first: date, last: date) -> None:
        """Record that a whole-table backfill made ``zone``'s days ``first`` .. ``last`` complete for the counters
        of ``prefixes``: set, for each, unless a later backfill recorded more (it only moves forward), so a
        backfill finished twice writes nothing new."""
        for prefix in prefixes:
            self._update_if(
                zone,
                UpdateExpression="SET #a = :a",
                ConditionExpression="attribute_not_exists(#a) OR #a < :a",
                ExpressionAttributeNames={"#a": PREFIX_ADOPTED + prefix},
                ExpressionAttributeValues={":a": {"S": _run_text(first, last)}},
            )

    def skip(self, zone: str, first: date, last: date) -> bool:
        """Move ``zone``'s closed days on past ``first`` .. ``last``, days that can no longer be closed (their
        hours have expired), recording them as missing in the same update: readers refuse them instead of
        taking them from their items, and the close carries on after them. False when the progress is already
        past ``last`` (skipped before, or closed by a close racing this one): nothing written."""
        return self._update_if(
            zone,
            UpdateExpression="SET #days = :last ADD #missing :run",
            ConditionExpression="#days < :last",
            ExpressionAttributeNames={"#days": "days", "#missing": "missing"},
            ExpressionAttributeValues={":last": {"S": last.isoformat()}, ":run": {"SS": [_run_text(first, last)]}},
        )

    def advance(
        self,
        zone: str,
        last_day: Bucket | None,
        last_month: Bucket | None,
        first_day: Bucket | None = None,
        prefixes: tuple[str, ...] = (),
    ) -> None:
        """Move ``zone``'s progress on to these (a day, a month), never back. ``since`` is set once, by the first
        close to finish: to ``first_day``, the first day it closed (default: the day or month it advances to).
        So, for each of ``prefixes`` (the calendar prefixes the days' close closed), are its own last day closed
        and since (``days:<prefix>``, ``since:<prefix>``), in the zone's day's update: a prefix declared later has
        its counters' days closed from its first close on."""
        # The zone's day and its prefixes' days move in one update (one write a run, and never one without the
        # other); where another close moved the zone's day there first, each prefix's moves on its own.
        if last_day is not None and not self._move(zone, last_day, first_day, [("days", "since")] + [
            (PREFIX_DAYS + prefix, PREFIX_SINCE + prefix) for prefix in prefixes
        ]):
            for prefix in prefixes:
                self._move(zone, last_day, first_day, [(PREFIX_DAYS + prefix, PREFIX_SINCE + prefix)])
        if last_month is not None:
            self._move(zone, last_month, first_day, [("months", "since")])

    def _move(self, zone: str, period: Bucket, first_day: Bucket | None, names: list[tuple[str, str]]) -> bool:
        """Set each (attribute, its since) of ``names`` to ``period``, in one update, if the first attribute lies
        before it; False when it does not (another close got there first: progress never moves back)."""
        first = day_date(period.index) if period.kind == DAY else month_first_day(period.index)
        since = day_date(first_day.index) if first_day is not None else first
        attribute_names = {}
        assignments = []
        for index, (name, since_name) in enumerate(names):
            attribute_names[f"#p{index}"], attribute_names[f"#s{index}"] = name, since_name
            assignments.append(f"#p{index} = :p, #s{index} = if_not_exists(#s{index}, :since)")
        return self._update_if(
            zone,
            UpdateExpression="SET " + ", ".join(assignments),
            ConditionExpression="attribute_not_exists(#p0) OR #p0 < :p",
            ExpressionAttributeNames=attribute_names,
            ExpressionAttributeValues={":p": {"S": first.isoformat()}, ":since": {"S": since.isoformat()}},
        )

    def _update_if(self, zone: str, **request: Any) -> bool:
        """One conditional update of ``zone``'s progress item; False where its condition did not hold (another
        close or backfill got there first: progress never moves back)."""
        try:
            retried_while_throttled(
                self.backoff, self.client.update_item, TableName=self.table_name, Key=_key(zone), **request
            )
        except ClientError as error:
            if error_code(error) != "ConditionalCheckFailedException":
                raise
            return False
        return True

    def mark_unresolved(self, counter: str, sort_key: str, marks: set[str], ttl_seconds: int) -> None:
        """Add ``marks`` to the unresolved marks of a period's item (created with its TTL if the close wrote none):
        a set, so a close run again adds nothing."""
        retried_while_throttled(
            self.backoff, self.client.update_item, TableName=self.table_name,
            Key={COUNTS_TABLE.partition_key: {"S": counter}, COUNTS_TABLE.sort_key: {"S": sort_key}},
            UpdateExpression="ADD #u :u SET #ttl = if_not_exists(#ttl, :ttl)",
            ExpressionAttributeNames={"#u": UNRESOLVED_ATTRIBUTE, "#ttl": TTL_ATTRIBUTE},
            ExpressionAttributeValues={":u": {"SS": sorted(marks)}, ":ttl": {"N": str(ttl_seconds)}},
        )


def record_adoption(client: Any, table_name: str, settings: Settings, count_from_ms: int) -> None:
    """After a whole-table backfill of an export taken at ``count_from_ms`` has committed every segment to the
    counts table ``table_name``: record in
    each kept zone the days it made complete (``ladder.adopted_days``), so readers take them, and the months wholly
    within them, from their items. Never before the whole commit finished: a day is complete only once every
    exported event of it is in."""
    items = ProgressItems(client, table_name)
    # A prefix with a countFrom of its own took nothing from this export: its days' history is its own backfill's.
    prefixes = tuple(p for p in settings.calendar_prefixes if settings.calendar_from(p) in (None, count_from_ms))
    for zone in settings.kept_zones:
        run = adopted_days(count_from_ms, zone, settings)
        if run is not None and prefixes:
            items.adopt(zone, prefixes, *run)


class HistoryNotReady(ValueError):
    """A calendar prefix's days' history cannot be counted yet: no close has said where its closed days begin."""


def history_runs(
    client: Any, table_name: str, settings: Settings, prefixes: tuple[str, ...], count_from_ms: int
) -> dict[str, dict[str, Run]]:
    """The days a calendar backfill of ``prefixes`` (declared later, counting from ``count_from_ms``) writes, per
    prefix and kept zone: those before the first day a close closed the prefix's counters there
    (``since:<prefix>``, set once), within ``ladder.history_days``. HistoryNotReady, in one line, where no close
    has yet: the closes' days, not the backfill's, must hold what the hours hold."""
    items = ProgressItems(client, table_name)
    runs: dict[str, dict[str, Run]] = {}
    for zone in settings.kept_zones:
        progress = items.read(zone)
        for prefix in prefixes:
            since = progress.of_counter(prefix).since
            if since is None:
                raise HistoryNotReady(
                    f"no close has closed the days of calendar prefix {prefix!r} in {zone} yet: its history is counted "
                    "into the days before the first one a close takes from hours; run the backfill after that close "
                    "(scripts/close_periods.py, or the stack's daily close)"
                )
            run = history_days(count_from_ms, zone, settings, since)
            if run is not None:
                runs.setdefault(prefix, {})[zone] = run
    return runs


def record_history(client: Any, table_name: str, runs: dict[str, dict[str, Run]]) -> None:
    """After a calendar backfill has committed every segment: record in each zone the days it made complete for
    each prefix (``history_runs``), so readers take them, and the months wholly within them, from their items.
    Recorded as an adoption is (``adopted:<prefix>``): the same readers, and it only moves forward."""
    items = ProgressItems(client, table_name)
    for prefix, zones in runs.items():
        for zone, (first, last) in zones.items():
            items.adopt(zone, (prefix,), first, last)


class ProgressReads(TableAccess):
    """The part of ``CountsTable`` calendar reads use: each zone's progress, read at most once a minute."""

    _progress_read: dict[str, tuple[float, Progress]]

    def calendar_progress(self, zone: str) -> tuple[Progress, int]:
        """``zone``'s progress (eventually consistent), and the requests reading it took: 0 when one read less
        than PROGRESS_SECONDS ago is still held."""
        held = self._progress_read.get(zone)
        now = time.monotonic()
        if held is not None and now - held[0] < PROGRESS_SECONDS:
            return held[1], 0
        progress = ProgressItems(self.client, self.table_name, self.backoff).read(zone, consistent=False)
        self._progress_read[zone] = (now, progress)
        return progress, 1


def _run_text(first: date, last: date) -> str:
    """A run of missing days as the progress item keeps it: ``2028-02-01..2028-02-20``."""
    return f"{first.isoformat()}..{last.isoformat()}"


def _run_of(text: str) -> tuple[date, date]:
    first, _, last = text.partition("..")
    return date.fromisoformat(first), date.fromisoformat(last)


def _key(zone: str) -> dict[str, dict[str, str]]:
    return {COUNTS_TABLE.partition_key: {"S": PROGRESS_PARTITION}, COUNTS_TABLE.sort_key: {"S": zone}}
