"""Instants as people type them: epoch seconds, or ISO-8601 with a UTC offset. No I/O.

One parser for every instant a person gives tally (a query's or an audit's
--at, the generator's --end/--start, TALLY_COUNT_FROM and countFrom, the
backfill's --count-from), so that what one accepts, the others accept too.
An event time inside an item is another matter: a number there is epoch
milliseconds (``buckets.parse_event_time``), which shares the ISO-8601 half.
"""

from __future__ import annotations

from datetime import UTC, datetime

# Year 10000 does not fit the fixed-width bucket keys; nothing at or after it is an instant tally names.
MAX_EPOCH_MS = 253_402_300_800_000
FORMS = "epoch seconds or ISO-8601 with a UTC offset (2026-11-23T10:00Z)"


class InvalidInstant(ValueError):
    """Text that names no instant tally can use."""


def parse_instant(text: str) -> int:
    """Epoch milliseconds of ``text``: digits are epoch seconds, anything else ISO-8601 with a UTC offset."""
    raw = str(text).strip()
    if raw.isascii() and raw.isdigit():
        if int(raw) * 1000 >= MAX_EPOCH_MS:
            raise InvalidInstant(f"{raw} seconds since the epoch is after the year 9999 (epoch seconds, not milliseconds?)")
        return int(raw) * 1000
    try:
        return iso_ms(raw)
    except InvalidInstant as error:
        raise InvalidInstant(f"must be {FORMS}: {error}") from None


def whole_second_ms(text: str) -> int:
    """``parse_instant``, refusing an instant that is not a whole second (count-from instants, a rule's
    countFrom and retiredAt: they are compared with arrivals, which are whole seconds)."""
    raw = str(text).strip()
    instant_ms = parse_instant(raw)
    if instant_ms % 1000:
        raise InvalidInstant(f"must be a whole second, got {raw!r}")
    return instant_ms


def iso_ms(text: str) -> int:
    """Epoch milliseconds of an ISO-8601 instant with a UTC offset (``Z`` or ``+hh:mm``), in range."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidInstant(f"not an ISO-8601 time: {text[:64]!r}") from None
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise InvalidInstant(f"ISO-8601 time without a UTC offset: {text[:64]!r}")
    try:
        delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    except OverflowError:
        raise InvalidInstant(f"time out of range: {text[:64]!r}") from None
    return in_range((delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000)


def in_range(ms: int) -> int:
    if ms < 0:
        raise InvalidInstant("before the epoch")
    if ms >= MAX_EPOCH_MS:
        raise InvalidInstant("after the year 9999")
    return ms
