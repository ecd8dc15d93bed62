"""Windows: which minutes a rolling window covers. No I/O.

A window of length L ending at instant ``at`` covers the minutes (at - L, at]
at minute resolution: the L / 1 min minute buckets whose last is the minute
containing ``at``. An event counts in it when its minute is one of those.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

from tally.core import instants
from tally.core.buckets import MAX_EPOCH_MS, iso_minute
from tally.core.instants import InvalidInstant
from tally.core.settings import DAY_MS, HOUR_MS, MINUTE_MS

DEFAULT_LENGTH_MS = DAY_MS
_DURATION = re.compile(r"^\s*(\d+)\s*([mhd])\s*$")
_UNITS = {"m": MINUTE_MS, "h": HOUR_MS, "d": DAY_MS}


class InvalidWindow(ValueError):
    """A window tally cannot answer as asked."""


@dataclass(frozen=True)
class Window:
    """Minutes ``first_minute`` to ``last_minute``, both included (minutes since the epoch)."""

    first_minute: int
    last_minute: int

    @classmethod
    def ending(cls, at_ms: int, length_ms: int = DEFAULT_LENGTH_MS) -> Window:
        if length_ms <= 0 or length_ms % MINUTE_MS:
            raise InvalidWindow(f"window length must be a positive whole number of minutes, got {length_ms} ms")
        if at_ms < 0:
            raise InvalidWindow("window end is before the epoch")
        last = at_ms // MINUTE_MS
        if (last + 1) * MINUTE_MS >= MAX_EPOCH_MS:
            raise InvalidWindow("window ends after the year 9999")
        first = last - length_ms // MINUTE_MS + 1
        if first < 0:
            raise InvalidWindow("window starts before the epoch")
        return cls(first, last)

    @property
    def minutes(self) -> int:
        return self.last_minute - self.first_minute + 1

    @property
    def start_ms(self) -> int:
        """First instant covered."""
        return self.first_minute * MINUTE_MS

    @property
    def end_ms(self) -> int:
        """First instant after the window."""
        return (self.last_minute + 1) * MINUTE_MS

    def covers(self, event_ms: int) -> bool:
        return self.first_minute <= event_ms // MINUTE_MS <= self.last_minute

    def __str__(self) -> str:
        return f"[{iso_minute(self.start_ms)}, {iso_minute(self.end_ms)})"


def parse_length(text: str) -> int:
    """'24h', '90m', '7d' -> milliseconds."""
    match = _DURATION.match(text)
    if not match:
        raise InvalidWindow(f"window length must look like 90m, 24h or 7d, got {text!r}")
    if int(match.group(1)) == 0:
        raise InvalidWindow(f"window length must be at least a minute, got {text!r}")
    return int(match.group(1)) * _UNITS[match.group(2)]


def parse_instant(text: str) -> int:
    """A window end as people type it, epoch seconds or ISO-8601 with a UTC offset (``instants``) -> epoch ms."""
    try:
        return instants.parse_instant(text)
    except InvalidInstant as error:
        raise InvalidWindow(str(error)) from None


def now_ms() -> int:
    return int(datetime.now(UTC).timestamp() * 1000)
