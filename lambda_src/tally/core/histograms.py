"""Values -> log-scale bins -> quantiles: the distribution a histogram rule keeps in every bucket. No I/O.

Bin ``i`` holds the values whose magnitude lies in (γ^(i-1), γ^i], γ = 1.02
(DDSketch's logarithmic mapping). Its representative 2·γ^i / (γ + 1) lies
within (γ - 1) / (γ + 1) = 1/101 ≈ 0.99 % of every value in the bin, so a
quantile read from the bins is within RELATIVE_ACCURACY (1 %) of the true one,
also after rounding it to SIGNIFICANT_DIGITS.

Bins count values, so they add exactly like counts: an hour's bins are the sum
of its minutes' bins, and a window's bins are the same signed sum of bucket
bins as its count (``hour - minutes`` included). Each bin is one number
attribute of the bucket item, added with ``ADD`` beside the count, and named
as briefly as DynamoDB allows, because names count in item size and so in
write units: ``+`` (positive values) or ``-`` (negative ones) followed by the
bin's index in two base-62 digits, and ``0`` for the zero bin.

Which values a histogram takes: zero (its own bin, answered exactly), and
numbers whose magnitude lies in [MIN_MAGNITUDE, MAX_MAGNITUDE), positive or
negative (mirrored bins). Anything else (other magnitudes, non-numbers) is
refused by the rule as ``invalid_histogram``, so the event is not counted
under that counter: its count and its bins keep saying the same n.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from decimal import ROUND_CEILING, ROUND_FLOOR, ROUND_HALF_EVEN, Context, Decimal, InvalidOperation

GAMMA = 1.02
RELATIVE_ACCURACY = Decimal("0.01")  # what is promised; the bins alone give 1/101
SIGNIFICANT_DIGITS = 6  # of quantiles and bounds as reported: adds at most 5e-6 relative
MIN_MAGNITUDE = Decimal("1e-9")
MAX_MAGNITUDE = Decimal("1e18")  # exclusive, as for sums (amounts.py)
ZERO_BIN = "0"
POSITIVE, NEGATIVE = "+", "-"

_DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_LOG_GAMMA = math.log(GAMMA)
# Bin indexes of the accepted magnitudes run from -1046 (1e-9) to 2093 (just under 1e18);
# stored as index + _OFFSET in two base-62 digits (0 to 3843).
_OFFSET = 1100
_CODE_RANGE = len(_DIGITS) ** 2
_NAMES = tuple(_DIGITS[code // len(_DIGITS)] + _DIGITS[code % len(_DIGITS)] for code in range(_CODE_RANGE))
_CODES = {name: code for code, name in enumerate(_NAMES)}
_NEAREST = Context(prec=SIGNIFICANT_DIGITS, rounding=ROUND_HALF_EVEN)
_DOWN = Context(prec=SIGNIFICANT_DIGITS, rounding=ROUND_FLOOR)
_UP = Context(prec=SIGNIFICANT_DIGITS, rounding=ROUND_CEILING)
_EXACT = Context(prec=60)
_GAMMA = Decimal("1.02")


class InvalidValue(ValueError):
    """A value a histogram cannot take; the message says why."""


class InvalidQuantile(ValueError):
    """A quantile that is not a number from 0 to 1."""


def bin_of(value: object) -> str:
    """The name of the bin ``value`` (a DynamoDB number as boto3 decodes it) falls in."""
    if isinstance(value, bool) or not isinstance(value, int | Decimal):
        raise InvalidValue(f"not a number: {type(value).__name__}")
    if not value:
        return ZERO_BIN
    magnitude = Decimal(value).copy_abs()  # exact: abs() would round to the context's 28 digits
    if not magnitude.is_finite():
        raise InvalidValue("not a finite number")
    if magnitude < MIN_MAGNITUDE or magnitude >= MAX_MAGNITUDE:
        raise InvalidValue(f"magnitude outside [{MIN_MAGNITUDE}, {MAX_MAGNITUDE:.0E}) and not 0")
    index = math.ceil(math.log(float(magnitude)) / _LOG_GAMMA)
    # A float logarithm may land one bin off at an edge: the exact edges decide, on every platform alike.
    if magnitude > _edge(index):
        index += 1
    elif magnitude <= _edge(index - 1):
        index -= 1
    return (POSITIVE if value > 0 else NEGATIVE) + _NAMES[index + _OFFSET]


@cache
def _edge(index: int) -> Decimal:
    """γ^index, exact to 60 digits (DynamoDB numbers have at most 38)."""
    return _EXACT.power(_GAMMA, index)


def is_bin(name: str) -> bool:
    """Whether an attribute of a bucket item is a histogram bin."""
    return name == ZERO_BIN or (len(name) == 3 and name[0] in "+-" and name[1:] in _CODES)


# A late mark's bins (core/ladder.py) ride on the same item: the bin's name after this letter.
LATE_BIN_PREFIX = "L"


def late_bin(name: str) -> str:
    """The attribute holding what late records added to bin ``name`` of an item."""
    return LATE_BIN_PREFIX + name


def is_late_bin(name: str) -> bool:
    return name.startswith(LATE_BIN_PREFIX) and is_bin(name[1:])


def _index(name: str) -> int:
    return _CODES[name[1:]] - _OFFSET


def _order(name: str) -> tuple[int, int]:
    """Bins in value order: the most negative first, then zero, then positive values upwards."""
    if name == ZERO_BIN:
        return (0, 0)
    index = _index(name)
    return (1, index) if name[0] == POSITIVE else (-1, -index)


def _edges(name: str) -> tuple[Decimal, Decimal]:
    """The bin's lowest and highest value (open at the edge nearer zero)."""
    if name == ZERO_BIN:
        return (Decimal(0), Decimal(0))
    index = _index(name)
    inner, outer = _edge(index - 1), _edge(index)
    return (inner, outer) if name[0] == POSITIVE else (outer.copy_negate(), inner.copy_negate())


