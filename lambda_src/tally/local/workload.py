"""Synthetic events and the brute-force count they are checked against. No I/O.

The default workload is the origin's: 3 counters, 37 hours, 20-100 events per
hour each at random times within the hour. Everything derives from a seed
(times, counts and ids), so the same seed writes the same events and a
benchmark or test can regenerate what a script wrote.
"""

from __future__ import annotations

import random
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from tally.core.records import Reason
from tally.core.settings import DAY_MS, HOUR_MS, Settings
from tally.core.windows import Window

DEFAULT_COUNTERS = ("page-views", "sign-ups", "checkouts")
DEFAULT_HOURS = 37
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
    rejects those by design (DESIGN.md, section 3). ``expected`` is what the
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


def _arrival_verdict(ts_ms: int, arrival_ms: int, settings: Settings) -> Reason | None:
    """The stated acceptance rule, restated independently of the parser it checks.

    An hour bucket is readable until its end plus the hour retention; an event
    whose hour is no longer readable when its record arrives is late.
    """
    hour_end = (ts_ms // HOUR_MS + 1) * HOUR_MS
    if hour_end + settings.hour_retention_ms <= arrival_ms:
        return Reason.LATE_EVENT
    if ts_ms - arrival_ms > settings.max_clock_skew_ms:
        return Reason.FUTURE_TIME
    return None
