"""Threshold alerts on counter windows: what a rule's ``alerts`` say, and when an alert changes state. No I/O.

A rule may watch every counter it writes:

    {"name": "logins", "counter": "logins/{ip}",
     "alerts": [{"name": "login-burst", "window": "10m", "above": 100, "clear": 50},
                {"name": "login-silence", "window": "1h", "below": 1}]}

An ``above`` alert is in ALARM once the window's count exceeds ``above`` and
stays there until the count falls to ``clear`` or less (default: ``above``);
a ``below`` alert is in ALARM once the count falls under ``below`` and clears
at ``clear`` or more (default: ``below``). The gap between the two levels is
the hysteresis that keeps a count hovering at the line from alarming every
minute. Each change of state is one crossing, delivered once, under an id
that any deliverer of the same crossing computes alike (``Crossing.id``).

Which windows are judged, and when (docs/rules.md, Alerts): right after each
commit that wrote one of an ``above`` alert's counters, every window of the
alert's length that holds a minute the commit wrote, the windows between, and
(in ALARM) the alert's length of windows before its first minute, none ending
past now: ``commit_windows``, in time order, from one read of the counter's
minute items. ``commit_crossing`` walks them from the stored state: a window
the commit changed can raise, a complete window after the last change can
clear. Once a minute a scheduled evaluation clears above alarms over the
window ending now and judges ``below`` alerts (which need no event to fire)
over the window ending at the newest minute that ended ``SETTLE_MS`` ago
(``settled_end_ms``), so that events still on their way through the stream's
tumbling window do not make a count look low.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from tally.core.buckets import Bucket, iso_minute
from tally.core.units import DAY_MS, MINUTE_MS
from tally.core.windows import InvalidWindow, parse_length

ABOVE, BELOW = "above", "below"
ALARM, OK = "ALARM", "OK"
STATES = (ALARM, OK)
MAX_ALERTS_PER_RULE = 10
MAX_ALERT_NAME_LENGTH = 64
# At most the default window: a longer one would read hours past the minute retention's guarantees.
MAX_ALERT_WINDOW_MS = DAY_MS
# Largest threshold: a count of one bucket never approaches it, and it keeps the rules' text short.
MAX_THRESHOLD = 10**15
# Below alerts judge minutes that ended this long ago: longer than the default tumbling window (60 s)
# plus a commit, so a minute's events are in before its count is called low.
SETTLE_MS = 2 * MINUTE_MS
# A crossing whose event is still pending this long after it was made is put by whoever finds it:
# its maker crashed between the state change and the put.
DELIVERY_LEASE_MS = 60_000
_FIELDS = frozenset({"name", "window", ABOVE, BELOW, "clear"})
_NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/-]*")


class AlertsError(ValueError):
    """A rule's ``alerts`` field tally cannot apply; the message names the alert and the field."""


@dataclass(frozen=True)
class Alert:
    """One alert of one rule: ALARM past ``threshold`` (``direction`` above or below), OK back at ``clear``."""

    name: str
    rule: str
    window: str  # as written: "10m"
    window_ms: int
    direction: str
    threshold: int
    clear: int

    def judge(self, state: str, total: int) -> str:
        """The state after a window of ``total``: past the threshold ALARM, at or within ``clear`` OK,
        between the two levels unchanged (hysteresis)."""
        if self.direction == ABOVE:
            if total > self.threshold:
                return ALARM
            return OK if total <= self.clear else state
        if total < self.threshold:
            return ALARM
        return OK if total >= self.clear else state

    def level(self, state: str) -> int:
        """The level an event of ``state`` reports as its threshold: the one crossed to get there."""
        return self.threshold if state == ALARM else self.clear


def parse_alerts(raw: Any, rule: str) -> tuple[Alert, ...]:
    """A rule's ``alerts`` JSON (numbers as Decimals) -> Alerts; AlertsError names the alert and its field."""
    if not isinstance(raw, list) or not raw:
        raise AlertsError('must be a non-empty list of {"name", "window", "above" or "below", "clear"?}')
    if len(raw) > MAX_ALERTS_PER_RULE:
        raise AlertsError(f"holds {len(raw)} alerts, at most {MAX_ALERTS_PER_RULE} a rule")
    alerts = tuple(_alert(index, entry, rule) for index, entry in enumerate(raw, start=1))
    names = [alert.name for alert in alerts]
    for index, name in enumerate(names, start=1):
        if names.index(name) + 1 != index:
            raise AlertsError(f"alert {index} ({name!r}): field 'name': same name as alert {names.index(name) + 1}")
    return alerts


