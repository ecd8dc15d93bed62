"""Synthetic events and the brute-force count they are checked against. No I/O.

The default workload is the origin's: 3 counters, 37 hours, 20-100 events per
hour each at random times within the hour. Shapes write the same events as
items of other tables (the origin's jobs, a blog's page views) for counter
rules to count; history shapes (a dispatch system's jobs) change their items
afterwards, for rules that count transitions and deletions. Everything derives from a seed
(times, counts and ids), so the same seed writes the same events and a
benchmark or test can regenerate what a script wrote.
"""

from __future__ import annotations

import json
import math
import random
import uuid
from bisect import insort
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction
from typing import Any, NamedTuple

from tally.core.amounts import average_of

from tally.core.records import Reason
from tally.core.settings import Settings
from tally.core.units import DAY_MS, HOUR_MS
from tally.core.windows import Window

DEFAULT_COUNTERS = ("page-views", "sign-ups", "checkouts")
DEFAULT_HOURS = 37
# The demo's tumbling window: its last one is waited for before the verdict, so shorter than the stack's 60 s.
# A second reader of the same stream (make deploy-local) cuts with the same length to find the same windows.
DEMO_WINDOW_SECONDS = 10
DEFAULT_RATE = (20, 100)  # events per hour per counter, inclusive

# Kinds of bad records the generator can inject, and the reason tally rejects each for.
BAD_KINDS = {
    "missing_counter": Reason.MISSING_COUNTER,
    "reserved_counter": Reason.INVALID_COUNTER,
    "missing_time": Reason.MISSING_TIME,
    "invalid_time": Reason.INVALID_TIME,
    "future_time": Reason.FUTURE_TIME,
    "late_event": Reason.LATE_EVENT,
}


@dataclass(frozen=True)
class Event:
    id: str
    counter: str
    ts_ms: int

    def item(self, settings: Settings = Settings()) -> dict[str, Any]:
        """The event table item (plain values, for boto3's TypeSerializer)."""
        return {"id": self.id, settings.counter_attribute: self.counter, settings.time_attribute: self.ts_ms}


@dataclass(frozen=True)
class Workload:
    counters: Sequence[str] = DEFAULT_COUNTERS
    hours: int = DEFAULT_HOURS
    rate: tuple[int, int] = DEFAULT_RATE
    hot: Mapping[str, int] | None = None  # counter -> exact events per hour, on top of the others
    seed: int = 0

    def __post_init__(self) -> None:
        low, high = self.rate
        if self.hours < 1:
            raise ValueError("hours must be at least 1")
        if not 0 <= low <= high:
            raise ValueError(f"rate must be 0 <= low <= high, got {low}-{high}")
        if any(rate < 0 for rate in (self.hot or {}).values()):
            raise ValueError("hot rates must not be negative")

    def events(self, end_ms: int) -> list[Event]:
        """Events in the ``hours`` hours before ``end_ms`` (each hour [end - (h+1) h, end - h h)), by time."""
        rng = random.Random(self.seed)
        events = []
        for hour in reversed(range(self.hours)):
            start = end_ms - (hour + 1) * HOUR_MS
            per_counter = [(counter, rng.randint(*self.rate)) for counter in self.counters]
            per_counter += list((self.hot or {}).items())
            for counter, count in per_counter:
                for _ in range(count):
                    events.append(Event(_event_id(rng), counter, rng.randrange(start, start + HOUR_MS)))
        events.sort(key=lambda event: event.ts_ms)
        return events


