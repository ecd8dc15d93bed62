"""The published figures (bench/results.json): every run writes what it measured there, and names what regressed.

A figure from an old run cannot stand beside new code: each run replaces the
figures it measured (a part alone replaces only its own), and before it does,
compares them with those published. A figure that got more than
``REGRESSION`` worse is named, with both values. Which way is worse is read
from the figure's name: rates, speed-ups and ratios of another design's cost
to tally's are better higher; times, latencies, requests, units and ratios
to the floor are better lower. Figures of the other designs themselves (the
origin's, the deduplicating design's), the requests a load test made in a
set time (its rate is judged), and figures with neither kind of name (counts
of what a workload holds, settings, ratios of two plans) are not judged.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

REGRESSION = 0.20
_HIGHER = ("_per_second", "speed_up", "_over_plain")
# Another design's cost over tally's (origin_over_tally, origin_units_over_tally_units, origin_over_batch, ...).
_OTHER_OVER_TALLY = ("origin_over_", "origin_units_over_", "dedup_over_", "dedup_units_over_")
_LOWER = ("_seconds", "_ms", "_units", "requests", "_over_floor", "_over_floor_units", "_bytes")
_OTHER_DESIGNS = ("origin_", "dedup_")
# Keys whose value names an entry of a list, so that entries are matched by what they are, not where they stand.
_NAMES = ("workload", "aggregate", "way", "part", "shards", "counters", "zone", "case", "name")


@dataclass(frozen=True)
class Regression:
    figure: str  # where it is: keys and entry names, dotted
    published: float
    measured: float

    def __str__(self) -> str:
        change = (self.measured - self.published) / self.published * 100
        return f"{self.figure}: {self.published:,} published, {self.measured:,} now ({change:+.0f} %)"


def better_higher(key: str, beside: dict[str, Any] | None = None) -> bool | None:
    """True where a larger figure is better, False where a smaller one is, None for a figure not judged.
    ``beside``: the figures next to it (the requests a load test made are judged by their rate beside them)."""
    if key.startswith(_OTHER_OVER_TALLY) or key.endswith(_HIGHER):
        return True
    if key.startswith(_OTHER_DESIGNS) or (key == "requests" and beside and "requests_per_second" in beside):
        return None
    if key.endswith(_LOWER):
        return False
    return None


def regressions(published: Any, measured: Any, where: str = "") -> Iterator[Regression]:
    """Figures of ``measured`` more than REGRESSION worse than the same figures of ``published``."""
    if isinstance(published, dict) and isinstance(measured, dict):
        for key in published.keys() & measured.keys():
            old, new = published[key], measured[key]
            place = f"{where}.{key}" if where else key
            if isinstance(old, (dict, list)):
                yield from regressions(old, new, place)
            elif _number(old) and _number(new) and old > 0:
                higher = better_higher(key, published)
                if higher is True and new < old * (1 - REGRESSION) or higher is False and new > old * (1 + REGRESSION):
                    yield Regression(place, old, new)
    elif isinstance(published, list) and isinstance(measured, list):
        old_entries, new_entries = _named(published), _named(measured)
        for name in old_entries.keys() & new_entries.keys():
            yield from regressions(old_entries[name], new_entries[name], f"{where}[{name}]")


def named_regressions(published: dict[str, Any], measured: dict[str, Any]) -> list[Regression]:
    """``regressions`` in the order of their names, for the bench's output."""
    return sorted(regressions(published, measured), key=lambda regression: regression.figure)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _named(entries: list[Any]) -> dict[str, Any]:
    """A list's entries by name (its first naming key and value, with the rest where they repeat), or index."""
    named: dict[str, Any] = {}
    for index, entry in enumerate(entries):
        name = str(index)
        if isinstance(entry, dict):
            keys = [key for key in _NAMES if key in entry and not isinstance(entry[key], (dict, list))]
            if keys:
                name = ",".join(f"{key}={entry[key]}" for key in keys)
        named.setdefault(name, entry)
    return named