def _alert(index: int, entry: Any, rule: str) -> Alert:
    where = f"alert {index}"
    if not isinstance(entry, dict):
        raise AlertsError(f'{where}: must be an object like {{"name": "burst", "window": "10m", "above": 100}}')
    name = entry.get("name")
    if isinstance(name, str):
        where = f"alert {index} ({name!r})"
    unknown = sorted(set(entry) - _FIELDS)
    if unknown:
        raise AlertsError(f"{where}: field {unknown[0]!r}: unknown; an alert has {', '.join(sorted(_FIELDS))}")
    if not isinstance(name, str) or len(name) > MAX_ALERT_NAME_LENGTH or not _NAME_PATTERN.fullmatch(name):
        raise AlertsError(
            f"{where}: field 'name': must be 1-{MAX_ALERT_NAME_LENGTH} letters, digits or _.:/- "
            f"starting with a letter or digit, got {name!r}"
        )
    window = entry.get("window")
    try:
        window_ms = parse_length(window) if isinstance(window, str) else 0
    except InvalidWindow as error:
        raise AlertsError(f"{where}: field 'window': {error}") from None
    if not 0 < window_ms <= MAX_ALERT_WINDOW_MS:
        raise AlertsError(f"{where}: field 'window': must be a length from 1m to 24h, like \"10m\", got {window!r}")
    directions = [key for key in (ABOVE, BELOW) if key in entry]
    if len(directions) != 1:
        raise AlertsError(f"{where}: needs exactly one of 'above' and 'below'")
    [direction] = directions
    threshold = _level(where, direction, entry[direction])
    if direction == BELOW and threshold < 1:
        raise AlertsError(f"{where}: field 'below': must be at least 1: no count is below 0")
    clear = _level(where, "clear", entry["clear"]) if "clear" in entry else threshold
    if direction == ABOVE and clear > threshold:
        raise AlertsError(f"{where}: field 'clear': must be at most 'above' ({threshold}), got {clear}")
    if direction == BELOW and clear < threshold:
        raise AlertsError(f"{where}: field 'clear': must be at least 'below' ({threshold}), got {clear}")
    return Alert(name, rule, window.strip(), window_ms, direction, threshold, clear)


def _level(where: str, field: str, value: Any) -> int:
    whole = isinstance(value, Decimal | int) and not isinstance(value, bool) and value == int(value)
    if not whole or not 0 <= value <= MAX_THRESHOLD:
        shown = str(value) if isinstance(value, Decimal) else repr(value)
        raise AlertsError(f"{where}: field {field!r}: must be a whole count from 0 to {MAX_THRESHOLD}, got {shown}")
    return int(value)


@dataclass(frozen=True)
class AlertState:
    """What an (alert, counter) state item holds: its state, how many times it changed, and whether the
    event of the last change is still to be put (``pending``), by whom (``by``) and when it changed.

    ``start_ms``, ``end_ms`` and ``total`` are the window that made the last change: a deliverer that
    finishes another's crossing puts the same event. ``raised_ms`` is the end of the window that raised the
    last ALARM: a later window over the threshold belongs to that episode (``commit_crossing``).
    """

    state: str = OK
    transitions: int = 0
    pending: bool = False
    by: str = ""
    changed_ms: int = 0
    start_ms: int = 0
    end_ms: int = 0
    total: int = 0
    raised_ms: int = 0

    def delivery_due(self, token: str, now_ms: int) -> bool:
        """Whether an evaluator called ``token`` at ``now_ms`` should put the pending event: its own crossing
        (a retry of its maker), or one whose maker has not finished within the lease."""
        return self.pending and (self.by == token or now_ms - self.changed_ms >= DELIVERY_LEASE_MS)


