"""Windows: which minutes a rolling window covers. No I/O.

A window of length L ending at instant ``at`` covers whole minutes: its last
minute is the one containing ``at - 1 ms``, and it covers the L / 1 min
minutes ending there. So an end exactly on a minute boundary is exclusive
(``at`` = 10:00:00.000 with L = 1 h covers [09:00, 10:00)), and an end inside
a minute includes that minute (a window ending now includes the current
minute). An event counts in the window when its minute is one of those.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from tally.core import instants
from tally.core.buckets import iso_minute
from tally.core.instants import MAX_EPOCH_MS, InvalidInstant
from tally.core.units import DAY_MS, HOUR_MS, MINUTE_MS

DEFAULT_LENGTH_MS = DAY_MS
_DURATION = re.compile(r"^\s*(?:(\d+)\s*d)?\s*(?:(\d+)\s*h)?\s*(?:(\d+)\s*m)?\s*$")
LENGTH_EXAMPLES = "90m, 24h, 7d or 1d12h"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class QueryError(ValueError):
    """A read tally cannot answer as asked; the message says how to ask instead."""


class ParameterRefused(QueryError):
    """A read refused for one of its parameters, which ``parameter`` names (as the HTTP API spells it)."""

    def __init__(self, message: str, parameter: str) -> None:
        super().__init__(message)
        self.parameter = parameter


class InvalidWindow(QueryError):
    """A window that cannot exist: its length or end is not usable."""


@dataclass(frozen=True)
class Window:
    """Minutes ``first_minute`` to ``last_minute``, both included (minutes since the epoch)."""

    first_minute: int
    last_minute: int

    @classmethod
    def ending(cls, at_ms: int, length_ms: int = DEFAULT_LENGTH_MS) -> Window:
        """The window of ``length_ms`` whose last minute contains ``at_ms - 1``: an end on a boundary is exclusive."""
        if length_ms <= 0 or length_ms % MINUTE_MS:
            raise InvalidWindow(
                f"window length must be a positive whole number of minutes ({LENGTH_EXAMPLES}), got {length_ms} ms"
            )
        if at_ms <= 0:
            raise InvalidWindow("window end must be after 1970-01-01T00:00Z")
        last = (at_ms - 1) // MINUTE_MS
        if (last + 1) * MINUTE_MS >= MAX_EPOCH_MS:
            raise InvalidWindow("window end must be before the year 9999 ends")
        first = last - length_ms // MINUTE_MS + 1
        if first < 0:
            raise InvalidWindow("window must not start before 1970-01-01T00:00Z: shorten it or end it later")
        return cls(first, last)

    @classmethod
    def between(cls, start_ms: int, end_ms: int) -> Window:
        """The minutes from the one containing ``start_ms`` to the last one before ``end_ms``."""
        return cls(start_ms // MINUTE_MS, (end_ms - 1) // MINUTE_MS)

    @property
    def minutes(self) -> int:
        return self.last_minute - self.first_minute + 1

    @property
    def length_ms(self) -> int:
        return self.minutes * MINUTE_MS

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
    """'24h', '90m', '7d', '1d12h' -> milliseconds."""
    match = _DURATION.match(text) if isinstance(text, str) else None
    if not match or not any(match.groups()):
        raise InvalidWindow(f"window length must look like {LENGTH_EXAMPLES} (units m, h, d), got {text!r}")
    days, hours, minutes = (int(part or 0) for part in match.groups())
    length_ms = days * DAY_MS + hours * HOUR_MS + minutes * MINUTE_MS
    if not length_ms:
        raise InvalidWindow(f"window length must be at least a minute, got {text!r}")
    if length_ms >= MAX_EPOCH_MS:
        raise InvalidWindow(f"window length {text!r} is longer than any window tally can hold")
    return length_ms


def length_ms_of(window: timedelta | str) -> int:
    """A window length given as a timedelta or as text ('24h') -> milliseconds: positive, whole minutes."""
    if isinstance(window, str):
        return parse_length(window)
    if not isinstance(window, timedelta):
        raise InvalidWindow(f"window length must be a timedelta or text like {LENGTH_EXAMPLES}, got {window!r}")
    if window <= timedelta(0):
        raise InvalidWindow(f"window length must be positive, got {window}: e.g. timedelta(hours=24)")
    if window % timedelta(minutes=1):
        raise InvalidWindow(f"window length must be a whole number of minutes, got {window}")
    if window >= timedelta(milliseconds=MAX_EPOCH_MS):
        raise InvalidWindow(f"window length {window} is longer than any window tally can hold")
    return window // timedelta(milliseconds=1)


def parse_instant(text: str) -> int:
    """A window end as people type it, epoch seconds or ISO-8601 with a UTC offset (``instants``) -> epoch ms."""
    try:
        return instants.parse_instant(text)
    except InvalidInstant as error:
        raise InvalidWindow(str(error)) from None


def instant_of(at: datetime | str) -> datetime:
    """A window end given as an aware datetime or as text (``parse_instant``) -> an aware UTC datetime."""
    if isinstance(at, str):
        ms = parse_instant(at)
        text = at.strip()
        return utc_of(ms) if text.isdigit() else datetime.fromisoformat(text).astimezone(UTC)
    if not isinstance(at, datetime):
        raise InvalidWindow(f"window end must be an aware datetime or ISO-8601 text, got {at!r}")
    if at.tzinfo is None or at.utcoffset() is None:
        raise InvalidWindow(
            f"window end {at.isoformat()} has no time zone: pass an aware datetime, e.g. datetime.now(UTC) "
            "or dt.replace(tzinfo=UTC)"
        )
    return at.astimezone(UTC)


def end_ms_of(at: datetime) -> int:
    """Epoch ms of a window end, rounded up: an end a microsecond into a minute includes that minute."""
    delta = at - _EPOCH
    ms = -(-((delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds) // 1000)
    if not 0 < ms < MAX_EPOCH_MS:
        raise InvalidWindow(f"window end {at.isoformat()} is outside 1970-01-01 .. 9999-12-31")
    return ms


def utc_of(ms: int) -> datetime:
    """Epoch ms -> aware UTC datetime."""
    return _EPOCH + timedelta(milliseconds=ms)


def now_ms() -> int:
    return int(datetime.now(UTC).timestamp() * 1000)