def _event_id(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def bad_items(count: int, end_ms: int, seed: int = 0, settings: Settings = Settings()) -> list[dict[str, Any]]:
    """``count`` items tally must reject, cycling through BAD_KINDS; each names its kind in ``bad``."""
    rng = random.Random(f"bad-{seed}")
    counter, time = settings.counter_attribute, settings.time_attribute
    items = []
    for index in range(count):
        kind = list(BAD_KINDS)[index % len(BAD_KINDS)]
        item: dict[str, Any] = {"id": _event_id(rng), "bad": kind, counter: DEFAULT_COUNTERS[0], time: end_ms}
        if kind == "missing_counter":
            del item[counter]
        elif kind == "reserved_counter":
            item[counter] = "#segment#forged"
        elif kind == "missing_time":
            del item[time]
        elif kind == "invalid_time":
            item[time] = "yesterday at noon"
        elif kind == "future_time":
            item[time] = end_ms + HOUR_MS
        elif kind == "late_event":
            item[time] = end_ms - settings.hour_retention_ms - 10 * DAY_MS  # its hour expired before it arrived
        items.append(item)
    return items


def brute_force_counts(
    items: Iterable[Mapping[str, Any]],
    counters: Iterable[str],
    window: Window,
    *,
    arrivals_ms: Mapping[str, int] | None = None,
    settings: Settings = Settings(),
) -> dict[str, dict[str, int]]:
    """Count raw event items in ``window`` per counter, the slow obvious way.

    Only epoch-millisecond times are understood (what the generator writes).
    With ``arrivals_ms`` (item id -> when its stream record was created),
    events whose hour was past the hour retention at arrival, or stamped more
    than the clock skew after it, are split out as ``late``/``future``: tally
    rejects those by design (docs/design.md, "Time and buckets"). ``expected`` is what the
    window must count.
    """
    wanted = set(counters)
    result = {counter: {"in_window": 0, "late": 0, "future": 0, "expected": 0} for counter in wanted}
    for item in items:
        counter, ts = item.get(settings.counter_attribute), item.get(settings.time_attribute)
        if counter not in wanted or isinstance(ts, bool) or not isinstance(ts, int | Decimal):
            continue
        ts_ms = int(ts)
        if ts_ms != ts or not window.covers(ts_ms):
            continue
        tally = result[counter]
        tally["in_window"] += 1
        arrival = (arrivals_ms or {}).get(str(item.get("id")))
        verdict = None if arrival is None else _arrival_verdict(ts_ms, arrival, settings)
        if verdict is Reason.LATE_EVENT:
            tally["late"] += 1
        elif verdict is Reason.FUTURE_TIME:
            tally["future"] += 1
        else:
            tally["expected"] += 1
    return result


def expected_rejections(
    items: Iterable[Mapping[str, Any]], arrivals_ms: Mapping[str, int], settings: Settings = Settings()
) -> Counter[Reason]:
    """What tally must reject among generated items: every injected bad record, and every
    workload event stamped too long before (or too far after) its stream record's arrival."""
    rejected: Counter[Reason] = Counter()
    for item in items:
        if "bad" in item:
            rejected[BAD_KINDS[str(item["bad"])]] += 1
            continue
        arrival, ts = arrivals_ms.get(str(item.get("id"))), item.get(settings.time_attribute)
        if arrival is None or not isinstance(ts, int | Decimal):
            continue
        verdict = _arrival_verdict(int(ts), arrival, settings)
        if verdict is not None:
            rejected[verdict] += 1
    return rejected


def is_late(ts_ms: int, arrival_ms: int, settings: Settings) -> bool:
    """Whether an event's hour was no longer readable (its end plus the hour retention) at its arrival."""
    return (ts_ms // HOUR_MS + 1) * HOUR_MS + settings.hour_retention_ms <= arrival_ms


def _arrival_verdict(ts_ms: int, arrival_ms: int, settings: Settings) -> Reason | None:
    """The stated acceptance rule, restated independently of the parser it checks.

    An hour bucket is readable until its end plus the hour retention; an event
    whose hour is no longer readable when its record arrives is late.
    """
    if is_late(ts_ms, arrival_ms, settings):
        return Reason.LATE_EVENT
    if ts_ms - arrival_ms > settings.max_clock_skew_ms:
        return Reason.FUTURE_TIME
    return None


class Adds(NamedTuple):
    """What one item adds to one counter, as a shape's rules restated by hand say: 1, and its amount
    (summing rules), its value (histogram rules) and the value whose distinct occurrences it counts."""

    counter: str
    amount: Decimal | None = None
    value: Decimal | None = None
    distinct: str | None = None


@dataclass(frozen=True)
class Shape:
    """A table shape that is not tally's own: the rules that count it and where its time lives.

    ``truth`` restates the rules by hand, independently of tally's rule engine:
    what one item adds to every counter it counts in.
    """

    name: str
    time_attribute: str
    rules: tuple[dict[str, Any], ...]
    keys: tuple[str, ...]  # what the workload's counters stand for: providers, pages
    item: Callable[[Event, random.Random], dict[str, Any]]
    truth: Callable[[Mapping[str, Any]], list[Adds]]

    @property
    def rules_json(self) -> str:
        return json.dumps(list(self.rules))

    def items(self, workload: Workload, end_ms: int) -> list[dict[str, Any]]:
        """The workload's events as items of this shape; status and amounts drawn from the seed."""
        rng = random.Random(f"{self.name}-{workload.seed}")
        return [self.item(event, rng) for event in workload.events(end_ms)]


def _origin_item(event: Event, rng: random.Random) -> dict[str, Any]:
    """A job as the origin's table holds it, with a price and an outcome."""
    return {
        "id": event.id,
        "insertUtcTime": event.ts_ms,
        "counterKeyPrefix": "jobs",
        "providerId": event.counter,
        "status": rng.choices(["done", "failed", "queued"], weights=[7, 2, 1])[0],
        "amount": Decimal(rng.randint(1, 99_999)) / 100,
    }


def _origin_truth(item: Mapping[str, Any]) -> list[Adds]:
    counters = [Adds(f"{item['counterKeyPrefix']}/{item['providerId']}"), Adds("jobs/all")]
    if item["status"] == "done":
        counters.append(Adds(f"revenue/{item['providerId']}", Decimal(item["amount"])))
    return counters


def _blog_item(event: Event, rng: random.Random) -> dict[str, Any]:
    """A page view as a blog logs it: ISO time, a client, an HTTP status and the page's load time.

    Load times are log-normal around 400 ms (most between 100 ms and 2 s, a long tail to 60 s),
    in whole milliseconds, as a browser's timing API reports them.
    """
    return {
        "id": event.id,
        "url": f"/posts/{event.counter}",
        "time": iso_millis(event.ts_ms),
        "clientId": f"client-{rng.randrange(10_000):04d}",
        "status": rng.choices([200, 304, 404], weights=[8, 1, 1])[0],
        "loadMs": min(60_000, max(1, round(rng.lognormvariate(math.log(400), 0.8)))),
    }


def _blog_truth(item: Mapping[str, Any]) -> list[Adds]:
    counters = [Adds(f"views{item['url']}", distinct=item["clientId"])]
    if item["status"] in (200, 304):
        counters.append(Adds("views/all"))
    if item["status"] == 200:
        load = Decimal(item["loadMs"])
        counters.append(Adds(f"load{item['url']}", load, load))
    return counters


def iso_millis(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


SHAPES = {
    "origin": Shape(
        name="origin",
        time_attribute="insertUtcTime",
        rules=(
            {"name": "jobs", "counter": "{counterKeyPrefix}/{providerId}"},
            {"name": "jobs-all", "counter": "jobs/all"},
            {"name": "revenue", "counter": "revenue/{providerId}", "when": {"status": {"equals": "done"}}, "sum": "amount"},
        ),
        keys=("provider-1", "provider-2", "provider-3"),
        item=_origin_item,
        truth=_origin_truth,
    ),
    "blog": Shape(
        name="blog",
        time_attribute="time",
        rules=(
            {"name": "views", "counter": "views{url}", "distinct": "clientId"},
            {"name": "views-all", "counter": "views/all", "when": {"status": {"oneOf": [200, 304]}}},
            {
                "name": "load-time",
                "counter": "load{url}",
                "when": {"status": {"equals": 200}},
                "sum": "loadMs",
                "histogram": "loadMs",
            },
        ),
        keys=("hello-world", "counting-on-dynamodb", "about"),
        item=_blog_item,
        truth=_blog_truth,
    ),
}


@dataclass
class ShapedTruth:
    """Brute force over shaped items: per counter, events in the window, late ones set aside, sums and values."""

    in_window: Counter[str] = field(default_factory=Counter)
    late: Counter[str] = field(default_factory=Counter)
    expected: Counter[str] = field(default_factory=Counter)
    sums: dict[str, Decimal] = field(default_factory=dict)
    values: dict[str, list[Decimal]] = field(default_factory=dict)  # of histogram counters, in order
    distinct: dict[str, set[str]] = field(default_factory=dict)  # of distinct counters: the values seen
    counters: set[str] = field(default_factory=set)  # every counter the rules add to, in the window or not

    def average(self, counter: str) -> Decimal | None:
        return average_of(self.sums[counter], self.expected[counter]) if counter in self.sums else None

    def quantile(self, counter: str, q: Decimal) -> Decimal | None:
        """The value of rank ⌈q·n⌉ (rank 1 for q = 0) among the counter's n values in the window."""
        ordered = self.values.get(counter)
        if not ordered:
            return None
        rank = max(1, math.ceil(Fraction(q) * len(ordered)))
        return ordered[rank - 1]

    def add(
        self, counter: str, event_ms: int, amount: Decimal | None, arrival_ms: int | None, window: Window,
        settings: Settings, value: Decimal | None = None, distinct: str | None = None,
    ) -> None:
        """One event of ``counter`` (with its amount, for a summing rule, its value for a histogram rule, the
        value it counts for a distinct rule), if it falls in ``window``; set aside as late or future when its
        record's arrival (None: unknown) makes tally reject it."""
        if amount is not None:
            self.sums.setdefault(counter, Decimal(0))
        if value is not None:
            self.values.setdefault(counter, [])
        if distinct is not None:
            self.distinct.setdefault(counter, set())
        self.counters.add(counter)
        if not window.covers(event_ms):
            return
        self.in_window[counter] += 1
        if arrival_ms is not None and _arrival_verdict(event_ms, arrival_ms, settings) is not None:
            self.late[counter] += 1
            return
        self.expected[counter] += 1
        if amount is not None:
            self.sums[counter] += amount
        if value is not None:
            insort(self.values[counter], value)
        if distinct is not None:
            self.distinct[counter].add(distinct)


def shaped_truth(
    shape: Shape, items: Iterable[tuple[int, Mapping[str, Any]]], window: Window, arrivals_ms: Mapping[str, int],
    settings: Settings,
) -> ShapedTruth:
    """``items`` as (event ms, item): what every counter the shape's rules name must hold for the window."""
    truth = ShapedTruth()
    for ts_ms, item in items:
        for counter, amount, value, distinct in shape.truth(item):
            truth.add(counter, ts_ms, amount, arrivals_ms.get(str(item["id"])), window, settings, value, distinct)
    return truth


# --- Items that change: a dispatch system's jobs ---------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """One change of an item as its stream record carries it: the kind, the item after it (None for a
    deletion) and before it (None for an insert), when it is made, and whether DynamoDB's TTL made it."""

    kind: str  # INSERT, MODIFY or REMOVE
    new: Mapping[str, Any] | None
    old: Mapping[str, Any] | None
    at_ms: int
    by_ttl: bool = False

    @property
    def key(self) -> dict[str, Any]:
        return {"id": (self.new or self.old or {})["id"]}


@dataclass(frozen=True)
class HistoryShape:
    """A table whose items change: the rules that count its transitions and deletions, and their truth.

    ``histories`` gives every item's changes in order, the deletions DynamoDB's
    TTL makes by ``end_ms`` included; ``truth`` restates the rules by hand,
    independently of tally's rule engine: (counter, event ms, amount or None)
    for every counter one change adds to, given its record's arrival.
    """

    name: str
    time_attribute: str
    ttl_attribute: str
    rules: tuple[dict[str, Any], ...]
    keys: tuple[str, ...]
    histories: Callable[[Workload, int], list[list[Change]]]
    truth: Callable[[Change, int], list[tuple[str, int, Decimal | None]]]

    @property
    def rules_json(self) -> str:
        return json.dumps(list(self.rules))


JOB_TTL_HOURS = 24


def job_histories(workload: Workload, end_ms: int) -> list[list[Change]]:
    """A job placed at each of the workload's event times, with its changes up to ``end_ms`` (``job_history``)."""
    rng = random.Random(f"jobs-{workload.seed}")
    return [job_history(event, rng, end_ms) for event in workload.events(end_ms)]


def job_history(event: Event, rng: random.Random, end_ms: int, ttl_seconds: int = JOB_TTL_HOURS * 3600) -> list[Change]:
    """A job placed at the event's time, then done (7 in 10, a few reopened and done again) or cancelled
    (2 in 10) minutes later, as far as that happens by ``end_ms``; a third of the cancelled ones are
    deleted by their owner within the hour; one still there when ``expiresAt`` (``ttl_seconds`` after
    its placement) passes is deleted by TTL, at that instant, if it lies before ``end_ms``."""
    job: dict[str, Any] = {
        "id": event.id,
        "providerId": event.counter,
        "status": "placed",
        "placedAt": event.ts_ms,
        "amount": Decimal(rng.randint(100, 99_999)) / 100,
        "expiresAt": event.ts_ms // 1000 + ttl_seconds,
    }
    history = [Change("INSERT", job, None, event.ts_ms)]
    outcome = rng.choices(["done", "cancelled", "open"], weights=[7, 2, 1])[0]
    steps = {"done": [("done", 30)], "cancelled": [("cancelled", 10)], "open": []}[outcome]
    if outcome == "done" and rng.random() < 0.05:
        steps += [("placed", 5), ("done", 20)]  # reopened, then done again: two transitions to done
    if outcome == "cancelled" and rng.random() < 0.33:
        steps.append(("deleted", 60))
    at = event.ts_ms
    for status, most_minutes in steps:
        at += rng.randint(1, most_minutes * 60) * 1000 + rng.randrange(1000)
        if at > end_ms or at >= job["expiresAt"] * 1000:
            break
        old = history[-1].new
        assert old is not None
        if status == "deleted":
            history.append(Change("REMOVE", None, old, at))
            break
        new = {key: value for key, value in old.items() if status != "placed" or key != "doneAt"}
        new["status"] = status
        if status != "placed":
            new[f"{status}At"] = at
        history.append(Change("MODIFY", new, old, at))
    last = history[-1]
    if last.new is not None and last.new["expiresAt"] * 1000 <= end_ms:
        history.append(Change("REMOVE", None, last.new, last.new["expiresAt"] * 1000, by_ttl=True))
    return history


def job_truth(change: Change, arrival_ms: int) -> list[tuple[str, int, Decimal | None]]:
    """JOB_RULES restated: placements by placedAt; a job becoming done (by doneAt, with its amount) or
    cancelled (by cancelledAt) when it was not so before; deletions by owners and by TTL at their arrival."""
    if change.kind == "REMOVE":
        assert change.old is not None
        name = f"expired/{change.old['status']}" if change.by_ttl else "deleted/all"
        return [(name, arrival_ms, None)]
    new, old = change.new, change.old
    assert new is not None
    counted: list[tuple[str, int, Decimal | None]] = []
    if change.kind == "INSERT":
        counted.append((f"placed/{new['providerId']}", new["placedAt"], None))
    for status in ("done", "cancelled"):
        if new["status"] == status and (old is None or old["status"] != status):
            amount = Decimal(new["amount"]) if status == "done" else None
            counted.append((f"{status}/{new['providerId']}", new[f"{status}At"], amount))
    return counted


JOB_RULES = (
    {"name": "placed", "counter": "placed/{providerId}"},
    {
        "name": "done",
        "counter": "done/{providerId}",
        "becomes": {"status": {"equals": "done"}},
        "time": "doneAt",
        "sum": "amount",
    },
    {
        "name": "cancelled",
        "counter": "cancelled/{providerId}",
        "becomes": {"status": {"equals": "cancelled"}},
        "time": "cancelledAt",
    },
    {"name": "deleted", "counter": "deleted/all", "on": "REMOVE", "deletedBy": "user", "time": "@arrival"},
    {"name": "expired", "counter": "expired/{status}", "on": "REMOVE", "deletedBy": "ttl", "time": "@arrival"},
)

HISTORY_SHAPES = {
    "jobs": HistoryShape(
        name="jobs",
        time_attribute="placedAt",
        ttl_attribute="expiresAt",
        rules=JOB_RULES,
        keys=("provider-1", "provider-2", "provider-3"),
        histories=job_histories,
        truth=job_truth,
    )
}


def history_truth(
    shape: HistoryShape, histories: Iterable[list[Change]], arrivals: Mapping[str, list[int]], window: Window,
    settings: Settings,
) -> ShapedTruth:
    """Brute force over items' histories: each change's counters, by the arrival of its own record
    (``arrivals``: item id -> its records' arrivals, in stream order), for ``window``."""
    truth = ShapedTruth()
    for history in histories:
        item_arrivals = arrivals.get(str(history[0].key["id"]), [])
        for change, arrival in zip(history, item_arrivals, strict=False):
            for counter, event_ms, amount in shape.truth(change, arrival):
                truth.add(counter, event_ms, amount, arrival, window, settings)
    return truth


@dataclass(frozen=True)
class LoginsShape:
    """Failed logins per IP address, watched by an alert: a steady trickle from a few addresses, and one
    burst from another, written in three phases (before, during and after the burst) so that the alert
    fires on the burst's commit and clears at the next scheduled evaluation."""

    name: str = "logins"
    time_attribute: str = "at"
    threshold: int = 20  # failed logins in 10 minutes
    clear: int = 5
    window_minutes: int = 10
    burst_ip: str = "203.0.113.66"
    burst_logins: int = 45
    burst_minutes: int = 4
    burst_ago_minutes: int = 30  # the burst starts this long before the demo's end
    steady_ips: tuple[str, ...] = ("198.51.100.1", "198.51.100.2", "198.51.100.3", "198.51.100.4")
    minutes: int = 60  # of steady traffic, ending at the demo's end

    @property
    def keys(self) -> tuple[str, ...]:
        return (*self.steady_ips, self.burst_ip)

    @property
    def alert_name(self) -> str:
        return "login-burst"

    @property
    def rules(self) -> tuple[dict[str, Any], ...]:
        alert = {"name": self.alert_name, "window": f"{self.window_minutes}m", "above": self.threshold, "clear": self.clear}
        return ({"name": "failed-logins", "counter": "logins/{ip}", "when": {"outcome": {"equals": "failed"}}, "alerts": [alert]},)

    @property
    def rules_json(self) -> str:
        return json.dumps(list(self.rules))

    def phases(self, end_ms: int, seed: int) -> list[list[dict[str, Any]]]:
        """Items before the burst, during it, and after it (each phase's items in time order).

        Steady addresses fail at most once a minute (and succeed as often), so no 10 minutes of theirs
        reach the threshold; the burst's address fails ``burst_logins`` times within ``burst_minutes``.
        """
        rng = random.Random(f"logins-{seed}")
        last_minute = end_ms // 60_000
        burst_first = last_minute - self.burst_ago_minutes
        items = []
        for minute in range(last_minute - self.minutes + 1, last_minute + 1):
            for ip in self.steady_ips:
                for outcome in ("failed", "ok"):
                    if rng.random() < 0.5:
                        items.append(self._item(rng, ip, minute * 60_000 + rng.randrange(60_000), outcome, end_ms))
        for _ in range(self.burst_logins):
            at = burst_first * 60_000 + rng.randrange(self.burst_minutes * 60_000)
            items.append(self._item(rng, self.burst_ip, at, "failed", end_ms))
        items.sort(key=lambda item: item["at"])
        burst_start, burst_end = burst_first * 60_000, (burst_first + self.burst_minutes) * 60_000
        return [
            [item for item in items if item["at"] < burst_start],
            [item for item in items if burst_start <= item["at"] < burst_end],
            [item for item in items if item["at"] >= burst_end],
        ]

    @staticmethod
    def _item(rng: random.Random, ip: str, at: int, outcome: str, end_ms: int) -> dict[str, Any]:
        return {"id": _event_id(rng), "ip": ip, "at": min(at, end_ms - 1), "outcome": outcome}

    @staticmethod
    def failed_in(items: Sequence[Mapping[str, Any]], counter: str, start_ms: int, end_ms: int) -> int:
        """Brute force: the failed logins of ``counter``'s address whose minute lies in [start_ms, end_ms)."""
        ip = counter.removeprefix("logins/")
        return sum(
            1
            for item in items
            if item["ip"] == ip and item["outcome"] == "failed" and start_ms <= item["at"] // 60_000 * 60_000 < end_ms
        )


LOGINS = LoginsShape()