@dataclass(frozen=True)
class Crossing:
    """One change of state of one alert on one counter: the ``transitions``-th, to ``state``."""

    alert: Alert
    counter: str
    state: str
    transitions: int
    start_ms: int
    end_ms: int
    total: int
    raised_ms: int = 0  # the end of the window that raised the episode this crossing belongs to

    @property
    def id(self) -> str:
        """The same for every deliverer of this crossing, different for every other (a UUID's form)."""
        text = "\x1f".join((self.alert.name, self.counter, str(self.transitions), str(self.end_ms)))
        return str(uuid.UUID(bytes=hashlib.sha256(text.encode()).digest()[:16]))

    def detail(self) -> dict[str, Any]:
        """The event's detail, as EventBridge carries it."""
        return {
            "id": self.id,
            "alert": self.alert.name,
            "rule": self.alert.rule,
            "counter": self.counter,
            "state": self.state,
            "window": self.alert.window,
            "start": iso_minute(self.start_ms),
            "end": iso_minute(self.end_ms),
            "total": self.total,
            "threshold": self.alert.level(self.state),
        }

    def recorded(self, token: str, now_ms: int) -> AlertState:
        """The state item once this crossing is made by ``token``, its event still to put."""
        return AlertState(
            self.state, self.transitions, True, token, now_ms, self.start_ms, self.end_ms, self.total, self.raised_ms
        )


def crossing_of(
    alert: Alert, counter: str, current: AlertState, total: int, start_ms: int, end_ms: int, raise_only: bool = False
) -> Crossing | None:
    """The crossing the scheduled evaluation's window of ``total`` makes from ``current``, or None.
    ``raise_only``: only to ALARM (a cleared counter judged again).

    The schedule judges one window, ending now, not the run of windows before it: a clear it makes leaves
    no episode behind it (``raised_ms`` is its own window), so the windows of a backlog still being
    replayed that its commits push over the threshold raise (``commit_crossing``)."""
    state = alert.judge(current.state, total)
    if state == current.state or (raise_only and state != ALARM):
        return None
    return Crossing(alert, counter, state, current.transitions + 1, start_ms, end_ms, total, end_ms)


def pending_crossing(alert: Alert, counter: str, stored: AlertState) -> Crossing:
    """The crossing whose event a state item still holds as pending."""
    return Crossing(
        alert, counter, stored.state, stored.transitions, stored.start_ms, stored.end_ms, stored.total, stored.raised_ms
    )


def replay(alert: Alert, totals: Iterable[int], state: str = OK) -> list[str]:
    """The states an alert takes, one per total, judged one after the other."""
    states = []
    for total in totals:
        state = alert.judge(state, total)
        states.append(state)
    return states


@dataclass(frozen=True)
class CommitWindow:
    """One window a commit judges: its edges, its count read after the commit (``total``), the part of it the
    commit itself added (``own``), and whether it may clear (``complete``): it has ended by the judging clock
    and ends no later than the newest minute the commit wrote, so the records after the commit's in its
    stream, which come in later minutes, cannot change it (in a backlog the clock is no guide: every window
    has ended, and the next commit may still fill the ones after this commit's minutes)."""

    start_ms: int
    end_ms: int
    total: int
    own: int
    complete: bool

    @property
    def before(self) -> int:
        """The count without this commit's events: what whoever judged the window before saw at most."""
        return self.total - self.own


def minutes_written(deltas: Mapping[tuple[str, Bucket], int], counters: Collection[str]) -> dict[str, dict[int, int]]:
    """For each of ``counters`` a commit wrote a minute of: its minutes (since the epoch) and the events it
    added to each."""
    written: dict[str, dict[int, int]] = {}
    for (counter, bucket), events in deltas.items():
        if bucket.kind == "M" and counter in counters:
            minutes = written.setdefault(counter, {})
            minutes[bucket.index] = minutes.get(bucket.index, 0) + events
    return written


