"""Alert I/O: state items in the counts table, events on EventBridge, and the evaluations that drive them.

The policy is ``core/alerts.py``; this module reads the windows (after a
commit, one range of each counter's minute items; once a minute through
``query.count_windows``, the read API's engine), reads and changes the state
items, and puts the events. State items live in the counts table under keys no
counter can take:

    pk = "#alerts#<alert name>"    sk = the counter name
    state, transitions, pending, by, changed, start, end, total, raised

A crossing is made by one conditional write (the item's ``transitions`` must
still be what the evaluator read, and no event may be pending), so racing
shards, retries and redeliveries make each crossing once; its maker then puts
the event and clears ``pending``. A maker that dies in between leaves the
crossing pending: its retry (same token) puts it at once, anyone else after
``DELIVERY_LEASE_MS``, under the same id.
"""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from tally.core.alerts import (
    ABOVE,
    ALARM,
    Alert,
    AlertState,
    CommitWindow,
    Crossing,
    alerts_for,
    alerts_of,
    commit_crossing,
    commit_windows,
    crossing_of,
    judged_last_minutes,
    minutes_written,
    pending_crossing,
    settled_end_ms,
    state_of,
)
from tally.core.buckets import Bucket
from tally.core.commit import CommitResult, RetriesExhausted, Writer
from tally.core.directory import days_between
from tally.core.plans import PlanKind
from tally.core.retry import Backoff
from tally.core.segments import Segment
from tally.core.units import DAY_MS, MINUTE_MS
from tally.core.tables import COUNTS_TABLE
from tally.core.windows import QueryError, now_ms
from tally.dynamo.calls import BATCH_GET_LIMIT, error_code, retried_while_throttled
from tally.dynamo.counts_table import CountsTable
from tally.dynamo.directory import CounterDirectory

logger = logging.getLogger(__name__)

ALERTS_PREFIX = "#alerts#"
EVENT_SOURCE = "tally"
EVENT_DETAIL_TYPE = "Counter alert"
ENV_ALERT_BUS = "TALLY_ALERT_BUS"
PUT_EVENTS_LIMIT = 10
# Pauses while another evaluator's event is pending (milliseconds of work for a live maker), before
# putting it ourselves under the same id.
PENDING_WAITS = 5
PENDING_PAUSE_SECONDS = 0.2
# Attempts to make one crossing against other evaluators changing the same item meanwhile.
CHANGE_ATTEMPTS = 8
# Counters whose alerts a container remembers (rule templates matched once per name).
ALERTED_MEMORY = 100_000
_STATE_FIELDS = ("state", "transitions", "pending", "by", "changed", "start", "end", "total", "raised")


def state_partition(alert: str) -> str:
    return ALERTS_PREFIX + alert


@dataclass
class AlertSummary:
    """What an evaluation did, for logs, metrics and tests."""

    evaluated: int = 0  # (alert, counter) windows judged
    crossings: int = 0  # state changes this evaluator made
    delivered: int = 0  # events put
    delivery_failures: int = 0  # events left pending for a later evaluator
    skipped_windows: int = 0  # windows the read API refused (past the minute retention)
    reads: int = 0  # read requests made
    writes: int = 0  # write requests made

    def add(self, other: AlertSummary) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