def _representative(name: str) -> Decimal:
    """2·γ^i / (γ + 1), signed, to SIGNIFICANT_DIGITS: computed in decimals, so no float noise shows."""
    if name == ZERO_BIN:
        return Decimal(0)
    magnitude = _EXACT.divide(_EXACT.multiply(2, _edge(_index(name))), _GAMMA + 1)
    return _plain(_NEAREST.plus(magnitude if name[0] == POSITIVE else magnitude.copy_negate()))


def _plain(number: Decimal) -> Decimal:
    """Without trailing zeros, and 0 without an exponent."""
    return number.normalize() if number else Decimal(0)


def parse_quantile(text: str) -> Decimal:
    """A quantile as a user writes it (``0.99``); InvalidQuantile unless a number from 0 to 1."""
    try:
        q = Decimal(text.strip())
    except InvalidOperation:
        raise InvalidQuantile(f"quantile {text!r} is not a number") from None
    if not q.is_finite() or not 0 <= q <= 1:
        raise InvalidQuantile(f"quantile {text!r} is not from 0 to 1")
    return q


def percentile_label(q: str) -> str:
    """How people name a quantile: 0.99 -> p99, 0.999 -> p99.9, 1 -> p100."""
    return "p" + format(_plain(parse_quantile(q) * 100), "f")


@dataclass(frozen=True)
class Histogram:
    """How many values of a window (or bucket) fell in each bin, by bin name.

    ``bins`` may come from a signed sum of buckets; a bin whose sum is not
    positive holds no value.
    """

    bins: Mapping[str, int]

    def __post_init__(self) -> None:
        # Kept in value order, for ranks and bounds.
        ordered = {name: self.bins[name] for name in sorted((n for n in self.bins if self.bins[n] > 0), key=_order)}
        object.__setattr__(self, "bins", ordered)

    @property
    def total(self) -> int:
        """n: the number of values."""
        return sum(self.bins.values())

    def quantile(self, q: Decimal | str | float) -> Decimal | None:
        """The value of rank ⌈q·n⌉ (rank 1 for q = 0), within 1 % of it; None for no values."""
        q = parse_quantile(str(q)) if not isinstance(q, Decimal) else q
        if not 0 <= q <= 1:
            raise InvalidQuantile(f"quantile {q} is not from 0 to 1")
        total = self.total
        if not total:
            return None
        rank = max(1, int(_EXACT.multiply(q, Decimal(total)).to_integral_value(rounding=ROUND_CEILING)))
        seen = 0
        for name, count in self.bins.items():
            seen += count
            if seen >= rank:
                return _representative(name)
        raise AssertionError("rank beyond the histogram's total")  # pragma: no cover - rank <= total

    def quantiles(self, qs: Iterable[Decimal]) -> list[Decimal | None]:
        return [self.quantile(q) for q in qs]

    @property
    def low(self) -> Decimal | None:
        """The lower edge of the lowest bin seen, rounded down: no value of the window is smaller."""
        if not self.bins:
            return None
        return _plain(_DOWN.plus(_edges(next(iter(self.bins)))[0]))

    @property
    def high(self) -> Decimal | None:
        """The upper edge of the highest bin seen, rounded up: no value of the window is larger."""
        if not self.bins:
            return None
        return _plain(_UP.plus(_edges(next(reversed(self.bins)))[1]))


def signed_sum(terms: Iterable[tuple[int, Mapping[str, int]]]) -> dict[str, int]:
    """Bins of (sign, bins) terms added up, as counts are: a plan's ``hour - minutes`` subtracts exactly."""
    total: dict[str, int] = {}
    for sign, bins in terms:
        for name, count in bins.items():
            total[name] = total.get(name, 0) + sign * count
    return total