def judged_last_minutes(written: Collection[int], window_ms: int, now_ms: int, alarmed: bool = True) -> range:
    """The last minutes of the windows a commit that wrote the ``written`` minutes judges, in time order: if
    the alert is in ALARM (``alarmed``), the alert's length of windows before the first written minute (they
    may clear an alarm that ended in a quiet stretch since the last commit; they can raise nothing), then
    every window holding a written minute, none past the window ending now (the read API's: its last minute
    holds ``now_ms - 1``), except up to the newest written minute when the clock is behind it (a record
    within the clock-skew allowance)."""
    length = window_ms // MINUTE_MS
    newest = max((now_ms - 1) // MINUTE_MS, max(written))
    return range(min(written) - (length if alarmed else 0), min(max(written) + length - 1, newest) + 1)


def commit_windows(
    window_ms: int,
    written: Mapping[int, int],
    counts: Mapping[int, int],
    now_ms: int,
    oldest_minute: int = 0,
    alarmed: bool = True,
) -> tuple[list[CommitWindow], int]:
    """The windows of ``window_ms`` a commit judges (``judged_last_minutes``), in time order, with their totals
    over ``counts`` (minute -> count read after the commit); and how many were left out because they reach
    back before ``oldest_minute`` (past the minute retention, as the read API refuses them). A window the
    commit did not change is kept only if it is complete: it may clear, never raise."""
    length = window_ms // MINUTE_MS
    newest_written = max(written)
    windows: list[CommitWindow] = []
    skipped = 0
    last_minutes = judged_last_minutes(written, window_ms, now_ms, alarmed)
    before_first = range(last_minutes.start - length, last_minutes.start)  # the window just before the first
    total = sum(counts.get(minute, 0) for minute in before_first)
    own = sum(written.get(minute, 0) for minute in before_first)
    for last in last_minutes:  # slide: add the window's last minute, drop the one before its first
        total += counts.get(last, 0) - counts.get(last - length, 0)
        own += written.get(last, 0) - written.get(last - length, 0)
        start_ms, end_ms = (last - length + 1) * MINUTE_MS, (last + 1) * MINUTE_MS
        complete = end_ms <= now_ms and last <= newest_written
        if last - length + 1 < oldest_minute:
            skipped += 1
        elif own or complete:
            windows.append(CommitWindow(start_ms, end_ms, total, own, complete))
    return windows, skipped


def commit_crossing(alert: Alert, counter: str, current: AlertState, window: CommitWindow) -> Crossing | None:
    """The crossing a commit's window makes from ``current`` (an above alert), or None.

    ALARM: over the threshold, in a window the commit changed, unless the window belongs to the last
    episode or was already over without this commit (its crossing was judged by whoever pushed it over): a
    window ending at or after the last change raises; an older one only if this commit pushed it over and
    it ends before the last episode was raised. OK: at ``clear`` or less, in a complete window after the
    last change (an older window never clears a newer alarm).
    """
    state = alert.judge(current.state, window.total)
    if state == current.state:
        return None
    if state == ALARM:
        newer = window.end_ms >= current.end_ms
        older_episode = window.before <= alert.threshold and (
            window.end_ms < current.raised_ms or not current.raised_ms
        )
        if not window.own or not (newer or older_episode):
            return None
        raised = window.end_ms
    else:
        if not window.complete or window.end_ms <= current.end_ms:
            return None
        raised = current.raised_ms
    return Crossing(
        alert, counter, state, current.transitions + 1, window.start_ms, window.end_ms, window.total, raised
    )


def settled_end_ms(now_ms: int) -> int:
    """Where a scheduled evaluation's below windows end: the newest minute that ended SETTLE_MS ago."""
    return (now_ms - SETTLE_MS) // MINUTE_MS * MINUTE_MS


def alerts_of(rules: Iterable[Any]) -> tuple[Alert, ...]:
    """Every alert of some rules (``Rule`` objects), in rule order."""
    return tuple(alert for rule in rules for alert in rule.alerts)


def alerts_for(rules: Iterable[Any], counter: str, direction: str | None = None) -> tuple[Alert, ...]:
    """The alerts of the rules that can write ``counter`` (optionally of one direction)."""
    return tuple(
        alert
        for rule in rules
        if rule.alerts and rule.counter.could_render(counter)
        for alert in rule.alerts
        if direction is None or alert.direction == direction
    )


def state_of(item: Mapping[str, Any] | None) -> AlertState:
    """An AlertState from a state item's plain values (None: no item yet, so OK and never changed)."""
    if not item:
        return AlertState()
    return AlertState(
        str(item["state"]),
        int(item["transitions"]),
        bool(item.get("pending", False)),
        str(item.get("by", "")),
        int(item.get("changed", 0)),
        int(item.get("start", 0)),
        int(item.get("end", 0)),
        int(item.get("total", 0)),
        int(item.get("raised", 0)),
    )