class AlertStates:
    """The state items of alerts in the counts table."""

    def __init__(self, client: Any, table_name: str, backoff: Callable[[], Backoff] = Backoff) -> None:
        self.client = client
        self.table_name = table_name
        self.backoff = backoff

    def read(self, alert: str, counters: Iterable[str], summary: AlertSummary) -> dict[str, AlertState]:
        """The states of ``counters`` under ``alert``, strongly consistent (a crossing starts from the latest)."""
        names = list(dict.fromkeys(counters))
        states = dict.fromkeys(names, AlertState())
        for start in range(0, len(names), BATCH_GET_LIMIT):
            pending = [_key(alert, name) for name in names[start : start + BATCH_GET_LIMIT]]
            for _ in self.backoff().pauses():
                response = retried_while_throttled(
                    self.backoff,
                    self.client.batch_get_item,
                    RequestItems={self.table_name: {"Keys": pending, "ConsistentRead": True}},
                )
                summary.reads += 1
                for item in response.get("Responses", {}).get(self.table_name, []):
                    states[item[COUNTS_TABLE.sort_key]["S"]] = state_of(_plain(item))
                pending = response.get("UnprocessedKeys", {}).get(self.table_name, {}).get("Keys", [])
                if not pending:
                    break
            else:
                raise RetriesExhausted(f"{len(pending)} alert states still unprocessed after every retry")
        return states

    def listing(self, alert: str, summary: AlertSummary | None = None, consistent: bool = True) -> dict[str, AlertState]:
        """Every counter that has a state under ``alert`` (all pages), by name."""
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "KeyConditionExpression": "#pk = :pk",
            "ExpressionAttributeNames": {"#pk": COUNTS_TABLE.partition_key},
            "ExpressionAttributeValues": {":pk": {"S": state_partition(alert)}},
            "ConsistentRead": consistent,
        }
        states: dict[str, AlertState] = {}
        while True:
            response = retried_while_throttled(self.backoff, self.client.query, **request)
            if summary is not None:
                summary.reads += 1
            for item in response.get("Items", []):
                states[item[COUNTS_TABLE.sort_key]["S"]] = state_of(_plain(item))
            if "LastEvaluatedKey" not in response:
                return dict(sorted(states.items()))
            request["ExclusiveStartKey"] = response["LastEvaluatedKey"]

    def change(self, crossing: Crossing, read: AlertState, token: str, now: int) -> AlertState | None:
        """Make ``crossing`` if the item is still as ``read`` with no event pending: None when made, else the
        item as it now is (another evaluator changed it; or this one did, its answer lost: ``by`` tells)."""
        new = crossing.recorded(token, now)
        values = {
            ":state": {"S": new.state},
            ":transitions": {"N": str(new.transitions)},
            ":pending": {"BOOL": True},
            ":by": {"S": token},
            ":changed": {"N": str(now)},
            ":start": {"N": str(new.start_ms)},
            ":end": {"N": str(new.end_ms)},
            ":total": {"N": str(new.total)},
            ":raised": {"N": str(new.raised_ms)},
        }
        names = {f"#{name}": name for name in _STATE_FIELDS}
        if read.transitions == 0:
            condition = "attribute_not_exists(#pk)"
            names["#pk"] = COUNTS_TABLE.partition_key
        else:
            condition = "#transitions = :read AND attribute_not_exists(#pending)"
            values[":read"] = {"N": str(read.transitions)}
        try:
            retried_while_throttled(
                self.backoff,
                self.client.update_item,
                TableName=self.table_name,
                Key=_key(crossing.alert.name, crossing.counter),
                UpdateExpression=(
                    "SET #state = :state, #transitions = :transitions, #pending = :pending, #by = :by, "
                    "#changed = :changed, #start = :start, #end = :end, #total = :total, #raised = :raised"
                ),
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as error:
            if error_code(error) != "ConditionalCheckFailedException":
                raise
            return state_of(_plain(error.response.get("Item") or {}))
        return None

    def delivered(self, crossing: Crossing) -> None:
        """Clear ``pending`` once the crossing's event is put (nothing, if it already was or the item moved on)."""
        try:
            retried_while_throttled(
                self.backoff,
                self.client.update_item,
                TableName=self.table_name,
                Key=_key(crossing.alert.name, crossing.counter),
                UpdateExpression="REMOVE #pending",
                ConditionExpression="#transitions = :transitions AND attribute_exists(#pending)",
                ExpressionAttributeNames={"#pending": "pending", "#transitions": "transitions"},
                ExpressionAttributeValues={":transitions": {"N": str(crossing.transitions)}},
            )
        except ClientError as error:
            if error_code(error) != "ConditionalCheckFailedException":
                raise


class EventBus:
    """PutEvents on one bus (default: the account's default bus); failed entries are sent again."""

    def __init__(self, client: Any, bus: str = "default", backoff: Callable[[], Backoff] = Backoff) -> None:
        self.client = client
        self.bus = bus
        self.backoff = backoff

    def put(self, crossings: list[Crossing]) -> list[Crossing]:
        """Put one event per crossing; the crossings whose events could not be put after every retry."""
        failed: list[Crossing] = []
        for start in range(0, len(crossings), PUT_EVENTS_LIMIT):
            pending = crossings[start : start + PUT_EVENTS_LIMIT]
            for _ in self.backoff().pauses():
                try:
                    response = self.client.put_events(Entries=[self._entry(crossing) for crossing in pending])
                except (ClientError, BotoCoreError) as error:
                    logger.warning("PutEvents failed, sent again: %s", error)
                    continue
                results = response.get("Entries", [])
                pending = [crossing for crossing, result in zip(pending, results) if "ErrorCode" in result]
                if not pending:
                    break
            else:
                failed.extend(pending)
        return failed

    def _entry(self, crossing: Crossing) -> dict[str, Any]:
        return {
            "Source": EVENT_SOURCE,
            "DetailType": EVENT_DETAIL_TYPE,
            "Detail": json.dumps(crossing.detail()),
            "EventBusName": self.bus,
        }


class Watcher:
    """Evaluates the rules' alerts: after each commit (above alerts of the counters it wrote) and once a
    minute (clearing, below alerts, pending events)."""

    def __init__(
        self,
        table: CountsTable,
        bus: EventBus,
        *,
        states: AlertStates | None = None,
        directory: CounterDirectory | None = None,
        clock: Callable[[], int] = now_ms,
        sleep: Callable[[float], None] = time.sleep,
        plan: PlanKind = PlanKind.BATCH,
    ) -> None:
        """``plan``: how windows are read. The batch plan reads 100 keys a request (a 10-minute window is 10
        keys, each a read unit); the range plan one Query per counter, a read unit for a short window."""
        self.table = table
        self.plan = plan
        self.bus = bus
        self.states = states or AlertStates(table.client, table.table_name, table.backoff)
        self.directory = directory or CounterDirectory(table.client, table.table_name, table.settings, table.backoff)
        self.clock = clock
        self.sleep = sleep
        self.rules = table.settings.counter_rules.rules
        self.alerts = alerts_of(self.rules)
        self._alerted: dict[str, tuple[Alert, ...]] = {}
        self.summary = AlertSummary()

    def watching(self, commit: Callable[[Segment, Writer], CommitResult]) -> Callable[[Segment, Writer], CommitResult]:
        """``commit``, then the above alerts of the counters it wrote (also after a duplicate: a retry
        that failed between the two judges them then)."""

        def commit_and_watch(segment: Segment, writer: Writer) -> CommitResult:
            result = commit(segment, writer)
            self.after_commit(segment, writer)
            return result

        return commit_and_watch

    def after_commit(self, segment: Segment, writer: Writer) -> AlertSummary:
        """Judge the above alerts of the counters ``segment`` wrote over every window it changed, in time order
        (``commit_windows``), from one range of each counter's minute items: each episode raises once, with
        the window that crossed, and clears in a complete window after it (docs/rules.md, Alerts)."""
        summary = AlertSummary()
        watched = {counter for counter, _bucket in segment.deltas if self._above_alerts(counter)}
        if not watched:
            return summary  # no reads for counters without alerts
        token = f"{writer.tag}:{segment.first_sequence}"  # a retry of this segment recognizes its own crossings
        written = minutes_written(segment.deltas, watched)
        by_alert: dict[Alert, list[str]] = defaultdict(list)
        for counter in sorted(written):
            for alert in self._above_alerts(counter):
                by_alert[alert].append(counter)
        now = self.clock()
        # States before counts: docs/design.md, Alerts.
        states = {alert: self.states.read(alert.name, counters, summary) for alert, counters in by_alert.items()}
        for alert, alert_states in states.items():
            self._deliver_due(alert, alert_states, token, now, summary)
        oldest = self._oldest_minute(now)
        counters = sorted(written)

        # The windows before a commit's first minute can only clear: read and judged only for an alarm.
        alarmed = {c for alert, held in states.items() for c, state in held.items() if state.state == ALARM}

        def minute_counts(counter: str) -> tuple[dict[int, int], int]:
            return self._minute_counts(counter, written[counter], now, oldest, counter in alarmed)

        if len(counters) == 1:
            read = [minute_counts(counters[0])]
        else:  # a Query per counter, as many at once as a commit's updates
            with ThreadPoolExecutor(min(self.table.workers, len(counters)), thread_name_prefix="tally-alerts") as pool:
                read = list(pool.map(minute_counts, counters))
        for counter, (counts, requests) in zip(counters, read):
            summary.reads += requests
            minutes = written[counter]
            for alert in self._above_alerts(counter):
                alarm = states[alert][counter].state == ALARM
                windows, skipped = commit_windows(alert.window_ms, minutes, counts, now, oldest, alarm)
                summary.skipped_windows += skipped
                self._walk(alert, counter, windows, states[alert][counter], token, summary)
        self.summary.add(summary)
        return summary

    def _minute_counts(
        self, counter: str, written: dict[int, int], now: int, oldest: int, alarmed: bool
    ) -> tuple[dict[int, int], int]:
        """The counts of the minutes every window a commit judges of ``counter`` holds (for its longest alert),
        every lane summed, from one strongly consistent Query (more only past a page), and the requests made.
        Minutes before ``oldest`` may be gone: the windows reaching them are not judged (``commit_windows``)."""
        longest = max(alert.window_ms for alert in self._above_alerts(counter))
        last_minutes = judged_last_minutes(written, longest, now, alarmed)
        first = max(last_minutes.start - longest // MINUTE_MS + 1, oldest)
        last = last_minutes[-1]
        if first > last:
            return {}, 0
        fetched = self.table.query(counter, Bucket.of_minute(first).sort_key, Bucket.of_minute(last).sort_key, True)
        counts = {
            Bucket.from_sort_key(sort_key).index: count for (pk, sort_key), count in fetched.counts.items() if pk == counter
        }
        return counts, fetched.requests

    def _oldest_minute(self, now: int) -> int:
        """The oldest minute a query may still read at ``now`` (``Bucket.alive_at``)."""
        minute = max((now - self.table.settings.minute_retention_ms) // MINUTE_MS - 1, 0)
        while not Bucket.of_minute(minute).alive_at(now, self.table.settings):
            minute += 1
        return minute

    def _walk(
        self, alert: Alert, counter: str, windows: list[CommitWindow], read: AlertState, token: str,
        summary: AlertSummary,
    ) -> None:
        """Judge a commit's windows of one counter in time order, each from the state the one before left."""
        for index, window in enumerate(windows):
            summary.evaluated += 1
            made, read = self._settle(alert, counter, read, token, summary,
                                      lambda held, window=window: commit_crossing(alert, counter, held, window))
            if made is not None and read.pending:
                logger.warning("alert %s on %s: windows after %s not judged: the event before them is still "
                               "pending", alert.name, counter, made.id)
                summary.skipped_windows += len(windows) - index - 1
                return

    def scheduled(self, token: str) -> AlertSummary:
        """Once a minute: clear above alarms whose window ending now fell back, judge below alerts over the
        counters the directory lists under their rules (windows ending SETTLE_MS ago), put pending events
        whose makers did not."""
        summary = AlertSummary()
        now = self.clock()
        for alert in self.alerts:
            states = self.states.listing(alert.name, summary)
            self._deliver_due(alert, states, token, now, summary)
            if alert.direction == ABOVE:
                alarmed = {counter: now for counter, state in states.items() if state.state == ALARM}
                cleared = self._evaluate(alert, alarmed, token, summary)
                if cleared:  # a commit that read the alarm just before the clearing is judged again here
                    self._evaluate(alert, dict.fromkeys(cleared, self.clock()), token, summary, raise_only=True)
            else:
                end = settled_end_ms(now)
                counters = set(self._listed(alert, end)) | {c for c, s in states.items() if s.state == ALARM}
                self._evaluate(alert, dict.fromkeys(sorted(counters), end), token, summary)
        self.summary.add(summary)
        return summary

    def _listed(self, alert: Alert, end: int) -> list[str]:
        """The counters the directory lists under ``alert``'s rule on the days of its window and the day
        before (a counter that fell silent stays watched for a day)."""
        rule = next(rule for rule in self.rules if alert in rule.alerts)
        first = rule.counter.parts[0]
        prefix = "" if first[0] else first[1]
        names, _requests = self.directory.counters(prefix, days_between(end - alert.window_ms - DAY_MS, end))
        return [name for name in names if rule.counter.could_render(name)]

    def _evaluate(
        self,
        alert: Alert,
        counter_ends: dict[str, int],
        token: str,
        summary: AlertSummary,
        *,
        raise_only: bool = False,
    ) -> list[str]:
        """Judge ``alert`` on each counter over the window ending at its end; the counters it changed to OK."""
        if not counter_ends:
            return []
        now = self.clock()
        states = self.states.read(alert.name, counter_ends, summary)  # read before the counts: docs/design.md, Alerts
        self._deliver_due(alert, states, token, now, summary)
        changed_to_ok = []
        by_end: dict[int, list[str]] = defaultdict(list)
        for counter, end in counter_ends.items():
            by_end[end].append(counter)
        for end, counters in sorted(by_end.items()):
            try:
                results = _count(self.table, counters, alert.window_ms, end, now, self.plan)
            except QueryError as error:
                logger.warning("alert %s: window ending %d not judged: %s", alert.name, end, error)
                summary.skipped_windows += len(counters)
                continue
            summary.reads += max((result.requests for result in results), default=0)
            for result in results:
                summary.evaluated += 1
                window = result.window
                made, _state = self._settle(
                    alert, result.counter, states[result.counter], token, summary,
                    lambda held, total=result.total, window=window, counter=result.counter: crossing_of(
                        alert, counter, held, total, window.start_ms, window.end_ms, raise_only
                    ),
                )
                if made is not None and made.state != ALARM:
                    changed_to_ok.append(result.counter)
        return changed_to_ok

    def _settle(
        self, alert: Alert, counter: str, read: AlertState, token: str, summary: AlertSummary,
        judge: Callable[[AlertState], Crossing | None],
    ) -> tuple[Crossing | None, AlertState]:
        """Make the crossing ``judge`` calls for from the state, against whatever other evaluators do meanwhile,
        and put its event: the crossing made (or None) and the state as this evaluator now knows it."""
        waits = 0
        for _ in range(CHANGE_ATTEMPTS):
            crossing = judge(read)
            if crossing is None:
                return None, read
            if read.pending:  # the last crossing's event first: its maker is putting it, or died
                if waits < PENDING_WAITS and not read.delivery_due(token, self.clock()):
                    waits += 1
                    self.sleep(PENDING_PAUSE_SECONDS)
                    read = self.states.read(alert.name, [counter], summary)[counter]
                    continue
                self._deliver([pending_crossing(alert, counter, read)], summary)
                read = self.states.read(alert.name, [counter], summary)[counter]
                continue
            summary.writes += 1
            changed = self.clock()
            now_held = self.states.change(crossing, read, token, changed)
            mine = now_held is not None and (now_held.by, now_held.transitions, now_held.pending) == (
                token, crossing.transitions, True
            )
            if now_held is None or mine:  # made (or made before an answer was lost)
                summary.crossings += 1
                put = self._deliver([crossing], summary)
                return crossing, replace(crossing.recorded(token, changed), pending=not put)
            read = now_held
        logger.warning("alert %s on %s: state kept changing under %d attempts", alert.name, counter, CHANGE_ATTEMPTS)
        return None, read

    def _deliver_due(
        self, alert: Alert, states: dict[str, AlertState], token: str, now: int, summary: AlertSummary
    ) -> None:
        due = [pending_crossing(alert, c, s) for c, s in states.items() if s.delivery_due(token, now)]
        if due:
            self._deliver(due, summary)
            for crossing in due:
                states[crossing.counter] = replace(states[crossing.counter], pending=False)

    def _deliver(self, crossings: list[Crossing], summary: AlertSummary) -> bool:
        """Put the events, then clear ``pending`` on those put; those that failed stay pending (logged).
        Whether every one was put."""
        failed = self.bus.put(crossings)
        summary.writes += 1
        for crossing in crossings:
            if crossing in failed:
                logger.error("alert event of %s on %s left pending: %s", crossing.alert.name, crossing.counter,
                             crossing.id)
                continue
            self.states.delivered(crossing)
            summary.writes += 1
            summary.delivered += 1
        summary.delivery_failures += len(failed)
        return not failed

    def _above_alerts(self, counter: str) -> tuple[Alert, ...]:
        alerts = self._alerted.get(counter)
        if alerts is None:
            if len(self._alerted) >= ALERTED_MEMORY:
                self._alerted.clear()
            alerts = self._alerted[counter] = alerts_for(self.rules, counter, ABOVE)
        return alerts


def _count(table: CountsTable, counters: list[str], window_ms: int, end: int, now: int, plan: PlanKind) -> list[Any]:
    from tally.query import count_windows  # query reads through dynamo, as this module does

    return count_windows(table, counters, length_ms=window_ms, at_ms=end, consistent=True, now=now, plan=plan)


def _key(alert: str, counter: str) -> dict[str, dict[str, str]]:
    return {COUNTS_TABLE.partition_key: {"S": state_partition(alert)}, COUNTS_TABLE.sort_key: {"S": counter}}


def _plain(item: dict[str, Any]) -> dict[str, Any]:
    """A state item's attributes as plain values."""
    plain: dict[str, Any] = {}
    for name in _STATE_FIELDS:
        if name not in item:
            continue
        value = item[name]
        plain[name] = value.get("S", value.get("N", value.get("BOOL")))
    return plain
